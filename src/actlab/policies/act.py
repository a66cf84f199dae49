"""ACT: action chunking with transformers (Zhao et al. 2023), LeRobot's structure and defaults.

Structure (as LeRobot's ``lerobot/policies/act/modeling_act.py``):

- CVAE encoder (training only) over ``[cls, state, action_1..H]`` -> latent ``z ~ N(mu, sigma)``; at
  inference ``z = 0``.
- Transformer encoder over ``[latent, state, (extra tokens), image tokens...]`` with learned 1-D positions
  for the non-image tokens and fixed 2-D sinusoidal positions for the image tokens. Every camera goes
  through one shared backbone (a single batched call when the cameras have the same size).
- DETR-style decoder with ``chunk_size`` learned queries, then a linear action head.
- Loss: L1 on unpadded steps (mean over valid steps and action dims) + ``kl_weight * KL``.

Performance notes: ``forward`` has no host syncs and no Python loops over positions (tokens are built
with batched reshapes; the 2-D positional table is a buffer built once); padded steps are masked with
``torch.where`` (never boolean indexing), so the forward/backward compile into one graph.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import numbers
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from actlab.errors import ActlabError
from actlab.policies.backbones import IMAGENET_MEAN, IMAGENET_STD, load_imagenet_weights, make_backbone
from actlab.policies.configs import VIT_BACKBONES, ACTConfig
from actlab.policies.contract import FEATURES_SUFFIX, FUTURE_STATE, PAST_CHUNKS
from actlab.policies.correction import CorrectionHead, pick_steps
from actlab.policies.ensemble import TemporalEnsembler
from actlab.policies.inference import GraphedInference, plan_inference_graphs
from actlab.policies.layers import Decoder, Encoder, sinusoid_1d, sinusoid_2d
from actlab.policies.normalize import Normalizer, mean_std
from actlab.policies.vit import FAMILIES, ViTBackbone, make_vit, recorded_config

STATE = "observation.state"
ACTION = "action"


def _feature_shape(features: dict[str, Any], key: str) -> tuple[int, ...]:
    if key not in features:
        raise ActlabError(
            f"the dataset features have no {key!r}",
            field=key,
            expected=f"a feature {key!r} with a shape",
            found="features " + ", ".join(sorted(features)),
            fix="ACT needs observation.state and action features (LeRobot names)",
        )
    shape = features[key].get("shape") if isinstance(features[key], dict) else None
    ints = isinstance(shape, (list, tuple)) and all(isinstance(s, numbers.Integral) for s in shape)
    if not shape or not ints:
        raise ActlabError(
            f"feature {key!r} has no valid shape",
            field=f"{key}.shape",
            expected="a list of ints",
            found=shape,
        )
    return tuple(int(s) for s in shape)


def image_chw(features: dict[str, Any], key: str) -> tuple[int, int, int]:
    """(C, H, W) of a camera feature; LeRobot stores (H, W, C) with names height/width/channels."""
    shape = _feature_shape(features, key)
    names = features[key].get("names") or []
    if len(shape) != 3:
        raise ActlabError(
            f"camera feature {key!r} must be 3-D",
            field=f"{key}.shape",
            expected="[height, width, channels]",
            found=list(shape),
        )
    if list(names)[:1] in (["channels"], ["channel"]) or (not names and shape[0] in (1, 3) and shape[2] > 4):
        c, h, w = shape
    else:
        h, w, c = shape
    if c != 3:
        raise ActlabError(
            f"camera feature {key!r} must have 3 channels",
            field=f"{key}.shape",
            expected="RGB images (3 channels)",
            found=list(shape),
        )
    return c, h, w


def last_frame(x: torch.Tensor, sample_ndim: int) -> torch.Tensor:
    """(B, T, *sample) -> (B, *sample) newest frame; (B, *sample) unchanged. Static shape test only."""
    return x[:, -1] if x.ndim == sample_ndim + 2 else x


def _frames(x: torch.Tensor, k: int, sample_ndim: int, key: str) -> torch.Tensor:
    """(B, K, *sample) observation window -> (B*K, *sample), oldest frame first. Static shape test only."""
    if x.ndim != sample_ndim + 2 or x.shape[1] != k:
        raise ActlabError(
            f"{key!r} has no window of n_obs_steps frames",
            field=key,
            expected=f"(B, {k}, ...) at offsets {list(range(1 - k, 1))} (policy.delta_indices)",
            found=tuple(x.shape),
            fix="fetch observations with policy.delta_indices, or call select_action (it keeps the history)",
        )
    return x.flatten(0, 1)


class ACTPolicy(nn.Module):
    """ACT policy: ``forward(batch) -> (loss, metrics)``, ``predict_action_chunk``, ``select_action``."""

    config_class = ACTConfig

    def __init__(
        self, config: ACTConfig, features: dict[str, Any], stats: dict[str, Any], pretrained: bool = True
    ) -> None:
        """Build from a config, the dataset features (LeRobot info.json style) and normalization stats.

        ``pretrained`` allows loading ImageNet weights when the config asks for them (load_policy passes
        False: the bundle carries the weights).
        """
        super().__init__()
        if not isinstance(config, self.config_class):
            raise ActlabError(
                f"{type(self).__name__} needs a {self.config_class.__name__}",
                expected=self.config_class.__name__,
                found=type(config).__name__,
            )
        self.config = config
        self.features = copy.deepcopy(dict(features))
        self.state_dim = _feature_shape(features, STATE)[-1]
        self.action_dim = _feature_shape(features, ACTION)[-1]
        self.camera_keys = config.camera_keys(features)
        self.image_shapes = {k: image_chw(features, k) for k in self.camera_keys}
        self._validate_features()
        self._input_stats = {k: stats[k] for k in self.stats_keys() if k in stats}
        self.normalizer = Normalizer(self._normalizer_entries(stats))
        self._pretrained = pretrained
        self._build_model()
        self._reset_parameters()
        if self.camera_keys:
            if isinstance(self.backbone, ViTBackbone):
                if pretrained and config.pretrained_backbone_weights is not None:
                    self.backbone.load_pretrained(config.pretrained_backbone_weights)
                # The architecture actually built, so that load_policy rebuilds it without the hub.
                self.config = dataclasses.replace(
                    config, vit_config=recorded_config(self.backbone.model.config)
                )
            elif pretrained and config.pretrained_backbone_weights == "imagenet":
                load_imagenet_weights(self.backbone)
            if self.config.freeze_backbone:
                self.backbone.requires_grad_(False)
        if self.config.correction_only:
            # only the correction head trains; the chunk policy stays as --init-from gave it
            for name, p in self.named_parameters():
                p.requires_grad_(name.startswith("correction_head."))
        self._action_queue: collections.deque = collections.deque()
        # the last n_obs_steps - 1 observations seen by select_action, oldest first (reset() clears it)
        self._obs_history: collections.deque = collections.deque(maxlen=max(1, config.n_obs_steps - 1))
        self._graphed_inference: GraphedInference | None = None  # set by use_cuda_graphs
        self._ensembler = (
            TemporalEnsembler(config.temporal_ensemble_coeff, config.chunk_size)
            if config.temporal_ensemble_coeff is not None
            else None
        )

    # ------------------------------------------------------------------------------------------ build
    @property
    def n_extra_tokens(self) -> int:
        """1-D tokens between the state token and the image tokens (subclasses add some)."""
        return 0

    def _validate_features(self) -> None:
        """Hook: reject features this policy cannot use (before anything is allocated)."""

    def stats_keys(self) -> list[str]:
        """Stats entries this policy reads."""
        keys = [STATE, ACTION]
        if self.config.image_norm == "dataset":
            keys += self.camera_keys
        return keys

    def _normalizer_entries(self, stats: dict[str, Any]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        cfg = self.config
        entries = {
            STATE: mean_std(stats, STATE, (self.state_dim,), cfg.std_floor),
            ACTION: mean_std(stats, ACTION, (self.action_dim,), cfg.std_floor),
        }
        entries.update(self._image_entries(stats))
        return entries

    def _image_entries(self, stats: dict[str, Any]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        out = {}
        vit = FAMILIES.get(self.config.vision_backbone)
        # "imagenet": what the pretrained weights expect (each ViT's image-processor values, vit.py)
        mean, std = (vit.mean, vit.std) if vit is not None else (IMAGENET_MEAN, IMAGENET_STD)
        for key in self.camera_keys:
            if self.config.image_norm == "dataset":
                out[key] = mean_std(stats, key, (3, 1, 1), self.config.image_std_floor, mode="floor")
            else:
                out[key] = (torch.tensor(mean).view(3, 1, 1), torch.tensor(std).view(3, 1, 1))
        return out

    def _build_model(self) -> None:
        cfg = self.config
        d = cfg.dim_model
        layer_args = (
            d,
            cfg.n_heads,
            cfg.dim_feedforward,
            cfg.dropout,
            cfg.feedforward_activation,
            cfg.pre_norm,
        )
        if cfg.use_vae:
            self.vae_encoder = Encoder(cfg.n_vae_encoder_layers, *layer_args)
            self.vae_encoder_cls_embed = nn.Embedding(1, d)
            self.vae_encoder_robot_state_input_proj = nn.Linear(self.state_dim, d)
            self.vae_encoder_action_input_proj = nn.Linear(self.action_dim, d)
            self.vae_encoder_latent_output_proj = nn.Linear(d, 2 * cfg.latent_dim)
            # [cls, state, H actions]; a buffer built once, not per forward.
            self.register_buffer(
                "vae_encoder_pos_enc", sinusoid_1d(2 + cfg.chunk_size, d)[None], persistent=False
            )
        self._img_size = cfg.downscale_img_square  # square side images are resized to (None: kept)
        if self.camera_keys:
            self._build_vision(d)
        self.encoder = Encoder(cfg.n_encoder_layers, *layer_args)
        self.decoder = Decoder(cfg.n_decoder_layers, *layer_args)
        self.encoder_robot_state_input_proj = nn.Linear(self.state_dim, d)
        self.encoder_latent_input_proj = nn.Linear(cfg.latent_dim, d)
        # [latent, K states, extra]: K = n_obs_steps (1: LeRobot's [latent, state])
        self.encoder_1d_feature_pos_embed = nn.Embedding(1 + cfg.n_obs_steps + self.n_extra_tokens, d)
        self.decoder_pos_embed = nn.Embedding(cfg.chunk_size, d)
        self.action_head = nn.Linear(d, self.action_dim)
        if cfg.correction_head:
            if cfg.correction_images and not self.camera_keys:
                raise ActlabError(
                    "policy.correction_images reads the cameras, and this policy has none",
                    field="policy.correction_images",
                    expected="false for a policy without cameras",
                    found=True,
                    fix="drop --set policy.correction_images=true",
                )
            # the cameras it reads, checked here where the policy's own are known
            self.correction_keys = (
                cfg.correction_camera_keys(list(self.camera_keys)) if cfg.correction_images else []
            )
            cameras = len(self.correction_keys)
            self.correction_head = CorrectionHead(
                self.state_dim,
                self.action_dim,
                cfg.chunk_size,
                cfg.correction_hidden_dim,
                cameras=cameras,
                image_channels=self.backbone.out_channels if cameras else 0,
            )

    def _build_vision(self, d: int) -> None:
        """Backbone, camera fusion and the image tokens' positions (docs/policies.md "Camera fusion")."""
        cfg = self.config
        if cfg.vision_backbone in VIT_BACKBONES:
            weights = cfg.pretrained_backbone_weights if self._pretrained else None
            self.backbone = make_vit(
                cfg.vision_backbone, cfg.vit_config, cfg.vit_features, cfg.downscale_img_square, weights
            )
            self._img_size = self.backbone.input_size  # a ViT always sees its own input size
        else:
            self.backbone = make_backbone(cfg.vision_backbone, cfg.cnn_small_max_grid, cfg.cnn_small_channels)
        channels, n_cam = self.backbone.out_channels, len(self.camera_keys)
        grids = [self._feature_grid(k) for k in self.camera_keys]
        if cfg.camera_fusion != "tokens" and len(set(grids)) > 1:
            raise ActlabError(
                f"camera_fusion={cfg.camera_fusion} combines cameras position by position, but their "
                "feature grids differ",
                field="camera_fusion",
                expected="cameras with the same image size (one token grid)",
                found=dict(zip(self.camera_keys, grids)),
                fix="resize every camera to one size (data.image_size or downscale_img_square), use "
                "vit_features=pooled, or camera_fusion=tokens",
            )
        if cfg.camera_fusion == "gated" and n_cam < 2:
            raise ActlabError(
                "camera_fusion=gated weighs cameras against each other and needs at least two",
                field="camera_fusion",
                expected="two or more cameras",
                found=self.camera_keys,
                fix="use camera_fusion=tokens (or mean) with one camera",
            )
        if cfg.camera_fusion == "concat_mlp":
            act = nn.ReLU() if cfg.feedforward_activation == "relu" else nn.GELU()
            # every camera's channels at one grid position -> D
            self.encoder_img_fusion_mlp = nn.Sequential(nn.Linear(n_cam * channels, d), act, nn.Linear(d, d))
        else:
            self.encoder_img_feat_input_proj = nn.Conv2d(channels, d, kernel_size=1)
        if cfg.camera_fusion == "gated":
            # gate logit of a camera = w . (its tokens averaged over positions) + its own bias
            self.encoder_img_gate = nn.Linear(d, 1, bias=False)
            self.encoder_img_gate_bias = nn.Parameter(torch.zeros(n_cam))
        if cfg.camera_fusion == "tokens":
            pos = torch.cat([sinusoid_2d(h, w, d) for h, w in grids])  # (sum h*w, D), cameras in order
        else:
            pos = sinusoid_2d(*grids[0], d)  # (h*w, D): one fused grid
        self.register_buffer("encoder_cam_pos", pos, persistent=False)
        if cfg.n_obs_steps > 1:
            # which of the K observation steps an image token comes from (added to its 2-D position)
            self.encoder_obs_time_embed = nn.Embedding(cfg.n_obs_steps, d)

    def _feature_grid(self, key: str) -> tuple[int, int]:
        _, h, w = self.image_shapes[key]
        if self._img_size is not None:
            h = w = self._img_size
        return self.backbone.feature_shape(h, w)

    def _reset_parameters(self) -> None:
        # ACT / DETR: Xavier-uniform on every matrix of the transformers.
        for module in [self.encoder, self.decoder, *([self.vae_encoder] if self.config.use_vae else [])]:
            for p in module.parameters():
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)

    # ------------------------------------------------------------------------------------------ info
    @property
    def delta_indices(self) -> dict[str, list[int]]:
        """Every key the sampler must fetch with its frame offsets (only what the policy reads)."""
        return self.config.delta_indices(self.camera_keys)

    @property
    def observation_delta_indices(self) -> dict[str, list[int]]:
        return {k: v for k, v in self.delta_indices.items() if k not in (ACTION, FUTURE_STATE, PAST_CHUNKS)}

    @property
    def action_delta_indices(self) -> list[int]:
        return self.delta_indices[ACTION]

    def stats_for_bundle(self) -> dict[str, Any]:
        """The stats this policy was built from (the keys it reads), for the bundle's stats.json."""
        return self._input_stats

    def param_groups(self, lr: float, backbone_lr: float, weight_decay: float) -> list[dict[str, Any]]:
        """Optimizer parameter groups: backbone vs the rest, each split into decayed / not decayed.

        No weight decay on biases, norm scales, embeddings and learned tokens (LeRobot decays everything;
        decaying positional embeddings and norm gains only shrinks them towards zero). Frozen
        parameters are left out. Each group carries a ``name``.
        """
        no_decay: set[int] = set()
        for module in self.modules():
            if isinstance(module, (nn.Embedding, nn.LayerNorm, nn.GroupNorm)):
                no_decay.update(id(p) for p in module.parameters(recurse=False))
        groups: dict[tuple[bool, bool], list[nn.Parameter]] = {}
        for name, p in self.named_parameters():
            if not p.requires_grad:
                continue
            decay = p.ndim >= 2 and id(p) not in no_decay
            groups.setdefault((name.startswith("backbone."), decay), []).append(p)
        out = []
        for (is_backbone, decay), params in sorted(groups.items()):
            out.append(
                {
                    "name": ("backbone" if is_backbone else "head") + ("" if decay else "_no_decay"),
                    "params": params,
                    "lr": backbone_lr if is_backbone else lr,
                    "weight_decay": weight_decay if decay else 0.0,
                }
            )
        return out

    # ------------------------------------------------------------------------------------------ images
    def _prep_images(self, key: str, images: torch.Tensor) -> torch.Tensor:
        """uint8 [0, 255] or float [0, 1] (N, 3, H, W) -> normalized float, resized if configured."""
        dtype = self.encoder_cam_pos.dtype  # the model's dtype (a buffer: not a bf16 working weight copy)
        x = images.to(dtype) * (1.0 / 255.0) if images.dtype == torch.uint8 else images.to(dtype)
        size = self._img_size
        if size is not None and tuple(x.shape[-2:]) != (size, size):
            x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        return self.normalizer.normalize(key, x)

    def encode_images(self, camera_key: str, images: torch.Tensor) -> torch.Tensor:
        """Backbone features (N, C', h, w) of one camera's frames (N, 3, H, W), uint8 or float in [0, 1].

        With ``freeze_backbone`` these are what a trainer may cache per frame and pass back as
        ``batch[camera_key + FEATURES_SUFFIX]`` (same result as passing the images).
        """
        if camera_key not in self.image_shapes:
            raise ActlabError(
                f"{camera_key!r} is not a camera of this policy",
                field="camera_key",
                expected=", ".join(self.camera_keys) or "(no cameras)",
                found=camera_key,
            )
        return self.backbone(self._prep_images(camera_key, images))

    def _obs_frames(self, x: torch.Tensor, sample_ndim: int, key: str) -> torch.Tensor:
        """An observation as (B*K, *sample) frames, oldest first (K = 1: the newest frame, (B, *sample))."""
        k = self.config.n_obs_steps
        return last_frame(x, sample_ndim) if k == 1 else _frames(x, k, sample_ndim, key)

    def _feature_maps(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Backbone features (B*K, C', h, w) per camera: cached ones as given, the others computed."""
        feats: dict[str, torch.Tensor] = {}
        raw = [k for k in self.camera_keys if k + FEATURES_SUFFIX not in batch]
        for key in self.camera_keys:
            if key + FEATURES_SUFFIX in batch:
                feats[key] = self._obs_frames(batch[key + FEATURES_SUFFIX], 3, key + FEATURES_SUFFIX)
        if raw:
            imgs = [self._prep_images(k, self._obs_frames(batch[k], 3, k)) for k in raw]  # (B*K, 3, H, W)
            if len({tuple(x.shape) for x in imgs}) == 1:
                # One backbone call for all cameras: fewer, larger kernels.
                for key, f in zip(raw, self.backbone(torch.cat(imgs)).chunk(len(raw))):
                    feats[key] = f
            else:
                for key, x in zip(raw, imgs):
                    feats[key] = self.backbone(x)
        return feats

    def _image_tokens(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, K * n_image_tokens, D): each observation step's camera tokens fused by ``camera_fusion``.

        Per step: ``tokens`` keeps every camera's projected grid side by side (camera order); ``mean``
        averages the projected grids position by position; ``concat_mlp`` concatenates the cameras'
        backbone channels per position and maps them to D with a 2-layer MLP; ``gated`` sums the
        projected grids weighted by a softmax over cameras of learned logits (one per camera and sample,
        from its tokens averaged over positions). Pooled ViT features are a 1 x 1 grid, so the same rules
        give one token per camera (tokens) or one fused token (the others).
        """
        feats = self._feature_maps(batch)
        fusion = self.config.camera_fusion
        if fusion == "concat_mlp":
            mlp = self.encoder_img_fusion_mlp
            x = torch.cat([feats[k] for k in self.camera_keys], dim=1)  # (B*K, n_cam*C', h, w)
            tokens = mlp(x.to(mlp[0].weight.dtype).flatten(2).transpose(1, 2))  # (B*K, h*w, D)
        else:
            w = self.encoder_img_feat_input_proj.weight
            per_cam = [
                self.encoder_img_feat_input_proj(feats[k].to(w.dtype)).flatten(2).transpose(1, 2)
                for k in self.camera_keys
            ]  # each (B*K, h*w, D)
            if fusion == "tokens":
                tokens = torch.cat(per_cam, dim=1)  # (B*K, sum h*w, D)
            elif fusion == "mean":
                tokens = torch.stack(per_cam).mean(0)  # (B*K, h*w, D)
            else:  # gated
                stacked = torch.stack(per_cam, dim=1)  # (B*K, n_cam, h*w, D)
                logits = self.encoder_img_gate(stacked.mean(2))[..., 0] + self.encoder_img_gate_bias
                gates = torch.softmax(logits, dim=-1)  # (B*K, n_cam)
                tokens = (gates[..., None, None].to(stacked.dtype) * stacked).sum(1)  # (B*K, h*w, D)
        k = self.config.n_obs_steps
        return tokens.reshape(tokens.shape[0] // k, k * tokens.shape[1], tokens.shape[2])  # (B, K*n, D)

    def _image_pos(self) -> torch.Tensor:
        """(K * n_image_tokens, D) positions: the 2-D table, plus a learned embedding per step for K > 1."""
        if self.config.n_obs_steps == 1:
            return self.encoder_cam_pos
        pos = self.encoder_cam_pos[None] + self.encoder_obs_time_embed.weight[:, None].to(
            self.encoder_cam_pos
        )
        return pos.flatten(0, 1)  # (K*n, D), oldest step first

    # ------------------------------------------------------------------------------------------ hooks
    def _state_input(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Normalized current state (B, D)."""
        return self.normalizer.normalize(STATE, last_frame(batch[STATE], 1))

    def _action_targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Normalized training targets (B, H, A)."""
        return self.normalizer.normalize(ACTION, batch[ACTION])

    def _extra_tokens(
        self,
        batch: dict[str, torch.Tensor],
        targets: torch.Tensor | None,
        keep: torch.Tensor | None,
        prefix: torch.Tensor | None,
    ) -> torch.Tensor | None:
        """Tokens (B, n_extra_tokens, D) between the state and the images; None for ACT."""
        return None

    def _to_actions(
        self, pred: torch.Tensor, obs: dict[str, torch.Tensor], prefix: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Model output (B, H, A) normalized -> absolute actions."""
        return self.normalizer.unnormalize(ACTION, pred)

    # ------------------------------------------------------------------------------------------ model
    def _latent(self, state_n: torch.Tensor, targets: torch.Tensor | None, keep: torch.Tensor | None):
        """CVAE latent (B, latent), mu and log(sigma^2) (None at inference, where the latent is 0)."""
        batch_size = state_n.shape[0]
        if not (self.config.use_vae and self.training and targets is not None):
            return state_n.new_zeros(batch_size, self.config.latent_dim), None, None
        d = self.config.dim_model
        cls = self.vae_encoder_cls_embed.weight[None].expand(batch_size, 1, d)  # (B, 1, D)
        st = self.vae_encoder_robot_state_input_proj(state_n)[:, None]  # (B, 1, D)
        act = self.vae_encoder_action_input_proj(targets)  # (B, H, D)
        x = torch.cat([cls, st, act], dim=1)  # (B, H+2, D)
        key_keep = torch.cat([keep.new_ones(batch_size, 2), keep], dim=1)  # (B, H+2): padded actions ignored
        cls_out = self.vae_encoder(x, self.vae_encoder_pos_enc, key_keep)[:, 0]  # (B, D)
        mu, log_sigma_x2 = self.vae_encoder_latent_output_proj(cls_out).chunk(2, dim=-1)  # (B, latent) each
        latent = mu + (0.5 * log_sigma_x2).exp() * torch.randn_like(mu)
        return latent, mu, log_sigma_x2

    def _predict_normalized(
        self,
        batch: dict[str, torch.Tensor],
        targets: torch.Tensor | None = None,
        keep: torch.Tensor | None = None,
        prefix: torch.Tensor | None = None,
    ):
        """Normalized action chunk (B, H, A), and (mu, log_sigma_x2) when the CVAE encoder ran."""
        state_n = self._state_input(batch)  # (B, D)
        latent, mu, log_sigma_x2 = self._latent(state_n, targets, keep)
        if self.config.n_obs_steps == 1:
            state_tok = self.encoder_robot_state_input_proj(state_n)[:, None]  # (B, 1, D)
        else:
            _frames(batch[STATE], self.config.n_obs_steps, 1, STATE)  # shape check: (B, K, D)
            window_n = self.normalizer.normalize(STATE, batch[STATE])  # (B, K, D), oldest first
            state_tok = self.encoder_robot_state_input_proj(window_n)  # (B, K, D)
        tokens = [self.encoder_latent_input_proj(latent)[:, None], state_tok]  # (B, 1, D), (B, K, D)
        extra = self._extra_tokens(batch, targets, keep, prefix)
        if extra is not None:
            tokens.append(extra)  # (B, n_extra, D)
        pos = [self.encoder_1d_feature_pos_embed.weight]  # (2 + n_extra, D)
        if self.camera_keys:
            tokens.append(self._image_tokens(batch))  # (B, n_img, D)
            pos.append(self._image_pos())
        x = torch.cat(tokens, dim=1)  # (B, S, D)
        pos_t = torch.cat(pos)[None].to(x.dtype)  # (1, S, D)
        memory = self.encoder(x, pos_t)  # (B, S, D)
        queries = self.decoder_pos_embed.weight[None].to(x.dtype)  # (1, H, D)
        # The learned queries are both the content and the position of the decoder input. DETR/ACT feed
        # zero content: every value of the first self-attention is then the same bias, so its projection
        # weights and first norm gain can never receive a gradient (dead parameters). decoder_input="zeros"
        # does exactly that, for parity with LeRobot's ACT (export / import).
        if self.config.decoder_input == "zeros":
            dec_in = queries.new_zeros(x.shape[0], *queries.shape[1:])  # (B, H, D)
        else:
            dec_in = queries.expand(x.shape[0], -1, -1)  # (B, H, D)
        out = self.decoder(dec_in, memory, queries, pos_t)  # (B, H, D)
        return self.action_head(out), mu, log_sigma_x2  # (B, H, A)

    # ------------------------------------------------------------------------------------------ training
    def _check_batch(self, batch: dict[str, torch.Tensor]) -> None:
        """Shape checks on Python ints only (static under torch.compile, no host sync)."""
        needed = [STATE, ACTION, ACTION + "_is_pad"]
        if self.config.correction_only:
            needed += [PAST_CHUNKS, PAST_CHUNKS + "_is_pad"]
        elif self.config.correction_head:
            needed += [FUTURE_STATE, FUTURE_STATE + "_is_pad"]
        for key in needed:
            if key not in batch:
                raise ActlabError(
                    f"the training batch has no {key!r}",
                    field=key,
                    expected=", ".join(self.delta_indices) + ", action_is_pad",
                    found=", ".join(sorted(batch)),
                    fix="gather the batch with policy.delta_indices (actlab train does; the correction "
                    "head's observation.state.future is the state column at its offsets, action.past_chunks "
                    "the frozen policy's chunk of every frame)"
                    if key.startswith((FUTURE_STATE, PAST_CHUNKS))
                    else None,
                )
        act, pad = batch[ACTION], batch[ACTION + "_is_pad"]
        h, a = self.config.chunk_size, self.action_dim
        if act.ndim != 3 or tuple(act.shape[1:]) != (h, a):
            raise ActlabError(
                "batch['action'] has the wrong shape",
                field="action",
                expected=f"(B, chunk_size={h}, action_dim={a})",
                found=tuple(act.shape),
                fix="fetch action offsets policy.delta_indices['action']",
            )
        if tuple(pad.shape) != tuple(act.shape[:2]) or pad.dtype != torch.bool:
            raise ActlabError(
                "batch['action_is_pad'] must be a bool mask of shape (B, H)",
                field="action_is_pad",
                expected=f"bool {tuple(act.shape[:2])}",
                found=f"{pad.dtype} {tuple(pad.shape)}",
            )
        for key in self.camera_keys:
            if key not in batch and key + FEATURES_SUFFIX not in batch:
                raise ActlabError(
                    f"the batch has no images for camera {key!r}",
                    field=key,
                    expected=f"{key} (uint8 images) or {key}{FEATURES_SUFFIX} (cached features)",
                    found=", ".join(sorted(batch)),
                )

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Loss and detached metrics for a training batch (see docs/internals.md for the keys).

        In train mode the CVAE encoder runs (if ``use_vae``); in eval mode the latent is 0, so the loss is
        the L1 of what inference would predict (a validation loss).
        """
        self._check_batch(batch)
        if self.config.correction_only:
            corr, zero = self._late_chunk_correction_loss(batch)
            metrics = {"correction_l1": corr.detach(), "correction_zero_l1": zero.detach()}
            return corr, {**metrics, "loss": corr.detach()}
        keep = ~batch[ACTION + "_is_pad"]  # (B, H) True for real steps
        targets = self._action_targets(batch)  # (B, H, A)
        # Zero padded targets so that nothing (not even NaN) at padded steps reaches any computation.
        targets = torch.where(keep[..., None], targets, torch.zeros_like(targets))
        pred, mu, log_sigma_x2 = self._predict_normalized(batch, targets, keep)
        err = torch.where(keep[..., None], (pred - targets).abs(), torch.zeros_like(pred))  # (B, H, A)
        n_valid = keep.sum().clamp(min=1) * self.action_dim  # stays on device: no host sync
        l1 = err.sum() / n_valid
        if mu is not None:
            kld = (-0.5 * (1 + log_sigma_x2 - mu.pow(2) - log_sigma_x2.exp())).sum(-1).mean()
            loss = l1 + self.config.kl_weight * kld
        else:
            kld = torch.zeros_like(l1)
            loss = l1
        metrics = {"l1_loss": l1.detach(), "kld_loss": kld.detach()}
        if self.config.correction_head:
            corr, zero = self._correction_loss(batch, pred if mu is None else None, keep)
            loss = loss + corr
            metrics.update(correction_l1=corr.detach(), correction_zero_l1=zero.detach())
        return loss, {**metrics, "loss": loss.detach()}

    def _correction_loss(
        self, batch: dict[str, torch.Tensor], pred: torch.Tensor | None, keep: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The correction head's L1 on ``a[t+k] - p[k]`` at one uniform ``k`` per sample (normalized action
        units), and the L1 a zero head would have (policies/correction.py says what and why).

        ``pred``: the chunk of this forward pass when it is the inference chunk (no CVAE latent), else
        None: the chunk is then computed again with the latent at 0. Neither gets the head's gradient.
        """
        with torch.no_grad():
            if pred is None:
                pred, _, _ = self._predict_normalized(batch)  # targets None: latent 0, no RTC prefix
            planned = self._to_actions(pred.detach(), batch)  # (B, H, A) absolute
        b, h = planned.shape[:2]
        k = torch.randint(0, h, (b,), device=planned.device)  # (B,) drawn on the device: no host sync
        valid = pick_steps(keep, k) & ~pick_steps(batch[FUTURE_STATE + "_is_pad"], k)  # (B,)
        planned_n = self.normalizer.normalize(ACTION, pick_steps(planned, k))  # (B, A)
        target = self.normalizer.normalize(ACTION, pick_steps(batch[ACTION], k)) - planned_n  # (B, A)
        target = torch.where(valid[:, None], target, torch.zeros_like(target))
        state = pick_steps(batch[FUTURE_STATE], k)  # (B, D); zeroed where padded: no NaN reaches a gradient
        state_n = self.normalizer.normalize(
            STATE, torch.where(valid[:, None], state, torch.zeros_like(state))
        )
        residual = self.correction_head(state_n, planned_n, k)  # (B, A)
        n_valid = valid.sum().clamp(min=1) * self.action_dim
        err = torch.where(valid[:, None], (residual - target).abs(), torch.zeros_like(residual))
        return err.sum() / n_valid, target.abs().sum() / n_valid

    def _late_chunk_correction_loss(
        self, batch: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``correction_only``: the head's L1 on ``a[t] - p_{t-k}[k]`` (the action demonstrated at the
        sample's frame ``t`` minus what the frozen policy's chunk planned at ``t - k`` says for it), ``k``
        uniform in ``0 .. H-1`` per sample, from the newest observation at ``t``: exactly the triple the
        executor hands the head ``k`` steps into a chunk. Masked where ``t - k`` is before the episode.
        Returns it and the L1 a zero head would have (the late chunk's own error)."""
        chunks = batch[PAST_CHUNKS]  # (B, H, H, A) absolute: row j planned H - 1 - j frames before t
        b, h = chunks.shape[:2]
        k = torch.randint(0, h, (b,), device=chunks.device)  # (B,) drawn on the device: no host sync
        rows = torch.arange(b, device=chunks.device)
        planned = chunks[rows, h - 1 - k, k]  # (B, A)
        valid = ~batch[PAST_CHUNKS + "_is_pad"][rows, h - 1 - k]  # (B,)
        planned_n = self.normalizer.normalize(ACTION, planned)
        target = self.normalizer.normalize(ACTION, batch[ACTION][:, 0]) - planned_n  # (B, A)
        target = torch.where(valid[:, None], target, torch.zeros_like(target))
        state_n = self.normalizer.normalize(STATE, last_frame(batch[STATE], 1))
        residual = self.correction_head(state_n, planned_n, k, self._correction_features(batch))
        n_valid = valid.sum().clamp(min=1) * self.action_dim
        err = torch.where(valid[:, None], (residual - target).abs(), torch.zeros_like(residual))
        return err.sum() / n_valid, target.abs().sum() / n_valid

    def _correction_features(self, obs: dict[str, torch.Tensor]) -> list[torch.Tensor] | None:
        """The newest frame's backbone features per camera, (B, C', h, w) each, for a head that reads
        images (``correction_images``); None otherwise. Cached features are used as given."""
        if not self.config.correction_images:
            return None
        out = []
        for key in self.correction_keys:
            if key + FEATURES_SUFFIX in obs:
                out.append(last_frame(obs[key + FEATURES_SUFFIX], 3))
            else:
                out.append(self.encode_images(key, last_frame(obs[key], 3)))
        return out

    # ------------------------------------------------------------------------------------------ inference
    def _check_prefix(self, prefix: torch.Tensor | None) -> None:
        if prefix is not None:
            raise ActlabError(
                f"{self.config.type} was not trained with an RTC prefix",
                field="prefix",
                expected="None",
                found=f"a prefix of shape {tuple(prefix.shape)}",
                fix="train an act_relative policy with rtc_max_delay > 0 for prefix conditioning",
            )

    def _check_obs(self, obs: dict[str, torch.Tensor], prefix: torch.Tensor | None) -> None:
        """Inference input checks on Python ints (shapes only): clear errors instead of a conv/cat error."""
        state = obs.get(STATE)
        if state is None or state.ndim not in (2, 3) or state.shape[-1] != self.state_dim:
            raise ActlabError(
                "the observation has no usable 'observation.state'",
                field=STATE,
                expected=f"a tensor (B, {self.state_dim}) (or (B, T, {self.state_dim}) frames)",
                found=None if state is None else tuple(state.shape),
                fix="pass the robot's joint state, batch first",
            )
        size = self._img_size
        for key in self.camera_keys:
            if key + FEATURES_SUFFIX in obs:
                continue
            img = obs.get(key)
            c, h, w = self.image_shapes[key]
            ok = img is not None and img.ndim in (4, 5) and img.shape[-3] == c
            if ok and size is None:
                ok = tuple(img.shape[-2:]) == (h, w)  # token count and positions are fixed at build time
            if not ok:
                raise ActlabError(
                    f"camera {key!r} is missing from the observation or has the wrong shape",
                    field=key,
                    expected=f"(B, {c}, {h}, {w}) uint8 or float in [0, 1] (channels first)"
                    + ("" if size is None else f"; any H, W (resized to {size}x{size})"),
                    found=None if img is None else tuple(img.shape),
                    fix="convert HWC frames with .permute(0, 3, 1, 2) and resize them to the trained size",
                )
        if prefix is not None and prefix.ndim >= 1 and prefix.shape[0] != state.shape[0]:
            raise ActlabError(
                "the RTC prefix and the observation have different batch sizes",
                field="prefix",
                expected=f"batch {state.shape[0]}",
                found=tuple(prefix.shape),
            )

    def _observation(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Hook: the observation as the model reads it: with ``n_obs_steps`` > 1 and a single frame, the
        window built from the history ``select_action`` keeps (act_relative adds its state window)."""
        if self.config.n_obs_steps > 1 and obs[STATE].ndim == 2:
            return self._obs_window(obs)
        return obs

    def _history_keys(self, obs: dict[str, torch.Tensor]) -> list[str]:
        keys = [STATE]
        for key in self.camera_keys:
            keys.append(key + FEATURES_SUFFIX if key + FEATURES_SUFFIX in obs else key)
        return keys

    def _obs_window(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """(B, ...) current observation -> (B, K, ...) windows of the last K, oldest first. Before K - 1
        steps have passed the episode's first observation fills the start (the sampler clamps the same
        way at episode starts, LeRobot's padding)."""
        past = list(self._obs_history)
        k = self.config.n_obs_steps
        frames = [past[0] if past else obs] * (k - 1 - len(past)) + past + [obs]
        out = dict(obs)
        for key in self._history_keys(obs):
            out[key] = torch.stack([f[key].to(obs[key].device) for f in frames], dim=1)
        return out

    @torch.no_grad()
    def predict_action_chunk(
        self, obs: dict[str, torch.Tensor], prefix: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Absolute, unnormalized action chunk (B, H, A) for a batch of observations.

        Runs with inference semantics (no dropout, latent 0) whatever the module's mode, and restores it.
        """
        was_training = self.training
        self.eval()
        try:
            self._check_prefix(prefix)
            self._check_obs(obs, prefix)
            obs = self._observation(obs)
            run = self._graphed_inference or self._chunk
            return run(obs, prefix)
        finally:
            self.train(was_training)

    def _chunk(self, obs: dict[str, torch.Tensor], prefix: torch.Tensor | None) -> torch.Tensor:
        """The tensor math of one inference call (what a CUDA graph captures): (B, H, A) absolute."""
        pred, _, _ = self._predict_normalized(obs, prefix=prefix)
        return self._to_actions(pred, obs, prefix)

    @torch.no_grad()
    def correct_actions(
        self, obs: dict[str, torch.Tensor], planned: torch.Tensor, steps: torch.Tensor
    ) -> torch.Tensor:
        """The executing chunk's actions corrected from the newest observation (``--execution correct``).

        ``obs``: the newest observation (its state is read); ``planned`` (B, A): each row's chunk action
        for this step; ``steps`` (B,) int: the steps since that chunk's observation (its index in the
        chunk). Returns ``planned + residual`` (B, A) absolute; exactly ``planned`` where the head outputs 0.
        """
        if not self.config.correction_head:
            raise ActlabError(
                f"this {self.config.type} policy has no correction head",
                field="correction_head",
                expected="true",
                found=False,
                fix="train with --set policy.correction_head=true",
            )
        state = last_frame(obs[STATE], 1)  # (B, D)
        p = planned.to(device=state.device, dtype=state.dtype)  # (B, A)
        state_n = self.normalizer.normalize(STATE, state)
        feats = self._correction_features(obs)  # the newest frame's, for a head that reads images
        residual_n = self.correction_head(
            state_n, self.normalizer.normalize(ACTION, p), steps.to(state.device), feats
        )
        return p + residual_n.to(p.dtype) * self.normalizer.get(ACTION).std  # (B, A)

    def use_cuda_graphs(self, mode: bool | str = "auto") -> str | None:
        """Replay ``predict_action_chunk`` (and so ``select_action``) from CUDA graphs.

        ``"auto"``: on CUDA (one graph per input signature, captured at its first call), eager
        elsewhere; ``False`` turns it off. Returns why it is off when ``mode`` asked for it (else None).
        Call it after moving the policy to its device.
        """
        tensors = [*self.parameters(), *self.buffers()]
        device_type = tensors[0].device.type if tensors else "cpu"
        on, why = plan_inference_graphs(mode, device_type)
        self._graphed_inference = GraphedInference(self, self._chunk) if on else None
        return why

    @torch.no_grad()
    def select_action(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Next action (B, A): pops a queue of ``n_action_steps`` from a chunk, or temporal ensembling."""
        if self.config.n_obs_steps > 1 and obs[STATE].ndim == 2:
            window = self._obs_window(obs)
            self._obs_history.append({k: obs[k].detach().clone() for k in self._history_keys(obs)})
            obs = window
        if self._ensembler is not None:
            return self._ensembler.update(self.predict_action_chunk(obs))
        if not self._action_queue:
            chunk = self.predict_action_chunk(obs)[:, : self.config.n_action_steps]  # (B, n, A)
            self._action_queue.extend(chunk.transpose(0, 1))
        return self._action_queue.popleft()

    def reset(self) -> None:
        """Clear the action queue, the ensembler and the observation history: call before every episode."""
        self._action_queue.clear()
        self._obs_history.clear()
        if self._ensembler is not None:
            self._ensembler.reset()
