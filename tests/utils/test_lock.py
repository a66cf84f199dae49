"""DirLock: one holder at a time, released by the kernel when the holder dies, nothing left when unused."""

import os
import select
import signal
import subprocess
import sys

import pytest

from actlab.errors import ActlabError
from actlab.utils.lock import LOCK_FILE, DirLock

_HOLD = """
import sys
from actlab.utils.lock import DirLock
lock = DirLock(sys.argv[1]).acquire()
print("locked", flush=True)
sys.stdin.read()  # hold until killed
"""


def test_a_second_holder_fails_at_once_naming_the_directory_and_the_pid(tmp_path):
    run = tmp_path / "run"
    with DirLock(run, "run directory", fix="stop pid {pid} first"):
        assert (run / LOCK_FILE).read_text().strip() == str(os.getpid())
        with pytest.raises(ActlabError) as e:
            DirLock(run, "run directory").acquire()
        assert e.value.file == str(run) and f"pid {os.getpid()}" in e.value.problem
        assert "in use by another actlab process" in e.value.problem
        with pytest.raises(ActlabError, match=f"stop pid {os.getpid()} first"):
            DirLock(run, fix="stop pid {pid} first").acquire()
    # released: the lock file is gone and so is the directory the lock created, left empty
    assert not run.exists()
    with DirLock(run):
        (run / "config.json").write_text("{}")
    assert [p.name for p in run.iterdir()] == ["config.json"]  # what was written stays
    with DirLock(run):
        pass
    assert [p.name for p in run.iterdir()] == ["config.json"]


def test_the_lock_of_a_killed_process_is_free_at_once(tmp_path):
    run = tmp_path / "a" / "run"
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(run)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        assert select.select([proc.stdout], [], [], 120)[0], "the holder did not start"
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(ActlabError, match=f"pid {proc.pid}"):
            DirLock(run).acquire()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # no cleanup at all: the file stays, the lock goes
        proc.wait(timeout=60)
    assert (run / LOCK_FILE).is_file()
    with DirLock(run) as lock:
        assert lock.held and (run / LOCK_FILE).read_text().strip() == str(os.getpid())
