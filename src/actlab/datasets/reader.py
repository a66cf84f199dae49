"""Read LeRobot v3.0 datasets from a local directory: metadata, episodes, tasks, columns and frames.

``get_item`` follows LeRobot's window semantics exactly: for a key with offsets ``d`` the rows
``index + d`` are clamped to the frame's episode and ``<key>_is_pad`` marks the clamped positions.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actlab.datasets import format as fmt
from actlab.datasets.sampler import window_indices
from actlab.errors import ActlabError
from actlab.utils.config import did_you_mean
from actlab.utils.io import read_json


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
    """``meta/info.json`` checked for the v3.0 layout; v2.1 datasets get the conversion hint."""
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


def _read_table(path: Path, what: str, columns: Sequence[str] | None = None):
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
        return pq.read_table(path, columns=list(columns) if columns else None)
    except Exception as e:  # pyarrow raises several types for damaged files
        raise ActlabError(
            f"cannot read {what}",
            file=path,
            field="(file)",
            expected="a readable parquet file",
            found=f"{type(e).__name__}: {e}",
            fix="restore or re-export the file",
        ) from e


def _to_numpy(col, shape: Sequence[int], dtype: str) -> np.ndarray:
    """A parquet column (scalar, list or fixed_size_list) as an (N, *shape) array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    n = len(col)
    if (
        pa.types.is_list(col.type)
        or pa.types.is_fixed_size_list(col.type)
        or pa.types.is_large_list(col.type)
    ):
        flat = pc.list_flatten(col).to_numpy(zero_copy_only=False)
    else:
        flat = col.to_numpy(zero_copy_only=False)
    return np.asarray(flat, dtype=dtype).reshape(n, *shape)


