"""Torch's intra-op thread count: for one block of code (restored afterwards), and the measured choice of
a count on a loaded CPU (:class:`ThreadProbe`)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import statistics
import sys
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run a block with ``n`` torch intra-op threads (unchanged for None), restoring the count after."""
    if n is None:
        yield
        return
    import torch  # lazy: utils imports without torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def keeps_torch_threads(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` may set torch's thread count for its own work (a run's ``num_threads``, the trainer's
    busy-CPU choice); its caller's count is back when it returns or raises. Only where torch was already
    imported: a command's refusals come before torch is imported, and a process that had not imported it
    has no count of its own to keep."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        torch = sys.modules.get("torch")
        before = torch.get_num_threads() if torch is not None else None
        try:
            return fn(*args, **kwargs)
        finally:
            if before is not None:
                sys.modules["torch"].set_num_threads(before)

    return wrapper


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def oversubscribed_note(threads: int | None, setting: str) -> str | None:
    """A note when a torch thread count set by the user (``setting`` names it, e.g. ``threads``) is above
    the CPUs this process may use (None otherwise). The threads then take turns on the CPUs: measured on
    the 2-core development machine, `rl train --preset smoke --set threads=1000` collected its first round
    at 21 env steps/s, 30x slower than at threads=1 (617/s). Said, not refused: a config moves between
    machines, and a resume on a smaller one must not be refused for it."""
    cpus = usable_cpus()
    if threads is None or threads <= cpus:
        return None
    return (
        f"note: {setting} {threads} is more than the {cpus} CPU{'s' if cpus != 1 else ''} this process may "
        f"use: the threads take turns on them and every step waits for the slowest (30x slower seen at "
        f"1000 threads on 2 CPUs); {setting} {cpus} or fewer is faster"
    )


def say_if_oversubscribed(threads: int | None, setting: str) -> None:
    """Print ``oversubscribed_note`` to stderr when there is one (every command that takes a thread
    count says it the same way)."""
    if note := oversubscribed_note(threads, setting):
        print(note, file=sys.stderr)


