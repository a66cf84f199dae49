"""Recording faults planted into a copy of a real dataset, written as a recorder would write them.

Each fault edits the episodes (numbers and decoded camera frames) of a source dataset and writes the
result with actlab's own :class:`DatasetWriter`, so the copy is consistent everywhere else (stats,
per-episode stats, video locations, checksums): only the fault differs from the clean rewrite.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from actlab.datasets import checksums, open_dataset
from actlab.datasets import format as fmt
from actlab.datasets.video import VideoOptions
from actlab.datasets.writer import DatasetWriter

Episode = dict[str, np.ndarray]


def read_episodes(src: Path) -> tuple[object, list[tuple[Episode, str]]]:
    """Every episode of ``src`` as arrays (cameras decoded, (T, H, W, 3) uint8) with its task."""
    ds = open_dataset(src)
    keys = [k for k in ds.features if k not in fmt.DEFAULT_FEATURES]
    out = []
    for e in ds.episodes:
        ep = {}
        for k in keys:
            if k in ds.camera_keys:
                ep[k] = ds.read_frames(k, np.arange(e.start, e.stop))
            else:
                ep[k] = np.array(ds.column(k)[e.start : e.stop])
        out.append((ep, e.tasks[0]))
    return ds, out


def write_episodes(
    ds, episodes: list[tuple[Episode, str]], out: Path, video: VideoOptions | None = None
) -> Path:
    feats = {k: v for k, v in ds.features.items() if k not in fmt.DEFAULT_FEATURES}
    with DatasetWriter(out, ds.fps, feats, robot_type=ds.info.get("robot_type"), video=video) as w:
        for ep, task in episodes:
            w.add_episode(ep, task)
    return out


# Each fault: (name, the check that must name it, the episode it is planted in (None: several), edit).
# An edit takes the list of (episode arrays, task) and returns the list to write.


def _frozen(eps):
    ep = eps[2][0]
    n = len(ep["action"])
    ep["action"][n // 4 : n // 4 + n // 3] = ep["action"][n // 4]  # the leader stops reporting
    return eps


def _pinned(eps):
    # a calibration range too narrow: shoulder_lift (dim 1) clipped at the 75th percentile of its range
    allv = np.concatenate([ep["action"][:, 1] for ep, _ in eps])
    top = np.quantile(allv, 0.75)
    for ep, _ in eps:
        np.minimum(ep["action"][:, 1], top, out=ep["action"][:, 1])
    return eps


def _frozen_short(eps):
    ep = eps[1][0]
    ep["action"][60:80] = ep["action"][60]  # 20 frames, two thirds of a second
    return eps


def _pinned_constant(eps):
    ep = eps[5][0]
    ep["action"][:, 3] = ep["action"][0, 3]  # wrist_flex's reading stuck for the whole episode
    return eps


def _dead_everywhere(eps):
    for ep, _ in eps:  # the elbow encoder dead for the whole recording (its action moves)
        ep["observation.state"][:, 2] = eps[0][0]["observation.state"][0, 2]
    return eps


def _dead_state(eps):
    ep = eps[3][0]
    ep["observation.state"][:, 2] = ep["observation.state"][0, 2]  # elbow encoder dead all episode
    return eps


def _short(eps):
    ep, task = eps[1]
    eps.insert(2, ({k: v[:4].copy() for k, v in ep.items()}, task))  # a false start of 4 frames
    return eps


def _duplicate(eps):
    ep, task = eps[1]
    eps.append(({k: v.copy() for k, v in ep.items()}, task))
    return eps


def _black(eps):
    ep = eps[4][0]
    ep["observation.images.top"][:] = 0
    return eps


def _frozen_camera(eps):
    ep = eps[4][0]
    ep["observation.images.wrist"][:] = ep["observation.images.wrist"][0]
    return eps


def _action_is_state(eps):
    for ep, _ in eps:
        ep["action"] = ep["observation.state"].copy()
    return eps


def _lag(eps):
    for ep, _ in eps:  # action[t] = state[t - 3]: labels written from a delayed copy of the state
        s = ep["observation.state"]
        ep["action"] = np.concatenate([np.repeat(s[:1], 3, axis=0), s[:-3]])
    return eps


FAULTS: dict[str, tuple[str, int | None, Callable]] = {
    "frozen_actions": ("frozen_actions", 2, _frozen),
    "pinned_action": ("pinned_action", None, _pinned),
    "dead_state": ("dead_state", 3, _dead_state),
    "dead_state_everywhere": ("dead_state", None, _dead_everywhere),
    "frozen_actions_short": ("frozen_actions", 1, _frozen_short),
    "pinned_action_constant": ("pinned_action", 5, _pinned_constant),
    "short_episode": ("short_episode", 2, _short),
    "duplicate_episode": ("duplicate_episode", None, _duplicate),
    "black_camera": ("black_camera", 4, _black),
    "frozen_camera": ("frozen_camera", 4, _frozen_camera),
    "action_is_state": ("action_is_state", None, _action_is_state),
    "action_lag": ("action_lag", None, _lag),
    "video_codec": ("video_codec", None, None),
}


def plant(src: Path, out: Path, fault: str | None, read: tuple[object, list] | None = None) -> Path:
    """A copy of ``src`` with ``fault`` planted (None: the clean rewrite). ``read``: what
    :func:`read_episodes` returned for ``src``, to plant several faults from one decode (it is not
    changed: the fault is planted into a copy of its arrays)."""
    if read is None:
        ds, eps = read_episodes(src)
    else:
        ds, eps = read[0], [({k: v.copy() for k, v in ep.items()}, task) for ep, task in read[1]]
    if fault == "video_codec":  # files encoded as h264, info.json still says av1 (a file swapped in)
        write_episodes(ds, eps, out, video=VideoOptions(codec="libx264", preset="veryfast"))
        info = json.loads((out / fmt.INFO_PATH).read_text())
        info["features"]["observation.images.top"]["info"]["video.codec"] = "av1"
        (out / fmt.INFO_PATH).write_text(json.dumps(info, indent=2))
        checksums.record(out, info)
        return out
    edit = FAULTS[fault][2] if fault else (lambda e: e)
    return write_episodes(ds, edit(eps), out)


def edit_middle_keeping_size_and_mtime(path: Path, nbytes: int = 4096) -> None:
    """Flip ``nbytes`` in the middle of a file, then put its mtime back (`touch -r`): its size and mtime are
    the ones a fingerprint saw, and so are the first and last 64 KiB that it hashes of a large file."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(st.st_size // 2)
        block = f.read(nbytes)
        f.seek(st.st_size // 2)
        f.write(bytes(b ^ 0x5A for b in block))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
