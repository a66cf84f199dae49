"""Summaries of a monitored run: warm-up detection and statistics over the steady part.

Pure functions over ``(columns, rows)`` as produced by :func:`actlab.profiling.monitor.run_monitored` or
read back by :func:`actlab.profiling.monitor.read_monitor_csv`, so a CSV can be summarised again later.

Warm-up rule (``warmup="auto"``): the signal is the busiest GPU's utilization per sample (the process
tree's CPU % when no GPU was sampled). Its reference level is the median over the second half of the run
(robust to a slow start); the warm-up ends at the first sample whose signal reaches half of that level,
and never later than half the run. Runs with fewer than :data:`MIN_SAMPLES_FOR_WARMUP` samples, or a
signal that stays at 0, exclude nothing. The summary always states which rule applied and what it cut.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

import numpy as np

from actlab.errors import ActlabError
from actlab.profiling.nvml import GPU_FIELDS
from actlab.utils.monitor_format import gpu_count, short_command
from actlab.utils.table import fmt, table

WARMUP_FRACTION = 0.5  # the steady part starts when the signal reaches this fraction of its later median
MIN_SAMPLES_FOR_WARMUP = 6  # fewer samples: too little to tell a warm-up from noise; exclude nothing


def _values(columns: Sequence[str], rows: Sequence[Sequence[Any]], name: str) -> np.ndarray:
    """A column as float64 with NaN for empty cells; all-NaN when the column is absent."""
    if name not in columns:
        return np.full(len(rows), np.nan)
    i = list(columns).index(name)
    return np.array([np.nan if r[i] is None else float(r[i]) for r in rows], dtype=np.float64)


def stats(values: np.ndarray) -> dict[str, float] | None:
    """mean / median / p10 / p90 over the finite values, or None when there are none."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return None
    p10, p50, p90 = np.percentile(v, [10, 50, 90])
    return {"mean": float(v.mean()), "median": float(p50), "p10": float(p10), "p90": float(p90)}


def _peak(values: np.ndarray) -> float | None:
    v = values[np.isfinite(values)]
    return float(v.max()) if v.size else None


def _mean(values: np.ndarray) -> float | None:
    v = values[np.isfinite(values)]
    return float(v.mean()) if v.size else None


