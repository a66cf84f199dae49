"""A policy to evaluate: where it comes from, what it takes, where it runs, what it can execute.

Everything that runs policies in the sim (the harness, the real-time sweep, whiskers, the LeRobot bridge,
rl) describes a policy with a :class:`PolicySource` and asks the questions here, below all of them:
- what observation inputs it expects (:func:`source_inputs`) and how the sim must render for it
  (:func:`spec_for_inputs`);
- which device its tensors live on (:func:`policy_device`);
- which chunk execution it can take (:func:`source_limits`, :func:`check_sources_execution`);
- how many torch threads one rollout process gets (:func:`rollout_threads`, and one on a busy CPU:
  :func:`threads_for_load`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.evaluation.envs import EnvSpec
from actlab.evaluation.policy_io import PolicyInputs, bundle_inputs, policy_inputs
from actlab.policies.contract import RolloutPolicy
from actlab.policies.execution import ChunkLimits, ExecutionSpec, check_execution, horizon_note
from actlab.utils.io import read_json
from actlab.utils.kinds import BUNDLE_DAMAGED_FIX
from actlab.utils.say import say
from actlab.utils.threads import cpu_busy, format_load, load_1m, torch_thread_count, usable_cpus


@dataclass(frozen=True)
class PolicySource:
    """One policy to evaluate: exactly one of ``path``, ``factory`` or ``obj`` is set."""

    name: str  # display name in tables and video file names
    path: str | None = None  # checkpoint bundle directory (loaded with actlab.policies.load_policy)
    factory: Callable[[Any], RolloutPolicy] | None = None  # picklable factory(env) -> policy
    obj: RolloutPolicy | None = None  # a policy object (runs in this process only)
    step: int | None = None  # training step, for sweeps

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.path, self.factory, self.obj)) != 1:
            raise ValueError("PolicySource needs exactly one of path, factory, obj")

    @property
    def in_process_only(self) -> bool:
        return self.obj is not None


def as_source(
    policy: RolloutPolicy | PolicySource | str | Path | Callable[[Any], RolloutPolicy],
    name: str | None = None,
    step: int | None = None,
) -> PolicySource:
    """A policy object, a bundle path or a factory -> PolicySource."""
    if isinstance(policy, PolicySource):
        return policy
    if isinstance(policy, (str, Path)):
        p = Path(policy)
        return PolicySource(name=name or p.name, path=str(p), step=step)
    if hasattr(policy, "select_action"):
        return PolicySource(name=name or type(policy).__name__, obj=policy, step=step)
    if callable(policy):
        return PolicySource(name=name or getattr(policy, "__name__", "policy"), factory=policy, step=step)
    raise ActlabError(
        "cannot evaluate this object",
        expected="a policy (with select_action/reset), a bundle directory or a factory(env) -> policy",
        found=type(policy).__name__,
    )


def source_inputs(src: PolicySource) -> PolicyInputs | None:
    """The observation inputs a source's policy expects, where they can be known without building envs."""
    if src.path is not None:
        return bundle_inputs(src.path)
    if src.obj is not None:
        return policy_inputs(src.obj)
    return None


def spec_for_inputs(spec: EnvSpec, inputs: PolicyInputs | None) -> EnvSpec:
    """Make the sim render what the policy was trained on: its cameras at its (square) image size."""
    if inputs is None or spec.is_peer or not inputs.image_hw:
        return spec
    sizes = set(inputs.image_hw.values())
    if spec.image_size is None and len(sizes) == 1:
        (h, w) = sizes.pop()
        if h == w:
            spec = replace(spec, image_size=h)
    if spec.cameras is None:
        cams = tuple(k.rsplit(".", 1)[-1] for k in inputs.image_hw if k.startswith("observation.images."))
        if cams:
            spec = replace(spec, cameras=cams)
    return spec


def policy_device(policy: RolloutPolicy, fallback: str) -> Any:
    """The device of a policy's first parameter (where its inputs must go); ``fallback`` for a policy
    without parameters (a scripted expert, a bridged LeRobot policy)."""
    params = getattr(policy, "parameters", None)
    if callable(params):
        try:
            return next(iter(params())).device
        except (StopIteration, TypeError):
            pass
    return fallback


