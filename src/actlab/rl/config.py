"""The config of an RL run (``actlab rl train``): one frozen dataclass per section, validated before
anything is built, and named presets overridable with ``--set section.key=value`` (the mechanism of
``actlab train``: :mod:`actlab.utils.presets`).

``RLConfig`` groups the sections ``env`` (task, envs, reward, action bound), ``obs`` (what the actor sees),
``sac`` (the learner), ``residual`` (the guard of a residual run: the base measured first, the paired
comparison, the growing bound, the size penalty, roll-back), ``eval``, ``checkpoint`` and ``log`` with the
run-level fields (base, demos, budget, seed, device). Runs written before the sections (a flat
``config.json``, version 1) are converted when read: :func:`config_from_dict`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from actlab.errors import ActlabError
from actlab.policies.configs import VIT_BACKBONES
from actlab.utils import config as cfgutil
from actlab.utils.config import unknown_name_error
from actlab.utils.presets import Preset, PresetTable

TASKS = ("reach", "pick_place")
TRAIN_SEED_BASE = 10_000_000  # training episodes are seeded from here up (see RLConfig.seed)
ENCODERS = ("none", "cnn", "frozen", "vit")
# obs.encoder="vit" backbones: actlab's per-frame ViTs, and VideoMAE (a video transformer over the last
# frame_stack frames, transformers' VideoMAEModel)
RL_VIT_BACKBONES = (*VIT_BACKBONES, "videomae")
REWARDS = ("sparse", "shaped", "classifier")
PRIVILEGED = ("auto", "on", "off")
CONFIG_VERSION = 2  # 1: the flat layout of the first RL runs (no "version" key); 2: sections

_BIG = 10_000_000_000  # env-step counts: far beyond any run (a 2-core CPU collects ~1e3 per second)
_SEED = 2**31 - 1

Limits = dict[str, tuple[float, float, bool, bool]]


def check_ranges(cfg: Any, limits: Limits, prefix: str = "") -> None:
    """Refuse a field of ``cfg`` outside its ``(low, high, low_open, high_open)`` range (NaN and inf
    included: no comparison with NaN holds), naming it as ``prefix + name``; None values are not checked
    (an unset optional field). The upper limits are far beyond what a run uses, low enough that a typo
    (utd=1e9, num_envs=1e5) is refused before it runs."""
    for name, (lo, hi, lo_open, hi_open) in limits.items():
        value = getattr(cfg, name)
        if value is None:
            continue
        above = value > lo if lo_open else value >= lo
        below = value < hi if hi_open else value <= hi
        if not (above and below):
            key = prefix + name
            # a whole limit written whole: "seed <= 2.14748e+09" refused 2147483648, which %g prints as
            # that very number (26th fault run, rm_seed_2147483648)
            high = str(int(hi)) if float(hi).is_integer() and abs(hi) < 1e15 else f"{hi:g}"
            span = f"{lo} {'<' if lo_open else '<='} {key} {'<' if hi_open else '<='} {high}"
            raise ActlabError(
                f"invalid RL config value for {key}",
                field=key,
                expected=span,
                found=value,
                fix=f"--set {key}=VALUE with {span}",
            )


def _check(ok: bool, field: str, expected: str, found: object, fix: str | None = None) -> None:
    if not ok:
        raise ActlabError(
            f"invalid RL config value for {field}", field=field, expected=expected, found=found, fix=fix
        )


def _choice(value: str, field: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise unknown_name_error(field, value, choices)


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    # "reach": move the grasp point to a commanded 3D target (reduced task, learnable from scratch);
    # "pick_place": the sim's SO-101 pick-and-place (with --base: residual RL on a frozen chunk policy)
    task: str = "reach"
    # sim envs stepped in lockstep per round (one batched actor call per step)
    num_envs: int = 4
    # episode length limit (control steps at 30 Hz)
    max_steps: int = 50
    # "sparse" (success), "shaped" (phase/distance terms), "classifier" (a success classifier's output)
    reward: str = "sparse"
    # success-classifier directory (reward="classifier"), written by `actlab rl reward-model`
    reward_model: str | None = None
    # bound of an action per joint (deg): a joint delta from scratch, or the residual on the base
    action_scale_deg: float = 5.0

    LIMITS = {
        "num_envs": (1, 256, False, False),
        "max_steps": (1, 100_000, False, False),
        "action_scale_deg": (0, 180, True, False),
    }

    def __post_init__(self) -> None:
        _choice(self.task, "env.task", TASKS)
        _choice(self.reward, "env.reward", REWARDS)
        check_ranges(self, self.LIMITS, "env.")
        _check(
            self.reward != "classifier" or bool(self.reward_model),
            "env.reward_model",
            "a success-classifier directory with env.reward=classifier",
            self.reward_model,
            "train one with `actlab rl reward-model` and pass --set env.reward_model=DIR",
        )


@dataclasses.dataclass(frozen=True)
class ObsConfig:
    # actor's image input: "none" (joint state only), "cnn" (small 2D CNN trained by the critic's loss;
    # frame_stack > 1 stacks the last K frames on the channel axis), "frozen" (the base bundle's own
    # pretrained backbone, frozen, global-average-pooled; features computed once per env step), "vit"
    # (one of actlab's ViT backbones, vision_backbone, frozen, pooled: no base needed; features computed
    # once per env step and stored in the replay buffer)
    encoder: str = "none"
    # frames stacked: encoder="cnn" on the channel axis (1: the 2D CNN, K > 1: frame-stack CNN);
    # encoder="vit": the pooled features of the last K frames concatenated (each frame encoded once)
    frame_stack: int = 1
    # encoder="vit": clip_vit, siglip_vit, dinov2_vit (per frame) or videomae (one clip of the last
    # frame_stack frames per env step; frame_stack = the model's num_frames, a multiple of its tubelet 2)
    vision_backbone: str = "dinov2_vit"
    # encoder="vit": a hub id or a local save_pretrained directory; "imagenet" the family's default hub id
    # (the training configs' naming: openai/clip-vit-base-patch32, google/siglip-base-patch16-224,
    # facebook/dinov2-small); null: random weights of vit_config's size (tests, offline)
    pretrained_backbone_weights: str | None = "imagenet"
    # encoder="vit" with random weights: transformers vision-config fields over the family's default size
    vit_config: dict[str, Any] | None = None
    # encoder="vit": side (px) frames are resized to before the ViT; null: the family's default input
    # (its config's image_size; DINOv2 at most 224 px); must be a multiple of the patch size
    downscale_img_square: int | None = None
    # sim cameras the actor sees (encoder != "none"); () with a base: its own
    cameras: tuple[str, ...] = ()
    # rendered camera size (px) for encoder="cnn"; a base renders at its own size
    image_size: int = 64
    # critic input: "on" adds privileged sim state (cube, bowl and grasp positions, phase flags) to what
    # the actor sees (asymmetric actor-critic); "auto" = on unless demos are given (a LeRobot dataset has no
    # sim state); "off" gives the critic the actor's inputs
    privileged: str = "auto"

    LIMITS = {
        "frame_stack": (1, 64, False, False),
        "image_size": (8, 1024, False, False),
        "downscale_img_square": (8, 4096, False, False),
    }

    def __post_init__(self) -> None:
        _choice(self.encoder, "obs.encoder", ENCODERS)
        _choice(self.privileged, "obs.privileged", PRIVILEGED)
        _choice(self.vision_backbone, "obs.vision_backbone", RL_VIT_BACKBONES)
        check_ranges(self, self.LIMITS, "obs.")
        _check(
            self.encoder not in ("cnn", "vit") or bool(self.cameras),
            "obs.cameras",
            f"at least one camera with obs.encoder={self.encoder}",
            self.cameras,
            "--set obs.cameras=wrist",
        )


@dataclasses.dataclass(frozen=True)
class SACConfig:
    # uniform random actions before the actor acts (0: the actor from the start)
    random_steps: int = 1_000
    # no update before this many transitions are stored
    learning_starts: int = 500
    # no actor (and temperature) update before this many transitions: the critic first learns the value of
    # the current policy (residual RL: the zero residual, i.e. the base), so a random critic cannot push
    # the residual away from the base before it knows anything
    actor_starts: int = 0
    # gradient updates per transition collected (update-to-data ratio)
    utd: float = 1.0
    # transitions per update (half from demos when demos are given: RLPD)
    batch_size: int = 256
    # replay capacity (transitions); kept on the training device
    buffer_size: int = 100_000
    # demonstration episodes read from the demos dataset (the first N)
    demo_episodes: int = 30
    # width of the actor and critic MLPs (two hidden layers)
    hidden: int = 256
    # critic ensemble size (twin critics = 2); the target is the min over them
    num_critics: int = 2
    # Adam learning rate of actor, critics and temperature
    lr: float = 3e-4
    # discount per control step
    gamma: float = 0.99
    # Polyak factor of the target critics
    tau: float = 0.005
    # n-step returns (1: plain TD)
    n_step: int = 1
    # initial entropy temperature
    init_alpha: float = 0.1
    # the actor's initial standard deviation (pre-tanh, in units of env.action_scale_deg); residual RL: the
    # exploration noise the base is first run with (its mean starts at exactly zero)
    init_std: float = 0.37
    # target entropy = -scale * action dims
    target_entropy_scale: float = 1.0

    LIMITS = {
        "random_steps": (0, _BIG, False, False),
        "learning_starts": (0, _BIG, False, False),
        "actor_starts": (0, _BIG, False, False),
        "utd": (0, 64, True, False),
        "batch_size": (1, 65_536, False, False),
        "buffer_size": (1, 100_000_000, False, False),
        "demo_episodes": (1, 1_000_000, False, False),
        "hidden": (1, 8192, False, False),
        "num_critics": (2, 32, False, False),
        "lr": (0, 1, True, False),
        "gamma": (0, 1, True, True),
        "tau": (0, 1, True, False),
        "n_step": (1, 1000, False, False),
        "init_alpha": (0, 100, True, False),
        "init_std": (0, 10, True, False),
        "target_entropy_scale": (0, 10, False, False),
    }

    def __post_init__(self) -> None:
        check_ranges(self, self.LIMITS, "sac.")
        _check(
            self.batch_size <= self.buffer_size,
            "sac.batch_size",
            f"<= sac.buffer_size ({self.buffer_size})",
            self.batch_size,
        )


@dataclasses.dataclass(frozen=True)
class ResidualConfig:
    """The guard of a residual run (--base): never hand back a policy worse than the base."""

    # significance of the paired test (McNemar's exact test over the evaluation seeds): a residual is
    # "better" (handed back in best.json) or "worse" only at p < alpha
    alpha: float = 0.05
    # the residual's bound as a fraction of env.action_scale_deg at the start (Policy Decorator's
    # progressive widening); 1: the full bound from the start (the first runs' behaviour)
    bound_start: float = 1.0
    # after an evaluation where the residual is not below the base the bound is multiplied by this (capped
    # at 1); after a roll-back it is divided by it
    bound_growth: float = 2.0
    # weight of the mean squared residual (in units of the bound) added to the actor's loss: keeps the
    # residual small where the critic sees no gain (0: off)
    penalty: float = 0.0
    # a base that solves fewer than this fraction of the evaluation seeds when the run measures it is weak:
    # its residual starts at the full bound with no size penalty (0: never). A weak base has little to lose
    # and needs large corrections: on the demo's step 500 (21/100 fresh seeds) the narrow start (bound
    # 0.25, penalty 0.1) reached 41/100 in 60k env steps; the full bound lifted a 16 % base to 81 % in
    # 62k (docs/rl.md). The guard still hands back the base until a residual is significantly better.
    weak_below: float = 0.0
    # consecutive evaluations below the base (fewer successes on the same seeds) that roll the residual
    # back to the last one not below the base (or to zero); 0: never roll back
    patience: int = 2
    # roll-backs after which the run stops (stopped="regressed"); the handed-back policy stays the base
    # unless a residual was significantly better
    max_rollbacks: int = 2
    # a run that ends handing back the base, its last evaluation not below it: that residual and the base
    # again on this many fresh seeds (confirm_seed + i), paired; the residual is handed back when it is
    # significantly better there (0: no confirmation). The in-run evaluations' few seeds cannot tell a
    # 10-point gain from noise: a run on the demo's step 1000 scored 26 vs 23 of 30 (p = 0.25), and its
    # residual 86 vs 75 of 100 fresh seeds (p = 0.013). ~3 minutes on 2 CPU cores for 2 x 100 episodes.
    confirm_episodes: int = 100
    # seed of the confirmation's episode 0: apart from the evaluation seeds (eval.seed, 100000..), the
    # report's default (200000..) and the training seeds (10,000,000 up)
    confirm_seed: int = 300_000

    LIMITS = {
        "alpha": (0, 0.5, True, False),
        "bound_start": (0, 1, True, False),
        "bound_growth": (1, 100, False, False),
        "penalty": (0, 1e6, False, False),
        "weak_below": (0, 1, False, False),
        "patience": (0, 1000, False, False),
        "max_rollbacks": (0, 1000, False, False),
        "confirm_episodes": (0, 100_000, False, False),
        "confirm_seed": (0, _SEED, False, False),
    }

    def __post_init__(self) -> None:
        check_ranges(self, self.LIMITS, "residual.")


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    # evaluate through the harness every this many env steps (0: only at the end)
    every: int = 5_000
    # episodes per evaluation (fixed seeds: eval.seed + i; a residual run measures the base on them first)
    episodes: int = 20
    # seed of evaluation episode 0 (kept apart from training seeds)
    seed: int = 100_000

    LIMITS = {
        "every": (0, _BIG, False, False),
        "episodes": (1, 1_000_000, False, False),
        "seed": (0, _SEED, False, False),
    }

    def __post_init__(self) -> None:
        check_ranges(self, self.LIMITS, "eval.")


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    # checkpoint every this many env steps (at the end of a round)
    every: int = 5_000
    # checkpoints kept (the one best.json names is kept besides)
    keep_last: int = 3

    LIMITS = {"every": (0, _BIG, False, False), "keep_last": (1, 10_000, False, False)}

    def __post_init__(self) -> None:
        check_ranges(self, self.LIMITS, "checkpoint.")


@dataclasses.dataclass(frozen=True)
class LogConfig:
    # log a metrics row every this many rounds
    every: int = 1
    # also log to run_dir/tensorboard (needs the tensorboard extra)
    tensorboard: bool = False
    # also log to Weights & Biases (needs the wandb extra)
    wandb: bool = False

    LIMITS = {"every": (1, 1_000_000, False, False)}

    def __post_init__(self) -> None:
        check_ranges(self, self.LIMITS, "log.")


@dataclasses.dataclass(frozen=True)
class RLConfig:
    """Everything an SAC run depends on. Env steps count transitions (one per env per control step)."""

    # where a refused --set key's fix sends the user (utils.config.keys_help)
    KEYS_HELP: ClassVar[str] = "`actlab rl train --help-config` lists every key with its meaning"

    # preset name (recorded in config.json)
    name: str = "custom"
    # layout of this config (2: sections); a config.json without it is the flat layout 1, converted
    version: int = CONFIG_VERSION
    # frozen chunk-policy bundle; set: residual RL (the base is never updated)
    base: str | None = None
    # LeRobot dataset of demonstrations (RLPD: half of every batch)
    demos: str | None = None
    # stop after this many transitions
    total_env_steps: int = 20_000
    # also stop after the round in which this much wall time passed (0: none)
    time_limit_s: float = 0.0
    # torch seed; training episode k is reset with TRAIN_SEED_BASE * (seed + 1) + k: away from the seeds
    # recordings (0, 1, ...) and evaluations (eval.seed) use, so the residual is not trained on the very
    # scenes the base policy was cloned from (a first run that was learned on them, see docs/rl.md)
    seed: int = 0
    # training device (the replay buffer lives there too)
    device: str = "cpu"
    # torch threads (1: best for small nets on a shared CPU)
    threads: int = 1
    # task, envs, reward, action bound
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    # what the actor (and the critic) sees
    obs: ObsConfig = dataclasses.field(default_factory=ObsConfig)
    # the SAC learner
    sac: SACConfig = dataclasses.field(default_factory=SACConfig)
    # the guard of a residual run
    residual: ResidualConfig = dataclasses.field(default_factory=ResidualConfig)
    # harness evaluations during training
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    # checkpoint cadence and retention
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    # metrics logging
    log: LogConfig = dataclasses.field(default_factory=LogConfig)

    LIMITS = {
        "total_env_steps": (1, _BIG, False, False),
        "time_limit_s": (0, 365 * 86_400, False, False),
        "seed": (0, _SEED, False, False),
        "threads": (1, 1024, False, False),
    }

    def __post_init__(self) -> None:
        _check(self.version == CONFIG_VERSION, "version", str(CONFIG_VERSION), self.version,
               "a config.json of another layout is converted when read (config_from_dict)")  # fmt: skip
        check_ranges(self, self.LIMITS)
        for key in ("base", "demos"):  # "" is not "unset": it named the current directory
            value = getattr(self, key)
            _check(value is None or str(value).strip() != "", key, "a path, or null for none", value)
        if self.base is not None:
            _check(self.env.task == "pick_place", "env.task", "pick_place (a base policy acts on it)",
                   self.env.task, "add --set env.task=pick_place (a base policy is a pick-and-place "
                   "policy of actlab train)")  # fmt: skip
        if self.env.reward == "classifier":
            _check(
                self.obs.encoder == "frozen" and self.base is not None,
                "env.reward",
                "the success classifier reads the frozen base backbone's features",
                self.env.reward,
                "use it with --base BUNDLE and obs.encoder=frozen (the residual preset)",
            )

    def check_runnable(self) -> None:
        """What a preset may leave open but a run may not (checked when a run starts): a frozen encoder
        needs the base whose backbone it is."""
        if self.obs.encoder == "frozen" and self.base is None:
            raise ActlabError(
                "obs.encoder=frozen uses the base bundle's pretrained backbone",
                field="obs.encoder",
                fix="pass --base BUNDLE, or use obs.encoder=cnn",
            )
        self._check_confirm_seeds()

    def _check_confirm_seeds(self) -> None:
        """The confirmation's seeds are fresh: apart from the evaluation seeds the residual was picked on
        and from the training episodes. `residual.confirm_seed=100000` confirmed on the evaluation seeds,
        said as "2 fresh seeds 100000..100001", exit 0 (25th fault run, rr_residual_confirm_seed_100000):
        the selection bias the confirmation exists to remove."""
        r, e = self.residual, self.eval
        if self.base is None or r.confirm_episodes == 0:
            return
        confirm = (r.confirm_seed, r.confirm_seed + r.confirm_episodes)
        train0 = TRAIN_SEED_BASE * (self.seed + 1)
        for name, lo, hi in (
            (
                f"the evaluation seeds (eval.seed {e.seed} + eval.episodes {e.episodes})",
                e.seed,
                e.seed + e.episodes,
            ),
            (
                f"the training episodes' seeds (from {train0}: seed {self.seed})",
                train0,
                train0 + TRAIN_SEED_BASE,
            ),
        ):
            if confirm[0] < hi and lo < confirm[1]:
                raise ActlabError(
                    "the confirmation's seeds are not fresh: they overlap " + name,
                    field="residual.confirm_seed",
                    expected=f"confirm_seed .. confirm_seed + confirm_episodes apart from {lo}..{hi - 1}",
                    found=f"{confirm[0]}..{confirm[1] - 1} (residual.confirm_seed {r.confirm_seed}, "
                    f"residual.confirm_episodes {r.confirm_episodes})",
                    fix=f"--set residual.confirm_seed={hi} (past them; the default 300000 is apart from the "
                    "defaults of both), or residual.confirm_episodes=0 for no confirmation (nothing was run)",
                )

    @property
    def residual_rl(self) -> bool:
        """Residual RL on a frozen base policy."""
        return self.base is not None

    @property
    def critic_privileged(self) -> bool:
        """Whether the critic reads privileged sim state (asymmetric actor-critic)."""
        return self.obs.privileged == "on" or (self.obs.privileged == "auto" and self.demos is None)


# Keys that may change when a run is resumed: budgets, cadence, sinks, and the base's path (its content is
# checked against the run's own copy by digest instead)
RESUMABLE = (
    "name",
    "total_env_steps",
    "time_limit_s",
    "eval.every",
    "eval.episodes",
    # the confirmation runs after training: it changes what is handed back, not what is trained
    "residual.confirm_episodes",
    "residual.confirm_seed",
    "checkpoint.",
    "log.",
    "base",
)

# The flat layout (version 1, the first RL runs) -> the sectioned key of each field.
_SECTIONS = {
    "env": ("task", "num_envs", "max_steps", "reward", "reward_model", "action_scale_deg"),
    "obs": ("encoder", "frame_stack", "vision_backbone", "pretrained_backbone_weights", "vit_config",
            "downscale_img_square", "cameras", "image_size", "privileged"),
    "sac": ("random_steps", "learning_starts", "actor_starts", "utd", "batch_size", "buffer_size",
            "demo_episodes", "hidden", "num_critics", "lr", "gamma", "tau", "n_step", "init_alpha",
            "target_entropy_scale"),
}  # fmt: skip
_TOP = ("name", "base", "demos", "total_env_steps", "time_limit_s", "seed", "device", "threads")
FLAT_KEYS: dict[str, str] = {
    **{k: f"{section}.{k}" for section, keys in _SECTIONS.items() for k in keys},
    **{k: k for k in _TOP},
    "residual_init_std": "sac.init_std",
    "eval_every": "eval.every",
    "eval_episodes": "eval.episodes",
    "eval_seed": "eval.seed",
    "checkpoint_every": "checkpoint.every",
    "keep_last": "checkpoint.keep_last",
    "log_every": "log.every",
    "tensorboard": "log.tensorboard",
    "wandb": "log.wandb",
}


def config_to_dict(cfg: RLConfig) -> dict[str, Any]:
    """JSON-ready dict (sections nested)."""
    return cfgutil.to_dict(cfg)


def config_from_dict(data: dict[str, Any], where: str = "RL config") -> RLConfig:
    """Inverse of :func:`config_to_dict`; a flat config.json of version 1 is converted first (its fields
    moved into their sections, the guard of a residual run at the first runs' behaviour: the full bound,
    no penalty, no roll-back). Unknown keys fail with a did-you-mean."""
    if not isinstance(data, dict):
        raise ActlabError("an RL config must be a JSON object", file=where, found=type(data).__name__)
    if "version" not in data:
        data = from_flat(data, where)
    return cfgutil.from_dict(RLConfig, data)


def from_flat(flat: dict[str, Any], where: str = "RL config") -> dict[str, Any]:
    """A version-1 (flat) config dict in the sectioned layout."""
    out: dict[str, Any] = {"version": CONFIG_VERSION, "residual": {"patience": 0, "bound_start": 1.0}}
    for key, value in flat.items():
        if key not in FLAT_KEYS:
            raise unknown_name_error(f"key of the flat (version 1) RL config {where}", key, FLAT_KEYS)
        node = out
        *sections, name = FLAT_KEYS[key].split(".")
        for s in sections:
            node = node.setdefault(s, {})
        node[name] = value
    return out


# --set keys a resolved RL config ignores: refused (refuse_inert_rl_overrides) rather than accepted
_VIT_KEYS = (
    "obs.vision_backbone",
    "obs.pretrained_backbone_weights",
    "obs.vit_config",
    "obs.downscale_img_square",
)
_RESIDUAL_KEYS = tuple(
    f"residual.{k}"
    for k in ("alpha", "bound_start", "bound_growth", "penalty", "weak_below", "patience", "max_rollbacks",
              "confirm_episodes", "confirm_seed")
)  # fmt: skip
INERT_KEYS: tuple[cfgutil.Inert, ...] = (
    cfgutil.Inert(
        ("env.reward_model",),
        lambda c: c.env.reward != "classifier",
        lambda c: f"env.reward={c.env.reward} (the reward model is read only by env.reward=classifier)",
        "env.reward=classifier",
    ),
    cfgutil.Inert(
        ("sac.demo_episodes",), lambda c: c.demos is None, "no demos (demos=null)", "--demos DATASET"
    ),
    cfgutil.Inert(_RESIDUAL_KEYS, lambda c: c.base is None, "no base (RL from scratch)", "--base BUNDLE"),
    cfgutil.Inert(
        ("obs.frame_stack", "obs.image_size", "obs.cameras"),
        lambda c: c.obs.encoder in ("none", "frozen"),
        lambda c: (
            f"obs.encoder={c.obs.encoder} ("
            + ("the actor sees no frames)" if c.obs.encoder == "none" else "the base's own cameras and size)")
        ),
        "obs.encoder=cnn or vit",
    ),
    cfgutil.Inert(
        _VIT_KEYS,
        lambda c: c.obs.encoder != "vit",
        lambda c: f"obs.encoder={c.obs.encoder}",
        "obs.encoder=vit",
    ),
)


def refuse_inert_rl_overrides(cfg: RLConfig, overrides: list[str]) -> None:
    """Refuse a ``--set`` the resolved RL config ignores (:data:`INERT_KEYS`), before any work."""
    cfgutil.refuse_inert_overrides(cfg, overrides, INERT_KEYS)


def apply_rl_overrides(cfg: RLConfig, overrides: list[str]) -> RLConfig:
    """``--set section.key=value`` overrides; a flat key of the first layout (``utd=2``) is refused naming
    its new key (``sac.utd``)."""
    for item in overrides:
        key, value = cfgutil.split_override(item)
        new = FLAT_KEYS.get(key)
        if value is not None and new is not None and new != key:
            raise ActlabError(
                f"the RL config key {key!r} is now {new!r} (the config has sections)",
                field=key,
                expected=new,
                found=item,
                fix=f"--set {new}={value} (--help-config lists every key)",
            )
    return cfgutil.apply_overrides(cfg, overrides)


def replace_keys(cfg: RLConfig, values: dict[str, Any]) -> RLConfig:
    """``cfg`` with dotted keys replaced (``{"sac.hidden": 32}``), validated as a whole."""
    data = config_to_dict(cfg)
    for key, value in values.items():
        node = data
        *sections, name = key.split(".")
        for s in sections:
            node = node[s]
        if name not in node:
            raise unknown_name_error("config key", key, cfgutil.flatten(data))
        node[name] = value
    return config_from_dict(data)


def smoke() -> RLConfig:
    """Under a minute on a CPU: SAC on joint state learns to reach most targets (scripts use it)."""
    return RLConfig(
        name="smoke",
        total_env_steps=3_000,
        env=EnvConfig(task="reach", num_envs=4, max_steps=40, reward="shaped"),
        sac=SACConfig(
            random_steps=400, learning_starts=400, utd=0.5, batch_size=128, hidden=64, lr=1e-3, gamma=0.9
        ),
        eval=EvalConfig(every=0, episodes=20),
        checkpoint=CheckpointConfig(every=1_000),
    )


def reach() -> RLConfig:
    """From scratch, joint state only: the reach task to >= 90% success (docs/rl.md gives the CPU budget)."""
    return RLConfig(
        name="reach",
        total_env_steps=30_000,
        env=EnvConfig(task="reach", num_envs=8, max_steps=50, reward="shaped"),
        sac=SACConfig(
            random_steps=1_000, learning_starts=1_000, utd=0.5, batch_size=256, hidden=128, lr=1e-3, gamma=0.9
        ),
        eval=EvalConfig(every=10_000, episodes=100),
        checkpoint=CheckpointConfig(every=10_000),
    )


def residual() -> RLConfig:
    """Residual SAC on a frozen chunk policy (--base) with RLPD demos (--demos), guarded: never hands back
    a policy worse than the base (docs/rl.md)."""
    return RLConfig(
        name="residual",
        total_env_steps=60_000,
        env=EnvConfig(task="pick_place", num_envs=8, max_steps=300, reward="sparse", action_scale_deg=4.0),
        obs=ObsConfig(encoder="frozen"),
        sac=SACConfig(
            random_steps=0,
            learning_starts=2_000,
            actor_starts=6_000,
            utd=0.5,
            batch_size=128,
            buffer_size=150_000,
            demo_episodes=100,
            hidden=128,  # 2-core CPU: updates are the bottleneck (docs/rl.md); 256 on a GPU
            n_step=3,
            lr=3e-4,
            gamma=0.99,
            init_alpha=0.01,
            init_std=0.135,  # 0.37 cost the base many grasps in training (docs/rl.md, run 1 vs 2)
        ),
        # the guard (docs/rl.md, "Never worse"): a quarter of the bound first, widened after each evaluation
        # not below the base; a small size penalty; two evaluations below the base roll back, two roll-backs
        # stop the run. A base under 50 % on the evaluation seeds starts at the full bound, no penalty.
        residual=ResidualConfig(
            bound_start=0.25, bound_growth=2.0, penalty=0.1, weak_below=0.5, patience=2, max_rollbacks=2
        ),
        eval=EvalConfig(every=6_000, episodes=30),  # = checkpoint.every: every evaluated policy is saved
        checkpoint=CheckpointConfig(every=6_000, keep_last=10),
    )


PRESETS: PresetTable[RLConfig] = PresetTable(
    "actlab rl train",
    {
        "smoke": Preset("SAC on joint state learns to reach most targets in under a minute on a CPU", smoke),
        "reach": Preset("from scratch, joint state only: the reach task to >= 90% (docs/rl.md)", reach),
        "residual": Preset(
            "residual SAC on a frozen chunk policy (--base) with demos (--demos); never worse than the base",
            residual,
        ),
    },
)


def list_presets() -> dict[str, str]:
    """Preset name -> its one-line description."""
    return PRESETS.describe()


def get_preset(name: str) -> RLConfig:
    """The named preset; an unknown name gets a did-you-mean."""
    return PRESETS.get(name)
