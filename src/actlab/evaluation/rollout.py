"""Rollouts: B envs stepped in lockstep by one policy call per control step (B = 1 is the plain case).

The policy is reset before the episodes start, every time (a forgotten ``reset()`` leaves the previous
episode's action queue in place and silently ruins an evaluation). All B episodes start together, so a
batched policy's per-row state (its action queue) starts empty for every one of them; an env whose
episode has ended keeps feeding its last observation so the batch shape stays fixed, and its actions are
dropped.

With an ``execution`` other than sync, the actions come from :class:`actlab.policies.execution.ChunkExecutor`
(chunks computed while the previous one executes, each env with its own chunk clock); in every mode the
executed actions and chunk boundaries are kept for the smoothness metrics (boundary jump, jerk).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from actlab.evaluation.envs import env_max_steps
from actlab.evaluation.policy_io import ObsAdapter, actions_to_numpy
from actlab.evaluation.results import EpisodeResult
from actlab.evaluation.taxonomy import PhaseRecord, classify
from actlab.evaluation.video import env_frame
from actlab.policies.contract import RolloutPolicy
from actlab.policies.execution import (
    ChunkExecutor,
    ChunkLimits,
    ExecutionSpec,
    chunk_metrics,
    sync_boundaries,
)

# info keys kept per step (the rest of a sim info, e.g. arrays, is dropped to keep traces small).
# task_failure: a sim task's own failure class (so101_push's never_touched, so101_pick_moving's
# carried_away, ...); without it every failure of those tasks was told by the pick-and-place rules alone.
KEPT_INFO: tuple[str, ...] = (
    "is_success",
    "grasped",
    "lifted",
    "in_goal",
    "near_goal",
    "cube_height",
    "task_failure",
)
# "Near the goal" = within this many goal radii of the goal centre (horizontally).
NEAR_GOAL_FACTOR = 2.0
# Goal radius (m) assumed for envs that do not say (actlab's sim: config.goal_radius, 4.5 cm).
DEFAULT_GOAL_RADIUS = 0.045


@dataclass
class EpisodeTrace:
    """What one rollout recorded."""

    seed: int  # env.reset seed
    infos: list[dict] = field(default_factory=list)  # per step: the KEPT_INFO entries of the step's info
    reward_sum: float = 0.0  # sum of rewards
    frames: list[np.ndarray] | None = None  # camera frames (initial + one per step) when recorded
    actions: list[np.ndarray] = field(default_factory=list)  # (A,) executed action per step
    boundaries: list[int] | None = None  # steps that began a new chunk (None: not a chunked policy)
    inference_s: list[float] = field(default_factory=list)  # seconds of each inference it started (async)

    @property
    def steps(self) -> int:
        return len(self.infos)


def near_goal_radius(env: Any) -> float:
    """Horizontal distance (m) from the goal centre within which a released cube counts as released
    "near the goal" (taxonomy: missed_goal rather than dropped): twice the env's goal radius."""
    return NEAR_GOAL_FACTOR * float(getattr(getattr(env, "config", None), "goal_radius", DEFAULT_GOAL_RADIUS))


def kept_info(info: Mapping, near_radius: float = NEAR_GOAL_FACTOR * DEFAULT_GOAL_RADIUS) -> dict:
    """The per-step signals the taxonomy reads, as plain Python values; ``near_goal`` is derived from
    ``cube_pos`` and ``bowl_pos`` (xy distance <= ``near_radius``) when the env reports both."""
    out = {}
    for k in KEPT_INFO:
        if k in info:
            v = info[k]
            out[k] = float(v) if k == "cube_height" else str(v) if k == "task_failure" else bool(v)
    if "near_goal" not in out and "cube_pos" in info and "bowl_pos" in info:
        d = np.asarray(info["cube_pos"], dtype=float)[:2] - np.asarray(info["bowl_pos"], dtype=float)[:2]
        out["near_goal"] = bool(np.hypot(*d) <= near_radius)
    return out


