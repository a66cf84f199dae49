"""The LeRobot v3.0 layout on disk: its metadata parsed and checked in one place.

Both readers of a dataset go through this module: :func:`actlab.datasets.open_dataset` with a strict
:class:`Report` (the first error-level problem raises an :class:`ActlabError` naming the check, the file,
the field and the fix) and ``actlab data doctor`` with a collecting one (every problem becomes a
:class:`Problem` record). So the reader refuses exactly what the doctor calls an error.

Only cheap checks live here and in :mod:`actlab.datasets.rows`: ``info.json``, ``tasks.parquet`` and
``meta/episodes/*.parquet`` here (run by :func:`parse`, at open), the tabular columns of the data files
there (run by :func:`read_data`, when the data is first read; every check is a vectorized pass over the
columns). The records both write into are :mod:`actlab.datasets.records`; the names of both modules are
importable from here. Checks that demux or decode video, and the checks of ``meta/stats.json`` (which
training never reads: it computes its own statistics), are the doctor's alone
(:mod:`actlab.datasets.doctor`).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from actlab.datasets import format as fmt
from actlab.datasets.records import (
    EPISODE_COLUMNS,
    EPISODES_GLOB,
    PANDAS_INDEX,
    REEXPORT,
    VIDEO_COLUMNS,
    EpisodeInfo,
    Layout,
    Problem,
    Report,
    is_number_type,
    read_table,
    to_numpy,
)
from actlab.datasets.rows import OUTLIER_SPREADS, Data, read_data
from actlab.errors import ActlabError
from actlab.utils.config import is_whole
from actlab.utils.io import read_json, require_file, special_file_kind
from actlab.utils.kinds import describe

# The names callers import from here: this module's own and those of the two it was split from.
__all__ = [
    "EPISODES_GLOB",
    "EPISODE_COLUMNS",
    "OUTLIER_SPREADS",
    "REEXPORT",
    "VIDEO_COLUMNS",
    "Data",
    "EpisodeInfo",
    "Layout",
    "Problem",
    "Report",
    "check_info_types",
    "check_links",
    "check_tasks",
    "is_number_type",
    "parse",
    "read_data",
    "read_episodes",
    "read_info",
    "read_table",
    "read_tasks",
    "resolve_root",
    "to_numpy",
]


# ---------------------------------------------------------------------------------------- info.json


def _v21_error(root: Path, version: str) -> ActlabError:
    return ActlabError(
        "dataset is in LeRobot format v2.1; actlab (like lerobot 0.6) reads v3.0 only",
        file=root / fmt.INFO_PATH,
        field="codebase_version",
        expected=fmt.CODEBASE_VERSION,
        found=version,
        fix="convert it with lerobot 0.6: python -m lerobot.scripts.convert_dataset_v21_to_v30 "
        "--repo-id=<id> --root=<dir> --push-to-hub=false, then open the converted copy",
    )


def read_info(root: Path) -> dict[str, Any]:
    """``meta/info.json`` checked for the v3.0 layout; v2.1 datasets get the conversion hint.

    Raises the first problem: nothing else can be read without a usable info.json.
    """
    if not root.is_dir():
        if root.exists():  # /dev/null, a FIFO, a file: "not found" would send the user looking elsewhere
            raise ActlabError(
                "the dataset path is not a directory",
                file=root,
                expected=f"a LeRobot v3 dataset directory (with {fmt.INFO_PATH})",
                found=_file_kind(root),
                fix="pass the dataset directory",
            )
        raise ActlabError("dataset directory not found", file=root, fix="check the path")
    if root.name == "meta" and (root.parent / fmt.INFO_PATH).is_file():
        raise ActlabError(
            "this is the meta/ folder of a dataset, not the dataset",
            file=root,
            expected=f"the dataset directory (the one holding {fmt.INFO_PATH})",
            found=f"{root.parent / fmt.INFO_PATH} one level up",
            fix=f"pass {root.parent}",
        )
    if (root / "meta" / "episodes.jsonl").is_file() and not (root / fmt.INFO_PATH).is_file():
        raise _v21_error(root, "v2.x (meta/episodes.jsonl)")
    if os.path.lexists(root / fmt.INFO_PATH) and not (root / fmt.INFO_PATH).is_file():
        # a directory, FIFO, device or dangling link where info.json belongs: named as such here; the kind
        # below was "not a dataset ... found: the output of actlab sim record"
        require_file(
            root / fmt.INFO_PATH, "the dataset's meta/info.json is not a regular file",
            expected="info.json (the dataset's JSON description)",
            fix="restore meta/info.json from a copy of the dataset (or re-record / re-export it)",
        )  # fmt: skip
    kind = describe(root)
    if kind is not None and kind != "a LeRobot dataset":  # a bundle was "dataset info not found"
        raise ActlabError(
            "not a dataset",
            file=root,
            expected=f"a LeRobot v3 dataset directory (with {fmt.INFO_PATH})",
            found=kind,
            fix="pass the dataset directory itself",
        )
    info = read_json(root / fmt.INFO_PATH, "dataset info")
    if not isinstance(info, dict):
        raise _info_error(root, "info.json is not a JSON object", "(top level)", "{...}", type(info).__name__)
    version = str(info.get("codebase_version", "?"))
    if version.startswith("v2") or (root / "meta" / "episodes.jsonl").is_file():
        raise _v21_error(root, version)
    if version != fmt.CODEBASE_VERSION:
        raise ActlabError(
            "unsupported dataset version",
            file=root / fmt.INFO_PATH,
            field="codebase_version",
            expected=fmt.CODEBASE_VERSION,
            found=version,
        )
    for key in ("fps", "features"):
        if key not in info:
            raise ActlabError(
                f"info.json lacks {key!r}",
                file=root / fmt.INFO_PATH,
                field=key,
                expected="present",
                found="missing",
                fix="repair info.json or re-export the dataset",
            )
    check_info_types(info, root)
    return info


def _file_kind(path: Path) -> str:
    """What a path that is not a directory is, in words."""
    st = path.stat()
    return special_file_kind(st.st_mode) or f"a file of {st.st_size} bytes"


def _info_error(root: Path, problem: str, field: str, expected: Any, found: Any) -> ActlabError:
    return ActlabError(
        problem,
        file=root / fmt.INFO_PATH,
        field=field,
        expected=expected,
        found=found,
        fix="repair info.json (LeRobot v3.0 types, docs/datasets.md) or re-export the dataset",
    )


def check_info_types(info: Mapping[str, Any], root: Path) -> None:
    """The types the reader relies on: fps a positive int, features ``{key: {dtype, shape, names}}``,
    path templates that format; raises an :class:`ActlabError` naming the first bad field."""
    fps = info["fps"]
    if not ((is_whole(fps) or (isinstance(fps, float) and fps.is_integer())) and fps > 0):
        raise _info_error(root, "fps must be a positive integer", "fps", "e.g. 30", repr(fps))
    feats = info["features"]
    if not isinstance(feats, dict) or not feats:
        found = f"{type(feats).__name__} {feats!r}"[:80]
        raise _info_error(
            root, "features must be a non-empty object", "features", "{key: {dtype, shape}}", found
        )
    for key, spec in feats.items():
        _check_feature(root, key, spec)
    for key in ("total_episodes", "total_frames", "total_tasks", "chunks_size"):
        if key in info and not (is_whole(info[key]) and info[key] >= 0):
            raise _info_error(root, f"{key} must be a non-negative integer", key, "an int", repr(info[key]))
    for key, names in (("data_path", ("chunk_index", "file_index")), ("video_path", fmt.VIDEO_KEYS)):
        tmpl = info.get(key)
        if tmpl is None:
            continue
        try:
            if not isinstance(tmpl, str):
                raise TypeError
            tmpl.format(**dict.fromkeys(names, 0))
        except (KeyError, IndexError, ValueError, TypeError):
            want = ", ".join("{" + n + "}" for n in names)
            raise _info_error(
                root, f"{key} is not a usable path template", key, f"a string using {want}", repr(tmpl)
            ) from None


def _check_feature(root: Path, key: str, spec: Any) -> None:
    where = f"features.{key}"
    if not isinstance(spec, dict):
        raise _info_error(
            root, f"feature {key!r} is not an object", where, "{dtype, shape, names}", repr(spec)
        )
    dtype, shape = spec.get("dtype"), spec.get("shape")
    if not isinstance(dtype, str):
        found = "missing" if "dtype" not in spec else repr(dtype)
        raise _info_error(
            root, f"feature {key!r} has no dtype string", f"{where}.dtype", "e.g. float32", found
        )
    if dtype not in (*fmt.CAMERA_DTYPES, "string"):
        try:
            np.dtype(dtype)
        except TypeError:
            raise _info_error(
                root,
                f"feature {key!r} has an unknown dtype",
                f"{where}.dtype",
                "a numpy dtype (float32, int64, ...), video, image or string",
                repr(dtype),
            ) from None
    if not (isinstance(shape, list) and all(is_whole(n) and n > 0 for n in shape)):
        found = "missing" if "shape" not in spec else repr(shape)
        raise _info_error(
            root, f"feature {key!r} has a bad shape", f"{where}.shape", "a list of positive ints", found
        )
    if dtype in fmt.CAMERA_DTYPES and len(shape) != 3:
        raise _info_error(
            root,
            f"camera {key!r} needs shape [height, width, channels]",
            f"{where}.shape",
            "[H, W, C]",
            shape,
        )


# ------------------------------------------------------------------------------------------ metadata


def resolve_root(path: str | Path) -> Path:
    """``path`` made absolute with its symlinks resolved; a symlink loop is an ActlabError (pathlib raises
    RuntimeError for it up to Python 3.12 and OSError ELOOP from 3.13)."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError) as e:
        raise ActlabError(
            "the dataset path is a symlink loop (or a chain of links too deep to follow)",
            file=path,
            expected="a LeRobot v3 dataset directory",
            found=str(e),
            fix="point at the real directory (`ls -l` shows where each link goes) or repair the link",
        ) from e


