"""FrameStore: every camera frame decoded once into a uint8 array file, (N, C, H, W) per camera.

Training then gathers frames by index (from the memory-mapped file, or from a copy on the GPU) instead of
decoding video in worker processes on every step. A store lives at
``<cache>/frames/<fingerprint>-<options>/`` where ``<cache>`` is ``$ACTLAB_CACHE`` or ``~/.cache/actlab``;
the fingerprint changes whenever a source file changes, so an edited dataset gets a fresh store (and the
stale one of the same dataset is deleted). Stores are built in a temp dir and renamed into place, one
builder at a time (a lock file beside the store): a second process building the same store waits and then
opens the finished one, so a finished store is never deleted by a concurrent builder.

Integrity: ``store.json`` records, per camera file, its size, its npy header and a blake2b checksum of every
chunk of frames (about ``CHUNK_BYTES``). Every open checks the sizes and headers, and the checksums of
``SAMPLE_CHUNKS`` random chunks per camera; all checksums are checked when the store is built, on
``FrameStore.open(path, verify="full")`` (``actlab data cache PATH --verify``), and whenever a file's size or
mtime differs from the one recorded at the last full check (``verified.json``): writing into a file
changes its mtime, so frames zeroed in place are caught at the next open. ``FrameStore.build`` (and so
training) rebuilds a damaged store from the dataset, with a warning; ``FrameStore.open`` refuses it with
the command that rebuilds it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from glob import escape as glob_escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.datasets import checksums
from actlab.datasets import format as fmt
from actlab.datasets.sources import source_record, sources_changed
from actlab.errors import ActlabError
from actlab.utils.disk import WRITE_ERRNOS, write_error
from actlab.utils.io import atomic_write_json, read_json
from actlab.utils.kinds import refuse_cache_inside_output
from actlab.utils.progress import progress_bar
from actlab.utils.units import human_bytes

if TYPE_CHECKING:
    from actlab.datasets.reader import LeRobotV3Dataset

_META = "store.json"
# Stat (size, mtime) of each frame file when its checksums were last all verified.
_VERIFIED = "verified.json"
# 2: checksums per chunk of frames in store.json (stores of version 1 are rebuilt, then deleted).
_VERSION = 2
# Checksum of a chunk of frames: blake2b (hashlib, stdlib), 16-byte digest.
_HASH = "blake2b-128"
# Frames are checksummed in chunks of about this many bytes: a sampled check reads little, a full check
# of a large store makes few hash calls (each releases the GIL, so chunks hash on several threads).
CHUNK_BYTES = 4 << 20
# Chunks per camera whose checksums every open verifies, drawn at random so that repeated opens cover the
# whole store over time (reads about 8 MiB per camera: milliseconds).
SAMPLE_CHUNKS = 2


def cache_root() -> Path:
    """``$ACTLAB_CACHE`` or ``~/.cache/actlab``."""
    env = os.environ.get("ACTLAB_CACHE")
    if env:  # a dataset's, a bundle's or an export's directory took the frames in, exit 0 (24th fault run)
        refuse_cache_inside_output(Path(env).expanduser(), "ACTLAB_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "actlab"


# Where stores built or opened outside the default location live, by store name (a JSON file in the
# default location): a build for the default location reuses one of them instead of decoding the same
# frames a second time (the demo's 1.7 GiB store in runs/demo/cache, then `actlab bench data
# runs/demo/data` decoding it again into ~/.cache). A hint only: every entry is opened and verified
# before use, and a lost update (two processes writing it at once) only costs a decode.
_KNOWN = "known_stores.json"
_KNOWN_PER_NAME = 8  # paths remembered per store name (the most recent)


def _known_file() -> Path:
    return cache_root() / "frames" / _KNOWN


def _read_known() -> dict[str, list[str]]:
    try:
        known = json.loads(_known_file().read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def remember_store(path: Path) -> None:
    """Record where a store outside the default location lives (best effort: never fails the caller)."""
    path = Path(path).resolve()
    if path.parent == (cache_root() / "frames").resolve():
        return
    known = _read_known()
    paths = [p for p in known.get(path.name, []) if isinstance(p, str) and p != str(path)]
    known[path.name] = [*paths, str(path)][-_KNOWN_PER_NAME:]
    with contextlib.suppress(OSError, ActlabError):
        atomic_write_json(_known_file(), known)


def store_candidates(ds: LeRobotV3Dataset, name: str) -> list[Path]:
    """Existing directories that may hold the store ``name`` of ``ds`` outside the default location: the
    remembered ones, then ``cache/`` beside the dataset (the demo's layout: DIR/data and DIR/cache)."""
    found = [Path(p) for p in _read_known().get(name, []) if isinstance(p, str)]
    found.append(Path(ds.root).resolve().parent / "cache" / name)
    seen, out = set(), []
    for p in found:
        if p.is_dir() and str(p) not in seen:
            seen.add(str(p))
            out.append(p)
    return out


def _allocated_memmap(file: Path, shape: tuple[int, ...]) -> np.ndarray:
    """A writable ``.npy`` memmap of uint8 ``shape`` whose blocks are all allocated on disk now.

    Why: ``open_memmap(mode="w+")`` makes a sparse file; on a disk that fills up later, a store into an
    unallocated page cannot return ENOSPC and the kernel kills the process with SIGBUS (exit 135, no
    message, the lock and the temporary store left behind). ``posix_fallocate`` reserves every block up
    front and fails with ENOSPC (an OSError the caller reports) before a frame is decoded."""
    mm = np.lib.format.open_memmap(file, mode="w+", dtype=np.uint8, shape=shape)
    if hasattr(os, "posix_fallocate"):
        fd = os.open(file, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, max(os.fstat(fd).st_size, 1))
        except OSError as e:
            if e.errno not in WRITE_ERRNOS:  # a filesystem that cannot reserve: write as before
                return mm
            del mm
            raise OSError(e.errno, e.strerror, str(file)) from e
        finally:
            os.close(fd)
    return mm


def _remove_dead_builds(path: Path) -> None:
    """Remove the temporary directories (``.NAME.XXXX.tmp``, ``.NAME.XXXX.old``) a build of the store at
    ``path`` left when it was killed (SIGKILL, the machine off): only a holder of the store's build lock
    makes them, and the caller holds it now, so every one there is a dead build's. A SIGKILLed ``data
    cache`` or training left its half-decoded frames (up to the whole store's size) in the cache for good."""
    for entry in path.parent.glob(f".{glob_escape(path.name)}.*"):
        if entry.suffix in (".tmp", ".old") and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)


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
# (through the policy bundle's features.json) to resize observations the same way. policies/bundle.py
# spells the same string (importing it would tie the policies to the datasets): change both together.
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


