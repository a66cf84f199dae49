"""When a run stops early: SIGTERM (preemption, ``kill``) and a wall-time limit.

A trainer checks :class:`StopSignals` at its safe points (after an optimizer step, between RL collection
rounds), writes a checkpoint when :meth:`StopSignals.reason` says so, and stops; its command then exits
with :data:`EXIT_SIGTERM` for a SIGTERM (the run is not finished: ``--resume`` continues it).
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator

# 128 + SIGTERM: what a shell reports for a process a SIGTERM ended, and what a stopped run exits with
EXIT_SIGTERM = 128 + signal.SIGTERM


class StopSignals:
    """A SIGTERM flag and an optional wall-time limit, read at a trainer's safe points."""

    def __init__(self, time_limit_s: float = 0.0) -> None:
        # seconds after which :meth:`reason` says "time_limit" (0: no limit)
        self.time_limit_s = time_limit_s
        self.sigterm = False
        self._t0 = time.monotonic()

    def elapsed_s(self) -> float:
        return time.monotonic() - self._t0

    def reason(self) -> str | None:
        """ "sigterm", "time_limit" or None (go on)."""
        if self.sigterm:
            return "sigterm"
        if self.time_limit_s and self.elapsed_s() > self.time_limit_s:
            return "time_limit"
        return None


@contextlib.contextmanager
def catch_sigterm(time_limit_s: float = 0.0) -> Iterator[StopSignals]:
    """SIGTERM sets ``stop.sigterm`` instead of ending the process while the block runs (main thread
    only; elsewhere the flag is never set); the previous handler is restored afterwards."""
    stop = StopSignals(time_limit_s)

    def handler(signum, frame):
        stop.sigterm = True

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        previous = None
    try:
        yield stop
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
