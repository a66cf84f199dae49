"""The row checks of a LeRobot v3.0 dataset: the data files' columns against info.json and the episodes.

:func:`read_data` reads the data parquet files of a parsed :class:`~actlab.datasets.records.Layout` and
checks every numeric feature present as numbers of its shape, no column info.json does not list, rows
matching the episodes (counts, order, ``episode_index``, ``index``, ``frame_index``, timestamps on the
1/fps grid), finite floats, no impossible outliers, and the writer's checksums. Each check is one
vectorized pass over the columns; the reader runs them with a strict report (the first error raises),
the doctor with a collecting one.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from actlab.datasets import checksums
from actlab.datasets import format as fmt
from actlab.datasets.records import (
    PANDAS_INDEX,
    REEXPORT,
    Layout,
    Report,
    is_float_type,
    is_number_type,
    read_table,
    to_numpy,
    value_type,
)
from actlab.errors import ActlabError


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
    columns = check_columns(layout, table, file, report)
    check_rows(layout, table.num_rows, columns, file, report)
    _check_index(columns, file, report)
    _check_task_index(layout, columns, file, report)
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


def check_columns(layout: Layout, table, file: Path, report: Report) -> dict[str, np.ndarray]:
    """Each numeric feature of info.json (and each always-present column) as an array; problems for a
    missing column, text where numbers belong, a wrong shape, and a column info.json does not list."""
    feats = layout.features
    names = table.column_names
    for key in names:
        if key not in feats and key != PANDAS_INDEX:
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
                f"feature {key!r} is stored as {value_type(typ)}, not as numbers",
                file,
                key,
                f"{spec['dtype']} values (numbers), shape {spec['shape']}",
                f"{typ}, e.g. {sample[0]!r}" if sample else str(typ),
                f"rewrite the column as {spec['dtype']} numbers (e.g. cast the strings) or re-export",
            )
            continue
        if str(spec["dtype"]).startswith("float") and not is_float_type(typ):
            # integers where info.json says float: every fraction was cut off when the file was written
            # (actions of +-0.8 became 0); the doctor blamed a clipped leader arm, training went on
            report.add(
                "dtype",
                f"feature {key!r} is stored as {value_type(typ)} where info.json says {spec['dtype']}",
                file,
                key,
                f"{spec['dtype']} values, shape {spec['shape']}",
                f"{typ}",
                f"re-export the column as {spec['dtype']} from its source (a cast now cannot bring back "
                "the fractions the integers lost); if the values are whole numbers on purpose, set its "
                f"dtype in {fmt.INFO_PATH} to {value_type(typ)}",
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


def check_rows(layout: Layout, rows: int, cols: Mapping[str, np.ndarray], file: Path, report: Report) -> None:
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
                episodes=[e],
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
                episodes=[e],
            )
        grid = pos / fps
        off = np.flatnonzero(np.abs(ts - grid) > fmt.TIMESTAMP_TOLERANCE_S)
        for e in _episodes_of(sorted_ep, off):
            in_e = off[sorted_ep[off] == e]
            i = int(in_e[0])
            problem, fix = _off_grid(ts[sorted_ep == e], fps, e)
            report.add(
                "timestamps",
                f"episode {e}: {in_e.size} timestamp(s) off the 1/fps grid: {problem}",
                file,
                "timestamp",
                f"{grid[i]:.6f} (frame {pos[i]} / {fps:g} fps, ±{fmt.TIMESTAMP_TOLERANCE_S})",
                f"{ts[i]:.6f}",
                fix,
                episodes=[e],
            )


def _off_grid(ts: np.ndarray, fps: float, e: int) -> tuple[str, str]:
    """What an episode's off-grid timestamps mean, and the fix that does not hide it. Rewriting them as
    frame_index / fps never is: it would pair each frame with the wrong moment (a gap: every frame after
    it shifted) or declare a rate the recording did not run at."""
    dt = np.diff(ts)
    if not len(dt):
        return "a single frame", "re-export the episode (its one timestamp must be 0)"
    step = float(np.median(dt))
    if step > 0 and abs(step - 1 / fps) > fmt.TIMESTAMP_TOLERANCE_S:
        shown = 1 / step
        if round(shown) < 1:  # "set fps to 0 in info.json" was the fix of timestamps written in ms
            return (
                f"the timestamps advance at {shown:.4g} fps, info.json says {fps:g}",
                f"no recording runs below 1 fps: the timestamps step {step * fps:.4g} x 1/fps (milliseconds "
                "give 1000): the episode was written in another unit or clock; re-export it with timestamps "
                "in seconds (frame_index / fps)",
            )
        return (
            f"the timestamps advance at {shown:.4g} fps, info.json says {fps:g}",
            f"if the recording ran at {shown:.4g} fps, set fps to {round(shown)} in info.json (and the "
            "videos' video.fps); otherwise the episode was written with the wrong clock: re-export it",
        )
    gaps = np.flatnonzero(dt > 1.5 / fps)
    if gaps.size:
        g = int(gaps[0])
        lost = round(float(dt[g]) * fps) - 1
        return (
            f"{lost} frame(s) dropped after frame {g} ({ts[g]:.3f} -> {ts[g + 1]:.3f} s)",
            "frames were dropped while recording: trim the episode before the gap (`actlab data curate "
            f"DATASET --out NEW --trim {e}:0:{g + 1}`) or drop it (`--drop-episodes {e}`); rewriting the "
            "timestamps would hide the gap",
        )
    return (
        "the frame times jitter around the grid",
        "the recorder stamped frames with their arrival time: resample the episode to the dataset fps "
        "from its recorded times (or drop it)",
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


def _check_task_index(layout: Layout, cols: Mapping[str, np.ndarray], file: Path, report: Report) -> None:
    """Every frame's ``task_index`` is a row of tasks.parquet and names a task of its episode (the
    episodes metadata). A frame whose index points at no task (or another episode's) was read without a
    word: lerobot looks the task up per frame and fails there, a language-conditioned policy learns from
    the wrong instruction."""
    if "task_index" not in cols or not layout.tasks or "episode_index" not in cols:
        return
    ti = cols["task_index"][:, 0]
    ep = cols["episode_index"][:, 0]
    # by value: tasks.parquet's task_index column may have gaps (0, 2, 5); a frame's task_index is one of
    # those values, not a position in the table (a dataset without the indices read: positions)
    index_of = layout.task_indices or {t: i for i, t in enumerate(layout.tasks)}
    task_of = {i: t for t, i in index_of.items()}
    valid = np.asarray(sorted(task_of), dtype=ti.dtype)
    bad = np.flatnonzero(~np.isin(ti, valid))
    if bad.size:
        r = int(bad[0])
        eps = [int(e) for e in np.unique(ep[bad])]
        n = len(task_of)
        contiguous = list(task_of) and sorted(task_of) == list(range(n))
        values = f"0..{n - 1}" if contiguous else ", ".join(str(int(v)) for v in valid[:20])
        report.add(
            "task_index",
            f"{bad.size} frame(s) have a task_index that is no row of tasks.parquet",
            file,
            "task_index",
            f"{values} (the task_index values of the {n} task(s) of {fmt.TASKS_PATH})",
            f"{int(ti[r])} at row {r} (episode {int(ep[r])})",
            f"set each frame's task_index to its episode's task in {fmt.TASKS_PATH}, or re-export "
            "(actlab data curate DATASET --out NEW writes each frame's task from its episode)",
            episodes=eps,
        )
        return
    for info in layout.episodes:
        allowed = [index_of[t] for t in info.tasks if t in index_of]
        if not allowed:  # no task of the episode in tasks.parquet: check_tasks says so
            continue
        rows = ep == info.index
        wrong = np.flatnonzero(rows & ~np.isin(ti, allowed))
        if wrong.size:
            r = int(wrong[0])
            report.add(
                "task_index",
                f"episode {info.index}: {wrong.size} frame(s) name another task than the episode's",
                file,
                "task_index",
                f"{', '.join(str(a) for a in allowed)} ({', '.join(repr(t) for t in info.tasks)[:120]})",
                f"{int(ti[r])} ({task_of[int(ti[r])]!r}) at row {r}"[:200],
                f"set the frames' task_index to the episode's task in {fmt.TASKS_PATH}, or re-export "
                "(actlab data curate DATASET --out NEW writes each frame's task from its episode)",
                episodes=[info.index],
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
            # the episodes concerned: curate lets a NaN pass only in an episode it drops
            eps = np.unique(cols["episode_index"][rows, 0]).tolist() if "episode_index" in cols else []
            report.add(
                "nan",
                f"{int(bad.any(axis=1).sum())} frame(s) of {key!r} hold NaN or inf",
                file,
                key,
                "finite values",
                f"{flat[rows[0], dims[0]]} at frame {rows[0]} (episode {ep}, dim {dims[0]})",
                "drop or repair the affected episodes (e.g. re-record them) and re-export",
                episodes=eps,
            )
