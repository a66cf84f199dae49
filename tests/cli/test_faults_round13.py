"""Faults of our thirteenth planted-fault run (docs/faults.md "Thirteenth fault run"), planted for real:
the real parser, real files, real bundles, runs, exports and datasets, a real full disk.

Each test names the probe of docs/faults_round13_probes.md it plants again and what the command did
before its fix.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings

import pytest

from actlab.cli import main

TINY = ["--preset", "tiny", "--set", "log.progress=false"]
SMOKE = ["--preset", "smoke", "--set", "total_env_steps=200"]


def _edit_json(path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data, indent=2))


# ------------------------------------------------------------------ a run's config.json edited, then --resume
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("section", "key", "value", "named"),
    [("policy", "dim_model", 64, "policy.dim_model: 32 -> 64"), ("optim", "lr", 0.5, "config_hash")],
    ids=["policy-shape", "optimizer"],
)
def test_a_resume_refuses_a_run_config_edited_after_its_checkpoint(
    tmp_path, run_dir, capsys, section, key, value, named
):
    """TRACEBACK before (rs01): config.json's policy.dim_model edited, then --resume: torch's
    load_state_dict size-mismatch traceback. SILENT (rs11): optim.lr edited: resumed with it, exit 0
    (``--set optim.lr=`` is refused)."""
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    _edit_json(run / "config.json", lambda c: c[section].update({key: value}))
    assert (
        main(["train", "--out", str(run), "--resume", "--set", "steps=3", "--set", "log.progress=false"]) == 2
    )
    err = capsys.readouterr().err
    assert "was changed after checkpoint step_0000002 was written" in err and named in err, err
    assert "--init-from" in err and "Traceback" not in err
    assert not (run / "checkpoints" / "step_0000003").exists()


@pytest.mark.timeout(60)
def test_an_rl_resume_refuses_a_run_config_edited_after_its_checkpoint(tmp_path, capsys):
    """SILENT before (rl02): an RL run's config.json env.num_envs edited 4 -> 2, then --resume: resumed
    with 2, exit 0, where ``--set env.num_envs=2`` is refused."""
    run = tmp_path / "rl"
    assert main(["rl", "train", *SMOKE, "--out", str(run)]) == 0
    _edit_json(run / "config.json", lambda c: c["env"].update(num_envs=2))
    capsys.readouterr()
    assert main(["rl", "train", "--out", str(run), "--resume", "--set", "total_env_steps=400"]) == 2
    err = capsys.readouterr().err
    assert "was changed after checkpoint" in err and "env.num_envs: 4 -> 2" in err, err
    assert "rl_config.json" in err  # the fix: cp the checkpoint's copy back


@pytest.mark.timeout(60)
def test_a_resume_says_where_the_dataset_went_and_where_the_config_went(
    tmp_path, run_dir, tiny_dataset, capsys
):
    """UNCLEAR before (rs09, rs10): the dataset moved: "dataset directory not found, fix: check the path";
    config.json removed: "run config not found, fix: check the path"."""
    run, moved = tmp_path / "run", tmp_path / "moved"
    shutil.copytree(run_dir, run)
    _edit_json(run / "config.json", lambda c: c["data"].update(path=str(moved)))
    resume = ["train", "--out", str(run), "--resume", "--set", "steps=3", "--set", "log.progress=false"]
    assert main(resume) == 2
    err = capsys.readouterr().err
    assert "not where it was" in err and "resume with --dataset PATH" in err, err
    assert main([*resume, "--dataset", str(tiny_dataset)]) == 0  # the fix works
    (run / "config.json").unlink()
    assert main(resume) == 2
    err = capsys.readouterr().err
    assert "run config not found" in err and "--init-from" in err and "check the path" not in err, err


@pytest.mark.timeout(60)
def test_a_resume_without_checkpoints_does_not_blame_an_early_stop(tmp_path, run_dir, capsys):
    """UNCLEAR before (rs06, rl04): every checkpoint removed: "has no checkpoint (the run stopped before
    its first)"."""
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    for step in (run / "checkpoints").glob("step_*"):
        shutil.rmtree(step)
    assert (
        main(["train", "--out", str(run), "--resume", "--set", "steps=1", "--set", "log.progress=false"]) == 0
    )
    err = capsys.readouterr().err
    assert "its checkpoints were removed" in err and "stopped before its first" not in err, err


