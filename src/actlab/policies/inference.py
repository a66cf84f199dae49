"""Inference without per-call host overhead: ``predict_action_chunk`` replayed from CUDA graphs.

Real-time control lives on inference latency (RTC freezes ``ceil(latency * fps)`` actions of every chunk),
and at batch 1 an eager ACT forward is bound by the host launching a few hundred small kernels. On CUDA the
policy's tensor computation (normalize, backbone, transformer, head, unnormalize) is captured once per
input signature (keys, shapes, dtypes, RTC prefix length) into a graph with static input buffers; a call
copies the observation into them, replays the graph, and returns a copy of the output. Everything that
is not tensor math (input checks, the state history of ``select_action``, the action queue) stays eager.

Safety: the graphs hold the addresses of the weights, so they are dropped and recaptured when any
parameter or buffer has moved (``.to()``, a new tensor loaded by assignment); weights loaded in place
(``load_state_dict``) are picked up as they are. A signature that cannot be captured runs eagerly, with
one :class:`InferenceCaptureWarning` saying why. On CPU and MPS nothing is captured.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from actlab.profiling.timing import synchronize

# Distinct input signatures captured per policy (e.g. RTC prefix lengths 0..d, two batch sizes); beyond
# this, calls with a new signature run eagerly (each graph keeps its own static buffers).
MAX_GRAPHS = 16


class InferenceCaptureWarning(UserWarning):
    """Inference runs eagerly although CUDA graphs were asked for; says why."""


def plan_inference_graphs(mode: bool | str, device_type: str) -> tuple[bool, str | None]:
    """(capture?, why not) for ``mode`` ("auto", True, False) on a ``device_type`` policy.

    "auto" captures on CUDA only and says nothing elsewhere; True on a non-CUDA device gives the reason.
    """
    if mode is False:
        return False, None
    if mode not in (True, "auto"):
        raise ValueError(f"cuda graph mode must be True, False or 'auto', not {mode!r}")
    if device_type == "cuda":
        return True, None
    return False, (
        None if mode == "auto" else f"CUDA graphs need a CUDA device (the policy is on {device_type})"
    )


def _signature(obs: dict[str, Any], prefix: torch.Tensor | None) -> tuple | None:
    """Hashable description of the inputs, or None if any value is not a tensor (run eagerly)."""
    items = []
    for key in sorted(obs):
        v = obs[key]
        if not torch.is_tensor(v):
            return None
        items.append((key, tuple(v.shape), v.dtype))
    p = None if prefix is None else (tuple(prefix.shape), prefix.dtype)
    return (tuple(items), p)


class _Graph:
    """One captured call: static inputs, the graph, its static output."""

    def __init__(self, fn: Callable, obs: dict[str, torch.Tensor], prefix, device, pool, warmup: int) -> None:
        self.obs = {k: v.detach().to(device).clone() for k, v in obs.items()}
        self.prefix = None if prefix is None else prefix.detach().to(device).clone()
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(warmup):  # cuDNN autotuning and lazy allocations happen outside the capture
                fn(self.obs, self.prefix)
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(self.graph, pool=pool):
            self.out = fn(self.obs, self.prefix)

    def __call__(self, obs: dict[str, torch.Tensor], prefix) -> torch.Tensor:
        for k, v in obs.items():
            self.obs[k].copy_(v, non_blocking=True)
        if prefix is not None:
            self.prefix.copy_(prefix, non_blocking=True)
        self.graph.replay()
        return self.out.clone()  # the next replay overwrites the static output


class GraphedInference:
    """``fn(obs, prefix) -> actions`` of a module, replayed from one CUDA graph per input signature."""

    def __init__(self, module: torch.nn.Module, fn: Callable, warmup: int = 2) -> None:
        self.module = module
        self.fn = fn
        self.warmup = warmup
        self.graphs: dict[tuple, _Graph] = {}
        self.failed: set[tuple] = set()
        self.pool = None
        self._addresses: tuple[int, ...] = ()

    def _weights_moved(self) -> bool:
        addresses = tuple(t.data_ptr() for t in (*self.module.parameters(), *self.module.buffers()))
        moved = addresses != self._addresses
        self._addresses = addresses
        return moved

    def __call__(self, obs: dict[str, torch.Tensor], prefix: torch.Tensor | None) -> torch.Tensor:
        key = _signature(obs, prefix)
        if key is None or key in self.failed:
            return self.fn(obs, prefix)
        if self._weights_moved():
            self.graphs.clear()  # a graph reading freed weights would return garbage
            self.pool = None
        device = next(iter(self.module.parameters())).device
        if device.type != "cuda":  # moved off the GPU after capture was turned on
            return self.fn(obs, prefix)
        graph = self.graphs.get(key)
        if graph is None:
            if len(self.graphs) >= MAX_GRAPHS:
                return self.fn(obs, prefix)
            try:
                self.pool = self.pool or torch.cuda.graph_pool_handle()
                graph = _Graph(self.fn, obs, prefix, device, self.pool, self.warmup)
            except torch.cuda.OutOfMemoryError:
                raise
            except Exception as e:  # a host sync or an unsupported op in the forward
                self.failed.add(key)
                first = (str(e).strip().splitlines() or [""])[0]
                warnings.warn(
                    f"inference for inputs {key} is not captured in a CUDA graph ({type(e).__name__}: "
                    f"{first}); running it eagerly",
                    InferenceCaptureWarning,
                    stacklevel=3,
                )
                return self.fn(obs, prefix)
            self.graphs[key] = graph
        return graph(obs, prefix)


def chunk_latency_ms(policy: Any, obs: dict[str, torch.Tensor], iters: int = 20, warmup: int = 3) -> dict:
    """Median milliseconds per ``predict_action_chunk(obs)`` call, eager and (on CUDA) captured.

    Latency, not throughput: each call is timed alone between two device syncs, as a controller waits
    for its chunk. Returns ``{"eager_ms", "captured_ms" (None off CUDA), "counted_calls"}``; the policy's
    own CUDA-graph setting is restored afterwards.
    """
    import statistics
    import time

    device = next(iter(policy.parameters())).device
    saved = policy._graphed_inference

    def timed() -> float:
        out = []
        for i in range(warmup + iters):
            synchronize(device)
            t0 = time.perf_counter()
            policy.predict_action_chunk(obs)
            synchronize(device)
            if i >= warmup:
                out.append(1000 * (time.perf_counter() - t0))
        return statistics.median(out)

    try:
        policy.use_cuda_graphs(False)
        eager = timed()
        captured = None
        if device.type == "cuda":
            policy.use_cuda_graphs(True)
            captured = timed()
    finally:
        policy._graphed_inference = saved
    return {"eager_ms": eager, "captured_ms": captured, "counted_calls": iters}
