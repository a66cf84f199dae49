"""The source files a decoded cache or a run was made from, recorded by sha256 with inode and ctime, and
what changed in them since: the frame store, the stats cache, a training's checkpoints, rl's
demonstrations and the demo's recording compare the same record."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actlab.datasets import checksums

if TYPE_CHECKING:
    from actlab.datasets.reader import LeRobotV3Dataset


# A store's name holds the dataset's fingerprint, which hashes each source file's size, mtime and only its
# first and last 64 KiB: a video edited in the middle with its size kept and its mtime restored (`touch
# -r`, a copy tool keeping times) kept the store, whose frames were no longer the video's (23rd fault
# run). The store records each source file's sha256 with its inode and ctime: a write changes the ctime
# (no user call sets it), so a file whose inode and ctime are the recorded ones is unchanged and costs a
# stat; any other (edited, touched, or a copy: cp -a keeps mtimes, not ctimes) is hashed whole once per
# process that reuses the store (about 1 GB/s, far below decoding it again).
def _source_files(ds: LeRobotV3Dataset, keys: Sequence[str], data: bool = False) -> list[Path]:
    tops = {ds.root / ("videos/" + key if key in ds.video_keys else "data") for key in keys}
    tops |= {ds.root / "data"} if data else set()
    return sorted({p for top in tops for p in top.rglob("*") if p.is_file() and not p.name.startswith(".")})


# sha256 by (path, inode, ctime, size, mtime): a file with the same inode and ctime was not written since,
# so one process hashes a copied dataset's videos once, not at each check of a store, the stats cache and
# the demo's recording
_HASHED: dict[tuple[str, int, int, int, int], str] = {}


def _sha256(p: Path, st: os.stat_result) -> str:
    key = (str(p), st.st_ino, st.st_ctime_ns, st.st_size, st.st_mtime_ns)
    if key not in _HASHED:
        _HASHED[key] = checksums.sha256(p)
    return _HASHED[key]


def source_record(ds: LeRobotV3Dataset, keys: Sequence[str], data: bool = False) -> dict[str, dict[str, Any]]:
    """Each file the frames of ``keys`` are decoded from (and with ``data`` every data file): size,
    mtime, inode, ctime and sha256."""
    out = {}
    for p in _source_files(ds, keys, data):
        st = p.stat()
        out[p.relative_to(ds.root).as_posix()] = {
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "ino": st.st_ino,
            "ctime_ns": st.st_ctime_ns,
            "sha256": _sha256(p, st),
        }
    return out


def damaged_entry(record: dict[str, Any]) -> tuple[str, Any] | None:
    """The first entry of a :func:`source_record` that is not a file's record (a damaged or hand-edited
    record: its comparison was an AttributeError traceback, 26th fault run), or None. An object without
    the file's sha256 is one too: its comparison blamed the dataset, "changed ... sha256 None -> ...", and
    sent the user to find "the original dataset" they had given (27th fault run, rs_vid_entry_empty_dict)."""
    return next(
        (
            (rel, was)
            for rel, was in sorted(record.items())
            if not (isinstance(was, dict) and isinstance(was.get("sha256"), str))
        ),
        None,
    )


def sources_changed(
    ds: LeRobotV3Dataset, record: Any, since: str = "since the store was built"
) -> str | None:
    """What changed in the files ``record`` (a :func:`source_record`) names, or None (no record: a store,
    cache entry or run from before it, taken as it is). ``since``: when the record was made, in the words
    of its caller."""
    if not isinstance(record, dict):
        return None
    if (bad := damaged_entry(record)) is not None:
        return (
            f"{bad[0]}: its record is damaged (found {bad[1]!r:.60}, not its sha256, size, inode and ctime)"
        )
    for rel, was in sorted(record.items()):
        p = ds.root / rel
        try:
            st = p.stat()
            if [st.st_ino, st.st_ctime_ns] == [was.get("ino"), was.get("ctime_ns")]:
                # unchanged since it was hashed: the record's sha256 serves this process's later records
                # (a training's checkpoints record its videos) without reading the file again
                if isinstance(was.get("sha256"), str) and [st.st_size, st.st_mtime_ns] == [
                    was.get("size"),
                    was.get("mtime_ns"),
                ]:
                    _HASHED.setdefault(
                        (str(p), st.st_ino, st.st_ctime_ns, st.st_size, st.st_mtime_ns), was["sha256"]
                    )
                continue
            now = _sha256(p, st)
        except OSError as e:
            return f"{rel}: {e.strerror or type(e).__name__}"
        if now != was.get("sha256"):
            return (
                f"the dataset's {rel} changed {since} ({st.st_size} bytes, sha256 "
                f"{str(was.get('sha256'))[:16]} -> {now[:16]}; its size and mtime may be the same)"
            )
    return None
