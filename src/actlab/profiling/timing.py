"""Timing a callable on a device with as few host syncs as possible.

Per-phase step timing inside the training loop is :class:`actlab.training.timing.PhaseTimer` (CUDA events,
read on logging steps). This module is for benchmarks and the peak-FLOP/s measurement: time N calls of a
function with one synchronisation before and one after, never one per call.
"""

from __future__ import annotations

import time
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
