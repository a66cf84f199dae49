"""The records the LeRobot v3.0 layout checks share, and how they read parquet.

:class:`Problem` (one finding) and :class:`Report` (strict: the first error raises; collecting: every
problem kept) are what the metadata checks (:mod:`actlab.datasets.layout`), the row checks
(:mod:`actlab.datasets.rows`) and the doctor (:mod:`actlab.datasets.doctor`) write into;
:class:`EpisodeInfo` and :class:`Layout` are what the metadata parse returns; :func:`read_table` and
:func:`to_numpy` are the one way those modules read a parquet file and turn a column into an array.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from actlab.errors import ActlabError
from actlab.utils.io import require_file

T = TypeVar("T")

REEXPORT = "re-export or re-record the dataset (or restore the file from a backup)"
EPISODES_GLOB = "chunk-*/file-*.parquet"
# Columns of meta/episodes/*.parquet every episode needs.
EPISODE_COLUMNS = ("episode_index", "length", "dataset_from_index", "dataset_to_index")
# Per camera, the columns of meta/episodes/*.parquet that locate an episode in its video file.
VIDEO_COLUMNS = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
# Columns pandas adds when a table is written with its index; not data.
PANDAS_INDEX = "__index_level_0__"
# Severities, gravest first.
SEVERITIES = ("error", "warning", "note")


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
    # One of SEVERITIES: "error" (the data is wrong: training would be wrong or fail), "warning" (likely
    # a recording fault: a policy would learn from it without a word) or "note" (worth a look).
    severity: str = "error"
    # The episodes concerned (empty: the dataset as a whole); what the per-episode scores count.
    episodes: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["episodes"] = list(self.episodes)
        return out

    def render(self) -> str:
        eps = ""
        if self.episodes:
            shown = ", ".join(map(str, self.episodes[:12])) + (" ..." if len(self.episodes) > 12 else "")
            eps = f"\n  episodes: {shown}"
        return (
            f"[{self.severity}] {self.check}: {self.problem}\n  file:     {self.file}\n"
            f"  field:    {self.field}{eps}\n  expected: {self.expected}\n  found:    {self.found}\n"
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
        episodes: Sequence[int] = (),
    ) -> None:
        p = Problem(
            check,
            problem,
            str(file),
            field,
            str(expected),
            str(found),
            fix,
            severity,
            tuple(map(int, episodes)),
        )
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
            # after errors that explain it (a length that disagrees with the rows), the crash of a check
            # that relies on them said "unreadable" with numpy's words, as if a second fault
            earlier = [p.check for p in self.problems if p.severity == "error"]
            self.add(
                name,
                f"check could not run: {type(e).__name__}: {e}"
                + (f" (after the {', '.join(dict.fromkeys(earlier))} error(s) above)" if earlier else ""),
                self.root,
                "-",
                "a readable dataset",
                "not checked" if earlier else "unreadable",
                "fix the errors above first, then run the doctor again" if earlier else REEXPORT,
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
    # task string -> its task_index in tasks.parquet (the value a frame's task_index holds; indices need
    # not be 0..n-1: 0, 2, 5 is a valid table, so a task's position in ``tasks`` is not its index)
    task_indices: dict[str, int] = dataclasses.field(default_factory=dict)

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

    require_file(
        path,
        f"{what} missing",
        expected="a parquet file",
        fix="restore the file or re-export the dataset",
        field="(file)",
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


def value_type(typ):
    """The element type of a (nested) list type; the type itself otherwise."""
    import pyarrow as pa

    while pa.types.is_list(typ) or pa.types.is_fixed_size_list(typ) or pa.types.is_large_list(typ):
        typ = typ.value_type
    return typ


def is_number_type(typ) -> bool:
    """True when a parquet column of this type holds numbers (possibly in lists), not text."""
    import pyarrow as pa

    v = value_type(typ)
    return pa.types.is_integer(v) or pa.types.is_floating(v) or pa.types.is_boolean(v)


def is_float_type(typ) -> bool:
    """True when a parquet column of this type holds floating-point numbers (possibly in lists)."""
    import pyarrow as pa

    return pa.types.is_floating(value_type(typ))


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
