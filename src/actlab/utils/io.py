"""Atomic file and directory writes: a crash or an error never leaves a partial output behind.

Every file actlab writes goes to a temporary name in the same directory first and is renamed into place
(rename is atomic on POSIX within one filesystem).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.utils.lock import DirLock
from actlab.utils.procs import (
    dead_pid,
    exit_on_sigterm,
    owned_by_host,
    owned_name,
    sigterm_deferred,
    writer_alive,
)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def fsync_dir(path: Path) -> None:
    """fsync a directory (best effort: a filesystem that cannot is left as it is)."""
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


def name_file(e: OSError, filename: str) -> None:
    """Make ``e`` name ``filename`` (for the error a user sees: a failed write() names no file, or a
    temporary one); the caller then re-raises it. Some OSError subclasses make ``filename`` read-only
    (PyAV's ``av.error.OSError``, the full disk of a video file: setting it was an AttributeError
    traceback instead of "the disk is full"); for those a plain OSError with the same errno and message,
    naming the file, is raised here from ``e``."""
    try:
        e.filename = filename
    except AttributeError:
        raise OSError(e.errno, e.strerror or str(e), filename) from e


@contextlib.contextmanager
def atomic_file(path: str | Path, mode: str = "wb") -> Iterator[Any]:
    """Open a temporary file beside ``path``; on success it replaces ``path``, on error it is removed.

    The temporary file is ``.NAME.actlab-HOST-PID-RANDOM.tmp``: a SIGKILL (or power loss) between its
    creation and the rename cannot remove it, so the next write of ``path`` removes the ones of dead
    processes of this host (before, mkstemp's ``.NAME.XXXXXXXX.tmp`` named no owner and piled up)."""
    path = Path(path)
    _refuse_special_file(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _reclaim_tmp_files(path)
        fd, tmp = _make_tmp_file(path)
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
        fsync_dir(path.parent)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename in (None, tmp):
            # a failed write() names no file, a failed rename the temporary one: name the file being written
            with contextlib.suppress(AttributeError):
                e.filename2 = None
            name_file(e, str(path))
        raise


def special_file_kind(mode: int) -> str | None:
    """What a path of this ``st_mode`` is in words when it is neither a regular file nor a directory (a
    FIFO, a device, a socket); None for those two."""
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return None


def not_a_file(path: Path) -> str | None:
    """What ``path`` is, in words, when it exists but is no regular file (a directory, a FIFO, a device,
    a socket, a symbolic link to nothing); None when it is a file or nothing is there. Nothing is opened
    (reading a FIFO waits for a writer)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a symbolic link to nothing" if path.is_symlink() else None
    except OSError as e:
        return f"unreadable ({e.strerror})"
    if stat.S_ISDIR(mode):
        return "a directory"
    return special_file_kind(mode)


def _refuse_special_file(path: Path) -> None:
    """An output path that is a device, FIFO or socket (``--out /dev/null``) is refused: the rename that
    makes a write atomic would replace the device node itself with a regular file (as root, /dev/null for
    every process on the machine)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:  # absent (the usual case) or unreadable: the write itself will say
        return
    if stat.S_ISDIR(mode):
        # named before anything is written: the rename refused it, and the error named the hidden
        # temporary file (`.summary.json.5oyrruk1.tmp`), after the whole training had run
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    kind = special_file_kind(mode)
    if kind is None:
        return
    raise ActlabError(
        f"the output path is {kind}, not a file",
        file=path,
        expected="a regular file path (new or to replace)",
        found=kind,
        fix="give a file path for this output, or leave the option out to write none (nothing was written)",
    )


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


# Hidden file every atomic_dir output carries: which command kind wrote it (``--overwrite`` replaces only an
# earlier output of the same kind) and a token naming this particular write (a commit refuses a target that
# changed while the command ran).
OUTPUT_MARKER = ".actlab-output.json"
# renameat2(2) flags (Linux 3.15+; glibc 2.28+ exports the function).
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _tmp_prefix(path: Path) -> str:
    return f".{path.name}.actlab-"


def in_temporary_of(p: str | Path, out: str | Path) -> bool:
    """Whether ``p`` lies in the temporary directory (or is the temporary file) that :func:`atomic_dir`
    (``.NAME.actlab-*.tmp``) or :func:`atomic_file` (``.NAME.*.tmp``) builds ``out`` in, beside it: part
    of that output, not another place, though it is not inside ``out``."""
    p, out = Path(os.path.abspath(p)), Path(os.path.abspath(out))
    return any(
        q.parent == out.parent and q.name.startswith(f".{out.name}.") and q.name.endswith(".tmp")
        for q in (p, *p.parents)
    )


# .NAME.actlab-HOST-PID-RANDOM.tmp (being built, or an old output swapped out) / .old (moved aside)
_TMP_TAIL = re.compile(r"(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]+\.(?P<what>tmp|old)")


def _make_tmp_dir(path: Path, what: str = "tmp") -> Path:
    while True:
        tmp = path.with_name(f"{owned_name(_tmp_prefix(path))}.{what}")
        if what != "tmp":
            return tmp  # a name to rename onto, not created here
        try:
            os.mkdir(tmp, 0o700)
            return tmp
        except FileExistsError:
            continue


def _make_tmp_file(path: Path) -> tuple[int, str]:
    """Create ``.NAME.actlab-HOST-PID-RANDOM.tmp`` beside ``path`` (mode 0600, as mkstemp): (fd, name)."""
    while True:
        tmp = path.with_name(f"{owned_name(_tmp_prefix(path))}.tmp")
        try:
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
            return os.open(tmp, flags, 0o600), str(tmp)
        except FileExistsError:
            continue


def _reclaim_tmp_files(path: Path) -> None:
    """Remove the temporary files :func:`atomic_file` made for ``path`` in processes of this host that no
    longer run (a live writer's, another host's and any other file are left alone)."""
    for entry, pid, what in owned_by_host(path.parent, _tmp_prefix(path), _TMP_TAIL, is_dir=False):
        if what == "tmp" and dead_pid(pid, entry):
            with contextlib.suppress(OSError):
                os.unlink(entry)


def _our_leftovers(path: Path) -> list[tuple[Path, int, str]]:
    """(entry, pid, "tmp"/"old") for each temporary directory of ``path`` made on this host by atomic_dir."""
    return [
        (Path(e), pid, what)
        for e, pid, what in owned_by_host(path.parent, _tmp_prefix(path), _TMP_TAIL, True)
    ]


def reclaim_leftovers(path: str | Path) -> list[int]:
    """Remove the temporary directories of ``path`` left by atomic_dir runs that died (SIGKILL, power
    loss): only names atomic_dir makes, on this host, of a pid that no longer runs. An old output moved
    aside by a run that died before it put the new one in place is put back. Returns the live writers'
    pids (another process writing ``path`` now)."""
    path = Path(path)
    live = []
    for entry, pid, what in _our_leftovers(path):
        if pid == os.getpid() or writer_alive(pid, entry):
            if pid != os.getpid():
                live.append(pid)
            continue
        if what == "old" and not os.path.lexists(path):
            with contextlib.suppress(OSError):  # (not put back: left as it is, never deleted)
                _rename_noreplace(entry, path)
            continue
        shutil.rmtree(entry, ignore_errors=True)
    return sorted(set(live))


# a scratch directory of a command in the system's temporary directory: PREFIX-HOST-PID-RANDOM
_SCRATCH_TAIL = re.compile(r"(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]+")


def reclaim_scratch(prefix: str, parent: str | Path | None = None) -> list[Path]:
    """Remove the scratch directories :func:`scratch_dir` made with ``prefix`` for processes of this host
    that no longer run (SIGKILL cannot run a cleanup: each such kill left one behind, forever). Only names
    scratch_dir makes are touched: a directory of a live process, of another host or of another shape
    (``actlab-encode-XXXXXXXX`` of an actlab before this one: whose it is cannot be told) is left alone.
    Returns the directories removed."""
    parent = Path(parent if parent is not None else tempfile.gettempdir())
    removed = []
    for entry, pid, _ in owned_by_host(parent, prefix, _SCRATCH_TAIL, is_dir=True):
        if dead_pid(pid, entry):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(Path(entry))
    return removed


@contextlib.contextmanager
def scratch_dir(prefix: str, parent: str | Path | None = None) -> Iterator[Path]:
    """A temporary directory ``PREFIX-HOST-PID-RANDOM`` in ``parent`` (the system's temporary directory:
    $TMPDIR, /tmp), removed when the block ends (an error, SIGINT and SIGTERM's ``Terminated`` included).
    Where SIGKILL left one, the next scratch_dir of the same prefix removes it (its pid is dead): what a
    killed ``bench encode`` or ``bench train`` wrote no longer piles up in /tmp."""
    prefix = prefix if prefix.endswith("-") else prefix + "-"
    parent = Path(parent if parent is not None else tempfile.gettempdir())
    reclaim_scratch(prefix, parent)
    while True:
        path = parent / owned_name(prefix)
        try:
            os.mkdir(path, 0o700)
            break
        except FileExistsError:
            continue
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """renameat2(src, dst, flags); False where the system or the filesystem does not offer it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(src), None, str(dst))


def _rename_noreplace(src: Path, dst: Path) -> None:
    """Rename a directory to ``dst`` only if ``dst`` does not exist (atomically, where renameat2 exists).
    Elsewhere plain rename(2), which also refuses a non-empty directory or a file at ``dst`` (it would
    replace only an empty directory, which holds nothing)."""
    if not _renameat2(src, dst, _RENAME_NOREPLACE):
        os.rename(src, dst)


def read_output_marker(path: str | Path) -> dict[str, Any] | None:
    """The marker atomic_dir wrote into an output directory; None when there is none (or it is unreadable)."""
    try:
        marker = json.loads((Path(path) / OUTPUT_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and isinstance(marker.get("kind"), str) else None


def _state(path: Path) -> str | None:
    """What is at ``path`` now: None (nothing), "empty", "token:T" (an atomic_dir output) or "other"."""
    if not os.path.lexists(path):
        return None
    if path.is_symlink() or not path.is_dir():
        return "other"
    try:
        if not any(path.iterdir()):
            return "empty"
    except OSError:
        return "other"
    marker = read_output_marker(path)
    return f"token:{marker.get('token')}" if marker else "other"


def related_input(out: Path, inputs: Sequence[str | Path]) -> Path | None:
    """The first input that ``out`` is, contains or lies inside (paths resolved, symlinks followed)."""
    target = out.resolve()
    for i in inputs:
        if i is None:
            continue
        src = Path(i).resolve()
        if target == src or target in src.parents or src in target.parents:
            return Path(i)
    return None


def _real(value: str | Path) -> Path:
    # realpath, not Path.resolve: a symbolic link loop is the command's to report (resolve raises)
    return Path(os.path.realpath(os.path.expanduser(str(value))))


def refuse_overlapping_paths(
    outputs: Sequence[tuple[str, str | Path | None]],
    inputs: Sequence[tuple[str, str | Path | None]] = (),
    distinct_outputs: bool = True,
) -> None:
    """Refuse, before any work, an output path (``(label, path)``: an option ``--out`` or a config key
    ``data.cache_dir``) that is or lies inside an input (``data.path``, ``init_from``), and, with
    ``distinct_outputs``, two outputs on one path or one inside the other. Unset paths (None, "") are
    skipped. The options of a command are checked from the parser (``actlab.cli._options.paths``); the
    config keys of the trainers here, since ``--set data.cache_dir=DATASET/c`` decoded frames into the
    dataset and ``--set data.path=DS --out DS/run`` trained into it (fifth fault run)."""
    given = [(label, _real(raw), str(raw)) for label, raw in outputs if raw not in (None, "")]
    sources = [(label, _real(raw), str(raw)) for label, raw in inputs if raw not in (None, "")]
    for i, (la, pa, ra) in enumerate(given):
        for lb, pb, rb in given[i + 1 :] if distinct_outputs else ():
            if pa == pb or pa in pb.parents or pb in pa.parents:
                how = "name the same path" if pa == pb else "name paths one inside the other"
                raise ActlabError(
                    f"{la} and {lb} {how}: one output would replace or hold the other",
                    file=ra if pa == pb else f"{ra} and {rb}",
                    field=f"{la}, {lb}",
                    expected="a path of its own for each output",
                    found=f"{la} {ra}, {lb} {rb}",
                    fix=f"give {la} and {lb} different paths (nothing was run or written)",
                )
        for label, pin, rin in sources:
            if pa == pin or pin in pa.parents:
                how = "is" if pa == pin else "lies inside"
                raise ActlabError(
                    f"{la} {how} an input of the command ({label}): it would write into what it reads",
                    file=ra,
                    field=f"{la}, {label}",
                    expected=f"{la} apart from {label}",
                    found=f"{la} {ra}, {label} {rin}",
                    fix=f"choose a {la} outside {rin} (nothing was run or written)",
                )


def check_writable(path: str | Path) -> None:
    """Raise the OSError of an output that cannot be written (a read-only disk, no permission) now,
    before the work: a file is made and removed in the directory the output is created in (its parent,
    or the nearest existing directory above; never inside ``path``, which may be a user's directory the
    command goes on to refuse). ``policy doctor --out`` on a read-only disk ran its whole diagnosis
    first, ``monitor --plot`` the whole command."""
    path = Path(path)
    folder = path.parent
    while not os.path.lexists(folder) and folder.parent != folder:
        folder = folder.parent
    if not folder.is_dir():
        return  # a file in the way: named by the write itself (errors.from_environment)
    # .actlab-probe.actlab-HOST-PID-RANDOM.tmp (mkstemp's .actlab-probe-XXXXXXXX named no owner: a SIGKILL
    # between its making and its removal left it for good); a dead process's of this host is removed here.
    _reclaim_tmp_files(folder / "actlab-probe")
    try:
        fd, probe = _make_tmp_file(folder / "actlab-probe")
    except OSError as e:  # name the output asked for, not the probe
        raise OSError(e.errno, e.strerror, str(path)) from e
    os.close(fd)
    os.unlink(probe)


def check_out_dir(
    path: str | Path, kind: str, overwrite: bool = False, inputs: Sequence[str | Path] = ()
) -> str | None:
    """Refuse an output directory the command must not write: one that is, contains or lies inside one
    of its ``inputs``; an existing one (without ``overwrite``); one that ``overwrite`` may not replace
    (written by another kind of command, or not by actlab at all); one another actlab process is writing
    now. Removes this path's temporary leftovers of dead runs. Returns what is there now (see _state),
    which the commit checks again. Commands call it before their work, so a refusal costs nothing."""
    path = Path(path)
    src = related_input(path, inputs)
    if src is not None:
        raise ActlabError(
            "the output directory is, holds or lies inside an input of the command",
            file=path,
            expected="an --out apart from every input",
            found=f"input {src}",
            fix=f"choose an --out that neither is, holds nor lies inside {src} (nothing was written)",
        )
    live = reclaim_leftovers(path)
    if live:
        raise ActlabError(
            f"another actlab process (pid {live[0]}) is writing this output directory now",
            file=path,
            fix=f"wait for pid {live[0]} to finish (or stop it), or choose another --out",
        )
    state = _state(path)
    check_writable(path)
    if state is None or (state == "empty" and overwrite):
        return state
    marker = read_output_marker(path) if state.startswith("token:") else None
    if marker is not None and marker["kind"] == kind:
        if overwrite:
            return state
        raise ActlabError(
            "output directory already exists",
            file=path,
            found=f"an earlier output of {kind}",
            fix="pass --overwrite to replace it, or choose another --out",
        )
    if marker is not None:
        why = f"the output of {marker['kind']}, not of {kind}"
    elif state == "empty":
        why = "an empty directory"
    elif state == "other" and (path.is_symlink() or not path.is_dir()):
        why = "not a directory" if not path.is_symlink() else "a symbolic link"
    else:
        why = f"a directory {kind} did not write (no {OUTPUT_MARKER} in it)"
    replaceable = state == "empty"
    raise ActlabError(
        "output directory already exists" + ("" if replaceable else " and is not this command's to replace"),
        file=path,
        found=why,
        fix=(
            "pass --overwrite, or choose another --out"
            if replaceable
            else f"choose another --out (--overwrite replaces only an earlier output of {kind}); "
            "or move it away yourself if it holds nothing you need"
        ),
    )


def _sources(inputs: Sequence[str | Path | None]) -> list[str]:
    """The inputs a claimed output directory records in its marker (resolved paths)."""
    return [str(Path(i).resolve()) for i in inputs if i is not None]


def claim_out_dir(
    path: str | Path,
    kind: str,
    inputs: Sequence[str | Path] = (),
    option: str = "--out",
    identity: dict[str, Any] | None = None,
) -> Path:
    """Claim an output directory that a command adds files to run after run (``data view`` writes one
    page per episode into the same ``--out``), by the same marker rule as :func:`atomic_dir`: a new or
    empty directory is created and marked as ``kind``'s, with its ``inputs``; one already marked as
    ``kind``'s for the same inputs is reused (its files are this command's own); anything else is refused
    before a file is written: a directory holding files ``kind`` did not write (a user's report.md was
    overwritten), another command's output or ``kind``'s output for other inputs, a file, or an ``--out``
    that is, holds or lies inside one of ``inputs``. ``option`` is the flag that named ``path`` (for the
    fix). ``identity``: what the inputs hold (a dataset's identity), recorded in the marker; a directory
    is then reused only for inputs that still hold it: `data view A` of episode 0, A replaced by another
    recording under its name, then episode 1 into the same --out gathered two datasets' pages under one
    name, exit 0 (26th fault run, view_reuse_after_replace). Returns ``path``."""
    path = Path(path)
    src = related_input(path, inputs)
    if src is not None:
        check_out_dir(path, kind, False, inputs)  # raises the "is, holds or lies inside an input" refusal
    sources = _sources(inputs)
    state = _state(path)
    marker = read_output_marker(path) if state is not None and state.startswith("token:") else None
    # an output of the same command is reused only for the same input: `data view A` then `data view B`
    # into one --out wrote B's episode_000.html over A's, `rl report` B's report.md over A's. A marker
    # written before the inputs were recorded in it cannot say whose pages it holds: refused too (it was
    # reused, and `data view B` wrote over A's pages of a directory an older actlab made)
    # (a marker written before it recorded the identity is taken as it is, as before)
    same_inputs = marker is not None and marker["kind"] == kind and marker.get("inputs") == sources
    if same_inputs and (identity is None or marker.get("identity", identity) == identity):
        return path
    if state not in (None, "empty"):
        if same_inputs:  # (its identity differs: the same inputs returned above)
            found = (
                f"the output of {kind} for {', '.join(sources)} as it was: it changed since (another "
                "recording under that name, or files edited)"
            )
        elif marker is not None and marker["kind"] == kind and "inputs" not in marker:
            found = (
                f"the output of an older {kind}, which did not record its input: whose files it holds "
                "cannot be told"
            )
        elif marker is not None and marker["kind"] == kind:
            theirs = marker["inputs"]
            theirs = ", ".join(map(str, theirs)) if isinstance(theirs, list) else str(theirs)
            found = f"the output of {kind} for {theirs}, not for {', '.join(sources)}"
        elif marker is not None:
            found = f"the output of {marker['kind']}, not of {kind}"
        elif path.is_symlink() or not path.is_dir():
            found = "a symbolic link" if path.is_symlink() else "not a directory"
        else:
            names = sorted(p.name for p in path.iterdir())
            found = f"files {kind} did not write: " + ", ".join(names[:5])
            found += f" and {len(names) - 5} more" if len(names) > 5 else ""
        raise ActlabError(
            "the output directory is not this command's to write into",
            file=path,
            expected=f"a new or empty directory, or one {kind} wrote before (it holds {OUTPUT_MARKER})",
            found=found,
            fix=f"choose another {option} "
            + (
                f"(nothing was written: its pages are of the input as it was), or remove {path} yourself "
                "and run the command again"
                if same_inputs
                else f"for this input (nothing was written: {kind} never writes over its output for another)"
                if marker is not None and marker["kind"] == kind
                else f"(nothing was written: {kind} never writes over files it did not make)"
            ),
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # name the directory the user asked for
        raise OSError(e.errno, e.strerror, str(path)) from e
    marker = {"kind": kind, "token": secrets.token_hex(8), "pid": os.getpid(), "written": time.time()}
    atomic_write_json(
        path / OUTPUT_MARKER,
        {**marker, "inputs": sources, **({} if identity is None else {"identity": identity})},
    )
    return path


@contextlib.contextmanager
def claimed_out_dir(
    path: str | Path,
    kind: str,
    inputs: Sequence[str | Path] = (),
    option: str = "--out",
    identity: dict[str, Any] | None = None,
) -> Iterator[Path]:
    """:func:`claim_out_dir` for the length of a block that writes into it: when the block fails, a
    directory this call created is removed again and one it found empty is emptied again, so a refused or
    failed command leaves nothing it made (`rl report` left its marked --out behind after refusing the
    run, `data view` the pages written before a full disk). A directory reused from an earlier run of
    ``kind`` keeps its files: they are that run's output."""
    path = Path(path)
    before = _state(path)
    claim_out_dir(path, kind, inputs, option, identity)
    # one writer at a time: two `data view`s (or `rl report`s) into one --out both exited 0 with one
    # page (report) over the other's. The loser is refused here and removes nothing: the directory is
    # the winner's now. A SIGTERM ends the block as an error does (the claim was left behind before).
    lock = DirLock(
        path, what="output directory", fix="wait for pid {pid} to finish, or choose another " + option
    )
    lock.acquire()
    now = read_output_marker(path)
    if (
        now is None
        or now["kind"] != kind
        or now.get("inputs") != _sources(inputs)
        or (identity is not None and now.get("identity", identity) != identity)
    ):
        lock.release()  # claimed for other inputs by a command that started with this one and finished
        raise _changed_error(path, kind)
    try:
        with exit_on_sigterm():
            yield path
    except BaseException:
        if before is None:
            shutil.rmtree(path, ignore_errors=True)
        elif before == "empty":
            for child in list(path.iterdir()):
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        raise
    finally:
        lock.release()


def _changed_error(path: Path, kind: str) -> ActlabError:
    return ActlabError(
        "the output directory was created or replaced by someone else while this command ran; "
        "it was left as it is and this command's result discarded",
        file=path,
        found=f"a different {path.name} than when {kind} started (two commands writing the same --out?)",
        fix="run the command again with another --out (or once the other one has finished)",
    )


def _commit(tmp: Path, path: Path, before: str | None, kind: str, ours: list[bool]) -> None:
    """Put ``tmp`` in place of ``path`` if ``path`` is still what it was at the start (``before``).
    ``ours[0]`` is False while ``tmp`` holds what was swapped out of ``path`` and is not yet known to be
    the output checked at the start (then nobody may delete it)."""
    if _state(path) != before:
        raise _changed_error(path, kind)
    if before is None:
        try:
            _rename_noreplace(tmp, path)
        except OSError as e:
            if e.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                raise _changed_error(path, kind) from None
            raise
        return
    # Replace: swap the two in one step where the system can, and check that what was swapped out is
    # still what was checked at the start (anything else is swapped back, untouched).
    ours[0] = False
    if _renameat2(tmp, path, _RENAME_EXCHANGE):
        if _state(tmp) != before:
            _renameat2(tmp, path, _RENAME_EXCHANGE)
            ours[0] = True
            raise _changed_error(path, kind)
        ours[0] = True
        shutil.rmtree(tmp, ignore_errors=True)  # the old output (a re-run reclaims it if we die here)
        return
    ours[0] = True
    aside = _make_tmp_dir(path, "old")  # put back by a re-run if this process dies before the next rename
    os.rename(path, aside)
    if _state(aside) != before:
        _rename_noreplace(aside, path)
        raise _changed_error(path, kind)
    _rename_noreplace(tmp, path)
    shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def atomic_dir(
    path: str | Path,
    overwrite: bool = False,
    *,
    kind: str = "an actlab command",
    inputs: Sequence[str | Path] = (),
) -> Iterator[Path]:
    """Build a directory under a temporary name and rename it to ``path`` only when the block succeeds.

    ``kind`` names the command (``"actlab eval"``): it is written into the output (:data:`OUTPUT_MARKER`)
    and ``overwrite`` replaces only an empty directory or an earlier output of the same kind, never one
    that is, holds or lies inside one of ``inputs`` (see :func:`check_out_dir`). The commit refuses a
    ``path`` that appeared or changed while the block ran (two commands writing the same output: one
    gets an error, none is lost). A SIGTERM inside the block removes the temporary directory, as an error
    does; one left by a SIGKILL is removed by the next run writing the same ``path``.
    """
    path = Path(path)
    before = check_out_dir(path, kind, overwrite, inputs)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # name the directory the user asked for
        raise OSError(e.errno, e.strerror, str(path)) from e
    with exit_on_sigterm():
        try:
            tmp = _make_tmp_dir(path)
        except OSError as e:  # name the directory the user asked for, not the hidden temporary name
            raise OSError(e.errno, e.strerror, str(path)) from e
        ours = [True]
        try:
            marker = {"kind": kind, "token": secrets.token_hex(8), "pid": os.getpid(), "written": time.time()}
            atomic_write_json(tmp / OUTPUT_MARKER, marker)
            yield tmp
            os.chmod(tmp, 0o777 & ~_umask())  # made 0700 while it is built
            with sigterm_deferred():
                _commit(tmp, path, before, kind, ours)
            fsync_dir(path.parent)
        except BaseException as e:
            if ours[0]:
                shutil.rmtree(tmp, ignore_errors=True)
            if (
                isinstance(e, OSError)
                and isinstance(e.filename, str)
                and e.filename.startswith(f"{tmp}{os.sep}")
            ):
                name_file(e, str(path / os.path.relpath(e.filename, tmp)))  # the name it would have had
            raise


def write_png(path: str | Path, image: Any) -> Path:
    """Write an HWC uint8 RGB array as a PNG (atomically); returns the path."""
    import numpy as np
    from PIL import Image

    path = Path(path)
    with atomic_file(path, "wb") as f:
        Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8)).save(f, format="PNG")
    return path


