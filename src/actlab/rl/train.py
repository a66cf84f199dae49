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
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from actlab.errors import ActlabError
from actlab.lifecycle.metrics_log import MetricsLog
from actlab.lifecycle.rundir import (
    LOCKED_FIX,
    RunKind,
    check_fresh,
    check_run_path,
    holds_run,
    refuse_changes,
    resume_diff,
    resume_start,
)
from actlab.lifecycle.rundir import config_hash as lifecycle_config_hash
from actlab.lifecycle.stop import StopSignals, catch_sigterm
from actlab.rl.checkpoint import AGENT_FILE, CONFIG_FILE, RLCheckpoints, check_rl_meta, read_tensors
from actlab.rl.config import RESUMABLE, TRAIN_SEED_BASE, RLConfig, config_from_dict, config_to_dict
from actlab.rl.guard import Decision, GuardState, adapt_to_base, decide, handed_back
from actlab.rl.inputs import check_inputs
from actlab.utils import config as cfgutil
from actlab.utils.config import flatten
from actlab.utils.io import atomic_dir, atomic_write_json, file_sha256, read_json, refuse_overlapping_paths
from actlab.utils.lock import DirLock
from actlab.utils.stats import paired_compare

RUN_CONFIG = "config.json"
BASE_COPY = "base"  # the run's own copy of the base bundle (run_dir/base)


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
    # why the loop ended: "completed", "time_limit", "sigterm" (a checkpoint was written; --resume
    # continues), "regressed" (a residual run's guard stopped it: the residual fell below the base again
    # after residual.max_rollbacks roll-backs)
    stopped: str = "completed"
    # residual runs: "base" or the checkpoint directory handed back (best.json), and why
    handed_back: str | None = None
    # residual runs: the guard's state (the base on the eval seeds, roll-backs, events with their reasons)
    guard: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _is_run_dir(out: Path) -> bool:
    """Whether ``out`` holds (the start of) an RL run: its saved RLConfig, or its base copy."""
    return holds_run(out, RUN_CONFIG, ("total_env_steps",), markers=(BASE_COPY,))


# What the run lifecycle (actlab.lifecycle) needs to know about an RL run directory.
RL_RUN = RunKind(
    name="RL run",
    article="an",
    command="actlab rl train",
    start_hint="--preset NAME",
    is_run_dir=_is_run_dir,
    resumable=RESUMABLE,
)


def config_hash(cfg: RLConfig) -> str:
    """Hash of the settings that must not change across a resume (everything but :data:`RESUMABLE`)."""
    return lifecycle_config_hash(flatten(config_to_dict(cfg)), RESUMABLE)


def load_run_config(out: str | Path) -> RLConfig:
    """The config a run directory was started with."""
    check_run_path(Path(out))  # a bundle given as the run: named as such, not as a bad config
    file = Path(out) / RUN_CONFIG
    # every checkpoint keeps a copy of the run's config: the repair of a damaged one (it was "repair or
    # regenerate the file", which no command does)
    copies = sorted((Path(out) / "checkpoints").glob("step_*/rl_config.json"))
    fix = f"restore it from a checkpoint's copy: cp {copies[-1]} {file}" if copies else None
    data = read_json(file, "RL run config", fix=fix)
    edited = fix or f"undo the edit of {file}"
    return cfgutil.from_file(lambda: config_from_dict(data, str(file)), file, "the run's config.json", edited)


def train_rl(cfg: RLConfig, out: str | Path, resume: bool = False, progress: bool = True) -> RLSummary:
    """Run (or resume) an SAC run in ``out`` under the directory's lock. SIGTERM stops it after the
    current collection round with a checkpoint (``stopped="sigterm"``); so does ``cfg.time_limit_s``."""
    out = Path(out)
    cfg.check_runnable()
    check_run_path(out)
    # the config's paths too (``--set base=B --out B/x`` is not an option the parser can check)
    inputs = [("base", cfg.base), ("demos", cfg.demos), ("env.reward_model", cfg.env.reward_model)]
    refuse_overlapping_paths([("--out", out)], inputs)
    from actlab.utils.device import resolve_device  # lazy: imports torch

    # a device this torch cannot use (`--set device=cuda` on a CPU build was an AssertionError traceback
    # from torch.cuda) is refused before the run directory is touched; "auto" becomes the device chosen
    # (any other name is kept as written: "cuda" saved as "cuda:0" would refuse the resume of a run)
    device = resolve_device(cfg.device, field="device")
    if cfg.device == "auto":
        cfg = dataclasses.replace(cfg, device=str(device))
    from actlab.utils.threads import say_if_oversubscribed, torch_threads  # lazy: imports torch

    say_if_oversubscribed(cfg.threads, "threads")
    # base, demos and reward model: refused before the run directory is made (the base was checked only
    # in the run's copy of it, which a refusal left behind)
    check_inputs(cfg, base_copied=(out / BASE_COPY).is_dir())
    if cfg.env.reward == "classifier":
        from actlab.rl.reward_model import load_reward_model  # lazy: only reward=classifier needs it

        load_reward_model(cfg.env.reward_model)  # (a small classifier: loaded again by the trainer)

    # torch threads restored afterwards: a caller's process (a test, a notebook) keeps its own setting
    with (
        DirLock(out, what="RL run directory", fix=LOCKED_FIX),
        torch_threads(cfg.threads),
        catch_sigterm(cfg.time_limit_s) as stop,
    ):
        return _Trainer(cfg, out, resume, progress, stop).run()


