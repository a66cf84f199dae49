"""The policy doctor's figure: predicted vs recorded joint trajectories of a few replayed episodes.

One column per episode, one row per joint. Each panel draws the recorded action (black), the policy's
first predicted action at every frame (the open-loop replay, coloured), a few whole predicted chunks
(thin lines starting at their frame) and the hold-the-state baseline (grey, dashed) when given. Plain
arrays in, a PNG out: the numbers come from ``actlab.evaluation.doctor``.

Uses matplotlib's object API with the Agg canvas (no pyplot, no global backend switch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actlab.utils.io import atomic_file

MAX_JOINTS = 14  # rows drawn at most (an ALOHA has 14 joints)
CHUNKS_PER_EPISODE = 6  # whole predicted chunks drawn per episode


def plot_replay(
    episodes: Sequence[Mapping[str, Any]], joint_names: Sequence[str], path: str | Path, title: str = ""
) -> Path:
    """Write the replay figure to ``path`` (PNG).

    ``episodes``: dicts with ``title`` (str), ``frames`` (T,) frame positions in the episode,
    ``recorded`` (T, A) recorded actions, ``predicted`` (T, A) first predicted actions, optionally
    ``chunks`` (T, H, A) predicted chunks and ``hold`` (T, A) the current state.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n_joints = min(len(joint_names), MAX_JOINTS)
    cols = max(1, len(episodes))
    fig = Figure(figsize=(3.6 * cols + 1, 1.5 * n_joints + 0.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.atleast_2d(fig.subplots(n_joints, cols, sharex="col", squeeze=False))
    for c, ep in enumerate(episodes):
        _draw_episode(axes[:, c], ep, joint_names[:n_joints])
    if title:
        fig.suptitle(title, fontsize=10)
    if episodes:
        handles, labels = axes[0, 0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=8, frameon=False)
    path = Path(path)
    with atomic_file(path, "wb") as f:
        fig.savefig(f, format="png", dpi=90)
    return path


def _draw_episode(column: Sequence[Any], ep: Mapping[str, Any], names: Sequence[str]) -> None:
    t = np.asarray(ep["frames"])
    rec, pred = np.asarray(ep["recorded"]), np.asarray(ep["predicted"])
    chunks = ep.get("chunks")
    hold = ep.get("hold")
    picks = np.linspace(0, len(t) - 1, min(CHUNKS_PER_EPISODE, len(t))).round().astype(int) if len(t) else []
    step = float(np.median(np.diff(t))) if len(t) > 1 else 1.0
    for j, ax in enumerate(column):
        ax.plot(t, rec[:, j], color="black", lw=1.4, label="recorded")
        ax.plot(t, pred[:, j], color="#1b998b", lw=1.4, label="predicted (first action)", zorder=3)
        if hold is not None:
            ax.plot(t, np.asarray(hold)[:, j], color="#9e9e9e", lw=1, ls="--", label="hold state")
        if chunks is not None:
            ch = np.asarray(chunks)
            for i in picks:
                # a chunk's actions are one frame apart, whatever the replay stride
                ax.plot(
                    t[i] + np.arange(ch.shape[1]),
                    ch[i, :, j],
                    color="#e4572e",
                    lw=0.7,
                    alpha=0.6,
                    label="predicted chunk" if i == picks[0] else None,
                )
        ax.set_ylabel(names[j], fontsize=8)
        ax.tick_params(labelsize=7)
        ax.set_xlim(t[0] if len(t) else 0, (t[-1] + step) if len(t) else 1)
    column[0].set_title(str(ep.get("title", "")), fontsize=9)
    column[-1].set_xlabel("frame", fontsize=8)
