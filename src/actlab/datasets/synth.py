"""Synthetic but real datasets: smooth joint trajectories and camera images that show them.

Used by the tests (``make_dataset`` fixture) and by ``actlab data synth`` to make the benchmark dataset
reproducibly. Each camera shows a coloured square whose position follows state dims 0 and 1 and a bar
whose length follows state dim 2 over a fixed gradient background, so image statistics are meaningful
and a policy can learn state from pixels. Actions lead the state by 3 frames (a position servo's lag).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from actlab.datasets.format import make_features
from actlab.datasets.video import VideoOptions, write_video_with_retry
from actlab.datasets.writer import DatasetWriter
from actlab.errors import ActlabError

# What a synthetic dataset says wrote it: --overwrite replaces only an earlier one.
SYNTH_KIND = "actlab data synth"

ACTION_LEAD = 3  # frames the action leads the state


def _trajectory(rng: np.random.Generator, length: int, dim: int, fps: int) -> np.ndarray:
    t = np.arange(length)[:, None] / fps  # (T, 1)
    amp = rng.uniform(0.3, 1.0, dim)
    freq = rng.uniform(0.1, 0.6, dim)
    phase = rng.uniform(0, 2 * np.pi, dim)
    offset = rng.uniform(-0.5, 0.5, dim)
    return (offset + amp * np.sin(2 * np.pi * freq * t + phase)).astype(np.float32)  # (T, D)


def render(state: np.ndarray, height: int, width: int, camera: int = 0) -> np.ndarray:
    """Images (T, H, W, 3) uint8 drawn from ``state`` (T, D): square at dims 0/1, bar length from dim 2."""
    n = len(state)
    s = np.tanh(state[:, : min(3, state.shape[1])])  # in (-1, 1)
    s = np.pad(s, ((0, 0), (0, 3 - s.shape[1])))
    yy = np.arange(height)[None, :, None]
    xx = np.arange(width)[None, None, :]
    bg = np.empty((height, width, 3), dtype=np.uint8)
    bg[..., 0] = np.linspace(30, 90, width, dtype=np.float32)[None, :]
    bg[..., 1] = np.linspace(40 + 30 * camera, 100, height, dtype=np.float32)[:, None]
    bg[..., 2] = 60
    half = max(1, min(height, width) // 10)
    cy = ((s[:, 0] + 1) / 2 * (height - 2 * half) + half)[:, None, None]
    cx = ((s[:, 1] + 1) / 2 * (width - 2 * half) + half)[:, None, None]
    square = (np.abs(yy - cy) < half) & (np.abs(xx - cx) < half)  # (T, H, W)
    bar_len = ((s[:, 2] + 1) / 2 * width)[:, None, None]
    bar = (yy >= height - max(2, height // 16)) & (xx < bar_len)
    out = np.broadcast_to(bg, (n, height, width, 3)).copy()
    out[square] = (230, 200 - 80 * camera, 40)
    out[bar] = (250, 250, 250)
    return out


def synth_episode(
    rng: np.random.Generator,
    length: int,
    state_dim: int,
    action_dim: int,
    cameras: Mapping[str, tuple[int, int]],
    fps: int,
) -> dict[str, np.ndarray]:
    """One episode's arrays, keyed as the writer wants them."""
    state = _trajectory(rng, length + ACTION_LEAD, max(state_dim, action_dim, 3), fps)
    ep = {
        "observation.state": state[:length, :state_dim].copy(),
        "action": (state[ACTION_LEAD:, :action_dim] + rng.normal(0, 0.005, (length, action_dim))).astype(
            np.float32
        ),
    }
    for i, (name, (h, w)) in enumerate(cameras.items()):
        ep[f"observation.images.{name}"] = render(state[:length], h, w, camera=i)
    return ep


def episode_lengths(episodes: int, length: int | None = None, frames: int | None = None) -> list[int]:
    """Equal lengths (``length`` each, or ``frames`` split as evenly as possible)."""
    if frames is not None:
        base, extra = divmod(frames, episodes)
        return [base + (1 if i < extra else 0) for i in range(episodes)]
    return [int(length or 40)] * episodes


def _check_sizes(
    episodes: int, state_dim: int, action_dim: int, cameras: Mapping[str, tuple[int, int]]
) -> None:
    for field, value, least in (
        ("--episodes", episodes, 1),
        ("--state-dim", state_dim, 1),
        ("--action-dim", action_dim, 1),
        *((f"--image-size ({name})", min(hw), 2) for name, hw in cameras.items()),
    ):
        if value < least:
            raise ActlabError(f"{field} must be >= {least}", field=field, expected=f">= {least}", found=value)


def synth_dataset(
    out: str | Path,
    episodes: int = 3,
    length: int | None = 40,
    cameras: Mapping[str, tuple[int, int]] | None = None,
    state_dim: int = 6,
    action_dim: int = 6,
    fps: int = 30,
    seed: int = 0,
    frames: int | None = None,
    lengths: Sequence[int] | None = None,
    video: VideoOptions | str = "av1",
    overwrite: bool = False,
    task: str = "move the square",
) -> Path:
    """Write a real LeRobot v3 dataset of synthetic episodes; returns its path.

    ``frames`` (total) overrides ``length``; ``lengths`` gives each episode's length explicitly.
    ``video``: the settings, or a codec name (actlab.datasets.video.CODEC_CHOICES; "auto" chooses for
    this machine); a stalled encoder writes everything once more (the episodes follow from ``seed``).
    """
    cameras = {"top": (32, 32)} if cameras is None else dict(cameras)
    _check_sizes(episodes, state_dim, action_dim, cameras)
    lens = list(lengths) if lengths is not None else episode_lengths(episodes, length, frames)
    if not lens or min(lens) < 1:
        raise ActlabError(
            "every episode needs at least one frame",
            field="--frames/--episodes",
            expected="frames >= episodes >= 1",
            found=f"episode lengths {lens[:5]}{'...' if len(lens) > 5 else ''}",
        )
    features = make_features(state_dim, action_dim, cameras, fps)

    def write(options: VideoOptions) -> Path:
        rng = np.random.default_rng(seed)
        with DatasetWriter(
            out, fps, features, robot_type="synthetic", video=options, overwrite=overwrite, kind=SYNTH_KIND
        ) as w:
            for n in lens:
                w.add_episode(synth_episode(rng, n, state_dim, action_dim, cameras, fps), task=task)
        return Path(out)

    return write_video_with_retry(write, video, what="writing")
