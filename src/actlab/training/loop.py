"""The training loop: decides when to log, validate, checkpoint and stop. The step itself is elsewhere.

``train(cfg, out_dir)`` runs one process (or one rank of a torchrun job) from step 1, or from the last
checkpoint with ``resume=True``. Every random stream, the sampler position, the optimizer and the schedule
are saved with each checkpoint, so an interrupted run resumed on CPU continues the same loss curve bit for
bit (tested). SIGTERM (preemption, ``kill``) writes a checkpoint after the current step and stops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from actlab.datasets.format import sim_seeds
from actlab.datasets.sources import source_record
from actlab.errors import ActlabError
from actlab.lifecycle.metrics_log import METRICS_FILE, MetricsLog, check_sinks, read_metrics
from actlab.lifecycle.rundir import (
    LOCKED_FIX,
    RunKind,
    check_fresh,
    check_run_path,
    holds_run,
    refuse_changes,
    resume_start,
)
from actlab.lifecycle.stop import StopSignals, catch_sigterm
from actlab.profiling.timing import PhaseTimer
from actlab.training import ddp
from actlab.training.build import TrainRun, build_run
from actlab.training.checkpoint import CheckpointManager
from actlab.training.config import (
    RESUMABLE_CHANGES,
    TrainConfig,
    config_from_dict,
    config_hash,
    config_to_dict,
    resume_diff,
)
from actlab.training.ddp import DistInfo
from actlab.training.init_from import check_correction_only
from actlab.training.resume_checks import check_config_unedited, check_dataset_present, check_same_dataset
from actlab.training.schedule import sync_lr
from actlab.training.slowdown import SlowdownWatch, cure_applied
from actlab.utils.config import from_file
from actlab.utils.disk import write_error
from actlab.utils.io import atomic_write_json, read_json, refuse_overlapping_paths
from actlab.utils.kinds import refuse_cache_inside_output
from actlab.utils.lock import DirLock
from actlab.utils.threads import (
    AdaptiveThreads,
    keeps_torch_threads,
    load_1m,
    torch_thread_count,
    torch_threads,
    usable_cpus,
)
from actlab.viz.training import plot_training

CONFIG_FILE = "config.json"
# The RunSummary of the last run of this directory that returned (written by rank 0 at the end).
SUMMARY_FILE = "summary.json"
# Test hook, not a setting: the process SIGKILLs itself right after this step is complete (and
# checkpointed if due), to rehearse a crash.
KILL_AT_STEP_ENV = "ACTLAB_TEST_KILL_AT_STEP"


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
    # why the loop ended: "completed", "sigterm", "sigint" (Ctrl-C), "overfit_reached"
    stopped: str = "completed"
    # overfit mode: the step at which the loss fell under the threshold
    overfit_step: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@keeps_torch_threads
def train(
    cfg: TrainConfig,
    out_dir: str | Path,
    resume: bool = False,
    *,
    dist: DistInfo | None = None,
) -> RunSummary:
    """Train ``cfg`` into ``out_dir`` (rank 0 writes); with ``resume`` continue from its last checkpoint.

    Rank 0 holds the run lock (:data:`actlab.utils.lock.LOCK_FILE` in ``out_dir``) from before it reads
    the directory until the summary is written, so a second ``actlab train`` on the same directory (a new
    run or a ``--resume``) fails at once instead of pruning checkpoints from a stale view.

    Raises ActlabError before step 1 for a bad config, a missing dataset, a resume mismatch, a locked
    directory or too little disk space; during training for a non-finite loss (divergence), a full disk
    or a batch that does not fit in memory; in overfit mode (``cfg.overfit.samples > 0``) also when the
    threshold is not met.
    """
    dist = dist or ddp.dist_info_from_env()
    out = Path(out_dir)
    check_run_path(out)
    check_correction_only(cfg)
    # the config's paths, however they were given (--dataset, --set data.path=, --set data.cache_dir=):
    # neither the run nor the frame cache may be written into the dataset or the bundle it starts from
    refuse_overlapping_paths(
        [("--out", out), ("data.cache_dir", cfg.data.cache_dir)],
        [("data.path", cfg.data.path), ("init_from", cfg.init_from)],
        distinct_outputs=False,  # a frame cache inside the run directory is the run's own
    )
    refuse_cache_inside_output(cfg.data.cache_dir, "data.cache_dir", own=out)
    lock = DirLock(out, "run directory", fix=LOCKED_FIX) if dist.is_main else contextlib.nullcontext()
    try:
        with lock:
            return _train_locked(cfg, out, resume, dist)
    except OSError as e:  # before training (the lock, the run directory): failures inside are named there
        fault = write_error(
            e,
            out,
            out=out,
            stopped="the run did not start",
            again="run the same command again",
            elsewhere="choose an --out on another disk",
        )
        if fault is None:
            raise
        raise fault from e


def _train_locked(cfg: TrainConfig, out: Path, resume: bool, dist: DistInfo) -> RunSummary:
    ckpts = CheckpointManager(out, cfg.checkpoint.keep_last, cfg.checkpoint.keep_best)
    start = _check_run_dir(cfg, out, resume, ckpts)  # refusals come before torch is even imported
    if resume and start == cfg.steps:
        finished = _finished_summary(out, start) or _rebuilt_summary(out, ckpts, start, dist)
        print(f"the run already finished at step {start}: nothing to train", file=sys.stderr)
        return finished
    check_sinks(tensorboard=cfg.log.tensorboard, wandb=cfg.log.wandb)  # not after decoding the FrameStore
    device = ddp.setup(dist, cfg.device)
    try:
        # Rank 0 read the directory under the run lock; the other ranks follow its view.
        start = ddp.broadcast_object(start, dist)
        try:
            summary = _train(cfg, out, start, ckpts, dist, device)
            if dist.is_main:
                atomic_write_json(out / SUMMARY_FILE, summary.as_dict())
        except Exception as e:
            fault = _user_fault(e, cfg, out, ckpts, device)
            if fault is None:
                raise
            raise fault from e
    finally:
        ddp.teardown(dist)
    return summary


def _user_fault(
    e: Exception, cfg: TrainConfig, out: Path, ckpts: CheckpointManager, device
) -> ActlabError | None:
    """The ActlabError for a failure a user fixes outside the code (a full disk, a directory it may not
    write, a read-only filesystem, a failing disk, a batch too large for memory), or None for anything
    else (re-raised as it is)."""
    if isinstance(e, ActlabError):
        return None
    last = ckpts.last_step()
    where = (
        f"checkpoint {ckpts.path(last)} is intact: resume continues from it"
        if last is not None
        else "no checkpoint was written yet: the same command starts the run over"
    )
    written = write_error(
        e,
        None,
        out=out,
        stopped=f"training stopped ({where})",
        # before the first checkpoint there is nothing to resume (a resume said "nothing to resume")
        again=f"`actlab train --out {out} --resume`" if last is not None else "run the same command again",
        elsewhere=f"copy {out} to another disk and continue there with `actlab train --out COPY --resume`",
        save_less=", or lower checkpoint.keep_last",
        rescue=f"copy the newest checkpoint {ckpts.path(last)} to another disk" if last is not None else "",
        # the other place training writes: the frame and stats cache (data.cache_dir, else $ACTLAB_CACHE)
        outside="point the frame cache at a writable disk: --set data.cache_dir=DIR, or ACTLAB_CACHE=DIR "
        "(~/.cache/actlab when neither is set)",
    )
    if written is not None:
        return written
    if _out_of_memory(e):
        where = (
            "no checkpoint was written yet, so the same --out restarts with the new batch size"
            if last is None
            else "batch_size cannot change on --resume: train the new batch size into a new --out"
        )
        return ActlabError(
            f"out of memory at batch_size {cfg.batch_size}",
            field="batch_size",
            expected="a batch that fits in the training device's memory",
            found=str(e).strip().splitlines()[0][:300],
            fix="find the largest batch that fits with `actlab find-batch-size --preset "
            f"{cfg.name} --dataset {cfg.data.path}"
            + (" --device cpu --memory-limit SIZE" if device.type == "cpu" else f" --device {device}")
            + f"` (with your --set options), then train with --set batch_size=N ({where}); a "
            "smaller data.image_size or fewer policy.cameras also lowers the memory a step needs",
        )
    return None


def _out_of_memory(e: BaseException) -> bool:
    """torch.OutOfMemoryError (CUDA, "CUDA out of memory"), MPS "out of memory", the CPU allocator's
    "DefaultCPUAllocator: can't allocate memory" RuntimeError and numpy's MemoryError."""
    if isinstance(e, MemoryError):
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


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
    if summary.step != step or summary.stopped != "completed":
        return None
    # the paths of this directory, not of the one the summary was written in: a copy of a finished run
    # ("already finished") named the original's run directory and checkpoints
    ckpt = {k: getattr(summary, k) for k in ("best_checkpoint", "last_checkpoint")}
    moved = {k: str(out / "checkpoints" / Path(v).name) for k, v in ckpt.items() if v}
    return dataclasses.replace(summary, run_dir=str(out), **moved)


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
    """The step to resume from (0 for a new run); refuses a used directory or a changed config.

    Called under the run lock, so what it reads cannot change before the run starts."""
    return _resume_step(cfg, out, ckpts) if resume else check_fresh(out, ckpts, TRAINING_RUN)


