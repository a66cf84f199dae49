"""The sim tasks RL trains on, with their rewards, success tests and privileged state.

- ``reach``: the SO-101 moves its grasp point (between the jaw pads) to a commanded 3D target within
  ``REACH_RADIUS``. The target is the grasp point of a random reachable joint configuration, so every
  episode is solvable; it is part of the observation (``observation.goal``), as a task command is on a
  real robot. A reduced task that SAC learns from scratch on joint state in minutes on a CPU.
- ``pick_place``: the sim's pick-and-place (``actlab.sim.PickPlaceEnv``) as it is.

Both are gymnasium envs, so the evaluation harness's ``rollout`` runs them unchanged. Privileged state
(what a real robot does not observe: the cube, bowl and grasp positions, the phase flags) is computed
from ``info`` for the critic only (:func:`privileged_state`).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np

from actlab.sim import make_env
from actlab.sim.gl import mujoco_module

REACH_RADIUS = 0.02  # m: the grasp point within this of the target counts as success
# Offsets (deg) of the random joint configuration that defines a reach target, around the home pose:
# shoulder pan, shoulder lift, elbow flex, wrist flex (wrist roll and gripper move no grasp point much).
REACH_JOINT_SPAN_DEG = (35.0, 20.0, 20.0, 20.0)
WORKSPACE_CENTRE = np.array([0.2, 0.0, 0.1])  # m: positions are fed to networks as (p - centre) / scale
WORKSPACE_SCALE = 0.1  # m
STATE_SCALE = 100.0  # deg: joint positions are fed to networks divided by this
GOAL_KEY = "observation.goal"


class ReachEnv(gym.Wrapper):
    """Reach a commanded 3D point with the grasp point; ``info["is_success"]`` within ``REACH_RADIUS``."""

    def __init__(self, max_steps: int = 50) -> None:
        env = make_env("so101_pick_place", cameras=(), max_steps=max_steps)
        super().__init__(env)
        self.target = np.zeros(3)
        space = dict(env.observation_space.spaces)
        space[GOAL_KEY] = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
        self.observation_space = gym.spaces.Dict(space)

    @property
    def max_steps(self) -> int:
        return self.env.unwrapped.max_steps

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        self.target = self._sample_target(np.random.default_rng(seed))
        return self._obs(obs), self._info(info)

    def step(self, action) -> tuple[dict, float, bool, bool, dict]:
        obs, _, _, truncated, info = self.env.step(action)
        info = self._info(info)
        success = bool(info["is_success"])
        return self._obs(obs), float(success), success, truncated and not success, info

    def _sample_target(self, rng: np.random.Generator) -> np.ndarray:
        """Grasp point of a random joint configuration near home (forward kinematics in the sim)."""
        mujoco = mujoco_module()

        sim = self.env.unwrapped
        saved = sim.get_state()
        offsets = [rng.uniform(-s, s) for s in REACH_JOINT_SPAN_DEG]
        for j, off in enumerate(offsets):
            sim.data.qpos[j] += math.radians(off)
        mujoco.mj_kinematics(sim.model, sim.data)
        target = sim.grasp_position()
        sim.set_state(saved)
        return target

    def _obs(self, obs: dict) -> dict:
        return {**obs, GOAL_KEY: ((self.target - WORKSPACE_CENTRE) / WORKSPACE_SCALE).astype(np.float32)}

    def _info(self, info: dict) -> dict:
        dist = float(np.linalg.norm(info["grasp_pos"] - self.target))
        # Only reach's own signals: pick-and-place's phase flags would make the taxonomy judge the cube.
        return {
            "is_success": dist < REACH_RADIUS,
            "distance": dist,
            "grasp_pos": info["grasp_pos"],
            "target": self.target.copy(),
        }


def make_task_env(
    task: str, max_steps: int, cameras: tuple[str, ...] = (), image_size: int | None = None
) -> Any:
    """A gymnasium env of ``task`` (``reach`` renders no camera)."""
    if task == "reach":
        return ReachEnv(max_steps=max_steps)
    kwargs: dict[str, Any] = {"cameras": tuple(cameras), "max_steps": max_steps}
    if image_size is not None:
        kwargs["image_size"] = image_size
    return make_env("so101_pick_place", **kwargs)


def privileged_dim(task: str) -> int:
    """Width of :func:`privileged_state`."""
    return 6 if task == "reach" else 12


def _pos(p: Any) -> np.ndarray:
    return (np.asarray(p, dtype=np.float64) - WORKSPACE_CENTRE) / WORKSPACE_SCALE


def privileged_state(task: str, info: dict) -> np.ndarray:
    """Sim state the critic may read and the actor may not (asymmetric actor-critic), float32."""
    if task == "reach":
        parts = [_pos(info["grasp_pos"]), _pos(info["target"])]
    else:
        flags = [float(info["grasped"]), float(info["lifted"]), float(info["in_goal"])]
        parts = [_pos(info["cube_pos"]), _pos(info["bowl_pos"]), _pos(info["grasp_pos"]), np.array(flags)]
    return np.concatenate(parts).astype(np.float32)


def task_reward(task: str, kind: str, info: dict) -> float:
    """The reward of one step from its ``info``: ``sparse`` = 1 on success; ``shaped`` = reach: minus the
    distance to the target (per 10 cm) plus 1 on success; pick_place: the sim's phase terms (0.1 grasped,
    0.2 lifted, 0.2 in goal while still held) plus 1 on success. ``classifier`` is computed by the caller."""
    success = float(bool(info["is_success"]))
    if kind == "sparse":
        return success
    if task == "reach":
        return -info["distance"] / WORKSPACE_SCALE + success
    return (
        0.1 * info["grasped"] + 0.2 * info["lifted"] + 0.2 * (info["in_goal"] and info["grasped"]) + success
    )
