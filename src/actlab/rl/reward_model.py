"""A learned success classifier as a reward (HIL-SERL's reward model): "does this frame look like success?"

Inputs: the frozen base backbone's spatial features of the cameras plus the joint state: what the
residual agent's actor already computes once per env step (``encoder=frozen``), so the reward costs one
small MLP per step and no second image pass.
Data: demonstration frames (the last ``success_frames`` of each successful episode are positives, the
first ``1 - tail_fraction`` of it negatives) and frames of the base policy's own rollouts in the sim,
labelled by the sim's success signal (failed rollouts are the negatives a classifier must not confuse
with success: a cube held above the bowl, a cube dropped beside it).
Split by episode into train / validation / held-out test; the decision threshold is tuned on validation
for balanced accuracy (not a default 0.5), and the held-out accuracy is reported with it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from actlab.errors import ActlabError
from actlab.policies import load_policy
from actlab.rl.agent import Agent
from actlab.rl.checkpoint import read_tensors
from actlab.rl.config import EnvConfig, ObsConfig, RLConfig, check_ranges
from actlab.rl.demos import check_demo_image_size, say_fewer_demos
from actlab.rl.inputs import check_base_task, check_demos
from actlab.utils.config import is_number, is_whole
from actlab.utils.io import atomic_dir, atomic_write_json, check_out_dir, read_json

MODEL_FILE = "reward_model.safetensors"
META_FILE = "reward_model.json"


# (low, high, low_open, high_open) of every numeric field (see actlab.rl.config.LIMITS)
REWARD_MODEL_LIMITS: dict[str, tuple[float, float, bool, bool]] = {
    "episodes": (1, 1_000_000, False, False),
    "success_frames": (1, 100_000, False, False),
    "tail_fraction": (0, 1, False, True),
    "rollouts": (1, 1_000_000, False, False),
    "rollout_envs": (1, 256, False, False),
    "max_steps": (1, 100_000, False, False),
    "hidden": (1, 8192, False, False),
    "steps": (1, 10_000_000, False, False),
    "lr": (0, 1, True, False),
    "val_fraction": (0, 1, True, True),
    "test_fraction": (0, 1, True, True),
    "seed": (0, 2**31 - 1, False, False),
}


# The output marker's command name (utils.io.atomic_dir): a later run may replace only what this wrote.
KIND = "actlab rl reward-model"


@dataclasses.dataclass(frozen=True)
class RewardModelConfig:
    """How the success classifier is trained."""

    episodes: int = 40  # demonstration episodes read (the first N)
    success_frames: int = 5  # last frames of a demonstration episode labelled success
    tail_fraction: float = 0.3  # frames near a demo's end that are neither (the cube may already be in)
    rollouts: int = 32  # base-policy rollouts in the sim (labelled by the sim's success signal)
    rollout_envs: int = 8  # envs per rollout round
    max_steps: int = 300  # rollout length limit
    hidden: int = 64  # classifier MLP width
    steps: int = 400  # full-batch Adam steps
    lr: float = 1e-3  # Adam learning rate
    val_fraction: float = 0.2  # episodes for threshold tuning
    test_fraction: float = 0.2  # held-out episodes for the reported accuracy
    seed: int = 0  # split, init and rollout seeds (rollout k: seed * 1_000_003 + 500_000 + k)

    def __post_init__(self) -> None:
        check_ranges(self, REWARD_MODEL_LIMITS)
        if (
            not 0 < self.val_fraction + self.test_fraction < 1
            or min(self.val_fraction, self.test_fraction) <= 0
        ):
            # rm_frac_sum: found was a Python tuple "(0.6, 0.6)", no expected, no fix
            raise ActlabError(
                "val_fraction and test_fraction must be positive and leave training episodes",
                field="val_fraction, test_fraction",
                expected="each > 0, val_fraction + test_fraction < 1 (the rest trains the classifier)",
                found=f"val_fraction={self.val_fraction:g}, test_fraction={self.test_fraction:g} "
                f"(sum {self.val_fraction + self.test_fraction:g})",
                fix="--set val_fraction=0.2 --set test_fraction=0.2 (the defaults), or two that sum below 1",
            )


def _inputs(vec: torch.Tensor) -> torch.Tensor:
    """Classifier input from the residual agent's actor vector [state, base action, frozen features]."""
    return torch.cat([vec[..., :6], vec[..., 12:]], dim=-1)


