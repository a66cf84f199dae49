"""The robustness figure: success with its 95% interval against the level of each perturbation.

Plots only: the cells come from :mod:`actlab.evaluation.perturb_sweep` as plain dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from actlab.utils.io import atomic_file

_COLORS = ("#1b998b", "#c2185b", "#29335c", "#f3a712", "#e4572e", "#5c6bc0")


def plot_perturb(cells: Sequence[Mapping], path: str | Path, title: str = "") -> Path:
    """One panel per perturbation: success rate (its Wilson 95% interval as a band) per level, one line
    per policy, the clean level on the left. ``cells``: dicts with perturbation, unit, level, policy,
    success_rate, ci_low, ci_high, each perturbation's clean level first."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on training machines
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(c["perturbation"] for c in cells))
    policies = list(dict.fromkeys(c["policy"] for c in cells))
    cols = min(len(names), 4)
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 3.0 * rows), squeeze=False, sharey=True)
    for ax, name in zip(axes.flat, names):
        for k, policy in enumerate(policies):
            mine = sorted(
                (c for c in cells if c["perturbation"] == name and c["policy"] == policy),
                key=lambda c: c["level"],
            )
            x = [c["level"] for c in mine]
            color = _COLORS[k % len(_COLORS)]
            ax.plot(x, [100 * c["success_rate"] for c in mine], "o-", color=color, label=policy)
            ax.fill_between(
                x,
                [100 * c["ci_low"] for c in mine],
                [100 * c["ci_high"] for c in mine],
                color=color,
                alpha=0.18,
            )
        first = next(c for c in cells if c["perturbation"] == name)  # the clean level comes first
        if first["level"] >= max(c["level"] for c in cells if c["perturbation"] == name):
            ax.invert_xaxis()  # (lighting: the clean level is the largest; stronger changes to the right)
        unit = first["unit"]
        ax.set_title(name, fontsize=10)
        ax.set_xlabel(unit, fontsize=9)
        ax.set_ylim(-3, 103)
        ax.grid(alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("success (%)")
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    if len(policies) > 1:
        axes.flat[0].legend(fontsize=8)
    else:
        title = f"{title} ({policies[0]})" if title else policies[0]
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path = Path(path)
    with atomic_file(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)
    return path
