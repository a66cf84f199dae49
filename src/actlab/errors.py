"""One error type that every user-facing failure goes through.

A message a user can act on names the file, the field, what was expected, what was found and the fix.
The CLI prints these without a traceback and exits with status 2.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any


class ActlabError(Exception):
    """A failure caused by input the user controls (a file, a flag, a config value)."""

    def __init__(
        self,
        problem: str,
        *,
        file: str | Path | None = None,
        field: str | None = None,
        expected: object = None,
        found: object = None,
        fix: str | None = None,
    ) -> None:
        self.problem = problem
        self.file = str(file) if file is not None else None
        self.field = field
        self.expected = expected
        self.found = found
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        lines = [self.problem]
        if self.file is not None:
            lines.append(f"  file:     {self.file}")
        if self.field is not None:
            lines.append(f"  field:    {self.field}")
        if self.expected is not None:
            lines.append(f"  expected: {self.expected}")
        if self.found is not None:
            lines.append(f"  found:    {_shown(self.found)}")
        if self.fix is not None:
            lines.append(f"  fix:      {self.fix}")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {
            "problem": self.problem,
            "file": self.file,
            "field": self.field,
            "expected": None if self.expected is None else str(self.expected),
            "found": None if self.found is None else _shown(self.found),
            "fix": self.fix,
        }


def _shown(value: object) -> str:
    """``value`` as an error shows it: an integer of more than 20 digits by its first digits and length
    (a refused `--set steps=1e308` printed all 309 digits: 21st fault run)."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            text = str(value)
        except ValueError:  # past Python's int-to-text limit (4300 digits by default)
            return f"an integer of {value.bit_length()} bits"
        digits = len(text.lstrip("-"))
        if digits > 20:
            return f"{text[: 6 + text.startswith('-')]}... (an integer of {digits} digits)"
    return str(value)


class Terminated(SystemExit):
    """Raised in the main thread by SIGTERM where :func:`actlab.utils.procs.exit_on_sigterm` is active:
    unwinds like Ctrl-C (every ``finally`` runs: worker pools stop, temporary outputs are removed) and,
    uncaught, exits with 128 + the signal number, as a process killed by that signal would."""

    def __init__(self, signum: int = 15) -> None:
        super().__init__(128 + signum)
        self.signum = signum
        # what the stopped command wrote or did not, said after "terminated (SIGTERM)" (None: the
        # generic line; set by a command that knows, as the exception passes through it)
        self.note: str | None = None


# ------------------------------------------------------------------------- failures of the environment

# Names under which actlab code keeps the path it is reading or writing; the innermost frame of a failure
# that holds one names the file when the exception itself does not (UnicodeDecodeError, EOFError).
_PATH_LOCALS = ("path", "file", "filename", "fname", "src", "source", "target", "dst", "out")