def file_sha256(file: str | Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks (about 0.5 s for ACT's 200 MB of weights)."""
    h = hashlib.sha256()
    with open(file, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def require_file(
    path: str | Path, problem: str, *, expected: str, fix: str, field: str | None = None
) -> Path:
    """``path``, when it is a file; else the one error of a required file that is not there: ``problem``
    with the file named, ``expected`` (what belongs there), what was found (nothing, a directory, a FIFO,
    a device, a symbolic link to nothing: :func:`not_a_file`) and the ``fix``."""
    path = Path(path)
    if not path.is_file():
        found = not_a_file(path) or "missing"
        raise ActlabError(problem, file=path, field=field, expected=expected, found=found, fix=fix)
    return path


def read_json(path: str | Path, what: str = "JSON file", obj: bool = True, fix: str | None = None) -> Any:
    """Read JSON with an error that names the file and the position of a syntax error. Every JSON file
    actlab reads is an object: one that parses as anything else (``[]``, a number) is refused here, with
    the file named (``config.json`` holding ``[]`` was "'list' object has no attribute 'get'" deep in
    the evaluation); ``obj=False`` reads any JSON value. ``fix``: what repairs this file where the caller
    knows better than the generic advice (a bundle's stats.json: another checkpoint, not "check the path"
    or "regenerate the file", which no command does)."""
    name = Path(path).name
    path = require_file(path, f"{what} not found", expected=f"{name} ({what})", fix=fix or "check the path")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ActlabError(
            f"{what} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}",
            file=path,
            fix=fix or "restore the file from a copy, or write it again with the command that made it",
        ) from e
    except UnicodeDecodeError as e:  # bytes overwritten, or a binary file where JSON belongs
        raise ActlabError(
            f"{what} is not UTF-8 text",
            file=path,
            expected="UTF-8 JSON",
            found=f"{e.reason} at byte {e.start}",
            fix=fix or "restore the file from a copy or regenerate it",
        ) from e
    if obj and not isinstance(data, dict):
        raise ActlabError(
            f"{what} is not a JSON object",
            file=path,
            expected="a JSON object ({...})",
            found=f"a JSON {type(data).__name__}".replace("dict", "object").replace("NoneType", "null"),
            fix=fix or "restore the file from a copy or regenerate it",
        )
    return data
