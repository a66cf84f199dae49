"""Faults of our twentieth planted-fault run (docs/faults.md "Twentieth fault run"), planted for real:
real commands killed with SIGKILL in sessions of their own (the whole process group, as a cgroup or a
terminal job is killed), real worker pools, real files.

Each test names the probes of docs/faults_round20_probes.md it plants again and what happened before its
fix.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import pytest

from actlab.cli import main
from procs import finish, started

SHM = Path("/dev/shm")


def _semaphore_inodes(pid: int) -> set[int]:
    """The inodes of the named semaphores process ``pid`` has open (glibc maps each /dev/shm/sem.* file;
    the mapping shows the name it was made under, so the inode is what ties it to the file now)."""
    found = set()
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/dev/shm/sem."):
            found.add(int(parts[4]))
    return found


def _shm_inodes() -> dict[int, str]:
    out = {}
    for entry in os.scandir(SHM):
        if entry.name.startswith("sem."):
            with contextlib.suppress(OSError):
                out[entry.inode()] = entry.name
    return out


# ------------------------------------------------------------------ semaphores in /dev/shm
@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not SHM.is_dir(), reason="POSIX semaphores in /dev/shm"
)
@pytest.mark.timeout(120)
def test_a_killed_worker_pool_leaves_no_semaphore_in_dev_shm_for_good(tmp_path):
    """LOSS before (sr_kill_*, ev_kill_*, evs_kill, ...: every command with a spawned worker pool): SIGKILL
    to the command's process group (its resource tracker with it) left the pool's named semaphores in
    /dev/shm as sem.mp-XXXXXXXX, 5 a kill, and nothing ever removed them (75 had piled up on this machine).
    Now they are named sem.mp-actlab-HOST-PID-RANDOM and the next worker pool removes those of a dead pid."""
    out = tmp_path / "rec"
    args = ["sim", "record", "--episodes", "40", "--image-size", "16", "--workers", "2", "--out", str(out)]
    with started([sys.executable, "-m", "actlab.cli", *args]) as proc:
        held: set[int] = set()
        end = time.monotonic() + 90
        while time.monotonic() < end and proc.poll() is None:
            held = _semaphore_inodes(proc.pid)
            if len(held) >= 3 and list(tmp_path.glob(".rec.*")):
                break
            time.sleep(0.05)
        assert proc.poll() is None and held, "the recording ended before its pool could be killed"
        time.sleep(0.5)
        held = _semaphore_inodes(proc.pid) or held
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    left = {i: n for i, n in _shm_inodes().items() if i in held}
    assert left, "the kill left no semaphore: nothing to reclaim"
    args = ["sim", "record", "--episodes", "1", "--image-size", "16", "--workers", "1", "--out", str(out)]
    with started([sys.executable, "-m", "actlab.cli", *args]) as proc:
        finish(proc, 90)
    assert proc.returncode == 0
    still = {i: n for i, n in _shm_inodes().items() if i in left}
    assert not still, f"the killed command's semaphores are still in /dev/shm: {sorted(still.values())}"


# ------------------------------------------------------------------ the write probe of every --out
def _dead_pid() -> int:
    """A pid no process has now (a child that has exited and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    return proc.pid


def test_a_write_probe_a_killed_command_left_is_removed_by_the_next_command(tmp_path, capsys):
    """LOSS before (found by reading, beside the sixteen SIGKILL rows: `utils.io.check_writable`, which
    every command's --out runs before its work): the probe file was mkstemp's `.actlab-probe-XXXXXXXX`,
    naming no owner, so a SIGKILL between its making and its removal left it beside the output for good.
    Now it is `.actlab-probe.actlab-HOST-PID-RANDOM.tmp` and the next probe of that directory removes a
    dead process's; a live process's, another host's and an older name are left alone."""
    host = f"{zlib.crc32(socket.gethostname().encode()):08x}"
    dead = tmp_path / f".actlab-probe.actlab-{host}-{_dead_pid()}-00000000.tmp"
    live = tmp_path / f".actlab-probe.actlab-{host}-{os.getpid()}-00000000.tmp"
    other_host = tmp_path / f".actlab-probe.actlab-00000000-{_dead_pid()}-00000000.tmp"
    older = tmp_path / ".actlab-probe-k2j4x9_a"
    for p in (dead, live, other_host, older):
        p.write_bytes(b"")
    out = tmp_path / "samples.csv"
    assert main(["monitor", "--interval", "0.1", "--out", str(out), "--", sys.executable, "-c", "pass"]) == 0
    capsys.readouterr()
    assert out.is_file() and not dead.exists()
    assert live.exists() and other_host.exists() and older.exists()
    assert not [
        p for p in tmp_path.iterdir() if p.name.startswith(".actlab-probe.") and p not in (live, other_host)
    ]


# ------------------------------------------------------------------ multiprocessing's temporary directory
@pytest.fixture
def short_tmp():
    """A directory of a short path (a socket's path in it must fit AF_UNIX's 107 bytes), removed after."""
    path = Path(tempfile.mkdtemp(prefix="f20-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.timeout(150)
def test_a_killed_batch_size_search_leaves_no_directory_in_tmp_for_good(short_tmp):
    """LOSS before (fb_kill2): SIGKILL to `find-batch-size` while its fork server ran left multiprocessing's
    /tmp/pymp-XXXXXXXX (the server's listening socket) for good: mkdtemp's name tells no owner, so no run
    removed it. Now it is pymp-actlab-HOST-PID-RANDOM and the next run removes a dead pid's (where
    $TMPDIR is short enough for that name in a socket's path: pytest's tmp_path is not)."""
    tmp_path = short_tmp
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    ds = tmp_path / "rec"
    rec = ["sim", "record", "--episodes", "2", "--image-size", "16", "--workers", "0", "--out", str(ds)]
    assert main(rec) == 0
    args = ["find-batch-size", "--preset", "tiny", "--dataset", str(ds), "--memory-limit", "2GiB",
            "--steps", "1"]  # fmt: skip
    with started([sys.executable, "-m", "actlab.cli", *args], env=env) as proc:
        end = time.monotonic() + 100
        while not list(tmp_path.glob("pymp-*")) and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, "the search ended before its fork server could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert list(tmp_path.glob("pymp-*")), "the kill left no directory: nothing to reclaim"
    with started([sys.executable, "-m", "actlab.cli", *args, "--max", "1"], env=env) as proc:
        _, err = finish(proc, 100)
    assert proc.returncode == 0, err[-2000:]
    assert not list(tmp_path.glob("pymp-*"))
