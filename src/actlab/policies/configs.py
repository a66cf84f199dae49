"""Policy configs: frozen dataclasses validated before anything is allocated (no torch here).

``ACTConfig`` defaults are LeRobot's ACT defaults (``lerobot/policies/act/configuration_act.py``: chunk_size
100, n_action_steps 100, resnet18, dim_model 512, n_heads 8, dim_feedforward 3200, 4 encoder layers,
1 decoder layer, VAE with latent_dim 32 and kl_weight 10, dropout 0.1). ``ACTRelativeConfig`` adds relative
actions, an optional state delta and real-time-chunking prefix conditioning (Black et al. 2025, "Real-Time
Execution of Action Chunking Flow Policies", in its training-time form; see ``act_relative``).
The ``type`` field names the registry entry and is written into ``config.json`` of a bundle.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from actlab.errors import ActlabError
from actlab.policies.contract import FEATURES_SUFFIX, FUTURE_STATE, PAST_CHUNKS
from actlab.utils.config import did_you_mean

RESNETS = ("resnet18", "resnet34")
# Pretrained ViT encoders through Hugging Face transformers (the optional extra `actlab[vit]`).
VIT_BACKBONES = ("clip_vit", "siglip_vit", "dinov2_vit")
BACKBONES = (*RESNETS, "cnn_small", *VIT_BACKBONES)
# Weights a ViT backbone loads when pretrained_backbone_weights is "imagenet" (the field's default, kept
# for the ResNets): the smallest common checkpoint of each family on the Hugging Face hub.
VIT_DEFAULT_WEIGHTS = {
    "clip_vit": "openai/clip-vit-base-patch32",
    "siglip_vit": "google/siglip-base-patch16-224",
    "dinov2_vit": "facebook/dinov2-small",
}
VIT_FEATURES = ("tokens", "pooled")
CAMERA_FUSIONS = ("tokens", "mean", "concat_mlp", "gated")
ACTIVATIONS = ("relu", "gelu")
IMAGE_NORMS = ("imagenet", "dataset")
DECODER_INPUTS = ("queries", "zeros")


def _check(ok: bool, cls: str, field: str, expected: str, found: object, fix: str | None = None) -> None:
    if not ok:
        raise ActlabError(
            f"invalid {cls} value for {field}", field=field, expected=expected, found=found, fix=fix
        )


# The largest value of a numeric field of a policy config: what one machine of ours can hold (dim_model
# 8192 with 64 layers is several GB of weights before the optimizer's two copies) or run; every other
# number has _CEILING. A larger one (--set dim_model=1e12, or an edited config.json) was accepted and
# failed in the allocator.
_CEILING = 1e9
_CEILINGS: dict[str, float] = {
    "dim_model": 8192,
    "dim_feedforward": 65536,
    "n_heads": 256,
    "n_encoder_layers": 64,
    "n_decoder_layers": 64,
    "n_vae_encoder_layers": 64,
    "latent_dim": 8192,
    "chunk_size": 10000,
    "n_action_steps": 10000,
    "n_obs_steps": 100,
    "cnn_small_max_grid": 1024,
    "downscale_img_square": 4096,
    "rtc_max_delay": 10000,
    "obs_state_delta_frames": 10000,
    "correction_hidden_dim": 8192,
}


def _check_numbers(cfg: Any) -> None:
    """Every number of a policy config (items of tuples too) is finite and at most its ceiling: ``inf``
    passes range checks such as ``kl_weight >= 0``, and no field means anything by it."""
    name = type(cfg).__name__
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        items = value if isinstance(value, (tuple, list)) else (value,)
        ceiling = _CEILINGS.get(f.name, _CEILING)
        for v in items:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            _check(v == v and abs(v) != float("inf"), name, f.name, "a finite number", value)
            _check(v <= ceiling, name, f.name, f"<= {ceiling:g} (more than one machine can hold)", value)


@dataclasses.dataclass(frozen=True)
class ACTConfig:
    """ACT (Zhao et al. 2023) with LeRobot's defaults; every layer that is built is used."""

    TYPE: ClassVar[str] = "act"
    # where a refused --set key's fix sends the user (utils.config.keys_help): every command that sets a
    # bare policy config (policy info, policy bench) has no --help-config of its own
    KEYS_HELP: ClassVar[str] = (
        "the expected line above lists every key; `actlab train --help-config` says what each means (as "
        "policy.KEY)"
    )

    # registry name of the policy; "act" for this class (written to config.json)
    type: str = "act"

    # --- inputs ---
    # camera feature keys to use (e.g. "observation.images.top"); empty uses every camera in the features
    cameras: tuple[str, ...] = ()

    # --- action chunking ---
    # number of future actions predicted per query (H)
    chunk_size: int = 100
    # actions of a chunk executed by select_action before querying again (<= chunk_size)
    n_action_steps: int = 100
    # temporal ensembling weight exp(-coeff * i) over past chunks (ACT paper: 0.01); needs n_action_steps == 1
    temporal_ensemble_coeff: float | None = None

    # --- vision ---
    # image encoder: "resnet18" / "resnet34" (torchvision names, frozen BatchNorm), "cnn_small" (fast), or
    # a pretrained ViT through transformers (extra `actlab[vit]`): "clip_vit", "siglip_vit", "dinov2_vit"
    vision_backbone: str = "resnet18"
    # ResNets: "imagenet" (torchvision's weights via torch.hub, internet once) or null; cnn_small: null;
    # ViTs: a hub id (e.g. openai/clip-vit-base-patch32) or a local directory of a save_pretrained model,
    # "imagenet" meaning the family's default id (VIT_DEFAULT_WEIGHTS), or null (random, vit_config's size)
    pretrained_backbone_weights: str | None = "imagenet"
    # ViTs: transformers vision-config fields (hidden_size, num_hidden_layers, patch_size, image_size, ...)
    # over the family's default config (ViT-B/32 CLIP, ViT-B/16 SigLIP, ViT-S/14 DINOv2) when there are no
    # weights; filled from the weights' config when the policy is built, so a bundle rebuilds offline
    vit_config: dict[str, Any] | None = None
    # ViTs: "tokens" (the patch-token grid, CLS / register tokens dropped) or "pooled" (one embedding per
    # frame: the model's pooler output)
    vit_features: str = "tokens"
    # cnn_small only: feature maps larger than this per side are average-pooled to it (fewer image tokens:
    # 8 -> 5 made a d=128 CPU training step 1.6-4.4x faster, docs/benchmarks.md)
    cnn_small_max_grid: int = 8
    # cnn_small only: output channels of its 3x3 convs (strides 2, 2, 2, then 1); narrower is faster on CPU
    cnn_small_channels: tuple[int, ...] = (32, 64, 128, 128)
    # freeze the backbone: no gradients; a trainer may then pass cached "<camera>.features" instead.
    # null (default): frozen for the ViT backbones, trained for the others (resolved when the config is
    # built; `--set policy.vision_backbone=...` resolves it again, see training.config)
    freeze_backbone: bool | None = None
    # how camera features become encoder tokens (docs/policies.md "Camera fusion"): "tokens" (every
    # camera's tokens side by side), "mean" (average over cameras per grid position), "concat_mlp" (channels
    # of all cameras concatenated per position, then a 2-layer MLP), "gated" (learned softmax gates)
    camera_fusion: str = "tokens"
    # observations of context: the last K frames of state and images (offsets -(K-1)..0, clamped to the
    # episode's first frame as LeRobot pads); 1 = the current frame only
    n_obs_steps: int = 1
    # resize every camera image to this square size (pixels) before the backbone; null keeps it
    downscale_img_square: int | None = None
    # image normalization after /255: "imagenet" mean/std, or "dataset" per-channel stats (std floored)
    image_norm: str = "imagenet"
    # lower bound for per-channel image std with image_norm="dataset" (a warning names floored channels)
    image_std_floor: float = 0.05

    # --- transformer ---
    # normalize before attention/FFN (pre-LN) instead of after (post-LN, ACT's default)
    pre_norm: bool = False
    # transformer width (must be divisible by n_heads and by 4 for the 2-D sinusoidal positions)
    dim_model: int = 512
    # attention heads
    n_heads: int = 8
    # feed-forward hidden width
    dim_feedforward: int = 3200
    # feed-forward activation: "relu" (ACT) or "gelu"
    feedforward_activation: str = "relu"
    # transformer encoder layers over [latent, state, image tokens]
    n_encoder_layers: int = 4
    # DETR-style decoder layers (all applied; the original ACT code built 7 and used only the first)
    n_decoder_layers: int = 1
    # content of the decoder's input: "queries" (the learned queries, also its positions; every decoder
    # weight learns) or "zeros" (DETR / ACT / LeRobot: exact LeRobot parity, needed to export to or import
    # from LeRobot; the first self-attention's q/k/v projections then never receive a gradient)
    decoder_input: str = "queries"
    # dropout in attention, feed-forward and residual branches
    dropout: float = 0.1

    # --- CVAE ---
    # train with the CVAE encoder over [cls, state, action chunk]; the latent is 0 at inference
    use_vae: bool = True
    # size of the CVAE latent
    latent_dim: int = 32
    # transformer layers of the CVAE encoder
    n_vae_encoder_layers: int = 4
    # weight of the KL term in the loss (L1 + kl_weight * KL)
    kl_weight: float = 10.0

    # --- correction head (actlab eval --execution correct; policies/correction.py) ---
    # a small per-step MLP that corrects the executing chunk's action from the newest state (A2C2, arXiv
    # 2509.23224), trained with the policy on its own loss (the chunk's training is unchanged)
    correction_head: bool = False
    # hidden width of the correction head's MLP
    correction_hidden_dim: int = 128
    # the head also reads the newest camera frames (through the policy's backbone, as spatial keypoints):
    # what moved in the images since the chunk's observation, not only the arm. Trained with correction_only
    correction_images: bool = False
    # the cameras that head reads (keys of the policy's cameras; empty: all of them). Which ones help is
    # the policy's: on the moving task ACT's head needs the wrist camera (without it: 101 of 200 at 267 ms
    # against 176), and act_relative's holds better without it (169 at 133 ms against 141; with it the
    # head costs 17 points at no delay: the wrist camera moves with the corrected arm). docs/evaluation.md
    correction_cameras: tuple[str, ...] = ()
    # train the correction head alone on the --init-from policy, every other weight frozen (A2C2's recipe):
    # each sample's chunk is the one the frozen policy planned k frames earlier, as at inference under delay
    correction_only: bool = False

    # --- normalization ---
    # state/action/relative/delta dims whose std is at or below this never moved in the data: they are
    # centred, not scaled (std 1), so a deviation at deployment cannot blow up (a warning names them)
    std_floor: float = 1e-3

    def __post_init__(self) -> None:
        name = type(self).__name__
        _check_numbers(self)
        _check(
            self.type == self.TYPE,
            name,
            "type",
            repr(self.TYPE),
            self.type,
            "use the config class registered for that type (actlab.policies.get_config_class)",
        )
        _check(self.chunk_size >= 1, name, "chunk_size", ">= 1", self.chunk_size)
        _check(
            1 <= self.n_action_steps <= self.chunk_size,
            name,
            "n_action_steps",
            f"1 <= n_action_steps <= chunk_size ({self.chunk_size})",
            self.n_action_steps,
            "set n_action_steps too (overrides apply in order: n_action_steps before a smaller chunk_size)",
        )
        if self.temporal_ensemble_coeff is not None:
            _check(
                self.n_action_steps == 1,
                name,
                "n_action_steps",
                "1 when temporal_ensemble_coeff is set (a chunk is predicted every step)",
                self.n_action_steps,
                "set n_action_steps=1 or temporal_ensemble_coeff=null",
            )
        _check(
            self.vision_backbone in BACKBONES,
            name,
            "vision_backbone",
            "one of " + ", ".join(BACKBONES),
            f"{self.vision_backbone!r}{did_you_mean(self.vision_backbone, BACKBONES)}",
        )
        self._check_vision(name)
        min_px = 8 if self.vision_backbone == "cnn_small" else 32
        _check(
            self.downscale_img_square is None or self.downscale_img_square >= min_px,
            name,
            "downscale_img_square",
            f">= {min_px} for {self.vision_backbone}, or null",
            self.downscale_img_square,
        )
        _check(
            self.image_norm in IMAGE_NORMS,
            name,
            "image_norm",
            "one of " + ", ".join(IMAGE_NORMS),
            self.image_norm,
        )
        _check(self.image_std_floor > 0, name, "image_std_floor", "> 0", self.image_std_floor)
        _check(self.cnn_small_max_grid >= 1, name, "cnn_small_max_grid", ">= 1", self.cnn_small_max_grid)
        _check(
            1 <= len(self.cnn_small_channels) <= 6 and all(c >= 4 for c in self.cnn_small_channels),
            name,
            "cnn_small_channels",
            "1 to 6 channel counts, each >= 4",
            self.cnn_small_channels,
        )
        _check(
            self.dim_model >= 4 and self.dim_model % 4 == 0,
            name,
            "dim_model",
            "a multiple of 4",
            self.dim_model,
        )
        _check(self.n_heads >= 1, name, "n_heads", ">= 1", self.n_heads)
        _check(
            self.dim_model % self.n_heads == 0,
            name,
            "n_heads",
            f"a divisor of dim_model ({self.dim_model})",
            self.n_heads,
        )
        _check(self.dim_feedforward >= 1, name, "dim_feedforward", ">= 1", self.dim_feedforward)
        _check(
            self.feedforward_activation in ACTIVATIONS,
            name,
            "feedforward_activation",
            "one of " + ", ".join(ACTIVATIONS),
            self.feedforward_activation,
        )
        _check(self.n_encoder_layers >= 1, name, "n_encoder_layers", ">= 1", self.n_encoder_layers)
        _check(self.n_decoder_layers >= 1, name, "n_decoder_layers", ">= 1", self.n_decoder_layers)
        _check(
            self.decoder_input in DECODER_INPUTS,
            name,
            "decoder_input",
            "one of " + ", ".join(DECODER_INPUTS),
            self.decoder_input,
        )
        _check(0.0 <= self.dropout < 1.0, name, "dropout", "0 <= dropout < 1", self.dropout)
        _check(self.latent_dim >= 1, name, "latent_dim", ">= 1", self.latent_dim)
        _check(
            self.n_vae_encoder_layers >= 1, name, "n_vae_encoder_layers", ">= 1", self.n_vae_encoder_layers
        )
        _check(self.kl_weight >= 0, name, "kl_weight", ">= 0", self.kl_weight)
        _check(self.std_floor > 0, name, "std_floor", "> 0", self.std_floor)
        _check(
            len(set(self.cameras)) == len(self.cameras),
            name,
            "cameras",
            "no repeated camera keys",
            self.cameras,
        )
        _check(
            self.camera_fusion in CAMERA_FUSIONS,
            name,
            "camera_fusion",
            "one of " + ", ".join(CAMERA_FUSIONS),
            f"{self.camera_fusion!r}{did_you_mean(self.camera_fusion, CAMERA_FUSIONS)}",
        )
        _check(
            isinstance(self.correction_head, bool),
            name,
            "correction_head",
            "true or false",
            self.correction_head,
        )
        _check(
            isinstance(self.correction_hidden_dim, int) and self.correction_hidden_dim >= 1,
            name,
            "correction_hidden_dim",
            "an integer >= 1",
            self.correction_hidden_dim,
        )
        self._check_correction(name)
        _check(
            isinstance(self.n_obs_steps, int) and self.n_obs_steps >= 1,
            name,
            "n_obs_steps",
            "an integer >= 1",
            self.n_obs_steps,
        )

    def _check_correction(self, name: str) -> None:
        for field in ("correction_images", "correction_only"):
            value = getattr(self, field)
            _check(isinstance(value, bool), name, field, "true or false", value)
            _check(
                not value or self.correction_head,
                name,
                field,
                "false without a correction head (correction_head = false)",
                value,
                "add --set policy.correction_head=true",
            )
        # Why: with images the head's training sample needs the chunk planned k frames before it, and the
        # chunk of a policy still training changes every step; frozen, every frame's chunk is computed once.
        _check(
            not self.correction_images or self.correction_only,
            name,
            "correction_images",
            "true only with correction_only = true (the head reads images when trained alone on a trained "
            "policy)",
            self.correction_images,
            "train the policy first, then: actlab train --init-from RUN/checkpoints/step_N --set "
            "policy.correction_only=true --set policy.correction_images=true ...",
        )

        _check(
            isinstance(self.correction_cameras, tuple | list)
            and all(isinstance(c, str) and c for c in self.correction_cameras),
            name,
            "correction_cameras",
            'a list of camera keys (e.g. ["observation.images.top"]), or [] for every camera',
            self.correction_cameras,
        )
        _check(
            not self.correction_cameras or self.correction_images,
            name,
            "correction_cameras",
            "[] unless the head reads images (correction_images = true)",
            list(self.correction_cameras),
            "add --set policy.correction_images=true, or drop policy.correction_cameras",
        )

    def _check_vision(self, name: str) -> None:
        """Backbone weights, ViT options and the frozen default (resolved here to what is really used)."""
        weights = self.pretrained_backbone_weights
        vit = self.vision_backbone in VIT_BACKBONES
        if self.freeze_backbone is None:
            object.__setattr__(self, "freeze_backbone", vit)
        _check(
            isinstance(self.freeze_backbone, bool),
            name,
            "freeze_backbone",
            "true, false or null",
            self.freeze_backbone,
        )
        if self.vision_backbone == "cnn_small" and weights is not None:
            # No pretrained weights exist for cnn_small: record what is really used.
            object.__setattr__(self, "pretrained_backbone_weights", None)
        elif vit:
            if weights == "imagenet":
                # The field's default names ImageNet ResNets; a ViT records the checkpoint it really loads.
                object.__setattr__(
                    self, "pretrained_backbone_weights", VIT_DEFAULT_WEIGHTS[self.vision_backbone]
                )
            _check(
                weights is None or (isinstance(weights, str) and weights.strip() != ""),
                name,
                "pretrained_backbone_weights",
                f"a hub id (e.g. {VIT_DEFAULT_WEIGHTS[self.vision_backbone]}), a local directory, or null",
                weights,
            )
        else:
            _check(
                weights in (None, "imagenet"),
                name,
                "pretrained_backbone_weights",
                f'"imagenet" or null for {self.vision_backbone}',
                weights,
                "hub ids and local directories are for the ViT backbones (" + ", ".join(VIT_BACKBONES) + ")",
            )
        _check(
            self.vit_config is None or (vit and isinstance(self.vit_config, dict)),
            name,
            "vit_config",
            "null, or a mapping of transformers vision-config fields for a ViT backbone",
            self.vit_config,
        )
        _check(
            self.vit_features in VIT_FEATURES,
            name,
            "vit_features",
            "one of " + ", ".join(VIT_FEATURES),
            self.vit_features,
        )

    # ------------------------------------------------------------------------------------------ requests
    def camera_keys(self, features: dict[str, Any]) -> list[str]:
        """The camera keys this config uses, in a fixed order (config order, else sorted feature order)."""
        available = sorted(k for k, v in features.items() if _is_camera(k, v))
        if not self.cameras:
            return available
        for key in self.cameras:
            if key not in available:
                raise ActlabError(
                    f"camera {key!r} is not in the dataset features{did_you_mean(key, available)}",
                    field="cameras",
                    expected="one of " + (", ".join(available) or "(no cameras in the dataset)"),
                    found=key,
                    fix="set cameras to existing keys, or to () for every camera",
                )
        return list(self.cameras)

    def correction_camera_keys(self, camera_keys: list[str]) -> list[str]:
        """The cameras the correction head reads, in the policy's camera order (``correction_cameras``;
        every camera when it is empty); a name the policy does not read is refused."""
        for key in self.correction_cameras:
            if key not in camera_keys:
                raise ActlabError(
                    f"the correction head cannot read camera {key!r}: the policy does not"
                    + did_you_mean(key, camera_keys),
                    field="correction_cameras",
                    expected="some of " + ", ".join(camera_keys),
                    found=key,
                    fix="name cameras of the policy (policy.cameras), or [] for all of them",
                )
        return [k for k in camera_keys if not self.correction_cameras or k in self.correction_cameras]

    def obs_offsets(self) -> list[int]:
        """Frame offsets of the observation context: ``-(K-1) .. 0`` for ``n_obs_steps = K``."""
        return list(range(1 - self.n_obs_steps, 1))

    def state_offsets(self) -> list[int]:
        """Frame offsets of ``observation.state`` the policy reads (0 = the current frame)."""
        return self.obs_offsets()

    def delta_indices(self, camera_keys: list[str]) -> dict[str, list[int]]:
        """Every key the sampler must fetch with its frame offsets (only frames the policy uses)."""
        out: dict[str, list[int]] = {"observation.state": self.state_offsets()}
        for key in camera_keys:
            out[key] = self.obs_offsets()
        out["action"] = list(range(self.chunk_size))
        if self.correction_only:
            # the frozen policy's chunks planned 0 .. H-1 frames before each sample (oldest first): the
            # head's training sample is the newest frame with a chunk as late as inference makes it
            out[PAST_CHUNKS] = list(range(1 - self.chunk_size, 1))
        elif self.correction_head:
            # the state at every step of the chunk: the correction head's training input (never read at
            # inference, where the newest observation is the state)
            out[FUTURE_STATE] = list(range(self.chunk_size))
        return out

    def stats_request(self) -> dict[str, Any]:
        """Keyword arguments for ``actlab.datasets.compute_stats`` (absolute stats only for ACT)."""
        return {"relative_action_horizon": None, "state_delta_frames": None}


