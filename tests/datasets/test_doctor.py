"""Each doctor check proven on a real dataset file corrupted that way; a clean dataset passes."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from actlab.cli import main
from actlab.datasets.doctor import diagnose
from actlab.datasets.video import VideoEncoder, VideoOptions, iter_decode
from actlab.datasets.writer import _tasks_table

DATA = "data/chunk-000/file-000.parquet"
VIDEO = "videos/observation.images.top/chunk-000/file-000.mp4"


@pytest.fixture
def copy(tiny_dataset, tmp_path):
    return shutil.copytree(tiny_dataset, tmp_path / "ds")


def _rewrite_column(root, column, fn):
    path = root / DATA
    table = pq.read_table(path)
    values = fn(np.asarray(table.column(column).to_pylist(), dtype=object))
    field = table.schema.field(column)
    typ = field.type
    arr = pa.array(
        [list(map(float, v)) if isinstance(v, (list, np.ndarray)) else v for v in values], type=typ
    )
    pq.write_table(table.set_column(table.schema.get_field_index(column), field, arr), path)


def _rewrite_stats(root, fn):
    path = root / "meta/stats.json"
    stats = json.loads(path.read_text())
    fn(stats)
    path.write_text(json.dumps(stats))


def _structural_errors(root):
    """The errors besides the content checksum, which any rewrite of a data file also fails."""
    return [p for p in diagnose(root) if p.severity == "error" and p.check != "checksum"]


def _checks(root):
    return {p.check for p in diagnose(root) if p.severity == "error"}


def test_clean_dataset_has_no_problems(tiny_dataset, capsys):
    assert [p for p in diagnose(tiny_dataset) if p.severity == "error"] == []
    assert main(["data", "doctor", str(tiny_dataset), "--json", "--fail-on", "warning"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["problems"] == [] and out["counts"] == {"error": 0, "warning": 0, "note": 0}
    assert [e["score"] for e in out["episodes"]] == [1.0, 1.0, 1.0]


def test_nan(copy):
    def poison(rows):
        rows[5] = [float("nan"), *list(rows[5][1:])]
        return rows

    _rewrite_column(copy, "observation.state", poison)
    (p,) = [p for p in diagnose(copy) if p.check == "nan"]
    assert p.field == "observation.state" and "frame 5" in p.found and p.file.endswith(DATA)


def test_length_mismatch_when_rows_are_missing(copy):
    path = copy / DATA
    table = pq.read_table(path)
    pq.write_table(table.slice(0, table.num_rows - 3), path)  # a truncated recording
    problems = [p for p in diagnose(copy) if p.check == "length_mismatch"]
    fields = {p.field for p in problems}
    assert "rows" in fields and "episode 2: rows" in fields
    assert any(p.expected == "40" and p.found == "37" for p in problems)


def test_non_monotonic_timestamps(copy):
    def swap(ts):
        ts[3], ts[4] = ts[4], ts[3]
        return ts

    _rewrite_column(copy, "timestamp", swap)
    msgs = [p.problem for p in diagnose(copy) if p.check == "timestamps"]
    assert any("not increasing" in m for m in msgs)


def test_off_grid_timestamps(copy):
    def shift(ts):
        ts[50] = ts[50] + 0.01
        return ts

    _rewrite_column(copy, "timestamp", shift)
    (p,) = [p for p in diagnose(copy) if p.check == "timestamps"]
    assert "off the 1/fps grid" in p.problem and "episode 1" in p.problem


def test_missing_video_and_data_files(copy):
    (copy / VIDEO).unlink()
    assert any(p.check == "missing_file" and p.file.endswith(VIDEO) for p in diagnose(copy))
    (copy / DATA).unlink()
    assert any(p.check == "missing_file" and p.file.endswith(DATA) for p in diagnose(copy))


def test_video_frame_count_vs_episode_length(copy):
    frames = np.stack([img for _, img in iter_decode(copy / VIDEO)])[:100]  # 20 frames short
    enc = VideoEncoder(copy / VIDEO, 32, 32, 30, VideoOptions())
    enc.encode(frames)
    enc.close()
    (p,) = [p for p in diagnose(copy) if p.check == "video_frames"]
    assert p.expected == "40 frames" and p.found == "20" and "episode 2" in p.problem


def test_degenerate_image_stats(copy):
    _rewrite_stats(copy, lambda s: s["observation.images.top"].update(std=[[[0.002]], [[0.3]], [[0.3]]]))
    (p,) = [p for p in diagnose(copy) if p.check == "degenerate_stats"]
    assert "±250" in p.found and "--write-meta" in p.fix


def test_missing_image_stats_and_the_fix_works(copy, capsys):
    _rewrite_stats(copy, lambda s: s.pop("observation.images.top"))
    assert _checks(copy) == {"missing_image_stats"}
    assert main(["data", "doctor", str(copy), "--json"]) == 1
    records = json.loads(capsys.readouterr().out)["problems"]
    assert set(records[0]) >= {"file", "field", "expected", "found", "fix"}
    assert main(["data", "stats", str(copy), "--write-meta"]) == 0  # the fix the doctor names
    assert _checks(copy) == set()


def test_never_crashes_on_garbage(tmp_path, capsys):
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta/info.json").write_text("{not json")
    assert main(["data", "doctor", str(tmp_path)]) == 1
    assert "not valid JSON" in capsys.readouterr().out
    assert main(["data", "doctor", str(tmp_path / "nope")]) == 1
    bad = tmp_path / "bad"
    (bad / "meta/episodes/chunk-000").mkdir(parents=True)
    feats = {"action": {"dtype": "float32", "shape": [2], "names": None}}
    (bad / "meta/info.json").write_text(
        json.dumps({"codebase_version": "v3.0", "fps": 30, "features": feats})
    )
    (bad / "meta/episodes/chunk-000/file-000.parquet").write_bytes(b"garbage")
    problems = diagnose(bad)
    assert problems and problems[0].check == "episodes"


EPISODES = "meta/episodes/chunk-000/file-000.parquet"


def _edit_info(**changes):
    def edit(root):
        path = root / "meta/info.json"
        info = json.loads(path.read_text())
        for dotted, value in changes.items():
            *parents, last = dotted.split("/")
            node = info
            for p in parents:
                node = node[p]
            if value is _DELETE:
                node.pop(last)
            else:
                node[last] = value
        path.write_text(json.dumps(info))

    return edit


_DELETE = object()


def _truncate(rel):
    def edit(root):
        data = (root / rel).read_bytes()
        (root / rel).write_bytes(data[: len(data) // 2])

    return edit


def _retype_episode_length(root):
    table = pq.read_table(root / EPISODES)
    i = table.column_names.index("length")
    pq.write_table(table.set_column(i, "length", pa.array([str(v) for v in table.column(i).to_pylist()])),
                   root / EPISODES)  # fmt: skip


@pytest.mark.parametrize(
    ("edit", "file", "field"),
    [
        (_edit_info(fps="30"), "meta/info.json", "fps"),
        (_edit_info(fps=30.5), "meta/info.json", "fps"),
        (_edit_info(features=[1, 2]), "meta/info.json", "features"),
        (_edit_info(**{"features/action/shape": "6"}), "meta/info.json", "features.action.shape"),
        (_edit_info(**{"features/action/dtype": _DELETE}), "meta/info.json", "features.action.dtype"),
        (_edit_info(data_path="data/{oops}.parquet"), "meta/info.json", "data_path"),
        (_truncate(DATA), DATA, "(file)"),
        (_truncate(EPISODES), EPISODES, "(file)"),
        (_truncate(VIDEO), VIDEO, "(file)"),
        (lambda root: (root / "meta/tasks.parquet").write_bytes(b"garbage"), "meta/tasks.parquet", "(file)"),
        (lambda root: (root / "meta/stats.json").write_text("{bad"), "meta/stats.json", "(file)"),
        (_retype_episode_length, EPISODES, "length"),
    ],
)
def test_broken_inputs_are_located_precisely(copy, edit, file, field, capsys):
    edit(copy)
    problems = [p for p in diagnose(copy) if p.severity == "error"]
    assert problems
    for p in problems:  # every record is complete and none is the catch-all "check could not run"
        assert all(
            getattr(p, f) not in ("", "-", "None") for f in ("file", "field", "expected", "found", "fix")
        )
        assert "could not run" not in p.problem
    assert any(p.file == str((copy / file).resolve()) and p.field == field for p in problems), problems
    assert main(["data", "doctor", str(copy)]) == 1
    assert "Traceback" not in capsys.readouterr().out


def test_tasks_table_must_name_every_episode_task(copy):
    pq.write_table(_tasks_table(["something else", "and another"]), copy / "meta/tasks.parquet")
    problems = {p.check: p for p in diagnose(copy)}
    assert problems["unknown_task"].found == "move the square"
    # tasks.parquet is the damaged file: info.json's count is said there, not blamed ("set total_tasks to 2").
    assert "info.json counts 1 task(s), tasks.parquet has 2" in problems["unknown_task"].problem
    assert "length_mismatch" not in problems


# ---- faults the doctor used to miss, and the reader refusing what the doctor calls an error ----------


def _set_int_column(path, column, fn):
    table = pq.read_table(path)
    i = table.column_names.index(column)
    values = fn(np.asarray(table.column(i).to_pylist(), dtype=np.int64))
    pq.write_table(table.set_column(i, table.schema.field(i), pa.array(values, pa.int64())), path)


def _action_as_strings(root):
    table = pq.read_table(root / DATA)
    i = table.column_names.index("action")
    text = [[repr(float(x)) for x in row] for row in table.column(i).to_pylist()]  # "0.25", numbers as text
    pq.write_table(table.set_column(i, "action", pa.array(text, pa.list_(pa.string()))), root / DATA)


def _episode_index_gap(root):
    # episodes 0, 1, 3: renumbered consistently in the episodes metadata and in the data rows
    for rel in (EPISODES, DATA):
        _set_int_column(root / rel, "episode_index", lambda e: np.where(e == 2, 3, e))


def _unlisted_column(root):
    table = pq.read_table(root / DATA)
    effort = pa.array(np.ones(table.num_rows, dtype=np.float32))
    pq.write_table(table.append_column("observation.effort", effort), root / DATA)


def _rows_reversed_in_episode_1(root):
    table = pq.read_table(root / DATA)
    order = np.arange(table.num_rows)
    order[40:80] = order[40:80][::-1]
    pq.write_table(table.take(order), root / DATA)


def _rows_of_two_episodes_swapped(root):
    # every row keeps its own frame_index/timestamp; episode 1's rows now sit where episode 0's belong
    table = pq.read_table(root / DATA)
    pq.write_table(table.take(np.r_[40:80, 0:40, 80:120]), root / DATA)


def test_numbers_stored_as_text_are_found(copy):
    _action_as_strings(copy)
    (p,) = _structural_errors(copy)
    assert (p.check, p.field) == ("dtype", "action") and "string" in p.found and p.file.endswith(DATA)


def test_gap_in_episode_indices_is_found(copy):
    _episode_index_gap(copy)
    (p,) = _structural_errors(copy)
    assert p.check == "episode_index" and "gap at episode 3" in p.problem and p.file.endswith(EPISODES)


def test_column_missing_from_info_json_is_found(copy):
    _unlisted_column(copy)
    (p,) = _structural_errors(copy)
    assert (p.check, p.field) == ("unlisted_column", "observation.effort") and "info.json" in p.fix


def test_rows_of_another_episode_are_found(copy):
    _rows_of_two_episodes_swapped(copy)
    assert "row_order" in _checks(copy)


_OPEN_FAULTS = {  # found by the metadata checks at open_dataset
    "gap": _episode_index_gap,
    "total_frames": _edit_info(total_frames=7),
    "unknown_task": lambda root: pq.write_table(_tasks_table(["other"]), root / "meta/tasks.parquet"),
    "no_tasks": lambda root: (root / "meta/tasks.parquet").unlink(),
}
_DATA_FAULTS = {  # found by the checks on the data rows (check_data, or the first column read)
    "strings": _action_as_strings,
    "unlisted": _unlisted_column,
    "reversed": _rows_reversed_in_episode_1,
    "swapped": _rows_of_two_episodes_swapped,
    "truncated": lambda root: pq.write_table(pq.read_table(root / DATA).slice(0, 100), root / DATA),
    "nan": lambda root: _rewrite_column(root, "action", lambda r: [*r[:7], [float("inf")] * 6, *r[8:]]),
    "off_grid": lambda root: _rewrite_column(root, "timestamp", lambda t: [*t[:50], t[50] + 0.01, *t[51:]]),
}


@pytest.mark.parametrize("name", [*_OPEN_FAULTS, *_DATA_FAULTS])
def test_the_reader_refuses_what_the_doctor_calls_an_error(copy, name):
    from actlab.datasets import open_dataset
    from actlab.errors import ActlabError

    (_OPEN_FAULTS | _DATA_FAULTS)[name](copy)
    errors = _checks(copy)
    assert errors
    with pytest.raises(ActlabError) as e:
        ds = open_dataset(copy)
        assert name in _DATA_FAULTS  # metadata faults raise at open
        ds.check_data()
    # the reader's first error is one the doctor reports: the same check on the same parse
    assert len([c for c in errors if f"check `{c}`" in e.value.problem]) == 1
    assert str(copy.resolve()) in e.value.problem and "actlab data doctor" in e.value.fix
    assert e.value.file.startswith(str(copy.resolve())) and e.value.field


def test_a_clean_dataset_opens_and_checks(tiny_dataset):
    from actlab.datasets import open_dataset

    ds = open_dataset(tiny_dataset)
    ds.check_data()
    assert ds.column("action").shape == (120, 6)


# ------------------------------------------------------------------------------------------ symlink loops
def test_a_dataset_path_that_is_a_symlink_loop_is_a_problem_not_a_crash(tmp_path, capsys):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    problems = diagnose(loop)
    assert [p.check for p in problems] == ["symlink_loop"]
    assert problems[0].file == str(loop) and "symlink loop" in problems[0].problem
    assert "the real directory" in problems[0].fix
    assert main(["data", "doctor", str(loop)]) == 1
    out = capsys.readouterr().out
    assert "symlink_loop" in out and str(loop) in out
    assert main(["data", "doctor", str(loop), "--json"]) == 1
    assert [p["check"] for p in json.loads(capsys.readouterr().out)["problems"]] == ["symlink_loop"]


@pytest.mark.parametrize("name", ["meta", "data", "videos", "meta/info.json"])
def test_a_symlink_loop_inside_the_dataset_is_named_by_the_doctor_and_the_reader(copy, name, capsys):
    from actlab.datasets import open_dataset
    from actlab.errors import ActlabError

    link = copy / name
    shutil.rmtree(link) if link.is_dir() else link.unlink()
    link.with_name("other").symlink_to(link.name)  # a loop of two links: name -> other -> name
    link.symlink_to("other")
    loops = [p for p in diagnose(copy) if p.check == "symlink_loop"]
    assert sorted(p.file for p in loops) == sorted([str(link), str(link.with_name("other"))])
    assert all("symlink loop" in p.problem and p.severity == "error" for p in loops)
    assert main(["data", "doctor", str(copy)]) == 1
    assert "symlink_loop" in capsys.readouterr().out
    with pytest.raises(ActlabError, match="check `symlink_loop`"):  # the reader runs the same check
        open_dataset(copy)


def test_a_timestamp_gap_says_frames_were_dropped(copy):
    """Frames 20.. of episode 1 stamped 3 frames late (the recorder lost 3 frames): the fix trims or
    drops, and never rewrites the timestamps (which would pair every later frame with the wrong time)."""

    def late(ts):
        ep1 = slice(40 + 20, 80)  # tiny_dataset: 3 episodes of 40 frames
        for i in range(ep1.start, ep1.stop):
            ts[i] = ts[i] + 3 / 30
        return ts

    _rewrite_column(copy, "timestamp", late)
    (p,) = [p for p in diagnose(copy) if p.check == "timestamps"]
    assert "3 frame(s) dropped after frame 19" in p.problem and p.episodes == (1,)
    assert "--trim 1:0:20" in p.fix and "--drop-episodes 1" in p.fix and "frame_index / fps" not in p.fix


def test_an_fps_mismatch_suggests_the_fps_the_timestamps_show(copy):
    info = json.loads((copy / "meta/info.json").read_text())
    info["fps"] = 15  # recorded at 30
    (copy / "meta/info.json").write_text(json.dumps(info))
    found = [p for p in diagnose(copy) if p.check == "timestamps"]
    assert [p.episodes for p in found] == [(0,), (1,), (2,)]
    assert "advance at 30 fps, info.json says 15" in found[0].problem
    assert "set fps to 30 in info.json" in found[0].fix
