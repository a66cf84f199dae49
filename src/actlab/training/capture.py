"""Whether the training step is captured in a CUDA graph: the decision, and how a fallback is announced.

``cuda_graphs="auto"`` (the default) captures the step on CUDA and runs it eagerly elsewhere. Why by
default: at ACT's small batch sizes an eager step is bound by the host launching ~1,500 small kernels
(on one H100, 45 ms eager vs 6.7 ms captured at batch 8), so the GPU idles most of the time.

A configuration that cannot be captured is trained eagerly with one warning that says why; an explicit
``cuda_graphs=true`` that cannot be honoured is an error instead (the user asked for it). Pure functions of
the settings (torch-free), tested on machines without a GPU.
"""

from __future__ import annotations

import dataclasses
import warnings

from actlab.errors import ActlabError


class CaptureFallbackWarning(UserWarning):
    """The training step (or inference) runs eagerly although CUDA graphs were wanted; says why."""


@dataclasses.dataclass(frozen=True)
class GraphPlan:
    """What :func:`plan_cuda_graphs` decided."""

    # capture the step in a CUDA graph
    enabled: bool
    # why the step is not captured although it could have been (None: nothing to say, e.g. on a CPU)
    reason: str | None = None


def plan_cuda_graphs(setting: bool | str, *, device_type: str, distributed: bool, compile: bool) -> GraphPlan:
    """Decide for ``cuda_graphs`` = ``setting`` (True, False or "auto") on a ``device_type`` device.

    ``True`` that cannot be honoured raises ActlabError; ``"auto"`` returns the reason it cannot instead.
    """
    if setting is False:
        return GraphPlan(False)
    blocker = None
    if device_type != "cuda":
        if setting == "auto":
            return GraphPlan(False)  # CPU and MPS train eagerly, as always: nothing to announce
        blocker = ("CUDA graphs need a CUDA device", "device cuda", device_type)
    elif distributed:
        blocker = (
            "the step of a multi-process (DDP) job is not captured: its gradient all-reduce runs "
            "between backward and the optimizer, outside a graph",
            "one process",
            "several processes (DDP)",
        )
    elif compile:
        problem = "compile=true is used instead of CUDA graphs (one of the two)"
        blocker = (problem, "compile=false", "compile=true")
    if blocker is None:
        return GraphPlan(True)
    problem, expected, found = blocker
    if setting == "auto":
        return GraphPlan(False, f"CUDA graphs off: {problem}")
    raise ActlabError(
        problem,
        field="cuda_graphs",
        expected=expected,
        found=found,
        fix="set cuda_graphs=auto (captures when possible, says why not otherwise) or cuda_graphs=false",
    )


def announce_fallback(reason: str) -> None:
    """Say once why the step runs eagerly (a CaptureFallbackWarning, shown on stderr)."""
    message = f"{reason}; training eagerly (set cuda_graphs=false to silence this)"
    warnings.warn(message, CaptureFallbackWarning, stacklevel=3)