class SuccessClassifier(nn.Module):
    def __init__(self, inp: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(inp), nn.Linear(inp, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)  # (N,) logits


class RewardModel:
    """A trained classifier with its tuned threshold: reward 1 where P(success | next frame) > threshold."""

    def __init__(self, model: SuccessClassifier, threshold: float) -> None:
        self.model, self.threshold = model.eval(), threshold

    @torch.no_grad()
    def prob(self, vec: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.model(_inputs(vec.float())))

    def rewards(self, ep: Any) -> list[float]:
        """Per-step rewards of a training episode: the classifier on the observation after each step."""
        nxt = torch.stack([s["vec"] for s in ep.steps[1:]] + [ep.final["vec"]])  # (T, D)
        return (self.prob(nxt) > self.threshold).float().tolist()


def _probability(value: Any) -> bool:
    return is_number(value) and 0.0 <= value <= 1.0  # (NaN fails the comparison)


def _size(value: Any) -> bool:
    return is_whole(value) and value >= 1


def load_reward_model(path: str | Path) -> RewardModel:
    """A reward model directory written by ``actlab rl reward-model`` (loaded strictly)."""
    path = Path(path)
    meta = read_json(path / META_FILE, "reward model metadata")
    keys = ("input_dim", "hidden", "threshold")
    if not isinstance(meta, dict) or any(not isinstance(meta.get(k), (int, float)) for k in keys):
        raise ActlabError(
            "the reward model metadata is incomplete",
            file=path / META_FILE,
            expected=f"numbers for {', '.join(keys)}",
            found=meta,
            fix="train the reward model again with actlab rl reward-model",
        )
    # a threshold NaN or above 1 rewarded no step, below 0 every step, without a word (the classifier's
    # probability is compared with it); a size true or 390.5 built another classifier
    checks = {
        "threshold": (_probability(meta["threshold"]), "a probability from 0 to 1"),
        "input_dim": (_size(meta["input_dim"]), "a whole number >= 1"),
        "hidden": (_size(meta["hidden"]), "a whole number >= 1"),
    }
    for key, (ok, words) in checks.items():
        if not ok:
            raise ActlabError(
                "the reward model metadata holds a value actlab rl reward-model never writes (edited?)",
                file=path / META_FILE,
                field=key,
                expected=words,
                found=meta[key],
                fix="undo the edit, or train the reward model again with actlab rl reward-model",
            )
    model = SuccessClassifier(int(meta["input_dim"]), int(meta["hidden"]))
    state = read_tensors(path / MODEL_FILE)
    try:
        model.load_state_dict(state)  # strict: every tensor, no extra one
    except RuntimeError as e:
        raise ActlabError(
            "the reward model weights do not match its metadata",
            file=path / MODEL_FILE,
            expected=f"a classifier of input {meta['input_dim']} and width {meta['hidden']}",
            found=str(e).splitlines()[0][:300],
            fix="train the reward model again with actlab rl reward-model",
        ) from e
    return RewardModel(model, float(meta["threshold"]))


# ------------------------------------------------------------------------------------------------ data
def _demo_frames(cfg: RewardModelConfig, agent: Any, demos: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(vec (T, D), label (T,) float with NaN = unused) per demonstration episode."""
    from actlab.datasets import open_dataset  # lazy: the dataset reader (pyarrow, av) only for demos

    ds = open_dataset(demos)
    missing = [k for k in agent.image_keys if k not in ds.camera_keys]
    if missing:  # was "no camera 'observation.images.wrist' (did you mean ...?)", a typo nobody made
        raise ActlabError(
            "the demonstrations lack a camera the base policy reads",
            file=Path(demos) / "meta" / "info.json",
            field=", ".join(missing),
            expected=f"the base's cameras: {', '.join(agent.image_keys)}",
            found=f"the demonstrations' cameras: {', '.join(ds.camera_keys) or 'none'}",
            fix="pass demonstrations recorded with the base's cameras (actlab sim record --cameras ...), or "
            "a base trained on these cameras (nothing was trained)",
        )
    check_demo_image_size(agent, ds, demos)  # (actlab.rl.demos)
    states = ds.column("observation.state")
    out = []
    say_fewer_demos(demos, len(ds.episodes), cfg.episodes, "episodes")  # (actlab.rl.demos)
    for ep in ds.episodes[: cfg.episodes]:
        idx = np.arange(ep.start, ep.stop)
        frames = {
            k: torch.from_numpy(ds.read_frames(k, idx)).permute(0, 3, 1, 2).contiguous()
            for k in agent.image_keys
        }
        state = torch.from_numpy(np.asarray(states[idx], dtype=np.float32))
        agent.reset()
        vec = torch.cat(
            [
                agent.observe(
                    {"observation.state": state[t : t + 1], **{k: v[t : t + 1] for k, v in frames.items()}}
                )["vec"]
                for t in range(len(idx))
            ]
        )
        label = torch.full((len(idx),), float("nan"))
        label[: int(len(idx) * (1 - cfg.tail_fraction))] = 0.0
        label[-cfg.success_frames :] = 1.0
        out.append((vec, label))
    ds.close()
    return out


def _rollout_frames(cfg: RewardModelConfig, rlcfg: Any, agent: Any) -> tuple[list, int]:
    """(vec, label) per base rollout (label: the sim's is_success of that frame), and the failures."""
    from actlab.rl.envs import VecSim  # lazy: MuJoCo only when rollouts are collected

    sim = VecSim(rlcfg, agent)
    out, failures = [], 0
    try:
        k = 0
        while k < cfg.rollouts:
            seeds = [cfg.seed * 1_000_003 + 500_000 + k + i for i in range(cfg.rollout_envs)]
            for ep in sim.run_round(seeds, lambda o: torch.zeros(o["vec"].shape[0], 6), lambda n: None):
                vec = torch.stack([s["vec"] for s in ep.steps] + [ep.final["vec"]])
                label = torch.tensor([0.0] + [float(i["is_success"]) for i in ep.infos])
                out.append((vec, label))
                failures += not ep.success
            k += cfg.rollout_envs
    finally:
        sim.close()
    return out, failures


def _split_sizes(n: int, cfg: RewardModelConfig) -> tuple[int, int]:
    return max(1, round(n * cfg.val_fraction)), max(1, round(n * cfg.test_fraction))


def _split(n: int, cfg: RewardModelConfig) -> tuple[list[int], list[int], list[int]]:
    order = np.random.default_rng(cfg.seed).permutation(n).tolist()
    n_val, n_test = _split_sizes(n, cfg)
    return order[n_val + n_test :], order[:n_val], order[n_val : n_val + n_test]


def _check_episode_count(cfg: RewardModelConfig, demos: str | Path) -> int:
    """The demonstrations the run reads; refused before any work when demos and rollouts together cannot
    fill the train, validation and test splits (an empty training split was a torch.cat traceback, after
    every rollout had run)."""
    from actlab.datasets import open_dataset  # lazy, as in _demo_frames

    ds = open_dataset(demos)
    n_demos = min(cfg.episodes, len(ds.episodes))
    lengths = [ep.stop - ep.start for ep in ds.episodes[:n_demos]]
    ds.close()
    if lengths and cfg.success_frames >= min(lengths):
        # every frame of a demonstration was labelled success, its first included: "held-out accuracy
        # 1.000" on held-out frames that were all positives, exit 0 (26th fault run, rm_success_frames_200)
        shortest = min(lengths)
        raise ActlabError(
            "success_frames labels every frame of a demonstration episode a success",
            field="success_frames",
            expected=f"fewer than the shortest demonstration episode's {shortest} frames (the last frames of "
            f"each episode, where the cube is in the bowl; default {RewardModelConfig.success_frames})",
            found=f"{cfg.success_frames} (the first {n_demos} episode(s) of {demos}: {min(lengths)} to "
            f"{max(lengths)} frames)",
            fix=f"--set success_frames=N with N < {shortest} (nothing was run)",
        )
    n_rollouts = -(-cfg.rollouts // cfg.rollout_envs) * cfg.rollout_envs  # whole rounds of rollout_envs
    n = n_demos + n_rollouts
    n_val, n_test = _split_sizes(n, cfg)
    if n - n_val - n_test < 1:
        raise ActlabError(
            "too few episodes for the reward model's training, validation and test splits",
            field="episodes, rollouts",
            expected=f"at least {n_val + n_test + 1} episodes: one to train on beside {n_val} for validation "
            f"and {n_test} for the test (val_fraction {cfg.val_fraction:g}, "
            f"test_fraction {cfg.test_fraction:g})",
            found=f"{n}: {n_demos} demonstration(s) of {demos} and {n_rollouts} rollout(s)",
            fix="raise --set rollouts (or --set episodes, up to the episodes the dataset holds); "
            "nothing was run",
        )
    return n_demos


def _stack(episodes: list, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.cat([_inputs(episodes[i][0]) for i in ids])
    y = torch.cat([episodes[i][1] for i in ids])
    keep = ~torch.isnan(y)
    return x[keep], y[keep]


def _balanced_accuracy(p: torch.Tensor, y: torch.Tensor, thr: float) -> float:
    pred = p > thr
    pos, neg = y > 0.5, y < 0.5
    tpr = (pred & pos).sum().item() / max(1, pos.sum().item())
    tnr = (~pred & neg).sum().item() / max(1, neg.sum().item())
    return 0.5 * (tpr + tnr)


def train_reward_model(cfg: RewardModelConfig, demos: str, base: str, out: str | Path) -> dict[str, Any]:
    """Train, tune and evaluate the classifier; write it to ``out`` (atomically); return its metrics."""
    from safetensors.torch import save_file

    # before any work: --out may replace only an earlier reward model, never a user's directory or an input
    check_out_dir(out, KIND, overwrite=True, inputs=(demos, base))
    check_demos(Path(demos))  # rollouts run pick-and-place: another task's demos or base are refused
    check_base_task(Path(base))
    n_demos = _check_episode_count(cfg, demos)
    torch.manual_seed(cfg.seed)
    rlcfg = RLConfig(
        base=base,
        env=EnvConfig(task="pick_place", num_envs=cfg.rollout_envs, max_steps=cfg.max_steps),
        obs=ObsConfig(encoder="frozen", privileged="off"),
    )
    agent = Agent(rlcfg, load_policy(base))
    episodes = _demo_frames(cfg, agent, demos)
    rollouts, failures = _rollout_frames(cfg, rlcfg, agent)
    episodes += rollouts
    train_ids, val_ids, test_ids = _split(len(episodes), cfg)
    (xt, yt), (xv, yv), (xh, yh) = (_stack(episodes, ids) for ids in (train_ids, val_ids, test_ids))
    model = SuccessClassifier(xt.shape[1], cfg.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    pos_weight = (yt < 0.5).sum() / (yt > 0.5).sum().clamp(min=1)  # successes are rare frames
    for _ in range(cfg.steps):
        loss = nn.functional.binary_cross_entropy_with_logits(model(xt), yt, pos_weight=pos_weight)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        pv, ph = torch.sigmoid(model(xv)), torch.sigmoid(model(xh))
    grid = np.linspace(0.05, 0.95, 19)
    threshold = float(max(grid, key=lambda t: _balanced_accuracy(pv, yv, float(t))))
    pred = ph > threshold
    result = {
        "threshold": threshold,
        "heldout_accuracy": float((pred == (yh > 0.5)).float().mean()),
        "heldout_balanced_accuracy": _balanced_accuracy(ph, yh, threshold),
        "heldout_accuracy_at_0.5": float(((ph > 0.5) == (yh > 0.5)).float().mean()),
        "heldout_n": len(yh),
        "heldout_positives": int((yh > 0.5).sum()),
        "episodes": {"demos": n_demos, "rollouts": len(rollouts), "failed_rollouts": failures},
        "split_episodes": {"train": len(train_ids), "val": len(val_ids), "test": len(test_ids)},
        "input_dim": int(xt.shape[1]),
        "hidden": cfg.hidden,
        "base": str(base),
        "config": dataclasses.asdict(cfg),
    }
    with atomic_dir(out, overwrite=True, kind=KIND, inputs=(demos, base)) as tmp:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp / MODEL_FILE))
        atomic_write_json(tmp / META_FILE, result)
    return result
