"""The LeRobot v3.0 layout on disk, parsed and checked in one place.

Both readers of a dataset go through these functions: :func:`actlab.datasets.open_dataset` with a strict
:class:`Report` (the first error-level problem raises an :class:`ActlabError` naming the check, the file,
the field and the fix) and ``actlab data doctor`` with a collecting one (every problem becomes a
:class:`Problem` record). So the reader refuses exactly what the doctor calls an error.

Only cheap checks live here: ``info.json``, ``tasks.parquet``, ``meta/episodes/*.parquet`` (run by
:func:`parse`, at open) and the tabular columns of the data files (run by :func:`read_data`, when the data
is first read; every check is a vectorized pass over the columns). Checks that demux or decode video, and
the checks of ``meta/stats.json`` (which training never reads: it computes its own statistics), are the
doctor's alone (:mod:`actlab.datasets.doctor`).
"""

from __future__ import annotations

import dataclasses
import errno
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from actlab.datasets import format as fmt
from actlab.errors import ActlabError
from actlab.utils.io import read_json

T = TypeVar("T")

REEXPORT = "re-export or re-record the dataset (or restore the file from a backup)"
EPISODES_GLOB = "chunk-*/file-*.parquet"
# Columns of meta/episodes/*.parquet every episode needs.
EPISODE_COLUMNS = ("episode_index", "length", "dataset_from_index", "dataset_to_index")
# Per camera, the columns of meta/episodes/*.parquet that locate an episode in its video file.
VIDEO_COLUMNS = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
# Columns pandas adds when a table is written with its index; not data.
_PANDAS_INDEX = "__index_level_0__"


