"""Built-in MuJoCo simulation: an SO-101 task suite, scripted experts, recorder into LeRobot v3.

``TASKS`` names every task (:mod:`actlab.sim.tasks`: pick-and-place, stack, push, a moving cube, clutter);
``make_env("so101_pick_place", image_size=96)`` builds the gymnasium env; ``ExpertPolicy(env)`` is the
scripted expert as a policy; ``record_dataset`` writes expert demonstrations through
:class:`actlab.datasets.DatasetWriter`. Importing this package does not import mujoco or torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from actlab.sim.env import CAMERAS, FPS, HOME_QPOS, TASK_TEXT, PickPlaceConfig, PickPlaceEnv, SimState
from actlab.sim.expert import ExpertConfig, ExpertPolicy, ScriptedExpert
from actlab.sim.scene import JOINT_NAMES, SceneConfig
from actlab.sim.tasks import TASKS, TaskSpec
from actlab.utils.config import from_dict, unknown_name_error


def task_config(task: str = "so101_pick_place", **overrides: Any) -> PickPlaceConfig:
    """The config of a sim ``task`` with field ``overrides`` (``scene`` may be a dict or a SceneConfig)."""
    if task not in TASKS:
        raise unknown_name_error("sim task", task, TASKS, fix="actlab sim tasks lists them")
    cls = TASKS[task].config
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
    fields (``image_size``, ``cameras``, ``max_steps``, ``terminate_on_success``, randomization, ...) or
    the task config's own."""
    config = task_config(task, **overrides)  # (an unknown task or option fails here, with a did-you-mean)
    return TASKS[task].env(config, render_mode=render_mode)


def __getattr__(name: str):
    # The recorder pulls in the dataset writer (pyarrow, av); load it on first use.
    if name in ("RecordConfig", "RecordSummary", "record_dataset"):
        from actlab.sim import record

        return getattr(record, name)
    if name == "render_strip":
        # lazy: view renders with mujoco and writes through the recorder; import actlab.sim stays light
        from actlab.sim.view import render_strip

        return render_strip
    raise AttributeError(name)


__all__ = [
    "CAMERAS",
    "FPS",
    "HOME_QPOS",
    "JOINT_NAMES",
    "TASKS",
    "TASK_TEXT",
    "ExpertConfig",
    "ExpertPolicy",
    "PickPlaceConfig",
    "PickPlaceEnv",
    "RecordConfig",
    "RecordSummary",
    "SceneConfig",
    "ScriptedExpert",
    "SimState",
    "TaskSpec",
    "make_env",
    "record_dataset",
    "render_strip",
    "task_config",
]
