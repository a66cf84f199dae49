"""FrameStore: every camera frame decoded once into a uint8 array file, (N, C, H, W) per camera.

Training then gathers frames by index (from the memory-mapped file, or from a copy on the GPU) instead of
decoding video in worker processes on every step. A store lives at
``<cache>/frames/<fingerprint>-<options>/`` where ``<cache>`` is ``$ACTLAB_CACHE`` or ``~/.cache/actlab``;
the fingerprint changes whenever a source file changes, so an edited dataset gets a fresh store (and the
stale one of the same dataset is deleted). Stores are built in a temp dir and renamed into place, one
builder at a time (a lock file beside the store): a second process building the same store waits and then
opens the finished one, so a finished store is never deleted by a concurrent builder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.datasets import format as fmt
from actlab.errors import ActlabError

if TYPE_CHECKING:
    from actlab.datasets.reader import LeRobotV3Dataset

_META = "store.json"
_VERSION = 1


def cache_root() -> Path:
    """``$ACTLAB_CACHE`` or ``~/.cache/actlab``."""
    env = os.environ.get("ACTLAB_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "actlab"


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


@contextlib.contextmanager
def _build_lock(path: Path, progress: bool) -> Iterator[None]:
    """Exclusive lock on ``.<store name>.lock`` beside the store, deleted again by its holder.

    The holder unlinks the file before releasing it, so a waiter that then gets the lock on the unlinked
    file sees that the path no longer names its file and tries again (no two holders at once). The lock
    is released when the process dies.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover (not POSIX): no cross-process lock
        yield
        return
    lock = path.parent / f".{path.name}.lock"
    waited = False
    while True:
        f = open(lock, "a")  # noqa: SIM115 (closed below, after the unlink)
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress and not waited:
                print(f"FrameStore: waiting for another process building {path}", file=sys.stderr)
            waited = True
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            same = os.fstat(f.fileno()).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        f.close()  # the previous holder removed that file: lock the current one
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)
        f.close()


# Key in a camera feature's "info" that records how the FrameStore resized the frames; evaluation reads it
# (through the policy bundle's features.json) to resize observations the same way.
RESIZE_INFO = "actlab.resize"
# The resize FrameStore.build does with an image_size: longer side to image_size, black centred padding.
RESIZE_MODE = "fit_pad"


def stored_features(
    features: Mapping[str, Mapping[str, Any]], image_size: int | None, keys: Sequence[str] | None = None
) -> dict[str, dict[str, Any]]:
    """The features as a FrameStore built with ``image_size`` holds them, hence as batches carry them.

    Cameras in ``keys`` (default: every camera) get shape ``[image_size, image_size, C]`` and
    ``info["actlab.resize"] = {"mode": "fit_pad", "from_shape": [H, W, C], "image_size": S}``; every
    other feature is copied as is. A policy built from these features expects the images it is trained
    on, and its bundle tells evaluation how to resize observations (see ``actlab.evaluation.policy_io``).
    """
    out = {k: dict(v) for k, v in features.items()}
    if image_size is None:
        return out
    for key in keys if keys is not None else [k for k, f in features.items() if fmt.is_camera(f)]:
        spec = out[key]
        h, w, c = spec["shape"]
        spec["shape"] = [image_size, image_size, c]
        spec["names"] = ["height", "width", "channels"]
        spec["info"] = {
            **dict(spec.get("info") or {}),
            RESIZE_INFO: {"mode": RESIZE_MODE, "from_shape": [h, w, c], "image_size": image_size},
        }
    return out


def _frame_shape(ds: LeRobotV3Dataset, key: str, image_size: int | None) -> tuple[int, int, int]:
    """(C, H, W) of the stored frames of camera ``key``."""
    h, w, c = stored_features({key: ds.features[key]}, image_size)[key]["shape"]
    return c, h, w