def _prepare_resume(out: Path, start: int, ckpts: CheckpointManager, dist: DistInfo) -> None:
    """Rank 0, on resume: drop partial writes and checkpoints past ``start`` and finish the pointer
    updates and pruning a kill may have cut short; then all ranks sync. Runs before the disk preflight
    so that leftovers of the killed run are not counted as checkpoints."""
    if dist.is_main:
        ckpts.clean_partial()
        if start:
            ckpts.truncate_after(start)
            ckpts.repair_pointers(start)
        else:  # a run started over: pointers left by a damaged run name checkpoints that do not exist
            for name in ("last.json", "best.json"):
                (ckpts.root / name).unlink(missing_ok=True)
    ddp.barrier(dist)


def _write_run_config(cfg: TrainConfig, out: Path, dist: DistInfo) -> None:
    """Rank 0 creates the run directory and writes config.json (after the preflight: a refused run
    leaves nothing behind); then all ranks sync."""
    if dist.is_main:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(out / CONFIG_FILE, config_to_dict(cfg))
    ddp.barrier(dist)


def _is_run_dir(out: Path) -> bool:
    """Whether ``out`` holds (the start of) an actlab training run (a policy bundle's config.json has no
    ``steps``)."""
    return holds_run(out, CONFIG_FILE, ("steps", "optim", "checkpoint"))


