"""Worker processes that die with their parent, and a SIGTERM that cleans up instead of killing outright.

A pool of spawned workers blocks on its task queue; when the parent dies without shutting it down (SIGKILL,
or SIGTERM's default action, which runs no Python code) nothing ever closes that queue and the workers,
and multiprocessing's resource tracker that waits for them, live forever (re-parented to init). So:

- every worker of :func:`worker_pool` asks the kernel for SIGKILL when its parent dies (Linux
  ``prctl(PR_SET_PDEATHSIG)``) and also watches its parent pid once a second (the fallback elsewhere);
  the resource tracker exits by itself once the parent and the workers are gone (its pipe closes);
- while a pool (or an :func:`actlab.utils.io.atomic_dir`) is open, SIGTERM raises :class:`Terminated` in
  the main thread, so ``finally`` blocks run: the pool is stopped and the temporary output removed. A
  second SIGTERM while that cleanup runs kills at once (the default action);
- closing a pool never waits without a deadline: workers still running after it are killed;
- a child program that may start children of its own (the LeRobot bridge's ``--lerobot-python``, which can
  be a wrapper script: ``conda run``, ``uv run``, a shell script) is started in a process group of its
  own (:func:`start_group_kwargs`) and ended with all of it by :func:`kill_tree`.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import ctypes
import multiprocessing as mp
import os
import re
import signal
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from actlab.errors import ActlabError, Terminated

# prctl(2) option: the signal a process gets when the thread that created it exits.
PR_SET_PDEATHSIG = 1
# How often a worker checks that its parent is still the one that started it (the fallback watch).
PARENT_POLL_S = 1.0
# How long a pool that finished its work may take to let its idle workers exit before they are killed.
POOL_CLOSE_S = 30.0
# How long the pool's manager thread gets to notice that its workers are gone.
MANAGER_WAIT_S = 2.0
# How long killed workers may take to disappear (SIGKILL is not instant for a process in the kernel).
KILL_WAIT_S = 10.0
# How long a killed process tree may take to disappear before kill_tree gives up waiting on it.
TREE_KILL_WAIT_S = 10.0
# How often a wait for a pool's result checks that its workers are still alive (see result()).
LIVENESS_POLL_S = 1.0


@contextlib.contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` (once: a second SIGTERM kills at once).

    Only in the main thread, and only where SIGTERM still has its default action: a handler installed by
    someone else (the trainer checkpoints on SIGTERM; ``actlab profile`` forwards it) is left alone, and
    nested blocks keep the outer one's handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if _DEFERRED[0]:
            _DEFERRED[1] = True  # raised when the critical section ends
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM during the cleanup kills
        raise Terminated(signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is handler:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


# [depth of sigterm_deferred blocks, whether a SIGTERM arrived meanwhile]
_DEFERRED: list = [0, False]


@contextlib.contextmanager
def sigterm_deferred() -> Iterator[None]:
    """A few steps that must not be cut in half (two renames): a SIGTERM that arrives inside is raised
    as :class:`Terminated` when the block ends."""
    _DEFERRED[0] += 1
    try:
        yield
    finally:
        _DEFERRED[0] -= 1
        if _DEFERRED[0] == 0 and _DEFERRED[1]:  # (also when the block failed: the signal wins)
            _DEFERRED[1] = False
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            raise Terminated(signal.SIGTERM)


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this machine (another user's counts). A zombie does not: it
    writes nothing more, and under a container's init that reaps late a SIGKILLed command stayed one for
    seconds, its rerun refused as "another actlab process (pid N) is writing this output directory now"
    (26th fault run, kc_0_70_rerun). A zombie leader whose other threads still run counts as alive."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` is a zombie with no thread left (Linux /proc; False where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]  # (the command name may hold spaces and ")")
        return state == b"Z" and len(os.listdir(f"/proc/{pid}/task")) <= 1
    except (OSError, IndexError):
        return False


def host_tag() -> str:
    """This host's tag in temporary names (a crc32 of its name): a pid means nothing on another machine
    sharing the filesystem (NFS) or /dev/shm."""
    return f"{zlib.crc32(socket.gethostname().encode()):08x}"


def owned_name(prefix: str, random: str | None = None) -> str:
    """``PREFIX`` + this host's tag, this process's pid and ``random`` (8 fresh hex digits by default): the
    name of a temporary of actlab's, read back by :func:`owned_by_host`."""
    import secrets

    return f"{prefix}{host_tag()}-{os.getpid()}-{secrets.token_hex(4) if random is None else random}"


