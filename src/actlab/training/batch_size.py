"""Batch-size search: double until a step no longer fits, then bisect to the boundary.

The search is a pure function of a probe ``probe(batch_size) -> Probe`` (tested alone on synthetic
probes); the real probes that run training steps live in :mod:`actlab.training.batch_probe`.

"Fits" means the step ran and its measured peak memory stayed within the budget
``limit * (1 - margin)``: the safety margin is applied during the search, so the recommended batch size
is the largest one that was seen to fit with the margin, not a guess scaled down from the limit.
Memory is assumed to grow with the batch size (true for a training step); the trials table shows every
measurement so a violation would be visible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from actlab.errors import ActlabError
from actlab.utils.table import table


@dataclass(frozen=True)
class Probe:
    """What one trial of a batch size measured."""

    batch_size: int  # the batch size tried
    ok: bool  # the step(s) ran to the end (False: out of memory, or stopped for exceeding the limit)
    memory_bytes: int | None  # peak memory measured (GPU: allocator reserved; CPU: process RSS)
    detail: str = ""  # why it failed, or what was measured, in words
    seconds: float | None = None  # wall time of the measured step(s), for a rough samples/s
    # memory held once the run was built, before the first step (runtime, model, optimizer, data); None:
    # not measured (the trial stopped during the build)
    before_step_bytes: int | None = None
    # of which decoded frames copied into RAM / onto the device (data.frames_on_device); None: unknown
    frames_bytes: int | None = None


@dataclass(frozen=True)
class Trial:
    """A probe plus the search's verdict on it."""

    probe: Probe
    fits: bool  # ran and stayed within the budget


@dataclass
class SearchResult:
    """Every trial in the order tried, and the answer."""

    limit_bytes: int  # the memory the step may use (device total, or --memory-limit)
    margin: float  # safety margin, fraction of the limit kept free
    tolerance: float = 0.0  # bisection stopped once the gap was at most this fraction of the last fit
    trials: list[Trial] = field(default_factory=list)
    recommended: int | None = None  # largest batch size that fit within the budget
    first_fail: int | None = None  # smallest batch size that did not fit (None: never failed)
    reached_max: bool = False  # stopped at max_batch while still fitting
    notes: list[str] = field(default_factory=list)  # what the measurement left out or assumed, in words

    @property
    def budget_bytes(self) -> int:
        return int(self.limit_bytes * (1.0 - self.margin))

    def as_dict(self) -> dict[str, Any]:
        return {
            "limit_bytes": self.limit_bytes,
            "budget_bytes": self.budget_bytes,
            "margin": self.margin,
            "tolerance": self.tolerance,
            "recommended": self.recommended,
            "first_fail": self.first_fail,
            "reached_max": self.reached_max,
            "notes": list(self.notes),
            "trials": [
                {
                    "batch_size": t.probe.batch_size,
                    "memory_bytes": t.probe.memory_bytes,
                    "ran": t.probe.ok,
                    "fits": t.fits,
                    "seconds": t.probe.seconds,
                    "detail": t.probe.detail,
                    "before_step_bytes": t.probe.before_step_bytes,
                    "frames_bytes": t.probe.frames_bytes,
                }
                for t in self.trials
            ],
        }


