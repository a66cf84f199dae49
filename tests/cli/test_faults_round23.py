"""Faults of our twenty-third planted-fault run (docs/faults.md "Twenty-third fault run"), planted for real:
real commands, real files.

Each test names the probes of docs/faults_round23_probes.md it plants again and what happened before its
fix.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from plant_faults import edit_middle_keeping_size_and_mtime


# ------------------------------------------------------------------ a video edited in its middle
@pytest.fixture(scope="module")
def big_video_dataset(tmp_path_factory) -> Path:
    """A 2-episode 96 px recording: its top camera's video is over 128 KiB (the fingerprint hashes only
    the first and last 64 KiB of such a file). Without actlab's checksums, as another tool's dataset."""
    from actlab.cli import main

    out = tmp_path_factory.mktemp("big") / "rec"
    argv = ["sim", "record", "--episodes", "2", "--image-size", "96", "--workers", "0", "--out", str(out)]
    assert main(argv) == 0
    (out / "meta" / "actlab_checksums.json").unlink()
    return out


@pytest.mark.parametrize("how", ["data cache", "data cache --verify"])
def test_a_frame_store_is_not_reused_for_a_video_edited_in_its_middle(
    how, big_video_dataset, tmp_path, capsys
):
    """SILENT before (vid_nosum_reuse, vid_nosum_train, vid_nosum_verify, vid_nosum_doctor, vid_train_stale,
    vid_cache_verify): a video of over 128 KiB edited in its middle with its size kept and its mtime put
    back (`touch -r`, a copy tool keeping times) kept the dataset's fingerprint, so `data cache`, training,
    `policy doctor` and `data cache --verify` reused the frame store built from the old video, exit 0: the
    frames trained on were not the video's. Now the store records each source file's sha256 with its inode
    and ctime (which any write changes); a file whose ctime moved is hashed whole and a changed one makes
    the store stale: rebuilt (here the cut video then fails to decode, as it should), or damaged for
    --verify, naming the file."""
    import shutil

    from actlab.cli import main

    data = tmp_path / "rec"
    shutil.copytree(big_video_dataset, data)  # copy2: the times kept, as cp -a
    video = next((data / "videos" / "observation.images.top").rglob("*.mp4"))
    assert video.stat().st_size > 128 * 1024
    cache = tmp_path / "cache"
    base = ["data", "cache", str(data), "--image-size", "24", "--cache-dir", str(cache)]
    assert main(base) == 0
    edit_middle_keeping_size_and_mtime(video)
    capsys.readouterr()
    code = main(base + (["--verify"] if how.endswith("--verify") else []))
    err = capsys.readouterr().err
    assert code != 0, err
    assert f"{video.relative_to(data).as_posix()} changed since the store was built" in err, err


def test_a_copy_of_a_dataset_with_its_times_kept_still_reuses_the_store(big_video_dataset, tmp_path, capsys):
    """The other side of the row above: an unedited copy (new inodes and ctimes, the same bytes) is hashed
    and reuses the store: no second decode."""
    import shutil

    from actlab.cli import main

    cache = tmp_path / "cache"
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(big_video_dataset, a)
    shutil.copytree(a, b)
    assert main(["data", "cache", str(a), "--image-size", "24", "--cache-dir", str(cache)]) == 0
    capsys.readouterr()
    assert main(["data", "cache", str(b), "--image-size", "24", "--cache-dir", str(cache)]) == 0
    err = capsys.readouterr().err
    assert "decoding" not in err and "changed since" not in err, err


# ------------------------------------------------------------------ a frame cache inside another output
_CACHE_IN_OTHER = {
    "data cache": ["data", "cache", "REC", "--image-size", "16", "--cache-dir", "INSIDE"],
    "bench data": ["bench", "data", "REC", "--seconds", "1", "--no-baseline", "--cache-dir", "INSIDE"],
    "policy doctor": ["policy", "doctor", "BUNDLE", "--dataset", "REC", "--cache-dir", "INSIDE"],
    "bench train": [
        *["bench", "train", "--preset", "tiny", "--steps", "1", "--rounds", "1", "--dataset", "REC"],
        *["--set", "data.cache_dir=INSIDE"],
    ],
    "find-batch-size": [
        "find-batch-size",
        "--preset",
        "tiny",
        "--dataset",
        "REC",
        "--max",
        "2",
        "--memory-limit",
        "3GiB",
        "--set",
        "data.cache_dir=INSIDE",
    ],
}


@pytest.mark.parametrize("command", list(_CACHE_IN_OTHER))
@pytest.mark.parametrize("inside", ["a checkpoint", "an export", "another dataset"])
def test_a_frame_cache_is_not_written_into_another_commands_output(
    command, inside, tmp_path, bundle, rec2, export, recording, capsys
):
    """SILENT before (role_dcache_in_bundle, cache_dcache_in_export, cache_dcache_in_other_dataset,
    cache_bd_in_bundle, cache_pd_in_other_bundle, cache_bt_in_bundle, cache_fbs_in_bundle): `--cache-dir`
    (or `--set data.cache_dir=`) a checkpoint, a LeRobot export or another dataset made these five
    commands write their frame store (and stats/) into it, exit 0 (the dataset's fingerprint changed, the
    export shipped the frames); `actlab train` and the demo refused the same. Now each refuses before any
    work, naming what the directory is; a training run's directory (RUN/cache) stays allowed."""
    import shutil

    from actlab.cli import main

    where = {"a checkpoint": bundle, "an export": export, "another dataset": recording}[inside]
    target = tmp_path / "target"
    shutil.copytree(where, target)
    before = sorted(p.name for p in target.iterdir())
    swap = {"REC": str(rec2), "BUNDLE": str(bundle), "INSIDE": str(target / "cache")}
    argv = [swap.get(a, a).replace("INSIDE", str(target / "cache")) for a in _CACHE_IN_OTHER[command]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "lies inside a directory another command wrote" in err, err
    assert sorted(p.name for p in target.iterdir()) == before


# ------------------------------------------------------------------ an empty item in a comma list
_EMPTY_ITEM = {
    "eval --execution": (["eval", "BUNDLE", "--episodes", "1", "--execution", "sync,"], "--execution"),
    "eval --perturb": (["eval", "BUNDLE", "--episodes", "1", "--perturb", "action_noise=0.1,"], "--perturb"),
    "curate --drop-episodes": (["data", "curate", "REC", "--out", "OUT", "--drop-episodes", "0,"], None),
    "doctor --train-episodes": (
        ["policy", "doctor", "BUNDLE", "--dataset", "REC", "--train-episodes", "0,,1"],
        None,
    ),
    "stats --absolute-dims": (
        ["data", "stats", "REC", "--relative-horizon", "2", "--absolute-dims", "5,"],
        None,
    ),
    "policy bench --variant": (
        ["policy", "bench", "act", "--steps", "1", "--variant", "v:dim_model=64,"],
        None,
    ),
    "bench threads": (["bench", "threads", "--threads", "1,"], None),
}


@pytest.mark.parametrize("case", list(_EMPTY_ITEM))
def test_an_empty_item_in_a_comma_list_is_refused(case, tmp_path, bundle, rec2, capsys):
    """SILENT before (ev_exec_comma_trail, ev_perturb_trail, dc_drop_trail, pd_train_eps_empty_item,
    stats_absdims_trail, pbench_variant_trail, bthreads_trail): an empty item in a comma list (`--execution
    sync,$MODE` with MODE unset, a stray comma) was dropped without a word: eval ran sync alone, curate
    dropped the other episodes only, the variant benchmarked without the missing override. (`--latency 0,`
    was refused as a bad latency; a whole empty value is refused where the command line is read.) Now
    each list refuses an empty item, naming the option and the list as written."""
    from actlab.cli import main

    argv, field = _EMPTY_ITEM[case]
    swap = {"BUNDLE": str(bundle), "REC": str(rec2), "OUT": str(tmp_path / "out")}
    assert main([swap.get(a, a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "a comma list has an empty item" in err, err
    assert f"field:    {field or argv[-2]}" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["", "-1"])
def test_curate_drop_episodes_refusals_name_that_option(value, tmp_path, rec2, capsys):
    """SILENT before (dc_drop_empty): `data curate --drop-episodes ""` (an unset $EPISODES) wrote every
    episode, exit 0, no word (its default was the empty text, so the empty-value guard passed it).
    UNCLEAR before (dc_drop_neg): `--drop-episodes -1` was "cannot read the episode list", field
    --episodes (an option curate does not have). Now the first is refused as every empty value, the
    second names --drop-episodes."""
    from actlab.cli import main

    argv = ["data", "curate", str(rec2), "--out", str(tmp_path / "o"), "--drop-episodes", value]
    if value == "":  # refused where the command line is read (argparse's exit 2)
        with pytest.raises(SystemExit):
            main(argv)
    else:
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--drop-episodes" in err and "field:    --episodes" not in err, err
    assert not (tmp_path / "o").exists()


def test_eval_batch_envs_zero_is_refused_as_the_option(bundle, capsys):
    """UNCLEAR before (ev_batchenvs0): `eval --batch-envs 0` was "batch_envs must be an integer >= 1",
    field batch_envs (a config field, no expected, no fix); every other count of eval is refused at parse
    time as its option."""
    from actlab.cli import main

    with pytest.raises(SystemExit):
        main(["eval", str(bundle), "--episodes", "1", "--batch-envs", "0"])
    assert "argument --batch-envs: expected a number >= 1, found 0" in capsys.readouterr().err


def test_eval_of_a_run_and_one_of_its_checkpoints_says_it_is_given_twice(run_dir, capsys):
    """UNCLEAR before (ev_run_and_ckpt): `eval RUN RUN/checkpoints/step_2` was "two policies have the same
    name", fix "rename one": the same checkpoint twice, which no rename helps. Now it names the checkpoint
    given twice and says to pass the run alone or its checkpoints one by one."""
    from actlab.cli import main

    ckpt = sorted((run_dir / "checkpoints").glob("step_*"))[-1]
    assert (
        main(["eval", str(run_dir), str(ckpt), "--episodes", "1", "--max-steps", "5", "--workers", "1"]) == 2
    )
    err = capsys.readouterr().err
    assert "a checkpoint is given twice" in err and str(ckpt.resolve()) in err and "rename one" not in err, (
        err
    )


def test_a_recording_into_proc_is_not_blamed_on_a_full_disk(capsys):
    """UNCLEAR before (role_sim_out_proc): `sim record --out /proc/x` was "not enough disk space for this
    recording ... 0 B available (the free space)", fix "free space on that disk": /proc stores no files at
    all. The disk preflight (sim record, training's checkpoints, rl) now says so."""
    from actlab.cli import main

    argv = ["sim", "record", "--episodes", "1", "--image-size", "16", "--workers", "0", "--out", "/proc/f23x"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "filesystem that stores no files" in err and "not enough disk space" not in err, err


# ------------------------------------------------------------------ an export's actlab_config edited
@pytest.mark.parametrize("value", [[1, 2], "act", 5])
def test_an_exports_actlab_config_that_is_no_object_is_refused(value, tmp_path, export, capsys):
    """TRACEBACK before (px_imp_cfg_list): `policy import` of an export whose config.json holds
    `"actlab_config": [1, 2]` (or another value that is no object) ended in dict()'s TypeError / ValueError
    traceback (LeRobot's load of the export went through the same check). Now it is refused naming the
    file and the field."""
    import json
    import shutil

    from actlab.cli import main

    edited = tmp_path / "edited"
    shutil.copytree(export, edited)
    config = json.loads((edited / "config.json").read_text())
    (edited / "config.json").write_text(json.dumps({**config, "actlab_config": value}))
    assert main(["policy", "import", str(edited), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "actlab_config is not an object" in err and f"file:     {edited / 'config.json'}" in err, err
    assert "Traceback" not in err and not (tmp_path / "b").exists()


# ------------------------------------------------------------------ rl train on a camera base
def test_rl_train_refuses_a_camera_base_its_envs_would_not_render(tmp_path, bundle, capsys):
    """UNCLEAR before (in_rl2): `rl train --preset smoke --base CAMERA_BUNDLE --set env.task=pick_place`
    made its run directory, trained, evaluated the base and was refused as "the environment does not
    provide every observation the policy was trained on", fix "--task" (an option of eval; rl train has
    none), leaving RUN/base, config.json and metrics.jsonl behind. Now the base's cameras are checked
    with the inputs, before the run directory: the fix names --preset residual / obs.encoder=frozen."""
    from actlab.cli import main

    out = tmp_path / "rl"
    argv = ["rl", "train", "--preset", "smoke", "--base", str(bundle), "--out", str(out)]
    argv += ["--set", "env.task=pick_place", "--set", "total_env_steps=40", "--set", "eval.episodes=1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the base policy reads cameras the RL envs would not render" in err, err
    assert "--preset residual" in err and not out.exists()


# ------------------------------------------------------------------ the demo's run changed outside it
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("edit", ["resumed outside", "checkpoint removed"])
def test_a_demo_does_not_reuse_the_evaluation_of_checkpoints_no_longer_there(edit, tmp_path, capsys):
    """SILENT before (demo_run_resumed_outside, demo_ckpt_deleted, demo_ckpt_weights_swapped): a demo run
    again after its run was resumed outside it (`actlab train --out DIR/run --resume --set steps=...`), a
    checkpoint removed, or a checkpoint's weights replaced reused the evaluation, the delay sweep and the
    report of the weights it had measured, exit 0 (its deploy lines named a checkpoint no longer there).
    Now the evaluation records each checkpoint's weights (sha256): changed ones are evaluated again, a run
    left without checkpoints is refused with its fix."""
    import shutil

    from actlab.cli import main

    out = tmp_path / "dm"
    demo = ["demo", "--episodes", "2", "--eval-episodes", "1", "--image-size", "16", "--preset", "tiny"]
    demo += ["--set", "steps=1", "--workers", "1", "--out", str(out)]
    assert main(demo) == 0
    if edit == "resumed outside":
        assert main(["train", "--out", str(out / "run"), "--resume", "--set", "steps=2"]) == 0
    else:
        shutil.rmtree(out / "run" / "checkpoints" / "step_0000001")
    capsys.readouterr()
    code = main(demo)
    captured = capsys.readouterr()
    said = captured.out + captured.err
    if edit == "resumed outside":
        assert code == 0, said
        assert "the run's checkpoints changed since they were evaluated (step_0000002 added)" in said, said
    else:
        assert code == 2, said
        assert "the demo's run has no checkpoint left to evaluate" in said and "--fresh" in said, said


def test_a_set_list_written_without_quotes_says_how_to_write_it(capsys):
    """UNCLEAR before (tr_cameras_unknown): `--set policy.cameras=[front]` (a list of names without JSON's
    quotes) was "cannot read the value", fix "(read as written: Expecting value: line 1 column 2 (char
    1))": the JSON parser's words, not how to write the list. Now it says both spellings that work."""
    from actlab.cli import main

    assert main(["train", "--preset", "tiny", "--print-config", "--set", "policy.cameras=[front]"]) == 2
    err = capsys.readouterr().err
    assert "is not a JSON list" in err and '["a", "b"]' in err and "Expecting value" not in err, err


# ------------------------------------------------------------------ the bridge on an undecodable config.json
def test_the_bridge_child_turns_lerobots_decoding_error_into_a_refusal(tmp_path):
    """TRACEBACK before (px_ev_cfg_list, px_ev_action_shape_float): `eval --lerobot-policy EXPORT` (and
    `policy doctor --lerobot-policy`) of an export whose config.json holds `"actlab_config": [1, 2]` or an
    action shape of 6.5 failed in LeRobot's loader (draccus's DecodingError), and the bridge showed the
    child's whole traceback as found, fix "run the lerobot python by hand". The child now answers its
    hello with a refusal naming config.json and the field draccus names (here without lerobot: the
    function the child's load failure goes through)."""
    from actlab.lerobot.child import config_unreadable

    class DecodingError(Exception):  # draccus.utils.DecodingError, by name (the child has no draccus here)
        pass

    try:
        try:
            raise DecodingError("`actlab_config`: Failed when parsing value='[1, 2]'")
        except DecodingError as inner:
            raise RuntimeError("from_pretrained failed") from inner
    except RuntimeError as e:
        refusal = config_unreadable(e, str(tmp_path))
    assert refusal is not None and refusal["file"] == str(tmp_path / "config.json")
    assert "`actlab_config`" in refusal["found"] and "export it again" in refusal["fix"]
    assert config_unreadable(ValueError("x"), str(tmp_path)) is None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_eval_lerobot_policy_of_an_undecodable_export_shows_no_traceback(tmp_path, export, capsys):
    """The row above through the bridge for real, in the lerobot venv (skipped without it)."""
    import json
    import shutil

    from actlab.cli import main
    from procs import lerobot_python

    python = lerobot_python()
    edited = tmp_path / "edited"
    shutil.copytree(export, edited)
    config = json.loads((edited / "config.json").read_text())
    (edited / "config.json").write_text(json.dumps({**config, "actlab_config": [1, 2]}))
    argv = ["eval", "--lerobot-policy", str(edited), "--lerobot-python", str(python), "--episodes", "1"]
    assert main([*argv, "--max-steps", "5", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "LeRobot cannot read the policy's config.json" in err and "Traceback" not in err, err


def test_data_stats_are_not_served_from_the_cache_for_a_video_edited_in_its_middle(
    big_video_dataset, tmp_path, capsys
):
    """SILENT before (stats_img_after_midedit): `data stats DS` after a video of over 128 KiB was edited in
    its middle with its size and mtime kept printed the stats cached for the old video, exit 0 (the cache
    key holds the fingerprint, which hashes a large file's edges only); here the edit cut frames, so the
    stats could not even be computed again. Now a cache entry records the files it was read from (their
    sha256, inode and ctime) and is recomputed when one changed."""
    import shutil

    from actlab.cli import main

    data = tmp_path / "rec"
    shutil.copytree(big_video_dataset, data)
    assert main(["data", "stats", str(data), "--json"]) == 0
    edit_middle_keeping_size_and_mtime(next((data / "videos" / "observation.images.top").rglob("*.mp4")))
    capsys.readouterr()
    assert main(["data", "stats", str(data), "--json"]) != 0


def test_a_path_after_evals_options_is_said_to_go_with_the_others(bundle, run_dir, capsys):
    """UNCLEAR before (ev_two_same): `eval RUN_A --episodes 1 RUN_B` was "unrecognized arguments: RUN_B"
    (argparse reads one run of PATHs): a path the command takes, refused as unknown. Now the refusal says
    that every PATH goes together."""
    from actlab.cli import main

    with pytest.raises(SystemExit):
        main(["eval", str(bundle), "--episodes", "1", str(run_dir)])
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {run_dir}" in err and "every PATH goes together" in err, err
