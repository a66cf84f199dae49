"""Damaged inputs that used to give wrong results without a word (the second fault run's "silently
wrong" rows, docs/faults.md): each is planted in a real dataset file and must now be an error of the
doctor and a refusal of the trainer."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from actlab.cli import main
from actlab.datasets import FrameStore, checksums, open_dataset
from actlab.datasets.doctor import diagnose
from actlab.datasets.video import VideoEncoder, VideoOptions, iter_decode
from actlab.errors import ActlabError

DATA = "data/chunk-000/file-000.parquet"
VIDEO = "videos/observation.images.top/chunk-000/file-000.mp4"


@pytest.fixture
def copy(tiny_dataset, tmp_path):
    return shutil.copytree(tiny_dataset, tmp_path / "ds")


def _errors(root) -> dict[str, list]:
    out: dict[str, list] = {}
    for p in diagnose(root):
        if p.severity == "error":
            out.setdefault(p.check, []).append(p)
    return out


def _set_action(root, row: int, dim: int, value: float) -> None:
    """Rewrite the data file with one action value changed: a glitch at recording, so the content
    checksums are recorded again for the file as it is now (a damaged copy is another test)."""
    table = pq.read_table(root / DATA)
    actions = np.asarray(table.column("action").to_pylist(), dtype=np.float32)
    actions[row, dim] = value
    field = table.schema.field("action")
    arr = pa.array([list(map(float, a)) for a in actions], type=field.type)
    pq.write_table(table.set_column(table.schema.get_field_index("action"), field, arr), root / DATA)
    checksums.record(root, json.loads((root / "meta/info.json").read_text()))


def _train_refuses(root, tmp_path, capsys, *words) -> None:
    out = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--dataset", str(root), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and all(w in err for w in words), err
    assert not out.exists()


def test_bytes_overwritten_inside_a_data_page_are_an_error_not_values(copy, tmp_path, capsys):
    """Before: no page checksums, so pyarrow read the overwritten bytes as values (-3.7e37 actions) and
    the doctor said 0 problems. Now the writer stores a CRC per page and the reader verifies it."""
    raw = (copy / DATA).read_bytes()
    clean = pq.read_table(copy / DATA)
    silent = None  # an offset whose damage a reader without verification takes for values
    for at in range(64, len(raw) - 64, 37):
        damaged = bytearray(raw)
        damaged[at : at + 4] = b"\xff\xfe\x7f\xfa"
        (copy / DATA).write_bytes(bytes(damaged))
        try:
            if not pq.read_table(copy / DATA).equals(clean):
                silent = at
                break
        except Exception:
            continue
    assert silent is not None, "no damage that reads as values: the planted fault is not the issue's"
    with pytest.raises(Exception, match="(?i)crc|checksum"):
        pq.read_table(copy / DATA, page_checksum_verification=True)
    assert "unreadable" in _errors(copy)
    _train_refuses(copy, tmp_path, capsys, "file-000.parquet")


def test_a_servo_glitch_is_an_outlier_for_the_doctor_and_the_trainer(copy, tmp_path, capsys):
    """One finite value of 1e30 (a servo read error) trained to an action std of 8e36 before."""
    _set_action(copy, 7, 2, 1e30)
    (p,) = _errors(copy)["outlier"]
    assert p.field == "action" and "1e+30" in p.found and "episode 0, dim 2" in p.found
    _train_refuses(copy, tmp_path, capsys, "outlier", "action")


def test_a_rare_real_motion_is_not_an_outlier(copy):
    """A joint that holds still in 99% of the frames and moves once by 90 (degrees) is a motion: the
    threshold is 1000 spreads, and the spread is at least 1 unit."""
    table = pq.read_table(copy / DATA)
    n = table.num_rows
    actions = np.asarray(table.column("action").to_pylist(), dtype=np.float32)
    actions[:, 4] = 0.0
    actions[n // 2, 4] = 90.0
    field = table.schema.field("action")
    arr = pa.array([list(map(float, a)) for a in actions], type=field.type)
    pq.write_table(table.set_column(table.schema.get_field_index("action"), field, arr), copy / DATA)
    assert "outlier" not in _errors(copy)


def test_a_video_longer_than_its_episodes_is_found(copy):
    """30 frames appended to the video (5.0 s where the metadata says 4.0 s): every episode still finds
    its own frames, so the per-episode counts passed."""
    frames = np.stack([img for _, img in iter_decode(copy / VIDEO)])
    enc = VideoEncoder(copy / VIDEO, 32, 32, 30, VideoOptions())
    enc.encode(np.concatenate([frames, frames[:30]]))
    enc.close()
    (p,) = [p for p in _errors(copy)["video_frames"] if "belong to no episode" in p.problem]
    assert p.found.startswith("150 frames (5.000 s)") and p.expected.startswith("120 frames (4.000 s)")


def test_damaged_video_bytes_are_found_before_they_are_decoded(copy, tmp_path):
    """Overwritten bytes inside an mp4 mostly decode into wrong pixels without an error: the sha256 the
    writer recorded finds them (doctor), and the FrameStore refuses to decode such a video."""
    raw = bytearray((copy / VIDEO).read_bytes())
    raw[len(raw) // 3 : len(raw) // 3 + 16] = bytes(range(16))
    (copy / VIDEO).write_bytes(bytes(raw))
    (p,) = _errors(copy)["checksum"]
    assert p.file.endswith(VIDEO)
    with pytest.raises(ActlabError, match="video file is damaged") as e:
        FrameStore.build(open_dataset(copy), cache_dir=tmp_path / "cache", progress=False)
    assert "actlab data doctor" in e.value.fix


def test_a_checksum_record_of_other_totals_is_stale_and_only_noted(copy):
    """A dataset edited by another tool since (its totals changed) is not failed by a record of before."""
    record = copy / "meta/actlab_checksums.json"
    data = json.loads(record.read_text())
    data["total_frames"] += 1
    record.write_text(json.dumps(data))
    (p,) = [p for p in diagnose(copy) if p.check == "checksum"]
    assert p.severity == "note" and "stale" in p.found


def test_stats_json_that_disagrees_with_the_data_is_found(copy):
    """LeRobot normalizes with meta/stats.json: a std changed there trains it on wrongly scaled inputs."""
    stats = json.loads((copy / "meta/stats.json").read_text())
    stats["action"]["std"][3] *= 10
    (copy / "meta/stats.json").write_text(json.dumps(stats))
    (p,) = _errors(copy)["stats_mismatch"]
    assert p.field == "action.mean/std" and "dim 3" in p.found and "--write-meta" in p.fix


def test_an_edited_stats_cache_entry_is_recomputed_not_used(tiny_dataset, tmp_path):
    """The trainer's stats cache (keyed by the dataset's fingerprint) parsed fine after an edit in place
    and its numbers normalized the next policy; now its digest no longer matches and it is recomputed."""
    from actlab.datasets import compute_stats

    ds = open_dataset(tiny_dataset)
    first = compute_stats(ds, cache_dir=tmp_path)
    (entry,) = tmp_path.glob("*.json")
    data = json.loads(entry.read_text())
    data["action"]["std"] = [s * 100 for s in data["action"]["std"]]
    entry.write_text(json.dumps(data))
    again = compute_stats(ds, cache_dir=tmp_path)
    assert np.allclose(again["action"]["std"], first["action"]["std"])