# ------------------------------------------------------------------------------------------ records


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset, with where it is and how to fix it."""

    # Short id of the check that found it (e.g. "nan", "missing_file", "video_frames").
    check: str
    # One-line description.
    problem: str
    # File the problem is in (absolute path).
    file: str
    # Column, feature or metadata key concerned.
    field: str
    # What a healthy dataset has there.
    expected: str
    # What this dataset has.
    found: str
    # How to repair it.
    fix: str
    # "error" (training would be wrong or fail) or "warning" (suspicious, exit code unaffected).
    severity: str = "error"

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)

    def render(self) -> str:
        return (
            f"[{self.severity}] {self.check}: {self.problem}\n  file:     {self.file}\n"
            f"  field:    {self.field}\n  expected: {self.expected}\n  found:    {self.found}\n"
            f"  fix:      {self.fix}"
        )


class Report:
    """Where the checks put what they find.

    ``strict=True`` (the reader): an error-level problem raises at once as an :class:`ActlabError`
    naming the dataset, the check and the fix; warnings are kept. ``strict=False`` (the doctor): every
    problem is collected, and a stage that cannot go on (an unreadable file) becomes a problem too.
    """

    def __init__(self, root: Path, strict: bool) -> None:
        self.root = root
        self.strict = strict
        self.problems: list[Problem] = []

    def add(
        self,
        check: str,
        problem: str,
        file: Path | str,
        field: str,
        expected: Any,
        found: Any,
        fix: str,
        severity: str = "error",
    ) -> None:
        p = Problem(check, problem, str(file), field, str(expected), str(found), fix, severity)
        if self.strict and severity == "error":
            raise ActlabError(
                f"dataset {self.root} fails the check `{check}`: {problem}",
                file=p.file,
                field=p.field,
                expected=p.expected,
                found=p.found,
                fix=f"{fix} (`actlab data doctor {self.root}` lists every problem)",
            )
        self.problems.append(p)

    def stage(self, name: str, fn: Callable[[], T]) -> T | None:
        """Run one stage of checks. Strict: errors propagate. Collecting: an ActlabError (an unreadable
        file, say) becomes a problem of check ``name`` and the stage returns None; so does any other
        exception, as "check could not run" (the doctor never raises on a broken dataset)."""
        if self.strict:
            return fn()
        try:
            return fn()
        except ActlabError as e:
            self.add(
                name,
                e.problem,
                e.file or self.root,
                e.field or "(file)",
                "a readable dataset" if e.expected is None else e.expected,
                "unreadable" if e.found is None else e.found,
                e.fix or REEXPORT,
            )
        except Exception as e:
            self.add(
                name,
                f"check could not run: {type(e).__name__}: {e}",
                self.root,
                "-",
                "a readable dataset",
                "unreadable",
                REEXPORT,
            )
        return None


@dataclasses.dataclass(frozen=True)
class EpisodeInfo:
    """One episode: its index, length, global frame range ``[start, stop)`` and tasks."""

    # Episode index as stored in the dataset.
    index: int
    # Number of frames.
    length: int
    # First global frame index (row of the data table).
    start: int
    # One past the last global frame index.
    stop: int
    # Task strings of the episode.
    tasks: tuple[str, ...]
    # Per camera key: (video file path relative to root, from_timestamp, to_timestamp).
    videos: Mapping[str, tuple[str, float, float]] = dataclasses.field(default_factory=dict)
    # Data parquet path relative to root.
    data_file: str = ""


@dataclasses.dataclass
class Layout:
    """The parsed metadata of a dataset (what :func:`parse` read)."""

    # dataset root (absolute)
    root: Path
    # meta/info.json, types checked
    info: dict[str, Any]
    # task strings ordered by task_index (empty when meta/tasks.parquet is unusable: doctor only)
    tasks: list[str]
    # episodes ordered by episode_index
    episodes: list[EpisodeInfo]
    # the first meta/episodes parquet (where episode problems are reported)
    episodes_file: Path

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        return self.info["features"]

    @property
    def frames(self) -> int:
        return self.episodes[-1].stop if self.episodes else 0

    def data_files(self) -> list[Path]:
        """The data parquet files of the episodes, in chunk/file order (rows are global indices)."""
        return [self.root / rel for rel in sorted({e.data_file for e in self.episodes})]


# --------------------------------------------------------------------------------------- file access


def read_table(path: Path, what: str, columns: Sequence[str] | None = None):
    """A parquet file as a pyarrow Table, or an ActlabError naming the file (missing or unreadable)."""
    import pyarrow.parquet as pq

    if not path.is_file():
        raise ActlabError(
            f"{what} missing",
            file=path,
            field="(file)",
            expected="a parquet file",
            found="missing",
            fix="restore the file or re-export the dataset",
        )
    try:
        # page_checksum_verification: pages written with a CRC (actlab writes them) are checked, so
        # bytes overwritten on disk are an error, not values of -3.7e37; pages without one are read as is.
        return pq.read_table(
            path, columns=list(columns) if columns else None, page_checksum_verification=True
        )
    except Exception as e:  # pyarrow raises several types for damaged files
        raise ActlabError(
            f"cannot read {what}",
            file=path,
            field="(file)",
            expected="a readable parquet file",
            found=f"{type(e).__name__}: {e}",
            fix="restore or re-export the file",
        ) from e


def _value_type(typ):
    """The element type of a (nested) list type; the type itself otherwise."""
    import pyarrow as pa

    while pa.types.is_list(typ) or pa.types.is_fixed_size_list(typ) or pa.types.is_large_list(typ):
        typ = typ.value_type
    return typ


def is_number_type(typ) -> bool:
    """True when a parquet column of this type holds numbers (possibly in lists), not text."""
    import pyarrow as pa

    v = _value_type(typ)
    return pa.types.is_integer(v) or pa.types.is_floating(v) or pa.types.is_boolean(v)


def to_numpy(col, shape: Sequence[int], dtype: str) -> np.ndarray:
    """A parquet column (scalar, list or fixed_size_list) as an (N, *shape) array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    n = len(col)
    while (
        pa.types.is_list(col.type)
        or pa.types.is_fixed_size_list(col.type)
        or pa.types.is_large_list(col.type)
    ):
        col = pc.list_flatten(col)
    flat = col.to_numpy(zero_copy_only=False)
    return np.asarray(flat, dtype=dtype).reshape(n, *shape)


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
        raise ActlabError("dataset directory not found", file=root, fix="check the path")
    if (root / "meta" / "episodes.jsonl").is_file() and not (root / fmt.INFO_PATH).is_file():
        raise _v21_error(root, "v2.x (meta/episodes.jsonl)")
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


