"""Execution simulator for chunked policies with inference latency: naive switching vs RTC merging.

The model of execution (Black et al. 2025, "Real-Time Execution of Action Chunking Flow Policies"):

- Control runs at one action per step. An inference starts every ``horizon`` (s) steps from the
  observation of that step and its chunk arrives ``latency`` (d) steps later; meanwhile the robot
  keeps executing the previous chunk. The new chunk's index k is the action for (start step + k), so
  execution resumes at its index d. The first chunk is available at step 0.
- Dynamics: the robot's joint position follows the executed (commanded) target,
  ``q <- q + tracking_gain * (a - q)`` (1.0: a position servo that reaches the target within a step).
  The observed state is ``q`` plus optional Gaussian sensor noise (``state_noise``); ``obs_fn(t, q)`` may
  add other observation entries (e.g. rendered images).
- How chunks are executed is an :class:`~actlab.policies.execution.ExecutionSpec`, the one of
  ``actlab eval --execution`` (the same mode names; ``naive`` switching is ``async``):
  ``async``: switch to the new chunk as it is.
  ``blend``: inference-time RTC only: overlap positions are blended with the old chunk, weights 1 for
  k < d decaying to 0 at k = H - s (exponential schedule of the RTC paper, or linear).
  ``rtc``: the committed actions (old chunk, steps start..start+d-1) are passed as ``prefix`` to
  ``predict_action_chunk`` (re-expressed against the current state by act_relative) and the result is
  blended as in ``blend``.
  ``ensemble``: temporal ensembling of every arrived chunk.
- The rules live in ``actlab.policies.execution`` (the evaluation harness executes chunks on the SO-101
  sim with the same :class:`~actlab.policies.execution.ChunkExecutor`); this module is the servo "env".
- Report: the jump at every chunk boundary ``||a[b] - a[b-1]||`` (L2 over action dims), mean and max, the
  mean step-to-step change away from boundaries, and their ratio (the "spike" factor).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from actlab.errors import ActlabError
from actlab.policies.execution import ChunkExecutor, ChunkLimits, ExecutionSpec, blend_weights, chunk_metrics


@dataclasses.dataclass(frozen=True)
class ServoConfig:
    """The simulated robot: how it follows its commands, how its sensors read, how long it runs. How it
    executes chunks (mode, latency, horizon, blending) is an :class:`ExecutionSpec`, as in ``actlab eval``."""

    # control steps to simulate
    n_steps: int = 120
    # first-order tracking of the commanded target: q <- q + gain * (a - q); 1.0 = reaches it in one step
    tracking_gain: float = 1.0
    # std of Gaussian sensor noise on the observed joint positions (each measurement drawn once); 0 = exact
    state_noise: float = 0.0
    # seed of the sensor-noise stream
    seed: int = 0

    def __post_init__(self) -> None:
        def check(ok: bool, field: str, expected: str, found: object) -> None:
            if not ok:
                raise ActlabError("invalid servo config", field=field, expected=expected, found=found)

        check(self.n_steps >= 1, "n_steps", ">= 1", self.n_steps)
        check(0 < self.tracking_gain <= 1, "tracking_gain", "0 < gain <= 1", self.tracking_gain)
        check(self.state_noise >= 0, "state_noise", ">= 0", self.state_noise)


@dataclasses.dataclass
class ExecutionResult:
    """One simulated run."""

    mode: str
    actions: np.ndarray  # (T, A) executed actions
    states: np.ndarray  # (T + 1, A) robot joint positions, q[0] the initial state
    boundaries: list[int]  # steps whose action is the first taken from a new chunk
    committed_ok: bool  # every chunk's first d actions equalled the committed ones (rtc mode)

    @property
    def boundary_jumps(self) -> np.ndarray:
        a = self.actions
        return np.array([np.linalg.norm(a[b] - a[b - 1]) for b in self.boundaries])

    @property
    def mean_step(self) -> float:
        """Mean ||a[t] - a[t-1]|| over steps that are not chunk boundaries."""
        m = chunk_metrics(self.actions, self.boundaries)["step_change"]
        return float("nan") if m is None else float(m)

    def summary(self) -> dict[str, float]:
        jumps = self.boundary_jumps
        mean_jump = float(jumps.mean()) if len(jumps) else float("nan")
        return {
            "mean_jump": mean_jump,
            "max_jump": float(jumps.max()) if len(jumps) else float("nan"),
            "mean_step": self.mean_step,
            "spike_ratio": mean_jump / self.mean_step if self.mean_step > 0 else float("nan"),
            "n_boundaries": len(jumps),
        }


__all__ = ["ExecutionResult", "ExecutionSpec", "ServoConfig", "blend_weights", "compare", "simulate"]


def _state_obs(policy: Any, history: list[torch.Tensor]) -> torch.Tensor:
    """The state the policy reads: (1, D), or (1, T, D) when it asks for past frames (clamped at t=0)."""
    offsets = policy.delta_indices["observation.state"]
    if offsets == [0]:
        return history[-1][None]
    t = len(history) - 1
    frames = [history[max(0, t + o)] for o in offsets]
    return torch.stack(frames)[None]


def simulate(
    policy: Any,
    initial_state: torch.Tensor,
    execution: ExecutionSpec,
    servo: ServoConfig | None = None,
    obs_fn: Callable[[int, torch.Tensor], dict[str, torch.Tensor]] | None = None,
) -> ExecutionResult:
    """Run ``policy`` on the simulated robot from ``initial_state`` under ``execution`` (an asynchronous
    mode: async, blend, rtc or ensemble), checked against the policy as ``actlab eval`` checks it.

    ``initial_state`` is the current joint position (A,), or (K, A) past positions oldest first (the robot
    already moving), which policies with a state delta read as their history (kept here, so the
    executor's refusal of history policies does not apply).
    """
    config = servo or ServoConfig()
    cfg = policy.config
    limits = ChunkLimits(
        cfg.chunk_size, cfg.n_action_steps or cfg.chunk_size, getattr(cfg, "rtc_max_delay", 0) or 0
    )
    executor = ChunkExecutor(policy, execution, limits, batch=1)
    policy.reset()
    start = initial_state.detach().float()
    gen = torch.Generator().manual_seed(config.seed)

    def measure(x: torch.Tensor) -> torch.Tensor:
        return x + config.state_noise * torch.randn(x.shape, generator=gen) if config.state_noise else x

    history = [x.clone() for x in (start[None] if start.ndim == 1 else start)]  # true positions, last = now
    measured = [measure(x) for x in history]  # what the sensors reported, one draw per step
    q = history[-1]
    n_past = len(history) - 1
    for t in range(config.n_steps):

        def observe(t: int = t, q: torch.Tensor = q) -> dict[str, torch.Tensor]:  # called at inferences
            obs = dict(obs_fn(t, q)) if obs_fn is not None else {}
            obs["observation.state"] = _state_obs(policy, measured)
            return obs

        a = executor.step(observe)[0]  # (A,)
        q = q + config.tracking_gain * (a - q)
        history.append(q)
        measured.append(measure(q))
    return ExecutionResult(
        mode=execution.mode,
        actions=executor.executed(0),
        states=torch.stack(history[n_past:]).numpy(),
        boundaries=executor.boundaries(0),
        committed_ok=executor.committed_ok(0),
    )


def compare(
    policy: Any,
    initial_states: list[torch.Tensor],
    execution: ExecutionSpec,
    servo: ServoConfig | None = None,
    modes: tuple[str, ...] = ("async", "rtc"),
    obs_fn: Callable[[int, torch.Tensor], dict[str, torch.Tensor]] | None = None,
) -> dict[str, dict[str, float]]:
    """Boundary-jump summary per mode (``execution`` with each of ``modes``), pooled over runs from each
    initial state."""
    out: dict[str, dict[str, float]] = {}
    for mode in modes:
        spec = dataclasses.replace(execution, mode=mode)
        runs = [simulate(policy, s0, spec, servo, obs_fn) for s0 in initial_states]
        jumps = np.concatenate([r.boundary_jumps for r in runs])
        steps = np.array([r.mean_step for r in runs])
        out[mode] = {
            "mean_jump": float(jumps.mean()),
            "max_jump": float(jumps.max()),
            "mean_step": float(steps.mean()),
            "spike_ratio": float(jumps.mean() / steps.mean()),
            "committed_ok": all(r.committed_ok for r in runs),
        }
    return out
