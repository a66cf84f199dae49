import numpy as np
import pytest

from actlab.errors import ActlabError
from actlab.sim import HOME_QPOS, JOINT_NAMES, make_env, task_config


def _obs_equal(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_reset_is_deterministic_per_seed(env32):
    obs_a, info_a = env32.reset(seed=7)
    obs_b, info_b = env32.reset(seed=7)
    assert _obs_equal(obs_a, obs_b)
    np.testing.assert_array_equal(info_a["cube_pos"], info_b["cube_pos"])
    obs_c, info_c = env32.reset(seed=8)
    assert not np.array_equal(info_a["cube_pos"], info_c["cube_pos"])
    assert not np.array_equal(obs_a["observation.images.top"], obs_c["observation.images.top"])


def test_reset_is_deterministic_across_env_instances_and_steps(env32):
    other = make_env(image_size=32, terminate_on_success=False)
    try:
        action = np.asarray(HOME_QPOS, dtype=np.float32) * 0  # drive every joint towards 0 degrees
        for env in (env32, other):
            env.reset(seed=3)
        for _ in range(5):
            a = env32.step(action)[0]
            b = other.step(action)[0]
            assert _obs_equal(a, b)
    finally:
        other.close()


def test_observation_matches_spaces_and_units(env32):
    obs, info = env32.reset(seed=0)
    assert env32.observation_space.contains(obs)
    assert obs["observation.images.top"].shape == (32, 32, 3)
    assert obs["observation.images.wrist"].dtype == np.uint8
    # Degrees, LeRobot order: the start pose in radians converts exactly.
    np.testing.assert_allclose(obs["observation.state"], np.rad2deg(HOME_QPOS), atol=1e-3)
    assert env32.action_space.shape == (len(JOINT_NAMES),)
    assert not (
        info["grasped"] or info["lifted"] or info["released"] or info["in_goal"] or info["is_success"]
    )
    assert info["cube_height"] == pytest.approx(0.0, abs=1e-3)


def test_cube_placed_within_configured_ranges(blind_env):
    cfg = blind_env.config
    for seed in range(20):
        _, info = blind_env.reset(seed=seed)
        x, y, _ = info["cube_pos"]
        assert cfg.cube_x_range[0] <= x <= cfg.cube_x_range[1]
        assert cfg.cube_y_range[0] <= y <= cfg.cube_y_range[1]


def test_bad_actions_raise_clear_errors(blind_env):
    blind_env.reset(seed=0)
    with pytest.raises(ActlabError, match="six target joint positions"):
        blind_env.step(np.zeros(5))
    with pytest.raises(ActlabError, match="NaN"):
        blind_env.step(np.full(6, np.nan))


def test_out_of_range_actions_are_clipped_to_joint_limits(blind_env):
    blind_env.reset(seed=0)
    for _ in range(30):
        obs = blind_env.step(np.full(6, 1000.0, dtype=np.float32))[0]
    lo, hi = blind_env.joint_low_deg, blind_env.joint_high_deg
    assert np.all(obs["observation.state"] <= hi + 1.0) and np.all(obs["observation.state"] >= lo - 1.0)


def test_truncation_at_max_steps():
    env = make_env(cameras=(), max_steps=4)
    try:
        obs, _ = env.reset(seed=0)
        flags = [env.step(obs["observation.state"])[3] for _ in range(4)]
        assert flags == [False, False, False, True]
        assert env.max_steps == 4 and env.fps == 30
    finally:
        env.close()


def test_get_state_set_state_replays_exactly(env32):
    env32.reset(seed=5)
    rng = np.random.default_rng(0)
    for _ in range(3):
        env32.step(env32.joint_positions() + rng.normal(0, 5, 6).astype(np.float32))
    state = env32.get_state()
    actions = [env32.joint_positions() + rng.normal(0, 5, 6).astype(np.float32) for _ in range(4)]
    first = [env32.step(a) for a in actions]
    env32.set_state(state)
    second = [env32.step(a) for a in actions]
    for (oa, _, _, _, ia), (ob, _, _, _, ib) in zip(first, second):
        assert _obs_equal(oa, ob)
        assert ia["steps"] == ib["steps"]


def test_forecast_grasp_positions_matches_stepping_and_leaves_the_episode_alone(env32):
    obs, _ = env32.reset(seed=2)
    chunk = np.stack([obs["observation.state"] + [2.0 * k, -k, k, 0, 0, 0] for k in range(1, 6)])
    before = env32.get_state()
    predicted = env32.forecast_grasp_positions(chunk)
    after = env32.get_state()
    np.testing.assert_array_equal(before.physics, after.physics)
    assert before.steps == after.steps
    actual = []
    for a in chunk:
        env32.step(a)
        actual.append(env32.grasp_position())
    np.testing.assert_allclose(predicted, np.stack(actual), atol=1e-9)


def test_project_lands_on_the_cube_in_the_top_image():
    env = make_env(image_size=96, cameras=("top",))
    try:
        for seed in (0, 1, 2):
            obs, info = env.reset(seed=seed)
            u, v = env.project(info["cube_pos"][None], "top")[0]
            img = obs["observation.images.top"].astype(int)
            red = (img[..., 0] > 150) & (img[..., 1] < 70) & (img[..., 2] < 70)
            rows, cols = np.nonzero(red)
            assert len(rows) >= 16  # the cube is several pixels wide at 96 px (about 7x7)
            assert abs(cols.mean() + 0.5 - u) < 1.5 and abs(rows.mean() + 0.5 - v) < 1.5
    finally:
        env.close()


def test_wrist_camera_sees_the_cube_from_the_start_pose():
    env = make_env(image_size=64, cameras=("wrist",))
    try:
        corners = [(0.16, -0.08), (0.16, 0.08), (0.24, -0.08), (0.24, 0.08), (0.2, 0.0)]
        for xy in corners:
            obs, _ = env.reset(seed=0, options={"cube_xy": xy})
            img = obs["observation.images.wrist"].astype(int)
            red = (img[..., 0] > 150) & (img[..., 1] < 70) & (img[..., 2] < 70)
            assert red.sum() >= 9, xy
    finally:
        env.close()


def test_render_returns_requested_camera_and_size(env32):
    env32.reset(seed=0)
    frame = env32.render("wrist", size=48)
    assert frame.shape == (48, 48, 3) and frame.dtype == np.uint8
    assert env32.render().shape == (32, 32, 3)
    with pytest.raises(ActlabError):
        env32.render("side")


def test_randomization_options_are_seeded():
    env = make_env(
        image_size=32, randomize_colors=True, randomize_lighting=True, camera_jitter=0.01, bowl_jitter=0.02
    )
    try:
        a, ia = env.reset(seed=11)
        b, _ = env.reset(seed=11)
        c, ic = env.reset(seed=12)
        assert _obs_equal(a, b)
        assert not np.array_equal(ia["bowl_pos"], ic["bowl_pos"])
        assert not np.array_equal(a["observation.images.top"], c["observation.images.top"])
    finally:
        env.close()


def test_unknown_options_get_did_you_mean():
    with pytest.raises(ActlabError, match="did you mean 'image_size'"):
        task_config(imag_size=64)
    with pytest.raises(ActlabError, match="unknown sim task"):
        make_env("so101_pick_placee")
    with pytest.raises(ActlabError):
        task_config(cameras=("top", "side"))


def test_gymnasium_env_checker_passes():
    import warnings

    from gymnasium.utils.env_checker import check_env

    env = make_env(image_size=16)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # advice about normalized action spaces, not errors
            check_env(env)
    finally:
        env.close()