def owned_by_host(
    parent: str | os.PathLike[str], prefix: str, tail: re.Pattern[str], is_dir: bool
) -> list[tuple[str, int, str]]:
    """(entry, pid, the tail's ``what`` or "") for each entry of ``parent`` named ``prefix`` + ``tail``
    with this host's tag: a directory (``is_dir``) or a plain file, never a symlink. actlab's temporaries
    carry their host and pid so that a later run tells a dead process's from a live one's, and never
    touches another host's (a pid means nothing there) or anything not of that shape."""
    host, found = host_tag(), []
    try:
        with os.scandir(parent) as it:
            entries = [e for e in it if e.name.startswith(prefix)]
    except OSError:
        return []
    for e in entries:
        m = tail.fullmatch(e.name[len(prefix) :])
        kind_ok = e.is_dir(follow_symlinks=False) if is_dir else e.is_file(follow_symlinks=False)
        if m and m["host"] == host and kind_ok:
            found.append((e.path, int(m["pid"]), m.groupdict().get("what") or ""))
    return found


def dead_pid(pid: int, entry: str | os.PathLike[str] | None = None) -> bool:
    """True for a pid that is not this process and runs no longer (its temporaries are safe to remove).
    With ``entry`` (the temporary the pid is named in): also when the process of that pid now is not its
    writer (:func:`writer_alive`)."""
    if pid == os.getpid():
        return False
    return not (writer_alive(pid, entry) if entry is not None else pid_alive(pid))


def writer_alive(pid: int, entry: str | os.PathLike[str]) -> bool:
    """Whether the process that wrote ``entry`` (a temporary named with its ``pid``) still runs: a process
    of that pid that started after ``entry`` last changed is another one, the pid reused after the writer
    died (a reboot, or a long uptime's wrap of the pid counter): its rerun was refused as "another actlab
    process (pid N) is writing this output directory now", fix "stop it", of a shell or any other process
    (27th fault run, pid_reuse_tmp_live_sleep). The entry's ctime, which no user call sets back, is at or
    after its writer's start."""
    if not pid_alive(pid):
        return False
    try:
        changed = os.lstat(entry).st_ctime
    except OSError:
        return True
    started = _start_time(pid)
    return started is None or started <= changed + 1.0  # (the boot time is whole seconds)


