"""What one training step asks of the device, counted with ``torch.profiler``.

- On CUDA: the kernels executed per step (also those replayed from a CUDA graph), the host-side launch
  calls that started them (``cudaLaunchKernel``-style calls, or one ``cudaGraphLaunch`` for a captured
  step), and the share of the step's wall time during which at least one kernel was running (the union
  of kernel intervals over the window: the profiler's own view of what NVML's utilization.gpu samples).
- On a CPU there are no kernels: the count is of the torch operators that do the work (``aten::`` ops
  that compute, calling no other computing op: allocations and views do not count), and the busy share
  is the union of top-level operator intervals over the wall time (the rest is Python and the framework).

Both report the tensor dtype casts per step: ``aten::_to_copy`` calls on tensors of more than one element
(what ``.to(dtype)`` and autocast's weight casts call; Python scalars wrapped into tensors by the
optimizer are not counted).

The result says which of the two it counted. Profiling slows a step down, so the step time measured here
is never reported as the step time: the bench times steps without the profiler.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from actlab.profiling.timing import synchronize

# Host-side CUDA runtime / driver calls that start device work (one per kernel, or one per graph).
_LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx",
                 "cudaGraphLaunch", "cudaLaunchCooperativeKernel")  # fmt: skip


# Operators that allocate or re-describe memory without computing anything (not counted as work on a CPU).
_METADATA_OPS = frozenset(
    "aten::" + n
    for n in (
        "empty", "empty_like", "empty_strided", "view", "_unsafe_view", "as_strided", "resize_", "detach",
        "detach_", "t", "transpose", "expand", "slice", "select", "unsqueeze", "squeeze", "permute", "alias",
        "lift_fresh", "unbind", "split", "chunk", "narrow", "reshape", "flatten", "unflatten", "view_as",
        "expand_as", "split_with_sizes", "contiguous", "to", "set_", "result_type",
    )
)  # fmt: skip


def does_work(name: str) -> bool:
    """True for a torch operator that computes (not an allocation or a view)."""
    return name.startswith("aten::") and name not in _METADATA_OPS


def _union_us(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of ``(start, end)`` intervals."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def summarize_events(
    events: list[dict[str, Any]], steps: int, window_us: float, cuda: bool
) -> dict[str, Any]:
    """Counts per step and the busy share from plain event records (pure; tested alone).

    ``events``: ``{"name", "device" ("cpu" | "cuda"), "start", "end" (us), "top" (no CPU parent), "leaf"
    (computes and calls no other computing op), "numel" (elements of the first input, None if unknown)}``.
    """
    per = max(steps, 1)
    casts = sum(
        1
        for e in events
        if e["device"] == "cpu" and e["name"] == "aten::_to_copy" and (e.get("numel") or 0) > 1
    )
    if cuda:
        kernels = [e for e in events if e["device"] == "cuda"]
        launches = sum(1 for e in events if e["device"] == "cpu" and e["name"] in _LAUNCH_CALLS)
        busy = _union_us([(e["start"], e["end"]) for e in kernels])
        return {
            "counted": "CUDA kernels (torch.profiler / CUPTI)",
            "kernels_per_step": len(kernels) / per,
            "launch_calls_per_step": launches / per,
            "device_busy_frac": busy / window_us if window_us > 0 else 0.0,
            "dtype_casts_per_step": casts / per,
        }
    ops = [e for e in events if e["device"] == "cpu" and e["name"].startswith("aten::")]
    busy = _union_us([(e["start"], e["end"]) for e in ops if e["top"]])
    return {
        "counted": "CPU torch operators doing the work (aten::* calling no other op; no CUDA device)",
        "kernels_per_step": sum(1 for e in ops if e["leaf"]) / per,
        "launch_calls_per_step": None,
        "device_busy_frac": busy / window_us if window_us > 0 else 0.0,
        "dtype_casts_per_step": casts / per,
    }


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null inside the block. Why: starting and stopping torch.profiler,
    libkineto writes ``STAGE:``/``USDT: ... profiler_start`` lines to the process's stderr from C++, with no
    setting that turns them off (KINETO_LOG_LEVEL does not), into the output of `actlab bench train`.
    Only the profiler's start and stop run inside; the profiled steps do not."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def profile_step(fn: Callable[[], Any], device: Any, steps: int = 3) -> dict[str, Any]:
    """Run ``fn`` (one training step) ``steps`` times under the profiler; see :func:`summarize_events`.

    Call it after warm-up steps (a CUDA graph must already be captured, autotuning done).
    """
    import time

    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = getattr(device, "type", str(device)) == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    synchronize(device)
    prof = profile(activities=activities, record_shapes=True)
    with native_stderr_silenced():
        prof.start()
    try:
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        synchronize(device)  # the last step's kernels are inside the window
        window_us = (time.perf_counter() - t0) * 1e6
    finally:
        with native_stderr_silenced():
            prof.stop()

    def computes_below(e) -> bool:
        return any(does_work(c.name) or computes_below(c) for c in e.cpu_children)

    records = []
    for e in prof.events():
        shapes = getattr(e, "input_shapes", None) or []
        first = shapes[0] if shapes and isinstance(shapes[0], (list, tuple)) else None
        records.append(
            {
                "name": e.name,
                "device": "cuda" if e.device_type == DeviceType.CUDA else "cpu",
                "start": float(e.time_range.start),
                "end": float(e.time_range.end),
                "top": e.cpu_parent is None,
                "leaf": does_work(e.name) and not computes_below(e),
                "numel": int(torch.Size(first).numel()) if first is not None else None,
            }
        )
    return summarize_events(records, steps, window_us, cuda)
