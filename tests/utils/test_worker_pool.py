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
