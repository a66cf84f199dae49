"""Faults of the third planted-fault run (docs/faults.md), planted for real: real datasets,
real files, the real parser and commands.

- every command that adds files to a directory follows the output-marker rule (``data view``): a
  directory holding a user's files, another command's output, or the dataset itself is refused before a
  byte is written;
- every numeric option of every command refuses nan, inf, -1 and 10**12 at parse time, naming the option,
  so nothing runs and nothing is written;
- a training resume whose dataset was replaced by another recording under the same path is refused,
  naming what changed.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from actlab.cli import build_parser, main
from actlab.utils.io import OUTPUT_MARKER, read_output_marker


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------- output marker


@pytest.mark.timeout(120)
def test_data_view_never_writes_over_a_users_files(tiny_dataset, tmp_path, capsys):
    """LOSS before: episode_000.html and report.md of the user's were overwritten by data view."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "episode_000.html").write_text("my page")
    (out / "report.md").write_text("my notes")
    before = _tree(out)
    assert main(["data", "view", str(tiny_dataset), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and "episode_000.html" in err and "choose another --out" in err
    assert _tree(out) == before


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", [".", "meta", "videos/new"])
def test_data_view_refuses_the_dataset_itself(tiny_dataset, tmp_path, capsys, where):
    ds = tmp_path / "ds"
    shutil.copytree(tiny_dataset, ds)
    before = _tree(ds)
    assert main(["data", "view", str(ds), "--out", str(ds / where)]) == 2
    err = capsys.readouterr().err
    assert "input" in err and str(ds) in err
    assert _tree(ds) == before and not (ds / "videos/new").exists()


@pytest.mark.timeout(120)
def test_data_view_adds_pages_to_its_own_directory_and_refuses_another_commands(
    tiny_dataset, tmp_path, capsys
):
    out = tmp_path / "view"
    assert main(["data", "view", str(tiny_dataset), "--episode", "0", "--out", str(out)]) == 0
    assert read_output_marker(out)["kind"] == "actlab data view"
    assert main(["data", "view", str(tiny_dataset), "--episode", "1", "--out", str(out)]) == 0
    assert (out / "episode_000.html").is_file() and (out / "episode_001.html").is_file()
    # another command's output (a marker of another kind) is not data view's to write into
    other = tmp_path / "other"
    other.mkdir()
    (other / OUTPUT_MARKER).write_text('{"kind": "actlab eval", "token": "x"}')
    capsys.readouterr()
    assert main(["data", "view", str(tiny_dataset), "--out", str(other)]) == 2
    assert "actlab eval" in capsys.readouterr().err
    assert sorted(p.name for p in other.iterdir()) == [OUTPUT_MARKER]


# ------------------------------------------------------------------------------------ numeric options


def _numeric_options() -> list[tuple[tuple[str, ...], str, str]]:
    """(command, option, int/float/other) of every numeric option of every command, from the parser."""
    found = []

    def walk(parser: argparse.ArgumentParser, command: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*command, name))
            elif action.option_strings and action.type is not None:
                name = getattr(action.type, "__name__", "")
                if name in ("int", "float", "parse") or name.endswith("_timeout"):  # parse: a bounded int
                    found.append((command, action.option_strings[-1], name))

    walk(build_parser(), ())
    return found


NUMERIC = _numeric_options()


def test_the_walk_finds_the_numeric_options_of_every_command_group():
    groups = {c[0] for c, _, _ in NUMERIC}
    assert {"data", "sim", "eval", "policy", "bench", "demo", "rl"} <= groups, groups
    assert len(NUMERIC) > 60


PARSER = build_parser()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "command, flag, kind", NUMERIC, ids=lambda x: x if isinstance(x, str) else " ".join(x)
)
def test_every_numeric_option_refuses_nan_inf_negative_and_huge_before_any_work(
    command, flag, kind, tmp_path, monkeypatch, capsys
):
    """nan, inf, -2 (below every "-1 = automatic" sentinel) and 10**12 are usage errors (exit 2) naming
    the option, with no traceback and no file written: the parser refuses them before the command runs
    (``sim record --episodes 1000000000000`` started a recording before)."""
    monkeypatch.chdir(tmp_path)
    for bad in ("nan", "inf", "-inf", "-2", "1e12", "1000000000000"):
        with pytest.raises(SystemExit) as e:
            PARSER.parse_args([*command, f"{flag}={bad}"])
        assert e.value.code == 2, bad
        err = capsys.readouterr().err
        assert f"argument {flag}" in err and "Traceback" not in err, (bad, err)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------ --set values


