"""Faults of our twenty-fourth planted-fault run (docs/faults.md "Twenty-fourth fault run"), planted for real:
real commands, real files.

Each test names the probes of docs/faults_round24_probes.md it plants again and what happened before its
fix.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from plant_faults import edit_middle_keeping_size_and_mtime


# ------------------------------------------------------------------ ACTLAB_CACHE inside another output
@pytest.mark.parametrize("inside", ["dataset", "bundle"])
def test_actlab_cache_inside_another_commands_output_is_refused(
    inside, tiny_dataset, bundle, tmp_path, monkeypatch, capsys
):
    """SILENT before (env_cache_in_dataset, env_cache_in_bundle, env_cache_in_dataset_stats,
    env_cache_in_dataset_train, env_cache_in_export_doctor, env_cache_in_evalout, env_cache_in_demo):
    ACTLAB_CACHE set to a directory inside a dataset, a bundle, an export or another command's output took
    the frame store and the stats cache in, exit 0 (the dataset's fingerprint changed with it); the 23rd
    run refused the same for --cache-dir only. Now every use of the cache root refuses it, naming
    ACTLAB_CACHE and what the directory is, before any work."""
    from actlab.cli import main

    data = tmp_path / "data"
    shutil.copytree(tiny_dataset, data)
    host = data if inside == "dataset" else bundle
    monkeypatch.setenv("ACTLAB_CACHE", str(host / "cache"))
    capsys.readouterr()
    assert main(["data", "cache", str(data), "--image-size", "16"]) == 2
    err = capsys.readouterr().err
    assert "ACTLAB_CACHE lies inside a directory another command wrote" in err, err
    assert not (host / "cache").exists()


def test_actlab_cache_inside_a_training_run_stays_allowed(tiny_dataset, run_dir, monkeypatch, capsys):
    """The other side: a training run's directory is where a run keeps its cache (RUN/cache)."""
    from actlab.cli import main

    monkeypatch.setenv("ACTLAB_CACHE", str(run_dir / "cache24"))
    try:
        assert main(["data", "cache", str(tiny_dataset), "--image-size", "16"]) == 0
    finally:
        shutil.rmtree(run_dir / "cache24", ignore_errors=True)


# ------------------------------------------------------------------ tasks.parquet columns of another type
def _task_index_as_text(root: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = root / "meta" / "tasks.parquet"
    cols = pq.read_table(path).to_pydict()
    cols["task_index"] = ["pick the cube\nand place it ü" for _ in cols["task_index"]]
    pq.write_table(pa.table(cols), path)


@pytest.mark.parametrize("command", ["data info", "data doctor", "data curate"])
def test_a_tasks_file_whose_task_index_is_text_is_named(command, tiny_dataset, tmp_path, capsys):
    """TRACEBACK before (odd_task_idx_text, odd_task_idx_text_train, odd_task_newline_curate / view with
    the same file): meta/tasks.parquet whose task_index column holds text was int()'s ValueError traceback
    in every command that opens the dataset; `data doctor` said "check could not run: ValueError",
    file the dataset's root. Now a problem of its own, naming tasks.parquet, the column and the value."""
    from actlab.cli import main

    data = tmp_path / "data"
    shutil.copytree(tiny_dataset, data)
    _task_index_as_text(data)
    argv = [*command.split(), str(data)]
    if command == "data curate":
        argv += ["--out", str(tmp_path / "out"), "--drop-episodes", "0"]
    capsys.readouterr()
    code = main(argv)
    out = capsys.readouterr()
    text = out.out + out.err
    assert code in (1, 2), text
    assert "tasks.parquet's task_index column holds a value of another type" in text, text
    assert "Traceback" not in text and "could not run" not in text, text


# ------------------------------------------------------------------ a demo directory without its state file
def test_a_demo_directory_that_lost_its_state_file_is_named_as_such(tmp_path, capsys):
    """UNCLEAR before (demo_state_removed, demo_state_removed_fresh, kill_demo_eval): a demo's directory
    whose demo_state.json was deleted was refused as "a directory that actlab demo did not create", fix
    "choose another --out" (with --fresh too). Now the refusal names the missing state file and how to go
    on; a directory the demo never made is refused as before."""
    from actlab.demo.run_check import check_is_demo_dir
    from actlab.errors import ActlabError

    out = tmp_path / "demo"
    for name in ("data", "run"):
        (out / name).mkdir(parents=True)
    (out / "summary.json").write_text("{}")
    with pytest.raises(ActlabError) as e:
        check_is_demo_dir(out, "demo_state.json", ".actlab.lock")
    assert "lost its demo_state.json" in e.value.problem
    assert "restore demo_state.json" in e.value.fix
    other = tmp_path / "notes"
    other.mkdir()
    (other / "a.txt").write_text("mine")
    with pytest.raises(ActlabError) as e:
        check_is_demo_dir(other, "demo_state.json", ".actlab.lock")
    assert "did not create" in e.value.problem


# ------------------------------------------------------------------ rl demonstrations of another size
@pytest.mark.slow
def test_rl_reward_model_refuses_demonstrations_of_another_size(recording, bundle, tmp_path, capsys):
    """UNCLEAR before (kill_rm, rm_twice_demos_changed, rl_demos_size_mismatch): demonstrations recorded at
    another --image-size than the base was trained at were refused by the policy's input check, fix
    "convert HWC frames with .permute(0, 3, 1, 2) and resize them": a programmer's words. Now the
    demonstrations' size is checked first, naming info.json, the size wanted and found, and the fix."""
    from actlab.cli import main
    from actlab.policies import load_policy

    big = tmp_path / "big"
    argv = ["sim", "record", "--episodes", "1", "--image-size", "24", "--workers", "0", "--out", str(big)]
    assert main(argv) == 0
    assert load_policy(bundle).features["observation.images.top"]["shape"][:2] == [16, 16]
    capsys.readouterr()
    code = main(
        ["rl", "reward-model", "--demos", str(big), "--base", str(bundle), "--out", str(tmp_path / "rm")]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert "the demonstrations' frames are not the size the agent reads" in err, err
    assert ".permute" not in err, err


# ------------------------------------------------------------------ a damaged store's rebuild command
def test_a_damaged_stores_rebuild_command_names_its_cache_dir(tiny_dataset, tmp_path, capsys):
    """UNCLEAR before (store_npy_midflip): `data cache --verify` of a store in --cache-dir DIR whose frames
    were changed gave the fix `actlab data cache DATASET --image-size N --rebuild`, without --cache-dir: it
    rebuilt a store in the default place and left this one damaged. Now the command names DIR."""
    from actlab.cli import main

    cache = tmp_path / "c"
    base = ["data", "cache", str(tiny_dataset), "--image-size", "16", "--cache-dir", str(cache)]
    assert main(base) == 0
    (store,) = [p for p in cache.iterdir() if p.is_dir()]
    npy = store / "cam0.npy"
    raw = bytearray(npy.read_bytes())
    mid = len(raw) // 2
    raw[mid : mid + 64] = bytes(b ^ 0x5A for b in raw[mid : mid + 64])
    npy.write_bytes(bytes(raw))
    json.loads((store / "store.json").read_text())  # (the store's record is left as it was)
    capsys.readouterr()
    assert main([*base, "--verify"]) != 0
    err = capsys.readouterr().err
    assert f"--cache-dir {cache} --rebuild" in err, err


# ------------------------------------------------------------------ the demo's dataset edited in its middle
@pytest.mark.slow
def test_a_demo_does_not_reuse_its_recording_after_a_video_was_edited(tmp_path, capsys):
    """SILENT before (reuse_demo_video_mid): a video of the demo's DIR/data edited in its middle with its
    size and mtime kept: the recording, the run trained on the old frames, the evaluation and the report
    were reused, exit 0 (the run's dataset identity hashes meta/ and the rows, not the videos). Now the
    record stage records each file's sha256 (with inode and ctime: a stat when untouched) and a changed
    one is refused, naming the file; a copy of the demo (new inodes, same bytes) is still reused."""
    from actlab.cli import main

    out = tmp_path / "demo"
    argv = ["demo", "--episodes", "2", "--eval-episodes", "1", "--image-size", "16", "--set", "steps=2"]
    argv += ["--workers", "1", "--out", str(out)]
    assert main(argv) == 0
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    assert main([*argv[:-1], str(copy)]) == 0  # an unedited copy: reused
    video = next((copy / "data" / "videos" / "observation.images.top").rglob("*.mp4"))
    edit_middle_keeping_size_and_mtime(video, 512)
    capsys.readouterr()
    assert main([*argv[:-1], str(copy)]) == 2
    err = capsys.readouterr().err
    assert "the demo's dataset changed since the demo recorded it" in err, err
    assert video.relative_to(copy / "data").as_posix() in err, err


# ------------------------------------------------------------------ an image encoder on reach
def test_rl_train_refuses_an_image_encoder_on_reach_before_its_run_directory(tmp_path, capsys):
    """UNCLEAR before (rl_cnn_top, rl_cams_unknown, rl_cams_dup): `rl train --preset smoke --set
    obs.encoder=cnn --set obs.cameras=top` (reach, whose envs render no camera) made the run directory
    (config.json, metrics.jsonl left), then was refused as "the environment does not provide every
    observation the policy was trained on", fix "--task", which rl train has not. Now refused first,
    naming obs.encoder and env.task, nothing written."""
    from actlab.cli import main

    out = tmp_path / "rl"
    argv = ["rl", "train", "--preset", "smoke", "--out", str(out), "--set", "obs.encoder=cnn"]
    argv += ["--set", "obs.cameras=top", "--set", "total_env_steps=200"]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the reach task renders no camera" in err, err
    assert not out.exists()
