"""Atomic file and directory writes: a crash or an error never leaves a partial output behind.

Every file actlab writes goes to a temporary name in the same directory first and is renamed into place
(rename is atomic on POSIX within one filesystem).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(path: Path) -> None:
    # Why: the rename itself lives in the directory entry; fsync it so a power cut keeps the new name.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: str | Path, mode: str = "wb") -> Iterator[Any]:
    """Open a temporary file beside ``path``; on success it replaces ``path``, on error it is removed."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:  # name the file the user asked for, not the hidden temporary name
        raise OSError(e.errno, e.strerror, str(path)) from e
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        # Why: mkstemp creates 0600 files; outputs should get the usual permissions (0666 minus umask).
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None:
            e.filename = str(path)  # a failed write() names no file: name the one being written
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_file(path, "wb") as f:
        f.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any, indent: int = 2) -> None:
    atomic_write_text(path, json.dumps(obj, indent=indent, sort_keys=False, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    # numpy scalars/arrays and Paths appear in stats and configs.
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


@contextlib.contextmanager
def atomic_dir(path: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Build a directory under a temporary name and rename it to ``path`` only when the block succeeds.

    With ``overwrite`` an existing ``path`` is replaced (moved aside, then deleted after the rename);
    otherwise an existing ``path`` is an error raised before anything is written.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise ActlabError(
            "output directory already exists",
            file=path,
            fix="choose another --out, delete it, or pass the command's overwrite flag",
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    except OSError as e:  # name the directory the user asked for, not the hidden temporary name
        raise OSError(e.errno, e.strerror, str(path)) from e
    try:
        yield tmp
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700 directories
        os.replace(tmp, path)
        _fsync_dir(path.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError) and isinstance(e.filename, str) and e.filename.startswith(f"{tmp}{os.sep}"):
            e.filename = str(path / os.path.relpath(e.filename, tmp))  # the name it would have had
        raise


def write_png(path: str | Path, image: Any) -> Path:
    """Write an HWC uint8 RGB array as a PNG (atomically); returns the path."""
    import numpy as np
    from PIL import Image

    path = Path(path)
    with atomic_file(path, "wb") as f:
        Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8)).save(f, format="PNG")
    return path


def read_json(path: str | Path, what: str = "JSON file") -> Any:
    """Read JSON with an error that names the file and the position of a syntax error."""
    path = Path(path)
    if not path.is_file():
        raise ActlabError(f"{what} not found", file=path, fix="check the path")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ActlabError(
            f"{what} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}",
            file=path,
            fix="repair or regenerate the file",
        ) from e
    except UnicodeDecodeError as e:  # bytes overwritten, or a binary file where JSON belongs
        raise ActlabError(
            f"{what} is not UTF-8 text",
            file=path,
            expected="UTF-8 JSON",
            found=f"{e.reason} at byte {e.start}",
            fix="restore the file from a copy or regenerate it",
        ) from e
