"""The gymnasium peer adapter on gym_pusht (pure Python physics): keys, success, seeds, workers."""

from __future__ import annotations

import numpy as np
import pytest
from evalpolicies import HoldPolicy, pusht_hold_factory

from actlab.errors import ActlabError
from actlab.evaluation.envs import EnvSpec, make_eval_env
from actlab.evaluation.harness import EvalConfig, evaluate
from actlab.evaluation.peers import flatten_observation, make_peer_env

pytest.importorskip(
    "gym_pusht", reason='gym-pusht is an optional extra: pip install -e ".[peers-pusht]" to run these tests'
)

TASK = "gym_pusht/PushT-v0"
# gym_pusht sets the block position before its angle (legacy), so the state that puts the T exactly on
# its goal pose (256, 256, pi/4) is offset from it; found by resetting to the goal and reading block_pose.
T_ON_GOAL = [100.0, 100.0, 256 - 31.81980515, 256 - 13.18019485, np.pi / 4]


def test_flatten_observation_variants():
    img = np.zeros((4, 4, 3), np.uint8)
    flat = flatten_observation({"pixels": img, "agent_pos": np.array([1.0, 2.0])})
    assert set(flat) == {"observation.images.top", "observation.state"}
    assert flat["observation.state"].dtype == np.float32
    flat = flatten_observation({"pixels": {"top": img, "angle": img}, "agent_pos": np.zeros(14)})
    assert set(flat) == {"observation.images.top", "observation.images.angle", "observation.state"}
    assert set(flatten_observation(np.zeros(5))) == {"observation.state"}


def test_pusht_env_through_the_adapter():
    env = make_eval_env(EnvSpec(TASK, max_steps=5))
    obs, info = env.reset(seed=3)
    assert obs["observation.images.top"].shape == (96, 96, 3)
    assert obs["observation.state"].shape == (2,)
    assert info["is_success"] is False
    assert env.max_steps == 5 and env.fps == 10
    for _ in range(5):
        obs, _, terminated, truncated, info = env.step(np.array([1e6, -5.0]))  # clipped to the box
    assert truncated and not terminated and "is_success" in info


def test_success_comes_from_info_is_success():
    policy = HoldPolicy([100.0, 100.0])
    spec = EnvSpec(TASK, max_steps=10, reset_options={"reset_to_state": T_ON_GOAL})
    ev = evaluate(policy, spec, EvalConfig(episodes=2, workers=1, batch_envs=1))
    assert [e.outcome for e in ev.episodes] == ["success", "success"]
    assert [e.steps for e in ev.episodes] == [1, 1]  # terminated on the first step
    assert ev.summary.success_rate == 1.0 and ev.summary.pick_rate is None
    assert policy.resets == 2


def test_failures_are_timeouts_and_seeds_give_identical_episodes(tmp_path):
    spec = EnvSpec(TASK, max_steps=15)
    cfg = EvalConfig(episodes=4, seed=7, workers=1, batch_envs=1, videos=1)
    a = evaluate(HoldPolicy([300.0, 300.0]), spec, cfg, out_dir=tmp_path / "a")
    assert {e.outcome for e in a.episodes} == {"timeout"}
    assert [e.seed for e in a.episodes] == [7, 8, 9, 10]
    # Batched lockstep (B = 4, one policy call per step) and 2 worker processes must give the same episodes.
    batched = HoldPolicy([300.0, 300.0])
    b = evaluate(batched, spec, EvalConfig(episodes=4, seed=7, workers=1, batch_envs=4))
    assert batched.resets == 1 and batched.calls == 15  # one reset, one (B=4) call per step
    c = evaluate(pusht_hold_factory, spec, EvalConfig(episodes=4, seed=7, workers=1))
    for other in (b, c):
        assert [e.reward_sum for e in other.episodes] == [e.reward_sum for e in a.episodes]
    video = tmp_path / "a" / "videos" / "HoldPolicy" / "episode_000.mp4"
    assert a.episodes[0].video == str(video) and video.is_file()
    assert a.episodes[1].video is None


def test_an_action_of_the_wrong_size_is_a_clear_error():
    env = make_eval_env(EnvSpec(TASK, max_steps=5))
    try:
        env.reset(seed=0)
        with pytest.raises(ActlabError, match="action space") as e:
            env.step(np.zeros(6))  # a 6-joint arm policy on the 2-D PushT
        assert "(2,)" in str(e.value) and "(6,)" in str(e.value)
    finally:
        env.close()


def test_unknown_and_missing_peers_are_clear_errors():
    with pytest.raises(ActlabError, match="not installed") as e:
        make_peer_env("gym_aloha_not_here/Nope-v0")
    assert "pip install" in str(e.value)