def rollout_threads(threads_per_worker: int | None, workers: int, pooled: bool = True) -> int | None:
    """Torch intra-op threads of one rollout process: ``threads_per_worker`` when given; otherwise, for
    episodes spread over ``workers`` processes, the cores shared out between them (at least 1), so that
    workers do not fight over cores; None (leave the count as it is) for a run in this process alone."""
    if threads_per_worker is not None:
        return threads_per_worker
    if not pooled:
        return None
    return max(1, (os.cpu_count() or 1) // workers)


def threads_for_load(cfg: Any, note: bool = True) -> Any:
    """``cfg`` (an EvalConfig) with one torch thread a rollout process when the CPUs are busy and the
    count was left to actlab. The harness decides once per evaluation (``note``: saying so on stderr), so
    the pass that films episodes again runs them at the count of their first run (the same numbers, the
    same outcome); the passes beside it (whiskers, the real-time sweep's latency) apply the same rule.

    Why one: on a CPU other jobs keep busy, torch's OpenMP threads spin waiting for a descheduled sibling;
    the demo's policy took 1.5 s a training step at 1 thread and 9.0 s at 2 at a load average of 10-13 on
    2 cores (`actlab bench threads`), and its inference is the same kernels (a whiskers pass at 2 threads
    beside a test run: 1 step/s, against 35 quiet). Busy: the load beyond this process's own threads
    above the CPU count. Pooled workers on a 2-core machine already get 1 each."""
    if cfg.threads_per_worker is not None:
        return cfg
    own = rollout_threads(None, cfg.workers) if cfg.workers > 1 else torch_thread_count()
    load, cpus = load_1m(), usable_cpus()
    if own is None or own <= 1 or not cpu_busy(load, cpus, own):
        return cfg
    if note:
        say(
            f"note: the CPUs are busy ({format_load(load, cpus)}): rollouts run at 1 torch thread a process "
            f"instead of {own} (threads spin waiting for each other on a busy CPU); --threads N sets the "
            "count"
        )
    return replace(cfg, threads_per_worker=1)


def source_dir(src: PolicySource) -> str | None:
    """The directory a source's policy is read from (a bundle, a bridged LeRobot policy's directory), an
    input that an output must never replace; None for a factory or a plain object."""
    return src.path or getattr(src.obj, "policy_dir", None)


def source_limits(src: PolicySource) -> ChunkLimits | None:
    """What a policy source can execute (from a bundle's config.json or the object's config); None for
    a policy that does not predict chunks (a scripted expert, a factory)."""
    if src.path is not None:
        cfg = read_json(Path(src.path) / "config.json", "policy config", fix=BUNDLE_DAMAGED_FIX)
        return ChunkLimits.from_config(cfg) if "chunk_size" in cfg else None
    obj = src.obj
    cfg = getattr(obj, "config", None)
    if obj is None or not hasattr(obj, "predict_action_chunk") or getattr(cfg, "chunk_size", None) is None:
        return None
    return ChunkLimits.from_config(cfg)


def check_sources_execution(sources: Sequence[PolicySource], execution: ExecutionSpec | None) -> list[str]:
    """Every source can run ``execution`` (an ActlabError naming the policy and the limit otherwise).
    Returns the notes of the sources whose horizon the executor chose (policies.execution.horizon_note)."""
    notes: list[str] = []
    if execution is None or execution.mode == "sync":
        return notes
    for src in sources:
        limits = source_limits(src)
        if limits is None and type(src.obj).__name__ == "LeRobotBridgePolicy":
            # it blamed the policy ("needs a policy that predicts action chunks"): an actlab export does
            raise ActlabError(
                f"{src.name}: --execution {execution.mode} is not run through the LeRobot bridge, which "
                "evaluates a LeRobot policy as LeRobot runs it (its select_action)",
                field="--execution",
                expected="sync with --lerobot-policy",
                found=execution.mode,
                fix=f"for an actlab export: actlab policy import {getattr(src.obj, 'policy_dir', src.name)} "
                "--out B, then actlab "
                f"eval B --execution {execution.mode}; on LeRobot's side, lerobot-rollout "
                f"--policy.execution={execution.mode} runs it for actlab's plugin types (docs/lerobot.md)",
            )
        if limits is None:
            raise ActlabError(
                f"{src.name}: --execution {execution.mode} needs a policy that predicts action chunks "
                "(predict_action_chunk and a config with chunk_size)",
                field="--execution",
                expected="sync for this policy",
                found=execution.mode,
                fix="evaluate it with --execution sync (the default)",
            )
        check_execution(execution, limits, where=src.name)
        note = horizon_note(execution, limits, where=src.name)
        if note is not None:
            notes.append(note)
    return notes