def _configs() -> dict[str, object]:
    """The configs a --set reaches: train / demo / profile / bench train (a TrainConfig), policy bench and
    policy info (a bare policy config), rl train and rl reward-model."""
    from actlab.policies.registry import config_classes
    from actlab.rl.config import PRESETS as RL_PRESETS
    from actlab.rl.reward_model import RewardModelConfig
    from actlab.training.presets import get_preset

    found: dict[str, object] = {
        "train so101_sim_cpu": get_preset("so101_sim_cpu"),
        "train tiny": get_preset("tiny"),
    }
    found |= {f"policy {name}": cls() for name, cls in config_classes().items()}
    found |= {f"rl {name}": RL_PRESETS.get(name) for name in RL_PRESETS.names()}
    found["rl reward-model"] = RewardModelConfig()
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(_configs()))
def test_every_numeric_set_value_refuses_nan_inf_negative_and_huge(name):
    """Before: policy.dim_model=1e12, steps=1e12, batch_size=1e12, kl_weight=inf and seed=-1 were accepted
    and failed (or never ended) once the work had started."""
    from actlab.errors import ActlabError
    from actlab.policies.registry import apply_config_overrides
    from actlab.utils.config import apply_overrides, flatten

    cfg = _configs()[name]
    apply = apply_config_overrides if name.startswith("policy ") else apply_overrides
    keys = [k for k, v in flatten(cfg).items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    assert len(keys) >= 5, keys
    accepted = []
    for key in keys:
        for bad in ("nan", "inf", "-1", "1e12"):
            try:
                apply(cfg, [f"{key}={bad}"])
                accepted.append(f"{key}={bad}")
            except ActlabError as e:
                assert key.split(".")[-1] in str(e), (key, str(e))
    assert accepted == []


@pytest.mark.timeout(120)
def test_a_huge_set_value_is_refused_before_the_run_directory_is_made(tiny_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    for bad in ("policy.dim_model=1e12", "batch_size=1e12", "policy.kl_weight=inf", "seed=-1"):
        args = ["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(out), "--set", bad]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert bad.split("=")[0].split(".")[-1] in err and "Traceback" not in err
        assert not out.exists()


# ------------------------------------------------------------------------- the plugin's simulated robot

# The defaults of the plugin's ActlabSO101SimConfig (integrations/; LeRobot is not installed here).
SIM_ROBOT = {"image_size": 96, "camera_names": ["top", "wrist"], "fps": 30, "max_steps": 300,
             "seed": 100_000, "hold_s": 1.0, "max_relative_target": None, "task": "so101_pick_place",
             "units": "degrees"}  # fmt: skip


@pytest.mark.timeout(30)
@pytest.mark.parametrize("field", ["image_size", "fps", "max_steps", "seed", "hold_s", "max_relative_target"])
def test_the_simulated_robot_refuses_each_field_out_of_range(field):
    """--robot.fps=0 was a ZeroDivisionError in the control loop, a negative seed numpy's traceback."""
    from actlab.errors import ActlabError
    from actlab.lerobot.runtime import check_sim_robot_config

    check_sim_robot_config(SIM_ROBOT)
    for bad in (0, -1, float("nan"), float("inf"), 10**12, True):
        if field in ("seed", "hold_s") and bad == 0:
            continue  # seed 0 and no hold are valid
        with pytest.raises(ActlabError) as e:
            check_sim_robot_config({**SIM_ROBOT, field: bad})
        assert e.value.field == f"--robot.{field}"
    for cameras in ([], ["side"], ["top", "top"]):
        with pytest.raises(ActlabError, match="camera_names"):
            check_sim_robot_config({**SIM_ROBOT, "camera_names": cameras})
    check_sim_robot_config({**SIM_ROBOT, "task": "so101_stack", "units": "so101_follower"})
    for key, bad in (("task", "so101_pick_plce"), ("units", "radians")):
        with pytest.raises(ActlabError) as e:
            check_sim_robot_config({**SIM_ROBOT, key: bad})
        assert e.value.field == f"--robot.{key}" and bad in str(e.value)


# ------------------------------------------------------------------------------ resume: dataset identity


@pytest.mark.timeout(300)
def test_a_resume_on_a_dataset_replaced_by_another_recording_is_refused(make_dataset, tmp_path, capsys):
    """SILENT before: the directory replaced by another recording under the same path was decoded into a
    new frame cache and trained on, exit 0. A copy of the same dataset elsewhere resumes."""
    ds = make_dataset(tmp_path / "a", episodes=2, length=20)
    out = tmp_path / "run"
    base = ["train", "--preset", "tiny", "--out", str(out), "--set", "log.progress=false"]
    base += ["--set", "log.plot=false"]  # (the plot is not under test here: it costs a savefig a run)
    assert main([*base, "--dataset", str(ds), "--set", "steps=2", "--set", "checkpoint.every=2"]) == 0
    # a copy elsewhere (new file times): the same dataset, the resume goes on
    copy = tmp_path / "copy"
    shutil.copytree(ds, copy)
    assert main([*base, "--dataset", str(copy), "--resume", "--set", "steps=3"]) == 0
    # the original path now holds another recording (other motion, same shape)
    shutil.rmtree(ds)
    make_dataset(tmp_path / "b", episodes=2, length=20, seed=7).rename(ds)
    capsys.readouterr()
    before = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert main([*base, "--dataset", str(ds), "--resume", "--set", "steps=4"]) == 2
    err = capsys.readouterr().err
    assert "not the one the run was trained on" in err and "meta_sha256" in err and str(ds) in err
    assert "a copy of it is fine" in err and "Traceback" not in err
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == before
    # an episode fewer is named by its count
    shutil.rmtree(ds)
    make_dataset(tmp_path / "c", episodes=1, length=20).rename(ds)
    assert main([*base, "--dataset", str(ds), "--resume", "--set", "steps=4"]) == 2
    assert "episodes: 2 -> 1" in capsys.readouterr().err


# --------------------------------------------------------------------- settings that cannot be honoured


@pytest.mark.timeout(120)
def test_a_horizon_with_sync_execution_is_refused_before_any_episode(tmp_path, capsys):
    """SILENT before: sync executes the policy's n_action_steps; --horizon was ignored without a word."""
    out = tmp_path / "eval"
    argv = ["eval", "expert", "--episodes", "1", "--execution", "sync", "--horizon", "5", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "horizon" in err and "--execution async --latency 0 --horizon N" in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.timeout(60)
def test_a_validation_split_that_cannot_be_made_is_said(tiny_dataset):
    """SILENT before: data.val_fraction > 0 on a one-episode selection trained without validation."""
    from actlab.datasets import open_dataset
    from actlab.training.config import DataConfig
    from actlab.training.data import split_episodes

    eps = open_dataset(tiny_dataset).episodes
    with pytest.warns(UserWarning, match=r"val_fraction=0.25 asks for validation episodes.*1 non-empty"):
        split = split_episodes(eps, DataConfig(val_fraction=0.25, episodes=(1,)), 0, where="ds")
    assert split.val_episodes == ()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # val_fraction 0 means it: nothing said
        split_episodes(eps, DataConfig(val_fraction=0.0, episodes=(1,)), 0)
        assert split_episodes(eps, DataConfig(val_fraction=0.25), 0).val_episodes != ()


# ----------------------------------------------------------------------- errors name the cause they saw


@pytest.mark.timeout(120)
def test_a_nan_action_names_its_joints_not_a_guessed_cause():
    """UNCLEAR before: the sim blamed "normalization stats with zero std" for NaN actions from anywhere."""
    pytest.importorskip("mujoco")
    import numpy as np

    from actlab.errors import ActlabError
    from actlab.sim import make_env

    env = make_env(image_size=16, cameras=("top",))
    try:
        env.reset(seed=0)
        action = np.zeros(6)
        action[2] = np.nan
        with pytest.raises(ActlabError) as e:
            env.step(action)
        text = e.value.render()
        assert "elbow" in text and "zero std" not in text and "produced the action" in text
    finally:
        env.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["meta/info.json", "stats.json", "meta/new.json"])
def test_data_stats_out_never_writes_into_the_dataset(tiny_dataset, tmp_path, capsys, where):
    """--out DATASET/meta/info.json replaced the dataset's own info.json with the stats."""
    ds = tmp_path / "ds"
    shutil.copytree(tiny_dataset, ds)
    before = _tree(ds)
    assert main(["data", "stats", str(ds), "--out", str(ds / where)]) == 2
    err = capsys.readouterr().err
    assert "inside the dataset" in err and "--write-meta" in err
    assert _tree(ds) == before
