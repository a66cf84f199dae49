"""Training curves from a run's ``metrics.jsonl`` (``actlab train`` writes ``training.png`` at the end).

Three panels sharing the step axis: the loss terms with the validation loss (log scale), the learning
rates, and where a step's time went (data wait, forward+backward, optimizer, stacked) with samples/s on
a second axis. Nothing here computes metrics: it draws the rows the trainer logged.

Uses matplotlib's object API with the Agg canvas (no pyplot, no global backend switch).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actlab.errors import ActlabError
from actlab.utils.io import atomic_file

_FORMATS = ("png", "pdf", "svg")
# Logged keys that are not loss terms (everything else numeric ending in "loss" is drawn as one).
_TIME_KEYS = ("time_data_s", "time_fwd_bwd_s", "time_optim_s")
_TIME_LABELS = ("data wait", "forward + backward", "optimizer")


def _series(rows: Sequence[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of the rows that have ``key`` as a finite number."""
    pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    if not pts:
        return np.zeros(0), np.zeros(0)
    steps, values = np.asarray(pts, dtype=np.float64).T
    ok = np.isfinite(values)
    return steps[ok], values[ok]


def loss_keys(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Training loss terms present in the rows: ``loss`` first, then the policy's terms, sorted."""
    keys = {k for r in rows for k, v in r.items() if k.endswith("loss") and k != "val_loss"
            and isinstance(v, (int, float))}  # fmt: skip
    return sorted(keys, key=lambda k: (k != "loss", k))


def plot_training(rows: Sequence[dict[str, Any]], path: str | Path, title: str | None = None) -> Path:
    """Draw the metrics rows (``actlab.training.read_metrics``) to ``path`` (png/pdf/svg, atomically)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in _FORMATS:
        raise ActlabError("unsupported plot format", file=path, expected=", ".join(_FORMATS),
                          found=path.suffix or "no suffix")  # fmt: skip
    if not any("loss" in r for r in rows):
        raise ActlabError(
            "no training rows to plot",
            file=path,
            expected="metrics.jsonl rows with 'loss'",
            found=f"{len(rows)} rows",
            fix="plot a run that has logged at least one step",
        )

    fig = Figure(figsize=(10, 9), layout="constrained")
    FigureCanvasAgg(fig)
    ax_loss, ax_lr, ax_time = fig.subplots(3, 1, sharex=True, height_ratios=(2.2, 1, 1.4))
    _draw_losses(ax_loss, rows)
    _draw_lrs(ax_lr, rows)
    _draw_times(ax_time, rows)
    ax_time.set_xlabel("optimizer step")
    for ax in (ax_loss, ax_lr, ax_time):
        ax.grid(True, alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    with atomic_file(path, "wb") as f:
        fig.savefig(f, format=fmt, dpi=110)
    return path


def _draw_losses(ax: Any, rows: Sequence[dict[str, Any]]) -> None:
    for key in loss_keys(rows):
        steps, values = _series(rows, key)
        # The total under the terms, wide and light: when one term is nearly all of it (ACT's l1_loss,
        # once the KL term has collapsed) the two curves coincide and the total still shows.
        total = key == "loss"
        ax.plot(
            steps,
            values,
            lw=4.0 if total else 1.0,
            alpha=0.45 if total else 1.0,
            label=key,
            zorder=1 if total else 2,
        )
    steps, values = _series(rows, "val_loss")
    if len(steps):
        best = int(np.argmin(values))
        ax.plot(steps, values, "o-", color="black", lw=1.2, ms=4, label="val_loss")
        ax.plot(steps[best], values[best], "*", color="tab:red", ms=12,
                label=f"best val {values[best]:.4g} @ {int(steps[best])}")  # fmt: skip
    positive = all(v > 0 for k in [*loss_keys(rows), "val_loss"] for v in _series(rows, k)[1])
    if positive:
        ax.set_yscale("log")
    ax.set_ylabel("loss (mean over each logging window)")
    _legend_outside(ax)


def _legend_outside(ax: Any, handles: list | None = None, labels: list | None = None) -> None:
    """The panel's legend right of its axes: inside, it covered the curves' ends (where they matter)."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0, fontsize=8)


def _draw_lrs(ax: Any, rows: Sequence[dict[str, Any]]) -> None:
    """One line per learning-rate group; groups with the same schedule share one line and one legend entry
    (drawn separately they lie on top of each other and only the last one shows)."""
    drawn: list[tuple[np.ndarray, np.ndarray, list[str]]] = []
    for key in sorted({k for r in rows for k in r if k.startswith("lr")}):
        steps, values = _series(rows, key)
        same = next((d for d in drawn if np.array_equal(d[0], steps) and np.allclose(d[1], values)), None)
        if same is not None:
            same[2].append(key)
        else:
            drawn.append((steps, values, [key]))
    for (steps, values, keys), style in zip(drawn, ("-", "--", ":", "-.") * 4):
        ax.plot(steps, values, style, lw=1.4, label=" = ".join(keys))
    ax.set_ylabel("learning rate")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    _legend_outside(ax)


def step_time_top(total_ms: np.ndarray, slow_factor: float = 3.0) -> float | None:
    """The step-time axis's top: 1.5x the slowest steady window (those under ``slow_factor`` x the fastest
    quarter's; 3: actlab.training.slowdown's SLOW_FACTOR, which viz cannot import), or None (autoscale)
    when no window is that slow. Why: a few windows slowed down 5-40x by other work on a shared CPU (or
    the warm-up window) scaled the axis to themselves and the steady breakdown became a sliver."""
    if len(total_ms) < 3:
        return None
    fast = float(np.percentile(total_ms, 25))
    steady = total_ms[total_ms < slow_factor * fast]
    if len(steady) == len(total_ms) or not len(steady):
        return None
    return 1.5 * float(steady.max())


def _robust_top(ax: Any, steps: np.ndarray, total_ms: np.ndarray) -> None:
    top = step_time_top(total_ms)
    if top is None:
        return
    ax.set_ylim(0, top)
    over = total_ms > top
    ax.plot(steps[over], np.full(int(over.sum()), top), "v", color="crimson", ms=5, clip_on=False)
    ax.annotate(
        f"{int(over.sum())} window(s) off the scale, up to {total_ms.max():,.0f} ms "
        "(warm-up, or other work on the machine)",
        xy=(0.01, 0.97),
        xycoords="axes fraction",
        va="top",
        fontsize=7,
        color="crimson",
    )


def _draw_times(ax: Any, rows: Sequence[dict[str, Any]]) -> None:
    timed = [r for r in rows if all(isinstance(r.get(k), (int, float)) for k in _TIME_KEYS)]
    if timed:
        steps = np.asarray([r["step"] for r in timed], dtype=np.float64)
        parts = [np.asarray([r[k] for r in timed]) * 1000.0 for k in _TIME_KEYS]
        ax.stackplot(steps, *parts, labels=_TIME_LABELS, alpha=0.8)
        ax.set_ylabel("step time (ms, stacked)")
        _robust_top(ax, steps, sum(parts))
    handles, labels = ax.get_legend_handles_labels()
    steps, sps = _series(rows, "samples_per_s")
    if len(steps):
        ax2 = ax.twinx()
        ax2.plot(steps, sps, color="black", lw=1.2, label="samples/s (right axis)")
        ax2.set_ylabel("samples/s")
        ax2.set_ylim(bottom=0)
        more = ax2.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    # One legend for both axes, outside: the twin axis's tick labels sit right of the panel, so the
    # legend goes further right than the other panels' (the panels stay aligned, constrained layout).
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.09, 1), borderaxespad=0, fontsize=8)
