"""The follower's units: the gripper 0-100 over its range, the body joints degrees; round trips exact."""

from __future__ import annotations

import numpy as np
import pytest

from actlab.errors import ActlabError
from actlab.sim import ExpertPolicy, make_env, task_config
from actlab.sim.record import run_expert_episode
from actlab.sim.units import GRIPPER_RANGE_DEG, from_units, to_units


def test_gripper_range_maps_onto_0_100_and_back():
    lo, hi = GRIPPER_RANGE_DEG
    joints = np.array([[10.0, -20.0, 30.0, 40.0, -50.0, lo], [0, 0, 0, 0, 0, hi]])
    follower = to_units(joints, "so101_follower")
    np.testing.assert_allclose(follower[:, 5], [0.0, 100.0], atol=1e-9)
    np.testing.assert_array_equal(follower[:, :5], joints[:, :5])
    np.testing.assert_allclose(from_units(follower, "so101_follower"), joints, atol=1e-9)
    np.testing.assert_array_equal(to_units(joints, "degrees"), joints)
    with pytest.raises(ActlabError, match="so101_follower"):
        task_config(units="percent")


@pytest.mark.timeout(120)
def test_the_expert_drives_a_follower_units_env_the_same_way():
    runs = {}
    for units in ("degrees", "so101_follower"):
        env = make_env(cameras=(), units=units, terminate_on_success=False)
        try:
            ep = run_expert_episode(env, ExpertPolicy(env), 4)
            assert ep["success"]
            runs[units] = ep["frames"]
            assert env.action_space.contains(ep["frames"]["action"][0])
        finally:
            env.close()
    deg, fol = runs["degrees"], runs["so101_follower"]
    np.testing.assert_allclose(to_units(deg["action"], "so101_follower"), fol["action"], atol=1e-3)
    np.testing.assert_allclose(
        to_units(deg["observation.state"], "so101_follower"), fol["observation.state"], atol=1e-3
    )
    assert fol["observation.state"][:, 5].min() >= 0.0 and fol["observation.state"][:, 5].max() <= 100.0
