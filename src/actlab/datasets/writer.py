"""Write LeRobot v3.0 datasets that lerobot 0.6 itself loads.

Layout and columns are LeRobotDataset v3.0's as lerobot 0.6 writes and reads them (the public source:
github.com/huggingface/lerobot, src/lerobot/datasets/lerobot_dataset.py and utils.py): one data parquet row
group per episode, episodes concatenated per camera into AV1 mp4 files with exact
``from_timestamp``/``to_timestamp``, per-episode stats in the episodes parquet, global ``meta/stats.json``.
The whole dataset is built in a temporary directory beside ``root`` and renamed into place by ``close()``;
an error leaves nothing behind (and a dataset being overwritten untouched). A write that fails for a
reason outside the code (a full disk, no permission, a read-only filesystem, a failing disk) discards the
dataset at once and raises an ActlabError saying so, with the fix.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from actlab.datasets import checksums
from actlab.datasets import format as fmt
from actlab.datasets.stats import aggregate_stats, feature_stats, image_stats, stats_to_json
from actlab.datasets.video import EncoderThread, VideoOptions, check_even
from actlab.errors import ActlabError
from actlab.utils.config import did_you_mean
from actlab.utils.disk import write_error
from actlab.utils.io import atomic_dir, atomic_write_json
from actlab.utils.units import human_bytes

# Frames per episode (evenly spaced) that enter the per-episode image stats.
_IMAGE_STATS_FRAMES = 32


def _tree_bytes(root: Path) -> int:
    """Bytes of the files under ``root`` (what a failed write had written)."""
    total = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(dirpath, f))
    return total


def _arrow_type(dtype: str) -> pa.DataType:
    return pa.from_numpy_dtype(np.dtype(dtype))


def _column(values: np.ndarray, feature: Mapping[str, Any]) -> pa.Array:
    """A numeric feature as LeRobot stores it: scalar for shape [1], fixed_size_list for 1-D vectors."""
    shape = tuple(feature["shape"])
    typ = _arrow_type(feature["dtype"])
    if shape == (1,):
        return pa.array(values.reshape(-1), type=typ)
    if len(shape) != 1:
        raise ActlabError(
            "only scalar and 1-D numeric features are supported",
            field="features",
            expected="shape [n]",
            found=list(shape),
        )
    flat = pa.array(values.reshape(-1), type=typ)
    return pa.FixedSizeListArray.from_arrays(flat, shape[0])


def _tasks_table(tasks: list[str]) -> pa.Table:
    """``meta/tasks.parquet`` as pandas writes a DataFrame indexed by ``task`` (what LeRobot reads)."""
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks)})
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [
            {"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
             "metadata": {"encoding": "UTF-8"}}
        ],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
             "numpy_type": "int64", "metadata": None},
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object",
             "metadata": None},
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }  # fmt: skip
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


class _CameraStream:
    """One camera's current mp4 file: which file, how many frames, its watched encoder thread."""

    def __init__(self, key: str, height: int, width: int, fps: int, options: VideoOptions) -> None:
        self.key, self.height, self.width, self.fps, self.options = key, height, width, fps, options
        self.position = -1  # index of the current file in the sequence (chunk, file)
        self.frames = 0  # frames in the current file
        self.path: Path | None = None
        self._thread = EncoderThread(max_pending=4 if options.threaded else 0, stall_s=options.stall_s)

    def open_next(self, root: Path, chunks_size: int) -> None:
        self.close_file()
        self.position += 1
        chunk, file = fmt.chunk_file(self.position, chunks_size)
        rel = fmt.VIDEO_PATH.format(video_key=self.key, chunk_index=chunk, file_index=file)
        self.path = root / rel
        self.frames = 0
        self._thread.open(self.path, self.height, self.width, self.fps, self.options)

    def encode(self, frames: np.ndarray) -> None:
        self._thread.encode(frames)
        self.frames += len(frames)

    def size_mb(self) -> float:
        # The file lags the queue a little (threaded); rotation by size is approximate by design.
        return self.path.stat().st_size / 1e6 if self.path is not None and self.path.exists() else 0.0

    def close_file(self) -> None:
        if self.path is not None:
            self._thread.close_file()
            self.path = None

    def finish(self) -> None:
        self.close_file()
        self._thread.finish()

    @property
    def reordered(self) -> int:
        """Times the encoder returned a packet ahead of an earlier frame's, in the finished files."""
        return self._thread.reordered

    def abort(self) -> None:
        self._thread.abort()


