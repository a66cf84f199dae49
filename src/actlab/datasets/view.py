"""``actlab data view``: one episode of a dataset as an HTML page (what ``lerobot-dataset-viz`` shows).

The page holds, per camera, the episode's part of the dataset's own video file (a player with a media
fragment ``#t=from,to``: nothing is re-encoded, so the page is written in a second), a filmstrip of frames
spread over the episode (decoded with actlab's reader: it shows even where a browser cannot play AV1),
and the state and action curves of every joint over time, with the episode's tasks and lengths.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from actlab.datasets.reader import LeRobotV3Dataset
from actlab.errors import ActlabError

STRIP_FRAMES = 8  # frames per camera in the filmstrip
STRIP_MIN_HEIGHT = 96  # frames smaller than this are drawn larger (nearest neighbour)


def _names(ds: LeRobotV3Dataset, key: str, n: int) -> list[str]:
    names = ds.features.get(key, {}).get("names")
    if isinstance(names, dict):
        names = next((v for v in names.values() if isinstance(v, list)), None)
    return (
        [str(x) for x in names] if isinstance(names, list) and len(names) == n else [str(i) for i in range(n)]
    )


def episode_view(ds: LeRobotV3Dataset, episode: int) -> dict[str, Any]:
    """What the page of stored episode ``episode`` shows, as plain values for
    :func:`actlab.viz.dataset.write_episode_page`: ``title``, ``summary`` (a sentence), ``videos`` (per
    camera: key, absolute mp4 path, from and to timestamps), ``strip`` (per camera ``(K, H, W, 3)`` uint8),
    ``strip_seconds`` (K,), ``seconds`` (T,), ``series`` (``{key: (T, D)}`` state and action), ``names``."""
    by_index = {e.index: e for e in ds.episodes}
    if episode not in by_index:
        known = sorted(by_index)
        raise ActlabError(
            "no such episode in the dataset",
            file=ds.root,
            field="--episode",
            expected=f"one of {known[0]}..{known[-1]}" if known else "an episode",
            found=episode,
        )
    ep = by_index[episode]
    idx = np.linspace(ep.start, ep.stop - 1, min(STRIP_FRAMES, ep.length)).round().astype(int)
    strip = []
    for key in ds.camera_keys:
        frames = ds.read_frames(key, idx)  # (K, H, W, 3)
        scale = max(1, -(-STRIP_MIN_HEIGHT // frames.shape[1]))
        strip.append(frames.repeat(scale, axis=1).repeat(scale, axis=2))
    series = {
        key: np.asarray(ds.column(key)[ep.start : ep.stop], dtype=np.float64)  # (T, D)
        for key in ("observation.state", "action")
        if key in ds.features
    }
    first = next(iter(series), None)
    return {
        "title": f"{ds.root.name}: episode {episode}",
        "stem": f"episode_{episode:03d}",
        "summary": f"{ep.length} frames ({ep.length / ds.fps:.1f} s at {ds.fps} fps), frames "
        f"{ep.start}..{ep.stop - 1} of {len(ds)}; task: {'; '.join(ep.tasks) or '-'}. Dataset: {ds.root}",
        "videos": [
            (key, ds.root / ep.videos[key][0], ep.videos[key][1], ep.videos[key][2])
            for key in ds.camera_keys
            if key in ep.videos
        ],
        "cameras": list(ds.camera_keys),
        "strip": strip,
        "strip_seconds": (idx - ep.start) / ds.fps,
        "seconds": np.arange(ep.length) / ds.fps,
        "series": series,
        "names": _names(ds, first, series[first].shape[1]) if first else [],
    }
