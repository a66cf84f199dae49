"""When a run stops early: SIGTERM (preemption, ``kill``), Ctrl-C (SIGINT) and a wall-time limit.

A trainer checks :class:`StopSignals` at its safe points (after an optimizer step, between RL collection
rounds), writes a checkpoint when :meth:`StopSignals.reason` says so, and stops; its command then exits
with :data:`EXIT_SIGTERM` for a SIGTERM and :data:`EXIT_SIGINT` for a Ctrl-C (the run is not finished:
``--resume`` continues it). A first Ctrl-C used to end the run at once with only "interrupted", losing
every step since the last checkpoint; now it asks for the same checkpoint as a SIGTERM, and a second
Ctrl-C ends the run at once.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator

# 128 + SIGTERM: what a shell reports for a process a SIGTERM ended, and what a stopped run exits with
EXIT_SIGTERM = 128 + signal.SIGTERM
# 128 + SIGINT: what a shell reports for a command a Ctrl-C ended
EXIT_SIGINT = 128 + signal.SIGINT


class StopSignals:
    """A SIGTERM flag and an optional wall-time limit, read at a trainer's safe points."""

    def __init__(self, time_limit_s: float = 0.0) -> None:
        # seconds after which :meth:`reason` says "time_limit" (0: no limit)
        self.time_limit_s = time_limit_s
        self.sigterm = False
        self.sigint = False  # a first Ctrl-C
        self._t0 = time.monotonic()

    def elapsed_s(self) -> float:
        return time.monotonic() - self._t0

    @property
    def signalled(self) -> bool:
        """A SIGTERM or a Ctrl-C asked the run to checkpoint and stop."""
        return self.sigterm or self.sigint

    def reason(self) -> str | None:
        """ "sigterm", "sigint", "time_limit" or None (go on)."""
        if self.sigterm:
            return "sigterm"
        if self.sigint:
            return "sigint"
        if self.time_limit_s and self.elapsed_s() > self.time_limit_s:
            return "time_limit"
        return None


@contextlib.contextmanager
def catch_sigterm(time_limit_s: float = 0.0) -> Iterator[StopSignals]:
    """SIGTERM sets ``stop.sigterm`` and a first Ctrl-C ``stop.sigint`` instead of ending the process
    while the block runs (main thread only; elsewhere the flags are never set); a second Ctrl-C raises
    KeyboardInterrupt at once; a SIGINT that was ignored stays ignored. The previous handlers are
    restored afterwards."""
    import sys

    stop = StopSignals(time_limit_s)

    def on_term(signum, frame):
        stop.sigterm = True

    def on_int(signum, frame):
        stop.sigint = True
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the second Ctrl-C: at once
        with contextlib.suppress(OSError, ValueError):
            print(
                "\nCtrl-C: writing a checkpoint, then stopping (Ctrl-C again to stop at once)",
                file=sys.stderr,
            )

    previous = previous_int = None
    try:
        previous = signal.signal(signal.SIGTERM, on_term)
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            previous_int = signal.signal(signal.SIGINT, on_int) or signal.default_int_handler
    except ValueError:  # not the main thread
        pass
    try:
        yield stop
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if previous_int is not None:
            signal.signal(signal.SIGINT, previous_int)


def stopped_line(reason: str, last_checkpoint: str | None, resume_command: str) -> str:
    """What a trainer's command prints when a SIGTERM or a Ctrl-C stopped its run: the checkpoint kept and
    the resume line, or, for a run stopped before its first checkpoint, that nothing was kept (a Ctrl-C
    in the first seconds printed "after checkpoint None" under "writing a checkpoint")."""
    if last_checkpoint is None:
        return (
            f"stopped by {reason.upper()} before the first checkpoint: nothing was trained that could be "
            f"kept; run the same command again, or {resume_command} (it starts the run over)"
        )
    return f"stopped by {reason.upper()} after checkpoint {last_checkpoint}; continue with {resume_command}"
