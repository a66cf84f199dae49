"""Notice a training run slowed down by a shared CPU, and say once what to do about it.

On a CPU that other jobs share, torch's OpenMP threads spin waiting for each other while one of them is
descheduled: the CPU demo's batch-32 step went from ~80 ms to 1.7-2.5 s beside a test suite, and back to
~0.4 s with ``OMP_WAIT_POLICY=PASSIVE`` in the environment or one torch thread (measured on the 2-core
development machine). Nothing else tells the user: the progress bar only gets slower.

:class:`SlowdownWatch` is fed one logging row at a time (mean step time of the window, 1-minute load
average) and returns a message the first time either

- a window's step time is ``SLOW_FACTOR`` x or more the run's own steady state (the fastest window after
  the first, which carries warm-up), or
- the load average says other work wants more CPUs than the machine has (load beyond this run's own
  threads above the CPU count),

and never again. Pure (no clock, no /proc): tested alone; the loop supplies the measurements.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from actlab.utils.threads import cpu_busy

# A window this many times slower than the run's fastest is not noise (windows of one run differ by
# 10-30 % on a quiet machine; the shared-CPU slowdowns seen were 5-40x).
SLOW_FACTOR = 3.0
# Windows before the step time is judged: the first carries warm-up (allocator, first-touch of the frame
# cache, compile), so the steady state is the fastest of the later ones.
WARMUP_WINDOWS = 1


def cure_applied(environ: dict[str, str] | None = None, num_threads: int | None = None) -> bool:
    """True when the run already uses what the message would advise (PASSIVE waits or one thread)."""
    env = os.environ if environ is None else environ
    return env.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE" or num_threads == 1


def advice() -> str:
    """What to do, in words (the same sentence in the message and the docs)."""
    return (
        "torch's threads spin waiting for each other when other jobs share the CPUs, and this run's thread "
        "count is fixed: restart with --set num_threads=0 (the run then times its steps at each count "
        "whenever the load changes and keeps the faster), --set num_threads=1 or OMP_WAIT_POLICY=PASSIVE in "
        "the environment; the run resumes from its last checkpoint"
    )


@dataclass
class SlowdownWatch:
    """Says once that the run is slowed down by CPU contention (see the module docstring)."""

    cpus: int  # CPUs this process may run on
    threads: int  # torch threads of this run (its own share of the load average)
    steady_s: float | None = None  # fastest window's mean step time after warm-up
    windows: int = 0  # windows seen so far
    said: bool = False  # the message was given (it is given at most once)
    history: list[float] = field(default_factory=list)  # every window's mean step time, in order

    def update(self, step: int, step_time_s: float, load_1m: float | None) -> str | None:
        """Feed one window; returns the message the first time a slowdown or contention shows."""
        self.windows += 1
        self.history.append(step_time_s)
        msg = None
        if not self.said:
            msg = self._slow(step, step_time_s, load_1m) or self._busy(step, load_1m)
            self.said = msg is not None
        if self.windows > WARMUP_WINDOWS and step_time_s > 0:
            self.steady_s = step_time_s if self.steady_s is None else min(self.steady_s, step_time_s)
        return msg

    def _load_words(self, load_1m: float | None) -> str:
        if load_1m is None:
            return ""
        return f"; load average {load_1m:.1f} on {self.cpus} CPU{'s' if self.cpus != 1 else ''}"

    def _slow(self, step: int, t: float, load_1m: float | None) -> str | None:
        if self.steady_s is None or t < SLOW_FACTOR * self.steady_s:
            return None
        return (
            f"training slowed down at step {step}: {_ms(t)} a step, {t / self.steady_s:.0f}x this run's "
            f"steady {_ms(self.steady_s)}{self._load_words(load_1m)}. {advice()}"
        )

    def _busy(self, step: int, load_1m: float | None) -> str | None:
        if not cpu_busy(load_1m, self.cpus, self.threads):
            return None
        return (
            f"the CPUs are busy with other work at step {step}{self._load_words(load_1m)}, of which this "
            f"run's {self.threads} thread{'s' if self.threads != 1 else ''}: steps may be several times "
            f"slower than on a quiet machine. {advice()}"
        )


def _ms(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"
