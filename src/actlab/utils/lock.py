"""An exclusive lock on a directory, held by one process at a time (e.g. a training run directory).

The lock is ``flock(2)`` on a file inside the directory (:data:`LOCK_FILE`). The kernel releases it when
the holding process exits for any reason, SIGKILL and power loss included, so a dead process never
leaves a stale lock: the file may stay behind, but nobody holds it. A second process (or a second
:class:`DirLock` in the same process) that asks for a held lock fails at once with an ActlabError naming
the directory and the pid written into the file by the holder. POSIX only (``fcntl``); on NFS Linux
implements ``flock`` with byte-range locks, which the server arbitrates across machines.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from actlab.errors import ActlabError

# Name of the lock file inside the locked directory (hidden: it is not an output).
LOCK_FILE = ".actlab.lock"


class DirLock:
    """``with DirLock(path, what="run directory"):`` creates ``path`` if needed and locks it.

    On release the lock file is removed, and so are the directories this lock created if they are empty,
    so a command refused while holding the lock leaves nothing behind. After a SIGKILL the file stays
    (unlocked) and the next holder reuses it.
    """

    def __init__(self, path: str | Path, what: str = "directory", fix: str | None = None) -> None:
        # ``fix``: the advice shown when the lock is held; ``{pid}`` is replaced by the holder's pid
        self.path = Path(path)
        self.what = what
        self.fix = fix
        self.file = self.path / LOCK_FILE
        self._fd: int | None = None
        self._created: list[Path] = []

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> DirLock:
        if self._fd is not None:
            return self
        self._created = _mkdirs(self.path)
        while True:
            try:
                fd = os.open(self.file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            except IsADirectoryError:  # "pass the file, not its directory": the user passed neither
                self._release_dirs()
                raise ActlabError(
                    f"the lock file of this {self.what} is a directory",
                    file=self.file,
                    expected=f"{LOCK_FILE}: a file actlab makes and locks there itself (or nothing)",
                    found="a directory",
                    fix=f"remove it (`rmdir {self.file}`, or move it away if it holds files) and run the "
                    "command again",
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                self._release_dirs()
                raise self._busy_error() from None
            # A holder releasing between our open and our flock removed the file first: then we locked
            # an orphan inode that nobody else can see, and must lock the file at the path instead.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.file).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
            self._created = _mkdirs(self.path) or self._created
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        """Remove the lock file, then unlock (a process waiting on the removed file retries: see the inode
        check in :meth:`acquire`), and remove the directories this lock created if they are empty."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            self.file.unlink(missing_ok=True)
        finally:
            os.close(fd)  # closing the last descriptor releases the flock
        self._release_dirs()

    def _release_dirs(self) -> None:
        for d in reversed(self._created):
            with contextlib.suppress(OSError):
                d.rmdir()  # only empty directories: anything written since stays
        self._created = []

    def _busy_error(self) -> ActlabError:
        try:
            pid = self.file.read_text().strip() or "unknown (it is starting)"
        except OSError:
            pid = "unknown"
        return ActlabError(
            f"the {self.what} is in use by another actlab process (pid {pid})",
            file=self.path,
            expected="no other process writing into it",
            found=f"{self.file} locked by pid {pid}",
            fix=(self.fix or "wait for pid {pid} to finish (or stop it), or choose another directory").format(
                pid=pid
            ),
        )

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _mkdirs(path: Path) -> list[Path]:
    """Create ``path`` and its missing parents; returns the directories created, outermost first."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    created = []
    for d in reversed(missing):
        try:
            d.mkdir()
            created.append(d)
        except FileExistsError:
            pass
    return created


def holder(path: str | Path) -> str | None:
    """The pid (as written into :data:`LOCK_FILE`) of the live process that holds ``path``'s lock now, or
    None: no lock file, or nobody holds it (a file left by a killed holder). Reads, never takes it."""
    file = Path(path) / LOCK_FILE
    try:
        fd = os.open(file, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                with contextlib.suppress(OSError):
                    return os.read(fd, 64).decode(errors="replace").strip() or "unknown"
                return "unknown"
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
