"""Processes started by tests: each one with a timeout, and none left running after its test.

Every process a test starts goes through :func:`run` / :func:`run_cli` (run to the end) or
:func:`started` + :func:`finish` (runs beside the test). A process is started in a session of its own
and carries an environment marker of its own (:data:`CALL_ENV`) that all its descendants inherit, so on
a timeout, on an error in the test, or when the test ends, all of them are killed by pid: its process
group, its descendants, and the descendants that left both (torchrun starts each worker in a session of
its own; a process whose parent died is re-parented to init and is nobody's descendant any more).

conftest.py marks the whole test run the same way (:data:`SESSION_ENV`), which also covers the worker
pools that code under test starts in the pytest process itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import psutil
import pytest

# Set by conftest.py to one value per pytest process; inherited by everything the test run starts.
SESSION_ENV = "ACTLAB_TEST_SESSION"
# One value per process started here; inherited by all its descendants.
CALL_ENV = "ACTLAB_TEST_CALL"

# Output kept in a failure message, per stream.
TAIL_CHARS = 4000
# How long a killed process may take to disappear (SIGKILL is not instant for a process in the kernel).
_KILL_WAIT_S = 30.0
# How long descendants may take to exit after the command did, before they count as left behind.
LEFTOVER_GRACE_S = 10.0


def clock() -> float:
    """Now, on the clock of psutil's ``create_time``: on Linux the boot time from /proc/stat (whole
    seconds) plus the time since boot, which runs up to a second behind ``time.time()``."""
    if hasattr(time, "CLOCK_BOOTTIME"):
        return psutil.boot_time() + time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.time() - 1.0


def marked(name: str, value: str, since: float = 0.0) -> list[psutil.Process]:
    """Running processes (zombies excluded) started at :func:`clock` time ``since`` or later whose
    environment has ``name=value``, this one excluded. Reading a process's environment costs ~0.2 ms
    (its start time ~0.01 ms), so only the ones started since then are read."""
    since -= 0.05  # start times are counted in clock ticks (10 ms) and rounded down
    found = []
    for p in psutil.process_iter(["create_time"]):
        if p.pid == os.getpid() or (p.info["create_time"] or 0.0) < since:
            continue
        with contextlib.suppress(psutil.Error):  # exited meanwhile (or a zombie), or not ours to read
            if p.environ().get(name) == value:
                found.append(p)
    return found


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_gone(procs: Sequence[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until each process has exited (a zombie counts: dead, its parent reaps it); the ones still
    running after ``timeout`` seconds are returned. Nothing is reaped here: that is the parent's job."""
    deadline = time.monotonic() + timeout
    alive = [p for p in procs if _alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if _alive(p)]
    return alive


def kill_processes(procs: Sequence[psutil.Process]) -> None:
    """Stop every process first (so none can start another, or a pool replace a dead worker), then
    SIGKILL them all and wait until they are gone."""
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.suspend()
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    wait_gone(procs, _KILL_WAIT_S)


def describe(procs: Sequence[psutil.Process]) -> str:
    lines = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            lines.append(f"  pid {p.pid}: {' '.join(p.cmdline())[:200]}")
    return "\n".join(lines)


def _family(proc: subprocess.Popen) -> list[psutil.Process]:
    """``proc`` (until it is reaped), its descendants, and every process carrying its marker."""
    tree: list[psutil.Process] = []
    if proc.returncode is None:  # not reaped yet: the pid is still this process's
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(proc.pid)
            tree = [root, *root.children(recursive=True)]
    token, since = getattr(proc, "_actlab_call", (None, 0.0))
    tree += [p for p in (marked(CALL_ENV, token, since) if token else []) if p not in tree]
    return [p for p in tree if _alive(p)]


def kill_family(proc: subprocess.Popen) -> int:
    """SIGKILL ``proc``, its process group and every process it started; returns how many were running."""
    if proc.returncode is None:  # its pid is its group's id: not reusable before it is reaped
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGSTOP)
    killed = 0
    for _ in range(3):  # one listed before it forked a child: list again
        family = _family(proc)
        if not family:
            break
        killed += len(family)
        kill_processes(family)
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    return killed


