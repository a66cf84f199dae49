"""``actlab rl train``: SAC (from scratch, or residual on a frozen chunk policy) in the sim.

The loop works in *rounds*: the ``num_envs`` envs are reset together with fresh seeds (training
episode k uses ``TRAIN_SEED_BASE * (seed + 1) + k``), stepped in lockstep with one batched actor call per
control step (the harness's rollout shape, so a batched base policy's action queue starts empty for
every row), and a round ends when every episode has. Gradient updates run during the round, ``utd``
per transition collected. Between rounds the loop logs, evaluates through the harness and checkpoints;
a resume therefore starts a new round exactly as the uninterrupted run would (tests/rl/test_rl_resume.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from actlab.errors import ActlabError
from actlab.rl.config import TRAIN_SEED_BASE, RLConfig
from actlab.utils.config import from_dict, to_dict
from actlab.utils.io import atomic_write_json, read_json
from actlab.utils.lock import DirLock

RUN_CONFIG = "config.json"


@dataclass
class RLSummary:
    """What a finished (or stopped) run reports."""

    out: str  # run directory
    env_steps: int  # transitions collected
    episodes: int  # training episodes finished
    updates: int  # gradient updates
    wall_s: float  # seconds of this invocation
    last_checkpoint: str | None  # newest checkpoint directory
    final_eval: dict[str, Any] | None  # the last evaluation's summary (success rate, interval, taxonomy)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def config_hash(cfg: RLConfig) -> str:
    """Hash of the settings that must not change across a resume (everything but budgets and cadence)."""
    free = {
        "total_env_steps",
        "time_limit_s",
        "eval_every",
        "eval_episodes",
        "checkpoint_every",
        "keep_last",
        "log_every",
        "tensorboard",
        "wandb",
    }
    d = {k: v for k, v in to_dict(cfg).items() if k not in free}
    # keys added after runs existed (encoder=vit) count only when set: older runs' hashes stay valid
    default = to_dict(RLConfig())
    for k in ("vision_backbone", "pretrained_backbone_weights", "vit_config", "downscale_img_square"):
        if d[k] == default[k]:
            del d[k]
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def load_run_config(out: str | Path) -> RLConfig:
    """The config a run directory was started with."""
    return from_dict(RLConfig, read_json(Path(out) / RUN_CONFIG, "RL run config"), RUN_CONFIG)


def train_rl(cfg: RLConfig, out: str | Path, resume: bool = False, progress: bool = True) -> RLSummary:
    """Run (or resume) an SAC run in ``out`` under the directory's lock."""
    out = Path(out)
    cfg.check_runnable()
    from actlab.utils.threads import torch_threads

    # torch threads restored afterwards: a caller's process (a test, a notebook) keeps its own setting
    with DirLock(out, what="RL run directory"), torch_threads(cfg.threads):
        return _Trainer(cfg, out, resume, progress).run()


