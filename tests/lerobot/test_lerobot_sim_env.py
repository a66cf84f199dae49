"""The LeRobot-shaped env over the sim tasks (no lerobot needed): keys, seeds, outcomes, units."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from actlab.lerobot.sim_env import GYM_NAMESPACE, LeRobotSimEnv, register_gym_ids
from actlab.sim import TASKS, ExpertPolicy, make_env


def test_every_task_gets_a_gym_id_and_lerobots_observation_keys():
    ids = register_gym_ids()
    assert ids == [f"{GYM_NAMESPACE}/{t}" for t in TASKS]
    env = gym.make(
        f"{GYM_NAMESPACE}/so101_stack", image_size=32, max_episode_steps=50, disable_env_checker=True
    )
    try:
        obs, _ = env.reset(seed=3)
        assert set(obs) == {"agent_pos", "pixels"} and set(obs["pixels"]) == {"top", "wrist"}
        assert obs["pixels"]["top"].shape == (32, 32, 3) and obs["agent_pos"].shape == (6,)
        assert env.observation_space.contains(obs)
        assert env.unwrapped.task_description == "stack the red cube on the green cube"
        assert env.render().shape == (32, 32, 3)
    finally:
        env.close()


@pytest.mark.timeout(120)
def test_a_seeded_episode_reports_actlabs_outcome_and_logs_it(tmp_path):
    log = tmp_path / "episodes.jsonl"
    env = LeRobotSimEnv("so101_push", image_size=32, cameras=("top",), max_steps=200, log_file=str(log))
    # the same scene as actlab's own env for the same seed: the expert of that env succeeds in this one
    twin = make_env("so101_push", cameras=(), max_steps=200)
    try:
        env.reset(seed=11)
        twin.reset(seed=11)
        np.testing.assert_allclose(env.env.cube_pose()[0], twin.cube_pose()[0])
        expert = ExpertPolicy(env.env)
        info = {}
        for _ in range(200):
            _obs, _, terminated, truncated, info = env.step(expert.select_action())
            if terminated or truncated:
                break
        assert info["is_success"] and info["actlab_outcome"] == "success"
        env.reset()  # a vector env's automatic reset: no seed, no episode logged after it
        for _ in range(200):
            *_, terminated, truncated, info = env.step(env.env.joint_positions())
            if terminated or truncated:
                break
        assert info["actlab_outcome"] == "never_touched"
        assert [json.loads(line)["outcome"] for line in log.read_text().splitlines()] == ["success"]
    finally:
        env.close()
        twin.close()


def test_follower_units_reach_the_observation():
    env = LeRobotSimEnv(image_size=32, cameras=("top",), units="so101_follower")
    try:
        obs, _ = env.reset(seed=0)
        assert 0.0 <= obs["agent_pos"][5] <= 100.0
        assert env.action_space.high[5] == pytest.approx(100.0, abs=1e-3)
    finally:
        env.close()