def check_links(root: Path, report: Report) -> None:
    """Every symlink inside the dataset that loops (``meta -> meta``, ``a -> b -> a``) is a problem.

    Without this check a loop reads as a missing file (``is_file()`` is False on ELOOP) and the doctor
    would send the user looking for a file that was never lost. Symlinked directories are not entered:
    a link to an ancestor would make the walk endless, and datasets in the Hugging Face cache link every
    file to a blob elsewhere."""
    for dirpath, dirnames, filenames in os.walk(root):  # followlinks=False
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            if not path.is_symlink():
                continue
            try:
                os.stat(path)
            except OSError as e:
                if e.errno != errno.ELOOP:
                    continue  # a dangling link: the checks of the file it stands for report it missing
                report.add(
                    "symlink_loop",
                    "symlink loop inside the dataset (it reads as a missing file)",
                    path,
                    "(path)",
                    "a link to a file or directory",
                    f"{name} -> {os.readlink(path)}, which leads back to itself",
                    "point the link at the real file or directory (`ls -l` shows where each link goes) "
                    "or replace it with the file or directory itself",
                )


def parse(root: str | Path, report: Report) -> Layout | None:
    """Read and check ``info.json``, the tasks and the episodes metadata (cheap: no data rows).

    Returns None (collecting report only) when the path, info.json or the episodes metadata cannot be
    read.
    """
    resolved = report.stage("symlink_loop", lambda: resolve_root(root))
    if resolved is None:
        return None
    root = resolved
    report.root = root
    if root.is_dir():
        report.stage("symlink_loop", lambda: check_links(root, report))
    info = report.stage("info", lambda: read_info(root))
    if info is None:
        return None
    # the recorder's block, read by training and evaluation: a damaged one is said at every open
    report.stage("sim_record", lambda: fmt.sim_seeds(info, root / fmt.INFO_PATH))
    parsed = report.stage("episodes", lambda: read_episodes(root, info, report))
    if parsed is None:
        return None
    indexed = report.stage("tasks", lambda: read_tasks(root, info, report))
    tasks = None if indexed is None else [t for t, _ in indexed]
    episodes, episodes_file = parsed
    layout = Layout(root, info, tasks or [], episodes, episodes_file, dict(indexed or []))
    if tasks is not None:
        report.stage("tasks", lambda: check_tasks(layout, report))
    return layout