def _check_native_size(ds: LeRobotV3Dataset, key: str) -> None:
    """Refuse a camera whose video frames are not the size info.json gives, before a resized cache is
    built: the native cache refused it ("decoded frame size differs from info.json"), a resized one
    trained on, exit 0, and recorded info.json's size as the frames' source size in the bundle."""
    spec = ds.features[key]
    if spec.get("dtype") != "video" or not ds.episodes or key not in ds.episodes[0].videos:
        return
    from actlab.datasets.video import video_info  # lazy: PyAV

    path = ds.root / ds.episodes[0].videos[key][0]
    try:
        vi = video_info(path)
    except Exception:  # an unreadable file: the decode that follows names it
        return
    h, w = spec["shape"][0], spec["shape"][1]
    if (vi.get("height"), vi.get("width")) != (h, w):
        raise ActlabError(
            "decoded frame size differs from info.json",
            file=path,
            field=f"features.{key}.shape",
            expected=f"{h}x{w} (info.json)",
            found=f"{vi.get('height')}x{vi.get('width')}",
            fix="repair the shape in meta/info.json or re-encode the video (`actlab data doctor "
            f"{ds.root}` lists every problem)",
        )


class FrameStore:
    """Decoded frames of a dataset's cameras: ``frames[key]`` is an (N, C, H, W) uint8 memmap."""

    def __init__(self, root: Path, meta: dict[str, Any], frames: dict[str, np.ndarray]) -> None:
        self.root = root
        self.meta = meta
        self.frames = frames
        self.image_size: int | None = meta.get("image_size")
        # True when every checksum was verified by the open that returned this store.
        self.fully_verified = False

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
    def open(cls, path: str | Path, verify: str = "auto") -> FrameStore:
        """Open an existing store directory (memory-mapped, read-only) after checking its integrity.

        ``verify="auto"``: sizes, npy headers and shapes against ``store.json``, and the checksums of
        ``SAMPLE_CHUNKS`` random chunks per camera; all checksums when a file's size or mtime changed
        since the last full check. ``verify="full"``: all checksums. A damaged store raises an
        ActlabError naming the file, the frames and the command that rebuilds it.
        """
        if verify not in ("auto", "full"):
            raise ValueError(f"verify must be 'auto' or 'full', not {verify!r}")
        path = Path(path)

        meta = read_json(path / _META, "frame store metadata")
        try:
            if not isinstance(meta, dict) or meta.get("version") != _VERSION:
                found = meta.get("version") if isinstance(meta, dict) else type(meta).__name__
                raise _damaged(
                    path,
                    meta,
                    "frame store of another format version",
                    path / _META,
                    "version",
                    _VERSION,
                    found,
                )
            frames = {key: _open_frames(path, meta, key, entry) for key, entry in meta["keys"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as e:  # store.json of the wrong shape
            raise _damaged(
                path,
                meta,
                "frame store metadata is incomplete",
                path / _META,
                "keys",
                "file, shape, offset, bytes, chunk_frames, checksums per camera",
                f"{type(e).__name__}: {e}",
            ) from e
        full = verify == "full" or _changed_since_verified(path, meta)
        try:
            for key, entry in meta["keys"].items():
                _verify_chunks(path, meta, key, entry, None if full else SAMPLE_CHUNKS)
        except ActlabError:
            with contextlib.suppress(OSError):  # the next open checks everything again
                (path / _VERIFIED).unlink()
            raise
        if full:
            _write_verified(path, meta)
        store = cls(path, meta, frames)
        store.fully_verified = full
        return store

    def verify_summary(self) -> dict[str, int]:
        """Frames, checksummed chunks and bytes of the store (what a full check reads)."""
        chunks = sum(len(e["checksums"]) for e in self.meta["keys"].values())
        return {"frames": int(self.meta["frames"]), "chunks": chunks, "bytes": self.nbytes}

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
        store, damage = (None, None) if rebuild else cls.try_open(path, keys, ds)
        if store is not None:
            if cache_dir is not None:
                remember_store(path)
            return store
        # A damaged store here is said and rebuilt below, not passed over for a copy elsewhere: the
        # damage stayed in the default cache without a word whenever another store of the dataset existed.
        reuse = not rebuild and damage is None and cache_dir is None
        if reuse and (store := cls._reuse_elsewhere(ds, path, progress, keys)):
            return store
        path.parent.mkdir(parents=True, exist_ok=True)
        # One builder at a time per store: a second process waits here, then opens the finished store
        # instead of decoding again (and never deletes a store another process has just finished).
        with _build_lock(path, progress):
            if not rebuild:
                store, damage = cls.try_open(path, keys, ds)
                if store is not None:
                    return store
                if damage is not None:  # said even without progress output: the cache was damaged
                    print(f"FrameStore: {damage}; rebuilding {path} from the dataset", file=sys.stderr)
            meta = cls._build_locked(ds, path, keys, image_size, progress)
        cls._remove_stale(path, meta)
        store = cls.open(path)
        if cache_dir is not None:
            remember_store(path)
        return store

    @classmethod
    def _reuse_elsewhere(
        cls, ds: LeRobotV3Dataset, path: Path, progress: bool, keys: Sequence[str] = ()
    ) -> FrameStore | None:
        """A finished store of the same name (same dataset fingerprint, image size and cameras) outside
        the default location, instead of decoding the frames again into ``path``; None when there is none.
        An explicit ``cache_dir`` is honoured as given (never redirected)."""
        for other in store_candidates(ds, path.name):
            store = cls.try_open(other, keys, ds)[0]
            if store is not None:
                if progress:
                    print(
                        f"FrameStore: reusing {other} ({human_bytes(store.nbytes)}; the same dataset "
                        f"fingerprint and options) instead of decoding it again into {path.parent}",
                        file=sys.stderr,
                    )
                return store
        return None

    @classmethod
    def try_open(
        cls, path: Path, keys: Sequence[str] = (), ds: LeRobotV3Dataset | None = None
    ) -> tuple[FrameStore | None, str | None]:
        """(the finished store at ``path``, None), or (None, None) when there is none, or (None, what is
        wrong) when it is damaged; a store without one of ``keys`` (the cameras its name was made for) is
        damaged: a camera removed from store.json was "not in the frame store" at every run, the fix
        `actlab data cache` reusing the store as it was. With ``ds``, a store whose source files changed
        since it was built (:func:`sources_changed`) is stale: said and rebuilt as a damaged one."""
        if not path.is_dir():
            return None, None
        try:
            store = cls.open(path)
            missing = [k for k in keys if k not in store.frames]
            if missing:
                return None, (
                    f"store.json lacks camera(s) {', '.join(missing)} the store was built for "
                    f"({path / _META}: {sorted(store.frames)})"
                )
            if ds is not None and (changed := sources_changed(ds, store.meta.get("sources"))):
                return None, changed
            return store, None
        except ActlabError as e:
            return None, f"{e.problem} ({e.file}: {e.found})"
        except (OSError, ValueError, KeyError, EOFError) as e:  # e.g. vanished while being replaced
            return None, f"{type(e).__name__}: {e}"

    @classmethod
    def _build_locked(
        cls, ds: LeRobotV3Dataset, path: Path, keys: list[str], image_size: int | None, progress: bool
    ) -> dict:
        """Decode into a temp dir beside ``path`` and move it into place; the caller holds the lock."""
        _remove_dead_builds(path)
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
        for key in keys:  # damaged video bytes would decode into wrong frames without an error
            checksums.check_videos(ds.root, ds.info, key)
        if progress:
            print(
                f"FrameStore: decoding {len(ds)} frames x {len(keys)} camera(s) once into {path} "
                f"({human_bytes(need)})",
                file=sys.stderr,
            )
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
        try:
            try:
                meta = cls._fill(ds, tmp, keys, image_size, progress)
            except OSError as e:  # the disk filled (or failed) while decoding: say so, leave nothing
                fault = write_error(
                    e,
                    path,
                    out=path.parent,
                    stopped=f"the frame store was not written (nothing of it is left in {path.parent})",
                    again="run the command again",
                    elsewhere="set ACTLAB_CACHE (or --cache-dir) to a directory on a bigger disk",
                    save_less=", or cache smaller images (--image-size)",
                    need_bytes=need,
                )
                if fault is None:
                    raise
                raise fault from e

            atomic_write_json(tmp / _META, meta)
            _write_verified(tmp, meta)  # the checksums were just computed from these files
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
        n = len(ds)
        meta: dict[str, Any] = {
            "version": _VERSION,
            "hash": _HASH,
            "source": str(ds.root),
            "fingerprint": ds.fingerprint,
            "image_size": image_size,
            "frames": n,
            "keys": {},
            "sources": source_record(ds, keys),
        }
        bar = progress_bar(n * len(keys), "decode", "frame", disable=not progress)
        try:
            for j, key in enumerate(keys):
                if image_size is not None:
                    _check_native_size(ds, key)
                shape = (n, *_frame_shape(ds, key, image_size))
                fname = f"cam{j}.npy"
                mm = _allocated_memmap(tmp / fname, shape)
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
                meta["keys"][key] = _checksum_entry(tmp / fname, shape)
                meta["keys"][key]["file"] = fname
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
            try:
                with open(other / _META) as f:
                    theirs = json.load(f)
                same_options = other.name.split("-", 1)[-1] == suffix
                older = theirs.get("version", 0) < _VERSION  # superseded format (its path differs)
                if theirs.get("source") == meta["source"] and (same_options or older):
                    shutil.rmtree(other, ignore_errors=True)
            except (OSError, ValueError, AttributeError, TypeError):
                continue


# ------------------------------------------------------------------------------------------- integrity


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    """The outcome of a full check of one store (:func:`verify_stores`)."""

    # store directory
    path: Path
    # True when every checksum matched
    ok: bool
    # what was checked ("400 frames, 1 chunk(s), 1.2 MiB") or what is wrong
    detail: str
    # the damage, as the error FrameStore.open raises (None when ok)
    error: ActlabError | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "ok": self.ok,
            "detail": self.detail,
            "error": None if self.error is None else self.error.as_dict(),
        }


def verify_stores(
    ds: LeRobotV3Dataset, image_size: int | None = None, cache_dir: str | Path | None = None
) -> list[VerifyResult]:
    """Check every checksum of each store of ``ds`` (this version of the dataset, any camera set; only
    stores of ``image_size`` when given). A damaged store's next open checks it fully again (so training
    rebuilds it). An ActlabError when there is no store to check."""
    base = Path(cache_dir) if cache_dir is not None else cache_root() / "frames"
    size = None if image_size is None else str(image_size)
    paths = sorted(
        p
        for p in base.glob(f"{ds.fingerprint}-*")
        if p.is_dir() and (size is None or p.name.split("-")[1] == size)
    )
    if not paths:
        flag = "" if image_size is None else f" --image-size {image_size}"
        if cache_dir is not None:  # the store is built where --verify looks (the fix built it elsewhere)
            flag += f" --cache-dir {cache_dir}"
        raise ActlabError(
            "no frame store of this dataset to verify",
            file=base,
            expected=f"a directory {ds.fingerprint}-{size or '*'}-*",
            found="none",
            fix=f"build one: `actlab data cache {ds.root}{flag}`",
        )
    out = []
    for path in paths:
        try:
            store = FrameStore.open(path, verify="full")
            info = store.verify_summary()
        except ActlabError as e:
            out.append(VerifyResult(path, False, f"{e.problem}: {e.found}", e))
            continue
        if changed := sources_changed(ds, store.meta.get("sources")):
            size = store.meta.get("image_size")
            flags = "" if size is None else f" --image-size {size}"
            flags += "" if cache_dir is None else f" --cache-dir {cache_dir}"
            error = ActlabError(
                "the frame store's frames are not the dataset's: a source file changed since it was built",
                file=path,
                found=changed,
                fix=f"rebuild it: `actlab data cache {ds.root}{flags} --rebuild` (training rebuilds it too)",
            )
            out.append(VerifyResult(path, False, f"{error.problem}: {changed}", error))
            continue
        detail = f"{info['frames']} frames, {info['chunks']} chunk(s), {human_bytes(info['bytes'])}"
        out.append(VerifyResult(path, True, detail))
    return out


def _damaged(path: Path, meta: Any, problem: str, file: Path, field: str, expected: Any, found: Any):
    """The error for a damaged store, with the command that rebuilds it."""
    source = meta.get("source") if isinstance(meta, dict) else None
    size = meta.get("image_size") if isinstance(meta, dict) else None
    cmd = f"actlab data cache {source or 'DATASET'}" + (f" --image-size {size}" if size else "")
    if Path(path).parent.resolve() != (cache_root() / "frames").resolve():  # (24th: the fix rebuilt
        cmd += f" --cache-dir {Path(path).parent}"  # a store in the default place, this one stayed damaged)
    cmd += " --rebuild"
    return ActlabError(
        f"damaged frame store: {problem}",
        file=file,
        field=field,
        expected=expected,
        found=found,
        fix=f"rebuild it from the dataset: `{cmd}` (or delete {path}; training rebuilds a missing store)",
    )


def _npy_header(file: Path) -> tuple[int, tuple[int, ...], np.dtype]:
    """(data offset, shape, dtype) from a .npy header; ValueError/EOFError when it is not one."""
    with open(file, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = (
            np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        )
        shape, fortran, dtype = read(f)
        if fortran:
            raise ValueError("Fortran-ordered array")
        return f.tell(), tuple(shape), dtype


def _checksum_entry(file: Path, shape: tuple[int, ...]) -> dict[str, Any]:
    """What store.json records of a frame file just written: shape, layout, size and chunk checksums."""
    offset, _, _ = _npy_header(file)
    frame_bytes = int(np.prod(shape[1:]))
    chunk_frames = max(1, CHUNK_BYTES // frame_bytes)
    chunks = range((shape[0] + chunk_frames - 1) // chunk_frames)
    return {
        "shape": list(shape),
        "offset": offset,
        "bytes": (file.stat().st_size),
        "chunk_frames": chunk_frames,
        "checksums": _digests(file, offset, frame_bytes, shape[0], chunk_frames, chunks),
    }


def _digests(file: Path, offset: int, frame_bytes: int, n: int, chunk_frames: int, chunks) -> list[str]:
    """blake2b digests of the given chunks of frames, hashed on a few threads (hashlib releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(c: int) -> str:
        lo, hi = c * chunk_frames, min(n, (c + 1) * chunk_frames)
        with open(file, "rb") as f:
            f.seek(offset + lo * frame_bytes)
            data = f.read((hi - lo) * frame_bytes)
        return hashlib.blake2b(data, digest_size=16).hexdigest()

    chunks = list(chunks)
    if len(chunks) <= 1:
        return [one(c) for c in chunks]
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1, len(chunks))) as pool:
        return list(pool.map(one, chunks))


def _open_frames(path: Path, meta: dict, key: str, entry: dict) -> np.ndarray:
    """Cheap checks of one frame file (size, npy header, shape against store.json), then its memmap."""
    file = path / entry["file"]
    shape = tuple(int(x) for x in entry["shape"])
    want_bytes = int(entry["offset"]) + int(np.prod(shape))
    if not file.is_file():
        raise _damaged(path, meta, f"frame file of {key} missing", file, key, "a file", "missing")
    size = file.stat().st_size
    if size != int(entry["bytes"]) or size != want_bytes:
        raise _damaged(
            path,
            meta,
            f"frame file of {key} has the wrong size (truncated or overwritten)",
            file,
            key,
            f"{entry['bytes']} bytes",
            f"{size} bytes",
        )
    try:
        offset, header_shape, dtype = _npy_header(file)
    except (ValueError, EOFError, OSError) as e:
        raise _damaged(
            path,
            meta,
            f"frame file of {key} has no valid npy header",
            file,
            key,
            "an .npy header",
            f"{type(e).__name__}: {e}",
        ) from e
    if (offset, header_shape, dtype) != (int(entry["offset"]), shape, np.dtype(np.uint8)):
        raise _damaged(
            path,
            meta,
            f"frame file of {key} disagrees with store.json",
            file,
            key,
            f"uint8 {shape} at byte {entry['offset']}",
            f"{dtype} {header_shape} at byte {offset}",
        )
    if shape[0] != int(meta["frames"]):
        raise _damaged(
            path,
            meta,
            f"{key} holds another number of frames than the store",
            path / _META,
            f"keys.{key}.shape",
            meta["frames"],
            shape[0],
        )
    return np.load(file, mmap_mode="r")


def _verify_chunks(path: Path, meta: dict, key: str, entry: dict, sample: int | None) -> None:
    """Compare the checksums of all chunks (``sample`` None) or of ``sample`` random ones."""
    file = path / entry["file"]
    shape = tuple(int(x) for x in entry["shape"])
    sums = list(entry["checksums"])
    chunk_frames = int(entry["chunk_frames"])
    if chunk_frames < 1:  # 0 was a ZeroDivisionError traceback
        raise _damaged(
            path, meta, "store.json's chunk size is not a positive number of frames", path / _META,
            f"keys.{key}.chunk_frames", ">= 1", chunk_frames,
        )  # fmt: skip
    if len(sums) != (shape[0] + chunk_frames - 1) // chunk_frames:
        raise _damaged(
            path,
            meta,
            "store.json lacks checksums",
            path / _META,
            f"keys.{key}.checksums",
            f"one per {chunk_frames} frames",
            f"{len(sums)}",
        )
    chunks = range(len(sums))
    if sample is not None and sample < len(sums):
        # A fresh unseeded generator: different chunks at each open (coverage over time), no global state.
        chunks = sorted(np.random.default_rng().choice(len(sums), size=sample, replace=False).tolist())
    chunks = list(chunks)
    got = _digests(file, int(entry["offset"]), int(np.prod(shape[1:])), shape[0], chunk_frames, chunks)
    bad = [c for c, d in zip(chunks, got) if d != sums[c]]
    if bad:
        lo, hi = bad[0] * chunk_frames, min(shape[0], (bad[0] + 1) * chunk_frames)
        raise _damaged(
            path,
            meta,
            f"frames of {key} changed since the store was built",
            file,
            f"{key} frames {lo}..{hi - 1}",
            f"the {_HASH} checksums recorded at build",
            f"{len(bad)} of {len(chunks)} checked chunk(s) differ (first: frames {lo}..{hi - 1})",
        )


def _file_stats(path: Path, meta: dict) -> dict[str, list[int]]:
    out = {}
    for key, entry in meta["keys"].items():
        st = (path / entry["file"]).stat()
        out[key] = [st.st_size, st.st_mtime_ns]
    return out


def _changed_since_verified(path: Path, meta: dict) -> bool:
    """True when a frame file's size or mtime differs from the last full check (or none is recorded)."""
    try:
        with open(path / _VERIFIED) as f:
            return json.load(f) != _file_stats(path, meta)
    except (OSError, ValueError):
        return True


def _write_verified(path: Path, meta: dict) -> None:
    """Record the files' stat after a full check (atomic; skipped when the store is read-only)."""
    with contextlib.suppress(OSError):
        atomic_write_json(path / _VERIFIED, _file_stats(path, meta))