def _info_error(root: Path, problem: str, field: str, expected: Any, found: Any) -> ActlabError:
    return ActlabError(
        problem,
        file=root / fmt.INFO_PATH,
        field=field,
        expected=expected,
        found=found,
        fix="repair info.json (LeRobot v3.0 types, docs/datasets.md) or re-export the dataset",
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_info_types(info: Mapping[str, Any], root: Path) -> None:
    """The types the reader relies on: fps a positive int, features ``{key: {dtype, shape, names}}``,
    path templates that format; raises an :class:`ActlabError` naming the first bad field."""
    fps = info["fps"]
    if not ((_is_int(fps) or (isinstance(fps, float) and fps.is_integer())) and fps > 0):
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
        if key in info and not (_is_int(info[key]) and info[key] >= 0):
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
    if not (isinstance(shape, list) and all(_is_int(n) and n > 0 for n in shape)):
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
    parsed = report.stage("episodes", lambda: read_episodes(root, info, report))
    if parsed is None:
        return None
    tasks = report.stage("tasks", lambda: read_tasks(root, info, report))
    episodes, episodes_file = parsed
    layout = Layout(root, info, tasks or [], episodes, episodes_file)
    if tasks is not None:
        report.stage("tasks", lambda: check_tasks(layout, report))
    return layout


def read_tasks(root: Path, info: Mapping[str, Any], report: Report) -> list[str] | None:
    """Task strings ordered by ``task_index``; None when meta/tasks.parquet is missing (lerobot cannot
    load such a dataset) or its columns are wrong."""
    path = root / fmt.TASKS_PATH
    if not path.is_file():
        report.add(
            "missing_file", "tasks file missing", path, "(file)", "a parquet file", "missing", REEXPORT
        )
        return None
    table = read_table(path, "tasks file")
    names = table.column_names
    # lerobot writes the task strings as the pandas index of the table
    col = "task" if "task" in names else _PANDAS_INDEX if _PANDAS_INDEX in names else None
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
    order = np.argsort(np.asarray(table.column("task_index").to_pylist()))
    tasks = table.column(col).to_pylist()
    return [tasks[i] for i in order]


def check_tasks(layout: Layout, report: Report) -> None:
    """``total_tasks`` agrees with tasks.parquet and every episode's tasks are in it."""
    path = layout.root / fmt.TASKS_PATH
    known = set(layout.tasks)
    total = layout.info.get("total_tasks")
    if total is not None and total != len(known):
        report.add(
            "length_mismatch",
            "info.json total_tasks disagrees with tasks.parquet",
            layout.root / fmt.INFO_PATH,
            "total_tasks",
            len(known),
            total,
            f"set total_tasks to {len(known)} in info.json",
        )
    for e in layout.episodes:
        unknown = [t for t in e.tasks if t not in known]
        if unknown:
            report.add(
                "unknown_task",
                f"episode {e.index} names a task missing from tasks.parquet",
                path,
                "task",
                "one of the tasks in tasks.parquet",
                unknown[0],
                REEXPORT,
            )
            break


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
    rows = sorted(table.to_pylist(), key=lambda r: r["episode_index"])
    _check_episode_indices([r["episode_index"] for r in rows], ep_file, report)
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


# ---------------------------------------------------------------------------------------- data rows


@dataclasses.dataclass
class Data:
    """The rows of the data files: the concatenated table and every numeric feature as an array."""

    # pyarrow Table of all data files in order (rows are global frame indices)
    table: Any
    # feature key -> (N, *shape) array in the dtype info.json gives (read-only)
    columns: dict[str, np.ndarray]


def read_data(layout: Layout, report: Report) -> Data | None:
    """Read the data files and check their columns against info.json and the episodes: every feature
    present as numbers of its shape, no column info.json does not list, rows matching the episodes
    (counts, order, ``episode_index``, ``index``, ``frame_index``, timestamps on the 1/fps grid) and
    finite floats. None (collecting report) when a file is missing or unreadable."""
    import pyarrow as pa

    tables, file = [], layout.root / "data"
    for path in layout.data_files():
        if not path.is_file():
            report.add(
                "missing_file", "data file missing", path, "data", "a parquet file", "missing", REEXPORT
            )
            continue
        try:
            tables.append(read_table(path, "data file"))
        except ActlabError as e:
            if report.strict:
                raise
            report.add("unreadable", e.problem, path, "(file)", e.expected, e.found, REEXPORT)
    if len(tables) != len(layout.data_files()) or not tables:
        return None
    table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    if len(tables) == 1:
        file = layout.data_files()[0]
    columns = _check_columns(layout, table, file, report)
    _check_rows(layout, table.num_rows, columns, file, report)
    _check_index(columns, file, report)
    _check_finite(columns, file, report)
    _check_outliers(columns, file, report)
    _check_checksums(layout, report)  # last: a file edited on purpose is first named for what is wrong
    for arr in columns.values():
        arr.setflags(write=False)
    return Data(table, columns)


def _check_checksums(layout: Layout, report: Report) -> None:
    """Data and episodes files whose content differs from the sha256 actlab's writer recorded (see
    :mod:`actlab.datasets.checksums`; videos are checked by the doctor and before the FrameStore
    decodes them). Reading them costs about as much again as parsing them (1 GB/s)."""
    from actlab.datasets import checksums

    for prefix in ("data/", "meta/episodes/"):
        for rel, expected, found in checksums.damaged(layout.root, layout.info, prefix):
            report.add(
                "checksum",
                "file content differs from what the dataset was written with",
                layout.root / rel,
                f"{checksums.CHECKSUMS_PATH} files.{rel}",
                expected,
                found,
                checksums.REPAIR,
            )


def _check_columns(layout: Layout, table, file: Path, report: Report) -> dict[str, np.ndarray]:
    """Each numeric feature of info.json (and each always-present column) as an array; problems for a
    missing column, text where numbers belong, a wrong shape, and a column info.json does not list."""
    feats = layout.features
    names = table.column_names
    for key in names:
        if key not in feats and key != _PANDAS_INDEX:
            report.add(
                "unlisted_column",
                f"the data files hold a column {key!r} that info.json does not list",
                file,
                key,
                f"a feature of info.json ({', '.join(feats)})",
                f"column {key!r} ({table.schema.field(key).type})",
                f"add {key!r} to features in {fmt.INFO_PATH} (dtype, shape, names) or drop the column; "
                "readers that follow info.json (lerobot) refuse the table, actlab would ignore the data",
            )
    out: dict[str, np.ndarray] = {}
    wanted = {**{k: v for k, v in fmt.DEFAULT_FEATURES.items() if k not in feats}, **feats}
    for key, spec in wanted.items():
        if not fmt.is_numeric(spec):
            continue
        if key not in names:
            report.add(
                "missing_column",
                f"feature {key!r} missing from the data files",
                file,
                key,
                "a column",
                "missing",
                REEXPORT,
            )
            continue
        typ = table.schema.field(key).type
        if not is_number_type(typ):
            sample = table.column(key).slice(0, 1).to_pylist()  # [first row], a value or a list
            while sample and isinstance(sample[0], list):
                sample = sample[0]
            report.add(
                "dtype",
                f"feature {key!r} is stored as {_value_type(typ)}, not as numbers",
                file,
                key,
                f"{spec['dtype']} values (numbers), shape {spec['shape']}",
                f"{typ}, e.g. {sample[0]!r}" if sample else str(typ),
                f"rewrite the column as {spec['dtype']} numbers (e.g. cast the strings) or re-export",
            )
            continue
        try:
            out[key] = to_numpy(table.column(key), spec["shape"], spec["dtype"])
        except (ValueError, TypeError) as e:  # e.g. 6 values per row where info.json says 7
            report.add(
                "shape",
                f"data column {key!r} does not match its feature spec in info.json",
                file,
                f"features.{key}",
                f"shape {spec['shape']}, dtype {spec['dtype']}",
                str(e),
                "repair the feature's shape/dtype in info.json or re-export the dataset",
            )
    return out


def _check_rows(
    layout: Layout, rows: int, cols: Mapping[str, np.ndarray], file: Path, report: Report
) -> None:
    """Rows vs episodes. Rows are global frame indices: episode ``e`` owns rows ``[start, stop)``."""
    episodes = layout.episodes
    total = layout.frames
    if rows != total:
        report.add(
            "length_mismatch",
            "data files hold a different number of frames than the episodes",
            file,
            "rows",
            f"{total} (sum of episode lengths)",
            rows,
            REEXPORT,
        )
    ep = cols["episode_index"][:, 0] if "episode_index" in cols else None
    if ep is None:
        return
    # The row of each frame must carry its episode's index. The usual case, every row where the
    # episodes metadata puts it, is one comparison; only otherwise are rows grouped by episode (a sort).
    owner = np.repeat([e.index for e in episodes], [e.length for e in episodes]) if rows == total else None
    aligned = owner is not None and np.array_equal(ep, owner)
    if not aligned:
        ids, counts = np.unique(ep, return_counts=True)
        have = dict(zip(ids.tolist(), counts.tolist()))
        for e in episodes:
            n = have.get(e.index, 0)
            if n != e.length:
                report.add(
                    "length_mismatch",
                    f"episode {e.index}: rows differ from its length",
                    file,
                    f"episode {e.index}: rows",
                    e.length,
                    n,
                    REEXPORT,
                )
    if owner is not None and not aligned:
        # rows of episodes interleaved or out of order would pair frames with another episode's borders
        bad = np.flatnonzero(ep != owner)
        r = int(bad[0])
        report.add(
            "row_order",
            f"{bad.size} row(s) sit outside their episode's index range",
            file,
            "episode_index",
            f"episode {owner[r]} at row {r} (dataset_from_index..dataset_to_index)",
            f"episode {ep[r]}",
            "sort the rows by (episode_index, frame_index) so they follow the episodes metadata, "
            "or re-export",
        )
    _check_within_episodes(layout, ep, None if aligned else np.argsort(ep, kind="stable"), cols, file, report)


def _check_within_episodes(
    layout: Layout,
    ep: np.ndarray,
    order: np.ndarray | None,
    cols: Mapping[str, np.ndarray],
    file: Path,
    report: Report,
) -> None:
    """frame_index 0..length-1 and timestamps frame_index / fps within each episode, vectorized over all
    rows. ``order`` groups the rows of each episode together in file order (a stable argsort of ``ep``);
    None when they already are."""
    fps = float(layout.info["fps"])
    order = slice(None) if order is None else order
    sorted_ep = ep[order]
    first = np.r_[True, sorted_ep[1:] != sorted_ep[:-1]]  # (N,) first row of each episode group
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(ep)), 0))
    pos = np.arange(len(ep)) - group_start  # position of each sorted row within its episode
    if "frame_index" in cols:
        fi = cols["frame_index"][order, 0]
        bad = np.flatnonzero(fi != pos)
        for e in _episodes_of(sorted_ep, bad):
            rows = sorted_ep == e
            report.add(
                "frame_index",
                f"episode {e}: frame_index is not 0..length-1 in row order",
                file,
                "frame_index",
                f"0..{int(rows.sum()) - 1}",
                f"{fi[rows][:5].tolist()}...",
                "sort the episode's rows by frame_index or re-export",
            )
    if "timestamp" in cols:
        ts = cols["timestamp"][order, 0].astype(np.float64)
        back = np.flatnonzero((np.diff(ts) <= 0) & ~first[1:]) + 1
        for e in _episodes_of(sorted_ep, back):
            i = int(back[sorted_ep[back] == e][0])
            report.add(
                "timestamps",
                f"episode {e}: timestamps not increasing",
                file,
                "timestamp",
                f"> {ts[i - 1]:.6f} at frame {pos[i]}",
                f"{ts[i]:.6f}",
                "sort the rows by frame_index or re-export; timestamps must be frame_index / fps",
            )
        grid = pos / fps
        off = np.flatnonzero(np.abs(ts - grid) > fmt.TIMESTAMP_TOLERANCE_S)
        for e in _episodes_of(sorted_ep, off):
            in_e = off[sorted_ep[off] == e]
            i = int(in_e[0])
            report.add(
                "timestamps",
                f"episode {e}: {in_e.size} timestamp(s) off the 1/fps grid",
                file,
                "timestamp",
                f"{grid[i]:.6f} (frame {pos[i]} / {fps:g} fps, ±{fmt.TIMESTAMP_TOLERANCE_S})",
                f"{ts[i]:.6f}",
                "resample the episode to the dataset fps or rewrite timestamp as frame_index / fps",
            )


