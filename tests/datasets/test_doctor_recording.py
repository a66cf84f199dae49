"""The data doctor's recording checks on a real sim recording with one fault planted per copy, the CI
gate (--fail-on), the per-episode score and report, and `actlab data curate` (the input left
byte-identical, the output passing the doctor)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from actlab.cli import main
from actlab.datasets import checksums, open_dataset
from actlab.datasets.doctor import examine
from plant_faults import FAULTS, plant, read_episodes

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def sim(tmp_path_factory) -> Path:
    """6 scripted-expert episodes (top + wrist at 32 px), rewritten once through the writer, as every
    faulted copy is."""
    from actlab.sim import RecordConfig, record_dataset

    work = tmp_path_factory.mktemp("recording")
    record_dataset(work / "rec", RecordConfig(episodes=6, image_size=32, workers=0), progress=False)
    return plant(work / "rec", work / "clean", None)


@pytest.fixture(scope="module")
def faulted(sim, tmp_path_factory):
    made: dict[str, Path] = {}
    read: list = []  # the clean recording decoded once, for every fault planted

    def get(fault: str) -> Path:
        if fault not in made:
            if not read:
                read.append(read_episodes(sim))
            made[fault] = plant(sim, tmp_path_factory.mktemp(fault) / "ds", fault, read[0])
        return made[fault]

    return get


def tree_hash(root: Path) -> str:
    """sha256 over every file's relative path, bytes and mode, and every directory's name."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        h.update(os.path.relpath(dirpath, root).encode())
        for name in sorted(filenames):
            p = Path(dirpath) / name
            h.update(name.encode() + oct(p.stat().st_mode).encode() + p.read_bytes())
    return h.hexdigest()


