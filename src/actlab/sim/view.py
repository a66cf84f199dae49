"""A PNG strip of frames of one scripted episode: one row per camera, time running left to right."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from actlab.errors import ActlabError
from actlab.sim.expert import ExpertPolicy
from actlab.sim.record import run_expert_episode
from actlab.sim.tasks import make_env
from actlab.utils.io import write_png


def compose_grid(rows: list[list[np.ndarray]], gap: int = 2, background: int = 255) -> np.ndarray:
    """Tile equally sized HWC uint8 frames into one image, ``rows[r][c]`` at row r, column c."""
    h, w, _ = rows[0][0].shape
    n_rows, n_cols = len(rows), len(rows[0])
    out = np.full((n_rows * h + (n_rows - 1) * gap, n_cols * w + (n_cols - 1) * gap, 3), background, np.uint8)
    for r, row in enumerate(rows):
        for c, frame in enumerate(row):
            y, x = r * (h + gap), c * (w + gap)
            out[y : y + h, x : x + w] = frame
    return out


def render_strip(
    out: str | Path,
    task: str = "so101_pick_place",
    seed: int = 0,
    image_size: int = 128,
    frames: int = 8,
    cameras: tuple[str, ...] = ("top", "wrist"),
    upscale: int = 1,
) -> dict:
    """Run the scripted expert on ``env.reset(seed=seed)`` and write ``frames`` evenly spaced frames of
    each camera to the PNG ``out``, each pixel drawn ``upscale`` x ``upscale`` times.

    Returns ``{"path", "steps", "success", "frame_steps"}``."""
    out = Path(out)
    if out.suffix.lower() != ".png":
        raise ActlabError(
            "the strip is written as PNG", field="--out", expected="a path ending in .png", found=str(out)
        )
    if not 1 <= upscale <= 8:
        raise ActlabError("upscale out of range", field="upscale", expected="1 to 8", found=upscale)
    if not 1 <= frames <= 32:
        raise ActlabError("frames out of range", field="--frames", expected="1 to 32", found=frames)
    env = make_env(task, image_size=image_size, cameras=tuple(cameras), terminate_on_success=False)
    try:
        episode = run_expert_episode(env, ExpertPolicy(env), seed)
    finally:
        env.close()
    length = episode["length"]
    picks = np.unique(np.linspace(0, length - 1, frames).round().astype(int))
    grid = compose_grid(
        [[episode["frames"][f"observation.images.{cam}"][i] for i in picks] for cam in cameras]
    )
    if upscale > 1:  # nearest neighbour: the rendered pixels themselves, just larger
        grid = np.repeat(np.repeat(grid, upscale, axis=0), upscale, axis=1)
    write_png(out, grid)
    return {"path": str(out), "steps": length, "success": episode["success"], "frame_steps": picks.tolist()}