def from_environment(e: BaseException) -> ActlabError | None:
    """The ActlabError for an exception caused by the environment rather than by actlab's code, or None.

    Covers what a user fixes outside the code: an OSError (a full disk, no permission, a read-only
    filesystem, a missing file, a directory where a file belongs, a failing disk), text that is not UTF-8,
    a file that ends early (truncated), a file a library cannot parse (parquet, safetensors), and memory.
    ``actlab``'s CLI turns these into its usual message (file, found, fix) instead of a traceback; any
    other exception is a bug and keeps its traceback.
    """
    if isinstance(e, OSError):
        return _os_error(e)
    named = getattr(e, "filename", None)  # PyAV's errors carry it too
    # (PyAV's decoding errors carry the libav function there, 'avcodec_send_packet()': it was named as
    # the file of a video edited in its middle; 25th fault run, recurate_after_src_change)
    if isinstance(named, str) and not _names_a_path(named):
        named = None
    file = named if isinstance(named, str) and named else _file_in_traceback(e)
    if isinstance(e, UnicodeDecodeError):
        return ActlabError(
            "a file is not UTF-8 text",
            file=file,
            expected="UTF-8 text (JSON metadata and configs are UTF-8)",
            found=f"{e.reason} at byte {e.start} ({e.object[e.start : e.start + 4]!r})",
            fix="the file is damaged or not the file actlab expects: restore it from a copy or regenerate it",
        )
    if isinstance(e, UnicodeEncodeError) and "surrogate" in str(e.reason):
        # Not the terminal: a name holds bytes that are no UTF-8 (Python carries them as surrogates), and
        # no encoding can print or write it as text (`sim record --out $'d\xff'` blamed the terminal).
        bad = e.object[e.start : e.end] if isinstance(e.object, str) else ""
        raw = os.fsencode(bad) if bad else b""
        return ActlabError(
            "a path or name holds bytes that are not UTF-8 text, which actlab cannot print or record",
            found=f"{raw!r} in {e.object[:200]!r}" if raw else e.reason,
            fix="rename it to a UTF-8 name, or choose another --out (a UTF-8 path)",
        )
    if isinstance(e, UnicodeEncodeError):
        return ActlabError(
            "text cannot be printed in this terminal's encoding",
            found=f"{e.encoding}: {e.reason}",
            fix="run with PYTHONIOENCODING=utf-8 (or a UTF-8 locale, e.g. LANG=C.UTF-8)",
        )
    if isinstance(e, EOFError):
        return ActlabError(
            "a file ended before its content did (truncated)",
            file=file,
            found=str(e) or "end of file",
            fix="the file was cut short (an interrupted copy or a full disk): restore it or regenerate it",
        )
    if isinstance(e, MemoryError):
        return ActlabError(
            "out of memory",
            found="MemoryError",
            fix="close other programs, or make the job smaller (fewer --workers, a smaller batch or image)",
        )
    module = type(e).__module__ or ""
    kinds = {"safetensors": "weights", "pyarrow": "parquet", "av": "video"}
    kind = next((k for m, k in kinds.items() if module == m or module.startswith(m + ".")), None)
    if kind is not None:
        # a library's write or read that failed in the OS: safetensors' "I/O error: No space left on device
        # (os error 28)" writing the reward model on a full disk was "a weights file cannot be read: it is
        # damaged", fix "actlab data doctor" (27th fault run, full_disk_reward_model2)
        if (code := _os_error_code(str(e))) is not None:
            return _os_error(OSError(code, os.strerror(code), file))
        return ActlabError(
            f"a {kind} file cannot be read: it is damaged or not that kind of file",
            file=file,
            found=f"{type(e).__name__}: {e}",
            fix="restore the file from a copy or regenerate it (`actlab data doctor PATH` lists a "
            "dataset's damaged files)",
        )
    return None


def _os_error_code(message: str) -> int | None:
    """The errno a library's message carries as Rust's io::Error prints it ("... (os error 28)"), or None."""
    m = re.search(r"\(os error (\d+)\)", message)
    return int(m[1]) if m else None


def _stdout_file_on_full_disk() -> str | None:
    """The file stdout is redirected to when it is a regular file on a disk with no space left (the
    unnamed write that failed was most likely the command's output to it), else None."""
    import os
    import stat

    try:
        path = os.readlink("/proc/self/fd/1")
        if not path.startswith("/") or not stat.S_ISREG(os.stat(path).st_mode):
            return None
        return path if os.statvfs(os.path.dirname(path)).f_bavail == 0 else None
    except OSError:
        return None


def _os_error(e: OSError) -> ActlabError:
    import errno
    import os

    name = e.filename if isinstance(e.filename, (str, bytes, os.PathLike)) and e.filename else None
    file = os.fsdecode(name) if name is not None else _file_in_traceback(e)
    if file is None and e.errno in (errno.ENOSPC, errno.EDQUOT):
        file = _stdout_file_on_full_disk()  # `actlab ... > FILE` on a full disk: was `df -h .`
    found = f"[Errno {e.errno}] {e.strerror}" if e.errno else f"{type(e).__name__}: {e}"
    folder = os.path.dirname(os.path.abspath(file)) if file else "."
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)  # the nearest directory that exists (a temp dir is gone)
    where = f"`ls -ld {folder}`"
    kinds = {
        errno.ENOSPC: ("the disk is full", f"free space on that disk (`df -h {folder}`), or write elsewhere"),
        errno.EDQUOT: ("disk quota exceeded", "free space within your quota (`quota`), or write elsewhere"),
        errno.EACCES: ("permission denied", f"check the file's and its directory's permissions ({where})"),
        errno.EPERM: ("operation not permitted", f"check the permissions and attributes ({where})"),
        errno.EROFS: ("the filesystem is read-only", f"write to a writable disk (`findmnt -T {folder}`)"),
        errno.EIO: ("I/O error: the disk is failing", "copy what matters off the disk; check `dmesg`"),
        errno.ENOENT: ("file or directory not found", "check the path"),
        # (a lock file or cache entry actlab makes itself can be in the way too: the user passed neither)
        errno.EISDIR: (
            "a directory where a file was expected",
            "if you gave this path, pass the file, not "
            "its directory; if actlab makes this file itself (a .lock, a cache entry), move the "
            "directory away",
        ),
        errno.ENOTDIR: ("a file where a directory was expected", "pass the directory, not a file"),
        errno.ENOEXEC: ("not an executable program", "pass the path of the program itself"),
        errno.ENOMEM: ("out of memory", "close other programs or make the job smaller"),
        errno.EMFILE: ("too many open files", "raise the limit (`ulimit -n 4096`) and run again"),
        errno.ENAMETOOLONG: ("file name too long", "use a shorter path"),
        errno.EPIPE: ("the process at the other end of a pipe exited", "see that process's messages above"),
    }
    problem, fix = kinds.get(
        e.errno or -1, ("a file could not be read or written", "check the file, its disk and the path")
    )
    if e.errno is None:  # a library's OSError about content (pyarrow: "Couldn't deserialize thrift")
        problem, fix = "a file is damaged or not the kind of file expected", "restore or regenerate it"
    blocker = _file_in_the_way(file) if e.errno in (errno.EEXIST, errno.ENOTDIR) else None
    if blocker is not None:  # `mkdir -p` through a file said only "[Errno 17] File exists"
        problem = f"a file is in the way: {blocker} is a file where a directory is needed"
        fix = f"move {blocker} away, or choose a path that does not pass through it"
    return ActlabError(f"{problem}", file=file, found=found, fix=f"{fix}; then run the command again")


