"""Probes that run real training steps at a given batch size and measure their peak memory.

Both probes build the run through the trainer's public API (``actlab.training.build.build_run``: data,
policy, optimizer, schedule exactly as ``actlab train`` builds them) and run ``steps`` optimizer steps;
two steps by default, because AdamW allocates its state during the first.

- GPU (in this process): peak of ``torch.cuda.max_memory_reserved`` (what the caching allocator held,
  the number that must fit) against the device memory free when the search started; a
  ``torch.cuda.OutOfMemoryError`` is a "does not fit", and everything is freed before the next trial.
- CPU (a fresh process per batch size): peak resident memory (VmHWM) of a process forked from a server
  that has already imported torch and actlab (so a trial costs the build and the steps, not the imports),
  against ``--memory-limit``. The parent watches the process's RSS and stops it as soon as it passes the
  limit, so a batch size that would exhaust the machine's memory never gets the chance. A fresh process
  per trial is what makes the numbers honest: an allocator never returns all memory to the OS, so
  measuring a smaller batch after a larger one in the same process would report the larger one's peak.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import multiprocessing as mp
import os
import signal
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from actlab.datasets import FrameStore, open_dataset
from actlab.datasets.hub import dataset_location
from actlab.errors import ActlabError
from actlab.profiling.timing import synchronize
from actlab.training.batch_size import (
    Probe,
    SearchResult,
    check_search_settings,
    search_batch_size,
)
from actlab.training.build import build_run, camera_keys
from actlab.training.config import apply_train_overrides, config_from_dict, config_to_dict
from actlab.training.presets import get_preset, with_dataset
from actlab.utils.config import override_key
from actlab.utils.device import resolve_device
from actlab.utils.kinds import refuse_cache_inside_output
from actlab.utils.procs import own_multiprocessing_names
from actlab.utils.threads import keeps_torch_threads
from actlab.utils.units import parse_bytes

_MIB = 1024 * 1024
_POLL_S = 0.02  # RSS watchdog period: a step allocates at most a few hundred MiB in 20 ms
_TRIAL_TIMEOUT_S = 900.0  # one trial (build + steps) taking longer than this is a hang, not a result
# Modules the CPU probe's fork server imports once, so each trial starts with them loaded.
_PRELOAD = ["torch", "torch._dynamo", "torch.optim", "actlab.policies", "actlab.training.build"]


def _frames_in_memory(run: Any) -> int:
    """Bytes of decoded frames the run holds in process (or device) memory: the FrameStore when
    ``frames_on_device`` copied it there, 0 when the step gathers from the memory-mapped cache file."""
    if run.store is None or not run.device_data.frames_on_device:
        return 0
    return sum(int(run.store.frames[k].nbytes) for k in run.device_data.image_keys)


def _run_steps(cfg: Any, device: Any, steps: int, built: Callable[[Any], None] | None = None) -> float:
    """Build the run for ``cfg`` and time ``steps`` optimizer steps; returns seconds for the steps.
    ``built(run)`` is called between the build and the first step (to measure what the build holds)."""
    run = build_run(cfg, device)
    try:
        if built is not None:
            built(run)
        t0 = time.perf_counter()
        for _ in range(steps):
            run.step(run.next_batch())
        synchronize(run.device)  # the step's kernels are part of its memory and time
        return time.perf_counter() - t0
    finally:
        run.close()


# ------------------------------------------------------------------------------------------- CPU probe
def _rss_self() -> int:
    """This process's resident set now (VmRSS), in bytes."""
    import psutil

    return int(psutil.Process().memory_info().rss)


