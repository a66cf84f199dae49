"""Figures of one dataset episode (``actlab data view``): state/action curves and a filmstrip."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from actlab.utils.io import atomic_file
from actlab.viz.report import Report

MAX_DIMS = 16  # rows drawn at most (a 14-joint bimanual arm fits)


def plot_episode_curves(
    seconds: np.ndarray,
    series: Mapping[str, np.ndarray],
    names: Sequence[str],
    path: str | Path,
    title: str = "",
) -> Path:
    """One row per dimension, every series (e.g. state and action, each ``(T, D)``) over time (s); PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    dims = min(len(names), MAX_DIMS)
    fig = Figure(figsize=(9, 1.3 * dims + 0.9), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(dims, 1, sharex=True, squeeze=False)[:, 0]
    styles = (
        {"color": "black", "lw": 1.4},
        {"color": "#e4572e", "lw": 1.1, "ls": "--"},
        {"color": "#1b998b"},
    )
    for j, ax in enumerate(axes):
        for (label, values), style in zip(series.items(), styles * 4):
            values = np.asarray(values)
            if values.ndim == 2 and j < values.shape[1]:
                ax.plot(seconds, values[:, j], label=label, **style)
        ax.set_ylabel(names[j], fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("time in the episode (s)")
    if title:
        fig.suptitle(title, fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=8, frameon=False)
    path = Path(path)
    with atomic_file(path, "wb") as f:
        fig.savefig(f, format="png", dpi=90)
    return path


def write_filmstrip(rows: Sequence[np.ndarray], path: str | Path) -> Path:
    """Rows of HWC uint8 frames (one row per camera, frames left to right in time) as one PNG."""
    from PIL import Image

    height = max(r.shape[1] for r in rows)
    lines = []
    for frames in rows:  # (K, H, W, 3) each
        line = np.concatenate(list(frames), axis=1)
        if line.shape[0] < height:
            line = np.pad(line, ((0, height - line.shape[0]), (0, 0), (0, 0)))
        lines.append(line)
    width = max(x.shape[1] for x in lines)
    image = np.concatenate([np.pad(x, ((0, 0), (0, width - x.shape[1]), (0, 0))) for x in lines], axis=0)
    path = Path(path)
    with atomic_file(path, "wb") as f:
        Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8)).save(f, format="PNG")
    return path


def write_episode_page(view: Mapping, out: str | Path) -> Path:
    """Write ``<stem>.html`` and ``.md`` with the curves and filmstrip PNGs into ``out``, from the plain
    values of :func:`actlab.datasets.view.episode_view`; returns the HTML page's path.

    Each camera's video is the episode's stretch of the dataset's own mp4 (a media fragment
    ``#t=from,to``: nothing re-encoded; current browsers play AV1); the filmstrip shows frames even where
    a browser cannot."""
    import os

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = view["stem"]
    r = Report(view["title"])
    r.paragraph(view["summary"])
    if view["cameras"]:
        r.heading("Cameras")
        for key, mp4, t0, t1 in view["videos"]:
            r.video(
                f"{os.path.relpath(mp4, out)}#t={t0:.3f},{t1:.3f}", f"{key}: {t0:.2f}-{t1:.2f} s of {mp4}"
            )
        write_filmstrip(view["strip"], out / f"{stem}_frames.png")
        at = ", ".join(f"{t:.1f}" for t in view["strip_seconds"])
        r.image(f"{stem}_frames.png", f"{', '.join(view['cameras'])} (one row each) at {at} s")
    if view["series"]:
        plot_episode_curves(view["seconds"], view["series"], view["names"], out / f"{stem}_curves.png")
        r.heading("State and action")
        r.image(f"{stem}_curves.png", f"{' and '.join(view['series'])} per joint over the episode")
    r.write(out, stem=stem)
    return out / f"{stem}.html"