def _file_in_the_way(path: str | None) -> str | None:
    """The first component of ``path`` that exists and is not a directory (``--out notes.txt/x``)."""
    import os

    if not path:
        return None
    parts = os.path.abspath(path).split(os.sep)
    for i in range(2, len(parts) + 1):
        head = os.sep.join(parts[:i])
        if not os.path.exists(head):
            return None
        if not os.path.isdir(head):
            return head
    return None


def _file_in_traceback(e: BaseException) -> str | None:
    """The path the innermost frame of ``e``'s traceback was working on (a local named like a path that
    names an existing file or directory, or one being created in an existing directory), or None."""
    import os

    frames = []
    tb = e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        # (a method's file is its object's: VideoDecoder.frames_at works on self.path, and a video edited
        # in its middle was named by the caller's --out; 25th fault run)
        values = [frame.f_locals.get(name) for name in _PATH_LOCALS]
        values.append(getattr(frame.f_locals.get("self"), "path", None))
        for value in values:
            if isinstance(value, (str, os.PathLike)) and value and _names_a_path(os.fspath(value)):
                return os.fspath(value)
    return None


def _names_a_path(text: str) -> bool:
    import os

    if "\n" in text or len(text) > 4096:
        return False
    return os.path.exists(text) or (os.sep in text and os.path.isdir(os.path.dirname(text) or "."))


def plain_warnings(old: Any) -> Any:
    """A ``warnings.showwarning`` that says actlab's own warnings as one line, "warning: MESSAGE", and
    hands every other warning to ``old`` (Python's format). Installed by the command line for its
    process and by :func:`actlab.utils.procs.worker_pool` in each worker: an evaluation's workers said
    "/path/to/actlab/evaluation/harness.py:177: UserWarning: MESSAGE" and a line of the source."""
    import contextlib
    import os
    import sys

    def show(message, category, filename, lineno, file=None, line=None):
        if not (f"{os.sep}actlab{os.sep}" in str(filename) and issubclass(category, UserWarning)):
            return old(message, category, filename, lineno, file, line)
        with contextlib.suppress(OSError, ValueError):  # stderr closed: nothing to say it on
            print(f"warning: {message}", file=file or sys.stderr)
        return None

    return show


def refusal_in(exc: BaseException | None) -> ActlabError | None:
    """The ActlabError in ``exc``'s chain (its causes and contexts), or None."""
    while exc is not None:
        if isinstance(exc, ActlabError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def plain_refusals(previous: Any) -> Any:
    """A ``sys.excepthook`` for programs that are not actlab's command line (LeRobot's scripts with actlab's
    plugin): an uncaught exception whose chain holds an ActlabError prints as actlab prints it, ``error:
    ...`` with the file, field, expected value and fix, instead of two tracebacks (~40 lines of LeRobot's
    from_pretrained chain around actlab's own) with the error at their end. Any other exception, or
    ACTLAB_TRACEBACK=1, goes to ``previous``."""
    import os
    import sys

    def hook(kind: Any, value: BaseException, tb: Any) -> None:
        refusal = refusal_in(value)
        if refusal is None or os.environ.get("ACTLAB_TRACEBACK"):
            previous(kind, value, tb)
            return
        print(f"error: {refusal.render()}", file=sys.stderr)

    hook.actlab_refusals = True  # type: ignore[attr-defined]
    return hook