def _start_step(cfg: RLConfig, out: Path, resume: bool, ckpts: Any) -> int | None:
    """The checkpoint to resume from (None: a new run); refuses a used directory or a changed config."""
    step = resume_start(out, ckpts, RL_RUN) if resume else check_fresh(out, ckpts, RL_RUN)
    if not step:
        return None
    saved = load_run_config(out)
    _check_config_unedited(saved, out, ckpts, step)
    refuse_changes(
        resume_diff(flatten(config_to_dict(saved)), flatten(config_to_dict(cfg)), RESUMABLE),
        out / RUN_CONFIG,
        fix="resume with the saved config (omit --preset/--set for these keys); only budgets "
        "(total_env_steps, time_limit_s), eval.every/eval.episodes, checkpoint.*, log.* and the base's "
        "path may change, or start a new --out",
    )
    return step


def _check_config_unedited(saved: RLConfig, out: Path, ckpts: Any, step: int) -> None:
    """Refuse a resume of a run whose config.json was edited after checkpoint ``step`` was written (an
    edited ``env.num_envs`` resumed with it, exit 0, where ``--set env.num_envs=`` is refused): the keys
    that change what is computed are compared with the checkpoint's own copy, rl_config.json."""
    copy = ckpts.path(step) / CONFIG_FILE
    if not copy.is_file():
        return
    try:
        own = config_from_dict(read_json(copy, "RL checkpoint config"), str(copy))
    except ActlabError:  # a damaged copy: the run's config.json is all there is to go by
        return
    diff = resume_diff(flatten(config_to_dict(own)), flatten(config_to_dict(saved)), RESUMABLE)
    if diff:
        raise ActlabError(
            f"the run's config.json was changed after checkpoint {ckpts.path(step).name} was written: the "
            "resume would continue that checkpoint under another config",
            file=out / RUN_CONFIG,
            field=", ".join(diff),
            expected=f"the values of {copy}",
            found="; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items()),
            fix=f"undo the edit (cp {copy} {out / RUN_CONFIG}), or start a new --out with the new values "
            "(nothing was trained)",
        )