def test_clean_recording_passes_the_warning_gate(sim, capsys):
    assert main(["data", "doctor", str(sim), "--fail-on", "warning", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["problems"] == [] and len(out["episodes"]) == 6
    assert {e["score"] for e in out["episodes"]} == {1.0}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_recording_fault_is_named(faulted, fault, capsys):
    check, episode, _ = FAULTS[fault]
    ds = faulted(fault)
    assert main(["data", "doctor", str(ds), "--fail-on", "warning", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    (p,) = [p for p in out["problems"] if p["check"] == check]  # named once, by its own check
    assert [q["check"] for q in out["problems"] if q["severity"] != "note"] == [check]  # nothing else
    assert p["severity"] == "warning"
    assert Path(p["file"]).is_relative_to(ds) and Path(p["file"]).exists()  # the file
    assert p["field"] and p["found"] and p["fix"]  # what, and what to do
    if episode is not None:  # the episode
        assert p["episodes"] == [episode] and f"episode {episode}" in p["found"]
        scores = {e["episode"]: e["score"] for e in out["episodes"]}
        assert scores[episode] < 1.0 and all(s == 1.0 for e, s in scores.items() if e != episode)
    # warnings alone do not fail the default gate (errors only)
    assert main(["data", "doctor", str(ds)]) == 0
    assert f"[warning] {check}" in capsys.readouterr().out


def test_found_names_the_frames_and_dimension(faulted):
    (frozen,) = examine(faulted("frozen_actions")).problems
    n = open_dataset(faulted("frozen_actions")).episodes[2].length
    assert frozen.field == "action (all 6 dims)" and f"episode 2 frames {n // 4}-" in frozen.found
    (pinned,) = examine(faulted("pinned_action")).problems
    assert pinned.field == "action dim 1 (shoulder_lift.pos)" and "always at" in pinned.problem
    (dead,) = examine(faulted("dead_state")).problems
    assert dead.field == "observation.state dim 2 (elbow_flex.pos)" and "frames 0-" in dead.found


def test_without_video_sampling_the_camera_faults_are_not_looked_for(faulted):
    assert examine(faulted("black_camera"), video_samples=0).problems == []
    assert [p.check for p in examine(faulted("black_camera"), video_samples=2).problems] == ["black_camera"]


def test_report_lists_episodes_worst_first(faulted, tmp_path):
    ds = faulted("dead_state")
    assert main(["data", "doctor", str(ds), "--report", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "dead_state" in md and "Episodes (worst first)" in md
    table = md[md.index("Episodes (worst first)") :]
    table = table[table.index("| episode") :].splitlines()
    assert table[2].startswith("| 3 ") and "warning dead_state" in table[2]
    assert (tmp_path / "rep" / "report.html").is_file()


def test_report_shows_the_frames_of_a_black_camera(faulted, tmp_path):
    assert main(["data", "doctor", str(faulted("black_camera")), "--report", str(tmp_path / "rep")]) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "black_camera: observation.images.top, episode 4 (sampled frames)" in md
    from PIL import Image

    img = np.asarray(Image.open(tmp_path / "rep" / "frames_00.png"))
    assert img.shape == (32, 4 * 32, 3) and img.max() < 20  # the 4 samples, black


# ------------------------------------------------------------------------------------------- curate


def test_curate_drops_and_trims_without_touching_the_input(faulted, tmp_path, capsys):
    src = faulted("short_episode")  # 7 episodes, episode 2 a false start of 4 frames
    before = tree_hash(src)
    lengths = [e.length for e in open_dataset(src).episodes]
    out = tmp_path / "curated"
    args = ["data", "curate", str(src), "--out", str(out), "--drop-flagged", "--drop-episodes", "5"]
    assert main([*args, "--trim", "3:10:100", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert tree_hash(src) == before  # byte-identical input
    assert summary["removed"] == {"2": "--drop-flagged (warning short_episode)", "5": "--drop-episodes"}
    ds = open_dataset(out)
    kept = [0, 1, 3, 4, 6]
    assert len(ds.episodes) == 5 and [e.index for e in ds.episodes] == list(range(5))
    want = [90 if i == 3 else lengths[i] for i in kept]
    assert [e.length for e in ds.episodes] == want and len(ds) == sum(want) == summary["frames"]
    record = ds.info["actlab_curation"]
    assert record["episodes_from_source"] == kept
    assert record["trimmed"] == [{"episode": 3, "kept_frames": [10, 100], "of": lengths[3], "why": "--trim"}]
    # the trimmed episode holds the source's frames 10..99
    src_ds = open_dataset(src)
    s3 = src_ds.episodes[3]
    got = ds.column("action")[ds.episodes[2].start : ds.episodes[2].stop]
    assert (got == src_ds.column("action")[s3.start + 10 : s3.start + 100]).all()
    assert main(["data", "doctor", str(out), "--fail-on", "warning"]) == 0  # passes the doctor
    assert not list(tmp_path.glob(".curated*"))  # no temporary directory left


def test_curate_refuses_an_existing_output_and_one_inside_the_input(faulted, tmp_path, capsys):
    src = faulted("duplicate_episode")
    before = tree_hash(src)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    assert main(["data", "curate", str(src), "--out", str(tmp_path / "taken"), "--drop-episodes", "6"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "taken" / "keep.txt").read_text() == "mine"
    for out in (src, src / "meta" / "curated"):
        assert main(["data", "curate", str(src), "--out", str(out), "--drop-episodes", "6"]) == 2
        assert "inside an input" in capsys.readouterr().err
    assert main(["data", "curate", str(src), "--out", str(tmp_path / "x"), "--drop-episodes", "9"]) == 2
    assert "episode 9 is not in the dataset" in capsys.readouterr().err
    assert main(["data", "curate", str(src), "--out", str(tmp_path / "x"), "--trim", "1:5:5"]) == 2
    assert tree_hash(src) == before and not (tmp_path / "x").exists()


def test_curate_min_score_drops_the_duplicate(faulted, tmp_path):
    src = faulted("duplicate_episode")
    assert main(["data", "curate", str(src), "--out", str(tmp_path / "c"), "--min-score", "0.9"]) == 0
    ds = open_dataset(tmp_path / "c")
    assert len(ds.episodes) == 6 and ds.info["actlab_curation"]["removed"][0]["episode"] == 6
    assert examine(tmp_path / "c").problems == []


def test_curate_drops_an_episode_with_nan_the_reader_refuses(sim, tmp_path):
    """A dataset with an error (NaN in episode 1) cannot be opened for training; curate drops it."""
    src = shutil.copytree(sim, tmp_path / "nan")
    path = next((src / "data").rglob("*.parquet"))
    table = pq.read_table(path)
    col = table.column("action").to_pylist()
    row = open_dataset(src).episodes[1].start + 5
    col[row][0] = float("nan")
    i = table.schema.get_field_index("action")
    pq.write_table(
        table.set_column(i, table.schema.field(i), pa.array(col, table.schema.field(i).type)), path
    )
    checksums.record(src, json.loads((src / "meta/info.json").read_text()))
    assert main(["data", "curate", str(src), "--out", str(tmp_path / "no")]) == 2  # kept: refused, named
    assert main(["data", "curate", str(src), "--out", str(tmp_path / "c"), "--drop-episodes", "1"]) == 0
    assert examine(tmp_path / "c").problems == []


def test_train_says_the_recording_warnings_in_one_line(sim, faulted, tmp_path, capsys):
    # A dataset with warnings is trained on (only errors refuse it), but the warnings are said before.
    from actlab.datasets.doctor import warnings_line

    assert warnings_line(sim) is None
    line = warnings_line(faulted("frozen_actions"))
    assert line.startswith("dataset doctor: ") and "frozen_actions (episodes 2)" in line
    args = ["--preset", "tiny", "--set", "steps=1", "--set", "eval.every=0", "--device", "cpu"]
    args += ["--set", "log.plot=false"]  # (the plot is not under test here: it costs a savefig a run)
    out = tmp_path / "run"
    assert main(["train", "--dataset", str(faulted("frozen_actions")), "--out", str(out), *args]) == 0
    assert line in capsys.readouterr().err
    assert main(["train", "--dataset", str(sim), "--out", str(tmp_path / "clean"), *args]) == 0
    assert "dataset doctor:" not in capsys.readouterr().err