class FrameStore:
    """Decoded frames of a dataset's cameras: ``frames[key]`` is an (N, C, H, W) uint8 memmap."""

    def __init__(self, root: Path, meta: dict[str, Any], frames: dict[str, np.ndarray]) -> None:
        self.root = root
        self.meta = meta
        self.frames = frames
        self.image_size: int | None = meta.get("image_size")

    @property
    def nbytes(self) -> int:
        """Total bytes of all cameras' frames."""
        return int(sum(a.nbytes for a in self.frames.values()))

    def __repr__(self) -> str:
        shapes = {k: tuple(v.shape) for k, v in self.frames.items()}
        return f"FrameStore({str(self.root)!r}, {shapes}, {human_bytes(self.nbytes)})"

    @staticmethod
    def estimate_bytes(
        ds: LeRobotV3Dataset, image_size: int | None = None, keys: Sequence[str] | None = None
    ) -> int:
        """Bytes the store will take on disk (the trainer's disk preflight uses this)."""
        keys = list(keys) if keys is not None else ds.camera_keys
        return int(sum(len(ds) * int(np.prod(_frame_shape(ds, k, image_size))) for k in keys))

    @staticmethod
    def path_for(
        ds: LeRobotV3Dataset,
        image_size: int | None = None,
        keys: Sequence[str] | None = None,
        cache_dir: str | Path | None = None,
    ) -> Path:
        """Where the store of ``ds`` with these options lives."""
        keys = sorted(keys) if keys is not None else sorted(ds.camera_keys)
        opts = hashlib.sha256(json.dumps([keys, _VERSION]).encode()).hexdigest()[:8]
        base = Path(cache_dir) if cache_dir is not None else cache_root() / "frames"
        return base / f"{ds.fingerprint}-{image_size or 'native'}-{opts}"

    @classmethod
    def open(cls, path: str | Path) -> FrameStore:
        """Open an existing store directory (memory-mapped, read-only)."""
        path = Path(path)
        from actlab.utils.io import read_json

        meta = read_json(path / _META, "frame store metadata")
        frames = {}
        for key, entry in meta["keys"].items():
            arr = np.load(path / entry["file"], mmap_mode="r")
            if tuple(arr.shape) != tuple(entry["shape"]):
                raise ActlabError(
                    "frame store file has the wrong shape",
                    file=path / entry["file"],
                    expected=entry["shape"],
                    found=arr.shape,
                    fix=f"delete {path} and rebuild it with `actlab data cache`",
                )
            frames[key] = arr
        return cls(path, meta, frames)

    @classmethod
    def build(
        cls,
        ds: LeRobotV3Dataset,
        image_size: int | None = None,
        cache_dir: str | Path | None = None,
        keys: Sequence[str] | None = None,
        progress: bool = True,
        rebuild: bool = False,
    ) -> FrameStore:
        """Return the store for ``ds``, decoding every frame once if it does not exist yet.

        ``image_size`` resizes the longer side to that many pixels and pads to a square (swscale area
        filter, black padding). Prints the size estimate and a progress bar to stderr.
        """
        keys = list(keys) if keys is not None else list(ds.camera_keys)
        bad = [k for k in keys if k not in ds.camera_keys]
        if bad:
            raise ActlabError(
                "not a camera of this dataset", field="keys", expected=ds.camera_keys, found=bad
            )
        if image_size is not None and image_size < 2:
            raise ActlabError("image_size must be >= 2", field="image_size", found=image_size)
        path = cls.path_for(ds, image_size, keys, cache_dir)
        if not rebuild and (store := cls._try_open(path)) is not None:
            return store
        path.parent.mkdir(parents=True, exist_ok=True)
        # One builder at a time per store: a second process waits here, then opens the finished store
        # instead of decoding again (and never deletes a store another process has just finished).
        with _build_lock(path, progress):
            if not rebuild and (store := cls._try_open(path)) is not None:
                return store
            meta = cls._build_locked(ds, path, keys, image_size, progress)
        cls._remove_stale(path, meta)
        return cls.open(path)

    @classmethod
    def _try_open(cls, path: Path) -> FrameStore | None:
        """The finished store at ``path``, or None when there is none or it is damaged."""
        if not path.is_dir():
            return None
        with contextlib.suppress(ActlabError, OSError, ValueError, KeyError):
            return cls.open(path)
        return None

    @classmethod
    def _build_locked(
        cls, ds: LeRobotV3Dataset, path: Path, keys: list[str], image_size: int | None, progress: bool
    ) -> dict:
        """Decode into a temp dir beside ``path`` and move it into place; the caller holds the lock."""
        need = cls.estimate_bytes(ds, image_size, keys)
        free = shutil.disk_usage(path.parent).free
        if need > free:
            raise ActlabError(
                "not enough disk space for the frame store",
                file=path.parent,
                expected=f"{human_bytes(need)} free",
                found=f"{human_bytes(free)} free",
                fix="free space, set ACTLAB_CACHE to a bigger disk, or cache smaller images (--image-size)",
            )
        if progress:
            print(
                f"FrameStore: decoding {len(ds)} frames x {len(keys)} camera(s) once into {path} "
                f"({human_bytes(need)})",
                file=sys.stderr,
            )
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        try:
            meta = cls._fill(ds, tmp, keys, image_size, progress)
            from actlab.utils.io import atomic_write_json

            atomic_write_json(tmp / _META, meta)
            old = None
            if path.exists():  # rebuild, or a damaged store: move it aside first, delete it after
                old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
                os.replace(path, old / "store")
            os.replace(tmp, path)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return meta

    @staticmethod
    def _fill(
        ds: LeRobotV3Dataset, tmp: Path, keys: list[str], image_size: int | None, progress: bool
    ) -> dict:
        from tqdm import tqdm

        n = len(ds)
        meta: dict[str, Any] = {
            "version": _VERSION,
            "source": str(ds.root),
            "fingerprint": ds.fingerprint,
            "image_size": image_size,
            "frames": n,
            "keys": {},
        }
        bar = tqdm(total=n * len(keys), unit="frame", file=sys.stderr, disable=not progress, desc="decode")
        try:
            for j, key in enumerate(keys):
                shape = (n, *_frame_shape(ds, key, image_size))
                fname = f"cam{j}.npy"
                mm = np.lib.format.open_memmap(tmp / fname, mode="w+", dtype=np.uint8, shape=shape)
                seen = np.zeros(n, dtype=bool)
                for i, img in ds.iter_frames(key, image_size):
                    if img.shape != (shape[2], shape[3], shape[1]):
                        raise ActlabError(
                            "decoded frame size differs from info.json",
                            file=ds.root / "meta/info.json",
                            field=f"features.{key}.shape",
                            expected=[shape[2], shape[3], shape[1]],
                            found=list(img.shape),
                            fix="repair info.json or re-encode the video",
                        )
                    mm[i] = img.transpose(2, 0, 1)
                    seen[i] = True
                    bar.update(1)
                if not seen.all():
                    first = int(np.argmin(seen))
                    raise ActlabError(
                        "video has fewer frames than the episodes need",
                        file=ds.root / "videos" / key,
                        field=key,
                        expected=f"{n} frames",
                        found=f"{int(seen.sum())} (first missing: global index {first})",
                        fix="run `actlab data doctor` and re-encode or re-record the affected episodes",
                    )
                mm.flush()
                del mm
                meta["keys"][key] = {"file": fname, "shape": list(shape)}
        finally:
            bar.close()
        return meta

    @staticmethod
    def _remove_stale(path: Path, meta: dict) -> None:
        """Delete other stores of the same source dataset and options whose fingerprint is outdated."""
        suffix = path.name.split("-", 1)[1]
        for other in path.parent.iterdir():
            if other == path or not other.is_dir() or other.name.startswith("."):
                continue
            if other.name.split("-", 1)[-1] != suffix:
                continue
            try:
                with open(other / _META) as f:
                    if json.load(f).get("source") == meta["source"]:
                        shutil.rmtree(other, ignore_errors=True)
            except (OSError, ValueError):
                continue