def _check_index(cols: Mapping[str, np.ndarray], file: Path, report: Report) -> None:
    if "index" not in cols:
        return
    idx = cols["index"][:, 0]
    bad = np.flatnonzero(idx != np.arange(len(idx)))
    if bad.size:
        r = int(bad[0])
        report.add(
            "index",
            "global index column is not 0..N-1 in order",
            file,
            "index",
            f"{r} at row {r}",
            idx[r],
            "sort the rows by index (and episode_index, frame_index) or re-export",
        )


def _episodes_of(sorted_ep: np.ndarray, rows: np.ndarray) -> list[int]:
    """The distinct episodes of some (sorted-order) rows, in order."""
    return [int(e) for e in np.unique(sorted_ep[rows])]


# A float value farther than OUTLIER_SPREADS x its dimension's spread from the dimension's median is a
# corrupted reading, not a motion. The spread is the q01..q99 span of the dimension, at least its |median|
# and at least 1 (a joint that never moves in 98% of the frames still has a scale). Why 1000: no unit a
# robot dataset records in (rad, degrees, m, mm, servo ticks 0-4095, gripper 0-100) puts a real reading
# 1000 spans (and at least 1000 units) away from the median, while a servo read error (1e30) or bytes
# overwritten inside a float column (a random float32 lies beyond 1e6 in magnitude about 40% of the time,
# up to 3.4e38) land there and would train a policy with an action std of 1e36 without a word.
OUTLIER_SPREADS = 1000.0