# ------------------------------------------------------------------ datasets
@pytest.mark.timeout(60)
def test_a_resized_cache_refuses_frames_of_another_size_than_info_json(tmp_path, tiny_dataset, capsys):
    """SILENT before (dd26): info.json said 48x48, the video is 32x32: the resized (tiny preset: 32 px)
    cache trained on it, exit 0, and the bundle recorded 48x48 as the frames' source size."""
    ds = tmp_path / "ds"
    shutil.copytree(tiny_dataset, ds)
    _edit_json(
        ds / "meta" / "info.json", lambda i: i["features"]["observation.images.top"].update(shape=[48, 48, 3])
    )
    (ds / "meta" / "actlab_checksums.json").unlink(missing_ok=True)
    out = tmp_path / "run"
    cache = ["--set", f"data.cache_dir={tmp_path / 'cache'}"]
    assert main(["train", *TINY, "--dataset", str(ds), "--out", str(out), "--set", "steps=1", *cache]) == 2
    err = capsys.readouterr().err
    assert "decoded frame size differs from info.json" in err and "48x48" in err and "32x32" in err, err
    assert not (out / "checkpoints").exists()


@pytest.mark.timeout(30)
def test_the_doctor_warns_of_names_that_do_not_match_the_shape(tmp_path, tiny_dataset, capsys):
    """SILENT before (dd39): 5 action names for 6 values: the doctor said 0 problems."""
    ds = tmp_path / "ds"
    shutil.copytree(tiny_dataset, ds)
    n = json.loads((ds / "meta" / "info.json").read_text())["features"]["action"]["shape"][0]
    _edit_json(
        ds / "meta" / "info.json", lambda i: i["features"]["action"].update(names=list("abcdefgh")[: n - 1])
    )
    assert main(["data", "doctor", str(ds)]) == 0  # a warning, not an error
    out = capsys.readouterr().out
    assert f"[warning] names: feature 'action' has {n - 1} names for {n} values" in out, out


@pytest.mark.timeout(30)
def test_a_check_that_crashes_after_errors_points_to_them(tmp_path, tiny_dataset, capsys):
    """UNCLEAR before (dd32): an episode length edited: besides the length errors, "data: check could
    not run: ValueError: operands could not be broadcast ... found: unreadable"."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ds = tmp_path / "ds"
    shutil.copytree(tiny_dataset, ds)
    (ds / "meta" / "actlab_checksums.json").unlink(missing_ok=True)
    eps = next((ds / "meta" / "episodes").rglob("*.parquet"))
    t = pq.read_table(eps)
    lengths = t["length"].to_pylist()
    lengths[0] += 5
    pq.write_table(
        t.set_column(t.schema.get_field_index("length"), "length", pa.array(lengths, pa.int64())), eps
    )
    assert main(["data", "doctor", str(ds)]) == 1
    out = capsys.readouterr().out
    assert "length_mismatch" in out, out
    if "check could not run" in out:  # a check that relies on the lengths
        assert "error(s) above" in out and "found:    unreadable" not in out, out


@pytest.mark.timeout(30)
def test_convert_blames_a_short_actions_file_not_the_lengths(tmp_path, capsys):
    """UNCLEAR before (cv03): actions.npy one row short, observations and rollout_length.npy agreeing:
    "rollout lengths do not add up", fix "fix rollout_length.npy"."""
    import numpy as np

    src = tmp_path / "npy"
    src.mkdir()
    obs = {"image_left": np.zeros((20, 16, 16, 3), np.uint8), "state": np.zeros((20, 6), np.float32)}
    np.save(src / "observations.npy", obs, allow_pickle=True)
    np.save(src / "actions.npy", np.zeros((19, 6), np.float32))
    np.save(src / "rollout_length.npy", np.array([10, 10]))
    assert main(["data", "convert", str(src), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "actions.npy has another number of frames" in err and "actions.npy" in err, err
    assert "fix rollout_length.npy" not in err and not (tmp_path / "out").exists()


@pytest.mark.timeout(30)
def test_verify_names_the_cache_dir_in_its_fix(tmp_path, tiny_dataset, capsys):
    """UNCLEAR before (dc15): `data cache --verify --cache-dir C` with no store there: the fix built one in
    the default cache, where --verify does not look."""
    cdir = tmp_path / "c"
    assert main(["data", "cache", str(tiny_dataset), "--verify", "--cache-dir", str(cdir)]) == 2
    assert f"--cache-dir {cdir}`" in capsys.readouterr().err


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "args",
    [["eval", "B", "--threads", "0"], ["data", "stats", "DS", "--relative-horizon", "0"]],
    ids=["eval-threads", "stats-relative-horizon"],
)
def test_zero_counts_are_refused_with_the_option_name(args, capsys):
    """UNCLEAR before (ev13, dc08): "threads must be >= 1, field: threads_per_worker", "relative_action_
    horizon must be >= 1": names of no option."""
    with pytest.raises(SystemExit):
        main(args)
    assert f"argument {args[-2]}: expected a number >= 1, found 0" in capsys.readouterr().err


