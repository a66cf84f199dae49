"""Faults of our twenty-fifth planted-fault run (docs/faults.md "Twenty-fifth fault run"), planted for real:
real commands, real files.

The first tests cover what the 24th run left (its "Left as they are"); each later one names the probes of
docs/faults_round25_probes.md it plants again and what happened before its fix.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from plant_faults import edit_middle_keeping_size_and_mtime

TINY = ["--preset", "tiny", "--set", "log.progress=false", "--set", "checkpoint.every=1"]


def _train(main, data: Path, out: Path, steps: int, *extra: str) -> int:
    return main(
        ["train", *TINY, "--dataset", str(data), "--out", str(out), "--set", f"steps={steps}", *extra]
    )


def _videos(root: Path) -> list[Path]:
    return sorted(p for p in (root / "videos").rglob("*.mp4"))


# ------------------------------------------------------------------ 24th's leftovers: a resume's videos
def test_a_resume_refuses_a_video_edited_in_its_middle(tiny_dataset, tmp_path, capsys):
    """SILENT before (the 24th run's "Left as they are"): `train --resume` on a dataset whose video was
    edited in its middle with its size and mtime kept resumed on other frames, exit 0 (the run's dataset
    identity hashes meta/ and the rows, not the videos). Now each checkpoint records the videos the run
    reads (sha256 with inode and ctime: the frame store's record) and the resume refuses a changed one,
    naming it; the demo's train stage shares the check (check_same_dataset)."""
    from actlab.cli import main

    data, out = tmp_path / "data", tmp_path / "run"
    shutil.copytree(tiny_dataset, data)
    assert _train(main, data, out, 1) == 0
    (video,) = _videos(data)[:1]
    edit_middle_keeping_size_and_mtime(video, 64)
    capsys.readouterr()
    assert _train(main, data, out, 2, "--resume") == 2
    err = capsys.readouterr().err
    assert "the dataset is not the one the run was trained on" in err, err
    assert video.relative_to(data).as_posix() in err and "step_0000001 was trained on it" in err, err
    assert not (out / "checkpoints" / "step_0000002").exists()


def test_a_resume_of_a_checkpoint_without_the_videos_record_says_so_and_goes_on(
    tiny_dataset, tmp_path, capsys
):
    """The other side: a checkpoint written before the record cannot compare its videos: said, resumed."""
    from actlab.cli import main

    out = tmp_path / "run"
    assert _train(main, tiny_dataset, out, 1) == 0
    meta_path = out / "checkpoints" / "step_0000001" / "actlab.json"
    meta = json.loads(meta_path.read_text())
    assert isinstance(meta["extra"]["train"]["dataset"].pop("videos"), dict)
    meta_path.write_text(json.dumps(meta))
    capsys.readouterr()
    assert _train(main, tiny_dataset, out, 2, "--resume") == 0
    assert "predates the record of its videos" in capsys.readouterr().err


def test_rl_resume_refuses_demonstrations_changed_since_its_checkpoint(tiny_dataset, tmp_path, capsys):
    """The same for `rl train --resume --demos`: demonstrations are read again at each resume, and a
    dataset edited since (a video with its size and mtime kept, or its rows) was read without a word; the
    checkpoint now records them (rl.demos.demos_record) and the resume compares."""
    from actlab.errors import ActlabError
    from actlab.rl.demos import check_demos_unchanged, demos_record

    data = tmp_path / "demos"
    shutil.copytree(tiny_dataset, data)
    record = json.loads(json.dumps(demos_record(data, ["observation.images.top"])))
    check_demos_unchanged(data, record, tmp_path / "step_1")  # unchanged: passes
    (video,) = _videos(data)[:1]
    edit_middle_keeping_size_and_mtime(video, 64)
    with pytest.raises(ActlabError) as e:
        check_demos_unchanged(data, record, tmp_path / "step_1")
    assert "the demonstrations are not the ones the run was trained on" in e.value.problem
    assert video.relative_to(data).as_posix() in str(e.value.found)


# ------------------------------------------------------------------ 24th's leftovers: rl demos' size
def test_rl_train_refuses_demonstrations_of_another_size_before_its_run_directory(
    recording, bundle, tmp_path, capsys
):
    """UNCLEAR-then-leftover before (the 24th run's "Left as they are"): `rl train --demos` recorded at
    another --image-size than the base was trained at was refused after the run directory was made, RUN/base
    left behind (and taken by the next start). Now refused before anything is written."""
    from actlab.cli import main

    big = tmp_path / "big"
    argv = ["sim", "record", "--episodes", "1", "--image-size", "24", "--workers", "0", "--out", str(big)]
    assert main(argv) == 0
    out = tmp_path / "rl"
    capsys.readouterr()
    argv = [
        "rl",
        "train",
        "--preset",
        "residual",
        "--base",
        str(bundle),
        "--demos",
        str(big),
        "--out",
        str(out),
    ]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "the demonstrations' frames are not the size the agent reads" in err, err
    assert not out.exists(), sorted(p.name for p in out.iterdir())


# ------------------------------------------------------------------ 24th's leftovers: a list's item twice
@pytest.mark.parametrize(
    ("argv", "field", "found"),
    [
        (["bench", "threads", "--threads", "1,1", "--rounds", "1"], "--threads", "1 in '1,1'"),
        (["bench", "threads", "--threads", "1,01", "--rounds", "1"], "--threads", "1 and 01 (both 1)"),
        (["eval", "BUNDLE", "--execution", "sync,sync"], "--execution", "sync in 'sync,sync'"),
        (["eval", "BUNDLE", "--execution", "async", "--latency", "3,100ms"], "--latency", "3 and 100ms"),
        (["eval", "BUNDLE", "--execution", "async", "--latency", "2,2"], "--latency", "2 in '2,2'"),
        (
            ["data", "curate", "DATA", "--out", "OUT", "--drop-episodes", "0-1,1"],
            "--drop-episodes",
            "0-1 and 1",
        ),
        (
            ["data", "stats", "DATA", "--relative-horizon", "4", "--absolute-dims", "0,0"],
            "--absolute-dims",
            "0 in '0,0'",
        ),
        (
            ["policy", "doctor", "BUNDLE", "--dataset", "DATA", "--train-episodes", "0,0"],
            "--train-episodes",
            "0 in '0,0'",
        ),
    ],
)
def test_an_item_given_twice_in_a_comma_list_is_refused(
    argv, field, found, bundle, tiny_dataset, tmp_path, capsys
):
    """SILENT before (the 24th run's "Left as they are", bthreads_dup): `bench threads --threads 1,1`
    measured 1 twice and reported it once; `--execution sync,sync` and `--latency 3,100ms` (3 steps at 30
    fps) were merged without a word; `--drop-episodes 0-1,1` dropped 1 once. One rule for every comma list
    (utils.config.refuse_repeated): refused, naming the option and the item."""
    from actlab.cli import main

    subst = {"BUNDLE": str(bundle), "DATA": str(tiny_dataset), "OUT": str(tmp_path / "out")}
    capsys.readouterr()
    assert main([subst.get(a, a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "a comma list names one item twice" in err and field in err and found in err, err
    assert not (tmp_path / "out").exists()
