"""Utilization timeline of a monitored run (``actlab monitor --plot FILE.png``).

Panels share the time axis: GPU utilization per GPU (when GPUs were sampled), the command's CPU use in
cores, and memory (GPU memory used per GPU against its size, the command's resident memory). The warm-up
excluded from the summary is shaded in every panel, and the steady-part median utilization is drawn as a
dashed line, so the picture and the printed numbers can be checked against each other.

Uses matplotlib's object API with the Agg canvas (no pyplot, no global backend switch).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actlab.errors import ActlabError
from actlab.utils.io import atomic_file
from actlab.utils.monitor_format import gpu_count, short_command

_FORMATS = ("png", "pdf", "svg")


def _col(columns: Sequence[str], rows: Sequence[Sequence[Any]], name: str) -> np.ndarray:
    if name not in columns:
        return np.full(len(rows), np.nan)
    i = list(columns).index(name)
    return np.array([np.nan if r[i] is None else float(r[i]) for r in rows], dtype=np.float64)


def check_plot_path(path: str | Path) -> Path:
    """The plot's format comes from its suffix; refuse an unknown one before a long run starts."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in _FORMATS:
        raise ActlabError(
            "unsupported plot format",
            file=path,
            field="--plot",
            expected="a file ending in " + ", ".join(f".{f}" for f in _FORMATS),
            found=path.suffix or "no suffix",
        )
    return path


def _shade_warmup(ax: Any, warmup_s: float, label: bool) -> None:
    if warmup_s > 0:
        ax.axvspan(0, warmup_s, color="0.85", zorder=0, label="warm-up (excluded)" if label else None)


def plot_monitor(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    path: str | Path,
    summary: dict[str, Any] | None = None,
) -> Path:
    """Write the timeline to ``path`` (png/pdf/svg, atomically); ``summary`` from ``summarize`` adds the
    warm-up shading, the steady medians and a title with the command and its exit code."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = check_plot_path(path)
    summary = summary or {}
    t = _col(columns, rows, "elapsed_s")
    warmup_s = float((summary.get("warmup") or {}).get("seconds") or 0.0)
    gpus = summary.get("gpus") or []
    n_gpu = gpu_count(columns)

    n_panels = 3 if n_gpu else 2
    fig = Figure(figsize=(11, 2.6 * n_panels + 0.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(n_panels, 1, sharex=True)
    ax_gpu = axes[0] if n_gpu else None
    ax_cpu, ax_mem = axes[-2], axes[-1]

    if ax_gpu is not None:
        for i in range(n_gpu):
            name = gpus[i].get("name") if i < len(gpus) else None
            line = ax_gpu.plot(
                t,
                _col(columns, rows, f"gpu{i}_util_pct"),
                lw=1.4,
                label=f"gpu{i}" + (f" {name}" if name else ""),
            )[0]
            s = gpus[i].get("util_pct") if i < len(gpus) else None
            if s:
                ax_gpu.axhline(
                    s["median"],
                    color=line.get_color(),
                    ls="--",
                    lw=1,
                    label=f"gpu{i} steady median {s['median']:.0f}%",
                )
        _shade_warmup(ax_gpu, warmup_s, label=True)
        ax_gpu.set_ylim(-2, 105)
        ax_gpu.set_ylabel("GPU utilization (%)\n(time a kernel ran)")
        ax_gpu.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)

    cores = _col(columns, rows, "proc_cpu_pct") / 100.0
    ax_cpu.plot(t, cores, color="tab:orange", lw=1.4, label="command + descendants")
    cpu_s = (summary.get("process") or {}).get("cpu_pct")
    if cpu_s:
        ax_cpu.axhline(
            cpu_s["median"] / 100.0,
            color="tab:orange",
            ls="--",
            lw=1,
            label=f"steady median {cpu_s['median'] / 100.0:.2f} cores",
        )
    _shade_warmup(ax_cpu, warmup_s, label=ax_gpu is None)
    ax_cpu.set_ylim(bottom=0)
    ax_cpu.set_ylabel("CPU (cores busy)")
    ax_cpu.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)

    mem_cols = [f"gpu{i}_mem_{k}_mib" for i in range(n_gpu) for k in ("used", "total")] + ["proc_rss_mib"]
    mem_values = [v for c in mem_cols if np.isfinite(v := _col(columns, rows, c)).any()]
    biggest = max((float(np.nanmax(v)) for v in mem_values), default=0.0)
    unit, scale = ("GiB", 1024.0) if biggest >= 2048 else ("MiB", 1.0)  # small runs stay readable in MiB
    for i in range(n_gpu):
        used = _col(columns, rows, f"gpu{i}_mem_used_mib") / scale
        line = ax_mem.plot(t, used, lw=1.4, label=f"gpu{i} memory used")[0]
        total = _col(columns, rows, f"gpu{i}_mem_total_mib")
        if np.isfinite(total).any():
            ax_mem.axhline(
                np.nanmax(total) / scale, color=line.get_color(), ls=":", lw=1, label=f"gpu{i} memory size"
            )
    ax_mem.plot(
        t, _col(columns, rows, "proc_rss_mib") / scale, color="tab:green", lw=1.4, label="command RSS (host)"
    )
    _shade_warmup(ax_mem, warmup_s, label=False)
    ax_mem.set_ylim(bottom=0)
    ax_mem.set_ylabel(f"memory ({unit})")
    ax_mem.set_xlabel("time since start (s)")
    ax_mem.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)

    for ax in axes:
        ax.grid(True, alpha=0.3)
        if len(t):
            ax.set_xlim(0, max(float(np.nanmax(t)), 1e-3))
    fig.suptitle(_title(summary), fontsize=10)

    with atomic_file(path, "wb") as f:
        fig.savefig(f, format=path.suffix.lower().lstrip("."), dpi=110)
    return path


def _title(summary: dict[str, Any]) -> str:
    first = short_command(summary.get("command"), limit=110)
    parts = []
    if summary.get("exit_code") is not None:
        parts.append(f"exit {summary['exit_code']}")
    if summary.get("duration_s") is not None:
        parts.append(f"{summary['duration_s']:.1f} s")
    if not summary.get("gpus") and summary.get("gpu_reason"):
        parts.append(f"no GPU found (NVML: {summary['gpu_reason']})")
    return first + ("\n" + "  |  ".join(parts) if parts else "")
