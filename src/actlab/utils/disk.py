"""Disk space and failed writes: free space, a preflight refusal, and OSErrors turned into ActlabErrors.

Used by everything that writes large outputs (training checkpoints, recorded and imported datasets), so
each kind of failed write gets the same message and the same advice wherever it happens.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

from actlab.errors import ActlabError
from actlab.utils.io import in_temporary_of
from actlab.utils.units import human_bytes

# errno values of a full disk: no space left (ENOSPC) and disk quota exceeded (EDQUOT)
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# errno values of a location the user may not write: EACCES (file mode, ACL) and EPERM (e.g. chattr +i)
PERMISSION_ERRNOS = (errno.EACCES, errno.EPERM)
# errno value of a filesystem mounted read-only (also what the kernel remounts a damaged one to)
READ_ONLY_ERRNOS = (errno.EROFS,)
# errno value of a device that failed to read or write: a failing disk, a dropped USB or network link
IO_ERRNOS = (errno.EIO,)
WRITE_ERRNOS = DISK_FULL_ERRNOS + PERMISSION_ERRNOS + READ_ONLY_ERRNOS + IO_ERRNOS


def free_bytes(path: str | Path) -> int:
    """Free bytes on the filesystem that holds ``path`` (or its nearest existing parent)."""
    return shutil.disk_usage(_existing(Path(path))).free


def same_filesystem(a: str | Path, b: str | Path) -> bool:
    return os.stat(_existing(Path(a))).st_dev == os.stat(_existing(Path(b))).st_dev


def _existing(p: Path) -> Path:
    p = p.resolve()
    while not p.exists():
        p = p.parent
    return p


def require_free(
    need_bytes: int,
    path: str | Path,
    *,
    problem: str,
    expected: str,
    fix: str,
    field: str | None = None,
    limit_bytes: int | None = None,
    limit_name: str = "the limit",
) -> int:
    """Preflight: raise an ActlabError (``problem``, ``expected``, ``fix``) when ``need_bytes`` exceed the
    free space on the filesystem of ``path`` (or ``limit_bytes``, named ``limit_name``, if smaller).

    Returns the number of bytes that were available.
    """
    where = _existing(Path(path))
    if shutil.disk_usage(where).total == 0:
        # `sim record --out /proc/x` was "not enough disk space ... 0 B available": a place no file can be
        # made in, blamed on a full disk (23rd fault run)
        raise ActlabError(
            f"{where} is on a filesystem that stores no files (its size is 0: /proc, /sys and the like)",
            file=path,
            field=field,
            expected="a path on a disk",
            found=f"{where}: 0 B in all",
            fix="choose a path on a disk (nothing was run or written)",
        )
    free = free_bytes(path)
    available = free if limit_bytes is None else min(free, limit_bytes)
    if need_bytes <= available:
        return available
    source = limit_name if limit_bytes is not None and limit_bytes < free else "the free space"
    raise ActlabError(
        problem,
        file=path,
        field=field,
        expected=expected,
        found=f"{human_bytes(available)} available ({source})",
        fix=fix,
    )


def write_error(
    e: BaseException,
    file: str | Path | None,
    *,
    out: str | Path,
    stopped: str,
    again: str,
    elsewhere: str,
    save_less: str = "",
    rescue: str = "",
    found: str = "",
    need_bytes: int | None = None,
    outside: str = "",
) -> ActlabError | None:
    """The ActlabError for a write that failed with an OSError of a class a user fixes outside the code
    (a full disk, no permission, a read-only filesystem, a failing disk), or None for any other error.

    ``file``: what to name as the file (None: the file the OSError names, else ``out``); ``out``: the output
    directory the user chose; ``stopped``: what became of the output, after the class of the problem
    (``"training stopped (checkpoint ... is intact)"``); ``again``: how to continue in place once repaired;
    ``elsewhere``: how to continue on another disk; ``save_less``: other ways to need less space (full
    disk only), starting with ", or"; ``rescue``: what to copy off a failing disk first (I/O error only);
    ``found``: appended to the errno in the ``found`` line; ``need_bytes``: roughly what the whole output
    needs, when known (named for a full disk); ``outside``: what to do when the failed file lies outside
    ``out`` (a frame cache in ~/.cache/actlab), where copying ``out`` elsewhere would not help (the fix of
    a read-only frame cache told the user to copy a run directory that did not exist).
    """
    if not isinstance(e, OSError) or e.errno not in WRITE_ERRNOS:
        return None
    named = Path(e.filename) if isinstance(e.filename, (str, os.PathLike)) and e.filename else None
    path = Path(file) if file is not None else named or Path(out)
    where = _nearest_dir(named or path)  # the directory the write went to, or what is left of it
    disk = out
    if named is not None and not _inside(named, Path(out)):
        # the write went elsewhere: that location is the one to fix, not the output directory
        elsewhere = outside or f"point the setting that names {where} (outside {out}) at a writable disk"
        disk = where
    if e.errno in DISK_FULL_ERRNOS:
        kind = "the disk is full"
        fix = (
            f"free space on the disk holding {disk} ({human_bytes(free_bytes(disk))} free now"
            + (f", about {human_bytes(need_bytes)} needed" if need_bytes else "")
            + f"){save_less}, then "
            f"{again}; or {elsewhere}"
        )
    elif e.errno == errno.EPERM:
        # EPERM, not EACCES: not the permissions (root has them) but an attribute, e.g. immutable (chattr +i):
        # it was "permission denied ... user root needs write access there"
        kind = "operation not permitted"
        fix = (
            f"check the attributes, ownership and permissions of {where} and its parents "
            f"(`lsattr -d {where}`: an immutable or append-only flag is removed with chattr -i / -a; "
            f"`ls -ld {where}`); then "
            f"{again}; or {elsewhere}"
        )
    elif e.errno in PERMISSION_ERRNOS and named is not None and _unreadable(named):
        # a read of an input (a video, a checkpoint's optimizer.pt) that the user may not read: it was
        # "user root needs write access there; or point the frame cache at a writable disk"
        return ActlabError(
            f"permission denied: cannot read {named.name}: {stopped}",
            file=named,
            found=f"[Errno {e.errno}] {os.strerror(e.errno)}{found}",
            fix=f"check the ownership and permissions of {named} and its directories (`ls -l {named}`): user "
            f"{_user()} needs read access to it; then {again}",
        )
    elif e.errno in PERMISSION_ERRNOS:
        kind = "permission denied"
        fix = (
            f"check the ownership and permissions of {where} and its parents (`ls -ld {where}`): user "
            f"{_user()} needs write access there; then {again}; or {elsewhere}"
        )
    elif e.errno in READ_ONLY_ERRNOS:
        kind = "the filesystem is read-only"
        fix = (
            f"{where} is on a filesystem mounted read-only (`findmnt -T {where}` shows it; one the kernel "
            f"remounted read-only after an error needs `fsck` first): {elsewhere} (a writable one), or "
            f"remount it read-write, then {again}"
        )
    else:
        kind = "I/O error: the disk is failing"
        first = f"{rescue} now, before more of the disk fails; then " if rescue else ""
        fix = f"{first}{elsewhere}; check the disk (`dmesg`, `smartctl -a`) before writing to it again"
    return ActlabError(
        f"{kind}: {stopped}",
        file=path,
        found=f"[Errno {e.errno}] {os.strerror(e.errno)}{found}",
        fix=fix,
    )


def _unreadable(p: Path) -> bool:
    """``p`` exists (as a file, not followed elsewhere) and this process may not read it: the failed call
    was a read, not a write."""
    try:
        return p.is_file() and not os.access(p, os.R_OK)
    except OSError:
        return False


def _inside(p: Path, root: Path) -> bool:
    """``p`` is ``root``, lies in it, or lies in the temporary directory ``root`` is built in (a full disk
    met by a dataset being written was told to fix "the setting that names" the disk's root)."""
    a, b = Path(os.path.abspath(p)), Path(os.path.abspath(root))
    return a == b or b in a.parents or in_temporary_of(a, b)


def _nearest_dir(p: Path) -> Path:
    p = Path(os.path.abspath(p))
    while not p.is_dir() and p.parent != p:
        p = p.parent
    return p


def _user() -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(os.geteuid()).pw_name} (uid {os.geteuid()})"
    except (ImportError, KeyError):
        return f"uid {os.geteuid()}"