def _start_time(pid: int) -> float | None:
    """When ``pid`` started, in seconds since the epoch (Linux /proc; None where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


# multiprocessing's named semaphores (the queues and locks of a spawn or forkserver pool) live in /dev/shm
# as sem.PREFIX-RANDOM until the process that made them, or its resource tracker, unlinks them. A SIGKILL
# of the whole process group (a cgroup kill, `kill -9 -PGID`, a terminal's job) kills the tracker too, and
# each such kill left its semaphores in /dev/shm for good (sem.mp-XXXXXXXX: whose, nobody can tell). Ours
# are named sem.mp-actlab-HOST-PID-RANDOM, and the next pool removes those of a dead pid on this host.
_SEM_DIR = "/dev/shm"
_SEM_PREFIX = "mp-actlab-"
_SEM_TAIL = re.compile(r"(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-.+")


def reclaim_semaphores(sem_dir: str = _SEM_DIR) -> list[str]:
    """Unlink the named semaphores :func:`own_multiprocessing_names` named for processes of this host that
    no longer run (only ``sem.mp-actlab-HOST-PID-*``: another program's, a live process's and another
    host's are left alone). Returns the names removed."""
    removed = []
    for path, pid, _ in owned_by_host(sem_dir, f"sem.{_SEM_PREFIX}", _SEM_TAIL, is_dir=False):
        if dead_pid(pid, path):
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed.append(os.path.basename(path))
    return removed


def own_multiprocessing_names() -> None:
    """Name what multiprocessing leaves behind when this process is SIGKILLed, so that a later run can
    tell it is ours and its process is dead, and remove it: its named semaphores (``semprefix``:
    /dev/shm/sem.mp-actlab-HOST-PID-RANDOM, see ``_SEM_PREFIX``) and its temporary directory (``tempdir``:
    a forkserver's listening socket, shared file descriptors; mkdtemp's /tmp/pymp-XXXXXXXX before, now
    /tmp/pymp-actlab-HOST-PID-RANDOM). Removes those of dead processes of this host. Call it before making
    a spawn or forkserver context's queue, lock, pool or process."""
    config = mp.current_process()._config  # multiprocessing's own: semprefix names every SemLock it makes
    prefix = f"/{_SEM_PREFIX}{host_tag()}-{os.getpid()}"
    if config.get("semprefix") != prefix:
        config["semprefix"] = prefix
        reclaim_semaphores()
    if config.get("tempdir") is None:  # (one multiprocessing made already is its own: removed at its exit)
        path = _make_mp_tempdir()
        if path is not None:
            config["tempdir"] = path


_MP_TMP_PREFIX = "pymp-actlab-"


# A socket's path (sun_path) holds 107 bytes; multiprocessing puts listener-XXXXXXXX in its directory.
_SOCKET_PATH_MAX = 107 - len("/listener-XXXXXXXX")


def _make_mp_tempdir() -> str | None:
    """/tmp/pymp-actlab-HOST-PID-RANDOM, made; None where that name would make multiprocessing's socket
    paths too long for AF_UNIX (a long $TMPDIR: its own shorter pymp-XXXXXXXX is used there)."""
    import shutil
    import tempfile
    from multiprocessing import util

    parent = tempfile.gettempdir()
    reclaim_mp_tempdirs(parent)
    if len(os.path.join(parent, owned_name(_MP_TMP_PREFIX, "00000000"))) > _SOCKET_PATH_MAX:
        return None
    while True:
        path = os.path.join(parent, owned_name(_MP_TMP_PREFIX))
        try:
            os.mkdir(path, 0o700)
            break
        except FileExistsError:
            continue
    # as multiprocessing.util.get_temp_dir does for its own: removed when this process exits
    util.Finalize(None, shutil.rmtree, args=(path, True), exitpriority=-100)
    return path


def reclaim_mp_tempdirs(parent: str) -> list[str]:
    """Remove the multiprocessing temporary directories :func:`own_multiprocessing_names` made in
    ``parent`` for processes of this host that no longer run (only ``pymp-actlab-HOST-PID-RANDOM``:
    another program's ``pymp-XXXXXXXX`` and a live process's are left alone). Returns the paths removed."""
    import shutil

    removed = []
    for path, pid, _ in owned_by_host(parent, _MP_TMP_PREFIX, _SEM_TAIL, is_dir=True):
        if dead_pid(pid, path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux; False elsewhere)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int, sig: int | None = None) -> None:
    """Until ``parent`` is gone (this process re-parented): then exit at once, or send ``sig`` to this
    process (a rank that stops on it as on its own)."""
    while True:
        time.sleep(PARENT_POLL_S)
        if os.getppid() != parent:  # re-parented: the parent is gone
            if sig is None:
                os._exit(1)
            os.kill(os.getpid(), sig)
            return