class DatasetWriter:
    """Writes episodes into a new LeRobot v3.0 dataset at ``root`` (atomic: temp dir + rename on close).

    ``features`` maps keys to specs as in ``meta/info.json`` (see :func:`actlab.datasets.make_features`);
    the default columns (timestamp, frame_index, episode_index, index, task_index) are added here.
    Use as a context manager; ``add_episode`` takes arrays with one row per frame. ``kind`` (the
    command's name) and ``inputs``: what ``overwrite`` may replace (see :func:`actlab.utils.io.atomic_dir`).
    """

    def __init__(
        self,
        root: str | Path,
        fps: int,
        features: Mapping[str, Mapping[str, Any]],
        robot_type: str | None = None,
        *,
        video: VideoOptions | None = None,
        data_files_size_in_mb: float = 100,
        video_files_size_in_mb: float = 200,
        chunks_size: int = 1000,
        overwrite: bool = False,
        estimated_bytes: int | None = None,
        kind: str = "DatasetWriter",
        inputs: Sequence[str | Path] = (),
    ) -> None:
        # ``estimated_bytes``: roughly what the whole dataset will take, when the caller knows (the
        # recorder does); named in the error when the disk fills up.
        if int(fps) != fps or fps <= 0:
            raise ActlabError("fps must be a positive integer", field="fps", expected="e.g. 30", found=fps)
        self.root = Path(root)
        self.fps = int(fps)
        self.robot_type = robot_type
        self.video = video or VideoOptions()
        self.data_files_size_in_mb = data_files_size_in_mb
        self.video_files_size_in_mb = video_files_size_in_mb
        self.chunks_size = chunks_size
        self.features = self._check_features(features)
        self.camera_keys = [k for k, f in self.features.items() if fmt.is_camera(f)]
        self.numeric_keys = [k for k, f in self.features.items() if fmt.is_numeric(f)]
        self.user_keys = [k for k in self.features if k not in fmt.DEFAULT_FEATURES]
        self.estimated_bytes = estimated_bytes
        self._stack = contextlib.ExitStack()
        try:
            self._tmp: Path = self._stack.enter_context(
                atomic_dir(self.root, overwrite, kind=kind, inputs=inputs)
            )
        except OSError as e:  # the temporary directory cannot be made beside root (permissions, read-only)
            fault = self._write_error(e, 0)
            if fault is None:
                raise
            raise fault from e
        self._closed = False
        self._tasks: dict[str, int] = {}
        self._episodes: list[dict[str, Any]] = []
        self._columns: dict[str, list[np.ndarray]] = {k: [] for k in self.numeric_keys}
        self._episode_stats: list[dict[str, dict[str, np.ndarray]]] = []
        self._total = 0
        self._extra_info: dict[str, Any] = {}
        self._data_position = -1
        self._data_writer: pq.ParquetWriter | None = None
        self._data_path: Path | None = None
        self._cameras = {
            k: _CameraStream(
                k, self.features[k]["shape"][0], self.features[k]["shape"][1], self.fps, self.video
            )
            for k in self.camera_keys
        }

    # ----------------------------------------------------------------------------------- validation

    def _check_features(self, features: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for key, spec in features.items():
            if key in fmt.DEFAULT_FEATURES:
                continue
            spec = dict(spec)
            for field in ("dtype", "shape"):
                if field not in spec:
                    raise ActlabError(
                        f"feature {key!r} has no {field!r}",
                        field=f"features.{key}",
                        expected="{'dtype', 'shape', 'names'}",
                        found=sorted(spec),
                    )
            spec["shape"] = [int(s) for s in spec["shape"]]
            if not spec["shape"] or min(spec["shape"]) < 1:
                raise ActlabError(
                    f"feature {key!r} has an empty dimension",
                    field=f"features.{key}.shape",
                    expected="positive sizes, e.g. [6]",
                    found=spec["shape"],
                )
            spec.setdefault("names", None)
            if fmt.is_camera(spec):
                if spec["dtype"] != "video":
                    raise ActlabError(
                        "the writer stores cameras as video only",
                        field=f"features.{key}.dtype",
                        expected="video",
                        found=spec["dtype"],
                    )
                if len(spec["shape"]) != 3 or spec["shape"][2] != 3:
                    raise ActlabError(
                        "camera shape must be [height, width, 3]",
                        field=f"features.{key}.shape",
                        expected="[H, W, 3]",
                        found=spec["shape"],
                    )
                shape = spec["shape"]
                check_even(shape[0], shape[1], self.video.pix_fmt, f"features.{key}.shape", self.video.codec)
                spec["info"] = self._video_info(spec["shape"])
            elif spec["dtype"] == "string":
                raise ActlabError("string features are not supported", field=f"features.{key}.dtype")
            out[key] = spec
        out.update({k: dict(v) for k, v in fmt.DEFAULT_FEATURES.items()})
        return out

    def _video_info(self, shape: list[int]) -> dict[str, Any]:
        return {
            "video.height": shape[0],
            "video.width": shape[1],
            "video.codec": self.video.codec_name,
            "video.pix_fmt": self.video.pix_fmt,
            "video.fps": self.fps,
            "video.channels": 3,
            "has_audio": False,
            "video.g": self.video.gop,
            "video.crf": self.video.crf,
            # SVT-AV1 presets are numbers (lerobot writes 12); libx264 presets are names.
            "video.preset": int(self.video.preset) if self.video.preset.isdigit() else self.video.preset,
            # lerobot 0.6 reads "is_depth_map" ("video.is_depth_map" is its legacy name, migrated on load).
            "is_depth_map": False,
        }

    def _check_episode(self, frames: Mapping[str, Any], task: str) -> tuple[int, dict[str, np.ndarray]]:
        if not isinstance(task, str) or not task:
            raise ActlabError(
                "an episode needs a task string", field="task", expected="non-empty str", found=task
            )
        unknown = [k for k in frames if k not in self.user_keys]
        if unknown:
            raise ActlabError(
                f"unknown feature {unknown[0]!r}{did_you_mean(unknown[0], self.user_keys)}",
                field=unknown[0],
                expected="one of " + ", ".join(self.user_keys),
                found=unknown[0],
            )
        missing = [k for k in self.user_keys if k not in frames]
        if missing:
            raise ActlabError(
                f"episode lacks feature {missing[0]!r}",
                field=missing[0],
                expected=", ".join(self.user_keys),
                found=", ".join(frames),
            )
        arrays: dict[str, np.ndarray] = {}
        lengths = {}
        for key in self.user_keys:
            spec = self.features[key]
            arr = np.asarray(frames[key])
            want = tuple(spec["shape"])
            if fmt.is_camera(spec):
                if arr.dtype != np.uint8:
                    raise ActlabError(
                        "camera frames must be uint8 HWC RGB",
                        field=key,
                        expected="uint8",
                        found=str(arr.dtype),
                        fix="convert with (img * 255).round().astype(np.uint8) if they are floats in [0, 1]",
                    )
                arr = np.ascontiguousarray(arr).copy()  # the encoder thread reads it later
            else:
                arr = np.asarray(arr, dtype=spec["dtype"])
                if want == (1,) and arr.ndim == 1:
                    arr = arr[:, None]
                if arr.size and np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
                    bad = int(np.argwhere(~np.isfinite(arr.reshape(len(arr), -1)))[0, 0])
                    raise ActlabError(
                        "non-finite value in episode",
                        field=key,
                        expected="finite numbers",
                        found=f"NaN/inf at frame {bad}",
                        fix="drop or repair the episode before writing",
                    )
            if arr.ndim != len(want) + 1 or tuple(arr.shape[1:]) != want:
                raise ActlabError(
                    "feature has the wrong shape",
                    field=key,
                    expected=f"(T, {', '.join(map(str, want))})",
                    found=tuple(arr.shape),
                )
            arrays[key] = arr
            lengths[key] = len(arr)
        if len(set(lengths.values())) != 1 or next(iter(lengths.values()), 0) == 0:
            raise ActlabError(
                "every feature of an episode needs the same number of frames (at least one)",
                field="frames",
                expected="equal lengths T >= 1",
                found=lengths,
            )
        return next(iter(lengths.values())), arrays

    # -------------------------------------------------------------------------------------- writing

    def add_episode(self, frames: Mapping[str, Any], task: str) -> int:
        """Append one episode: ``frames[key]`` has one row per frame; cameras (T, H, W, 3) uint8.

        Returns the episode index.
        """
        if self._closed:
            raise ActlabError("writer is closed", fix="open a new DatasetWriter")
        length, arrays = self._check_episode(frames, task)
        ep = len(self._episodes)
        task_index = self._tasks.setdefault(task, len(self._tasks))
        arrays["timestamp"] = (np.arange(length, dtype=np.float64) / self.fps).astype(np.float32)[:, None]
        arrays["frame_index"] = np.arange(length, dtype=np.int64)[:, None]
        arrays["episode_index"] = np.full((length, 1), ep, dtype=np.int64)
        arrays["index"] = np.arange(self._total, self._total + length, dtype=np.int64)[:, None]
        arrays["task_index"] = np.full((length, 1), task_index, dtype=np.int64)
        meta: dict[str, Any] = {"episode_index": ep, "tasks": [task], "length": length}
        try:
            meta.update(self._write_data(arrays, length))
            for key in self.camera_keys:
                meta.update(self._write_video(key, arrays[key]))
        except OSError as e:  # a full disk, say: the files are part-written, so the dataset is discarded
            written = _tree_bytes(self._tmp)
            self.abort()
            fault = self._write_error(e, written)
            if fault is None:
                raise
            raise fault from e
        stats = {k: feature_stats(arrays[k]) for k in self.numeric_keys}
        for key in self.camera_keys:
            pick = np.unique(np.linspace(0, length - 1, min(length, _IMAGE_STATS_FRAMES)).round().astype(int))
            stats[key] = image_stats(arrays[key][pick])
        for key in self.numeric_keys:
            self._columns[key].append(arrays[key])
        self._episode_stats.append(stats)
        self._episodes.append(meta)
        self._total += length
        return ep

    def _write_data(self, arrays: dict[str, np.ndarray], length: int) -> dict[str, Any]:
        if self._data_writer is None or self._data_path.stat().st_size / 1e6 >= self.data_files_size_in_mb:
            self._open_data_file()
        order = [k for k in self.features if fmt.is_numeric(self.features[k])]
        table = pa.table({k: _column(arrays[k], self.features[k]) for k in order})
        self._data_writer.write_table(table, row_group_size=max(length, 1))  # one row group per episode
        chunk, file = fmt.chunk_file(self._data_position, self.chunks_size)
        return {
            "data/chunk_index": chunk,
            "data/file_index": file,
            "dataset_from_index": self._total,
            "dataset_to_index": self._total + length,
        }

    def _open_data_file(self) -> None:
        if self._data_writer is not None:
            self._data_writer.close()
        self._data_position += 1
        chunk, file = fmt.chunk_file(self._data_position, self.chunks_size)
        self._data_path = self._tmp / fmt.DATA_PATH.format(chunk_index=chunk, file_index=file)
        self._data_path.parent.mkdir(parents=True, exist_ok=True)
        order = [k for k in self.features if fmt.is_numeric(self.features[k])]
        schema = pa.schema(
            [
                (k, _arrow_type(self.features[k]["dtype"]))
                if tuple(self.features[k]["shape"]) == (1,)
                else (k, pa.list_(_arrow_type(self.features[k]["dtype"]), self.features[k]["shape"][0]))
                for k in order
            ]
        )
        # Page checksums (CRC32 per page, parquet's own field; LeRobot and pyarrow read them like any
        # file): bytes overwritten in a data page are an error at read instead of plausible garbage.
        self._data_writer = pq.ParquetWriter(
            self._data_path, schema, compression="snappy", write_page_checksum=True
        )

    def _write_video(self, key: str, frames: np.ndarray) -> dict[str, Any]:
        cam = self._cameras[key]
        if cam.path is None or cam.size_mb() >= self.video_files_size_in_mb:
            cam.open_next(self._tmp, self.chunks_size)
        start = cam.frames
        cam.encode(frames)
        chunk, file = fmt.chunk_file(cam.position, self.chunks_size)
        # Exact: frame i of a file has pts i at time base 1/fps, so episode borders are i / fps.
        return {
            f"videos/{key}/chunk_index": chunk,
            f"videos/{key}/file_index": file,
            f"videos/{key}/from_timestamp": start / self.fps,
            f"videos/{key}/to_timestamp": (start + len(frames)) / self.fps,
        }

    # ------------------------------------------------------------------------------------- finishing

    @property
    def reordered_packets(self) -> int:
        """How many times the encoder returned a packet ahead of an earlier frame's (each time, the
        packets were held back and muxed in frame order: ``actlab.datasets.video.VideoEncoder``);
        complete once the writer is closed."""
        return sum(cam.reordered for cam in self._cameras.values())

    def add_info(self, key: str, value: Any) -> None:
        """Record an extra top-level key in ``meta/info.json`` (readers ignore keys they do not know, as
        LeRobot does); the format's own keys cannot be replaced."""
        if key in self._info(0):
            raise ActlabError(
                "this info.json key belongs to the dataset format", field=key, fix="use another key"
            )
        self._extra_info[key] = value

    def close(self) -> Path:
        """Finish every file, write the metadata and move the dataset into place; returns ``root``."""
        if self._closed:
            return self.root
        self._closed = True
        try:
            if not self._episodes:
                raise ActlabError("no episode was added", file=self.root, fix="add at least one episode")
            if self._data_writer is not None:
                self._data_writer.close()
            for cam in self._cameras.values():
                cam.finish()
            self._write_meta()
        except BaseException as e:
            written = _tree_bytes(self._tmp)
            self._abort()
            try:
                self._stack.__exit__(type(e), e, e.__traceback__)
            except OSError as named:
                # atomic_dir names the file by the name it would have had; for an OSError whose filename
                # is read-only (PyAV's: a full disk met while the mp4 is finished) that is a new OSError,
                # raised here: it is the one to explain (before, it escaped as a bare "the disk is full")
                e = named
            fault = self._write_error(e, written)
            if fault is None:
                raise
            raise fault from e
        self._stack.close()
        return self.root

    def _write_error(self, e: BaseException, written: int) -> ActlabError | None:
        """The ActlabError for a write that failed for a reason outside the code (a full disk, no
        permission, a read-only filesystem, a failing disk), after the dataset was discarded; else None."""
        kept = f"; the dataset already at {self.root} is kept" if self.root.exists() else ""
        return write_error(
            e,
            self.root,  # not the file that failed: it was in the temporary directory, now deleted
            out=self.root,
            stopped=f"the dataset was not written (nothing of it is left on disk{kept})",
            again="run the command again",
            elsewhere="write the dataset to another disk (--out)",
            found=f" after {human_bytes(written)} of the dataset had been written" if written else "",
            need_bytes=self.estimated_bytes,
        )

    def abort(self) -> None:
        """Discard everything written so far."""
        if self._closed:
            return
        self._closed = True
        self._abort()
        err = ActlabError("writer aborted")
        self._stack.__exit__(type(err), err, None)

    def _abort(self) -> None:
        for cam in self._cameras.values():
            cam.abort()
        if self._data_writer is not None:
            with contextlib.suppress(Exception):
                self._data_writer.close()
            # Why: when close() fails (a full disk cannot take the footer) pyarrow leaves its file handle
            # open, and the deleted file keeps its space until a garbage collection happens to free it:
            # the same write run again in this process would find the disk still full.
            with contextlib.suppress(Exception):
                self._data_writer.file_handle.close()

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def _write_meta(self) -> None:
        meta = self._tmp / "meta"
        meta.mkdir(parents=True, exist_ok=True)
        tasks = sorted(self._tasks, key=self._tasks.get)
        pq.write_table(_tasks_table(tasks), meta / "tasks.parquet", write_page_checksum=True)
        self._write_episodes(meta)
        stats = {k: feature_stats(np.concatenate(self._columns[k])) for k in self.numeric_keys}
        for key in self.camera_keys:
            stats[key] = aggregate_stats([s[key] for s in self._episode_stats])
        atomic_write_json(meta / "stats.json", stats_to_json(stats))
        info = self._info(len(tasks))
        atomic_write_json(meta / "info.json", info)
        checksums.record(self._tmp, info)  # sha256 of every data, video and episodes file, checked later

    def _write_episodes(self, meta: Path) -> None:
        rows = []
        for ep, st in zip(self._episodes, self._episode_stats):
            row = dict(ep)
            row["meta/episodes/chunk_index"] = 0
            row["meta/episodes/file_index"] = 0
            for key, s in st.items():
                for name, value in s.items():
                    row[f"stats/{key}/{name}"] = np.asarray(value).tolist()
            rows.append(row)
        path = self._tmp / fmt.EPISODES_PATH.format(chunk_index=0, file_index=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), path, compression="snappy", write_page_checksum=True)

    def _info(self, total_tasks: int) -> dict[str, Any]:
        return {
            "codebase_version": fmt.CODEBASE_VERSION,
            "robot_type": self.robot_type,
            "total_episodes": len(self._episodes),
            "total_frames": self._total,
            "total_tasks": total_tasks,
            "chunks_size": self.chunks_size,
            "data_files_size_in_mb": self.data_files_size_in_mb,
            "video_files_size_in_mb": self.video_files_size_in_mb,
            "fps": self.fps,
            "splits": {"train": f"0:{len(self._episodes)}"},
            "data_path": fmt.DATA_PATH,
            "video_path": fmt.VIDEO_PATH if self.camera_keys else None,
            "features": self.features,
            **self._extra_info,
        }