def _tail(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= TAIL_CHARS else "[...]\n" + text[-TAIL_CHARS:]


@contextlib.contextmanager
def started(
    cmd: Sequence[str], *, env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None
) -> Iterator[subprocess.Popen]:
    """Start ``cmd`` (text stdout/stderr piped, stdin closed) in a session of its own. Whatever is still
    running from it when the block ends (normally, by an error or by the test's timeout) is killed."""
    call, since = uuid.uuid4().hex, clock()
    env = {**(os.environ if env is None else env), CALL_ENV: call}
    proc = subprocess.Popen(
        list(map(str, cmd)),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    proc._actlab_call = (call, since)  # type: ignore[attr-defined]
    try:
        yield proc
    finally:
        kill_family(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=_KILL_WAIT_S)  # reap it and close its pipes


def finish(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """Wait for a process from :func:`started` and return its (stdout, stderr). Past ``timeout`` seconds
    it is killed with everything it started, and the test fails with the tail of its output."""
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    except BaseException:  # the test's own timeout (pytest-timeout's SIGALRM) or Ctrl-C
        kill_family(proc)
        raise
    if timed_out:
        code = proc.poll()
        n = kill_family(proc)
        try:
            out, err = proc.communicate(timeout=_KILL_WAIT_S)  # what it wrote before it was killed
        except subprocess.TimeoutExpired:
            out = err = "(not readable: a killed process still holds the pipe)"
        what = "timed out" if code is None else f"exited ({code}), but what it started held its output"
        pytest.fail(
            f"{what} after {timeout:g} s, killed {n} process(es): {' '.join(map(str, proc.args))}\n"
            f"--- stdout (end) ---\n{_tail(out)}\n--- stderr (end) ---\n{_tail(err)}",
            pytrace=False,
        )
    leftovers = wait_gone(_family(proc), LEFTOVER_GRACE_S)  # outliving it is a bug in the command
    if leftovers:
        listing = describe(leftovers)
        kill_processes(leftovers)
        pytest.fail(f"{' '.join(map(str, proc.args))} exited but left processes running:\n{listing}")
    return out, err


def run(
    cmd: Sequence[str],
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True)`` that cannot hang: see :func:`finish`."""
    with started(cmd, env=env, cwd=cwd) as proc:
        out, err = finish(proc, timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_python(code: str, *args: str, timeout: float, env: dict[str, str] | None = None):
    """Run ``python -c code args...`` with this interpreter (see :func:`run`)."""
    return run([sys.executable, "-c", code, *args], timeout=timeout, env=env)


def cli(*args: str) -> list[str]:
    """The command line of ``actlab ARGS`` with this interpreter (the source under test, not an install)."""
    return [sys.executable, "-m", "actlab.cli", *map(str, args)]


def run_cli(*args: str, timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``actlab ARGS`` in a fresh process (see :func:`run`)."""
    return run(cli(*args), timeout=timeout, env=env)


@contextlib.contextmanager
def ctrl_c_when(ready: Callable[[], bool], within_s: float) -> Iterator[dict[str, bool]]:
    """A Ctrl-C for a command run in this process (``actlab.cli.main``): :func:`signal_when` with SIGINT."""
    with signal_when(signal.SIGINT, ready, within_s) as state:
        yield state


@contextlib.contextmanager
def signal_when(signum: int, ready: Callable[[], bool], within_s: float) -> Iterator[dict[str, bool]]:
    """A SIGINT (Ctrl-C) or SIGTERM for a command run in this process (``actlab.cli.main``): once
    ``ready()`` is true a thread sends this process one ``signum``, which the command's own handler
    (``catch_sigterm``) takes in the main thread, as it would in a process of its own. Past ``within_s``
    seconds it is sent anyway, so the command ends, and ``state["late"]`` says so. Meanwhile a handler of
    the test's stands in for the default: a signal that meets no handler of the command's (it ended or
    failed early) sets ``state["stray"]`` instead of ending the whole test run (KeyboardInterrupt, or the
    process killed by SIGTERM)."""
    import threading

    state = {"sent": False, "late": False, "stray": False}
    done = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + within_s
        while not done.is_set():
            late = time.monotonic() > deadline
            if late or ready():
                state["late"] = late
                state["sent"] = True
                os.kill(os.getpid(), signum)
                return
            time.sleep(0.05)

    def stray(signum, frame) -> None:
        state["stray"] = True

    previous = signal.signal(signum, stray)
    watcher = threading.Thread(target=watch, name=f"send-{signal.Signals(signum).name}", daemon=True)
    watcher.start()
    try:
        yield state
    finally:
        done.set()
        watcher.join()
        signal.signal(signum, previous)


# A python that forks a grandchild (which with "setsid" leaves the process group) and both sleep holding
# the pipes they inherited, never answering: what a wrapper's child does when it hangs.
_HANG = """
import os, sys, time
if sys.argv[1] == "setsid" and os.fork() == 0:
    os.setsid()
elif sys.argv[1] != "setsid":
    os.fork()
time.sleep(100000)
"""


def hanging_wrapper(directory, mode: str = "group"):
    """An executable shell script (e.g. a ``--lerobot-python``, as ``conda run`` or a venv wrapper would
    be) that runs a python child (not exec) and waits; the child and its grandchild hang (:data:`_HANG`).
    ``mode`` "setsid": the grandchild leaves the process group."""
    import stat

    script = directory / f"hanging-python-{mode}"
    script.write_text(f"#!/bin/sh\n\"{sys.executable}\" -c '{_HANG}' {mode}\nwait\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


REPO = Path(__file__).resolve().parents[1]


def lerobot_python() -> Path:
    """The lerobot venv's python ($ACTLAB_LEROBOT_PYTHON, default /work/lerobot-venv/bin/python); the test
    is skipped, saying so, where there is none."""
    import pytest

    python = Path(os.environ.get("ACTLAB_LEROBOT_PYTHON", "/work/lerobot-venv/bin/python"))
    if not python.is_file():
        pytest.skip("needs the lerobot venv ($ACTLAB_LEROBOT_PYTHON)")
    return python


def torchrun_env(tmp: Path) -> dict[str, str]:
    """The environment of a torchrun in a test: its agent's log directory (``/tmp/torchelastic_XXXXXXXX``,
    which torch's elastic agent leaves behind: 65 on this machine from the suite's runs) goes into the
    test's own directory (torch's tempfile, under TMPDIR)."""
    return {**os.environ, "TMPDIR": str(tmp)}


def lerobot_env(tmp: Path) -> dict[str, str]:
    """The environment of a process of the lerobot venv that must run this checkout: its ``src`` and the
    plugin's folder first on PYTHONPATH (the installed distribution only makes lerobot find the plugin),
    offline, no wandb, one OpenMP thread. ACTLAB_LEROBOT_INSTALLED=1 runs what is installed in that venv
    instead (the check of an install)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        HF_HUB_OFFLINE="1",
        HF_HOME=str(tmp / "hf"),
        WANDB_MODE="disabled",
        MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"),
        OMP_NUM_THREADS="1",
        PYTHONPATH=f"{REPO / 'src'}:{REPO / 'integrations' / 'lerobot_policy_actlab'}",
    )
    if os.environ.get("ACTLAB_LEROBOT_INSTALLED") == "1":
        del env["PYTHONPATH"]
    return env


def lerobot_policy_call(code: str, export: Path, tmp: Path, timeout: float = 120) -> tuple[int, str]:
    """Run ``code`` (Python, the plugin's export path as ``sys.argv[1]``) in the lerobot venv on this
    checkout's source (:func:`lerobot_python`, :func:`lerobot_env`): its exit code and stderr."""
    with started([str(lerobot_python()), "-c", code, str(export)], env=lerobot_env(tmp)) as proc:
        _, err = finish(proc, timeout)
    return proc.returncode, err


def skip_without_lerobot_extra(python: str | Path, module: str, extra: str, env: dict[str, str]) -> None:
    """Skip the test, saying so, where the lerobot venv at ``python`` cannot import ``module``, which
    LeRobot's ``extra`` installs (diffusers: ``lerobot[diffusion]``, not in ``lerobot[dataset,training]``):
    the test would otherwise fail on LeRobot's ImportError, an install gap and not a fault."""
    import pytest

    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    if run([str(python), "-c", code], env=env, timeout=120).returncode != 0:
        pytest.skip(f"the lerobot venv has no {module} (pip install 'lerobot[{extra}]==0.6.1' there)")
