"""Faults of our seventh planted-fault run (docs/faults.md "Seventh fault run"), planted for real: the real
parser, real files, real commands and processes.

- ``actlab monitor`` whose command ignores SIGTERM/SIGINT waited for it forever (a HANG, with a process
  left behind): the command's whole tree is now killed ``STOP_GRACE_S`` after the signal, and said.
"""

from __future__ import annotations

import signal
import sys
import time

import pytest

from procs import finish, started

_MONITOR_WITH_SHORT_GRACE = """
import sys
import actlab.profiling.monitor as monitor
from actlab.cli import main
monitor.STOP_GRACE_S = 1.0  # the default 10 s, shortened for the test
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timeout(60)
def test_monitor_kills_a_command_that_ignores_its_stop_signal(tmp_path):
    """HANG before: `actlab monitor -- CMD` forwarded SIGTERM (and SIGINT) to a CMD that ignores it and
    waited for it forever (`timeout 60` did not end it in 10 minutes); CMD's child kept running. SIGINT
    and SIGTERM take the same path (the forwarder); SIGINT, a Ctrl-C from outside a terminal, is planted."""
    sig = signal.SIGINT
    ready = tmp_path / "ready"
    script = tmp_path / "ignores.sh"
    script.write_text(f"trap '' TERM INT\nsleep 1000 &\ntouch '{ready}'\nwait\n")
    cmd = [
        sys.executable,
        "-c",
        _MONITOR_WITH_SHORT_GRACE,
        "monitor",
        "--interval",
        "0.2",
        "--",
        "sh",
        script,
    ]
    with started(cmd) as proc:
        deadline = time.monotonic() + 40
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the command never started"
            time.sleep(0.1)
        sent = time.monotonic()
        proc.send_signal(sig)
        _out, err = finish(proc, timeout=15)  # fails if anything it started is left running
    assert time.monotonic() - sent < 12
    assert proc.returncode == 128 + signal.SIGKILL, err[-2000:]
    assert f"did not exit within 1 s of {sig.name}: killed it and 1 process(es) it started (SIGKILL)" in err