class _Trainer:
    """The state of one run: envs, agent, buffers, counters. ``run`` is the loop."""

    def __init__(self, cfg: RLConfig, out: Path, resume: bool, progress: bool) -> None:
        import torch

        from actlab.rl.agent import Agent
        from actlab.rl.checkpoint import RLCheckpoints
        from actlab.rl.replay import ReplayBuffer
        from actlab.rl.sac import SAC

        self.cfg, self.out = cfg, out
        self.ckpt = RLCheckpoints(out, cfg.keep_last)
        self.ckpt.clean_partial()
        last = self.ckpt.last_step()
        if last is not None and not resume:
            raise ActlabError(
                "the run directory already holds a run",
                file=out,
                found=f"checkpoint step_{last:07d}",
                fix=f"continue it (actlab rl train --out {out} --resume), or choose another --out",
            )
        torch.manual_seed(cfg.seed)
        self.gen = torch.Generator().manual_seed(cfg.seed)
        base = _load_base(cfg, out)
        self.agent = Agent(cfg, base).to(cfg.device)
        self.sac = SAC(self.agent)
        self.sac.generator = self.gen
        self.buffer = ReplayBuffer(cfg.buffer_size, cfg.device)
        self.demos = None
        if cfg.demos is not None:
            from actlab.rl.demos import demo_buffer

            self.demos = demo_buffer(cfg, self.agent)
        self.reward_model = None
        if cfg.reward == "classifier":
            from actlab.rl.reward_model import load_reward_model

            self.reward_model = load_reward_model(cfg.reward_model)
        self.env_steps = self.episodes = self.updates = self.rounds = 0
        self.owed = 0.0
        self.evals: list[dict[str, Any]] = []
        if last is not None:
            self._restore(last)
        atomic_write_json(out / RUN_CONFIG, to_dict(cfg))
        from actlab.rl.envs import VecSim
        from actlab.training.metrics_log import MetricsLog

        self.envs = VecSim(cfg, self.agent)
        self.log = MetricsLog(
            out,
            enabled=True,
            total_steps=cfg.total_env_steps,
            start_step=self.env_steps,
            progress=progress,
            tensorboard=cfg.tensorboard,
            wandb=cfg.wandb,
            wandb_project="actlab-rl",
            run_config=to_dict(cfg),
        )
        self.last_metrics: dict[str, float] = {}

    # --------------------------------------------------------------------------------------- resume
    def _restore(self, step: int) -> None:
        state = self.ckpt.load_rl(step)
        meta = state["meta"]
        if meta.get("config_hash") != config_hash(self.cfg):
            raise ActlabError(
                "the run was started with a different config",
                file=state["path"] / "training_state" / "state.json",
                field="config",
                fix="resume without --preset/--set changes other than budgets (total_env_steps, eval_*, "
                "checkpoint_every), or start a new --out",
            )
        self.agent.load_state_dict(state["agent"], strict=False)
        self.sac.load_state_dict(state["optimizer"])
        self.gen.set_state(state["rng"]["generator"])
        self.buffer.load_state_dict(state["replay"])
        self.env_steps, self.episodes = int(meta["env_steps"]), int(meta["episodes"])
        self.rounds = int(meta.get("rounds", 0))
        self.updates, self.owed = int(meta["updates"]), float(meta["owed"])
        self.evals = list(meta.get("evals", []))
        self.ckpt.truncate_after(step)
        self.ckpt.repair_pointers(step)

    def _save(self) -> Path:
        meta = {
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "rounds": self.rounds,
            "updates": self.updates,
            "owed": self.owed,
            "config_hash": config_hash(self.cfg),
            "evals": self.evals,
        }
        return self.ckpt.save_rl(
            self.env_steps,
            self.agent.trainable_state(),
            self.sac.state_dict(),
            {"generator": self.gen.get_state()},
            self.buffer.state_dict(),
            meta,
            to_dict(self.cfg),
        )

    # ------------------------------------------------------------------------------------------ loop
    def run(self) -> RLSummary:
        cfg = self.cfg
        t0 = time.perf_counter()
        last_ckpt = self.ckpt.last_step()
        try:
            while self.env_steps < cfg.total_env_steps:
                if cfg.time_limit_s and time.perf_counter() - t0 > cfg.time_limit_s:
                    self.log.message(
                        f"time limit {cfg.time_limit_s:.0f} s reached at {self.env_steps} env steps"
                    )
                    break
                before = self.env_steps
                t_round = time.perf_counter()
                stats = self._round()
                self.rounds += 1
                if self.rounds % cfg.log_every == 0:
                    self._log(stats, time.perf_counter() - t_round)
                if cfg.eval_every and _crossed(before, self.env_steps, cfg.eval_every):
                    self._evaluate()
                if cfg.checkpoint_every and _crossed(before, self.env_steps, cfg.checkpoint_every):
                    self._save()
                    last_ckpt = self.env_steps
            if not self.evals or self.evals[-1]["env_steps"] != self.env_steps:
                self._evaluate()
            if last_ckpt != self.env_steps:
                self._save()
                last_ckpt = self.env_steps
        finally:
            self.envs.close()
            self.log.close()
        path = str(self.ckpt.path(last_ckpt)) if last_ckpt is not None else None
        return RLSummary(
            out=str(self.out),
            env_steps=self.env_steps,
            episodes=self.episodes,
            updates=self.updates,
            wall_s=round(time.perf_counter() - t0, 2),
            last_checkpoint=path,
            final_eval=self.evals[-1] if self.evals else None,
        )

    def _round(self) -> dict[str, Any]:
        """One round of ``num_envs`` episodes with updates interleaved; returns the round's statistics."""
        from actlab.rl.replay import nstep_transitions

        cfg = self.cfg
        first = TRAIN_SEED_BASE * (cfg.seed + 1) + self.episodes
        seeds = [first + i for i in range(cfg.num_envs)]
        episodes = self.envs.run_round(seeds, self._act, self._after_step)
        returns, successes, lengths = [], [], []
        for ep in episodes:
            rewards = ep.rewards
            if self.reward_model is not None:
                rewards = self.reward_model.rewards(ep)
            self.buffer.add(
                nstep_transitions(
                    ep.steps, ep.final, ep.actions, rewards, ep.terminated, cfg.gamma, cfg.n_step
                )
            )
            returns.append(float(sum(rewards)))
            successes.append(ep.success)
            lengths.append(len(ep.steps))
        self.episodes += len(episodes)
        return {
            "return": float(np.mean(returns)),
            "success": float(np.mean(successes)),
            "len": float(np.mean(lengths)),
        }

    def _act(self, obs: dict[str, Any]):
        """[-1, 1] actions (B, 6) for the actor inputs ``obs`` (uniform noise during ``random_steps``)."""
        import torch

        n = obs["vec"].shape[0]
        if self.env_steps < self.cfg.random_steps:
            return torch.rand((n, 6), generator=self.gen) * 2 - 1
        with torch.no_grad():
            a, _ = self.agent.actor(self.agent.actor_input(obs["vec"], obs.get("img")), generator=self.gen)
        return a

    def _after_step(self, n_active: int) -> None:
        """Count the transitions of one lockstep step and run the updates they are owed."""
        from actlab.rl.replay import sample_mixed

        cfg = self.cfg
        self.env_steps += n_active
        if len(self.buffer) < max(cfg.learning_starts, cfg.batch_size):
            return
        self.owed += n_active * cfg.utd
        metrics = None
        while self.owed >= 1.0:
            self.owed -= 1.0
            batch = sample_mixed(self.buffer, self.demos, cfg.batch_size, self.gen)
            metrics = self.sac.update(batch, actor=self.env_steps >= cfg.actor_starts)
            self.updates += 1
        if metrics is not None:
            self._pending = metrics

    def _log(self, stats: dict[str, Any], round_s: float) -> None:
        pending = getattr(self, "_pending", None)
        row: dict[str, Any] = {"step": self.env_steps, "episodes": self.episodes, "updates": self.updates}
        row.update({f"train/{k}": v for k, v in stats.items()})
        if pending is not None:
            row.update({f"sac/{k}": float(v) for k, v in pending.items()})  # one host sync per round
        row["env_steps_per_s"] = round(self.cfg.num_envs * stats["len"] / max(round_s, 1e-9), 1)
        row["round_s"] = round(round_s, 3)
        self.log.log(row)
        self.log.progress(self.env_steps, {"ret": stats["return"], "succ": stats["success"]})

    def _evaluate(self) -> None:
        from actlab.rl.evaluate import evaluate_agent

        t = time.perf_counter()
        ev = evaluate_agent(self.agent, self.cfg)
        s = ev.summary
        row = {
            "env_steps": self.env_steps,
            "success_rate": s.success_rate,
            "successes": s.successes,
            "episodes": s.episodes,
            "ci95": [s.ci_low, s.ci_high],
            "outcomes": dict(s.outcomes),
            "eval_s": round(time.perf_counter() - t, 2),
        }
        self.evals.append(row)
        self.log.log({"step": self.env_steps, "eval/success": s.success_rate, "eval/s": row["eval_s"]})
        self.log.message(
            f"eval @ {self.env_steps} env steps: {s.successes}/{s.episodes} "
            f"(95% CI {s.ci_low:.2f}-{s.ci_high:.2f})"
        )


