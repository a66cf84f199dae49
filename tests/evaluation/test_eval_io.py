"""Env -> policy observation conversion, key matching, configs and CLI input errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from actlab.cli import main
from actlab.errors import ActlabError
from actlab.evaluation import EnvSpec, EvalConfig
from actlab.evaluation.policy_io import (
    ObsAdapter,
    PolicyInputs,
    actions_to_numpy,
    inputs_from_features,
    match_keys,
)


def test_obs_adapter_stacks_permutes_and_resizes():
    inputs = PolicyInputs(("observation.state",), {"observation.images.top": (16, 24)})
    obs = [
        {
            "observation.state": np.arange(6, dtype=np.float64),
            "observation.images.top": np.full((32, 48, 3), v, np.uint8),
        }
        for v in (0, 255)
    ]
    batch = ObsAdapter(inputs)(obs)
    img = batch["observation.images.top"]
    assert img.shape == (2, 3, 16, 24) and img.dtype == torch.uint8
    assert img[0].max() == 0 and img[1].min() == 255  # constant images stay constant through the resize
    assert batch["observation.state"].dtype == torch.float32 and batch["observation.state"].shape == (2, 6)


def test_hwc_channel_layout_is_preserved():
    image = np.zeros((4, 4, 3), np.uint8)
    image[..., 2] = 200  # blue channel
    batch = ObsAdapter(None)([{"observation.images.top": image, "observation.state": np.zeros(2)}])
    assert (
        batch["observation.images.top"][0, 2].min() == 200
        and batch["observation.images.top"][0, :2].max() == 0
    )


def test_match_keys_renames_a_single_camera_and_refuses_missing_ones():
    inputs = PolicyInputs(("observation.state",), {"observation.image": (96, 96)})
    mapping = match_keys(["observation.images.top", "observation.state"], inputs)
    assert mapping == {
        "observation.state": "observation.state",
        "observation.image": "observation.images.top",
    }
    two = PolicyInputs(
        ("observation.state",), {"observation.images.top": (8, 8), "observation.images.wrist": (8, 8)}
    )
    with pytest.raises(ActlabError, match="does not provide") as e:
        match_keys(["observation.images.top", "observation.state"], two)
    assert "observation.images.wrist" in str(e.value)


def test_inputs_from_lerobot_features():
    feats = {
        "observation.state": {"dtype": "float32", "shape": [6]},
        "observation.images.top": {
            "dtype": "video",
            "shape": [80, 96, 3],
            "names": ["height", "width", "channels"],
        },
        "action": {"dtype": "float32", "shape": [6]},
        "timestamp": {"dtype": "float32", "shape": [1]},
    }
    inputs = inputs_from_features(feats)
    assert inputs.state_keys == ("observation.state",)
    assert inputs.image_hw == {"observation.images.top": (80, 96)}


def test_actions_to_numpy_checks_the_batch():
    assert actions_to_numpy(torch.ones(6), 1).shape == (1, 6)
    with pytest.raises(ActlabError, match="batch_envs=1"):
        actions_to_numpy(torch.ones(1, 6), 4)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"episodes": 0},
        {"workers": 0},
        {"batch_envs": 0},
        {"videos": 5, "episodes": 2},
        {"threads_per_worker": 0},
    ],
)
def test_eval_config_rejects_bad_values(kwargs):
    with pytest.raises(ActlabError):
        EvalConfig(**kwargs)


def test_env_spec_rejects_bad_values():
    with pytest.raises(ActlabError, match="max_steps"):
        EnvSpec(max_steps=0)


def test_cli_input_errors(tmp_path, capsys):
    assert main(["eval"]) == 2
    assert "PATH" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["eval", "--expert", "--task", "gym_pusht/PushT-v0"]) == 2
    assert "scripted expert" in capsys.readouterr().err


def test_eval_bench_modes_differ_only_in_processes_and_batching():
    from actlab.evaluation.bench import bench_modes

    modes = bench_modes(episodes=8, seed=3, workers=2, batch_envs=4)
    layout = {name: (c.workers, c.batch_envs, c.threads_per_worker) for name, c in modes.items()}
    assert layout == {"serial": (1, 1, 1), "workers2": (2, 1, 1), "batched4": (1, 4, 1)}
    assert {(c.episodes, c.seed) for c in modes.values()} == {(8, 3)}
    assert list(bench_modes(8, 3, 2, 4, batched=False)) == ["serial", "workers2"]


@pytest.mark.parametrize(
    "whiskers, task, match",
    [
        ({"every": 0}, "so101_pick_place", "every"),
        ({"episode": -1}, "so101_pick_place", "episode"),
        ({"evry": 2}, "so101_pick_place", "unknown whiskers option"),
        ({"every": 1}, "gym_pusht/PushT-v0", "forward-simulate"),
    ],
)
def test_bad_whiskers_options_fail_before_the_evaluation_runs(tmp_path, whiskers, task, match):
    # The whiskers video is made after every episode of every checkpoint: a late error wasted them all.
    from evalpolicies import HoldPolicy

    from actlab.evaluation import run_eval

    policy = HoldPolicy(np.zeros(6))
    spec = EnvSpec(task, cameras=(), max_steps=2) if "/" not in task else EnvSpec(task, max_steps=2)
    with pytest.raises(ActlabError, match=match):
        run_eval([policy], spec, EvalConfig(episodes=1, workers=1), tmp_path / "out", whiskers=whiskers)
    assert policy.calls == 0 and not (tmp_path / "out").exists()


def test_cli_refuses_whiskers_of_the_scripted_expert(tmp_path, capsys):
    assert main(["eval", "--expert", "--whiskers", "--out", str(tmp_path / "o")]) == 2
    assert "predicts action chunks" in capsys.readouterr().err


def test_bench_eval_cli_times_the_modes_and_checks_their_outcomes_agree(capsys):
    # The scripted expert cannot be batched: serial and "workers2" only ("workers1" is serial's own
    # configuration, not timed twice: the fourteenth fault run's bn15-bn17).
    argv = ["bench", "eval", "expert", "--episodes", "2", "--max-steps", "20", "--workers", "2", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["benchmark"] == "eval" and result["config"]["episodes"] == 2
    assert set(result["ratios"]) == {"workers2_vs_serial"} and result["ratios"]["workers2_vs_serial"] > 0
    assert result["metrics"]["serial_env_steps_per_s"] > 0
    assert any(n.startswith("outcomes and episode lengths identical across modes") for n in result["notes"])
    with pytest.raises(SystemExit) as e:  # a count of 0: the parser's usage error, naming the option
        main(["bench", "eval", "expert", "--episodes", "0"])
    assert e.value.code == 2 and "--episodes: expected a number >= 1" in capsys.readouterr().err


def test_bench_eval_tells_rounding_from_a_real_difference():
    # Batched inference changed a never_picked_up episode's max lift from 13.3 to 17.2 mm (same outcome,
    # same 60 steps) and the bench printed "OUTCOMES DIFFER" with a dump of every tuple.
    from actlab.evaluation.bench import compare_outcomes

    serial = [("never_picked_up", 60, 0.0002), ("never_picked_up", 60, 0.0133)]
    batched = [("never_picked_up", 60, 0.0002), ("never_picked_up", 60, 0.0172)]
    (note,) = compare_outcomes({"serial": serial, "workers2": serial, "batched4": batched})
    assert note.startswith("outcomes and episode lengths identical across modes (2 episodes)")
    assert "up to 3.9 mm" in note and "DIFFER" not in note
    (note,) = compare_outcomes({"serial": serial, "batched4": [serial[0], ("success", 142, 0.08)]})
    assert note == (
        "OUTCOMES DIFFER across modes in 1 episode(s): episode 1: serial never_picked_up in 60 steps, "
        "batched4 success in 142 steps"
    )
