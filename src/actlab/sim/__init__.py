"""Built-in MuJoCo simulation: SO-101 pick-and-place, scripted expert, recorder into LeRobot v3.

``make_env("so101_pick_place", image_size=96)`` builds the gymnasium env; ``ExpertPolicy(env)`` is the
scripted expert as a policy; ``record_dataset`` writes expert demonstrations through
:class:`actlab.datasets.DatasetWriter`. Importing this package does not import mujoco or torch.
"""

from __future__ import annotations

from actlab.sim.env import CAMERAS, FPS, HOME_QPOS, TASK_TEXT, PickPlaceConfig, PickPlaceEnv, SimState
from actlab.sim.expert import ExpertConfig, ExpertPolicy, ScriptedExpert
from actlab.sim.scene import JOINT_NAMES, SceneConfig
from actlab.sim.tasks import TASKS, make_env, task_config


def __getattr__(name: str):
    # The recorder pulls in the dataset writer (pyarrow, av); load it on first use.
    if name in ("RecordConfig", "RecordSummary", "record_dataset"):
        from actlab.sim import record  # lazy: the recorder pulls in pyarrow and av

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
    "make_env",
    "record_dataset",
    "render_strip",
    "task_config",
]