def _peak_rss_self() -> int:
    """This process's peak resident set (VmHWM), in bytes."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource  # not Linux: ru_maxrss (kilobytes on Linux, bytes on macOS)
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _is_cpu_oom(e: BaseException) -> bool:
    text = str(e).lower()
    return isinstance(e, MemoryError) or "can't allocate memory" in text or "out of memory" in text


def _cpu_trial(cfg_dict: dict[str, Any], steps: int, conn: Any) -> None:
    """Runs in a forked child: build + steps, then report the peak RSS through ``conn``."""

    def built(run: Any) -> None:  # what the build holds before any step: the breakdown of a failure
        conn.send({"built": _rss_self(), "frames": _frames_in_memory(run)})

    try:
        seconds = _run_steps(config_from_dict(cfg_dict), "cpu", steps, built)
        conn.send({"ok": True, "peak": _peak_rss_self(), "seconds": seconds})
    except (BrokenPipeError, ConnectionResetError):  # the search is gone (killed): nothing to report to;
        os._exit(1)  # it printed two chained BrokenPipe tracebacks into the user's terminal
    except BaseException as e:  # reported to the parent, which decides what it means
        if _is_cpu_oom(e):
            conn.send({"ok": False, "peak": _peak_rss_self(), "detail": f"out of memory: {e}"[:200]})
        elif isinstance(e, ActlabError):
            conn.send({"error": e.render()})
        else:
            conn.send({"error": traceback.format_exc(limit=8)})
    finally:
        conn.close()


class CpuProbe:
    """Peak RSS of a fresh process running the steps, stopped early once it passes ``limit_bytes``."""

    def __init__(self, cfg: Any, limit_bytes: int, steps: int, frames_bytes: int | None = None) -> None:
        self.cfg, self.limit_bytes, self.steps = cfg, limit_bytes, steps
        # the decoded frames a trial copies into its RAM (data.frames_on_device=true), when known: named in
        # a trial stopped before it finished building
        self.frames_bytes = frames_bytes
        self._cfg_dict = config_to_dict(dataclasses.replace(cfg, device="cpu"))
        # the fork server's socket directory and any semaphore: named so a later run removes a killed one's
        own_multiprocessing_names()
        self._ctx = mp.get_context("forkserver")
        # Only takes effect if this process has not started its fork server yet; otherwise each trial
        # imports torch itself (slower, same numbers).
        self._ctx.set_forkserver_preload(_PRELOAD)

    def __call__(self, batch_size: int) -> Probe:
        import psutil

        cfg_dict = {**self._cfg_dict, "batch_size": batch_size}
        parent, child = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_cpu_trial, args=(cfg_dict, self.steps, child), daemon=True)
        proc.start()
        child.close()
        try:
            watched: psutil.Process | None = psutil.Process(proc.pid)
        except psutil.Error:  # it has ended already (a crash at start): the verdict below says how
            watched = None
        seen, msg, killed, built = 0, None, False, None
        deadline = time.monotonic() + _TRIAL_TIMEOUT_S
        try:
            while msg is None and proc.is_alive():
                if watched is not None:
                    with contextlib.suppress(psutil.Error):  # the trial may exit between two checks
                        seen = max(seen, watched.memory_info().rss)
                if seen > self.limit_bytes:
                    proc.kill()  # over the limit: it cannot fit, and it must not take the machine down
                    killed = True
                    break
                if time.monotonic() > deadline:
                    proc.kill()
                    raise ActlabError(
                        f"a batch-size trial ran longer than {_TRIAL_TIMEOUT_S:.0f} s",
                        field="batch_size",
                        found=batch_size,
                        fix="check that `actlab train` runs with this preset and dataset",
                    )
                if parent.poll(_POLL_S):
                    msg = parent.recv()
                    if "built" in msg:  # the build's own footprint; the result comes after the steps
                        built, msg = msg, None
            while msg is None and not killed and parent.poll(0):
                msg = parent.recv()
                if "built" in msg:
                    built, msg = msg, None
        except EOFError:
            msg = None
        finally:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=30)  # SIGKILL: only a process stuck in the kernel outlives it
            parent.close()
        probe = self._verdict(batch_size, msg, seen, killed, proc.exitcode)
        if built is None:  # stopped during the build: at least the frames it was copying are known
            return dataclasses.replace(probe, frames_bytes=self.frames_bytes)
        return dataclasses.replace(probe, before_step_bytes=built["built"], frames_bytes=built["frames"])

    def _verdict(self, batch_size: int, msg: dict | None, seen: int, killed: bool, code: int | None) -> Probe:
        if killed:
            return Probe(
                batch_size,
                ok=False,
                memory_bytes=seen,
                detail=f"stopped at {seen / _MIB:,.0f} MiB RSS: past the limit",
            )
        if msg is None and code == -signal.SIGKILL:  # not us: most likely the kernel's OOM killer
            detail = "trial process killed by SIGKILL (the kernel's OOM killer?)"
            return Probe(batch_size, ok=False, memory_bytes=seen or None, detail=detail)
        if msg is None:  # died without a word (crash, a signal other than SIGKILL): not a memory verdict
            how = f"died of signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
            raise ActlabError(
                f"the batch-size trial process {how} without reporting a result (batch size {batch_size})",
                field="batch_size",
                found=batch_size,
                fix="its error is printed above; run `actlab train` with the same settings to reproduce it",
            )
        if "error" in msg:
            raise ActlabError(
                f"the training step failed at batch size {batch_size} (not a memory problem):\n"
                + msg["error"],
                field="batch_size",
                found=batch_size,
                fix="run `actlab train` with the same preset, dataset and overrides to see the failure",
            )
        peak = max(int(msg["peak"]), seen)
        if not msg["ok"]:
            return Probe(batch_size, ok=False, memory_bytes=peak, detail=msg.get("detail", ""))
        return Probe(
            batch_size,
            ok=True,
            memory_bytes=peak,
            seconds=msg["seconds"],
            detail=f"{self.steps} steps in {msg['seconds']:.2f} s",
        )


# ------------------------------------------------------------------------------------------- GPU probe
class GpuProbe:
    """Peak allocator-reserved memory of ``steps`` steps in this process; OOM means "does not fit"."""

    def __init__(self, cfg: Any, device: Any, steps: int) -> None:
        self.cfg, self.device, self.steps = cfg, device, steps

    def __call__(self, batch_size: int) -> Probe:
        import torch

        cfg = dataclasses.replace(self.cfg, batch_size=batch_size)
        self._release()
        torch.cuda.reset_peak_memory_stats(self.device)
        seconds, oom, held = None, None, {}

        def built(run: Any) -> None:  # what the build holds on the device before the first step
            held.update(before=int(torch.cuda.memory_reserved(self.device)), frames=_frames_in_memory(run))

        try:
            seconds = _run_steps(cfg, self.device, self.steps, built)
        except torch.cuda.OutOfMemoryError as e:
            oom = str(e).splitlines()[0][:160]
        peak = int(torch.cuda.max_memory_reserved(self.device))
        self._release()  # after the except block: the exception no longer pins the step's tensors
        before, frames = held.get("before"), held.get("frames")
        if oom is not None:
            return Probe(
                batch_size,
                ok=False,
                memory_bytes=peak,
                detail=f"CUDA OOM: {oom}",
                before_step_bytes=before,
                frames_bytes=frames,
            )
        return Probe(
            batch_size,
            ok=True,
            memory_bytes=peak,
            seconds=seconds,
            detail=f"{self.steps} steps in {seconds:.2f} s",
            before_step_bytes=before,
            frames_bytes=frames,
        )

    def _release(self) -> None:
        import torch

        gc.collect()
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------- driver
def load_config(preset: str, dataset: str, overrides: list[str] | None, device: str | None) -> Any:
    """The preset with the dataset, overrides and device applied (validated: errors name the key)."""
    if not dataset_location(dataset).exists():  # a path, or owner/name in LeRobot's local Hub cache
        raise ActlabError("dataset not found", file=dataset, field="--dataset", fix="check the path")
    # the search sets these itself (each trial runs --steps steps at the batch size it tries): a --set of
    # them was overridden without a word
    searched = {"batch_size": "--start and --max (the batch sizes tried)", "steps": "--steps"}
    for item in overrides or []:
        key = override_key(item)
        if key in searched:
            raise ActlabError(
                f"--set {key} has no effect here: find-batch-size sets {key} itself for every trial",
                field=f"--set {key}",
                expected=f"{searched[key]} instead",
                found=item,
                fix=f"leave --set {key} out and use {searched[key]} (nothing was run)",
            )
    cfg = apply_train_overrides(with_dataset(get_preset(preset), dataset), list(overrides or []))
    if device is not None:
        cfg = dataclasses.replace(cfg, device=device)
    return cfg


@keeps_torch_threads
def find_batch_size(
    *,
    preset: str,
    dataset: str,
    overrides: list[str] | None = None,
    device: str | None = None,
    memory_limit: str | int | None = None,
    margin: float = 0.1,
    start: int = 1,
    max_batch: int | None = None,
    multiple_of: int = 1,
    tolerance: float = 0.05,
    steps: int = 2,
    progress: TextIO | None = None,
) -> tuple[SearchResult, str]:
    """Search the largest batch size of ``preset`` on ``dataset`` that fits; returns (result, measure).

    ``measure`` names what was compared with the limit (``"GPU memory reserved"`` or ``"RSS"``).
    """
    if steps < 1:
        raise ActlabError("--steps must be at least 1", field="--steps", expected=">= 1", found=steps)
    check_search_settings(
        margin=margin, start=start, max_batch=max_batch, multiple_of=multiple_of, tolerance=tolerance
    )
    cfg = load_config(preset, dataset, overrides, device)
    refuse_cache_inside_output(cfg.data.cache_dir, "data.cache_dir")
    dev = resolve_device(cfg.device)
    limit = parse_bytes(memory_limit) if memory_limit is not None else None
    notes: list[str] = []
    if dev.type == "cuda":
        probe, limit, what = _gpu_setup(cfg, dev, steps, limit, progress)
    elif dev.type == "cpu":
        if limit is None:
            raise ActlabError(
                "on CPU the batch-size search needs a memory limit",
                field="--memory-limit",
                expected="a size such as 2GiB",
                fix="pass --memory-limit with the RAM the training may use",
            )
        cfg, frames, notes = _cpu_frames_placement(cfg)
        _prepare_cpu(cfg, start)
        probe, what = CpuProbe(cfg, limit, steps, frames_bytes=frames), "RSS"
    else:
        raise ActlabError(
            f"batch-size search is not supported on {dev.type}", field="--device", expected="cuda or cpu"
        )

    def reporting_probe(b: int) -> Probe:
        p = probe(b)
        if progress is not None:
            mem = "?" if p.memory_bytes is None else f"{p.memory_bytes / _MIB:,.0f} MiB"
            print(f"  batch {b:>6}: {mem:>12}  {'ran' if p.ok else 'failed'}  {p.detail}", file=progress)
            progress.flush()
        return p

    result = search_batch_size(
        reporting_probe,
        limit_bytes=limit,
        margin=margin,
        start=start,
        max_batch=max_batch,
        multiple_of=multiple_of,
        tolerance=tolerance,
    )
    result.notes.extend(notes)
    return result, what


def _gpu_setup(cfg: Any, dev: Any, steps: int, limit: int | None, progress: TextIO | None):
    import torch

    free, total = torch.cuda.mem_get_info(dev)
    if limit is None:
        limit = int(free)
        if progress is not None:
            print(
                f"limit: free device memory {free / _MIB:,.0f} of {total / _MIB:,.0f} MiB on "
                f"{torch.cuda.get_device_name(dev)}",
                file=progress,
            )
    return GpuProbe(cfg, dev, steps), limit, "GPU memory reserved"


def _cpu_frames_placement(cfg: Any) -> tuple[Any, int | None, list[str]]:
    """On CPU, where the trials keep the decoded frames: (config, bytes copied into RAM or None, notes).

    Design choice: ``data.frames_on_device=auto`` is measured as ``false`` (the step gathers from the
    memory-mapped cache file). Why: the RAM copy is a fixed cost that does not grow with the batch, and
    ``auto`` only makes it when half the free memory holds it; counting it made the search after the demo
    report that not even batch 1 fits a 3 GiB limit (1.7 GiB of it the frame copy). The copy is named in a
    note instead. ``true`` is measured as asked: the copy is then counted, and named when nothing fits.
    """
    choice = cfg.data.frames_on_device
    try:
        ds = open_dataset(cfg.data.path)
        nbytes = FrameStore.estimate_bytes(ds, cfg.data.image_size, camera_keys(ds, cfg))
    except (ActlabError, OSError, ValueError):  # for a message only; a bad dataset fails in the build
        nbytes = None
    if choice is True:
        return cfg, nbytes, []
    if choice == "auto":
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, frames_on_device=False))
        size = "" if not nbytes else f" ({nbytes / _MIB:,.0f} MiB)"
        note = (
            f"not counted: the decoded frame cache{size}, read from its memory-mapped file by every "
            "trial. `actlab train` (data.frames_on_device=auto) copies it into RAM as well when half the "
            "free memory holds it: add it to the peak, or train with --set data.frames_on_device=false"
        )
        return cfg, 0, [note]
    return cfg, 0, []


def _prepare_cpu(cfg: Any, start: int) -> None:
    """Build the run once here: the FrameStore is decoded and cached before the first measured trial
    (decoding is a one-time cost, not part of a step), and a bad config fails here with a clear error."""
    run = build_run(dataclasses.replace(cfg, batch_size=start, device="cpu"), "cpu")
    run.close()
    del run
    gc.collect()