def read_tasks(root: Path, info: Mapping[str, Any], report: Report) -> list[tuple[str, int]] | None:
    """(task string, its ``task_index``) ordered by ``task_index`` (the indices as the file holds them,
    which need not be 0..n-1); None when meta/tasks.parquet is missing (lerobot cannot load such a
    dataset) or its columns are wrong."""
    path = root / fmt.TASKS_PATH
    if not path.is_file():
        report.add(
            "missing_file", "tasks file missing", path, "(file)", "a parquet file", "missing", REEXPORT
        )
        return None
    table = read_table(path, "tasks file")
    names = table.column_names
    # lerobot writes the task strings as the pandas index of the table
    col = "task" if "task" in names else PANDAS_INDEX if PANDAS_INDEX in names else None
    if col is None or "task_index" not in names:
        report.add(
            "missing_column",
            "tasks.parquet lacks the task or task_index column",
            path,
            "columns",
            "task (index) and task_index",
            names,
            REEXPORT,
        )
        return None
    indices = table.column("task_index").to_pylist()
    tasks = table.column(col).to_pylist()
    # a task_index of text or null, or a task that is no text: int()'s ValueError or argsort's TypeError
    # was a traceback in every command that opens the dataset (24th fault run, odd_task_idx_text)
    for what, values, kind, expected in (
        ("task_index", indices, int, "an integer per task"),
        (col, tasks, str, "a text per task"),
    ):
        i = next((i for i, v in enumerate(values) if isinstance(v, bool) or not isinstance(v, kind)), None)
        if i is not None:
            report.add(
                "task_column_type",
                f"tasks.parquet's {what} column holds a value of another type",
                path,
                what,
                expected,
                f"{type(values[i]).__name__}: {values[i]!r}",
                REEXPORT,
            )
            return None
    order = np.argsort(np.asarray(indices))
    return [(tasks[i], int(indices[i])) for i in order]


