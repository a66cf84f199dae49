"""The sim's tasks by name: each task's config class, its config with overrides, and its env."""

from __future__ import annotations

import dataclasses
from typing import Any

from actlab.sim.env import PickPlaceConfig, PickPlaceEnv
from actlab.sim.scene import SceneConfig
from actlab.utils.config import from_dict, unknown_name_error

TASKS: dict[str, type] = {"so101_pick_place": PickPlaceConfig}


def task_config(task: str = "so101_pick_place", **overrides: Any) -> PickPlaceConfig:
    """The config of a sim ``task`` with field ``overrides`` (``scene`` may be a dict or a SceneConfig)."""
    if task not in TASKS:
        raise unknown_name_error("sim task", task, TASKS, fix="actlab sim --help lists the tasks")
    cls = TASKS[task]
    names = {f.name for f in dataclasses.fields(cls)}
    for key in overrides:
        if key not in names:
            raise unknown_name_error(f"{task} option", key, names)
    scene = overrides.pop("scene", None)
    if isinstance(scene, dict):
        scene = from_dict(SceneConfig, scene, where="scene")
    if "cameras" in overrides:
        overrides["cameras"] = tuple(overrides["cameras"])
    cfg = from_dict(cls, overrides)
    return dataclasses.replace(cfg, scene=scene) if scene is not None else cfg


def make_env(task: str = "so101_pick_place", render_mode: str | None = "rgb_array", **overrides: Any):
    """Build the gymnasium env of a sim ``task``; keyword arguments override :class:`PickPlaceConfig`
    fields (``image_size``, ``cameras``, ``max_steps``, ``terminate_on_success``, randomization, ...)."""
    return PickPlaceEnv(task_config(task, **overrides), render_mode=render_mode)