class _Trainer:
    """The state of one run: envs, agent, buffers, counters. ``run`` is the loop."""

    def __init__(self, cfg: RLConfig, out: Path, resume: bool, progress: bool, stop: StopSignals) -> None:
        import torch  # lazy, as every torch import of this module: `actlab rl --help` stays light

        from actlab.rl.agent import Agent  # lazy: imports torch
        from actlab.rl.replay import ReplayBuffer  # lazy: imports torch
        from actlab.rl.sac import SAC  # lazy: imports torch

        self.cfg, self.out, self.stop = cfg, out, stop
        self.ckpt = RLCheckpoints(out, cfg.checkpoint.keep_last)
        last = _start_step(cfg, out, resume, self.ckpt)
        self.ckpt.clean_partial()
        if last is None:  # a run started over: pointers left by a run killed early name nothing
            (self.ckpt.root / "last.json").unlink(missing_ok=True)
        torch.manual_seed(cfg.seed)
        self.gen = torch.Generator().manual_seed(cfg.seed)
        copied = cfg.base is not None and not (out / BASE_COPY).is_dir()
        base = _load_base(cfg, out, recorded=_recorded_base(self.ckpt, last))
        # the base its checkpoints are trained on, recorded in each: a resume or a report compares it
        self.base_digest = bundle_digest(out / BASE_COPY) if cfg.base is not None else None
        self.agent = Agent(cfg, base).to(cfg.device)
        try:  # before config.json, metrics.jsonl and the demonstrations (a refusal left the first two)
            self._check_disk()
        except ActlabError:
            if copied:  # the base copy this start made, and nothing else: a user's files are never touched
                import shutil

                shutil.rmtree(out / BASE_COPY, ignore_errors=True)
            raise
        # the guard of a residual run (actlab.rl.guard); the zero residual is the actor as built
        self.guard = GuardState(bound=cfg.residual.bound_start) if cfg.residual_rl else None
        self.zero_actor = {k: v.clone() for k, v in self.agent.actor.state_dict().items()}
        self.good_actor: dict[str, Any] | None = None
        self.sac = SAC(self.agent)
        self.sac.generator = self.gen
        self.buffer = ReplayBuffer(cfg.sac.buffer_size, cfg.device)
        self.demos = None
        # the demonstrations' identity and videos, recorded in each checkpoint for a resume to compare
        self.demos_record: dict[str, Any] | None = None
        # (a checkpoint's step is its env steps) A resume of a run that has its steps trains nothing:
        # the demonstrations (minutes of the base on every frame for 100 episodes) are not prepared.
        if cfg.demos is not None and (last is None or last < cfg.total_env_steps):
            # lazy: reads a LeRobot dataset only when demos are given
            from actlab.rl.demos import check_demos_unchanged, demo_buffer, demos_record

            if last is not None:  # before minutes of the base on every frame
                check_demos_unchanged(cfg.demos, self.ckpt.meta(last).get("demos"), self.ckpt.path(last))
            self.demos = demo_buffer(cfg, self.agent, progress=progress)
            self.demos_record = demos_record(cfg.demos, self.agent.image_keys)
        self.reward_model = None
        if cfg.env.reward == "classifier":
            from actlab.rl.reward_model import load_reward_model  # lazy: only reward=classifier needs it

            self.reward_model = load_reward_model(cfg.env.reward_model)
        self.env_steps = self.episodes = self.updates = self.rounds = 0
        self.owed = 0.0
        self.evals: list[dict[str, Any]] = []
        # (env steps, bound) of the policy the last evaluation judged: a checkpoint at that step records
        # that bound as its policy's (the guard may widen the training bound right after the evaluation)
        self.judged: tuple[int, float] | None = None
        if last is not None:
            self._restore(last)
        if self.guard is not None:
            self._apply_guard()
        atomic_write_json(out / RUN_CONFIG, config_to_dict(cfg))
        from actlab.rl.envs import VecSim  # lazy: imports MuJoCo

        self.envs = VecSim(cfg, self.agent)
        self.log = MetricsLog(
            out,
            enabled=True,
            total_steps=cfg.total_env_steps,
            start_step=self.env_steps,
            progress=progress,
            tensorboard=cfg.log.tensorboard,
            wandb=cfg.log.wandb,
            wandb_project="actlab-rl",
            run_config=config_to_dict(cfg),
        )
        self.last_metrics: dict[str, float] = {}

    # --------------------------------------------------------------------------------------- resume
    def _restore(self, step: int) -> None:

        state = self.ckpt.load_rl(step)
        meta = state["meta"]
        self.agent.load_trainable_state(state["agent"], state["path"] / AGENT_FILE)
        self.sac.load_state_dict(state["optimizer"])
        self.gen.set_state(state["rng"]["generator"])
        self.buffer.load_state_dict(state["replay"])
        self.env_steps, self.episodes = int(meta["env_steps"]), int(meta["episodes"])
        self.rounds = int(meta.get("rounds", 0))
        self.updates, self.owed = int(meta["updates"]), float(meta["owed"])
        self.evals = list(meta.get("evals", []))
        if meta.get("policy_bound") is not None:  # the bound of this checkpoint's actor as a policy
            self.judged = (self.env_steps, float(meta["policy_bound"]))
        if self.guard is not None and meta.get("guard") is not None:
            self.guard = GuardState.from_dict(meta["guard"])
            self.good_actor = (state["guard"] or {}).get("good_actor") or None
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
            "guard": self.guard.as_dict() if self.guard is not None else None,
            "policy_bound": self._policy_bound(),
        }
        if self.base_digest is not None:
            meta["base_sha256"] = self.base_digest
        if self.demos_record is not None:
            meta["demos"] = self.demos_record
        guard = None
        if self.guard is not None:
            guard = {"good_actor": self.good_actor or {}}
        path = self.ckpt.save_rl(
            self.env_steps,
            self.agent.trainable_state(),
            self.sac.state_dict(),
            {"generator": self.gen.get_state()},
            self.buffer.state_dict(),
            meta,
            config_to_dict(self.cfg),
            guard,
        )
        self._point_best()
        return path

    def _check_disk(self) -> None:
        """Refuse to go on when the checkpoints cannot fit: each holds the agent, its Adam state and the
        filled replay (up to ``min(total_env_steps, buffer_size)`` rows), and ``keep_last`` of them (+ the
        one being written, + a residual run's best) live at once. A run on a small disk trained to its
        end and then failed writing its only checkpoint ("the disk is full"): every step lost. Checked when
        the agent is built, before the run writes anything (config.json and metrics.jsonl were left by a
        refusal after the first round)."""
        from actlab.utils.disk import require_free  # lazy: imports nothing heavy
        from actlab.utils.units import human_bytes  # lazy: as above

        cfg = self.cfg
        row = self.agent.transition_bytes()  # (checked before the first round: no row is stored yet)
        rows = min(cfg.total_env_steps, cfg.sac.buffer_size)
        agent = sum(v.numel() * v.element_size() for v in self.agent.trainable_state().values())
        one = rows * row + 3 * agent + (1 << 20)  # weights + two Adam moments; configs, RNG state
        alive = cfg.checkpoint.keep_last + 1 + (1 if cfg.residual_rl else 0)  # a residual run's best
        need = max(one, one * alive - self.ckpt.bytes_on_disk())
        require_free(
            need,
            self.out,
            problem="not enough disk space for this RL run's checkpoints; refusing to go on rather than fail "
            "at the first checkpoint",
            field="checkpoint.keep_last",
            expected=f"{human_bytes(need)} = {alive} checkpoints alive x {human_bytes(one)} (replay of "
            f"{rows} transitions x {human_bytes(row)} + agent and Adam state {human_bytes(3 * agent)})",
            fix="free disk space, choose an --out on a larger disk, or lower sac.buffer_size, "
            "total_env_steps or checkpoint.keep_last",
        )

    def _policy_bound(self) -> float:
        """The residual's bound that belongs to the checkpoint's actor as a policy (what ``load_agent``
        and ``rl report`` run): the evaluated one when the guard kept this step's evaluated actor, else
        the bound training continues with."""
        if self.judged is not None and self.judged[0] == self.env_steps:
            return self.judged[1]
        return self.agent.bound

    def _point_best(self) -> None:
        """``checkpoints/best.json`` names the handed-back residual; absent while that is the base (a
        residual run) or always (a run from scratch has no base to beat)."""
        best = self.guard.best if self.guard is not None else None
        pointer = self.ckpt.root / "best.json"
        if best is None or not self.ckpt.path(int(best["step"])).is_dir():
            pointer.unlink(missing_ok=True)
            return
        atomic_write_json(
            pointer,
            {"step": best["step"], "path": self.ckpt.path(int(best["step"])).name, "val_loss": None,
             "comparison_with_base": best["comparison"]},
        )  # fmt: skip

    # ------------------------------------------------------------------------------------------ loop
    def run(self) -> RLSummary:
        cfg = self.cfg
        t0 = time.perf_counter()
        last_ckpt = self.ckpt.last_step()
        stopped = "completed"
        if self.env_steps >= cfg.total_env_steps:  # a resume of a run that got there: said, as train does
            self.log.message(
                f"the run already has {self.env_steps} env steps (total_env_steps {cfg.total_env_steps}): "
                "nothing to train; raise total_env_steps to continue it"
            )
        try:
            if self.guard is not None:
                self._measure_base()
            while self.env_steps < cfg.total_env_steps:
                # the safe point: between rounds, every env at an episode boundary
                reason = self.stop.reason()
                if reason == "time_limit":
                    self.log.message(
                        f"time limit {cfg.time_limit_s:.0f} s reached at {self.env_steps} env steps"
                    )
                if reason is not None:
                    stopped = reason
                    break
                before = self.env_steps
                t_round = time.perf_counter()
                stats = self._round()
                self.rounds += 1
                if self.rounds % cfg.log.every == 0:
                    self._log(stats, time.perf_counter() - t_round)
                decision = None
                if cfg.eval.every and _crossed(before, self.env_steps, cfg.eval.every):
                    decision = self._evaluate()
                due = cfg.checkpoint.every and _crossed(before, self.env_steps, cfg.checkpoint.every)
                if due or (decision is not None and (decision.new_best or decision.action != "keep")):
                    self._save()  # a handed-back residual, a roll-back and a stop are always saved
                    last_ckpt = self.env_steps
                if decision is not None and decision.action == "stop":
                    stopped = "regressed"
                    break
            # a SIGTERM asks for a checkpoint now, not for the final evaluation
            if stopped not in ("sigterm", "sigint", "regressed") and (
                not self.evals or self.evals[-1]["env_steps"] != self.env_steps
            ):
                self._evaluate()
            if stopped in ("completed", "time_limit") and self._confirm():
                self._save()  # the checkpoint records the confirmed hand-back; best.json points at it
                last_ckpt = self.env_steps
            # (a run stopped before its first round has nothing to save: a resume starts it over)
            if last_ckpt != self.env_steps and self.env_steps > 0:
                self._save()
                last_ckpt = self.env_steps
            # (a SIGTERM or Ctrl-C: `actlab rl train` says the checkpoint kept and the resume line,
            # lifecycle.stop.stopped_line, as `actlab train` does)
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
            stopped=stopped,
            handed_back=handed_back(self.guard) if self.guard is not None else None,
            guard=self.guard.as_dict() if self.guard is not None else None,
        )

    def _round(self) -> dict[str, Any]:
        """One round of ``num_envs`` episodes with updates interleaved; returns the round's statistics."""
        from actlab.rl.replay import nstep_transitions  # lazy: imports torch

        cfg = self.cfg
        first = TRAIN_SEED_BASE * (cfg.seed + 1) + self.episodes
        seeds = [first + i for i in range(cfg.env.num_envs)]
        episodes = self.envs.run_round(seeds, self._act, self._after_step)
        returns, successes, lengths = [], [], []
        for ep in episodes:
            rewards = ep.rewards
            if self.reward_model is not None:
                rewards = self.reward_model.rewards(ep)
            self.buffer.add(
                nstep_transitions(
                    ep.steps, ep.final, ep.actions, rewards, ep.terminated, cfg.sac.gamma, cfg.sac.n_step
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
        if self.env_steps < self.cfg.sac.random_steps:
            return self.agent.bounded(torch.rand((n, 6), generator=self.gen) * 2 - 1)
        with torch.no_grad():
            a, _ = self.agent.actor(self.agent.actor_input(obs["vec"], obs.get("img")), generator=self.gen)
        return self.agent.bounded(a)

    def _after_step(self, n_active: int) -> None:
        """Count the transitions of one lockstep step and run the updates they are owed."""
        from actlab.rl.replay import sample_mixed  # lazy: imports torch

        cfg = self.cfg
        self.env_steps += n_active
        if len(self.buffer) < max(cfg.sac.learning_starts, cfg.sac.batch_size):
            return
        self.owed += n_active * cfg.sac.utd
        metrics = None
        while self.owed >= 1.0:
            self.owed -= 1.0
            batch = sample_mixed(self.buffer, self.demos, cfg.sac.batch_size, self.gen)
            metrics = self.sac.update(batch, actor=self.env_steps >= cfg.sac.actor_starts)
            self.updates += 1
        if metrics is not None:
            self._pending = metrics

    def _log(self, stats: dict[str, Any], round_s: float) -> None:
        pending = getattr(self, "_pending", None)
        row: dict[str, Any] = {"step": self.env_steps, "episodes": self.episodes, "updates": self.updates}
        row.update({f"train/{k}": v for k, v in stats.items()})
        if pending is not None:
            row.update({f"sac/{k}": float(v) for k, v in pending.items()})  # one host sync per round
        row["env_steps_per_s"] = round(self.cfg.env.num_envs * stats["len"] / max(round_s, 1e-9), 1)
        row["round_s"] = round(round_s, 3)
        self.log.log(row)
        self.log.progress(self.env_steps, {"ret": stats["return"], "succ": stats["success"]})

    def _evaluate(self) -> Decision | None:
        """Evaluate the agent on the eval seeds; a residual run pairs it with the base and acts on the
        guard's decision (the returned one)."""
        from actlab.rl.evaluate import evaluate_agent  # lazy: the evaluation harness and MuJoCo

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
        log_row = {"step": self.env_steps, "eval/success": s.success_rate, "eval/s": row["eval_s"]}
        text = f"{s.successes}/{s.episodes} (95% CI {s.ci_low:.2f}-{s.ci_high:.2f})"
        decision = None
        if self.guard is not None:
            per_seed = _per_seed(ev)
            row.update(per_seed=per_seed, bound=self.agent.bound)
            decision = decide(self.guard, self.cfg, self.env_steps, per_seed)
            row.update(vs_base=decision.comparison, guard=decision.action)
            log_row.update(
                {"eval/base_success": self.guard.base["success_rate"], "eval/bound": self.agent.bound}
            )
            log_row["eval/vs_base_p"] = decision.comparison["p"]
            text += f"; {decision.reason}"
            if decision.good:
                self.good_actor = {k: v.detach().clone() for k, v in self.agent.actor.state_dict().items()}
            if decision.action == "rollback":
                self.agent.actor.load_state_dict(self.good_actor or self.zero_actor)
                self.sac.actor_opt.state.clear()  # the moments belonged to the discarded weights
            # a kept actor is the policy just judged, at the bound it was judged with; a rolled-back one
            # runs at the narrowed bound
            judged_bound = row["bound"] if decision.action == "keep" else self.guard.bound
            self.judged = (self.env_steps, judged_bound)
            self._apply_guard()
        self.evals.append(row)
        self.log.log(log_row)
        self.log.message(f"eval @ {self.env_steps} env steps: {text}")
        if decision is not None and (decision.action != "keep" or decision.new_best):
            event = "handed_back" if decision.action == "keep" else decision.action
            self.log.log({"step": self.env_steps, "guard/event": event, "guard/reason": decision.reason})
            self.log.message(f"guard: {event}: {decision.reason}")
        return decision

    def _confirm(self) -> bool:
        """At the end of a residual run that hands back the base, with its last evaluation (of this
        step's actor) not below the base: that residual and the base again on
        ``residual.confirm_episodes`` fresh seeds, paired; it is handed back when significantly better
        there. Returns whether it was. The candidate was chosen on other seeds, so the test on these is
        not flattered by the choice (see ResidualConfig.confirm_episodes for why the in-run seeds are
        not enough)."""
        g = self.cfg.residual
        last = self.evals[-1] if self.evals else None
        if (
            self.guard is None
            or not g.confirm_episodes
            or self.guard.best is not None
            or last is None
            or last["env_steps"] != self.env_steps
            or last.get("guard") != "keep"
            or last["vs_base"]["candidate_successes"] < last["vs_base"]["reference_successes"]
        ):
            return False
        n, seed = g.confirm_episodes, g.confirm_seed
        self.log.message(
            f"confirming: the residual of step {self.env_steps} was not below the base on the evaluation "
            f"seeds but not significantly better; both again on {n} fresh seeds {seed}..{seed + n - 1}"
        )
        t = time.perf_counter()
        base = self._evaluate_at(0.0, n, seed)
        residual = self._evaluate_at(self._policy_bound(), n, seed)  # the bound this actor was judged with
        cmp = paired_compare(_per_seed(base), _per_seed(residual), g.alpha)
        better = cmp.verdict == "better"
        text = f"on {n} fresh seeds {seed}..{seed + n - 1}: {cmp.sentence()}"
        event = "handed_back" if better else "not_confirmed"
        self.guard.events.append({"step": self.env_steps, "event": event, "reason": text})
        if better:
            self.guard.best = {"step": self.env_steps, "comparison": cmp.as_dict(), "confirmed_on": [seed, n]}
        self.log.log({"step": self.env_steps, "guard/event": event, "guard/reason": text,
                      "confirm/s": round(time.perf_counter() - t, 2)})  # fmt: skip
        self.log.message(f"guard: {event}: {text}")
        return better

    def _evaluate_at(self, bound: float, episodes: int | None = None, seed: int | None = None) -> Any:
        """The agent's evaluation with its residual bound at ``bound`` (0: the base's actions exactly),
        on ``episodes`` seeds from ``seed`` (default: the run's evaluation seeds); the bound is restored."""
        from actlab.rl.evaluate import evaluate_agent  # lazy: the evaluation harness and MuJoCo

        before, self.agent.bound = self.agent.bound, bound
        try:
            return evaluate_agent(self.agent, self.cfg, episodes, seed)
        finally:
            self.agent.bound = before

    def _measure_base(self) -> None:
        """The base on the run's own evaluation seeds (the agent with its bound at 0: the base's actions
        exactly), once per run (again when eval.episodes changed on a resume)."""
        cfg, base = self.cfg, self.guard.base
        if base is not None and base["seed"] == cfg.eval.seed and base["episodes"] == cfg.eval.episodes:
            return
        t = time.perf_counter()
        ev = self._evaluate_at(0.0)
        s = ev.summary
        self.guard.base = {
            "seed": cfg.eval.seed,
            "episodes": cfg.eval.episodes,
            "per_seed": _per_seed(ev),
            "successes": s.successes,
            "success_rate": s.success_rate,
            "ci95": [s.ci_low, s.ci_high],
            "outcomes": dict(s.outcomes),
            "eval_s": round(time.perf_counter() - t, 2),
        }
        self.log.log({"step": self.env_steps, "eval/base_success": s.success_rate})
        self.log.message(
            f"base on the evaluation seeds {cfg.eval.seed}..{cfg.eval.seed + cfg.eval.episodes - 1}: "
            f"{s.successes}/{s.episodes}; the policy handed back stays the base until a residual is "
            f"significantly better on them (McNemar exact, p < {cfg.residual.alpha:g})"
        )
        # only before any training: a base re-measured on a resume does not change a run under way
        if self.env_steps == 0 and (reason := adapt_to_base(self.guard, cfg)) is not None:
            self._apply_guard()
            self.log.log({"step": 0, "guard/event": "weak_base", "guard/reason": reason})
            self.log.message(f"guard: {reason}")

    def _apply_guard(self) -> None:
        """The guard's bound and size penalty on the agent (after a build, a restore, or the base's
        measurement)."""
        self.agent.bound = self.guard.bound
        self.agent.penalty = 0.0 if self.guard.weak_base else float(self.cfg.residual.penalty)


def _per_seed(ev: Any) -> list[bool]:
    """Success of each episode of an evaluation, in seed order (what the guard's paired test takes)."""
    return [bool(e.success) for e in sorted(ev.episodes, key=lambda e: e.index)]


def _crossed(before: int, after: int, every: int) -> bool:
    return math.floor(after / every) > math.floor(before / every)


def bundle_digest(path: Path) -> str:
    """sha256 over a bundle directory's files (names and contents; hidden files such as the output
    marker excluded): equal for a bundle and its copy."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = f.relative_to(path)
        if any(part.startswith(".") for part in rel.parts):
            continue
        h.update(f"{rel.as_posix()}\0{file_sha256(f)}\n".encode())
    return h.hexdigest()


def _differ(a: Path, b: Path) -> bool:
    return bundle_digest(a) != bundle_digest(b)


def _recorded_base(ckpts: Any, step: int | None) -> str | None:
    """The digest of the base checkpoint ``step`` was trained on (None: a new run, a checkpoint from before
    it was recorded, or a state.json the resume refuses as damaged later)."""
    if step is None:
        return None
    try:
        found = ckpts.meta(step).get("base_sha256")
    except (ActlabError, AttributeError):
        return None
    return found if isinstance(found, str) else None


def _check_base(what: Path, recorded: str | None, copy: Path, deleted: bool) -> None:
    """A base of the same shape with other weights: the residual was resumed (or reported) on a policy it
    was never trained on, exit 0 (its own copy deleted and --base replaced, or the copy replaced)."""
    if recorded is None or bundle_digest(what) == recorded:
        return
    if what != copy:  # its copy deleted, --base another bundle
        put_back = f"pass --base the bundle the run started from (it is copied again into {copy})"
    elif deleted:  # a report of a run without its copy: the bundle its config names
        put_back = f"put the bundle the run started from back at {copy}"
    else:
        put_back = (
            f"put the bundle the run started from back in {copy} (remove it, and pass that bundle as --base)"
        )
    raise ActlabError(
        "the base policy is not the one this run's checkpoints were trained on"
        + (" (the run's own copy of it was deleted)" if deleted else ""),
        file=what,
        field="base",
        expected=f"the bundle of sha256 {recorded[:16]}... (recorded in each checkpoint's state.json)",
        found=f"sha256 {bundle_digest(what)[:16]}...",
        fix=f"{put_back}; to train on this base, start a new --out",
    )


def _load_base(cfg: RLConfig, run_dir: Path | None, check: bool = True, recorded: str | None = None) -> Any:
    """The frozen base policy. A run keeps its own copy of the bundle (``run_dir/base``, copied once,
    atomically) and always loads that: a checkpoint's residual is meaningless without the exact base it
    was trained on, and the bundle ``--base`` named may be replaced or deleted later (it happened to the
    first long run of docs/rl.md: the shared demo checkpoint was deleted by a re-run of the demo).

    With ``check``, a copy that differs from the bundle ``cfg.base`` names (by digest) is refused: a copy
    left by a failed start would otherwise replace the ``--base`` asked for. ``recorded``: the digest of
    the base the checkpoint resumed or reported was trained on; the bundle loaded must have it."""
    if cfg.base is None:
        return None
    import shutil

    from actlab.policies import load_policy  # lazy: imports torch

    path = Path(cfg.base)
    if run_dir is not None:
        copy = Path(run_dir) / BASE_COPY
        if not copy.is_dir():
            if not path.is_dir():
                raise ActlabError(
                    "base policy bundle not found", file=path, field="base", fix="check the path"
                )
            _check_base(path, recorded, copy, deleted=True)
            with atomic_dir(copy) as tmp:
                shutil.copytree(path, tmp, dirs_exist_ok=True)
        elif check and path.is_dir() and path.resolve() != copy.resolve() and _differ(path, copy):
            if recorded is not None and bundle_digest(path) == recorded:
                # the copy is what changed (edited, damaged): its words sent the user to resume on it, fix
                # "pass --base COPY" (25th fault run, rr_base_mid_edit_resume)
                raise ActlabError(
                    "the run directory's copy of the base policy changed since its checkpoints were trained "
                    f"on it (edited or damaged); --base {path} is still that base",
                    file=copy,
                    field="base",
                    expected=f"the bundle of sha256 {recorded[:16]}... (recorded in each checkpoint's "
                    f"state.json; {path} has it)",
                    found=f"sha256 {bundle_digest(copy)[:16]}...",
                    fix=f"remove the damaged copy (rm -r {copy}) and resume with --base {path}: it is copied "
                    "again (nothing was trained)",
                )
            raise ActlabError(
                "the run directory's copy of the base policy differs from --base",
                file=copy,
                field="base",
                expected=f"the same bundle as {path} (compared by sha256)",
                found="other files",
                fix=f"to continue this run on the base it was trained on, pass --base {copy}; to train "
                f"on {path}, choose a new --out (or, if {run_dir} holds no checkpoint, remove the "
                f"leftover copy: rm -r {copy})",
            )
        else:
            _check_base(copy, recorded, copy, deleted=False)
        path = copy
    elif path.is_dir():  # a report of a run whose copy was deleted: the bundle its config names
        _check_base(path, recorded, path, deleted=True)
    return load_policy(path, device=cfg.device)


def newest_checkpoint(run: Path) -> Path:
    """The newest complete checkpoint of RL run ``run``, as a resume picks it: the newest ``step_N``
    directory, not ``last.json`` (which a kill or an edit can leave naming nothing; ``rl report`` said
    "not an RL checkpoint, pass a run directory" of a run directory without it)."""
    ckpts = RLCheckpoints(run, keep_last=1)
    steps = ckpts.steps()
    if not steps:
        raise ActlabError(
            "the RL run has no complete checkpoint",
            file=ckpts.root,
            expected="checkpoints/step_N/ as actlab rl train writes them",
            fix=f"the run stopped before its first checkpoint: `actlab rl train --out {run} --resume` starts "
            "it over; or pass another run",
        )
    return ckpts.path(steps[-1])


def load_agent(path: str | Path, device: str = "cpu") -> Any:
    """The agent of a checkpoint directory (``checkpoints/step_N``) or of a run's last checkpoint, loaded
    strictly (every tensor of the agent its config builds; the digest recorded at save checked)."""
    from actlab.rl.agent import Agent  # lazy: imports torch

    path = Path(path)
    if not (path / AGENT_FILE).is_file() and (path / "checkpoints").is_dir():
        path = newest_checkpoint(path)
    if not (path / AGENT_FILE).is_file():
        from actlab.utils.kinds import describe  # lazy: only for the refusal

        # (a supervised run or a policy bundle was "not an RL checkpoint ... pass a run directory")
        what = describe(path)
        raise ActlabError(
            "not an RL checkpoint",
            file=path,
            expected=f"an actlab rl train run directory, or one of its checkpoints/step_N ({AGENT_FILE})",
            found=what or ("a directory without " + AGENT_FILE if path.is_dir() else "nothing there"),
            fix="pass the --out of an actlab rl train run"
            + ("; a policy of actlab train is evaluated by actlab eval PATH" if what else ""),
        )
    data = read_json(path / CONFIG_FILE, "RL config")
    fix = (
        f"undo the edit: actlab wrote it as the run's config; `cp {path.parent.parent / RUN_CONFIG} "
        f"{path / CONFIG_FILE}` where the run's own config.json is intact"
    )
    cfg = cfgutil.from_file(lambda: config_from_dict(data, str(path / CONFIG_FILE)), path / CONFIG_FILE,
                            "the checkpoint's rl_config.json", fix)  # fmt: skip
    cfg = dataclasses.replace(cfg, device=device)
    run_dir = path.parent.parent if path.parent.name == "checkpoints" else None
    agent_file = path / AGENT_FILE
    meta: dict[str, Any] = {}
    if run_dir is not None and (path / "training_state" / "state.json").is_file():
        ckpts = RLCheckpoints(run_dir, cfg.checkpoint.keep_last)
        step = int(path.name.split("_")[1])
        meta = check_rl_meta(ckpts.meta(step), ckpts, step)  # a policy_bound NaN: "the action contains NaN"
        tensors = read_tensors(ckpts.verify(step, AGENT_FILE, meta), ckpts)
    else:
        tensors = read_tensors(agent_file)
    if run_dir is not None and not (run_dir / BASE_COPY).is_dir():
        run_dir = None  # a run from before runs kept their base: the bundle config names
    # the run's own copy of the base is what the agent was trained on: no comparison with cfg.base here
    recorded = meta.get("base_sha256") if isinstance(meta.get("base_sha256"), str) else None
    agent = Agent(cfg, _load_base(cfg, run_dir, check=False, recorded=recorded))
    agent.load_trainable_state(tensors, agent_file)
    state_file = path / "training_state" / "state.json"
    if cfg.residual_rl and state_file.is_file():
        # the residual's bound of this checkpoint's policy (a run before the guard: the full bound)
        state = meta or read_json(state_file, "checkpoint state")
        agent.bound = float(state.get("policy_bound") or 1.0)
    return agent.eval()