@dataclasses.dataclass(frozen=True)
class ACTRelativeConfig(ACTConfig):
    """ACT predicting actions relative to the current state, with state deltas and RTC prefix tokens."""

    TYPE: ClassVar[str] = "act_relative"

    # registry name of the policy; "act_relative" for this class (written to config.json)
    type: str = "act_relative"
    # action dimensions kept absolute (not relative to the state), e.g. the SO-101 gripper (index 5)
    absolute_action_dims: tuple[int, ...] = (5,)
    # N: add a state-delta token s[t] - s[t-N]; the sampler then fetches state offsets [-N, 0]; None disables
    obs_state_delta_frames: int | None = None
    # normalize relative actions with per-chunk-position stats (H, A) rather than pooled per-joint stats (A,)
    relative_stats_per_step: bool = True
    # RTC: train with a random committed prefix of d in [0, rtc_max_delay] true actions; 0 disables
    rtc_max_delay: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        _check(
            all(d >= 0 for d in self.absolute_action_dims)
            and len(set(self.absolute_action_dims)) == len(self.absolute_action_dims),
            name,
            "absolute_action_dims",
            "distinct non-negative action indices",
            self.absolute_action_dims,
        )
        _check(
            self.obs_state_delta_frames is None or self.obs_state_delta_frames >= 1,
            name,
            "obs_state_delta_frames",
            ">= 1 or null",
            self.obs_state_delta_frames,
        )
        # a chunk_size of 10 or less set alone met the default rtc_max_delay (10), a field never set,
        # with no fix: the fix names both and a value that fits
        _check(
            0 <= self.rtc_max_delay < self.chunk_size,
            name,
            "rtc_max_delay",
            f"0 <= rtc_max_delay < chunk_size ({self.chunk_size})",
            self.rtc_max_delay,
            f"set rtc_max_delay below chunk_size, e.g. rtc_max_delay={max(self.chunk_size // 3, 0)} with "
            f"chunk_size={self.chunk_size} (its default is {type(self).rtc_max_delay}: a chunk_size of "
            f"{type(self).rtc_max_delay} or less needs it set too)",
        )
        _check(
            self.obs_state_delta_frames is None or self.n_obs_steps == 1,
            name,
            "n_obs_steps",
            "1 when obs_state_delta_frames is set (the delta token reads a 2-frame state window)",
            self.n_obs_steps,
            "use n_obs_steps (the state history holds the same information) or obs_state_delta_frames",
        )

    def state_offsets(self) -> list[int]:
        if self.obs_state_delta_frames is None:
            return super().state_offsets()
        return [-self.obs_state_delta_frames, 0]

    def stats_request(self) -> dict[str, Any]:
        """Relative-action stats over the chunk, and state-delta stats when a delta is used."""
        return {
            "relative_action_horizon": self.chunk_size,
            "absolute_action_dims": tuple(self.absolute_action_dims),
            "state_delta_frames": self.obs_state_delta_frames,
        }


def _is_camera(key: str, feature: Any) -> bool:
    """A camera feature: dtype "video"/"image" (LeRobot), or any ``observation.images.<cam>`` key."""
    dtype = feature.get("dtype") if isinstance(feature, dict) else None
    if key.endswith(FEATURES_SUFFIX):
        return False
    return dtype in ("video", "image") or key.startswith("observation.images.")
