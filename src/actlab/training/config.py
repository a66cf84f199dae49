"""The training configuration: one frozen dataclass per section, validated before anything is allocated.

``TrainConfig`` groups the sections ``data``, ``augment``, ``optim``, ``schedule``, ``eval``,
``checkpoint``, ``log`` and ``overfit`` with the run-level fields (seed, steps, batch size, device, speed
options) and the policy's own config (an ``actlab.policies`` config dataclass, e.g. ``ACTConfig``).

Nothing here imports torch: ``actlab train --help`` and config validation stay light.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any, ClassVar, Literal

from actlab.errors import ActlabError
from actlab.lifecycle import rundir as rundir
from actlab.policies import get_config_class
from actlab.policies.configs import VIT_BACKBONES, VIT_DEFAULT_WEIGHTS
from actlab.policies.contract import PolicyConfig
from actlab.utils import config as cfgutil
from actlab.utils import presets as presets_util


def _check(ok: bool, field: str, expected: str, found: object) -> None:
    if not ok:
        raise ActlabError(
            f"invalid training config value for {field}", field=field, expected=expected, found=found
        )


def _check_finite(section: Any, prefix: str) -> None:
    """Every float of ``section`` (fields and the items of tuple fields) is finite. Why: ``inf`` passes
    range checks such as ``lr > 0`` and trains garbage; no field of any section means anything by it."""
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        items = value if isinstance(value, tuple) else (value,)
        if any(isinstance(v, float) and not math.isfinite(v) for v in items):
            raise ActlabError(
                f"invalid training config value for {prefix}{f.name}",
                field=f"{prefix}{f.name}",
                expected="a finite number",
                found=value,
                fix="nan and inf are not valid values: give a finite number",
            )


# The largest value of a numeric key of a training config: what one machine of ours can hold (a 4096 px
# frame is 48 MiB, a batch of 65536 of them far more) or finish. Every other number (counts, cadences,
# scales) has _CEILING; a key ending in _bytes none, the policy's keys their own (policies.configs). A
# value above it was accepted by --set and failed or ran forever once training started.
_CEILING = 1e9
_CEILINGS: dict[str, float] = {
    "batch_size": 65536,
    "num_threads": 1024,
    "data.image_size": 4096,
    "augment.shift_pad": 1024,
    # a learning rate far above any that trains, yet low enough that a deliberate divergence (lr=1e4, the
    # non-finite-loss guard's repro) still runs into that guard; 1e12 (a typo for 1e-12) is refused
    "optim.lr": 1e4,
    "optim.backbone_lr": 1e4,
    "optim.eps": 1.0,
    "eval.batches": 10**6,
    "overfit.samples": 10**6,
    # numpy's and torch's whole range, which TrainConfig checks itself: a seed is neither held nor run, and
    # 4294967295 was refused as "<= 1e+09 (more than one machine can hold or finish)" (21st fault run)
    "seed": 2**32 - 1,
}


def _check_ceilings(cfg: Any) -> None:
    """Every number of the flattened config (items of tuples too) is at most its ceiling (see _CEILINGS)."""
    for key, value in cfgutil.flatten(cfg).items():
        if key.endswith("_bytes") or key.startswith("policy."):
            continue  # (a policy config checks its own: actlab.policies.configs)
        items = value if isinstance(value, (tuple, list)) else (value,)
        ceiling = _CEILINGS.get(key, _CEILING)
        for v in items:
            if cfgutil.is_number(v) and v > ceiling:
                # a count or size (an int) is what a machine holds or finishes; a scale (a float: a learning
                # rate, eps, grad_clip) is not: optim.eps=1e308 was "more than one machine can hold or
                # finish", the wrong cause (21st fault run)
                why = (
                    "far past any value that trains: a typo?"
                    if isinstance(v, float)
                    else ("more than one machine can hold or finish")
                )
                _check(False, key, f"<= {ceiling:g} ({why})", value)


@dataclasses.dataclass(frozen=True)
class DataConfig:
    # dataset directory (LeRobot v3); usually given with --dataset
    path: str = ""
    # FrameStore size: frames are decoded once, the longer side resized to this many pixels and padded to a
    # square (None keeps the source size); cameras are chosen by policy.cameras
    image_size: int | None = None
    # episode indices to use; empty uses every episode
    episodes: tuple[int, ...] = ()
    # cap on the number of training frames (taken from the first training episodes); None uses all
    max_samples: int | None = None
    # fraction of episodes (not frames) held out for the validation loss; 0 disables validation
    val_fraction: float = 0.1
    # put the whole uint8 FrameStore on the training device: "auto" (when it fits), true or false
    frames_on_device: bool | Literal["auto"] = "auto"
    # where the decoded FrameStore is cached (None: the dataset layer's default location)
    cache_dir: str | None = None

    def __post_init__(self) -> None:
        _check_finite(self, "data.")
        _check(
            self.image_size is None or self.image_size >= 8,
            "data.image_size",
            ">= 8 or null",
            self.image_size,
        )
        _check(
            self.max_samples is None or self.max_samples >= 1, "data.max_samples", ">= 1", self.max_samples
        )
        # "" is not "unset": it was the current directory, where the frames were then decoded
        _check(self.cache_dir is None or str(self.cache_dir).strip() != "", "data.cache_dir",
               "a directory, or null for the default location", self.cache_dir)  # fmt: skip
        _check(0.0 <= self.val_fraction < 1.0, "data.val_fraction", "0 <= x < 1", self.val_fraction)
        _check(len(set(self.episodes)) == len(self.episodes), "data.episodes", "no repeats", self.episodes)
        _check(self.frames_on_device in (True, False, "auto"), "data.frames_on_device", "auto, true or false",
               self.frames_on_device)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
    # random shift: pad each image by this many pixels (edge replicate), crop back at a random offset; 0: off
    shift_pad: int = 0
    # colour jitter: brightness factor drawn from [1 - x, 1 + x] per image; 0 disables
    brightness: float = 0.0
    # colour jitter: contrast factor drawn from [1 - x, 1 + x] per image; 0 disables
    contrast: float = 0.0

    def __post_init__(self) -> None:
        _check_finite(self, "augment.")
        _check(self.shift_pad >= 0, "augment.shift_pad", ">= 0", self.shift_pad)
        _check(0.0 <= self.brightness < 1.0, "augment.brightness", "0 <= x < 1", self.brightness)
        _check(0.0 <= self.contrast < 1.0, "augment.contrast", "0 <= x < 1", self.contrast)

    @property
    def enabled(self) -> bool:
        return self.shift_pad > 0 or self.brightness > 0 or self.contrast > 0


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    # peak learning rate of every parameter outside the vision backbone (AdamW)
    lr: float = 1e-5
    # peak learning rate of the vision backbone (ACT uses the same 1e-5 as the rest)
    backbone_lr: float = 1e-5
    # AdamW decoupled weight decay
    weight_decay: float = 1e-4
    # AdamW (beta1, beta2)
    betas: tuple[float, ...] = (0.9, 0.999)
    # AdamW epsilon
    eps: float = 1e-8
    # clip the global gradient norm to this value; 0 disables clipping (the norm is still logged)
    grad_clip: float = 10.0

    def __post_init__(self) -> None:
        _check_finite(self, "optim.")
        _check(self.lr > 0, "optim.lr", "> 0", self.lr)
        _check(self.backbone_lr >= 0, "optim.backbone_lr", ">= 0", self.backbone_lr)
        _check(self.weight_decay >= 0, "optim.weight_decay", ">= 0", self.weight_decay)
        _check(
            len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas),
            "optim.betas",
            "two values in [0, 1)",
            self.betas,
        )
        _check(self.eps > 0, "optim.eps", "> 0", self.eps)
        _check(self.grad_clip >= 0, "optim.grad_clip", ">= 0", self.grad_clip)


@dataclasses.dataclass(frozen=True)
class ScheduleConfig:
    # lr shape after warmup: "cosine" decays to min_lr_ratio x peak at the last step; "constant" holds it
    kind: Literal["cosine", "constant"] = "cosine"
    # linear warmup from 0 to the peak learning rate over this many steps
    warmup_steps: int = 0
    # cosine floor as a fraction of the peak learning rate
    min_lr_ratio: float = 0.0

    def __post_init__(self) -> None:
        _check_finite(self, "schedule.")
        _check(self.warmup_steps >= 0, "schedule.warmup_steps", ">= 0", self.warmup_steps)
        _check(0.0 <= self.min_lr_ratio <= 1.0, "schedule.min_lr_ratio", "0 <= x <= 1", self.min_lr_ratio)


@dataclasses.dataclass(frozen=True)
class ValidationConfig:
    """The ``eval`` section: the validation loss (not rollouts; those are actlab.evaluation.EvalConfig).
    The section keeps its name ``eval`` (``--set eval.every=N``, saved config.json files)."""

    # validation loss every N steps, at every checkpoint and at the last step; 0 disables validation
    every: int = 1000
    # number of validation batches per evaluation (the same batches every time)
    batches: int = 8

    def __post_init__(self) -> None:
        _check_finite(self, "eval.")
        _check(self.every >= 0, "eval.every", ">= 0", self.every)
        _check(self.batches >= 1, "eval.batches", ">= 1", self.batches)


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    # write a checkpoint every N steps (and at the last step); 0 writes only the last one
    every: int = 5000
    # keep the newest K checkpoints (older ones are deleted after a new one is complete)
    keep_last: int = 3
    # also keep the checkpoint with the lowest validation loss (needs validation)
    keep_best: bool = True
    # refuse to start if the estimated disk need exceeds this many bytes (None: the free space of --out)
    disk_limit_bytes: int | None = None

    def __post_init__(self) -> None:
        _check_finite(self, "checkpoint.")
        _check(self.every >= 0, "checkpoint.every", ">= 0", self.every)
        _check(self.keep_last >= 1, "checkpoint.keep_last", ">= 1", self.keep_last)
        _check(
            self.disk_limit_bytes is None or self.disk_limit_bytes >= 0,
            "checkpoint.disk_limit_bytes",
            ">= 0 or null",
            self.disk_limit_bytes,
        )


@dataclasses.dataclass(frozen=True)
class LogConfig:
    # write a metrics.jsonl row every N steps; metrics are read back from the device only then (the host sync)
    every: int = 50
    # show a tqdm progress bar on rank 0
    progress: bool = True
    # also log to TensorBoard under <out>/tensorboard (needs the "tensorboard" extra)
    tensorboard: bool = False
    # also log to Weights & Biases (needs the "wandb" extra)
    wandb: bool = False
    # W&B project name
    wandb_project: str = "actlab"
    # draw the loss curves, learning rates and step-time split to <out>/training.png when the run ends
    plot: bool = True

    def __post_init__(self) -> None:
        _check_finite(self, "log.")
        _check(self.every >= 1, "log.every", ">= 1", self.every)


@dataclasses.dataclass(frozen=True)
class OverfitConfig:
    # train on only this many fixed samples until the loss falls under `loss_threshold` (0: normal training)
    samples: int = 0
    # the loss that counts as "memorized"; the run fails loudly if it is not reached
    loss_threshold: float = 0.05
    # give up (and fail) after this many steps
    max_steps: int = 2000

    def __post_init__(self) -> None:
        _check_finite(self, "overfit.")
        _check(self.samples >= 0, "overfit.samples", ">= 0", self.samples)
        _check(self.loss_threshold > 0, "overfit.loss_threshold", "> 0", self.loss_threshold)
        _check(self.max_steps >= 1, "overfit.max_steps", ">= 1", self.max_steps)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """A whole training run: presets build these, ``--set key=value`` overrides any field."""

    # where a refused --set key's fix sends the user (utils.config.keys_help): also from demo, bench train
    # and find-batch-size, which take this config's --set and have no --help-config of their own
    KEYS_HELP: ClassVar[str] = "`actlab train --help-config` lists every key with its meaning"

    # the preset this config started from (informational)
    name: str = "custom"
    # the policy's config (an actlab.policies config dataclass, e.g. ACTConfig); `policy.type` switches class
    policy: PolicyConfig | None = None
    # dataset, FrameStore and validation split
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    # on-device image augmentation applied to training batches
    augment: AugmentConfig = dataclasses.field(default_factory=AugmentConfig)
    # AdamW settings
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    # learning-rate schedule
    schedule: ScheduleConfig = dataclasses.field(default_factory=ScheduleConfig)
    # validation loss cadence
    eval: ValidationConfig = dataclasses.field(default_factory=ValidationConfig)
    # checkpoint cadence, retention and disk preflight
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    # metrics logging
    log: LogConfig = dataclasses.field(default_factory=LogConfig)
    # overfit sanity-check mode (actlab train --overfit N)
    overfit: OverfitConfig = dataclasses.field(default_factory=OverfitConfig)
    # seed of every random stream (sampler, augmentation, dropout, init); ranks derive their own from it
    seed: int = 0
    # a policy bundle whose weights start the run (fine-tuning, e.g. an imported LeRobot ACT); `policy` must
    # describe the same model (actlab train --init-from takes the bundle's); normalization: this dataset's
    init_from: str | None = None
    # total number of optimizer steps
    steps: int = 100_000
    # samples per optimizer step on each process (the global batch is batch_size x world size)
    batch_size: int = 8
    # training device: "auto" (cuda, then mps, then cpu), "cpu", "cuda", "cuda:N"; DDP uses cuda:LOCAL_RANK
    device: str = "auto"
    # mixed precision: "auto" (bf16 autocast on CUDA, off elsewhere), "bf16", "off"
    amp: Literal["auto", "bf16", "off"] = "auto"
    # with bf16 autocast: bf16 working copies of the matmul/conv weights, written once per step from the fp32
    # weights, instead of autocast casting every weight at every use (single process, not with compile)
    bf16_weights: bool = True
    # keep image tensors in channels_last memory format (faster convolutions on GPUs)
    channels_last: bool = False
    # torch.compile the policy's forward
    compile: bool = False
    # capture forward+backward+optimizer in a CUDA graph: "auto" (on CUDA in a single process, with a warning
    # saying why when a config cannot be captured; off elsewhere), true (an error if it cannot), false
    cuda_graphs: bool | Literal["auto"] = "auto"
    # EMA of the weights (decay per step, e.g. 0.999): checkpoints and validation use the averaged weights,
    # training continues from the raw ones; 0 disables
    ema_decay: float = 0.0
    # torch CPU threads for this process (0 leaves torch's default)
    num_threads: int = 0

    def __post_init__(self) -> None:
        _check_finite(self, "")
        _check(
            0 <= self.seed <= 2**32 - 1, "seed", "0 <= x <= 2**32 - 1 (numpy's and torch's seeds)", self.seed
        )
        _check(self.steps >= 1, "steps", ">= 1", self.steps)
        # "" is not "unset": --set init_from= trained from scratch without a word
        _check(self.init_from is None or str(self.init_from).strip() != "", "init_from",
               "a policy bundle directory, or null for none", self.init_from)  # fmt: skip
        _check(self.batch_size >= 1, "batch_size", ">= 1", self.batch_size)
        _check(self.num_threads >= 0, "num_threads", ">= 0", self.num_threads)
        _check(0.0 <= self.ema_decay < 1.0, "ema_decay", "0 (off) or 0 < x < 1", self.ema_decay)
        graphs = self.cuda_graphs
        _check(graphs in (True, False, "auto"), "cuda_graphs", "auto, true or false", graphs)
        _check(
            self.policy is None
            or (dataclasses.is_dataclass(self.policy) and isinstance(self.policy, PolicyConfig)),
            "policy",
            "an actlab.policies config dataclass",
            type(self.policy).__name__,
        )
        if self.policy is not None:
            _check_finite(self.policy, "policy.")
            # a one-step chunk reaches the sampler as a single frame, not a window: the trainer failed
            # after decoding every frame with "the training batch has no 'action_is_pad'"
            _check(
                getattr(self.policy, "chunk_size", 2) >= 2,
                "policy.chunk_size",
                ">= 2 to train (an action chunk; 1 is single-step behaviour cloning, not supported)",
                getattr(self.policy, "chunk_size", None),
            )
        _check_ceilings(self)

    @property
    def policy_type(self) -> str | None:
        """The registry name of the policy (``"act"``, ``"act_relative"``), or None without a policy."""
        if self.policy is None:
            return None
        return self.policy.type


# Keys that may change between an interrupted run and its resumption: they do not change what the model,
# the optimizer or the sampler compute up to the resumed step (see docs/training.md).
RESUMABLE_CHANGES = (
    "name",
    "steps",
    "device",
    "num_threads",
    "eval.every",
    "eval.batches",
    "checkpoint.every",
    "checkpoint.keep_last",
    "checkpoint.keep_best",
    "checkpoint.disk_limit_bytes",
    "log.",
    "data.path",
    "data.cache_dir",
)


# Keys that config.json files written by earlier versions may hold and that are ignored when read:
# kill_at_step, a test hook, is now the environment variable ACTLAB_TEST_KILL_AT_STEP (training.loop).
RETIRED_KEYS = ("kill_at_step",)


def config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    """JSON-ready dict; the policy section carries its ``type`` so it can be rebuilt."""
    d = cfgutil.to_dict(cfg)
    if cfg.policy is not None:
        d["policy"] = {"type": cfg.policy_type, **{k: v for k, v in d["policy"].items() if k != "type"}}
    return d


def config_from_dict(data: dict[str, Any], where: str = "config") -> TrainConfig:
    """Inverse of :func:`config_to_dict`; unknown keys fail with a did-you-mean."""
    data = dict(data)
    policy = data.pop("policy", None)
    for key in RETIRED_KEYS:
        data.pop(key, None)
    cfg = cfgutil.from_dict(TrainConfig, data)
    if policy is not None:
        cfg = dataclasses.replace(cfg, policy=policy_config_from_dict(policy, where=f"{where}: policy"))
    return cfg


def policy_config_from_dict(data: dict[str, Any], where: str = "policy") -> PolicyConfig:
    """Build a policy config dataclass from ``{"type": ..., **fields}`` via the policies registry."""
    data = dict(data)
    ptype = data.pop("type", None)
    cls = policy_config_class(ptype)
    if "type" in {f.name for f in dataclasses.fields(cls) if f.init}:
        data["type"] = ptype
    return cfgutil.from_dict(cls, data, where="policy")


def policy_config_class(ptype: str | None) -> type[PolicyConfig]:
    """The config class registered for a policy type (the registry imports without torch)."""
    return get_config_class(str(ptype))


def apply_train_overrides(cfg: TrainConfig, overrides: list[str]) -> TrainConfig:
    """Apply ``key=value`` overrides (typed by the field annotations; unknown keys get a did-you-mean).

    ``policy.type=NAME`` swaps the policy config class, keeping the fields both classes share; the other
    ``policy.*`` overrides are then applied while the new class is built, so
    ``--set policy.type=act_relative --set policy.rtc_max_delay=2`` works in either order.
    """
    parsed = {o: cfgutil.split_override(o) for o in overrides}
    if any(key == "policy.type" and value is not None for key, value in parsed.values()):
        # an item without "=" stays behind for apply_overrides to refuse
        policy_items = [o for o, (k, v) in parsed.items() if k.startswith("policy.") and v is not None]
        cfg = dataclasses.replace(cfg, policy=_switch_policy_type(cfg.policy, policy_items))
        overrides = [o for o in overrides if o not in policy_items]
    overrides = _rederive_backbone_fields(cfg.policy, overrides)
    for item in overrides:
        key = cfgutil.override_key(item)
        if key.startswith("policy.") and cfg.policy is None:
            raise ActlabError(
                "this config has no policy section to override",
                field=key,
                fix="start from a preset (--preset NAME)",
            )
    return cfgutil.apply_overrides(cfg, overrides)


# --set keys a resolved config ignores: refused (refuse_inert_train_overrides) rather than accepted
INERT_KEYS: tuple[cfgutil.Inert, ...] = (
    cfgutil.Inert(
        ("policy.kl_weight", "policy.n_vae_encoder_layers"),
        lambda c: c.policy is not None and getattr(c.policy, "use_vae", True) is False,
        "policy.use_vae=false (no VAE encoder, no KL term)",
        "policy.use_vae=true",
    ),
    cfgutil.Inert(
        ("policy.correction_hidden_dim",),
        lambda c: c.policy is not None and getattr(c.policy, "correction_head", True) is False,
        "policy.correction_head=false (no correction head)",
        "policy.correction_head=true",
    ),
    cfgutil.Inert(
        ("overfit.loss_threshold", "overfit.max_steps"),
        lambda c: not c.overfit.samples,
        "overfit.samples=0 (normal training, no overfit check)",
        "--overfit N (or overfit.samples=N)",
    ),
    cfgutil.Inert(
        ("schedule.min_lr_ratio",),
        lambda c: c.schedule.kind == "constant",
        "schedule.kind=constant (the lr is held, never decayed)",
        "schedule.kind=cosine",
    ),
    cfgutil.Inert(
        ("log.wandb_project",),
        lambda c: not c.log.wandb,
        "log.wandb=false (nothing is sent to Weights & Biases)",
        "log.wandb=true",
    ),
)


def refuse_inert_train_overrides(cfg: TrainConfig, overrides: list[str]) -> None:
    """Refuse a ``--set`` the resolved training config ignores (:data:`INERT_KEYS`), before any work."""
    cfgutil.refuse_inert_overrides(cfg, overrides, INERT_KEYS)


def _rederive_backbone_fields(policy: PolicyConfig | None, overrides: list[str]) -> list[str]:
    """Fields a built config derived from ``vision_backbone`` are derived again when the overrides switch
    it, unless the same overrides set them.

    A built config holds resolved values: ``freeze_backbone`` (null -> frozen for ViTs, trained for CNNs)
    and ``pretrained_backbone_weights`` ("imagenet" -> the ViT family's default hub id). Kept as they were,
    ``--set policy.vision_backbone=clip_vit`` on a ResNet preset would fine-tune the whole ViT, and
    ``siglip_vit`` on the aloha_clip preset would load CLIP's checkpoint into SigLIP."""
    keys = {k: v for k, v in map(cfgutil.split_override, overrides) if v is not None}
    new = keys.get("policy.vision_backbone")
    old = getattr(policy, "vision_backbone", None)
    if new is None or old is None or new == old:
        return overrides
    extra = []
    if "policy.freeze_backbone" not in keys and (new in VIT_BACKBONES) != (old in VIT_BACKBONES):
        extra.append("policy.freeze_backbone=null")
    weights = policy.pretrained_backbone_weights
    if "policy.pretrained_backbone_weights" not in keys and weights == VIT_DEFAULT_WEIGHTS.get(old, ""):
        extra.append("policy.pretrained_backbone_weights=imagenet")  # resolved again for the new backbone
    return [*overrides, *extra]


def _switch_policy_type(old: PolicyConfig | None, items: list[str]) -> PolicyConfig:
    values = {k[len("policy.") :]: v for k, v in map(cfgutil.split_override, items)}
    new_type = values.pop("type")
    cls = policy_config_class(new_type)
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    data = {} if old is None else {k: v for k, v in cfgutil.to_dict(old).items() if k in names}
    data["type"] = new_type
    for key, raw in values.items():
        if key not in names:
            raise cfgutil.unknown_name_error("config key", f"policy.{key}", [f"policy.{n}" for n in names])
        data[key] = cfgutil.parse_scalar(raw, hints[key])  # coerced and validated with the rest by from_dict
    return cfgutil.from_dict(cls, data, where="policy")


# Fields added after runs were written, at the value that changes nothing (the run of a config without the
# field trains the same): hashed as if absent, so an earlier run's config_hash stays what it wrote.
ADDED_FIELD_DEFAULTS: dict[str, Any] = {
    "policy.correction_head": False,
    "policy.correction_hidden_dim": 128,
    "policy.correction_images": False,
    "policy.correction_only": False,
    "policy.correction_cameras": [],  # flattened as a list: every camera
}


def config_hash(cfg: TrainConfig) -> str:
    """Hash of everything that must match for a bitwise resume (RESUMABLE_CHANGES excluded; an added field
    at its no-op default as if absent)."""
    flat = {
        k: v
        for k, v in flatten_config(cfg).items()
        if k not in ADDED_FIELD_DEFAULTS or ADDED_FIELD_DEFAULTS[k] != v
    }
    return rundir.config_hash(flat, RESUMABLE_CHANGES)


def flatten_config(cfg: TrainConfig) -> dict[str, Any]:
    """``{"optim.lr": 1e-5, "policy.dim_model": 512, ...}`` with the policy type included."""
    return cfgutil.flatten(config_to_dict(cfg))


def resume_diff(saved: TrainConfig, current: TrainConfig) -> dict[str, tuple[Any, Any]]:
    """Keys that differ between a saved run and the current config and may not change on resume."""
    return rundir.resume_diff(flatten_config(saved), flatten_config(current), RESUMABLE_CHANGES)


def describe_config(cfg: TrainConfig) -> list[tuple[str, Any, str]]:
    """``(key, value, comment)`` for every overridable key (``actlab.utils.presets.describe_config``)."""
    return presets_util.describe_config(cfg)
