import math

import numpy as np
import pytest

from actlab.errors import ActlabError
from actlab.sim.scene import (
    GRIPPER_PARALLEL,
    JOINT_NAMES,
    JOINT_RANGES,
    SERVO_FORCE,
    SERVO_KP,
    SceneConfig,
    build_model,
)


@pytest.fixture(scope="module")
def model():
    return build_model()


def test_joints_and_actuators_in_lerobot_order(model):
    import mujoco

    assert JOINT_NAMES == (
        "shoulder_pan",
        "shoulder_lift",
        "elbow_flex",
        "wrist_flex",
        "wrist_roll",
        "gripper",
    )
    for i, (name, rng) in enumerate(zip(JOINT_NAMES, JOINT_RANGES)):
        j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        assert j == i and model.jnt_qposadr[j] == i  # qpos[:6] is the LeRobot order
        np.testing.assert_allclose(model.jnt_range[j], rng)
        assert model.actuator_trnid[i, 0] == j
        np.testing.assert_allclose(model.actuator_ctrlrange[i], rng)
        assert model.actuator_gainprm[i, 0] == pytest.approx(SERVO_KP)
        np.testing.assert_allclose(model.actuator_forcerange[i], [-SERVO_FORCE, SERVO_FORCE])


def test_kinematic_chain_matches_the_so101(model):
    import mujoco

    # Zero pose: upper arm up, forearm and gripper pointing forward (+x), as on the real arm's description.
    d = mujoco.MjData(model)
    mujoco.mj_forward(model, d)
    np.testing.assert_allclose(d.body("upper_arm").xpos, [0.0692, -0.0183, 0.1166], atol=2e-4)
    np.testing.assert_allclose(d.body("lower_arm").xpos, [0.0972, -0.0183, 0.2292], atol=2e-4)
    np.testing.assert_allclose(d.body("wrist").xpos, [0.2321, -0.0183, 0.2344], atol=2e-4)
    # Upper arm 11.3 cm and forearm 13.5 cm between joint axes.
    assert np.linalg.norm(d.body("lower_arm").xpos - d.body("upper_arm").xpos) == pytest.approx(
        0.1159, abs=1e-3
    )


def test_control_step_is_seven_substeps_of_thirty_hz(model):
    assert 7 * model.opt.timestep == pytest.approx(1 / 30)


def test_fast_render_settings(model):
    assert model.vis.quality.offsamples == 0
    assert model.vis.quality.shadowsize == 0
    assert not model.light_castshadow.any()
    slow = build_model(SceneConfig(fast_render=False))
    assert slow.vis.quality.offsamples == 4 and slow.light_castshadow.all()


def test_jaw_pads_parallel_at_the_holding_angle(model):
    import mujoco

    d = mujoco.MjData(model)
    d.qpos[5] = GRIPPER_PARALLEL
    mujoco.mj_forward(model, d)
    fixed = d.geom("fixed_jaw").xmat.reshape(3, 3)
    moving = d.geom("moving_jaw").xmat.reshape(3, 3)
    np.testing.assert_allclose(fixed, moving, atol=1e-6)
    # The inner faces are one cube width apart along the closing axis.
    axis = fixed[:, 0]
    gap = (
        np.dot(d.geom("moving_jaw").xpos - d.geom("fixed_jaw").xpos, axis)
        - 2 * model.geom("fixed_jaw").size[0]
    )
    assert gap == pytest.approx(SceneConfig().cube_size, abs=1e-6)


def test_triangle_budget_is_small(model):
    # Primitive geometry only: no meshes, few geoms.
    assert model.nmesh == 0
    assert model.ngeom < 60


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"cube_size": 0.1}, "cube_size"),
        ({"cube_rgba": (2, 0, 0, 1)}, "cube_rgba"),
        ({"top_camera_fovy": 5}, "top_camera_fovy"),
    ],
)
def test_bad_scene_config_names_the_field(kwargs, field):
    with pytest.raises(ActlabError) as e:
        SceneConfig(**kwargs)
    assert e.value.field == field


def test_gripper_range_covers_open_and_closed_commands():
    from actlab.sim.scene import GRIPPER_CLOSED, GRIPPER_OPEN

    lo, hi = JOINT_RANGES[5]
    assert lo <= GRIPPER_CLOSED < GRIPPER_PARALLEL < GRIPPER_OPEN <= hi
    assert math.isclose(JOINT_RANGES[1][1], 1.7453293)
