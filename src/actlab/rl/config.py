"""The config of an RL run (``actlab rl train``): one frozen dataclass, validated before anything is built,
and named presets overridable with ``--set key=value``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from actlab.errors import ActlabError
from actlab.policies.configs import VIT_BACKBONES
from actlab.utils.config import unknown_name_error

TASKS = ("reach", "pick_place")
TRAIN_SEED_BASE = 10_000_000  # training episodes are seeded from here up (see RLConfig.seed)
ENCODERS = ("none", "cnn", "frozen", "vit")
# encoder="vit" backbones: actlab's per-frame ViTs, and VideoMAE (a video transformer over the last
# frame_stack frames, transformers' VideoMAEModel)
RL_VIT_BACKBONES = (*VIT_BACKBONES, "videomae")
REWARDS = ("sparse", "shaped", "classifier")
PRIVILEGED = ("auto", "on", "off")


_BIG = 10_000_000_000  # env-step counts: far beyond any run (a 2-core CPU collects ~1e3 per second)
_SEED = 2**31 - 1

# (low, high, low_open, high_open) of every numeric field: NaN, inf and absurd sizes are refused when a
# config is built (a preset, --set, a saved config.json), naming the limit. The upper limits are far
# beyond what a run uses, low enough that a typo (utd=1e9, num_envs=1e5) is refused before it runs.
LIMITS: dict[str, tuple[float, float, bool, bool]] = {
    "frame_stack": (1, 64, False, False),
    "image_size": (8, 1024, False, False),
    "downscale_img_square": (8, 4096, False, False),
    "num_envs": (1, 256, False, False),
    "max_steps": (1, 100_000, False, False),
    "total_env_steps": (1, _BIG, False, False),
    "time_limit_s": (0, 365 * 86_400, False, False),
    "random_steps": (0, _BIG, False, False),
    "learning_starts": (0, _BIG, False, False),
    "actor_starts": (0, _BIG, False, False),
    "utd": (0, 64, True, False),
    "batch_size": (1, 65_536, False, False),
    "buffer_size": (1, 100_000_000, False, False),
    "hidden": (1, 8192, False, False),
    "num_critics": (2, 32, False, False),
    "lr": (0, 1, True, False),
    "gamma": (0, 1, True, True),
    "tau": (0, 1, True, False),
    "n_step": (1, 1000, False, False),
    "init_alpha": (0, 100, True, False),
    "residual_init_std": (0, 10, True, False),
    "target_entropy_scale": (0, 10, False, False),
    "action_scale_deg": (0, 180, True, False),
    "demo_episodes": (1, 1_000_000, False, False),
    "eval_every": (0, _BIG, False, False),
    "eval_episodes": (1, 1_000_000, False, False),
    "eval_seed": (0, _SEED, False, False),
    "checkpoint_every": (0, _BIG, False, False),
    "keep_last": (1, 10_000, False, False),
    "log_every": (1, 1_000_000, False, False),
    "seed": (0, _SEED, False, False),
    "threads": (1, 1024, False, False),
}


def check_ranges(cfg: Any, limits: dict[str, tuple[float, float, bool, bool]]) -> None:
    """Refuse a field of ``cfg`` outside its ``(low, high, low_open, high_open)`` range (NaN and inf
    included: no comparison with NaN holds); None values are not checked (an unset optional field)."""
    for name, (lo, hi, lo_open, hi_open) in limits.items():
        value = getattr(cfg, name)
        if value is None:
            continue
        above = value > lo if lo_open else value >= lo
        below = value < hi if hi_open else value <= hi
        if not (above and below):
            span = f"{lo} {'<' if lo_open else '<='} {name} {'<' if hi_open else '<='} {hi:g}"
            raise ActlabError(
                f"{name} is out of range",
                field=name,
                expected=span,
                found=value,
                fix=f"--set {name}=VALUE with {span}",
            )


@dataclasses.dataclass(frozen=True)
class RLConfig:
    """Everything an SAC run depends on. Env steps count transitions (one per env per control step)."""

    name: str = "custom"  # preset name (recorded in config.json)
    # "reach": move the grasp point to a commanded 3D target (reduced task, learnable from scratch);
    # "pick_place": the sim's SO-101 pick-and-place (with --base: residual RL on a frozen chunk policy)
    task: str = "reach"
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
    cameras: tuple[str, ...] = ()  # sim cameras the actor sees (encoder != "none"); () with a base: its own
    image_size: int = 64  # rendered camera size (px) for encoder="cnn"; a base renders at its own size
    num_envs: int = 4  # sim envs stepped in lockstep per round (one batched actor call per step)
    max_steps: int = 50  # episode length limit (control steps at 30 Hz)
    total_env_steps: int = 20_000  # stop after this many transitions
    time_limit_s: float = 0.0  # also stop after the round in which this much wall time passed (0: none)
    random_steps: int = 1_000  # uniform random actions before the actor acts (0: actor from the start)
    learning_starts: int = 500  # no update before this many transitions are stored
    # no actor (and temperature) update before this many transitions: the critic first learns the value of
    # the current policy (residual RL: the zero residual, i.e. the base), so a random critic cannot push
    # the residual away from the base before it knows anything
    actor_starts: int = 0
    utd: float = 1.0  # gradient updates per transition collected (update-to-data ratio)
    batch_size: int = 256  # transitions per update (half from demos when demos are given)
    buffer_size: int = 100_000  # replay capacity (transitions); kept on the training device
    hidden: int = 256  # width of the actor and critic MLPs (two hidden layers)
    num_critics: int = 2  # critic ensemble size (twin critics = 2); the target is the min over them
    lr: float = 3e-4  # Adam learning rate of actor, critics and temperature
    gamma: float = 0.99  # discount per control step
    tau: float = 0.005  # Polyak factor of the target critics
    n_step: int = 1  # n-step returns (1: plain TD)
    init_alpha: float = 0.1  # initial entropy temperature
    # residual RL: the actor's initial standard deviation (pre-tanh, in units of action_scale_deg); the
    # exploration noise the base is first run with (its mean starts at exactly zero)
    residual_init_std: float = 0.37
    target_entropy_scale: float = 1.0  # target entropy = -scale * action dims
    action_scale_deg: float = 5.0  # bound of an action per joint (deg): a joint delta, or the residual
    base: str | None = None  # frozen chunk-policy bundle; set: residual RL (the base is never updated)
    demos: str | None = None  # LeRobot dataset of demonstrations (RLPD: half of every batch)
    demo_episodes: int = 30  # demonstration episodes read from the dataset (the first N)
    reward: str = "sparse"  # "sparse" (success), "shaped" (phase/distance terms), "classifier"
    reward_model: str | None = None  # success-classifier directory (reward="classifier")
    # critic input: "on" adds privileged sim state (cube, bowl and grasp positions, phase flags) to what
    # the actor sees (asymmetric actor-critic); "auto" = on unless demos are given (a LeRobot dataset has no
    # sim state); "off" gives the critic the actor's inputs
    privileged: str = "auto"
    eval_every: int = 5_000  # evaluate through the harness every this many env steps (0: only at the end)
    eval_episodes: int = 20  # episodes per evaluation (fixed seeds: eval_seed + i)
    eval_seed: int = 100_000  # seed of evaluation episode 0 (kept apart from training seeds)
    checkpoint_every: int = 5_000  # checkpoint every this many env steps (at the end of a round)
    keep_last: int = 3  # checkpoints kept
    log_every: int = 1  # log a metrics row every this many rounds
    tensorboard: bool = False  # also log to run_dir/tensorboard (needs the tensorboard extra)
    wandb: bool = False  # also log to Weights & Biases (needs the wandb extra)
    # torch seed; training episode k is reset with TRAIN_SEED_BASE * (seed + 1) + k: away from the seeds
    # recordings (0, 1, ...) and evaluations (eval_seed) use, so the residual is not trained on the very
    # scenes the base policy was cloned from (a first run that was learned on them, see docs/rl.md)
    seed: int = 0
    device: str = "cpu"  # training device (the replay buffer lives there too)
    threads: int = 1  # torch threads (1: best for small nets on a shared CPU)

    def __post_init__(self) -> None:
        for name, choices in (
            ("task", TASKS),
            ("encoder", ENCODERS),
            ("reward", REWARDS),
            ("privileged", PRIVILEGED),
        ):
            if getattr(self, name) not in choices:
                raise unknown_name_error(name, getattr(self, name), choices)
        check_ranges(self, LIMITS)
        if self.encoder in ("cnn", "vit") and not self.cameras:
            raise ActlabError(
                f"encoder={self.encoder} needs cameras", field="cameras", fix="--set cameras=wrist"
            )
        if self.vision_backbone not in RL_VIT_BACKBONES:
            raise unknown_name_error("vision_backbone", self.vision_backbone, RL_VIT_BACKBONES)
        if self.base is not None and self.task != "pick_place":
            raise ActlabError("a base policy acts on pick_place", field="task", found=self.task)
        if self.reward == "classifier" and not self.reward_model:
            raise ActlabError(
                "reward=classifier needs a reward model",
                field="reward_model",
                fix="train one with `actlab rl reward-model` and pass --set reward_model=DIR",
            )
        if self.reward == "classifier" and (self.encoder != "frozen" or self.base is None):
            raise ActlabError(
                "the success classifier reads the frozen base backbone's features",
                field="reward",
                fix="use it with --base BUNDLE and encoder=frozen (the residual preset)",
            )
        if self.batch_size > self.buffer_size:
            raise ActlabError("batch_size > buffer_size", field="batch_size", found=self.batch_size)

    def check_runnable(self) -> None:
        """What a preset may leave open but a run may not (checked when a run starts): a frozen encoder
        needs the base whose backbone it is."""
        if self.encoder == "frozen" and self.base is None:
            raise ActlabError(
                "encoder=frozen uses the base bundle's pretrained backbone",
                field="encoder",
                fix="pass --base BUNDLE, or use encoder=cnn",
            )

    @property
    def residual(self) -> bool:
        """Residual RL on a frozen base policy."""
        return self.base is not None

    @property
    def critic_privileged(self) -> bool:
        """Whether the critic reads privileged sim state (asymmetric actor-critic)."""
        return self.privileged == "on" or (self.privileged == "auto" and self.demos is None)


def smoke() -> RLConfig:
    """Under a minute on a CPU: SAC on joint state learns to reach most targets (scripts use it)."""
    return RLConfig(
        name="smoke",
        task="reach",
        num_envs=4,
        max_steps=40,
        total_env_steps=3_000,
        random_steps=400,
        learning_starts=400,
        utd=0.5,
        batch_size=128,
        hidden=64,
        lr=1e-3,
        gamma=0.9,
        reward="shaped",
        eval_every=0,
        eval_episodes=20,
        checkpoint_every=1_000,
    )


def reach() -> RLConfig:
    """From scratch, joint state only: the reach task to >= 90% success (docs/rl.md gives the CPU budget)."""
    return RLConfig(
        name="reach",
        task="reach",
        num_envs=8,
        max_steps=50,
        total_env_steps=30_000,
        random_steps=1_000,
        learning_starts=1_000,
        utd=0.5,
        batch_size=256,
        hidden=128,
        lr=1e-3,
        gamma=0.9,
        reward="shaped",
        eval_every=10_000,
        eval_episodes=100,
        checkpoint_every=10_000,
    )


def residual() -> RLConfig:
    """Residual SAC on a frozen chunk policy (--base) with RLPD demos (--demos): frozen base-backbone
    features + joint state + the base action for the actor, sparse success reward."""
    return RLConfig(
        name="residual",
        task="pick_place",
        encoder="frozen",
        num_envs=8,
        max_steps=300,
        total_env_steps=60_000,
        random_steps=0,
        learning_starts=2_000,
        actor_starts=6_000,
        utd=0.5,
        batch_size=128,
        buffer_size=150_000,
        hidden=128,  # 2-core CPU: updates are the bottleneck (docs/rl.md); 256 on a GPU
        n_step=3,
        lr=3e-4,
        gamma=0.99,
        init_alpha=0.01,
        action_scale_deg=4.0,
        residual_init_std=0.135,  # 0.37 cost the base many grasps in training (docs/rl.md, run 1 vs 2)
        demo_episodes=100,
        reward="sparse",
        eval_every=6_000,  # = checkpoint_every: every evaluated policy is also saved
        eval_episodes=30,
        checkpoint_every=6_000,
        keep_last=10,
    )


PRESETS: dict[str, Callable[[], RLConfig]] = {"smoke": smoke, "reach": reach, "residual": residual}


def list_presets() -> dict[str, str]:
    """Preset name -> the first line of its docstring."""
    return {name: (fn.__doc__ or "").strip().splitlines()[0] for name, fn in PRESETS.items()}


def get_preset(name: str) -> RLConfig:
    """The named preset; an unknown name gets a did-you-mean."""
    if name not in PRESETS:
        raise unknown_name_error("RL preset", name, PRESETS, fix="actlab rl train --list-presets")
    return PRESETS[name]()
