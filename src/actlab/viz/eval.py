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


def _as_dict(ev: Any) -> Mapping:
    return ev.to_dict() if hasattr(ev, "to_dict") else ev


def _figure():
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on training machines
    import matplotlib.pyplot as plt

    return plt


def plot_success_vs_step(evals: Sequence[Any], path: str | Path, title: str | None = None) -> Path:
    """PNG of success rate (with Wilson 95% error bars) and the failure-class stack against training step.

    ``evals``: CheckpointEval objects or their dicts; checkpoints without a step are placed by order.
    """
    plt = _figure()
    rows = [_as_dict(e) for e in evals]
    steps = [r["step"] if r["step"] is not None else i for i, r in enumerate(rows)]
    order = sorted(range(len(rows)), key=lambda i: steps[i])
    rows = [rows[i] for i in order]
    x = [steps[i] for i in order]
    s = [r["summary"] for r in rows]
    rate = [100 * v["success_rate"] for v in s]
    low = [100 * (v["success_rate"] - v["ci_low"]) for v in s]
    high = [100 * (v["ci_high"] - v["success_rate"]) for v in s]

    fig, (ax, bx) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, height_ratios=(3, 2))
    ax.errorbar(x, rate, yerr=[low, high], fmt="o-", color="#1b998b", capsize=4, lw=2, label="success")
    best = max(range(len(rate)), key=lambda i: (rate[i], x[i])) if rate else None
    if best is not None:
        label = f"best {rate[best]:.0f}%"
        ax.annotate(label, (x[best], rate[best]), textcoords="offset points", xytext=(0, 10), ha="center")
    ax.set_ylim(-5, 110)
    ax.set_ylabel("success rate (%)  [Wilson 95% CI]")
    n = s[0]["episodes"] if s else 0
    ax.set_title(title or f"success per checkpoint ({n} episodes each, same seeds)")
    ax.grid(alpha=0.3)

    bottom = [0.0] * len(rows)
    width = (min(b - a for a, b in itertools.pairwise(x)) * 0.6) if len(x) > 1 else 0.6
    for name, color in FAILURE_COLORS.items():
        frac = [100 * v["outcomes"].get(name, 0) / max(1, v["episodes"]) for v in s]
        bx.bar(x, frac, bottom=bottom, width=width, color=color, label=name)
        bottom = [b + f for b, f in zip(bottom, frac)]
    bx.set_ylabel("failures (% of episodes)")
    bx.set_xlabel("training step")
    bx.set_ylim(0, 100)
    bx.legend(fontsize=7, loc="upper right", ncol=2)
    bx.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    with atomic_file(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)
    return path
