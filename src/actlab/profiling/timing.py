"""Timing device work with as few host syncs as possible.

- :func:`time_callable` (benchmarks, the peak-FLOP/s measurement): N calls of a function with one
  synchronisation before and one after, never one per call.
- :class:`PhaseTimer` (per-phase step time inside the training loop): a step is split into phases (data
  wait, forward+backward, optimizer) by :meth:`PhaseTimer.mark` calls. On CPU the ops are synchronous, so
  ``time.perf_counter`` at each mark is exact. On CUDA each mark records an event on the current stream;
  the elapsed times between events are read only in :meth:`PhaseTimer.read` (on logging steps), where the
  loop synchronizes anyway to read its metrics. Event gaps measure the GPU timeline, so "data" on CUDA
  includes any time the GPU sat idle waiting for the host to deliver a batch.

torch is imported only where a CUDA or MPS device is timed: importing this module stays light.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any


def synchronize(device: Any) -> None:
    """Wait for queued work on ``device`` (a no-op on CPU, where ops run synchronously)."""
    kind = getattr(device, "type", str(device).split(":")[0])
    if kind == "cuda":
        import torch

        torch.cuda.synchronize(device)
    elif kind == "mps":
        import torch

        torch.mps.synchronize()


def time_callable(fn: Callable[[], Any], device: Any, *, warmup: int = 2, iters: int = 10) -> float:
    """Seconds per call of ``fn`` averaged over ``iters`` calls after ``warmup`` untimed calls.

    Why only two syncs: a sync per call would add the launch latency to every call and hide the overlap
    of host and device work that a real loop gets.
    """
    if iters < 1:
        raise ValueError("iters must be >= 1")
    for _ in range(warmup):
        fn()
    synchronize(device)  # start the clock with an empty queue
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    synchronize(device)  # the last call's kernels are part of the measurement
    return (time.perf_counter() - t0) / iters


class PhaseTimer:
    """Accumulates per-phase durations over the steps between two :meth:`read` calls."""

    def __init__(self, device: Any) -> None:
        self.cuda = getattr(device, "type", str(device)) == "cuda"
        self._pending: list[list[tuple[str, Any]]] = []  # per step: [(phase, event-or-time), ...]
        self._current: list[tuple[str, Any]] | None = None

    def _now(self) -> Any:
        if self.cuda:
            import torch

            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def start(self) -> None:
        """Mark the beginning of a step."""
        self._current = [("start", self._now())]

    def mark(self, phase: str) -> None:
        """Mark the end of ``phase`` (which began at the previous mark)."""
        if self._current is None:
            raise RuntimeError("PhaseTimer.mark before start")
        self._current.append((phase, self._now()))
        # keep the step open; the last mark of a step is followed by the next start()

    def stop(self) -> None:
        """Close the current step (its last mark ends it)."""
        if self._current is not None:
            self._pending.append(self._current)
            self._current = None

    def read(self) -> tuple[dict[str, float], int]:
        """Summed seconds per phase and the number of steps since the last read (syncs on CUDA)."""
        if self.cuda and self._pending:
            # Why: the only sync, and it happens on logging steps where metrics are read back anyway.
            self._pending[-1][-1][1].synchronize()
        totals: dict[str, float] = defaultdict(float)
        for marks in self._pending:
            for (_, a), (phase, b) in itertools.pairwise(marks):
                totals[phase] += (a.elapsed_time(b) / 1000.0) if self.cuda else (b - a)
        n = len(self._pending)
        self._pending = []
        return dict(totals), n