class LeRobotV3Dataset:
    """A LeRobot v3.0 dataset on local disk. Open it with :func:`open_dataset`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self.info = read_info(self.root)
        self.fps = int(self.info["fps"])
        self.features: dict[str, dict[str, Any]] = self.info["features"]
        self.camera_keys = [k for k, f in self.features.items() if fmt.is_camera(f)]
        self.video_keys = [k for k, f in self.features.items() if f.get("dtype") == "video"]
        self.numeric_keys = [k for k, f in self.features.items() if fmt.is_numeric(f)]
        self.tasks = self._read_tasks()
        self.episodes = self._read_episodes()
        self._n = self.episodes[-1].stop if self.episodes else 0
        self._decoders: dict[str, Any] = {}

    # ------------------------------------------------------------------------------------- metadata

    def _read_tasks(self) -> list[str]:
        path = self.root / fmt.TASKS_PATH
        if not path.is_file():
            return []
        table = _read_table(path, "tasks file")
        names = table.column_names
        task_col = (
            "task" if "task" in names else "__index_level_0__" if "__index_level_0__" in names else None
        )
        if task_col is None or "task_index" not in names:
            raise ActlabError(
                "tasks.parquet lacks the task or task_index column",
                file=path,
                field="columns",
                expected="task (index) and task_index",
                found=names,
            )
        order = np.argsort(np.asarray(table.column("task_index").to_pylist()))
        tasks = table.column(task_col).to_pylist()
        return [tasks[i] for i in order]

    def _read_episodes(self) -> list[EpisodeInfo]:
        import pyarrow as pa

        files = sorted((self.root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
        if not files:
            raise ActlabError(
                "no episodes metadata",
                file=self.root / "meta" / "episodes",
                expected="meta/episodes/chunk-XXX/file-XXX.parquet",
                found="nothing",
                fix="re-export the dataset; it is incomplete",
            )
        base = ["episode_index", "length", "dataset_from_index", "dataset_to_index"]
        tables = []
        for f in files:
            t = _read_table(f, "episodes metadata")
            keep = [c for c in t.column_names if not c.startswith("stats/")]
            tables.append(t.select(keep))
        table = pa.concat_tables(tables, promote_options="default")
        for col in base:
            if col not in table.column_names:
                raise ActlabError(
                    "episodes metadata lacks a column",
                    file=files[0],
                    field=col,
                    expected="present",
                    found="missing",
                    fix="re-export the dataset",
                )
            if not pa.types.is_integer(table.schema.field(col).type):
                raise ActlabError(
                    "episodes metadata column has the wrong type",
                    file=files[0],
                    field=col,
                    expected="int64",
                    found=str(table.schema.field(col).type),
                    fix="re-export the dataset",
                )
        rows = table.to_pylist()
        rows.sort(key=lambda r: r["episode_index"])
        out = []
        for r in rows:
            videos = {}
            for key in self.video_keys:
                chunk = r.get(f"videos/{key}/chunk_index")
                if chunk is None:
                    raise ActlabError(
                        f"episode {r['episode_index']} has no video location for {key}",
                        file=files[0],
                        field=f"videos/{key}/chunk_index",
                        expected="chunk_index, file_index, from_timestamp, to_timestamp of every episode",
                        found="missing",
                        fix="run `actlab data doctor`; re-export the dataset",
                    )
                rel = self.info.get("video_path") or fmt.VIDEO_PATH
                path = rel.format(video_key=key, chunk_index=chunk, file_index=r[f"videos/{key}/file_index"])
                videos[key] = (
                    path,
                    float(r[f"videos/{key}/from_timestamp"]),
                    float(r[f"videos/{key}/to_timestamp"]),
                )
            data_rel = (self.info.get("data_path") or fmt.DATA_PATH).format(
                chunk_index=r.get("data/chunk_index", 0), file_index=r.get("data/file_index", 0)
            )
            out.append(
                EpisodeInfo(
                    index=int(r["episode_index"]),
                    length=int(r["length"]),
                    start=int(r["dataset_from_index"]),
                    stop=int(r["dataset_to_index"]),
                    tasks=tuple(r.get("tasks") or ()),
                    videos=videos,
                    data_file=data_rel,
                )
            )
        self._check_partition(out, files[0])
        return out

    def _check_partition(self, episodes: list[EpisodeInfo], file: Path) -> None:
        """Episodes must tile ``[0, N)`` in order: rows of the data table are global indices, and the
        per-frame episode borders (windows, stats) are filled from these ranges."""
        expected = 0
        for e in episodes:
            if e.start != expected or e.stop - e.start != e.length or e.length < 1:
                raise ActlabError(
                    f"episode {e.index} does not continue the frame range of the episodes before it",
                    file=file,
                    field=f"episode {e.index}: dataset_from_index/dataset_to_index/length",
                    expected=f"from {expected}, to - from == length >= 1",
                    found=f"from {e.start}, to {e.stop}, length {e.length}",
                    fix="run `actlab data doctor` on the dataset; re-export it",
                )
            expected = e.stop

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"LeRobotV3Dataset({str(self.root)!r}, episodes={len(self.episodes)}, frames={len(self)})"

    @functools.cached_property
    def fingerprint(self) -> str:
        """Hash of the metadata contents and of every data/video file's name, size, mtime and edges.

        ``meta/stats.json`` is left out: rewriting it (``actlab data stats --write-meta``) changes no
        frame or column, so caches stay valid.

        Changes whenever a file is added, removed, rewritten or touched; cheap even for large videos
        (the first and last 64 KiB of each file are hashed, not the whole file).
        """
        h = hashlib.sha256()
        for path in sorted(p for p in self.root.rglob("*") if p.is_file()):
            rel = path.relative_to(self.root).as_posix()
            if rel.startswith(".") or "/." in rel or rel == fmt.STATS_PATH:
                continue  # temp files; stats.json does not change frames or columns
            st = path.stat()
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
            with open(path, "rb") as f:
                if rel.startswith("meta/") and st.st_size < (1 << 22):
                    h.update(f.read())
                else:
                    h.update(f.read(1 << 16))
                    if st.st_size > (1 << 16):
                        f.seek(max(st.st_size - (1 << 16), 1 << 16))
                        h.update(f.read())
        return h.hexdigest()[:16]

    # ---------------------------------------------------------------------------------- tabular data

    @functools.cached_property
    def _table(self):
        import pyarrow as pa

        files = sorted({self.root / ep.data_file for ep in self.episodes})
        tables = [_read_table(f, "data file") for f in files]
        table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
        if table.num_rows != self._n:
            raise ActlabError(
                "data files hold a different number of frames than the episodes metadata",
                file=self.root / "data",
                field="rows",
                expected=self._n,
                found=table.num_rows,
                fix="run `actlab data doctor` on the dataset",
            )
        return table

    @functools.cache  # noqa: B019  (one dataset object lives as long as its columns)
    def column(self, key: str) -> np.ndarray:
        """Every frame of a numeric feature as an (N, *shape) array (scalar features: (N, 1))."""
        if key not in self.features or not fmt.is_numeric(self.features[key]):
            raise ActlabError(
                f"no numeric feature {key!r}{did_you_mean(key, self.numeric_keys)}",
                file=self.root / fmt.INFO_PATH,
                field=key,
                expected="one of " + ", ".join(self.numeric_keys),
                found=key,
            )
        if key not in self._table.column_names:
            raise ActlabError(
                "feature listed in info.json is missing from the data files",
                file=self.root / "data",
                field=key,
                expected="a column",
                found="missing",
                fix="re-export the dataset",
            )
        spec = self.features[key]
        try:
            arr = _to_numpy(self._table.column(key), spec["shape"], spec["dtype"])
        except (ValueError, TypeError) as e:  # e.g. 6 values per row where info.json says 7
            raise ActlabError(
                "data column does not match its feature spec in info.json",
                file=self.root / fmt.INFO_PATH,
                field=f"features.{key}",
                expected=f"shape {spec['shape']}, dtype {spec['dtype']}",
                found=str(e),
                fix="run `actlab data doctor` on the dataset; repair info.json or re-export",
            ) from e
        arr.setflags(write=False)
        return arr

    @property
    def episode_index(self) -> np.ndarray:
        """(N,) int64 episode index of every frame."""
        return self.column("episode_index")[:, 0]

    @functools.cached_property
    def frame_episode_start(self) -> np.ndarray:
        """(N,) int64: global index of the first frame of each frame's episode."""
        return self._per_frame(lambda e: e.start)

    @functools.cached_property
    def frame_episode_stop(self) -> np.ndarray:
        """(N,) int64: one past the last global index of each frame's episode."""
        return self._per_frame(lambda e: e.stop)

    def _per_frame(self, attr) -> np.ndarray:
        out = np.empty(self._n, dtype=np.int64)
        for e in self.episodes:
            out[e.start : e.stop] = attr(e)
        out.setflags(write=False)
        return out

    def _episode_of(self, index: int) -> EpisodeInfo:
        starts = np.fromiter((e.start for e in self.episodes), dtype=np.int64, count=len(self.episodes))
        pos = int(np.searchsorted(starts, index, side="right")) - 1
        return self.episodes[pos]

    # ----------------------------------------------------------------------------------------- frames

    def _decoder(self, path: Path):
        from actlab.datasets.video import VideoDecoder

        dec = self._decoders.get(str(path))
        if dec is None:
            if len(self._decoders) >= 16:  # bound open files; the oldest goes
                old = next(iter(self._decoders))
                self._decoders.pop(old).close()
            dec = self._decoders[str(path)] = VideoDecoder(path)
        return dec

    def read_frames(self, key: str, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Frames of camera ``key`` at global ``indices`` as (n, H, W, 3) uint8 (random-access decode)."""
        if key not in self.camera_keys:
            raise ActlabError(
                f"no camera {key!r}{did_you_mean(key, self.camera_keys)}",
                file=self.root / fmt.INFO_PATH,
                field=key,
                expected="one of " + ", ".join(self.camera_keys),
                found=key,
            )
        if self.features[key]["dtype"] == "image":
            return self._read_png_frames(key, indices)
        indices = np.asarray(indices, dtype=np.int64)
        ts = self.column("timestamp")[indices, 0].astype(np.float64)
        groups: dict[str, list[int]] = {}
        query: dict[int, float] = {}
        for j, i in enumerate(indices.tolist()):
            ep = self._episode_of(i)
            path, from_ts, _ = ep.videos[key]
            groups.setdefault(path, []).append(j)
            query[j] = from_ts + float(ts[j])
        out: list[np.ndarray | None] = [None] * len(indices)
        for path, js in groups.items():
            imgs = self._decoder(self.root / path).frames_at(
                [query[j] for j in js], fmt.TIMESTAMP_TOLERANCE_S
            )
            for j, img in zip(js, imgs):
                out[j] = img
        return np.stack(out)  # type: ignore[arg-type]

    def _read_png_frames(self, key: str, indices) -> np.ndarray:
        import io

        import av

        col = self._table.column(key)
        out = []
        for i in np.asarray(indices).tolist():
            cell = col[i].as_py()
            data = cell["bytes"] if isinstance(cell, dict) else cell
            with av.open(io.BytesIO(data)) as c:
                out.append(next(c.decode(video=0)).to_ndarray(format="rgb24"))
        return np.stack(out)

    def iter_frames(self, camera_key: str, image_size: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """Sequential decode of every frame of a camera: ``(global_index, HWC uint8)`` in file order.

        Each video file is decoded once from start to end (the fast path for caching); a frame is mapped
        to its episode through the episodes' ``from_timestamp`` and frames outside every episode are
        skipped. ``image_size`` resizes and square-pads (see :func:`actlab.datasets.video.fit_size`).
        """
        from actlab.datasets.video import iter_decode, to_rgb

        if self.features[camera_key]["dtype"] == "image":
            for i in range(len(self)):
                img = self._read_png_frames(camera_key, [i])[0]
                if image_size is not None:
                    import av

                    img = to_rgb(av.VideoFrame.from_ndarray(img, format="rgb24"), image_size)
                yield i, img
            return
        by_file: dict[str, list[EpisodeInfo]] = {}
        for ep in self.episodes:
            by_file.setdefault(ep.videos[camera_key][0], []).append(ep)
        tol = fmt.TIMESTAMP_TOLERANCE_S
        for rel, eps in by_file.items():
            eps = sorted(eps, key=lambda e: e.videos[camera_key][1])
            froms = np.array([e.videos[camera_key][1] for e in eps])
            for t, img in iter_decode(self.root / rel, image_size):
                pos = int(np.searchsorted(froms, t + tol, side="right")) - 1
                if pos < 0:
                    continue
                ep = eps[pos]
                k = round((t - froms[pos]) * self.fps)
                if 0 <= k < ep.length and abs(froms[pos] + k / self.fps - t) <= tol:
                    yield ep.start + k, img

    # ------------------------------------------------------------------------------------ get_item

    def get_item(
        self, index: int, deltas: Mapping[str, Sequence[int]] | None = None
    ) -> dict[str, np.ndarray]:
        """One sample as LeRobot's ``__getitem__`` builds it, as numpy arrays.

        Every feature is returned at ``index``; a key in ``deltas`` is returned as a window (T, ...)
        at ``index + offset`` for each offset, clamped to the episode, with ``<key>_is_pad`` (T,) bool.
        Images are uint8 (C, H, W) (windowed: (T, C, H, W)). A key whose offsets are exactly ``[0]`` is
        the current frame: no time axis and no pad mask.
        """
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for a dataset of {len(self)} frames")
        deltas = dict(deltas or {})
        unknown = [k for k in deltas if k not in self.features]
        if unknown:
            raise ActlabError(
                f"unknown key in deltas: {unknown[0]!r}{did_you_mean(unknown[0], self.features)}",
                field="deltas",
                expected="one of " + ", ".join(self.features),
                found=unknown[0],
            )
        start = int(self.frame_episode_start[index])
        stop = int(self.frame_episode_stop[index])
        item: dict[str, np.ndarray] = {}
        for key, spec in self.features.items():
            offsets = list(deltas.get(key, [0]))
            windowed = offsets != [0]
            rows, pad = window_indices(
                np.array([index]), np.asarray(offsets), np.array([start]), np.array([stop])
            )
            rows, pad = rows[0], pad[0]  # (T,)
            if fmt.is_camera(spec):
                hwc = self.read_frames(key, rows)  # (T, H, W, 3)
                value = np.ascontiguousarray(hwc.transpose(0, 3, 1, 2))
            elif fmt.is_numeric(spec):
                value = self.column(key)[rows]
                if spec["shape"] == [1] and key in fmt.DEFAULT_FEATURES:
                    value = value[:, 0]
            else:
                continue
            if windowed:
                item[key] = value
                item[f"{key}_is_pad"] = pad
            else:
                item[key] = value[0]
        return item

    def close(self) -> None:
        """Close cached video decoders (also done when the object is garbage collected)."""
        for dec in self._decoders.values():
            dec.close()
        self._decoders.clear()

    def summary(self) -> dict[str, Any]:
        """What ``actlab data info`` prints."""
        return {
            "root": str(self.root),
            "codebase_version": self.info.get("codebase_version"),
            "robot_type": self.info.get("robot_type"),
            "fps": self.fps,
            "episodes": len(self.episodes),
            "frames": len(self),
            "tasks": self.tasks,
            "cameras": self.camera_keys,
            "features": {
                k: {"dtype": f["dtype"], "shape": f["shape"], "names": f.get("names")}
                for k, f in self.features.items()
            },
            "size_mb": round(sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file()) / 1e6, 3),
        }


def open_dataset(path: str | Path) -> LeRobotV3Dataset:
    """Open a local LeRobot v3.0 dataset directory (v2.1 is refused with a conversion hint)."""
    return LeRobotV3Dataset(resolve_root(path))


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
