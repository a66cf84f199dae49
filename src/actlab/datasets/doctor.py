"""``actlab data doctor``: find what is wrong with a dataset, each problem with its fix.

Every problem is a record (check, file, field, expected, found, fix). Checks: readable metadata (info.json
types included), the tasks table, missing files, length mismatches (episodes vs data rows vs info
totals), NaN/inf, non-monotonic or off-grid timestamps, video frame count vs episode length, video size
vs info.json, missing or degenerate stats.
A check that cannot run because the dataset is too broken becomes a problem too; the doctor itself
never raises on a broken dataset.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from actlab.datasets import format as fmt
from actlab.errors import ActlabError
from actlab.utils.io import read_json

# Image std below this (in [0, 1] units) normalizes ordinary pixels to hundreds of standard deviations.
IMAGE_STD_MIN = 0.01


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


# Columns of meta/episodes/*.parquet the checks (and the reader) need.
_EPISODE_COLUMNS = ("episode_index", "length", "dataset_from_index", "dataset_to_index")

REEXPORT = "re-export or re-record the dataset (or restore the file from a backup)"
RESTATS = "recompute with `actlab data stats PATH --write-meta`"


class _Doctor:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.problems: list[Problem] = []
        self.info: dict[str, Any] = {}
        self.episodes: list[dict[str, Any]] = []
        self.data: dict[str, np.ndarray] = {}  # column -> (N, ...) for the files that could be read

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
        self.problems.append(
            Problem(check, problem, str(file), field, str(expected), str(found), fix, severity)
        )

    def guarded(self, name: str, fn: Callable[[], None]) -> None:
        """Run a check; a crash inside it becomes a problem rather than a traceback."""
        try:
            fn()
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

    # ---------------------------------------------------------------------------------------- checks

    def check_info(self) -> None:
        from actlab.datasets.reader import read_info

        self.info = read_info(self.root)

    def check_episodes(self) -> None:
        import pyarrow as pa

        from actlab.datasets.reader import _read_table

        files = sorted((self.root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
        if not files:
            self.add(
                "missing_file",
                "no episodes metadata",
                self.root / "meta/episodes",
                "episodes",
                "meta/episodes/chunk-000/file-000.parquet",
                "nothing",
                REEXPORT,
            )
            return
        tables = [_read_table(f, "episodes metadata") for f in files]
        table = pa.concat_tables(tables, promote_options="default")
        ep_file = files[0]
        missing = [c for c in _EPISODE_COLUMNS if c not in table.column_names]
        if missing:
            self.add(
                "missing_column",
                "episodes metadata lacks columns",
                ep_file,
                ", ".join(missing),
                ", ".join(_EPISODE_COLUMNS),
                "missing",
                REEXPORT,
            )
            return
        wrong = [c for c in _EPISODE_COLUMNS if not pa.types.is_integer(table.schema.field(c).type)]
        if wrong:
            self.add(
                "missing_column",
                "episodes metadata columns have the wrong type",
                ep_file,
                ", ".join(wrong),
                "int64",
                ", ".join(str(table.schema.field(c).type) for c in wrong),
                REEXPORT,
            )
            return
        rows = table.to_pylist()
        self.episodes = sorted(rows, key=lambda r: r["episode_index"])
        expected_start = 0
        for r in self.episodes:
            e = r["episode_index"]
            span = r["dataset_to_index"] - r["dataset_from_index"]
            if span != r["length"]:
                self.add(
                    "length_mismatch",
                    f"episode {e}: length differs from its index range",
                    ep_file,
                    f"episode {e}: length",
                    f"dataset_to_index - dataset_from_index = {span}",
                    r["length"],
                    REEXPORT,
                )
            if r["dataset_from_index"] != expected_start:
                self.add(
                    "length_mismatch",
                    f"episode {e} does not start where the previous one ends",
                    ep_file,
                    f"episode {e}: dataset_from_index",
                    expected_start,
                    r["dataset_from_index"],
                    REEXPORT,
                )
            expected_start = r["dataset_to_index"]
        info_file = self.root / fmt.INFO_PATH
        total = sum(r["length"] for r in self.episodes)
        for key, want in (("total_episodes", len(self.episodes)), ("total_frames", total)):
            if key in self.info and self.info[key] != want:
                self.add(
                    "length_mismatch",
                    f"info.json {key} disagrees with the episodes metadata",
                    info_file,
                    key,
                    want,
                    self.info[key],
                    f"set {key} to {want} in info.json",
                )

    def _data_files(self) -> Iterator[Path]:
        tmpl = self.info.get("data_path") or fmt.DATA_PATH
        seen = []
        for r in self.episodes:
            rel = tmpl.format(
                chunk_index=r.get("data/chunk_index", 0), file_index=r.get("data/file_index", 0)
            )
            if rel not in seen:
                seen.append(rel)
        for rel in seen:
            yield self.root / rel

    def check_data(self) -> None:
        import pyarrow as pa

        from actlab.datasets.reader import _read_table, _to_numpy

        tables, ok = [], True
        for path in self._data_files():
            if not path.is_file():
                self.add(
                    "missing_file", "data file missing", path, "data", "a parquet file", "missing", REEXPORT
                )
                ok = False
                continue
            try:
                tables.append(_read_table(path, "data file"))
            except ActlabError as e:
                self.add("unreadable", e.problem, path, "(file)", e.expected, e.found, REEXPORT)
                ok = False
        if not ok or not tables:
            return
        table = pa.concat_tables(tables, promote_options="default")
        first = path if len(tables) == 1 else self.root / "data"
        for key, spec in self.info["features"].items():
            if not fmt.is_numeric(spec):
                continue
            if key not in table.column_names:
                self.add(
                    "missing_column",
                    f"feature {key!r} missing from the data files",
                    first,
                    key,
                    "a column",
                    "missing",
                    REEXPORT,
                )
                continue
            try:
                self.data[key] = _to_numpy(table.column(key), spec["shape"], spec["dtype"])
            except ValueError as e:
                self.add(
                    "shape",
                    f"feature {key!r} does not have shape {spec['shape']}",
                    first,
                    key,
                    spec["shape"],
                    str(e),
                    REEXPORT,
                )
        self._check_lengths(table.num_rows, first)
        self._check_finite(first)
        self._check_timestamps(first)

    def _check_lengths(self, rows: int, file: Path) -> None:
        total = sum(r["length"] for r in self.episodes)
        if rows != total:
            self.add(
                "length_mismatch",
                "data files hold a different number of frames than the episodes",
                file,
                "rows",
                f"{total} (sum of episode lengths)",
                rows,
                REEXPORT,
            )
        if "episode_index" in self.data:
            ids, counts = np.unique(self.data["episode_index"][:, 0], return_counts=True)
            have = dict(zip(ids.tolist(), counts.tolist()))
            for r in self.episodes:
                n = have.get(r["episode_index"], 0)
                if n != r["length"]:
                    self.add(
                        "length_mismatch",
                        f"episode {r['episode_index']}: rows differ from its length",
                        file,
                        f"episode {r['episode_index']}: rows",
                        r["length"],
                        n,
                        REEXPORT,
                    )
        if "index" in self.data:
            idx = self.data["index"][:, 0]
            bad = np.flatnonzero(idx != np.arange(len(idx)))
            if bad.size:
                self.add(
                    "index",
                    "global index column is not 0..N-1 in order",
                    file,
                    "index",
                    f"{bad[0]} at row {bad[0]}",
                    idx[bad[0]],
                    REEXPORT,
                )

    def _check_finite(self, file: Path) -> None:
        for key, arr in self.data.items():
            if not np.issubdtype(arr.dtype, np.floating):
                continue
            bad = ~np.isfinite(arr.reshape(len(arr), -1))
            if bad.any():
                rows, cols = np.nonzero(bad)
                ep = self.data["episode_index"][rows[0], 0] if "episode_index" in self.data else "?"
                self.add(
                    "nan",
                    f"{int(bad.any(axis=1).sum())} frame(s) of {key!r} hold NaN or inf",
                    file,
                    key,
                    "finite values",
                    f"{arr.reshape(len(arr), -1)[rows[0], cols[0]]} at frame {rows[0]} "
                    f"(episode {ep}, dim {cols[0]})",
                    "drop or repair the affected episodes (e.g. re-record them) and re-export",
                )

    def _check_timestamps(self, file: Path) -> None:
        if "timestamp" not in self.data or "episode_index" not in self.data:
            return
        fps = float(self.info["fps"])
        ts = self.data["timestamp"][:, 0].astype(np.float64)
        fi = self.data["frame_index"][:, 0] if "frame_index" in self.data else None
        ep = self.data["episode_index"][:, 0]
        for r in self.episodes:
            e = r["episode_index"]
            rows = np.flatnonzero(ep == e)
            if rows.size == 0:
                continue
            t = ts[rows]
            back = np.flatnonzero(np.diff(t) <= 0)
            if back.size:
                i = back[0]
                self.add(
                    "timestamps",
                    f"episode {e}: timestamps not increasing",
                    file,
                    "timestamp",
                    f"> {t[i]:.6f} at frame {i + 1}",
                    f"{t[i + 1]:.6f}",
                    "sort the rows by frame_index or re-export; timestamps must be frame_index / fps",
                )
            grid = np.arange(len(rows)) / fps
            off = np.flatnonzero(np.abs(t - grid) > fmt.TIMESTAMP_TOLERANCE_S)
            if off.size:
                i = off[0]
                self.add(
                    "timestamps",
                    f"episode {e}: {off.size} timestamp(s) off the 1/fps grid",
                    file,
                    "timestamp",
                    f"{grid[i]:.6f} (frame {i} / {fps:g} fps, ±{fmt.TIMESTAMP_TOLERANCE_S})",
                    f"{t[i]:.6f}",
                    "resample the episode to the dataset fps or rewrite timestamp as frame_index / fps",
                )
            if fi is not None and not np.array_equal(fi[rows], np.arange(len(rows))):
                self.add(
                    "frame_index",
                    f"episode {e}: frame_index is not 0..length-1",
                    file,
                    "frame_index",
                    f"0..{len(rows) - 1}",
                    f"{fi[rows][:5].tolist()}...",
                    REEXPORT,
                )

    def check_videos(self) -> None:
        from actlab.datasets.video import packet_times, video_info

        fps = float(self.info["fps"])
        tol = fmt.TIMESTAMP_TOLERANCE_S
        tmpl = self.info.get("video_path") or fmt.VIDEO_PATH
        for key, spec in self.info["features"].items():
            if spec.get("dtype") != "video":
                continue
            by_file: dict[Path, list[dict]] = {}
            for r in self.episodes:
                if f"videos/{key}/chunk_index" not in r or r[f"videos/{key}/chunk_index"] is None:
                    self.add(
                        "missing_column",
                        f"episode {r['episode_index']} has no video location for {key}",
                        self.root / "meta/episodes",
                        f"videos/{key}/chunk_index",
                        "present",
                        "missing",
                        REEXPORT,
                    )
                    continue
                rel = tmpl.format(
                    video_key=key,
                    chunk_index=r[f"videos/{key}/chunk_index"],
                    file_index=r[f"videos/{key}/file_index"],
                )
                by_file.setdefault(self.root / rel, []).append(r)
            for path, eps in by_file.items():
                if not path.is_file():
                    self.add(
                        "missing_file", "video file missing", path, key, "an mp4 file", "missing", REEXPORT
                    )
                    continue
                vi = video_info(path)
                h, w = spec["shape"][0], spec["shape"][1]
                if (vi["height"], vi["width"]) != (h, w):
                    self.add(
                        "video_size",
                        "video frame size differs from info.json",
                        path,
                        f"features.{key}.shape",
                        f"{h}x{w}",
                        f"{vi['height']}x{vi['width']}",
                        "fix the shape in info.json or re-encode the video",
                    )
                times = packet_times(path)
                for r in eps:
                    lo, hi = r[f"videos/{key}/from_timestamp"], r[f"videos/{key}/to_timestamp"]
                    count = int(np.count_nonzero((times >= lo - tol) & (times < hi - tol)))
                    e = r["episode_index"]
                    if count != r["length"]:
                        self.add(
                            "video_frames",
                            f"episode {e}: video frames differ from episode length",
                            path,
                            f"{key} episode {e} [{lo:.4f}, {hi:.4f}) s",
                            f"{r['length']} frames",
                            count,
                            "re-encode the episode's video from its source frames or re-record it",
                        )
                    elif abs((hi - lo) - r["length"] / fps) > tol:
                        self.add(
                            "video_frames",
                            f"episode {e}: to_timestamp - from_timestamp != length / fps",
                            self.root / "meta/episodes",
                            f"videos/{key}/to_timestamp",
                            f"{lo + r['length'] / fps:.6f}",
                            f"{hi:.6f}",
                            REEXPORT,
                        )

    def check_tasks(self) -> None:
        from actlab.datasets.reader import _read_table

        path = self.root / fmt.TASKS_PATH
        table = _read_table(path, "tasks file")
        names = table.column_names
        col = "task" if "task" in names else "__index_level_0__" if "__index_level_0__" in names else None
        if col is None or "task_index" not in names:
            self.add(
                "missing_column",
                "tasks.parquet lacks the task or task_index column",
                path,
                "columns",
                "task (index) and task_index",
                names,
                REEXPORT,
            )
            return
        tasks = set(table.column(col).to_pylist())
        total = self.info.get("total_tasks")
        if total is not None and total != len(tasks):
            self.add(
                "length_mismatch",
                "info.json total_tasks disagrees with tasks.parquet",
                self.root / fmt.INFO_PATH,
                "total_tasks",
                len(tasks),
                total,
                f"set total_tasks to {len(tasks)} in info.json",
            )
        for r in self.episodes:
            unknown = [t for t in (r.get("tasks") or []) if t not in tasks]
            if unknown:
                self.add(
                    "unknown_task",
                    f"episode {r['episode_index']} names a task missing from tasks.parquet",
                    path,
                    "task",
                    "one of the tasks in tasks.parquet",
                    unknown[0],
                    REEXPORT,
                )
                break

    def check_stats(self) -> None:
        path = self.root / fmt.STATS_PATH
        if not path.is_file():
            self.add(
                "missing_stats", "meta/stats.json missing", path, "stats", "a stats file", "missing", RESTATS
            )
            return
        try:
            stats = read_json(path, "stats file")
        except ActlabError as e:
            self.add("unreadable", e.problem, path, "(file)", "valid JSON", "a syntax error", RESTATS)
            return
        if not isinstance(stats, dict):
            self.add(
                "degenerate_stats",
                "stats.json is not an object",
                path,
                "(top level)",
                "{feature: {mean, std, min, max, ...}}",
                type(stats).__name__,
                RESTATS,
            )
            return
        for key, spec in self.info["features"].items():
            if key in fmt.DEFAULT_FEATURES or spec.get("dtype") == "string":
                continue
            if key not in stats:
                check = "missing_image_stats" if fmt.is_camera(spec) else "missing_stats"
                self.add(check, f"no stats for {key!r}", path, key, "mean/std/min/max", "missing", RESTATS)
                continue
            st = stats[key]
            if not isinstance(st, dict):
                self.add(
                    "degenerate_stats",
                    f"stats of {key!r} are not an object",
                    path,
                    key,
                    "{mean, std, min, max, ...}",
                    type(st).__name__,
                    RESTATS,
                )
                continue
            missing = [s for s in ("mean", "std", "min", "max") if s not in st]
            if missing:
                self.add(
                    "missing_stats",
                    f"stats of {key!r} lack {missing}",
                    path,
                    key,
                    "mean, std, min, max",
                    sorted(st),
                    RESTATS,
                )
                continue
            try:
                mean, std = np.asarray(st["mean"], float), np.asarray(st["std"], float)
            except (TypeError, ValueError):
                self.add(
                    "degenerate_stats",
                    f"stats of {key!r} are not numbers",
                    path,
                    f"{key}.mean/std",
                    "numbers or nested lists of numbers",
                    f"{st['mean']!r}, {st['std']!r}"[:120],
                    RESTATS,
                )
                continue
            if not (np.isfinite(mean).all() and np.isfinite(std).all()):
                self.add(
                    "degenerate_stats",
                    f"stats of {key!r} hold NaN or inf",
                    path,
                    f"{key}.mean/std",
                    "finite values",
                    f"mean {mean.ravel().tolist()}, std {std.ravel().tolist()}",
                    RESTATS,
                )
                continue
            if fmt.is_camera(spec):
                self._check_image_stats(path, key, mean, std)
            else:
                self._check_vector_stats(path, key, spec, mean, std)

    def _check_image_stats(self, path: Path, key: str, mean: np.ndarray, std: np.ndarray) -> None:
        if mean.size != 3 or std.size != 3:
            self.add(
                "degenerate_stats",
                f"image stats of {key!r} are not per channel",
                path,
                f"{key}.std",
                "shape (3, 1, 1)",
                list(std.shape),
                RESTATS,
            )
            return
        if mean.max() > 1.5:
            self.add(
                "degenerate_stats",
                f"image stats of {key!r} look like 0-255 units",
                path,
                f"{key}.mean",
                "per-channel values in [0, 1]",
                mean.ravel().round(3).tolist(),
                RESTATS,
            )
            return
        low = std.ravel() < IMAGE_STD_MIN
        if low.any():
            worst = float(std.ravel().min())
            span = 0.5 / max(worst, 1e-12)
            self.add(
                "degenerate_stats",
                f"image std of {key!r} is near zero",
                path,
                f"{key}.std",
                f">= {IMAGE_STD_MIN} per channel",
                f"{std.ravel().round(4).tolist()} (normalizes pixels to about ±{span:.0f})",
                RESTATS,
            )

    def _check_vector_stats(
        self, path: Path, key: str, spec: dict, mean: np.ndarray, std: np.ndarray
    ) -> None:
        want = int(np.prod(spec["shape"]))
        if std.size != want:
            self.add(
                "degenerate_stats",
                f"stats of {key!r} have the wrong size",
                path,
                f"{key}.std",
                f"{want} values",
                std.size,
                RESTATS,
            )
            return
        zero = np.flatnonzero(std.ravel() < 1e-8)
        if zero.size:
            self.add(
                "degenerate_stats",
                f"{key!r} dims {zero.tolist()} never change (std 0)",
                path,
                f"{key}.std",
                "> 0",
                std.ravel()[zero].tolist(),
                "fine if those joints are unused; otherwise check the recording",
                "warning",
            )


def diagnose(path: str | Path) -> list[Problem]:
    """All problems found in the dataset at ``path`` (an empty list for a clean dataset)."""
    d = _Doctor(Path(path))
    d.guarded("info", d.check_info)
    if not d.info:
        return d.problems
    d.guarded("episodes", d.check_episodes)
    if not d.episodes:
        return d.problems
    d.guarded("data", d.check_data)
    d.guarded("videos", d.check_videos)
    d.guarded("tasks", d.check_tasks)
    d.guarded("stats", d.check_stats)
    return d.problems