def check_tasks(layout: Layout, report: Report) -> None:
    """``total_tasks`` agrees with tasks.parquet and every episode's tasks are in it. When episodes name
    tasks that tasks.parquet lacks, tasks.parquet lost them: info.json's count is not blamed (its fix,
    "set total_tasks to the smaller count", would make the dataset agree with the damage)."""
    path = layout.root / fmt.TASKS_PATH
    known = set(layout.tasks)
    total = layout.info.get("total_tasks")
    unknown = next(
        ((e, t) for e in layout.episodes for t in e.tasks if t not in known), None
    )  # the first episode naming a task tasks.parquet lacks
    if total is not None and total != len(known) and unknown is None:
        report.add(
            "length_mismatch",
            "info.json total_tasks disagrees with tasks.parquet",
            layout.root / fmt.INFO_PATH,
            "total_tasks",
            len(known),
            total,
            f"set total_tasks to {len(known)} in info.json",
        )
    if unknown is not None:
        counts = (
            f" (info.json counts {total} task(s), tasks.parquet has {len(known)})"
            if total != len(known)
            else ""
        )
        report.add(
            "unknown_task",
            f"episode {unknown[0].index} names a task missing from tasks.parquet{counts}",
            path,
            "task",
            "one of the tasks in tasks.parquet",
            unknown[1],
            REEXPORT,
        )


def read_episodes(
    root: Path, info: Mapping[str, Any], report: Report
) -> tuple[list[EpisodeInfo], Path] | None:
    """The episodes of ``meta/episodes/*.parquet`` ordered by index, checked: columns and their types,
    indices 0..E-1 without gaps or repeats, lengths vs index ranges, ranges tiling ``[0, N)`` in order,
    video locations, and info.json's totals."""
    import pyarrow as pa

    files = sorted((root / "meta" / "episodes").glob(EPISODES_GLOB))
    if not files:
        report.add(
            "missing_file",
            "no episodes metadata",
            root / "meta" / "episodes",
            "episodes",
            "meta/episodes/chunk-000/file-000.parquet",
            "nothing",
            REEXPORT,
        )
        return None
    tables = []
    for f in files:
        t = read_table(f, "episodes metadata")
        tables.append(t.select([c for c in t.column_names if not c.startswith("stats/")]))
    table = pa.concat_tables(tables, promote_options="default")
    ep_file = files[0]
    missing = [c for c in EPISODE_COLUMNS if c not in table.column_names]
    if missing:
        report.add(
            "missing_column",
            "episodes metadata lacks columns",
            ep_file,
            ", ".join(missing),
            ", ".join(EPISODE_COLUMNS),
            "missing",
            REEXPORT,
        )
        return None
    wrong = [c for c in EPISODE_COLUMNS if not pa.types.is_integer(table.schema.field(c).type)]
    if wrong:
        report.add(
            "missing_column",
            "episodes metadata columns have the wrong type",
            ep_file,
            ", ".join(wrong),
            "int64",
            ", ".join(str(table.schema.field(c).type) for c in wrong),
            REEXPORT,
        )
        return None
    as_written = table.to_pylist()
    rows = sorted(as_written, key=lambda r: r["episode_index"])
    _check_episode_indices([r["episode_index"] for r in rows], ep_file, report)
    _check_episode_order([r["episode_index"] for r in as_written], files, tables, report)
    video_keys = [k for k, f in info["features"].items() if f.get("dtype") == "video"]
    data_tmpl = info.get("data_path") or fmt.DATA_PATH
    video_tmpl = info.get("video_path") or fmt.VIDEO_PATH
    episodes = []
    for r in rows:
        videos = {}
        for key in video_keys:
            cols = [f"videos/{key}/{c}" for c in VIDEO_COLUMNS]
            absent = [c for c in cols if r.get(c) is None]
            if absent:
                report.add(
                    "missing_column",
                    f"episode {r['episode_index']} has no video location for {key}",
                    ep_file,
                    absent[0],
                    "chunk_index, file_index, from_timestamp, to_timestamp of every episode",
                    "missing",
                    REEXPORT,
                )
                continue
            chunk, file, lo, hi = (r[c] for c in cols)
            videos[key] = (
                video_tmpl.format(video_key=key, chunk_index=chunk, file_index=file),
                float(lo),
                float(hi),
            )
        episodes.append(
            EpisodeInfo(
                index=int(r["episode_index"]),
                length=int(r["length"]),
                start=int(r["dataset_from_index"]),
                stop=int(r["dataset_to_index"]),
                tasks=tuple(r.get("tasks") or ()),
                videos=videos,
                data_file=data_tmpl.format(
                    chunk_index=r.get("data/chunk_index") or 0, file_index=r.get("data/file_index") or 0
                ),
            )
        )
    _check_partition(episodes, ep_file, report)
    _check_totals(root, info, episodes, report)
    return episodes, ep_file


