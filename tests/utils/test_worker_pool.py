"""actlab.utils.procs: waits on a worker pool end when a worker dies, within the liveness poll."""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import time

import pytest

from actlab.utils import procs


def _sleep_then_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_a_killed_worker_ends_result_and_as_completed_instead_of_a_wait():
    with procs.worker_pool(1) as pool:
        assert procs.result(pool, pool.submit(_sleep_then_pid, 0.0)) > 0  # a normal result passes through
        (worker,) = procs.worker_processes(pool)
        future = pool.submit(_sleep_then_pid, 60.0)
        time.sleep(0.5)
        os.kill(worker.pid, signal.SIGKILL)  # what the OOM killer does
        t0 = time.monotonic()
        with pytest.raises(cf.process.BrokenProcessPool):
            procs.result(pool, future, poll_s=0.2)
        assert time.monotonic() - t0 < 10  # noticed, not the 60 s of the task

    with procs.worker_pool(1) as pool:
        futures = [pool.submit(_sleep_then_pid, 60.0)]
        time.sleep(0.5)
        os.kill(procs.worker_processes(pool)[0].pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(cf.process.BrokenProcessPool):
            for fut in procs.as_completed(pool, futures, poll_s=0.2):  # as the harness consumes it
                fut.result()
        assert time.monotonic() - t0 < 10


@pytest.mark.parametrize("leaves_group", [False, True])
def test_kill_tree_ends_a_child_its_grandchild_and_one_that_left_the_group(tmp_path, leaves_group):
    # A shell wrapper (as conda run is) running python, which forks a grandchild that sleeps; with
    # leaves_group the grandchild calls setsid first. All of them write their pid, then kill_tree ends them
    # (tests/procs.started starts the wrapper in a session of its own, as start_group_kwargs does).
    import sys
    from pathlib import Path

    import psutil

    from actlab.utils.procs import kill_tree, start_group_kwargs
    from procs import started

    assert start_group_kwargs() == {"start_new_session": True}
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        f"    {'os.setsid()' if leaves_group else 'pass'}\n"
        "    open(sys.argv[1] + '.grandchild', 'w').write(str(os.getpid()))\n"
        "else:\n"
        "    open(sys.argv[1] + '.child', 'w').write(str(os.getpid()))\n"
        "time.sleep(100000)\n"
    )
    base = str(tmp_path / "pid")
    with started(["/bin/sh", "-c", f'"{sys.executable}" -c "$0" "$1"; wait', code, base]) as proc:
        files = [Path(base + ".child"), Path(base + ".grandchild")]
        while not all(f.is_file() and f.read_text() for f in files):  # (the test's timeout bounds this)
            time.sleep(0.02)
        pids = [int(f.read_text()) for f in files]
        assert kill_tree(proc) == []
        for pid in pids:
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        assert proc.wait(timeout=30) == -9  # the wrapper itself, killed (reaped by its parent, here)