def warmup_signal(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> tuple[np.ndarray, str]:
    """(per-sample signal, its name): the busiest GPU's utilization, else the process tree's CPU %."""
    n_gpu = gpu_count(columns)
    if n_gpu:
        util = np.stack([_values(columns, rows, f"gpu{i}_util_pct") for i in range(n_gpu)])  # (G, N)
        if np.isfinite(util).any():
            busiest = np.where(np.isfinite(util), util, -np.inf).max(axis=0)  # (N,)
            busiest[~np.isfinite(busiest)] = np.nan  # no GPU answered at that sample
            return busiest, "GPU utilization" if n_gpu == 1 else "the busiest GPU's utilization"
    return _values(columns, rows, "proc_cpu_pct"), "the command's CPU %"


def detect_warmup(elapsed: np.ndarray, signal: np.ndarray, signal_name: str) -> dict[str, Any]:
    """Index of the first steady sample and the rule that chose it (see the module docstring)."""
    n = len(elapsed)
    none = {"mode": "auto", "first_steady": 0, "seconds": 0.0, "samples": 0}
    if n < MIN_SAMPLES_FOR_WARMUP:
        return none | {
            "rule": f"auto: too few samples ({n} < {MIN_SAMPLES_FOR_WARMUP}) to detect a warm-up; "
            "nothing excluded"
        }
    half_t = elapsed[-1] / 2
    later = signal[(elapsed >= half_t) & np.isfinite(signal)]
    if later.size == 0:
        return none | {"rule": f"auto: no {signal_name} readings in the second half; nothing excluded"}
    ref = float(np.median(later))
    if ref <= 0:
        return none | {"rule": f"auto: {signal_name} stayed at 0 in the second half; nothing excluded"}
    threshold = WARMUP_FRACTION * ref
    reached = np.nonzero(np.isfinite(signal) & (signal >= threshold))[0]
    k = int(reached[0]) if reached.size else n
    cap = int(np.searchsorted(elapsed, half_t))
    capped = k > cap
    k = min(k, cap)
    seconds = float(elapsed[k]) if k < n else float(elapsed[-1])
    rule = (
        f"auto: excluded the first {seconds:.2f} s ({_plural(k, 'sample')}), before {signal_name} first "
        f"reached {WARMUP_FRACTION:.0%} of its median over the second half of the run ({fmt(ref)} %)"
    )
    if capped:
        rule += "; capped at half the run"
    return {"mode": "auto", "first_steady": k, "seconds": seconds, "samples": k, "rule": rule}


def fixed_warmup(elapsed: np.ndarray, seconds: float) -> dict[str, Any]:
    """Exclude the samples taken in the first ``seconds`` (``--warmup SECONDS``)."""
    k = int(np.searchsorted(elapsed, seconds, side="left"))
    rule = f"fixed: excluded the first {seconds:g} s as asked ({_plural(k, 'sample')})"
    return {"mode": "fixed", "first_steady": k, "seconds": float(seconds), "samples": k, "rule": rule}


def parse_warmup(text: str | float) -> str | float:
    """``auto`` or a number of seconds >= 0; an ActlabError otherwise."""
    if isinstance(text, str) and text.strip().lower() == "auto":
        return "auto"
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = float("nan")
    if not np.isfinite(value) or value < 0:
        raise ActlabError(
            "bad warm-up setting", field="--warmup", expected="auto or a number of seconds >= 0", found=text
        )
    return value


def summarize(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    warmup: str | float = "auto",
    command: Sequence[str] | None = None,
    exit_code: int | None = None,
    signal_name: str | None = None,
    duration_s: float | None = None,
    interval_s: float | None = None,
    gpu_names: Sequence[str] = (),
    gpu_reason: str | None = None,
) -> dict[str, Any]:
    """A JSON-ready summary: warm-up, steady-part utilization statistics, peaks and duration."""
    elapsed = _values(columns, rows, "elapsed_s")
    if warmup == "auto":
        signal, signal_name_ = warmup_signal(columns, rows)
        wu = detect_warmup(elapsed, signal, signal_name_)
    else:
        wu = fixed_warmup(elapsed, float(warmup))
    k = wu.pop("first_steady")
    steady = slice(k, None)
    notes = []
    if k >= len(rows) and len(rows) > 0:
        notes.append("the whole run fell inside the warm-up: statistics below cover every sample instead")
        steady = slice(0, None)
    if duration_s is None:
        duration_s = float(elapsed[-1]) if len(rows) else 0.0
    steady_el = elapsed[steady]
    gpus = []
    for i in range(gpu_count(columns)):
        col = {f: _values(columns, rows, f"gpu{i}_{f}") for f in GPU_FIELDS}
        peak = _peak(col["mem_used_mib"])
        total = _peak(col["mem_total_mib"])
        gpus.append(
            {
                "index": i,
                "name": gpu_names[i] if i < len(gpu_names) else None,
                "util_pct": stats(col["util_pct"][steady]),
                "mem_util_pct": stats(col["mem_util_pct"][steady]),
                "peak_mem_used_mib": peak,
                "mem_total_mib": total,
                "peak_mem_pct": (100.0 * peak / total) if peak is not None and total else None,
                "mean_sm_clock_mhz": _mean(col["sm_clock_mhz"][steady]),
                "mean_power_w": _mean(col["power_w"][steady]),
                "max_temp_c": _peak(col["temp_c"]),
            }
        )
    if gpus:
        notes.append("NVML utilization is the share of time any kernel ran, not how full the SMs were")
    return {
        "command": shlex.join(command) if command else None,
        "exit_code": exit_code,
        "signal": signal_name,
        "duration_s": duration_s,
        "samples": len(rows),
        "interval_s": interval_s,
        "warmup": wu,
        "steady": {
            "samples": len(steady_el),
            "seconds": float(steady_el[-1] - steady_el[0]) if len(steady_el) > 1 else 0.0,
        },
        "gpus": gpus,
        "gpu_reason": None if gpus else (gpu_reason or "no GPU columns in the samples"),
        "process": {
            "cpu_pct": stats(_values(columns, rows, "proc_cpu_pct")[steady]),
            "peak_rss_mib": _peak(_values(columns, rows, "proc_rss_mib")),
            "max_procs": _peak(_values(columns, rows, "proc_count")),
        },
        "host": {
            "cpu_pct": stats(_values(columns, rows, "host_cpu_pct")[steady]),
            "peak_mem_used_mib": _peak(_values(columns, rows, "host_mem_used_mib")),
        },
        "notes": notes,
    }


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _stat_row(label: str, s: dict[str, float] | None) -> list[object]:
    if s is None:
        return [label, "-", "-", "-", "-"]
    return [label, *(round(s[k], 1) for k in ("mean", "median", "p10", "p90"))]


def _mib(v: float | None) -> str:
    return "?" if v is None else f"{v:,.0f} MiB"


def render_summary(s: dict[str, Any]) -> str:
    """The human-readable summary printed at the end of ``actlab monitor``."""
    lines = []
    how = f"exited with code {s['exit_code']}" if s.get("exit_code") is not None else "ran"
    if s.get("signal"):
        how += f" (killed by {s['signal']})"
    every = f", every {s['interval_s']:g} s" if s.get("interval_s") else ""
    cmd = f"`{short_command(s['command'])}`" if s.get("command") else "the command"
    n = _plural(s["samples"], "sample")
    lines.append(f"actlab monitor: {cmd} {how} after {s['duration_s']:.2f} s ({n}{every})")
    if not s["gpus"]:
        lines.append(f"GPU: no GPU found (NVML: {s['gpu_reason']}); recorded CPU and RAM only")
    lines.append(f"warm-up: {s['warmup']['rule']}")
    lines.append(f"steady part: {s['steady']['seconds']:.2f} s ({_plural(s['steady']['samples'], 'sample')})")
    rows = []
    for g in s["gpus"]:
        rows.append(_stat_row(f"gpu{g['index']} utilization %", g["util_pct"]))
        rows.append(_stat_row(f"gpu{g['index']} memory-bus utilization %", g["mem_util_pct"]))
    rows.append(_stat_row("command CPU % (100 = 1 core)", s["process"]["cpu_pct"]))
    rows.append(_stat_row("host CPU % (all cores)", s["host"]["cpu_pct"]))
    lines += ["", table(rows, ["steady part", "mean", "median", "p10", "p90"]), ""]
    peaks = []
    for g in s["gpus"]:
        pct = f" ({g['peak_mem_pct']:.1f}%)" if g["peak_mem_pct"] is not None else ""
        peaks.append(f"gpu{g['index']} {_mib(g['peak_mem_used_mib'])} of {_mib(g['mem_total_mib'])}{pct}")
    peaks.append(f"command RSS {_mib(s['process']['peak_rss_mib'])}")
    lines.append("peak memory: " + "; ".join(peaks))
    for g in s["gpus"]:
        parts = [g["name"] or f"gpu{g['index']}"]
        if g["mean_sm_clock_mhz"] is not None:
            parts.append(f"mean SM clock {g['mean_sm_clock_mhz']:,.0f} MHz")
        if g["mean_power_w"] is not None:
            parts.append(f"mean power {g['mean_power_w']:,.0f} W")
        if g["max_temp_c"] is not None:
            parts.append(f"max temperature {g['max_temp_c']:.0f} C")
        lines.append(f"gpu{g['index']}: " + ", ".join(parts))
    lines += [f"note: {n}" for n in s["notes"]]
    return "\n".join(lines)