# What the run lifecycle (actlab.lifecycle) needs to know about a training run directory.
TRAINING_RUN = RunKind(
    name="training run",
    command="actlab train",
    start_hint="--preset NAME --dataset PATH",
    is_run_dir=_is_run_dir,
    resumable=RESUMABLE_CHANGES,
)


def _resume_step(cfg: TrainConfig, out: Path, ckpts: CheckpointManager) -> int:
    step = resume_start(out, ckpts, TRAINING_RUN)
    if step == 0:
        return 0
    saved = load_run_config(out)
    check_config_unedited(saved, out, ckpts, step)
    refuse_changes(
        resume_diff(saved, cfg),
        out / CONFIG_FILE,
        fix="resume with the saved config (omit --preset/--set for these keys); only steps, logging, "
        "eval/checkpoint cadence and device may change",
    )
    # lazy: bundle imports torch (a resume loads it next anyway); training modules import without it
    from actlab.policies.bundle import FILES as BUNDLE_FILES

    # a bundle file gone from the checkpoint (actlab.json) said "not found, fix: check the path": the
    # fix for a checkpoint that cannot be read is the previous one, as for its training state
    ckpts.require(step, [ckpts.path(step) / name for name in BUNDLE_FILES], "actlab train")
    check_dataset_present(cfg)
    check_same_dataset(cfg, ckpts.path(step))
    if step > cfg.steps:
        raise ActlabError(
            "the run is already past the requested number of steps",
            file=ckpts.path(step),
            field="steps",
            expected=f">= {step} (its last checkpoint)",
            found=cfg.steps,
            fix=f"resume with --set steps={step} or more, or evaluate the checkpoint as it is",
        )
    return step


def _rebuilt_summary(out: Path, ckpts: CheckpointManager, step: int, dist: DistInfo) -> RunSummary:
    """The summary of a run that completed ``step`` but was killed before writing summary.json, read
    from its final checkpoint (loss, throughput and wall time of the loop that wrote it) and pointers;
    rank 0 writes it."""
    meta = read_json(ckpts.path(step) / "training_state" / "state.json", "checkpoint state")
    loop = meta.get("loop") or {}
    best = ckpts.pointer("best")
    try:
        vals = [r["val_loss"] for r in read_metrics(out) if isinstance(r.get("val_loss"), float)]
    except ActlabError:
        vals = []
    summary = RunSummary(
        run_dir=str(out),
        step=step,
        final_loss=meta.get("train_loss"),
        best_val_loss=_min_none(best.get("val_loss") if best else None, *vals),
        best_checkpoint=str(ckpts.root / best["path"]) if best else None,
        last_checkpoint=str(ckpts.path(step)),
        wall_s=float(loop.get("wall_s", 0.0)),
        samples_per_s=float(loop.get("samples_per_s", 0.0)),
    )
    if dist.is_main:
        print(f"{out / SUMMARY_FILE} is missing (killed after its last checkpoint): rebuilt from it",
              file=sys.stderr)  # fmt: skip
        atomic_write_json(out / SUMMARY_FILE, summary.as_dict())
    return summary


