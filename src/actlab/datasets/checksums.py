"""Content checksums of the files of a dataset actlab wrote: bytes damaged on disk or in a copy are found.

Parquet pages carry their own CRC (the writer turns it on), but an mp4 has none: bytes overwritten inside
a video mostly decode without an error into frames of wrong pixels, which a policy would train on. So the
writer records the sha256 and size of every data, video and episodes file in ``meta/actlab_checksums.json``
(LeRobot ignores the extra file); ``actlab data doctor`` checks them all and ``FrameStore.build`` checks a
camera's videos before decoding them.

A dataset changed since by another tool (LeRobot's editing tools rewrite files and keep unknown metadata)
would fail every check, so the record names the totals of info.json it was made for: when those differ,
the record is stale and nothing is checked (the doctor says so).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.utils.io import atomic_write_json, read_json

CHECKSUMS_PATH = "meta/actlab_checksums.json"
_FORMAT = "actlab.checksums"
# The folders whose files are recorded (relative to the dataset root).
_FOLDERS = ("data", "videos", "meta/episodes")


def sha256(file: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks (about 1 GB/s: 0.1 s for the demo's 69 MB)."""
    h = hashlib.sha256()
    with open(file, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def record(root: Path, info: dict[str, Any]) -> None:
    """Write the checksums of ``root``'s data, video and episodes files (the writer calls this last)."""
    files = {}
    for folder in _FOLDERS:
        for p in sorted((root / folder).rglob("*")):
            if p.is_file() and not p.name.startswith("."):
                files[p.relative_to(root).as_posix()] = {"size": p.stat().st_size, "sha256": sha256(p)}
    atomic_write_json(
        root / CHECKSUMS_PATH,
        {
            "format": _FORMAT,
            "algorithm": "sha256",
            "total_frames": info.get("total_frames"),
            "total_episodes": info.get("total_episodes"),
            "files": files,
        },
    )


def load(root: Path, info: dict[str, Any]) -> tuple[dict[str, dict[str, Any]] | None, str | None]:
    """(recorded files, None), or (None, why nothing can be checked: absent, unreadable or stale)."""
    path = root / CHECKSUMS_PATH
    if not path.is_file():
        return None, "no checksums recorded (not written by actlab, or by an older actlab)"
    try:
        data = read_json(path, "dataset checksums")
    except ActlabError as e:
        return None, f"{path} is unreadable: {e.problem}"
    files = data.get("files") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or data.get("format") != _FORMAT
        or not isinstance(files, dict)
        or not all(isinstance(e, dict) for e in files.values())
    ):
        # valid JSON of another shape (`[1, 2]`, entries that are not objects) turned every check off
        # without a word: it is said as unreadable, like a record that is not JSON at all
        return None, f"{path} is unreadable: not an actlab checksum record (format {_FORMAT}, files by path)"
    if (data.get("total_frames"), data.get("total_episodes")) != (
        info.get("total_frames"),
        info.get("total_episodes"),
    ):
        return None, f"{path} is stale: recorded for other totals than info.json's (edited by another tool)"
    return data["files"], None


def damaged(root: Path, info: dict[str, Any], prefix: str = "") -> list[tuple[str, str, str]]:
    """``(relative path, expected, found)`` of every recorded file under ``prefix`` whose content differs
    from the record (a missing file is left to the checks that name missing files)."""
    files, _ = load(root, info)
    bad = []
    for rel, entry in (files or {}).items():
        p = root / rel
        if not rel.startswith(prefix) or not p.is_file() or not isinstance(entry, dict):
            continue
        size = p.stat().st_size
        if size != entry.get("size"):
            bad.append((rel, f"{entry.get('size')} bytes", f"{size} bytes"))
        elif (found := sha256(p)) != entry.get("sha256"):
            bad.append((rel, f"sha256 {entry.get('sha256')}", f"sha256 {found}"))
    return bad


def check_videos(root: Path, info: dict[str, Any], key: str) -> None:
    """Raise an ActlabError for the first video of camera ``key`` whose content differs from the record
    (before the FrameStore decodes it: damaged video bytes mostly decode into wrong pixels, silently)."""
    for rel, expected, found in damaged(root, info, f"videos/{key}/"):
        raise ActlabError(
            "a video file is damaged: its content differs from what the dataset was written with",
            file=root / rel,
            field=f"{CHECKSUMS_PATH} files.{rel}",
            expected=expected,
            found=found,
            fix=REPAIR,
        )


REPAIR = (
    "restore the file from a copy (or re-record / re-export the dataset); `actlab data doctor PATH` "
    f"lists every damaged file. If you changed the file on purpose, delete {CHECKSUMS_PATH}"
)
