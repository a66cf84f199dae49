"""Faults of our sixteenth planted-fault run (docs/faults.md "Sixteenth fault run"), planted for real: the
real parser and commands, real RL runs and their checkpoints, a real reward model, real sim envs, a real
tmpfs for the demo's disk check.

Each test names the probes of docs/faults_round16_probes.md it plants again and what happened before its
fix.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from actlab.cli import main
from actlab.errors import ActlabError

REPO = Path(__file__).resolve().parents[2]
LEROBOT_PYTHON = os.environ.get("ACTLAB_LEROBOT_PYTHON", "/work/lerobot-venv/bin/python")


def _edit_json(path: Path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


@pytest.fixture(scope="module")
def rl_run(tmp_path_factory) -> Path:
    """A smoke RL run of ~240 env steps (one checkpoint, no updates: seconds)."""
    out = tmp_path_factory.mktemp("rl") / "rl"
    args = ["rl", "train", "--preset", "smoke", "--set", "total_env_steps=200", "--out", str(out)]
    assert main(args) == 0
    return out


# ------------------------------------------------------------------ a float setting of another type
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("probe", "argv"),
    [
        ("t01", ["train", "--preset", "tiny", "--set", "optim.lr=null"]),
        ("r30", ["rl", "train", "--preset", "smoke", "--set", "sac.gamma=null"]),
        ("r31", ["rl", "train", "--preset", "smoke", "--set", "sac.gamma=[1]"]),
    ],
)
def test_a_float_setting_of_null_or_a_list_is_named(tmp_path, capsys, probe, argv):
    """TRACEBACK before (t01, t02, r30, r31, rm02: `--set KEY=null` or a list for any float key of any
    command): float()'s TypeError at the end of a traceback."""
    assert main([*argv, "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "cannot read the value of --set" in err and "expected: a number" in err and "Traceback" not in err


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("probe", "value"), [("r21", None), ("r28", "x")])
def test_a_float_of_another_type_in_a_run_config_names_its_field(tmp_path, rl_run, capsys, probe, value):
    """TRACEBACK before (r21: an RL run's config.json sac.gamma null, float()'s TypeError); UNCLEAR before
    (r28: gamma "x" was named as the field "could not convert string to float"). t03/t04 (a bundle's
    config.json dropout null: "invalid policy config: float() argument must be ...", no field) are the
    same reader."""
    run = shutil.copytree(rl_run, tmp_path / "rl")
    _edit_json(run / "config.json", lambda d: d["sac"].update(gamma=value))
    assert main(["rl", "train", "--out", str(run), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "field:    sac.gamma" in err and "expected a number" in err and "Traceback" not in err


# ------------------------------------------------------------------ an RL checkpoint's state.json edited
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("probe", "field", "value"),
    [
        ("r01", "episodes", "x"),
        ("r02", "updates", None),
        ("r03", "owed", "NaN"),
        ("r04", "evals", 5),
        ("r05", "policy_bound", "x"),
        ("r06", "rounds", [1]),
        ("r07", "owed", -1e300),
        ("r08", "evals", [{"a": 1}]),
        ("r09", "episodes", 1.7),
        ("r10", "sha256", "x"),
        ("rr08", "guard", {"base_rate": "x"}),
    ],
)
def test_an_edited_rl_checkpoint_state_is_refused_as_damaged(tmp_path, rl_run, capsys, probe, field, value):
    """TRACEBACK before (r01, r02, r04, r05, r06, r08, rr08: int()/float()/list()/GuardState's errors);
    SILENT before (r03, r07: owed NaN or -1e300 resumed and never ran an update again, exit 0; r09: 1.7
    episodes truncated to 1; r10: the digests "x" turned the integrity check off)."""
    run = shutil.copytree(rl_run, tmp_path / "rl")
    (state,) = run.glob("checkpoints/step_*/training_state/state.json")
    _edit_json(state, lambda d: d.update({field: value}))
    assert main(["rl", "train", "--out", str(run), "--resume", "--set", "total_env_steps=400"]) == 2
    err = capsys.readouterr().err
    assert "is damaged: its state.json holds a value no run writes" in err and f"field:    {field}" in err


@pytest.mark.timeout(60)
def test_rl_report_refuses_a_policy_bound_that_is_not_a_number(tmp_path, rl_run, capsys):
    """UNCLEAR before (rr09: a residual run's policy_bound NaN: "the action contains NaN ... check that
    producer's output"); planted here on the smoke run, whose report reads the same state.json."""
    run = shutil.copytree(rl_run, tmp_path / "rl")
    (state,) = run.glob("checkpoints/step_*/training_state/state.json")
    _edit_json(state, lambda d: d.update(policy_bound=float("nan")))
    assert main(["rl", "report", str(run), "--episodes", "1", "--out", str(tmp_path / "rep")]) == 2
    assert "field:    policy_bound" in capsys.readouterr().err


# ------------------------------------------------------------------ a reward model's metadata edited
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("probe", "key", "value"),
    [
        ("rw01", "threshold", float("nan")),
        ("rw02", "threshold", 5),
        ("rw04", "threshold", -1),
        ("rw03", "hidden", 63.5),
    ],
)
def test_a_reward_model_with_an_edited_threshold_is_refused(tmp_path, probe, key, value):
    """SILENT before (rw01 NaN / rw02 5: no step ever rewarded; rw04 -1: every step rewarded, a return of
    40 over 40 steps of a base that never picked the cube up; all exit 0)."""
    from safetensors.torch import save_file

    from actlab.rl.reward_model import META_FILE, MODEL_FILE, SuccessClassifier, load_reward_model

    save_file(SuccessClassifier(8, 4).state_dict(), str(tmp_path / MODEL_FILE))
    meta = {"input_dim": 8, "hidden": 4, "threshold": 0.6, key: value}
    (tmp_path / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(ActlabError) as e:
        load_reward_model(tmp_path)
    assert e.value.field == key and "never writes" in e.value.problem


# ------------------------------------------------------------------ --out holding what is not a run
@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["rl", "train"])
def test_a_foreign_metrics_file_in_out_is_never_rewritten(tmp_path, tiny_dataset, capsys, command):
    """LOSS before (o07, o03: `rl train --out DIR` of a directory holding only a metrics.jsonl of the
    user's; o09: the same for `train`): taken for a run that stopped early, the file's lines rewritten
    (the user's first line dropped)."""
    out = tmp_path / "out"
    out.mkdir()
    mine = '{"step": 1, "loss": 2}\n{"my": "data"}\n'
    (out / "metrics.jsonl").write_text(mine)
    if command == "rl":
        argv = ["rl", "train", "--preset", "smoke", "--set", "total_env_steps=100"]
    else:
        argv = ["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--set", "steps=1"]
    assert main([*argv, "--out", str(out)]) == 2
    assert "not empty and is not an actlab" in capsys.readouterr().err
    assert (out / "metrics.jsonl").read_text() == mine


@pytest.mark.timeout(60)
def test_rl_train_into_a_training_run_says_what_it_is(tmp_path, run_dir, capsys):
    """UNCLEAR before (o06: `rl train --out` an actlab training run: "already holds an RL run", fix "pass
    --resume"; o08: `train --out` an RL run, "already holds a training run")."""
    run = shutil.copytree(run_dir, tmp_path / "run")
    assert main(["rl", "train", "--preset", "smoke", "--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert "holds checkpoints, but it is not an RL run" in err and "pass --resume" not in err


# ------------------------------------------------------------------ the LeRobot env's settings
@pytest.mark.timeout(60)
def test_the_sim_env_refuses_an_episode_length_of_zero_by_its_own_name():
    """UNCLEAR before (le02: `lerobot-eval --env.type=actlab_so101 --env.episode_length=0`: the sim's
    "max_steps must be at least 1", a field the user never set)."""
    from actlab.lerobot.sim_env import LeRobotSimEnv

    with pytest.raises(ActlabError) as e:
        LeRobotSimEnv(max_steps=0, image_size=16)
    assert e.value.field == "episode_length"


@pytest.mark.timeout(60)
def test_the_sim_env_never_appends_to_a_file_it_did_not_write(tmp_path, recording):
    """LOSS before (le09: `--env.log_file=DATASET/meta/info.json`: a JSON line appended to it at the end of
    the first episode, exit 0, the dataset unreadable); TRACEBACK before (le08: a directory:
    IsADirectoryError at the end of the first episode)."""
    from actlab.lerobot.sim_env import LeRobotSimEnv

    ds = shutil.copytree(recording, tmp_path / "ds")
    info = (ds / "meta" / "info.json").read_text()
    for target in (ds / "meta" / "info.json", tmp_path):
        with pytest.raises(ActlabError) as e:
            env = LeRobotSimEnv(max_steps=2, image_size=16, log_file=str(target))
            env.reset(seed=0)
            env.step(env.action_space.sample() * 0)
            env.step(env.action_space.sample() * 0)
        assert e.value.field == "log_file"
    assert (ds / "meta" / "info.json").read_text() == info
    log = tmp_path / "episodes.jsonl"
    for _ in range(2):  # a new log, then the env's own log again: appended
        env = LeRobotSimEnv(max_steps=1, image_size=16, log_file=str(log))
        env.reset(seed=0)
        env.step(env.action_space.sample() * 0)
    assert len(log.read_text().splitlines()) == 2


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("probe", "field", "value"), [("le04", "fps", 12), ("le06", "camera_names", [])])
def test_the_plugin_env_config_refuses_what_the_sim_cannot_honour(probe, field, value):
    """SILENT before (le04: `--env.fps=0` or 12 ignored, exit 0: the sim runs at 30 Hz and LeRobot's videos
    were written at 30); UNCLEAR before (le06: `--env.camera_names=[]`: "the observation has no camera",
    fix about the robot's cameras). Run in the lerobot venv on this checkout's source."""
    if not Path(LEROBOT_PYTHON).is_file():
        pytest.skip("needs the lerobot venv ($ACTLAB_LEROBOT_PYTHON)")
    code = (
        "from lerobot_policy_actlab.config_actlab_so101_env import ActlabSO101EnvConfig as C\n"
        f"C(image_size=16, {field}={value!r})"
    )
    path = f"{REPO / 'src'}:{REPO / 'integrations' / 'lerobot_policy_actlab'}"
    env = dict(os.environ, PYTHONPATH=path, MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    p = subprocess.run([LEROBOT_PYTHON, "-c", code], capture_output=True, text=True, timeout=50, env=env)
    assert p.returncode != 0 and f"field:    --env.{field}" in p.stderr, p.stderr[-2000:]


# ------------------------------------------------------------------ df2: the demo's disk estimate
@pytest.mark.timeout(90)
def test_the_demo_refuses_a_disk_training_would_refuse_before_recording(tmp_path, capsys):
    """UNCLEAR before (df2, left by the fifteenth run): on a disk with room for the demo's own figure but
    not for what training reserves (its 64 MiB of logs, 7 checkpoints), the demo recorded and then
    training refused with the larger figure. A real 12 MiB tmpfs: refused before any work now."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root to mount a tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(disk)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        argv = ["demo", "--out", str(disk / "dm"), "--episodes", "4", "--eval-episodes", "2"]
        assert main([*argv, "--image-size", "16", "--set", "steps=4", "--workers", "1"]) == 2
        err = capsys.readouterr().err
        assert "not enough disk space for the demo" in err and "training logs (reserved) 64.0 MiB" in err
        assert not (disk / "dm" / "data").exists()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)  # lazy: a handle left open keeps no mount