def stop_with_parent(sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` to this process when its parent dies: a torchrun rank whose launcher was SIGKILLed
    trained on to its last step, re-parented to init (a rank stops on SIGTERM as on its own: a
    checkpoint, then exit 143). The kernel's parent-death signal, and a thread watching the parent pid
    (where that signal is not available, or the parent died before it was armed)."""
    parent = os.getppid()
    set_parent_death_signal(sig)
    threading.Thread(
        target=_watch_parent, args=(parent, sig), name="actlab-launcher-watch", daemon=True
    ).start()


def die_with_parent(parent: int) -> None:
    """In a child process started by ``parent`` (a ``multiprocessing.Process`` of one's own): end it when
    ``parent`` dies, as every :func:`worker_pool` worker ends (a bench encode SIGKILLed left its burner
    spinning at 100% of a core, re-parented to init)."""
    _child_init(parent, None, ())


def _child_init(parent: int, initializer: Callable[..., Any] | None, initargs: Sequence[Any]) -> None:
    """Initializer of every :func:`worker_pool` worker: die with ``parent``, then run the caller's own."""
    # The death signal fires when the *thread* that forked this worker exits; ProcessPoolExecutor starts
    # spawn-context workers from the thread that calls submit(), which is inside the pool's block.
    set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent:  # it died before the signal was armed
        os._exit(1)
    # A terminal's Ctrl-C reaches the whole foreground process group, this worker too: it is the parent's
    # to handle (it stops the pool). A worker's own KeyboardInterrupt printed its traceback into the
    # terminal (bench encode's writers, 21st fault run: numpy's quantile interrupted in add_episode).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent,), name="actlab-parent-watch", daemon=True).start()
    import warnings

    from actlab.errors import plain_warnings  # lazy: only a worker process installs it

    warnings.showwarning = plain_warnings(warnings.showwarning)  # as the command line says them
    if initializer is not None:
        initializer(*initargs)


def worker_processes(pool: cf.ProcessPoolExecutor) -> list[Any]:
    """The pool's worker processes (multiprocessing Process objects) started so far."""
    return list((getattr(pool, "_processes", None) or {}).values())


def _raise_if_a_worker_died(pool: cf.ProcessPoolExecutor) -> None:
    dead = [p for p in worker_processes(pool) if p.exitcode is not None]
    if dead:
        raise cf.process.BrokenProcessPool(
            f"worker pid {dead[0].pid} exited (exit code {dead[0].exitcode}) while the pool was working"
        )


def result(pool: cf.ProcessPoolExecutor, future: cf.Future, poll_s: float = LIVENESS_POLL_S) -> Any:
    """``future.result()``, but a worker that died is noticed within ``poll_s`` seconds.

    Why: the pool's manager thread learns of a dead worker only from the process sentinels it gathered
    when it last woke up; a death it missed (a worker started after that, killed before anything woke
    the thread again) left ``result()`` waiting forever on an episode nobody runs. Polling the workers'
    exit codes turns that into the BrokenProcessPool the caller already handles."""
    while True:
        try:
            return future.result(timeout=poll_s)
        except cf.TimeoutError:
            _raise_if_a_worker_died(pool)


def as_completed(
    pool: cf.ProcessPoolExecutor, futures: Any, poll_s: float = LIVENESS_POLL_S
) -> Iterator[Any]:
    """``concurrent.futures.as_completed`` with the same liveness check as :func:`result`."""
    waiting = set(futures)
    while waiting:
        done, waiting = cf.wait(waiting, timeout=poll_s, return_when=cf.FIRST_COMPLETED)
        if not done:
            _raise_if_a_worker_died(pool)
        yield from done


def close_pool(pool: cf.ProcessPoolExecutor, kill: bool, timeout: float = POOL_CLOSE_S) -> None:
    """Shut ``pool`` down without an unbounded wait: queued work is cancelled; with ``kill`` (an error or
    a signal) running workers are killed at once, otherwise idle workers get ``timeout`` seconds to exit
    before they are killed."""
    procs = worker_processes(pool)
    # (shutdown drops the pool's references to these)
    manager = getattr(pool, "_executor_manager_thread", None)
    results = getattr(pool, "_result_queue", None)
    if kill:
        for p in procs:
            with contextlib.suppress(Exception):
                p.kill()
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + (KILL_WAIT_S if kill else timeout)
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    late = [p for p in procs if p.exitcode is None]
    for p in late:
        with contextlib.suppress(Exception):
            p.kill()
    for p in late:
        p.join(KILL_WAIT_S)
    if manager is None:
        return
    # The pool's manager thread exits once its workers are gone, unless a worker was killed halfway
    # through sending a result: then it waits forever for the rest of the message (this process holds
    # the pipe's other end), and interpreter exit waits forever for it. Closing that end gives it EOF.
    manager.join(MANAGER_WAIT_S)
    if manager.is_alive() and results is not None:
        with contextlib.suppress(Exception):
            results._writer.close()
        manager.join(KILL_WAIT_S)


@contextlib.contextmanager
def worker_pool(
    workers: int, initializer: Callable[..., Any] | None = None, initargs: Sequence[Any] = ()
) -> Iterator[cf.ProcessPoolExecutor]:
    """A spawn-context ProcessPoolExecutor whose workers die with this process (see the module docstring).

    spawn, not fork: the parent may hold an EGL context, torch threads or CUDA state that fork would copy
    in a broken state. Leaving the block normally lets idle workers exit; leaving it by an exception (an
    error, Ctrl-C, or SIGTERM through :func:`exit_on_sigterm`) kills them. Neither waits without a
    deadline."""
    own_multiprocessing_names()
    ctx = mp.get_context("spawn")
    pool = cf.ProcessPoolExecutor(
        workers, mp_context=ctx, initializer=_child_init, initargs=(os.getpid(), initializer, tuple(initargs))
    )
    ok = False
    try:
        with exit_on_sigterm():
            yield pool
        ok = True
    finally:
        close_pool(pool, kill=not ok)


def start_group_kwargs() -> dict[str, Any]:
    """``subprocess.Popen`` arguments that start a child in a session (and process group) of its own, so
    that :func:`kill_tree` can end it together with everything it starts. (Its own session also keeps a
    terminal's Ctrl-C away from it: the parent, which gets the KeyboardInterrupt, ends it instead.)"""
    return {"start_new_session": True}


# The folder actlab is imported from, for the guard's own import of it (its `python -c` has no other path)
_ACTLAB_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The guard of a child program (see ChildGuard): waits on a pipe from the parent; a byte on it disarms
# the guard (the parent ended the child itself, or let it finish), end of file without one means the
# parent died (SIGKILL, a crash): the child and every process it started are killed then.
_GUARD = r"""
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the parent's to handle
pid, started, group = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "1"
if sys.stdin.buffer.read(1):
    sys.exit(0)
sys.path.insert(0, sys.argv[4])  # the parent's actlab: the tree is ended by its own end_family
import psutil
from actlab.utils.procs import end_family
try:
    root = psutil.Process(pid)
    ours = abs(root.create_time() - started) < 0.01
    family = [root, *root.children(recursive=True)] if ours else []
except psutil.NoSuchProcess:
    ours, family = True, []  # gone: what is left of its process group is still ours to end
except psutil.Error:
    ours, family = False, []
end_family(family, pid if group and ours else None)
"""


class ChildGuard:
    """A small process that kills a child program (and what it started) if this process dies without
    ending it: a SIGKILL runs no ``finally``, and the child of ``actlab monitor`` (the monitored command)
    or of the LeRobot bridge (a ``--lerobot-python`` wrapper and its own child) lived on, re-parented to
    init (``sleep 1000`` left behind after ``kill -9`` of the actlab process). Worker pools need none:
    their workers ask the kernel for a parent-death signal, which a program we run cannot be made to ask
    for its own children. ``group``: the child leads a process group of its own (start_group_kwargs),
    killed as a whole. :meth:`disarm` when the child was ended (or finished) by the parent.

    The guard runs in a session of its own: in the caller's process group, the kill of that whole group
    (a cgroup, a scheduler, ``kill -9 -PGID``) ended the guard together with the caller, and a child of a
    group of its own (``--lerobot-python``'s, out of reach of that kill) was left running, re-parented to
    init (21st fault run: ``bench train --lerobot-python``, ``eval --lerobot-policy``)."""

    def __init__(self, proc: Any, group: bool) -> None:
        import subprocess  # here: only the commands that run other programs need it

        import psutil

        self._guard: Any = None
        try:
            started = psutil.Process(proc.pid).create_time()
        except psutil.Error:  # already gone: nothing to guard
            return
        self._guard = subprocess.Popen(
            [sys.executable, "-c", _GUARD, str(proc.pid), repr(started), "1" if group else "0", _ACTLAB_ROOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # out of reach of a kill of the caller's process group (see above)
        )

    def disarm(self) -> None:
        """Tell the guard the child is the parent's to end (or has ended); wait for it to exit."""
        import subprocess

        guard, self._guard = self._guard, None
        if guard is None:
            return
        with contextlib.suppress(OSError):
            guard.stdin.write(b"x")
            guard.stdin.flush()
        with contextlib.suppress(OSError):
            guard.stdin.close()
        try:
            guard.wait(timeout=TREE_KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            guard.kill()
            guard.wait()


def kill_tree(proc: Any, wait_s: float = TREE_KILL_WAIT_S) -> list[int]:
    """SIGKILL a child started with :func:`start_group_kwargs` (a ``subprocess.Popen``), its process group
    and all its descendants, also those that left the group (``setsid``); wait up to ``wait_s`` seconds
    for them to be gone. Returns the pids still running after that (normally none). ``proc`` itself is not
    reaped here (its ``wait()`` is the caller's).

    Why the group and the descendants: a wrapper (``conda run``, a shell script) keeps its child's pipes
    open, so killing the wrapper alone leaves the child running and a reader of the pipe waiting for ever;
    the group covers descendants whose parent already died (re-parented, no longer anyone's descendant),
    the walk covers those that started a session of their own. The walk runs only while ``proc`` is not
    reaped (its pid cannot name another process then); the group is killed either way (Linux reuses no
    pid while it names a live process group)."""
    import psutil  # here: only the callers that end process trees need it (a dependency of actlab)

    pid = proc.pid
    family: list[psutil.Process] = []
    if proc.returncode is None:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            family = [root, *root.children(recursive=True)]
    return end_family(family, pid, wait_s)


def end_family(family: list[Any], pgid: int | None, wait_s: float = TREE_KILL_WAIT_S) -> list[int]:
    """SIGKILL the processes ``family`` (psutil.Process) and every member of process group ``pgid`` (None:
    no group), and wait up to ``wait_s`` seconds for them to be gone; returns the pids still running then.
    :func:`kill_tree` and :class:`ChildGuard`'s guard (after its parent died) end a tree through it."""
    import psutil

    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGSTOP)  # stopped, none of them can start another meanwhile
        family = family + [p for p in _group_members(pgid) if p not in family]
    # multiprocessing's resource trackers are spared the SIGKILL: a tracker unlinks the named semaphores
    # of the processes it served once they are gone (the end of its pipe), and exits. Killed with them
    # (the group's SIGKILL), it left a LeRobot DataLoader's 11 sem.mp-XXXXXXXX in /dev/shm for good at
    # every SIGTERM, Ctrl-C or timeout of `bench train --lerobot-python` (21st fault run).
    trackers = [p for p in family if _is_resource_tracker(p)]
    for p in family:
        if p not in trackers:
            with contextlib.suppress(psutil.Error):
                p.kill()
    for p in trackers:
        with contextlib.suppress(psutil.Error):
            p.resume()  # (stopped above with its group)

    def running(p: psutil.Process) -> bool:  # a zombie is dead (its parent reaps it; not done here)
        try:
            return p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    deadline = time.monotonic() + wait_s
    alive = [p for p in family if running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if running(p)]
    if alive and trackers:  # a tracker that did not end by itself (another holder of its pipe lives on)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        time.sleep(0.1)
        alive = [p for p in alive if running(p)]
    if pgid is not None and not trackers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)  # (every member was listed and killed above; a last sweep)
    return [p.pid for p in alive]


def _group_members(pgid: int) -> list[Any]:
    """The processes of process group ``pgid`` now (psutil.Process), zombies included."""
    import psutil

    members = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(p.pid) == pgid:
                members.append(p)
    return members


def _is_resource_tracker(p: Any) -> bool:
    """``p`` is a multiprocessing resource tracker (``python -c 'from multiprocessing.resource_tracker
    import main;main(FD)'``, what a spawn or forkserver context starts)."""
    import psutil

    try:
        return any("multiprocessing.resource_tracker" in part for part in p.cmdline())
    except psutil.Error:
        return False


def run_tree(
    cmd: Sequence[str], timeout: float, env: dict[str, str] | None = None, field: str = "command"
) -> tuple[int, str, str]:
    """Run ``cmd`` to its end in a process group of its own and return ``(returncode, stdout, stderr)``
    (text). Past ``timeout`` seconds the whole tree is killed (:func:`kill_tree`: a wrapper script's child
    and a DataLoader's workers too, which would otherwise hold the pipes open) and
    ``subprocess.TimeoutExpired`` is raised; an interrupt of the caller ends the tree as well. A command
    that cannot start is an ActlabError naming ``field`` (the option that gave it)."""
    import subprocess  # here: only the commands that run another interpreter need it

    try:
        proc = subprocess.Popen(
            list(cmd),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            **start_group_kwargs(),
        )
    except OSError as e:  # missing, not executable, a directory
        raise ActlabError(
            f"cannot start {cmd[0]}",
            field=field,
            expected="an executable file",
            found=e.strerror or str(e),
            fix=f"check the path given to {field}",
        ) from e
    guard = ChildGuard(proc, group=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:  # the timeout, or Ctrl-C / SIGTERM of the caller
        kill_tree(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):  # a descendant that escaped may hold a pipe
            proc.communicate(timeout=TREE_KILL_WAIT_S)
        raise
    finally:
        guard.disarm()
    return proc.returncode, out, err
