"""The training loop: decides when to log, validate, checkpoint and stop. The step itself is elsewhere.

``train(cfg, out_dir)`` runs one process (or one rank of a torchrun job) from step 1, or from the last
checkpoint with ``resume=True``. Every random stream, the sampler position, the optimizer and the schedule
are saved with each checkpoint, so an interrupted run resumed on CPU continues the same loss curve bit for
bit (tested). SIGTERM (preemption, ``kill``) writes a checkpoint after the current step and stops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.training import ddp
from actlab.training.build import TrainRun, build_run
from actlab.training.checkpoint import CheckpointManager
from actlab.training.config import (
    TrainConfig,
    config_from_dict,
    config_hash,
    config_to_dict,
    resume_diff,
)
from actlab.training.ddp import DistInfo
from actlab.training.metrics_log import METRICS_FILE, MetricsLog, check_sinks
from actlab.training.schedule import sync_lr
from actlab.training.timing import PhaseTimer
from actlab.utils.io import atomic_write_json, read_json

CONFIG_FILE = "config.json"
# The RunSummary of the last run of this directory that returned (written by rank 0 at the end).
SUMMARY_FILE = "summary.json"


@dataclasses.dataclass
class RunSummary:
    """What a finished (or stopped) run reports."""

    # the run directory
    run_dir: str
    # last completed optimizer step
    step: int
    # mean training loss over the last logging window
    final_loss: float | None
    # lowest validation loss seen (None without validation)
    best_val_loss: float | None
    # checkpoint directory of the best validation loss
    best_checkpoint: str | None
    # newest checkpoint directory
    last_checkpoint: str | None
    # wall-clock seconds of the loop (build excluded)
    wall_s: float
    # training samples per second over the whole loop (all ranks)
    samples_per_s: float
    # why the loop ended: "completed", "sigterm", "overfit_reached"
    stopped: str = "completed"
    # overfit mode: the step at which the loss fell under the threshold
    overfit_step: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def train(
    cfg: TrainConfig,
    out_dir: str | Path,
    resume: bool = False,
    *,
    dist: DistInfo | None = None,
) -> RunSummary:
    """Train ``cfg`` into ``out_dir`` (rank 0 writes); with ``resume`` continue from its last checkpoint.

    Raises ActlabError before step 1 for a bad config, a missing dataset, a resume mismatch or too
    little disk space; in overfit mode (``cfg.overfit.samples > 0``) also when the threshold is not met.
    """
    dist = dist or ddp.dist_info_from_env()
    out = Path(out_dir)
    ckpts = CheckpointManager(out, cfg.checkpoint.keep_last, cfg.checkpoint.keep_best)
    start = _check_run_dir(cfg, out, resume, ckpts)  # refusals come before torch is even imported
    if resume and start == cfg.steps:
        finished = _finished_summary(out, start)
        if finished is not None:  # nothing to train: report the run that reached this step
            print(f"the run already finished at step {start}: nothing to train", file=sys.stderr)
            return finished
    check_sinks(tensorboard=cfg.log.tensorboard, wandb=cfg.log.wandb)  # not after decoding the FrameStore
    device = ddp.setup(dist, cfg.device)
    try:
        summary = _train(cfg, out, start, ckpts, dist, device)
    finally:
        ddp.teardown(dist)
    if dist.is_main:
        atomic_write_json(out / SUMMARY_FILE, summary.as_dict())
    return summary


def _finished_summary(out: Path, step: int) -> RunSummary | None:
    """The saved summary of a run that completed exactly at ``step`` (None if there is none: an older or
    killed run; it is then resumed as usual, which trains nothing and measures no throughput)."""
    path = out / SUMMARY_FILE
    if not path.is_file():
        return None
    try:
        saved = read_json(path, "run summary")
        summary = RunSummary(**{f.name: saved[f.name] for f in dataclasses.fields(RunSummary)})
    except (ActlabError, KeyError, TypeError):
        return None
    return summary if summary.step == step and summary.stopped == "completed" else None


def overfit_config(cfg: TrainConfig, samples: int) -> TrainConfig:
    """``cfg`` turned into an overfit check on ``samples`` fixed frames: constant lr, no augmentation,
    no validation, up to ``overfit.max_steps`` steps, one checkpoint at the end."""
    return dataclasses.replace(
        cfg,
        overfit=dataclasses.replace(cfg.overfit, samples=samples),
        steps=cfg.overfit.max_steps,
        schedule=dataclasses.replace(
            cfg.schedule, kind="constant", warmup_steps=min(cfg.schedule.warmup_steps, cfg.overfit.max_steps)
        ),
        eval=dataclasses.replace(cfg.eval, every=0),
        checkpoint=dataclasses.replace(cfg.checkpoint, every=0),
        data=dataclasses.replace(cfg.data, val_fraction=0.0),
    )


# ------------------------------------------------------------------------------------------ run dir
def _check_run_dir(cfg: TrainConfig, out: Path, resume: bool, ckpts: CheckpointManager) -> int:
    """The step to resume from (0 for a new run); refuses a used directory or a changed config."""
    if out.exists() and not out.is_dir():
        raise ActlabError(
            "the output path is a file, not a run directory",
            file=out,
            expected="a new or existing run directory",
            fix="choose another --out",
        )
    return _resume_step(cfg, out, ckpts) if resume else _check_fresh(out, ckpts)


def _prepare_resume(out: Path, start: int, ckpts: CheckpointManager, dist: DistInfo) -> None:
    """Rank 0, on resume: drop partial writes and checkpoints past ``start`` and finish the pointer
    updates and pruning a kill may have cut short; then all ranks sync. Runs before the disk preflight
    so that leftovers of the killed run are not counted as checkpoints."""
    if dist.is_main and start:
        ckpts.clean_partial()
        ckpts.truncate_after(start)
        ckpts.repair_pointers(start)
    ddp.barrier(dist)


def _write_run_config(cfg: TrainConfig, out: Path, dist: DistInfo) -> None:
    """Rank 0 creates the run directory and writes config.json (after the preflight: a refused run
    leaves nothing behind); then all ranks sync."""
    if dist.is_main:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(out / CONFIG_FILE, config_to_dict(cfg))
    ddp.barrier(dist)


def _check_fresh(out: Path, ckpts: CheckpointManager) -> int:
    if ckpts.steps() or (out / METRICS_FILE).is_file():
        raise ActlabError(
            "the output directory already holds a training run",
            file=out,
            fix="pass --resume to continue it, or choose another --out",
        )
    return 0


def _resume_step(cfg: TrainConfig, out: Path, ckpts: CheckpointManager) -> int:
    step = ckpts.last_step()
    if step is None:
        raise ActlabError(
            "nothing to resume: the run directory has no complete checkpoint",
            file=out / "checkpoints",
            fix="start without --resume",
        )
    saved = load_run_config(out)
    diff = resume_diff(saved, cfg)
    if diff:
        lines = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items())
        raise ActlabError(
            "the config differs from the run being resumed in keys that change what is computed",
            file=out / CONFIG_FILE,
            field=", ".join(diff),
            expected="the saved values",
            found=lines,
            fix="resume with the saved config (omit --preset/--set for these keys); only steps, logging, "
            "eval/checkpoint cadence and device may change",
        )
    return step


def load_run_config(out: str | Path) -> TrainConfig:
    """The ``TrainConfig`` saved in a run directory."""
    return config_from_dict(read_json(Path(out) / CONFIG_FILE, "run config"), where=str(out))


# ------------------------------------------------------------------------------------------ train
def _train(
    cfg: TrainConfig,
    out: Path,
    start: int,
    ckpts: CheckpointManager,
    dist: DistInfo,
    device,
) -> RunSummary:
    _prepare_resume(out, start, ckpts, dist)
    run = build_run(cfg, device, dist, out_dir=out, existing_checkpoint_bytes=ckpts.bytes_on_disk())
    log = None
    try:
        _write_run_config(cfg, out, dist)
        window = _restore(run, ckpts, start) if start else None
        log = MetricsLog(
            out,
            enabled=dist.is_main,
            total_steps=cfg.steps,
            start_step=start,
            progress=cfg.log.progress,
            tensorboard=cfg.log.tensorboard,
            wandb=cfg.log.wandb,
            wandb_project=cfg.log.wandb_project,
            run_config=config_to_dict(cfg),
        )
        with _sigterm_flag() as stop_flag:
            summary = Loop(run, ckpts, log, out, stop_flag, window).train_from(start)
    finally:
        run.close()
        if log is not None:
            log.close()
    if dist.is_main and cfg.log.plot:
        _plot(out, cfg)
    if cfg.overfit.samples and summary.overfit_step is None:
        raise ActlabError(
            f"overfit check failed: the loss did not fall under {cfg.overfit.loss_threshold} on "
            f"{cfg.overfit.samples} samples in {cfg.steps} steps (last {summary.final_loss:.4g})",
            file=out / METRICS_FILE,
            field="overfit.loss_threshold",
            expected=f"loss < {cfg.overfit.loss_threshold}",
            found=summary.final_loss,
            fix="a model that cannot memorize a few samples has a pipeline bug: check that images, states "
            "and actions line up, the normalization stats, and the learning rate (optim.lr); or raise "
            "overfit.max_steps",
        )
    return summary


def _plot(out: Path, cfg: TrainConfig) -> None:
    """``training.png`` from metrics.jsonl; a plotting failure is reported, the finished run stands."""
    from actlab.training.metrics_log import read_metrics
    from actlab.viz.training import plot_training

    try:
        plot_training(read_metrics(out), out / "training.png", title=f"{out.name} ({cfg.name})")
    except Exception as e:  # the checkpoints and metrics are written; a figure must not fail the run
        print(f"warning: could not draw {out / 'training.png'}: {e}", file=sys.stderr)


def _restore(run: TrainRun, ckpts: CheckpointManager, step: int) -> tuple[dict[str, Any], int]:
    """Load weights, optimizer, schedule, sampler position and RNG of checkpoint ``step``.

    Returns this rank's metric sums and step count of the logging window the checkpoint was taken in
    (a checkpoint in the middle of a window), so the first row after the resume averages the same steps
    as an uninterrupted run's.
    """
    from actlab.policies import load_policy

    state = ckpts.load(step, run.dist.rank)
    saved_world = int(state.meta.get("world_size", 1))
    if saved_world != run.dist.world_size:
        raise ActlabError(
            "resume needs the same number of processes as the interrupted run",
            file=state.path / "training_state/state.json",
            field="world_size",
            expected=saved_world,
            found=run.dist.world_size,
            fix=f"launch with torchrun --nproc_per_node {saved_world}",
        )
    loaded = load_policy(state.path, device=run.device)
    run.policy.load_state_dict(loaded.state_dict())
    run.load_optimizer_state(state.optimizer)  # with EMA: the bundle is averaged, the raw weights return
    run.scheduler.load_state_dict(state.scheduler)
    # The optimizer state carries the learning rate the saved schedule chose for the next step; recompute
    # it from the current schedule (identical unless `steps` changed, which stretches the cosine).
    sync_lr(run.scheduler)
    rank_meta = state.meta["ranks"][run.dist.rank]
    run.load_rng_state(state.rng, rank_meta)
    sums = {k: v.to(run.device) for k, v in state.rng.get("metric_sums", {}).items()}
    return sums, int(rank_meta.get("metric_steps", 0))


@contextlib.contextmanager
def _sigterm_flag():
    """A one-element list that becomes [True] on SIGTERM (main thread only; elsewhere never set)."""
    flag = [False]

    def handler(signum, frame):
        flag[0] = True

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        previous = None
    try:
        yield flag
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _min_none(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _due(step: int, every: int, total: int) -> bool:
    return step == total or (every > 0 and step % every == 0)


class Loop:
    """Runs steps and decides when to log, evaluate, checkpoint and stop."""

    def __init__(
        self,
        run: TrainRun,
        ckpts: CheckpointManager,
        log: MetricsLog,
        out: Path,
        stop_flag,
        window: tuple[dict[str, Any], int] | None = None,
    ):
        self.run, self.ckpts, self.log, self.out, self.stop_flag = run, ckpts, log, out, stop_flag
        self.cfg = run.cfg
        self.timer = PhaseTimer(run.device)
        # metric sums on the device and the number of steps they cover, since the last training row
        # (restored from the checkpoint on resume: `window`)
        self.sums: dict[str, Any] = dict(window[0]) if window else {}
        self.count = window[1] if window else 0
        self.last_val: float | None = None
        self.best_val: float | None = None
        self.last_loss: float | None = None
        self.last_ckpt: str | None = None

    def train_from(self, start: int) -> RunSummary:
        cfg = self.cfg
        t0 = self._t_log = time.perf_counter()
        step, stopped, overfit_step = start, "completed", None
        for step in range(start + 1, cfg.steps + 1):
            self.timer.start()
            batch = self.run.next_batch()
            self.timer.mark("data")
            self._accumulate(self.run.step(batch, self.timer))
            self.timer.stop()
            if _due(step, cfg.log.every, cfg.steps):
                self._log_train(step)
                if cfg.overfit.samples and self.last_loss < cfg.overfit.loss_threshold:
                    overfit_step, stopped = step, "overfit_reached"
            if stopped != "overfit_reached" and self._eval_due(step):
                self._log_val(step)
            if stopped == "overfit_reached" or _due(step, cfg.checkpoint.every, cfg.steps):
                self._checkpoint(step)
            if cfg.kill_at_step == step:
                os.kill(os.getpid(), signal.SIGKILL)  # rehearse a crash (tests): no cleanup at all
            if stopped == "overfit_reached":
                break
            if self._stop_requested(step):
                if self.last_ckpt != self.ckpts.path(step).name:
                    self._checkpoint(step)
                stopped = "sigterm"
                break
        wall = time.perf_counter() - t0
        samples = (step - start) * cfg.batch_size * self.run.dist.world_size
        best = self.ckpts.pointer("best") if self.run.dist.is_main else None
        return RunSummary(
            run_dir=str(self.out),
            step=step,
            final_loss=self.last_loss,
            best_val_loss=_min_none(self.best_val, best.get("val_loss") if best else None),
            best_checkpoint=str(self.ckpts.root / best["path"]) if best else None,
            last_checkpoint=str(self.ckpts.root / self.last_ckpt) if self.last_ckpt else None,
            wall_s=wall,
            samples_per_s=samples / wall if wall > 0 else 0.0,
            stopped=stopped,
            overfit_step=overfit_step,
        )

    # ---------------------------------------------------------------------------------- decisions
    def _eval_due(self, step: int) -> bool:
        if not self.run.split.val_ranges or self.cfg.eval.every == 0:
            return False
        # every checkpoint gets a validation loss so "best" is chosen among saved checkpoints
        return _due(step, self.cfg.eval.every, self.cfg.steps) or _due(
            step, self.cfg.checkpoint.every, self.cfg.steps
        )

    def _stop_requested(self, step: int) -> bool:
        if not self.run.dist.distributed:
            return self.stop_flag[0]
        if step % self.cfg.log.every:  # agree across ranks only on logging steps (a collective)
            return False
        import torch

        flag = torch.tensor([1.0 if self.stop_flag[0] else 0.0], device=self.run.device)
        return bool(ddp.all_reduce_mean({"f": flag}, self.run.dist)["f"].item() > 0)

    # ---------------------------------------------------------------------------------- actions
    def _accumulate(self, metrics: dict[str, Any]) -> None:
        # Why: summing on the device keeps the step free of host syncs; read back on logging steps only.
        for k, v in metrics.items():
            v = v.detach().float()
            self.sums[k] = v if k not in self.sums else self.sums[k] + v
        self.count += 1

    def _log_train(self, step: int) -> None:
        import torch

        times, n = self.timer.read()
        sums = ddp.all_reduce_mean(self.sums, self.run.dist)
        keys = sorted(sums)
        values = torch.stack([sums[k] for k in keys]).cpu().tolist() if keys else []  # the host sync
        now = time.perf_counter()
        elapsed, self._t_log = now - self._t_log, now
        n = max(n, 1)  # steps timed in this process since the last row (timing and samples/s)
        count = max(self.count, 1)  # steps in the metric sums (a resumed window includes earlier ones)
        row: dict[str, Any] = {"step": step, **{k: v / count for k, v in zip(keys, values)}, **self.run.lrs()}
        step_time = sum(times.values()) / n
        row.update(
            {
                "samples_per_s": n * self.cfg.batch_size * self.run.dist.world_size / elapsed,
                "time_data_s": times.get("data", 0.0) / n,
                "time_fwd_bwd_s": times.get("fwd_bwd", 0.0) / n,
                "time_optim_s": times.get("optim", 0.0) / n,
                "time_step_s": step_time,
                "data_stall_frac": times.get("data", 0.0) / n / step_time if step_time > 0 else 0.0,
                "epoch": step
                * self.cfg.batch_size
                * self.run.dist.world_size
                / max(1, self.run.split.train_frames),
            }
        )
        self.sums, self.count = {}, 0
        self.last_loss = row.get("loss")
        self.log.log(row)
        self.log.progress(step, {"loss": self.last_loss, "lr": row["lr"]})

    def _log_val(self, step: int) -> None:
        t0 = time.perf_counter()
        val = self.run.evaluate()
        if val is None:
            return
        self.last_val = val
        self.best_val = val if self.best_val is None else min(self.best_val, val)
        self.log.log({"step": step, "val_loss": val, "time_eval_s": time.perf_counter() - t0})
        self.log.message(f"step {step}: val_loss {val:.5g}")
        self._t_log = time.perf_counter()  # samples/s measures training, not evaluation

    def _checkpoint(self, step: int) -> None:
        t0 = time.perf_counter()
        run, dist = self.run, self.run.dist
        tensors, meta = run.rng_state()
        # the open logging window (a checkpoint step need not be a logging step); .cpu() syncs, as the
        # checkpoint write does anyway
        tensors["metric_sums"] = {k: v.detach().cpu() for k, v in self.sums.items()}
        meta["metric_steps"] = self.count
        gathered = ddp.all_gather_object((tensors, meta), dist)  # every rank's RNG + sampler position
        if dist.is_main:
            val = self.last_val if self._eval_due(step) else None
            with run.averaged_weights():  # with EMA, the bundle (what evaluation loads) is the average
                self.ckpts.save(
                    step,
                    run.policy,
                    run.optimizer_state(),
                    run.scheduler.state_dict(),
                    meta={
                        "config_hash": config_hash(self.cfg),
                        "world_size": dist.world_size,
                        "ranks": [m for _, m in gathered],
                        "train_loss": self.last_loss,
                    },
                    rng_per_rank=[t for t, _ in gathered],
                    val_loss=val,
                    bundle_extra={
                        "train": {
                            "step": step,
                            "preset": self.cfg.name,
                            "val_loss": val,
                            "train_loss": self.last_loss,
                        }
                    },
                )
        self.last_ckpt = self.ckpts.path(step).name
        ddp.barrier(dist)
        self.log.log(
            {"step": step, "checkpoint": self.last_ckpt, "time_checkpoint_s": time.perf_counter() - t0}
        )
        self._t_log = time.perf_counter()  # samples/s measures training, not checkpoint writes