# ------------------------------------------------------------------ policies
@pytest.mark.timeout(60)
def test_policy_doctor_refuses_an_episode_both_trained_and_held_out(recording, bundle, capsys):
    """SILENT before (pb24): --train-episodes 0 --heldout-episodes 0 replayed the one episode as both and
    judged generalization on it."""
    args = ["policy", "doctor", str(bundle), "--dataset", str(recording)]
    assert main([*args, "--train-episodes", "0", "--heldout-episodes", "0"]) == 2
    err = capsys.readouterr().err
    assert "name the same episodes" in err and "[0] in both" in err, err


@pytest.mark.timeout(60)
def test_import_refuses_an_export_whose_config_was_edited(tmp_path, bundle, capsys):
    """SILENT before (pb32): an export's config.json chunk_size edited: `policy import` wrote the bundle's
    own values, exit 0 (LeRobot's plugin refuses that export)."""
    export = tmp_path / "export"
    assert main(["policy", "export", str(bundle), "--out", str(export)]) == 0
    _edit_json(export / "config.json", lambda c: c.update(chunk_size=c["chunk_size"] // 2))
    capsys.readouterr()
    assert main(["policy", "import", str(export), "--out", str(tmp_path / "imp")]) == 2
    err = capsys.readouterr().err
    assert "disagrees with the model it ships" in err and "chunk_size" in err, err
    assert not (tmp_path / "imp").exists()


@pytest.mark.timeout(30)
def test_policy_bench_refuses_two_variants_of_one_name(capsys):
    """SILENT before (pb36): --variant a:dim_model=16 --variant a:dim_model=32: both built, one result
    reported (the other's times replaced)."""
    args = ["policy", "bench", "act", "--steps", "1", "--batch-size", "2", "--image-size", "16", "16"]
    assert main([*args, "--variant", "a:dim_model=16", "--variant", "a:dim_model=32"]) == 2
    err = capsys.readouterr().err
    assert "two --variant share a name" in err and "building" not in err, err


@pytest.mark.timeout(60)
def test_reward_model_names_the_base_camera_the_demos_lack(tmp_path, tiny_dataset, bundle, capsys):
    """UNCLEAR before (rl07): demos of camera top, a base of top and wrist: "no camera
    'observation.images.wrist' (did you mean 'observation.images.top'?)", a typo nobody made."""
    out = tmp_path / "rm"
    assert (
        main(["rl", "reward-model", "--demos", str(tiny_dataset), "--base", str(bundle), "--out", str(out)])
        == 2
    )
    err = capsys.readouterr().err
    assert "lack a camera the base policy reads" in err and "did you mean" not in err, err


@pytest.mark.timeout(90)
@pytest.mark.parametrize("where", ["main", "workers"])
def test_actlab_warnings_are_one_line(tmp_path, bundle, where):
    """UNCLEAR before (pb13, pb16; c08 of the confirmation pass: in eval's worker processes): an edited
    bundle's warning was Python's "/.../harness.py:177: UserWarning: ... changed since the bundle was saved
    (edited?)" and a line of actlab's source."""
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    _edit_json(copy / "config.json", lambda c: c.update(n_action_steps=c["n_action_steps"] - 1))
    if where == "main":
        args = ["policy", "info", str(copy)]
    else:
        args = ["eval", str(copy), "--episodes", "2", "--max-steps", "5", "--workers", "2"]
        args += ["--out", str(tmp_path / "ev")]
    proc = subprocess.run(
        [sys.executable, "-m", "actlab.cli", *args], capture_output=True, text=True, timeout=80
    )
    assert proc.returncode == 0, proc.stderr
    assert f"warning: {copy / 'config.json'} changed since the bundle was saved" in proc.stderr
    assert "UserWarning" not in proc.stderr and ".py:" not in proc.stderr, proc.stderr
    if where == "main":
        with warnings.catch_warnings(record=True) as seen:  # a caller that records warnings gets them
            warnings.simplefilter("always")
            assert main(args) == 0
        assert any("changed since the bundle was saved" in str(w.message) for w in seen)


# ------------------------------------------------------------------ environment
@pytest.mark.timeout(60)
def test_stdout_on_a_full_disk_names_that_disk(tmp_path, tiny_dataset, small_fs):
    """UNCLEAR before (fe06): `actlab ... --json > FILE` on a full disk: "the disk is full", fix `df -h .`
    (the current directory, not the disk of FILE)."""
    full = small_fs(1024 * 1024)
    target = full / "info.json"
    with open(target, "w") as out:
        try:  # fill the disk (the output file made first)
            with open(full / "fill", "wb") as f:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
        except OSError:
            pass
        proc = subprocess.run(
            [sys.executable, "-m", "actlab.cli", "data", "info", str(tiny_dataset), "--json"],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=50,
            cwd=tmp_path,
        )
    assert proc.returncode == 2, proc.stderr
    assert "the disk is full" in proc.stderr and f"df -h {full}" in proc.stderr, proc.stderr