def _check_episode_indices(indices: list[int], file: Path, report: Report) -> None:
    """LeRobot looks episodes up by position (``meta.episodes[episode_index]``), so the indices must be
    exactly 0..E-1: a gap or a repeat makes it read another episode's metadata."""
    arr = np.asarray(indices, dtype=np.int64)
    bad = np.flatnonzero(arr != np.arange(len(arr)))
    if bad.size:
        i = int(bad[0])
        what = "repeated" if i > 0 and arr[i] == arr[i - 1] else "a gap"
        report.add(
            "episode_index",
            f"episode indices are not 0..{len(arr) - 1} ({what} at episode {int(arr[i])})",
            file,
            "episode_index",
            f"{i} at position {i}",
            f"{int(arr[i])} (indices {arr[max(i - 2, 0) : i + 2].tolist()}...)",
            "renumber the episodes 0..E-1 in meta/episodes and the data files' episode_index "
            "(or re-export the dataset)",
        )


def _check_episode_order(written: list[int], files: list[Path], tables: list, report: Report) -> None:
    """The rows of meta/episodes in episode order: LeRobot reads row ``i`` (files in name order) as episode
    ``i``, so rows 0..E-1 holding the episodes in another order made it read one episode's frame range and
    video times for another while every check here passed (they sorted the rows first)."""
    for pos, ep in enumerate(written):
        if ep == pos:
            continue
        if sorted(written) != list(range(len(written))):
            return  # gaps or repeats: _check_episode_indices names those
        at, file = pos, files[0]
        for f, t in zip(files, tables):  # the file that holds this row
            if at < t.num_rows:
                file = f
                break
            at -= t.num_rows
        report.add(
            "episode_index",
            f"the episodes metadata holds its rows out of episode order (row {pos} is episode {ep})",
            file,
            "episode_index",
            f"row {pos} holding episode {pos} (LeRobot reads row i as episode i)",
            f"episode {ep} at row {pos} (rows in order: {written[max(pos - 2, 0) : pos + 3]}...)",
            "write the rows sorted by episode_index (e.g. table.sort_by('episode_index') with pyarrow, then "
            "pq.write_table), or re-export the dataset",
        )
        return


def _check_partition(episodes: list[EpisodeInfo], file: Path, report: Report) -> None:
    """Episodes must tile ``[0, N)`` in order: rows of the data table are global indices, and the
    per-frame episode borders (windows, stats) are filled from these ranges."""
    expected = 0
    for e in episodes:
        if e.start != expected:
            report.add(
                "length_mismatch",
                f"episode {e.index} does not continue the frame range of the episodes before it",
                file,
                f"episode {e.index}: dataset_from_index",
                f"{expected} (where the previous episode ends)",
                e.start,
                REEXPORT,
            )
        span = e.stop - e.start
        if span != e.length or e.length < 1:
            report.add(
                "length_mismatch",
                f"episode {e.index}: length differs from its index range",
                file,
                f"episode {e.index}: length",
                f"dataset_to_index - dataset_from_index = {span} (>= 1)",
                e.length,
                REEXPORT,
            )
        expected = e.stop


def _check_totals(root: Path, info: Mapping[str, Any], episodes: list[EpisodeInfo], report: Report) -> None:
    total = sum(e.length for e in episodes)
    for key, want in (("total_episodes", len(episodes)), ("total_frames", total)):
        if key in info and info[key] != want:
            report.add(
                "length_mismatch",
                f"info.json {key} disagrees with the episodes metadata",
                root / fmt.INFO_PATH,
                key,
                want,
                info[key],
                f"set {key} to {want} in info.json",
            )
