"""Picklable descriptions of evaluation environments, built the same way in the main and worker processes."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from actlab.errors import ActlabError
from actlab.evaluation.peers import is_peer_task, make_peer_env
from actlab.evaluation.perturb import PerturbedEnv
from actlab.sim import TASKS, make_env
from actlab.utils.config import unknown_name_error


@dataclass(frozen=True)
class EnvSpec:
    """Everything needed to build one evaluation env; sent to worker processes, so plain data only."""

    task: str = "so101_pick_place"  # actlab.sim task name, or a gymnasium id of a peer env
    image_size: int | None = None  # camera resolution for the sim (None: the task's default)
    cameras: tuple[str, ...] | None = None  # sim cameras to render (None: the task's default)
    max_steps: int | None = None  # episode step limit (None: the env's own)
    reset_options: dict[str, Any] | None = None  # passed to every env.reset(options=...)
    env_kwargs: dict[str, Any] = field(default_factory=dict)  # extra keyword arguments for the env factory
    perturb: tuple[str, float] | None = None  # (name, level) of actlab.evaluation.perturb, for sim tasks

    def __post_init__(self) -> None:
        if not self.task:
            raise ActlabError("no task given", field="task", expected="e.g. so101_pick_place")
        # before any policy is loaded (`eval --task nosuch` loaded it and warned "trained on
        # so101_pick_place, evaluated on nosuch" first)
        if not is_peer_task(self.task) and self.task not in TASKS:
            raise unknown_name_error(
                "sim task",
                self.task,
                TASKS,
                fix="actlab sim tasks lists them (or a gymnasium id such as gym_pusht/PushT-v0)",
            )
        if self.image_size is not None and self.image_size < 8:
            raise ActlabError(
                "image size too small", field="image_size", expected=">= 8", found=self.image_size
            )
        if self.max_steps is not None and self.max_steps < 1:
            raise ActlabError("max_steps must be positive", field="max_steps", found=self.max_steps)
        if self.perturb is not None and is_peer_task(self.task):
            raise ActlabError(
                "perturbations change actlab's own sim scenes",
                field="--perturb",
                found=self.task,
                fix="evaluate a peer env without --perturb",
            )

    @property
    def is_peer(self) -> bool:
        return is_peer_task(self.task)

    def cache_key(self) -> str:
        return repr(self)


def make_eval_env(spec: EnvSpec) -> Any:
    """Build the env a spec describes: ``actlab.sim.make_env`` for sim tasks, the peer adapter otherwise."""
    if spec.is_peer:
        return make_peer_env(spec.task, max_steps=spec.max_steps, **spec.env_kwargs)
    os.environ.setdefault("MUJOCO_GL", "egl")  # headless rendering; must precede the mujoco import

    kwargs = dict(spec.env_kwargs)
    if spec.image_size is not None:
        kwargs["image_size"] = spec.image_size
    if spec.cameras is not None:
        kwargs["cameras"] = tuple(spec.cameras)
    if spec.max_steps is not None:
        kwargs["max_steps"] = spec.max_steps
    env = make_env(spec.task, **kwargs)
    return env if spec.perturb is None else PerturbedEnv(env, *spec.perturb)


def env_max_steps(env: Any, fallback: int = 1000) -> int:
    """The env's own step limit (``max_steps`` attribute, or the gymnasium spec's), used as a hard cap."""
    for value in (
        getattr(env, "max_steps", None),
        getattr(getattr(env, "unwrapped", env), "max_steps", None),
        getattr(getattr(env, "spec", None), "max_episode_steps", None),
    ):
        if isinstance(value, int) and value > 0:
            return value
    return fallback


def env_fps(env: Any, fallback: int = 30) -> int:
    """Control frequency of the env for video playback (``fps`` attribute or ``metadata['render_fps']``)."""
    fps = getattr(env, "fps", None) or getattr(getattr(env, "unwrapped", env), "fps", None)
    if not fps:
        fps = (getattr(env, "metadata", None) or {}).get("render_fps")
    return int(fps or fallback)