def load_run_config(out: str | Path) -> TrainConfig:
    """The ``TrainConfig`` saved in a run directory."""
    check_run_path(Path(out))  # a bundle given as the run: named as such, not "unknown config key 'type'"
    # (gone: "run config not found, fix: check the path"; the checkpoints keep the weights, not the config)
    last = sorted((Path(out) / "checkpoints").glob("step_*"))
    fix = (
        "restore it from a copy; or train on from the newest checkpoint's weights in a new run: "
        f"actlab train --init-from {last[-1]} --out NEW ..."
        if last
        else None
    )
    data, file = read_json(Path(out) / CONFIG_FILE, "run config", fix=fix), Path(out) / CONFIG_FILE
    edited = f"undo the edit of {file} (actlab wrote every value valid)" + (f"; or {fix}" if fix else "")
    return from_file(lambda: config_from_dict(data, where=str(out)), file, "the run's config.json", edited)


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
    run = build_run(
        cfg,
        device,
        dist,
        out_dir=out,
        existing_checkpoint_bytes=ckpts.bytes_on_disk(),
        resume_from=ckpts.path(start) if start and cfg.init_from else None,
    )
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
        with catch_sigterm() as stop:
            summary = Loop(run, ckpts, log, out, stop, window).train_from(start)
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
    try:
        rows = read_metrics(out)
        if not any("loss" in r for r in rows):  # stopped before its first logged step: nothing to draw
            return  # (it warned "could not draw ... no training rows to plot" after a SIGTERM at step 2)
        # a directory name of bytes that are no UTF-8 (surrogates) is drawn with U+FFFD: matplotlib refused
        # the title ("set_text(): incompatible function arguments") and the curve was not drawn
        name = out.name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        plot_training(rows, out / "training.png", title=f"{name} ({cfg.name})")
    except Exception as e:  # the checkpoints and metrics are written; a figure must not fail the run
        print(f"warning: could not draw {out / 'training.png'}: {e}", file=sys.stderr)


def _restore(run: TrainRun, ckpts: CheckpointManager, step: int) -> tuple[dict[str, Any], int]:
    """Load weights, optimizer, schedule, sampler position and RNG of checkpoint ``step``.

    Returns this rank's metric sums and step count of the logging window the checkpoint was taken in
    (a checkpoint in the middle of a window), so the first row after the resume averages the same steps
    as an uninterrupted run's.
    """
    # lazy: bundle imports torch; training modules import without it
    from actlab.policies import load_policy

    # the process count first: rank 1 of a 1-process run's resume said "checkpoint is incomplete:
    # rng_rank1.pt missing, start a new run" (printed first), rank 0 the cause
    saved_world = int(ckpts.meta(step).get("world_size", 1))
    if saved_world != run.dist.world_size:
        raise ActlabError(
            "resume needs the same number of processes as the interrupted run",
            file=ckpts.path(step) / "training_state/state.json",
            field="world_size",
            expected=saved_world,
            found=run.dist.world_size,
            fix=f"launch with torchrun --nproc_per_node {saved_world}"
            if saved_world > 1
            else f"resume it as one process (no torchrun): actlab train --out {ckpts.root.parent} --resume",
        )
    state = ckpts.load(step, run.dist.rank)
    loaded = load_policy(state.path, device=run.device)
    run.policy.load_state_dict(loaded.state_dict())
    run.load_optimizer_state(state.optimizer)  # with EMA: the bundle is averaged, the raw weights return
    run.scheduler.load_state_dict(state.scheduler)
    # The optimizer state carries the learning rate the saved schedule chose for the next step; recompute
    # it from the current schedule (identical unless `steps` changed, which stretches the cosine).
    sync_lr(run.scheduler)
    rank_meta = state.meta["ranks"][run.dist.rank]
    try:
        run.load_rng_state(state.rng, rank_meta)
    except ActlabError as e:  # the sampler's refusal, with the file it was read from
        if e.file is not None:
            raise
        raise ActlabError(
            e.problem,
            file=state.path / "training_state/state.json",
            field=e.field,
            expected=e.expected,
            found=e.found,
            fix=e.fix.replace("CKPT", str(state.path)) if e.fix else None,
        ) from e
    sums = {k: v.to(run.device) for k, v in state.rng.get("metric_sums", {}).items()}
    return sums, int(rank_meta.get("metric_steps", 0))


