"""Evaluation figures: success rate against training step for a checkpoint sweep, failure breakdown.

Plots only: the numbers come from actlab.evaluation (``CheckpointEval`` or its ``to_dict()`` form).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from actlab.utils.io import atomic_file

# One colour per failure class, stable across figures.
FAILURE_COLORS = {
    "never_picked_up": "#9e9e9e",
    "dropped_during_transport": "#e4572e",
    "missed_goal": "#f3a712",
    "timeout": "#29335c",
}


# Colours for a sim task's own failure classes (so101_push's missed_zone, ...), in the order first met.
TASK_FAILURE_COLORS = ("#7b2cbf", "#2a9d8f", "#8d6e63", "#e76f51", "#457b9d", "#b5838d")


def _failure_colors(evals: Sequence[Mapping]) -> dict[str, str]:
    """The generic failure classes' colours, then one for each class of a task's own that occurred."""
    colors = dict(FAILURE_COLORS)
    for v in evals:
        for name, n in v["outcomes"].items():
            if name != "success" and n and name not in colors:
                colors[name] = TASK_FAILURE_COLORS[
                    (len(colors) - len(FAILURE_COLORS)) % len(TASK_FAILURE_COLORS)
                ]
    return colors


def _as_dict(ev: Any) -> Mapping:
    return ev.to_dict() if hasattr(ev, "to_dict") else ev


def figure():
    """matplotlib's pyplot on the headless Agg backend (matplotlib is imported only when a plot is drawn)."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on training machines
    import matplotlib.pyplot as plt

    return plt


# The sweep, and the chosen checkpoint again on other seeds.
SWEEP_COLOR = "#1b998b"
CONFIRM_COLOR = "#c2185b"


def plot_success_vs_step(
    evals: Sequence[Any], path: str | Path, title: str | None = None, confirm: Any = None
) -> Path:
    """PNG of success rate (with Wilson 95% error bars) and the failure-class stack against training step.

    ``evals``: CheckpointEval objects or their dicts; checkpoints without a step are placed by order.
    ``confirm``: the chosen checkpoint evaluated again on other (fresh) seeds, a CheckpointEval or its
    dict: drawn as a point of its own beside that checkpoint, with its interval and its number, so the
    figure shows both the rate the checkpoint was chosen on and the unbiased one.
    """
    plt = figure()
    rows = [_as_dict(e) for e in evals]
    steps = [r["step"] if r["step"] is not None else i for i, r in enumerate(rows)]
    order = sorted(range(len(rows)), key=lambda i: steps[i])
    rows = [rows[i] for i in order]
    x = [steps[i] for i in order]
    s = [r["summary"] for r in rows]
    rate = [100 * v["success_rate"] for v in s]
    low = [100 * (v["success_rate"] - v["ci_low"]) for v in s]
    high = [100 * (v["ci_high"] - v["success_rate"]) for v in s]
    n = s[0]["episodes"] if s else 0

    fig, (ax, bx) = plt.subplots(
        2, 1, figsize=(9, 6.5), sharex=True, height_ratios=(3, 2), layout="constrained"
    )
    ax.errorbar(x, rate, yerr=[low, high], fmt="o-", color=SWEEP_COLOR, capsize=4, lw=2,
                label=f"every checkpoint, the same {n} seeds")  # fmt: skip
    best = max(range(len(rate)), key=lambda i: (rate[i], x[i])) if rate else None
    if best is not None:
        ax.annotate(f"chosen: {rate[best]:.0f}%", (x[best], rate[best]), textcoords="offset points",
                    xytext=(-8, 10), ha="right", color=SWEEP_COLOR)  # fmt: skip
    # Bars 0.6 of the checkpoint spacing wide (one checkpoint: a tenth of its step).
    width = (min(b - a for a, b in itertools.pairwise(x)) * 0.6) if len(x) > 1 else max(0.6, 0.1 * abs(x[0]))
    if confirm is not None:
        _draw_confirm(ax, _as_dict(confirm), x, rows, width)
        ax.margins(x=0.12)  # room for its label right of the last checkpoint
    ax.set_ylim(-5, 115)
    ax.set_ylabel("success rate (%)  [Wilson 95% CI]")
    ax.set_title(title or f"success per checkpoint ({n} episodes each, same seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)

    bottom = [0.0] * len(rows)
    for name, color in _failure_colors(s).items():
        frac = [100 * v["outcomes"].get(name, 0) / max(1, v["episodes"]) for v in s]
        bx.bar(x, frac, bottom=bottom, width=width, color=color, label=name.replace("_", " "))
        bottom = [b + f for b, f in zip(bottom, frac)]
    bx.set_ylabel("failures (% of episodes)")
    bx.set_xlabel("training step")
    bx.ticklabel_format(axis="x", style="plain", useOffset=False)
    bx.xaxis.get_major_locator().set_params(integer=True)  # steps: no 9.8, 10.2 ticks
    bx.set_ylim(0, 100)
    # Outside the axes: a legend inside would cover the bars of the last checkpoints.
    bx.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0, title="failure class",
              title_fontsize=8)  # fmt: skip
    bx.grid(alpha=0.3)
    path = Path(path)
    with atomic_file(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)
    return path


def _draw_confirm(ax: Any, c: Mapping, x: list, rows: list, width: float) -> None:
    """The confirmation point: at its checkpoint's step, moved right by half a bar so the two intervals
    do not overlap, in a colour and marker of its own, with its rate written beside it."""
    v = c["summary"]
    step = c.get("step")
    if step is None:  # place it at the sweep row of the same name, if any
        step = next((x[i] for i, r in enumerate(rows) if r.get("name") == c.get("name")), x[-1] if x else 0)
    at = step + width / 2
    r = 100 * v["success_rate"]
    yerr = [[r - 100 * v["ci_low"]], [100 * v["ci_high"] - r]]
    label = f"chosen checkpoint on {v['episodes']} fresh seeds: {r:.0f}% ({v['successes']}/{v['episodes']})"
    ax.errorbar([at], [r], yerr=yerr, fmt="D", color=CONFIRM_COLOR, ms=7, capsize=4, lw=2, label=label)
    dy = -14 if r >= 50 else 6  # the label below a high point, above a low one: inside the axes either way
    ax.annotate(f"fresh seeds: {r:.0f}%", (at, r), textcoords="offset points", xytext=(8, dy), ha="left",
                color=CONFIRM_COLOR)  # fmt: skip