def check_search_settings(
    *, margin: float, start: int, max_batch: int | None, multiple_of: int, tolerance: float
) -> None:
    """Validate the search settings (before any costly trial); an ActlabError names the bad flag."""
    if not 0.0 <= margin < 1.0:
        raise ActlabError("bad safety margin", field="--margin", expected="0 <= margin < 1", found=margin)
    if multiple_of < 1:
        raise ActlabError(
            "bad --multiple-of", field="--multiple-of", expected="an integer >= 1", found=multiple_of
        )
    if not 0.0 <= tolerance < 1.0:
        raise ActlabError(
            "bad tolerance", field="--tolerance", expected="0 <= tolerance < 1", found=tolerance
        )
    if start < 1:
        raise ActlabError("bad start batch size", field="--start", expected="an integer >= 1", found=start)
    if max_batch is not None and max_batch < start:
        raise ActlabError("--max is below --start", field="--max", expected=f">= {start}", found=max_batch)
    first = -(-start // multiple_of) * multiple_of
    if max_batch is not None and first > max_batch:
        raise ActlabError(
            "no multiple of --multiple-of lies between --start and --max",
            field="--max",
            expected=f">= {first}",
            found=max_batch,
        )


def search_batch_size(
    probe: Callable[[int], Probe],
    *,
    limit_bytes: int,
    margin: float = 0.1,
    start: int = 1,
    max_batch: int | None = None,
    multiple_of: int = 1,
    tolerance: float = 0.0,
) -> SearchResult:
    """Find the largest batch size whose step fits in ``limit_bytes * (1 - margin)``.

    Doubling from ``start`` (rounded up to ``multiple_of``) until a trial does not fit or ``max_batch``
    is reached, then bisection between the last fit and the first failure, in steps of ``multiple_of``,
    until they are adjacent or (``tolerance`` > 0) the gap is at most ``tolerance`` x the last fit:
    measured peaks vary by a few percent from run to run, so bisecting below that buys nothing.
    Each batch size is probed at most once.
    """
    check_search_settings(
        margin=margin, start=start, max_batch=max_batch, multiple_of=multiple_of, tolerance=tolerance
    )
    result = SearchResult(limit_bytes=limit_bytes, margin=margin, tolerance=tolerance)
    budget = result.budget_bytes

    def fits(units: int) -> bool:
        p = probe(units * multiple_of)
        ok = p.ok and p.memory_bytes is not None and p.memory_bytes <= budget
        result.trials.append(Trial(p, ok))
        return ok

    lo, hi = 0, None  # in units of multiple_of: largest known fit, smallest known failure
    top = None if max_batch is None else max_batch // multiple_of
    k = -(-start // multiple_of)  # ceil
    while True:
        if not fits(k):
            hi = k
            break
        lo = k
        if top is not None and k >= top:
            result.reached_max = True
            break
        k = 2 * k if top is None else min(2 * k, top)
    if hi is not None and lo > 0:
        while hi - lo > 1 and hi - lo > tolerance * lo:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
    result.recommended = lo * multiple_of if lo > 0 else None
    result.first_fail = hi * multiple_of if hi is not None else None
    return result


def render_search(result: SearchResult, what: str) -> str:
    """A table of every trial plus the recommendation, in words."""
    mib = 1024 * 1024
    rows = []
    for t in sorted(result.trials, key=lambda t: t.probe.batch_size):
        p = t.probe
        mem = "-" if p.memory_bytes is None else f"{p.memory_bytes / mib:,.0f}"
        pct = "-" if p.memory_bytes is None else f"{100 * p.memory_bytes / result.limit_bytes:.1f}%"
        verdict = "fits" if t.fits else ("over budget" if p.ok else "failed")
        rows.append([p.batch_size, mem, pct, verdict, p.detail])
    lines = [
        f"memory limit: {result.limit_bytes / mib:,.0f} MiB ({what}); budget with a {result.margin:.0%} "
        f"safety margin: {result.budget_bytes / mib:,.0f} MiB",
        "",
        table(rows, ["batch size", f"peak {what} (MiB)", "of limit", "verdict", "detail"]),
        "",
    ]
    if result.recommended is None:
        lines += nothing_fits(result, what)
    else:
        extra = " (stopped at --max)" if result.reached_max else f"; {result.first_fail} does not fit"
        if result.first_fail is not None and result.first_fail - result.recommended > 1 and result.tolerance:
            extra += f" (bisection stopped within {result.tolerance:.0%})"
        lines.append(f"recommended batch size: {result.recommended}{extra}")
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)


def nothing_fits(result: SearchResult, what: str) -> list[str]:
    """Why not even the smallest batch fits: what used the budget (frame copy, the built run, the steps),
    and the fix for the largest part."""
    mib = 1024 * 1024
    p = min((t.probe for t in result.trials), key=lambda p: p.batch_size)
    peak = "an unknown amount" if p.memory_bytes is None else f"{p.memory_bytes / mib:,.0f} MiB"
    lines = [
        f"no batch size fits: even batch {p.batch_size} used {peak} of {what}, over the budget of "
        f"{result.budget_bytes / mib:,.0f} MiB"
    ]
    frames = p.frames_bytes or 0
    parts = []
    if frames:
        parts.append(
            f"{frames / mib:,.0f} MiB the decoded frame cache copied into memory (data.frames_on_device)"
        )
    if p.before_step_bytes is not None:
        rest = max(0, p.before_step_bytes - frames)
        parts.append(
            f"{rest / mib:,.0f} MiB the built run before its first step (runtime, model, optimizer, data)"
        )
        if p.memory_bytes is not None:
            parts.append(f"{max(0, p.memory_bytes - p.before_step_bytes) / mib:,.0f} MiB the training steps")
    elif p.memory_bytes is not None:
        parts.append("the trial was stopped before its first step: the build alone passed the limit")
    if parts:
        lines.append("what used it: " + "; ".join(parts))
    if frames and frames >= 0.25 * result.budget_bytes:
        fix = "--set data.frames_on_device=false (the step then reads frames from the memory-mapped cache)"
    else:
        fix = "a smaller model or image size (--set policy.* / data.image_size)"
    lines.append(f"fix: {fix}, or a larger --memory-limit")
    return lines
