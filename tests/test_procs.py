"""tests/procs.py: a process a test starts never outlives its timeout or its block, nor do its children."""

import sys

import psutil
import pytest

import procs

# Starts a grandchild in a session of its own (as torchrun does with its workers), prints its pid, then
# both sleep until killed.
HANG = (
    "import subprocess, sys, time\n"
    "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
    "print(p.pid, flush=True)\n"
    "time.sleep(600)\n"
)
# The same grandchild, its output not tied to the command's pipes, and the command exits at once.
ESCAPE = HANG.replace("start_new_session=True", "start_new_session=True, stdout=-3, stderr=-3")  # DEVNULL
ESCAPE = ESCAPE.rsplit("time.sleep(600)\n", 1)[0]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_command_past_its_timeout_is_killed_with_its_escaped_descendants():
    with pytest.raises(pytest.fail.Exception) as failed:
        procs.run_python(HANG, timeout=3)
    message = str(failed.value)
    assert "timed out after 3 s, killed 2 process(es)" in message
    grandchild = int(message.split("--- stdout (end) ---\n")[1].split()[0])  # its output is in the report
    assert _gone(grandchild)


def test_a_command_that_exits_but_leaves_a_descendant_running_fails(monkeypatch):
    monkeypatch.setattr(procs, "LEFTOVER_GRACE_S", 1.0)  # the leftover sleeps 600 s: no need to wait 10
    with pytest.raises(pytest.fail.Exception, match="exited but left processes running") as failed:
        procs.run_python(ESCAPE, timeout=60)
    assert "time.sleep(600)" in str(failed.value)  # the leftover is named
    with procs.started([sys.executable, "-c", ESCAPE]) as proc:
        grandchild = int(proc.stdout.readline())
    assert _gone(grandchild)  # killed when the block ended, although it left the session


def test_an_error_in_the_test_kills_what_it_started():
    with pytest.raises(ZeroDivisionError), procs.started([sys.executable, "-c", HANG]) as proc:
        grandchild = int(proc.stdout.readline())
        1 / 0  # noqa: B018
    assert _gone(proc.pid) and _gone(grandchild)
