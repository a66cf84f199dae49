"""Read LeRobot v3.0 datasets from a local directory: metadata, episodes, tasks, columns and frames.

``get_item`` follows LeRobot's window semantics exactly: for a key with offsets ``d`` the rows
``index + d`` are clamped to the frame's episode and ``<key>_is_pad`` marks the clamped positions.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actlab.datasets import format as fmt
from actlab.datasets import layout
from actlab.datasets.hub import dataset_location, not_found_hint
from actlab.datasets.layout import EpisodeInfo, check_info_types, read_info, resolve_root
from actlab.datasets.rows import Data, check_columns, check_rows, read_data
from actlab.datasets.sampler import window_indices
from actlab.datasets.video import VideoDecoder, iter_decode, to_rgb
from actlab.errors import ActlabError
from actlab.utils.config import did_you_mean

__all__ = ["EpisodeInfo", "LeRobotV3Dataset", "check_info_types", "open_dataset", "read_info"]


class LeRobotV3Dataset:
    """A LeRobot v3.0 dataset on local disk. Open it with :func:`open_dataset`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        # info.json, tasks and episodes metadata, checked as the doctor checks them: the first error
        # raises (layout.Report strict), naming the check and the fix.
        self._layout = layout.parse(self.root, layout.Report(self.root, strict=True))
        assert self._layout is not None  # a strict report raises instead
        self.info = self._layout.info
        self.fps = int(self.info["fps"])
        self.features: dict[str, dict[str, Any]] = self.info["features"]
        self.camera_keys = [k for k, f in self.features.items() if fmt.is_camera(f)]
        self.video_keys = [k for k, f in self.features.items() if f.get("dtype") == "video"]
        self.numeric_keys = [k for k, f in self.features.items() if fmt.is_numeric(f)]
        self.tasks = self._layout.tasks
        self.episodes = self._layout.episodes
        self._n = self._layout.frames
        self._decoders: dict[str, Any] = {}

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

    @functools.cached_property
    def identity(self) -> dict[str, Any]:
        """What a dataset is, independent of where it lies and of file times: its episode and frame
        counts and a hash of the contents of its metadata (info.json, tasks, the episodes' table with
        their lengths and per-episode statistics), ``meta/stats.json`` left out as in :attr:`fingerprint`.
        A copy (``cp -r``, another disk) has the same identity; another recording under the same path,
        an added or removed episode or a rewritten info.json does not. A training resume compares it.

        ``data_sha256`` hashes the data files' contents too (the rows: actions, states, indices; the videos
        are left out for their size): a row edited in place in a dataset without actlab's checksums (another
        tool's, or one whose meta/actlab_checksums.json was removed after an edit, as its refusal offers)
        kept the same identity and a resume trained on, exit 0 (21st fault run). A checkpoint written before
        this key is compared without it."""
        return {
            "episodes": len(self.episodes),
            "frames": len(self),
            "meta_sha256": _contents_sha256(self.root, self.root / "meta", skip=fmt.STATS_PATH),
            "data_sha256": _contents_sha256(self.root, self.root / "data"),
        }

    # ---------------------------------------------------------------------------------- tabular data

    @functools.cached_property
    def _data(self) -> Data:
        """The data files' rows, checked as the doctor checks them (the first error raises)."""
        data = read_data(self._layout, layout.Report(self.root, strict=True))
        assert data is not None  # a strict report raises instead
        return data

    def check_data(self) -> None:
        """Read the data files now and run the cheap checks on their rows (columns vs info.json, rows
        vs episodes, order, timestamps, NaN/inf); raises the first error as an ActlabError.

        Every column access runs this too (once); calling it right after opening makes a bad dataset
        fail at once rather than at its first use.
        """
        self._data  # noqa: B018 (the property reads and checks)

    @property
    def _table(self):
        return self._data.table

    def column(self, key: str) -> np.ndarray:
        """Every frame of a numeric feature as an (N, *shape) array (scalar features: (N, 1)), read-only."""
        if key not in self.features or not fmt.is_numeric(self.features[key]):
            raise ActlabError(
                f"no numeric feature {key!r}{did_you_mean(key, self.numeric_keys)}",
                file=self.root / fmt.INFO_PATH,
                field=key,
                expected="one of " + ", ".join(self.numeric_keys),
                found=key,
            )
        return self._data.columns[key]

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

    def _check_data_files(self) -> None:
        """The data files' columns and row counts from their footers (no row is read), checked as every
        reader of the rows checks them: a strict report raises on the first problem."""
        import pyarrow.parquet as pq

        report = layout.Report(self.root, strict=True)
        rows = 0
        for rel in self._layout.data_files():
            file = self.root / rel
            try:
                meta = pq.ParquetFile(file)
                schema, n = meta.schema_arrow, meta.metadata.num_rows
            except Exception:  # unreadable or missing: the readers of the rows name it (not this summary)
                return
            check_columns(self._layout, schema.empty_table(), file, report)
            rows += n
        check_rows(self._layout, rows, {}, self.root / self._layout.data_files()[0], report)

    def summary(self) -> dict[str, Any]:
        """What ``actlab data info`` prints. The data files' columns and row counts (their footers, not their
        rows) are checked first: a data file cut short, or without a feature's column, was summed up from
        the metadata alone ("frames 652" of 632 rows; "action float32 6" of no such column), exit 0, where
        every other command refused it."""
        self._check_data_files()
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
    """Open a local LeRobot v3.0 dataset directory (v2.1 is refused with a conversion hint). A Hub repo
    id ``owner/name`` that is no directory here opens that dataset from LeRobot's local cache
    (:mod:`actlab.datasets.hub`; nothing is downloaded)."""
    try:
        return LeRobotV3Dataset(resolve_root(dataset_location(path)))
    except ActlabError as e:
        hint = not_found_hint(path)
        if hint is None or e.problem != "dataset directory not found":
            raise
        raise ActlabError(e.problem, file=e.file, fix=f"check the path; {hint}") from e


def _contents_sha256(root: Path, folder: Path, skip: str = "") -> str:
    """16 hex digits of the sha256 of every file under ``folder`` (its path relative to ``root``, then its
    bytes, in path order), temporary files (``.NAME``) and ``skip`` (a path relative to ``root``) left out."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if "/." in rel or rel == skip:
            continue  # temp files; stats.json does not change frames or columns
        h.update(f"{rel}\0".encode())
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]
