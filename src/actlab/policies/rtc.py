"""Execution simulator for chunked policies with inference latency: naive switching vs RTC merging.

The model of execution (REFERENCE §4, Black et al. 2025):

- Control runs at one action per step. An inference starts every ``execution_horizon`` (s) steps from the
  observation of that step and its chunk arrives ``latency_steps`` (d) steps later; meanwhile the robot
  keeps executing the previous chunk. The new chunk's index k is the action for (start step + k), so
  execution resumes at its index d. The first chunk is available at step 0.
- Dynamics: the robot's joint position follows the executed (commanded) target,
  ``q <- q + tracking_gain * (a - q)`` (1.0: a position servo that reaches the target within a step).
  The observed state is ``q`` plus optional Gaussian sensor noise (``state_noise``); ``obs_fn(t, q)`` may
  add other observation entries (e.g. rendered images).
- Merging strategies at a chunk switch:
  ``naive``: switch to the new chunk as it is.
  ``blend``: inference-time RTC only: overlap positions are blended with the old chunk, weights 1 for
  k < d decaying to 0 at k = H - s (exponential schedule of the RTC paper, or linear).
  ``rtc``: the committed actions (old chunk, steps start..start+d-1) are passed as ``prefix`` to
  ``predict_action_chunk`` (re-expressed against the current state by act_relative) and the result is
  blended as in ``blend``.
- Report: the jump at every chunk boundary ``||a[b] - a[b-1]||`` (L2 over action dims), mean and max, the
  mean step-to-step change away from boundaries, and their ratio (the "spike" factor).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from actlab.errors import ActlabError

MODES = ("naive", "blend", "rtc")
SCHEDULES = ("exp", "linear", "none")


@dataclasses.dataclass(frozen=True)
class ExecutionConfig:
    """How the simulated robot executes chunks."""

    # d: control steps one inference takes; the robot executes the old chunk meanwhile
    latency_steps: int = 3
    # s: control steps between the starts of two inferences (actions executed per chunk)
    execution_horizon: int = 8
    # control steps to simulate
    n_steps: int = 120
    # overlap blending for "blend"/"rtc": "exp" (RTC paper), "linear", or "none" (prefix only)
    schedule: str = "exp"
    # first-order tracking of the commanded target: q <- q + gain * (a - q); 1.0 = reaches it in one step
    tracking_gain: float = 1.0
    # std of Gaussian sensor noise on the observed joint positions (each measurement drawn once); 0 = exact
    state_noise: float = 0.0
    # seed of the sensor-noise stream
    seed: int = 0

    def __post_init__(self) -> None:
        def check(ok: bool, field: str, expected: str, found: object) -> None:
            if not ok:
                raise ActlabError("invalid execution config", field=field, expected=expected, found=found)

        check(self.latency_steps >= 0, "latency_steps", ">= 0", self.latency_steps)
        check(self.execution_horizon >= 1, "execution_horizon", ">= 1", self.execution_horizon)
        check(
            self.latency_steps <= self.execution_horizon,
            "latency_steps",
            f"<= execution_horizon ({self.execution_horizon}): one inference at a time",
            self.latency_steps,
        )
        check(self.n_steps >= 1, "n_steps", ">= 1", self.n_steps)
        check(self.schedule in SCHEDULES, "schedule", " / ".join(SCHEDULES), self.schedule)
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
        steps = np.linalg.norm(np.diff(self.actions, axis=0), axis=1)  # steps[t-1] = ||a[t] - a[t-1]||
        mask = np.ones(len(steps), dtype=bool)
        mask[[b - 1 for b in self.boundaries]] = False
        return float(steps[mask].mean()) if mask.any() else float("nan")

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


def blend_weights(horizon: int, delay: int, execution_horizon: int, schedule: str = "exp") -> torch.Tensor:
    """Weights of the old chunk per new-chunk index (H,): 1 for k < d, decaying to 0 at k = H - s.

    ``exp`` is the RTC paper's soft mask ``c (e^c - 1) / (e - 1)`` with ``c = (H - s - k) / (H - s - d + 1)``.
    """
    k = torch.arange(horizon, dtype=torch.float64)
    end = horizon - execution_horizon  # old chunk has no actions from here on
    w = torch.zeros(horizon, dtype=torch.float64)
    if schedule != "none":
        c = ((end - k) / (end - delay + 1)).clamp(0, 1)
        w = c * (torch.exp(c) - 1) / (math.e - 1) if schedule == "exp" else c
    w[:delay] = 1.0
    w[end:] = 0.0
    return w.float()


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
    config: ExecutionConfig,
    mode: str = "naive",
    obs_fn: Callable[[int, torch.Tensor], dict[str, torch.Tensor]] | None = None,
) -> ExecutionResult:
    """Run ``policy`` on the simulated robot from ``initial_state`` with one merging ``mode``.

    ``initial_state`` is the current joint position (A,), or (K, A) past positions oldest first (the robot
    already moving), which policies with a state delta read as their history.
    """
    if mode not in MODES:
        raise ActlabError("unknown execution mode", field="mode", expected=" / ".join(MODES), found=mode)
    horizon = policy.config.chunk_size
    d, s = config.latency_steps, config.execution_horizon
    if s + d > horizon:
        raise ActlabError(
            "the chunk is too short for this latency and execution horizon",
            field="execution_horizon",
            expected=f"execution_horizon + latency_steps <= {horizon}",
            found=s + d,
        )
    if mode == "rtc" and d > getattr(policy.config, "rtc_max_delay", 0):
        raise ActlabError(
            "this policy cannot take a committed prefix this long",
            field="latency_steps",
            expected=f"<= rtc_max_delay ({getattr(policy.config, 'rtc_max_delay', 0)})",
            found=d,
            fix="use mode 'blend', or train act_relative with a larger rtc_max_delay",
        )
    weights = blend_weights(horizon, d, s, config.schedule)
    policy.reset()
    start = initial_state.detach().float()
    gen = torch.Generator().manual_seed(config.seed)

    def measure(x: torch.Tensor) -> torch.Tensor:
        return x + config.state_noise * torch.randn(x.shape, generator=gen) if config.state_noise else x

    history = [x.clone() for x in (start[None] if start.ndim == 1 else start)]  # true positions, last = now
    measured = [measure(x) for x in history]  # what the sensors reported, one draw per step
    q = history[-1]
    n_past = len(history) - 1

    def infer(t: int, prefix: torch.Tensor | None) -> torch.Tensor:
        obs = dict(obs_fn(t, q)) if obs_fn is not None else {}
        obs["observation.state"] = _state_obs(policy, measured)
        return policy.predict_action_chunk(obs, prefix=prefix)[0].float()  # (H, A)

    chunk, chunk_start = infer(0, None), 0
    pending: tuple[int, torch.Tensor, int] | None = None
    actions, boundaries, committed_ok = [], [], True
    for t in range(config.n_steps):
        if t > 0 and t % s == 0:
            old = chunk[t - chunk_start :]  # (H - s, A) what the old chunk still holds
            prefix = old[None, :d] if mode == "rtc" else None
            new = infer(t, prefix)
            if mode == "rtc":
                committed_ok &= bool(torch.equal(new[:d], old[:d]))
            if mode in ("blend", "rtc"):
                w = weights[: len(old), None]
                new = torch.cat([w * old + (1 - w) * new[: len(old)], new[len(old) :]])
            pending = (t + d, new, t)
        if pending is not None and t == pending[0]:
            _, chunk, chunk_start = pending
            pending = None
            boundaries.append(t)
        a = chunk[t - chunk_start]
        actions.append(a)
        q = q + config.tracking_gain * (a - q)
        history.append(q)
        measured.append(measure(q))
    return ExecutionResult(
        mode=mode,
        actions=torch.stack(actions).numpy(),
        states=torch.stack(history[n_past:]).numpy(),
        boundaries=boundaries,
        committed_ok=committed_ok,
    )


def compare(
    policy: Any,
    initial_states: list[torch.Tensor],
    config: ExecutionConfig,
    modes: tuple[str, ...] = ("naive", "rtc"),
    obs_fn: Callable[[int, torch.Tensor], dict[str, torch.Tensor]] | None = None,
) -> dict[str, dict[str, float]]:
    """Boundary-jump summary per mode, pooled over runs from each initial state."""
    out: dict[str, dict[str, float]] = {}
    for mode in modes:
        runs = [simulate(policy, s0, config, mode, obs_fn) for s0 in initial_states]
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
