"""Robustness perturbations: each a seeded change at a level; the sweep writes table, JSON and figure."""

from __future__ import annotations

import json

import numpy as np
import pytest

from actlab.errors import ActlabError
from actlab.evaluation import EnvSpec, EvalConfig
from actlab.evaluation.envs import make_eval_env
from actlab.evaluation.experts import expert_source
from actlab.evaluation.perturb import PERTURBATIONS, PerturbedEnv, parse_perturb, spec_changes
from actlab.evaluation.perturb_sweep import run_perturb
from actlab.sim import make_env


@pytest.fixture(scope="module")
def env():
    e = make_env(image_size=32, cameras=("top",))
    yield e
    e.close()


def test_parse_levels_and_refusals():
    assert parse_perturb("lighting") == ("lighting", PERTURBATIONS["lighting"].levels)
    assert parse_perturb("camera_shift=0,2.5") == ("camera_shift", (0.0, 2.5))
    with pytest.raises(ActlabError, match="perturbation"):
        parse_perturb("camera_shfit")
    with pytest.raises(ActlabError, match="out of range"):
        parse_perturb("table_color=2")
    with pytest.raises(ActlabError, match="whole numbers"):
        parse_perturb("obs_delay=1.5")
    with pytest.raises(ActlabError, match="so101_pick_place"):
        spec_changes("so101_push", "distractors", 2)


def test_camera_shift_moves_the_camera_by_the_level_and_the_next_reset_restores_it(env):
    base = env.model.cam_pos[env.model.camera("top").id].copy()
    wrapped = PerturbedEnv(env, "camera_shift", 3.0)
    obs, _ = wrapped.reset(seed=4)
    moved = env.model.cam_pos[env.model.camera("top").id].copy()
    assert np.linalg.norm(moved[:2] - base[:2]) == pytest.approx(0.03)
    assert moved[2] == base[2]
    clean, _ = env.reset(seed=4)
    assert not np.array_equal(obs["observation.images.top"], clean["observation.images.top"])
    np.testing.assert_array_equal(env.model.cam_pos[env.model.camera("top").id], base)
    wrapped.reset(seed=4)  # the same seed: the same direction
    np.testing.assert_allclose(env.model.cam_pos[env.model.camera("top").id], moved)


def test_lighting_darkens_the_image_and_colours_change_the_materials(env):
    clean, _ = env.reset(seed=1)
    dark, _ = PerturbedEnv(env, "lighting", 0.3).reset(seed=1)
    assert dark["observation.images.top"].mean() < 0.6 * clean["observation.images.top"].mean()
    red = env.reset(seed=1) and env.material_rgb("cube")
    PerturbedEnv(env, "object_color", 0.16).reset(seed=1)
    assert not np.allclose(env.material_rgb("cube"), red)


def test_obs_delay_shows_an_older_observation_and_action_noise_is_seeded(env):
    delayed = PerturbedEnv(env, "obs_delay", 2.0)
    first, _ = delayed.reset(seed=2)
    states = [env.joint_positions()]
    seen = []
    for k in range(4):
        target = first["observation.state"] + np.array([10.0 * (k + 1), 0, 0, 0, 0, 0])
        obs, *_ = delayed.step(target)
        states.append(env.joint_positions())
        seen.append(obs["observation.state"])
    np.testing.assert_array_equal(seen[0], states[0])  # 2 steps ago: before the episode, the first one
    np.testing.assert_array_equal(seen[3], states[2])

    def noisy_run() -> np.ndarray:
        w = PerturbedEnv(env, "action_noise", 2.0)
        obs, _ = w.reset(seed=3)
        for _ in range(3):
            obs, *_ = w.step(obs["observation.state"])
        return obs["observation.state"]

    a, b = noisy_run(), noisy_run()
    np.testing.assert_array_equal(a, b)
    env.reset(seed=3)
    still = env.joint_positions()
    assert np.abs(a - still).max() > 0.05  # the noise moved the arm


def test_distractors_are_the_clutter_scene_with_the_same_cube_and_bowl():
    spec = EnvSpec("so101_pick_place", image_size=32, cameras=())
    clutter = make_eval_env(EnvSpec(**spec_changes("so101_pick_place", "distractors", 2), cameras=()))
    plain = make_eval_env(spec)
    try:
        _, a = plain.reset(seed=9)
        _, b = clutter.reset(seed=9)
        np.testing.assert_allclose(a["cube_pos"], b["cube_pos"])
        np.testing.assert_allclose(a["bowl_pos"], b["bowl_pos"])
        assert len(clutter.distractor_positions()) == 2
    finally:
        plain.close()
        clutter.close()


@pytest.mark.timeout(300)
def test_sweep_writes_json_table_and_figure(tmp_path):
    spec = EnvSpec("so101_pick_place", image_size=32, cameras=("top",))
    cfg = EvalConfig(episodes=1, seed=100_000, workers=1, batch_envs=1)
    out = tmp_path / "robust"
    report = run_perturb(
        [expert_source()], spec, cfg, [("lighting", (0.5,)), ("action_noise", (1.0,))], out_dir=out
    )
    cells = report["cells"]
    assert [(c["perturbation"], c["level"]) for c in cells] == [
        ("lighting", 1.0),
        ("lighting", 0.5),
        ("action_noise", 0.0),
        ("action_noise", 1.0),
    ]
    assert cells[0]["successes"] == cells[2]["successes"]  # the clean evaluation, shared
    assert all(c["episodes"] == 1 and 0 <= c["ci_low"] <= c["success_rate"] <= c["ci_high"] for c in cells)
    assert json.loads((out / "perturb.json").read_text())["cells"] == cells
    assert "| lighting | 0.5 x brightness |" in (out / "perturb.md").read_text()
    assert (out / "perturb.png").read_bytes()[:4] == b"\x89PNG"
