"""Step-time accounting without a host sync per step.

A step is split into phases (data wait, forward+backward, optimizer) by :meth:`PhaseTimer.mark` calls.
On CPU the ops are synchronous, so ``time.perf_counter`` at each mark is exact. On CUDA each mark records
an event on the current stream; the elapsed times between events are read only in :meth:`PhaseTimer.read`
(on logging steps), where the loop synchronizes anyway to read its metrics. Event gaps measure the GPU
timeline, so "data" on CUDA includes any time the GPU sat idle waiting for the host to deliver a batch.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from typing import Any


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