def rollout(
    policy: RolloutPolicy,
    envs: Sequence[Any],
    seeds: Sequence[int],
    adapter: ObsAdapter,
    record: Sequence[bool] | None = None,
    reset_options: dict | None = None,
    max_steps: int | None = None,
    frame_fn: Callable[[Any, Mapping], np.ndarray] = env_frame,
    execution: ExecutionSpec | None = None,
) -> list[EpisodeTrace]:
    """Run one episode in each of ``envs`` (seeded by ``seeds``) with one batched policy call per step.

    ``execution``: how chunks are executed (None or sync: ``select_action``, the sim waits for it).
    """
    import torch

    batch = len(envs)
    record = list(record) if record is not None else [False] * batch
    # Seed torch's generator from the episode seed: a stochastic policy then draws the same numbers for
    # the same episode in every checkpoint and in every worker process.
    torch.manual_seed(int(seeds[0]))
    policy.reset()
    traces = [EpisodeTrace(seed=int(s)) for s in seeds]
    obs = []
    for env, seed, trace, rec in zip(envs, seeds, traces, record):
        o, _ = env.reset(seed=int(seed), options=reset_options)
        obs.append(o)
        trace.frames = [frame_fn(env, o)] if rec else None
    caps = [min(env_max_steps(env), max_steps or 10**9) for env in envs]
    radii = [near_goal_radius(env) for env in envs]
    active = [True] * batch
    executor = _executor(policy, execution, traces)
    while any(active):
        with torch.inference_mode():
            if executor is None:
                actions = actions_to_numpy(policy.select_action(adapter(obs)), batch)  # (B, A)
            else:
                actions = actions_to_numpy(executor.step(lambda: adapter(obs)), batch)  # (B, A)
        for i in range(batch):
            if not active[i]:
                continue
            o, reward, terminated, truncated, info = envs[i].step(actions[i])
            obs[i] = o
            traces[i].actions.append(actions[i])
            traces[i].infos.append(kept_info(info, radii[i]))
            traces[i].reward_sum += float(reward)
            if traces[i].frames is not None:
                traces[i].frames.append(frame_fn(envs[i], o))
            if terminated or truncated or traces[i].steps >= caps[i]:
                active[i] = False
                if executor is not None:
                    executor.finish(i)
    for i, trace in enumerate(traces):
        if executor is not None:
            trace.boundaries = executor.boundaries(i)
        else:
            trace.boundaries = sync_boundaries(trace.steps, _sync_chunk_steps(policy))
    return traces


def _sync_chunk_steps(policy: RolloutPolicy) -> int | None:
    """Actions per chunk of a policy run by ``select_action`` (None: not chunked, or ensembling)."""
    cfg = getattr(policy, "config", None)
    if cfg is None or getattr(cfg, "temporal_ensemble_coeff", None) is not None:
        return None
    n = getattr(cfg, "n_action_steps", None)
    return n if isinstance(n, int) and n > 0 else None


def _executor(policy: RolloutPolicy, execution: ExecutionSpec | None, traces: list[EpisodeTrace]) -> Any:
    """The chunk executor of a non-sync ``execution`` (None for sync); it records inference times."""
    if execution is None or execution.mode == "sync":
        return None
    limits = ChunkLimits.from_config(getattr(policy, "config", None) or {})

    def timed(seconds: float) -> None:
        for trace in traces:
            trace.inference_s.append(seconds)

    return ChunkExecutor(policy, execution, limits, len(traces), on_inference=timed)


def to_result(index: int, trace: EpisodeTrace, video: str | None = None) -> EpisodeResult:
    """Classify a trace into an EpisodeResult."""
    c = classify(PhaseRecord.from_infos(trace.infos))
    smooth = (
        chunk_metrics(np.asarray(trace.actions), trace.boundaries) if trace.boundaries is not None else {}
    )
    return EpisodeResult(
        index=index,
        seed=trace.seed,
        outcome=c.outcome,
        success=c.outcome == "success",
        steps=trace.steps,
        picked=c.picked,
        drop_events=c.drop_events,
        release_step=c.release_step,
        max_lift_m=c.max_lift_m,
        reward_sum=trace.reward_sum,
        video=video,
        boundary_jump=smooth.get("boundary_jump"),
        step_change=smooth.get("step_change"),
        spike_factor=smooth.get("spike_factor"),
        jerk=smooth.get("jerk"),
        chunk_switches=smooth.get("chunk_switches"),
        inference_ms=[round(1000 * x, 3) for x in trace.inference_s] or None,
    )