def _crossed(before: int, after: int, every: int) -> bool:
    return math.floor(after / every) > math.floor(before / every)


BASE_COPY = "base"  # the run's own copy of the base bundle (run_dir/base)


def _load_base(cfg: RLConfig, run_dir: Path | None) -> Any:
    """The frozen base policy. A run keeps its own copy of the bundle (``run_dir/base``, copied once,
    atomically) and always loads that: a checkpoint's residual is meaningless without the exact base it
    was trained on, and the bundle ``--base`` named may be replaced or deleted later (it happened to the
    first long run of docs/rl.md: the shared demo checkpoint was deleted by a re-run of the demo)."""
    if cfg.base is None:
        return None
    import shutil

    from actlab.policies import load_policy
    from actlab.utils.io import atomic_dir

    path = Path(cfg.base)
    if run_dir is not None:
        copy = Path(run_dir) / BASE_COPY
        if not copy.is_dir():
            if not path.is_dir():
                raise ActlabError(
                    "base policy bundle not found", file=path, field="base", fix="check the path"
                )
            with atomic_dir(copy) as tmp:
                shutil.copytree(path, tmp, dirs_exist_ok=True)
        path = copy
    return load_policy(path, device=cfg.device)


def load_agent(path: str | Path, device: str = "cpu") -> Any:
    """The agent of a checkpoint directory (``checkpoints/step_N``) or of a run's last checkpoint."""
    from safetensors.torch import load_file

    from actlab.rl.agent import Agent
    from actlab.rl.checkpoint import AGENT_FILE, CONFIG_FILE

    path = Path(path)
    if not (path / AGENT_FILE).is_file() and (path / "checkpoints" / "last.json").is_file():
        path = path / "checkpoints" / read_json(path / "checkpoints" / "last.json", "last.json")["path"]
    if not (path / AGENT_FILE).is_file():
        raise ActlabError(
            "not an RL checkpoint",
            file=path,
            expected=f"a directory with {AGENT_FILE}",
            fix="pass a run directory",
        )
    cfg = from_dict(RLConfig, read_json(path / CONFIG_FILE, "RL config"), CONFIG_FILE)
    cfg = dataclasses.replace(cfg, device=device)
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
    if run_dir is not None and not (run_dir / BASE_COPY).is_dir():
        run_dir = None  # a run from before runs kept their base: the bundle config names
    agent = Agent(cfg, _load_base(cfg, run_dir))
    agent.load_state_dict(load_file(str(path / AGENT_FILE)), strict=False)
    return agent.eval()
