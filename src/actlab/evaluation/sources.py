"""A policy to evaluate: where it comes from, what it takes, where it runs, what it can execute.

Everything that runs policies in the sim (the harness, the real-time sweep, whiskers, the LeRobot bridge,
rl) describes a policy with a :class:`PolicySource` and asks the questions here, below all of them:
- what observation inputs it expects (:func:`source_inputs`) and how the sim must render for it
  (:func:`spec_for_inputs`);
- which device its tensors live on (:func:`policy_device`);
- which chunk execution it can take (:func:`source_limits`, :func:`check_sources_execution`);
- how many torch threads one rollout process gets (:func:`rollout_threads`).
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
from actlab.policies.execution import ChunkLimits, ExecutionSpec, check_execution
from actlab.utils.io import read_json


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


def source_dir(src: PolicySource) -> str | None:
    """The directory a source's policy is read from (a bundle, a bridged LeRobot policy's directory), an
    input that an output must never replace; None for a factory or a plain object."""
    return src.path or getattr(src.obj, "policy_dir", None)


def source_limits(src: PolicySource) -> ChunkLimits | None:
    """What a policy source can execute (from a bundle's config.json or the object's config); None for
    a policy that does not predict chunks (a scripted expert, a factory)."""
    if src.path is not None:
        cfg = read_json(Path(src.path) / "config.json", "policy config")
        return ChunkLimits.from_config(cfg) if "chunk_size" in cfg else None
    obj = src.obj
    cfg = getattr(obj, "config", None)
    if obj is None or not hasattr(obj, "predict_action_chunk") or getattr(cfg, "chunk_size", None) is None:
        return None
    return ChunkLimits.from_config(cfg)


def check_sources_execution(sources: Sequence[PolicySource], execution: ExecutionSpec | None) -> None:
    """Every source can run ``execution`` (an ActlabError naming the policy and the limit otherwise)."""
    if execution is None or execution.mode == "sync":
        return
    for src in sources:
        limits = source_limits(src)
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