def _check_outliers(cols: Mapping[str, np.ndarray], file: Path, report: Report) -> None:
    """Problems for float features holding values no recording produces (see OUTLIER_SPREADS)."""
    for key, arr in cols.items():
        if key in fmt.DEFAULT_FEATURES or not np.issubdtype(arr.dtype, np.floating) or not len(arr):
            continue
        flat = arr.reshape(len(arr), -1).astype(np.float64)
        finite = np.where(np.isfinite(flat), flat, np.nan)  # NaN/inf are reported by _check_finite
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN dims
            median = np.nanmedian(finite, axis=0)
            lo, hi = np.nanquantile(finite, [0.01, 0.99], axis=0)
            spread = np.maximum(np.maximum(hi - lo, np.abs(median)), 1.0)
            bad = np.abs(finite - median) > OUTLIER_SPREADS * spread
        if not bad.any():
            continue
        rows, dims = np.nonzero(bad)
        r, d = int(rows[0]), int(dims[0])
        ep = cols["episode_index"][r, 0] if "episode_index" in cols else "?"
        report.add(
            "outlier",
            f"{int(bad.any(axis=1).sum())} frame(s) of {key!r} hold values no recording produces",
            file,
            key,
            f"within {OUTLIER_SPREADS:g} x the dim's spread of its median "
            f"(dim {d}: median {median[d]:.4g}, |x - median| <= {OUTLIER_SPREADS * spread[d]:.4g})",
            f"{flat[r, d]:.4g} at frame {r} (episode {ep}, dim {d})",
            "a corrupted file or a sensor read error: restore the data file from a copy, or drop or "
            "re-record the affected episodes and re-export",
        )


def _check_finite(cols: Mapping[str, np.ndarray], file: Path, report: Report) -> None:
    for key, arr in cols.items():
        if not np.issubdtype(arr.dtype, np.floating):
            continue
        flat = arr.reshape(len(arr), -1)
        bad = ~np.isfinite(flat)
        if bad.any():
            rows, dims = np.nonzero(bad)
            ep = cols["episode_index"][rows[0], 0] if "episode_index" in cols else "?"
            report.add(
                "nan",
                f"{int(bad.any(axis=1).sum())} frame(s) of {key!r} hold NaN or inf",
                file,
                key,
                "finite values",
                f"{flat[rows[0], dims[0]]} at frame {rows[0]} (episode {ep}, dim {dims[0]})",
                "drop or repair the affected episodes (e.g. re-record them) and re-export",
            )