def load_1m() -> float | None:
    """The 1-minute load average (None where the OS has none)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def cpu_busy(load: float | None, cpus: int, own_threads: int) -> bool:
    """Other work wants more CPUs than the machine has: the load beyond this process's own threads is
    above the CPU count. Then torch's OpenMP threads spin waiting for a descheduled sibling (a batch-32
    step of the CPU demo went from ~80 ms to 1.7-2.5 s beside a test suite, and ~0.4 s with one thread)."""
    return load is not None and load - min(own_threads, cpus) > cpus


def format_load(load: float | None, cpus: int) -> str:
    """``load average 9.6 on 2 CPUs`` (or ``load average unknown``)."""
    if load is None:
        return "load average unknown"
    return f"load average {load:.1f} on {cpus} CPU{'s' if cpus != 1 else ''}"


@dataclasses.dataclass
class ThreadProbe:
    """Chooses a torch thread count by timing real work at each candidate count, interleaved so that
    background load weighs on every count alike.

    The caller asks :meth:`threads_for` before each unit of work (a training step), runs it at that count
    and hands its time to :meth:`record`. The first ``warmup`` units run at the first count and are not
    counted (allocator, first touch); then the candidates take turns for ``rounds`` rounds. Once every
    count has its times, :attr:`chosen` is the count with the lowest median, and :meth:`threads_for`
    returns it from then on. Pure: no clock, no torch.
    """

    candidates: tuple[int, ...]  # thread counts to compare, e.g. (2, 1)
    rounds: int = 3  # timed units per candidate
    warmup: int = 1  # units before the timing starts
    times: dict[int, list[float]] = dataclasses.field(default_factory=dict)  # count -> seconds of its units
    chosen: int | None = None  # the decision, once made

    def __post_init__(self) -> None:
        if not self.candidates or min(self.candidates) < 1 or self.rounds < 1 or self.warmup < 0:
            raise ValueError(f"bad thread probe: {self}")
        self.times = {n: [] for n in self.candidates}

    @property
    def units(self) -> int:
        """Units of work the probe takes before it decides."""
        return self.warmup + self.rounds * len(self.candidates)

    def threads_for(self, unit: int) -> int:
        """The thread count for unit ``unit`` (0-based, counted from the probe's start)."""
        if self.chosen is not None:
            return self.chosen
        if unit < self.warmup:
            return self.candidates[0]
        return self.candidates[(unit - self.warmup) % len(self.candidates)]

    def record(self, unit: int, threads: int, seconds: float) -> int | None:
        """Add one unit's time; returns the chosen count when this unit completed the probe."""
        if self.chosen is not None or unit < self.warmup:
            return None
        self.times[threads].append(seconds)
        if all(len(v) >= self.rounds for v in self.times.values()):
            med = self.medians()
            self.chosen = min(self.candidates, key=lambda n: (med[n], n))
            return self.chosen
        return None

    def medians(self) -> dict[int, float]:
        return {n: statistics.median(v) for n, v in self.times.items() if v}

    def sentence(self) -> str:
        """``median step 1 thread 0.41 s, 2 threads 2.08 s: 1 thread (5.1x faster)``."""
        med = self.medians()

        def t(s: float) -> str:
            return f"{s:.2f} s" if s >= 1 else f"{1000 * s:.0f} ms"

        parts = ", ".join(
            f"{n} thread{'s' if n != 1 else ''} {t(med[n])}" for n in self.candidates if n in med
        )
        if self.chosen is None:
            return f"median {parts}"
        slowest = max(med.values())
        gain = slowest / med[self.chosen] if med[self.chosen] > 0 else 1.0
        plural = "s" if self.chosen != 1 else ""
        return f"median {parts}: {self.chosen} thread{plural} ({gain:.1f}x the slowest)"


def torch_thread_count() -> int:
    """torch's intra-op thread count now."""
    import torch  # lazy: utils imports without torch

    return torch.get_num_threads()


# Windows (logging rows) a thread choice stands before a change of load may reopen it: a load average
# that flickers around the busy line must not keep a run probing.
RECHOOSE_AFTER_WINDOWS = 2
# A window this many times slower than the steady step time at the chosen count means the load around
# the run changed even where the 1-minute load average has not caught up yet (windows of one quiet run
# differ by 10-30 %; the shared-CPU slowdowns seen were 5-40x).
RECHOOSE_SLOWDOWN = 3.0


@dataclasses.dataclass
class AdaptiveThreads:
    """Keeps a CPU run on its faster torch thread count while the load around it changes.

    Measured on the 2-core development machine: the CPU demo's batch-32 step takes ~80 ms at 2 threads on
    a quiet machine, 1.7-9 s at 2 threads beside other jobs (OpenMP threads spin waiting for a descheduled
    sibling) and ~0.4-1.5 s at 1 thread. No single count is right for a whole run on a shared machine, so
    the run times its own steps: at the start when the CPUs are busy, and again whenever the load crosses
    the busy line or a window runs ``RECHOOSE_SLOWDOWN`` x slower than the steady time at the chosen count,
    each time with a :class:`ThreadProbe` over the next few steps. Nothing to restart. Pure: the caller
    feeds step numbers, step times and load averages, and applies :meth:`threads_for`.
    """

    most: int  # torch's own thread count for this process (the count a quiet machine gets)
    cpus: int  # CPUs this process may run on
    current: int = 0  # the count in use outside a probe (0: ``most``)
    probe: ThreadProbe | None = None  # the probe in flight, if any
    probe_from: int = 0  # the step its first unit ran at
    busy_at_choice: bool = False  # whether the CPUs were busy when the current count was chosen
    windows_since_choice: int = 0
    steady_s: float | None = None  # fastest window at the current count since it was chosen
    choices: int = 0  # probes completed (the start's included)

    def __post_init__(self) -> None:
        self.current = self.current or self.most

    def start(self, step: int, load: float | None) -> str | None:
        """At the run's first step: a probe when the CPUs are busy; returns what to say."""
        if cpu_busy(load, self.cpus, self.most):
            return self._open(step, True, f"the CPUs are busy ({format_load(load, self.cpus)})", "first")
        return None

    def threads_for(self, step: int) -> int:
        if self.probe is not None:
            return self.probe.threads_for(step - self.probe_from)
        return self.current

    def record(self, step: int, threads: int, seconds: float) -> str | None:
        """One step's time (only while probing); returns the decision's sentence when it was made."""
        if self.probe is None:
            return None
        chosen = self.probe.record(step - self.probe_from, threads, seconds)
        if chosen is None:
            return None
        sentence = self.probe.sentence()
        self.current, self.probe, self.choices = chosen, None, self.choices + 1
        self.windows_since_choice, self.steady_s = 0, None
        return f"threads: {sentence}; {chosen} from now on (timed again if the load changes)"

    def window(self, step: int, step_time_s: float, load: float | None) -> str | None:
        """A logging window's mean step time and the load; returns what to say when a new probe opens."""
        if self.probe is not None:
            return None
        self.windows_since_choice += 1
        busy = cpu_busy(load, self.cpus, self.current)
        slow = self.steady_s is not None and step_time_s >= RECHOOSE_SLOWDOWN * self.steady_s
        if self.windows_since_choice > 1 and step_time_s > 0:  # the first window carries the probe's steps
            self.steady_s = step_time_s if self.steady_s is None else min(self.steady_s, step_time_s)
        if self.windows_since_choice < RECHOOSE_AFTER_WINDOWS:
            return None
        if busy != self.busy_at_choice:
            why = f"the load changed ({format_load(load, self.cpus)}, {'busy' if busy else 'quiet'} now)"
        elif slow:
            why = f"the steps slowed down {step_time_s / self.steady_s:.0f}x ({format_load(load, self.cpus)})"
        else:
            return None
        return self._open(step + 1, busy, why, "next")

    def _open(self, step: int, busy: bool, why: str, which: str) -> str:
        others = [n for n in (self.most, 1) if n != self.current]
        self.probe = ThreadProbe(candidates=(self.current, *others))
        self.probe_from, self.busy_at_choice = step, busy
        counts = " and ".join(map(str, self.probe.candidates))
        units = self.probe.units
        return f"{why}: timing the {which} {units} steps at {counts} torch threads to keep the faster"