def _min_none(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _adaptive_threads(run: TrainRun) -> AdaptiveThreads | None:
    """An AdaptiveThreads for a CPU run that leaves the count to torch (``num_threads=0``); None otherwise
    (a GPU run, a count set by the user or the preset, one thread only, a distributed run). Its probes
    time the run's own steps: no extra work, and the trajectory is the same but for the thread count."""
    import torch

    threads = torch.get_num_threads()
    if run.device.type != "cpu" or run.cfg.num_threads or threads <= 1 or run.dist.distributed:
        return None
    return AdaptiveThreads(most=threads, cpus=usable_cpus())


def _slowdown_watch(run: TrainRun) -> SlowdownWatch | None:
    """A SlowdownWatch for a CPU run whose threads may spin on a shared machine; None otherwise."""
    import torch

    threads = torch.get_num_threads()
    if run.device.type != "cpu" or cure_applied(num_threads=threads):
        return None
    return SlowdownWatch(cpus=usable_cpus(), threads=threads)


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
        stop: StopSignals,
        window: tuple[dict[str, Any], int] | None = None,
    ):
        self.run, self.ckpts, self.log, self.out, self.stop = run, ckpts, log, out, stop
        self.cfg = run.cfg
        # the videos the run's frames come from, as its start found them (sha256 with inode and ctime,
        # the frame store's record, hashed once per process): each checkpoint records them and a resume
        # compares (25th fault run: a video edited in its middle with its size and mtime kept resumed)
        self.videos = source_record(run.dataset, [k for k in run.image_keys if k in run.dataset.video_keys])
        self.timer = PhaseTimer(run.device)
        # metric sums on the device and the number of steps they cover, since the last training row
        # (restored from the checkpoint on resume: `window`)
        self.sums: dict[str, Any] = dict(window[0]) if window else {}
        self.count = window[1] if window else 0
        self.last_val: float | None = None
        self.best_val: float | None = None
        self.last_loss: float | None = None
        self.last_ckpt: str | None = None
        # loss + grad_norm of each step of the open logging window, on the device (read only to name the
        # step a divergence began), and how many of its entries are filled
        self.hist: Any = None
        self.hist_n = 0
        # loop start time and step (throughput recorded with each checkpoint)
        self._t0, self._start = time.perf_counter(), 0
        # keeps a CPU run on its faster thread count as the load changes (None: the count is fixed)
        self.threads = _adaptive_threads(run)
        # says once when a shared CPU slows a fixed-count run down (None: not a CPU run, the cure is
        # applied, or the count follows the load anyway)
        self.slowdown = _slowdown_watch(run) if self.threads is None else None

    def train_from(self, start: int) -> RunSummary:
        t0 = self._t0 = self._t_log = time.perf_counter()
        self._start = start
        kill_at = int(os.environ.get(KILL_AT_STEP_ENV) or 0)
        note = self.threads.start(start + 1, load_1m()) if self.threads is not None else None
        if note is not None:
            self.log.message(note)
        with torch_threads(torch_thread_count()):  # the choices made here do not outlive the run
            return self._steps(start, t0, kill_at)

    def _steps(self, start: int, t0: float, kill_at: int) -> RunSummary:
        import torch

        cfg = self.cfg
        step, stopped, overfit_step = start, "completed", None
        for step in range(start + 1, cfg.steps + 1):
            probing = self.threads is not None and self.threads.probe is not None
            if self.threads is not None:
                threads = self.threads.threads_for(step)
                if threads != torch.get_num_threads():
                    torch.set_num_threads(threads)
                t_unit = time.perf_counter()
            self.timer.start()
            batch = self.run.next_batch()
            self.timer.mark("data")
            self._accumulate(self.run.step(batch, self.timer))
            self.timer.stop()
            if probing:
                # CPU only (never made for a GPU run): the step's work is done here, no sync
                note = self.threads.record(step, threads, time.perf_counter() - t_unit)
                if note is not None:
                    self.log.message(note)
            self.log.progress(step)  # the bar's count and ETA every step; its metrics on logging steps
            if _due(step, cfg.log.every, cfg.steps):
                self._log_train(step)
                if cfg.overfit.samples and self.last_loss < cfg.overfit.loss_threshold:
                    overfit_step, stopped = step, "overfit_reached"
            if stopped != "overfit_reached" and self._eval_due(step):
                self._log_val(step)
            if stopped == "overfit_reached" or _due(step, cfg.checkpoint.every, cfg.steps):
                self._checkpoint(step)
            if kill_at == step:
                os.kill(os.getpid(), signal.SIGKILL)  # rehearse a crash (tests): no cleanup at all
            if stopped == "overfit_reached":
                break
            if self._stop_requested(step):
                if self.last_ckpt != self.ckpts.path(step).name:
                    self._checkpoint(step)
                stopped = self.stop.reason() or "sigterm"  # (another rank's SIGTERM: "sigterm")
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

    def _throughput(self, step: int) -> dict[str, float]:
        wall = time.perf_counter() - self._t0
        samples = (step - self._start) * self.cfg.batch_size * self.run.dist.world_size
        return {"wall_s": wall, "samples_per_s": samples / wall if wall > 0 else 0.0}

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
            return self.stop.signalled
        if step % self.cfg.log.every:  # agree across ranks only on logging steps (a collective)
            return False
        import torch

        flag = torch.tensor([1.0 if self.stop.signalled else 0.0], device=self.run.device)
        return bool(ddp.all_reduce_mean({"f": flag}, self.run.dist)["f"].item() > 0)

    # ---------------------------------------------------------------------------------- actions
    def _accumulate(self, metrics: dict[str, Any]) -> None:
        import torch

        # Why: summing on the device keeps the step free of host syncs; read back on logging steps only.
        for k, v in metrics.items():
            v = v.detach().float()
            self.sums[k] = v if k not in self.sums else self.sums[k] + v
        self.count += 1
        # Divergence costs no sync either: the sums above turn non-finite with the first bad step and are
        # checked on logging and checkpoint steps. To name that step, each step's loss + grad_norm goes
        # into a device buffer (one kernel), read back only when a check fails.
        if self.hist is None or self.hist_n == self.hist.numel():
            grown = torch.empty(max(self.cfg.log.every, 2 * self.hist_n, 1), device=self.run.device)
            if self.hist is not None:
                grown[: self.hist_n] = self.hist
            self.hist = grown
        torch.add(metrics["loss"].detach(), metrics["grad_norm"], out=self.hist[self.hist_n])
        self.hist_n += 1

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
        load = load_1m()
        if load is not None:
            row["load_avg_1m"] = load  # how busy the machine was (the demo's report says so)
        if self.slowdown is not None and self.run.dist.is_main:
            note = self.slowdown.update(step, step_time, load)
            if note is not None:
                self.log.message(note)
        if self.threads is not None:
            note = self.threads.window(step, step_time, load)
            if note is not None:
                self.log.message(note)
        watched = {k: row[k] for k in ("loss", "grad_norm") if k in row}
        # (made before the window is reset: it reads the window to name the first bad step)
        diverged = None if all(math.isfinite(v) for v in watched.values()) else self._diverged(step, watched)
        self.sums, self.count, self.hist_n = {}, 0, 0
        self.last_loss = row.get("loss")
        self.log.log(row)
        self.log.progress(step, {"loss": self.last_loss, "lr": row["lr"]})
        if diverged is not None:
            raise diverged

    def _log_val(self, step: int) -> None:
        t0 = time.perf_counter()
        val = self.run.evaluate()
        if val is None:
            return
        self.log.log({"step": step, "val_loss": val, "time_eval_s": time.perf_counter() - t0})
        self.log.message(f"step {step}: val_loss {val:.5g}")
        if not math.isfinite(val):
            raise self._diverged(step, {"val_loss": val})
        self.last_val = val
        self.best_val = val if self.best_val is None else min(self.best_val, val)
        self._t_log = time.perf_counter()  # samples/s measures training, not evaluation

    def _check_finite_weights(self, step: int) -> None:
        """Raise before a checkpoint would save a non-finite weight, or after steps whose loss or gradient
        norm (in the open logging window) was not finite. One host sync, on checkpoint steps only (the
        write that follows syncs anyway); the flag is reduced over ranks so that all of them stop."""
        import torch

        flags = [torch.isfinite(p.detach()).all() for p in self.run.policy.parameters()]
        flags += [torch.isfinite(self.sums[k]).reshape(()) for k in ("loss", "grad_norm") if k in self.sums]
        bad = (~torch.stack(flags).all()).float()
        if ddp.all_reduce_mean({"bad": bad}, self.run.dist)["bad"].item() == 0:
            return
        count = max(self.count, 1)
        window = {k: float(self.sums[k].item()) / count for k in ("loss", "grad_norm") if k in self.sums}
        if all(math.isfinite(v) for v in window.values()):
            window = {"weights": math.nan}  # finite losses, but the last update made a weight NaN/inf
        raise self._diverged(step, window)

    def _diverged(self, step: int, found: dict[str, float]) -> ActlabError:
        """The error that stops a run whose loss, gradient norm or weights stopped being finite."""
        import torch

        # Earlier windows were checked clean, so the first bad entry of this one is the first overall
        # (none: the bad value came before a resume, or only the last update broke a weight).
        bad = [] if not self.hist_n else (~torch.isfinite(self.hist[: self.hist_n].cpu())).nonzero()
        at = step - self.hist_n + 1 + int(bad[0]) if len(bad) else step
        last = self.ckpts.last_step()
        kept = (
            f"checkpoints/last.json still names {self.ckpts.path(last).name}, the last checkpoint "
            "with finite weights"
            if last is not None
            else "no checkpoint had been written yet"
        )
        values = ", ".join(f"{k} {v:.4g}" for k, v in found.items())
        return ActlabError(
            f"training diverged: not finite from step {at} on (found at step {step}); the run is stopped "
            f"and {kept}",
            file=self.out / METRICS_FILE,
            field="optim.lr",
            expected="a finite loss, gradient norm and weights",
            found=f"{values}; learning rate {self._lr_at(at):.4g} at step {at} (peak optim.lr "
            f"{self.cfg.optim.lr:g}, schedule.warmup_steps {self.cfg.schedule.warmup_steps})",
            fix="lower optim.lr (e.g. 10x), lengthen schedule.warmup_steps, keep optim.grad_clip > 0, and "
            "check the data with `actlab data doctor`; then "
            + (
                "train into a new --out (optim.lr cannot change on --resume)"
                if last is not None
                else "run again: this --out has no checkpoint, so the same --out starts over"
            ),
        )

    def _lr_at(self, step: int) -> float:
        """The learning rate optimizer step ``step`` (1-based) used for the non-backbone parameters:
        LambdaLR's factor of step ``step - 1`` times the group's peak."""
        sched = self.run.scheduler
        groups = sched.optimizer.param_groups
        i = next((j for j, g in enumerate(groups) if "backbone" not in str(g.get("name", ""))), 0)
        return float(sched.base_lrs[i]) * sched.lr_lambdas[i](step - 1)

    def _checkpoint(self, step: int) -> None:
        t0 = time.perf_counter()
        run, dist = self.run, self.run.dist
        self._check_finite_weights(step)
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
                        # this process's loop so far: what summary.json reports if it is killed right after
                        "loop": self._throughput(step),
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
                            # which episodes trained the policy and which were held out, and of which
                            # dataset: `actlab policy doctor` replays both sets separately
                            "dataset": {
                                "path": str(run.dataset.root),
                                "fingerprint": run.dataset.fingerprint,
                                # what a resume compares: the same data, wherever it lies
                                "identity": run.dataset.identity,
                                "videos": self.videos,
                                "episodes": len(run.dataset.episodes),
                                "frames": len(run.dataset),
                                # the sim scenes its episodes start from (sim-recorded data only):
                                # `actlab eval` refuses these seeds, the training scenes
                                "sim": sim_seeds(run.dataset.info),
                            },
                            "train_episodes": list(run.split.train_episodes),
                            "val_episodes": list(run.split.val_episodes),
                        }
                    },
                )
        self.last_ckpt = self.ckpts.path(step).name
        ddp.barrier(dist)
        self.log.log(
            {"step": step, "checkpoint": self.last_ckpt, "time_checkpoint_s": time.perf_counter() - t0}
        )
        self._t_log = time.perf_counter()  # samples/s measures training, not checkpoint writes
