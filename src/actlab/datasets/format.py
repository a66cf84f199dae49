"""Facts about the LeRobot v3.0 layout on disk, shared by the reader, the writer and the doctor.

The layout is LeRobotDataset v3.0's as lerobot 0.6 writes and reads it (the public source:
github.com/huggingface/lerobot, src/lerobot/datasets/utils.py and lerobot_dataset.py). Paths are relative
to the dataset root.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from actlab.errors import ActlabError

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
# Placeholders of the path templates in info.json.
VIDEO_KEYS = ("video_key", "chunk_index", "file_index")

# LeRobot accepts a video frame within this many seconds of the requested timestamp and raises otherwise.
TIMESTAMP_TOLERANCE_S = 1e-4

STAT_NAMES = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}

# Columns every v3.0 data file has, in LeRobot's order, with the feature spec info.json gives them.
DEFAULT_FEATURES: dict[str, dict[str, Any]] = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}

CAMERA_DTYPES = ("video", "image")

# An extra info.json key (LeRobot ignores keys it does not know) in which actlab's sim recorder says which
# initial scenes its episodes start from: {"task": sim task name, "episode_seeds": [env.reset seed of
# episode 0, 1, ...], "units": "so101_follower" only for a recording in those units (absent: degrees)}.
# Evaluation refuses to score a policy on the scenes it was trained on.
SIM_INFO_KEY = "actlab_sim"


# The joint units a recording may be in (actlab.sim.units.UNITS reads this: the sim sits above datasets).
SIM_UNITS: tuple[str, ...] = ("degrees", "so101_follower")

# The sim's task names (actlab.sim.tasks.TASKS holds them: the sim sits above datasets; a test keeps the two
# equal), which a recorder's block may name.
SIM_TASKS: tuple[str, ...] = (
    "so101_pick_place",
    "so101_stack",
    "so101_push",
    "so101_pick_clutter",
    "so101_pick_moving",
)


def sim_seeds(
    info: Mapping[str, Any], file: Any = None, fix: str | None = None, key: str = SIM_INFO_KEY
) -> dict[str, Any] | None:
    """The recorder's ``{"task", "episode_seeds", "units"}`` of a dataset's info.json, or None when it has
    none. ``units``: the joint units of its actions and states ("degrees" when the block does not name
    any: the recorder writes them only for another, so101_follower). A bundle keeps this block (training
    copies it), so an evaluation knows the units its policy learned.

    A block of another shape is refused, naming ``file`` (the info.json or the bundle's actlab.json) and
    ``key`` (where the block sits in it): seeds "0..3" turned the training-seed check off without a word,
    ["x"] was int()'s traceback, a task 5 was named as the task "5" and units "radians" gave the fix
    "--units radians" (no such units)."""
    block = info.get(SIM_INFO_KEY)
    if block is None:
        return None

    def damaged(field: str, expected: str, found: Any) -> ActlabError:
        return ActlabError(
            "the sim recorder's record of the episodes is damaged (edited?)",
            file=file,
            field=f"{key}{field}",
            expected=expected,
            found=repr(found)[:120],
            fix=fix
            or f"restore the file from a copy (actlab sim record writes {SIM_INFO_KEY} as the episodes were "
            f"recorded), or remove {SIM_INFO_KEY} (an evaluation then cannot refuse its training scenes)",
        )

    if not isinstance(block, Mapping):
        raise damaged("", "an object {task, episode_seeds, units}", block)
    seeds = block.get("episode_seeds")
    whole = isinstance(seeds, list) and all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    if not whole or any(s < 0 for s in seeds):
        raise damaged(".episode_seeds", "a list of the episodes' env seeds (whole numbers >= 0)", seeds)
    # one seed per episode, each its own scene: seeds [0, 1] (or [0, 0, 0, 0]) of 4 episodes left the
    # training-seed check off for the scenes of episodes 2 and 3; 6 seeds refused 2 scenes never trained on
    total = info.get("total_episodes")
    if isinstance(total, int) and not isinstance(total, bool) and len(seeds) != total:
        raise damaged(".episode_seeds", f"one seed per episode: {total} (total_episodes)", seeds)
    if len(set(seeds)) != len(seeds):
        raise damaged(
            ".episode_seeds", "one seed per episode, each its own (the recorder never repeats one)", seeds
        )
    task = block.get("task", "")
    if not isinstance(task, str) or task not in SIM_TASKS:
        # "so101_bogus" or "" was named in eval's warning with the fix "--task so101_bogus" (no such task)
        raise damaged(".task", "a sim task's name: " + ", ".join(SIM_TASKS), task)
    units = block.get("units", "degrees")
    if units not in SIM_UNITS:
        raise damaged(".units", " or ".join(SIM_UNITS), units)
    return {"task": task, "episode_seeds": list(seeds), "units": units}


def is_camera(feature: Mapping[str, Any]) -> bool:
    """True for image features (``video`` stored in mp4, ``image`` stored as PNG bytes in parquet)."""
    return feature.get("dtype") in CAMERA_DTYPES


def is_numeric(feature: Mapping[str, Any]) -> bool:
    """True for features stored as numbers in the data parquet (not cameras, not strings)."""
    return feature.get("dtype") not in (*CAMERA_DTYPES, "string")


def chunk_file(position: int, chunks_size: int) -> tuple[int, int]:
    """The (chunk_index, file_index) of the ``position``-th file of a sequence (1000 files per chunk)."""
    return position // chunks_size, position % chunks_size


def camera_feature(height: int, width: int, fps: int, video: bool = True) -> dict[str, Any]:
    """Feature spec of an RGB camera (HWC on disk); ``video.*`` info is completed by the writer."""
    return {
        "dtype": "video" if video else "image",
        "shape": [int(height), int(width), 3],
        "names": ["height", "width", "channels"],
    }


def vector_feature(dim: int, names: Sequence[str] | None = None, dtype: str = "float32") -> dict[str, Any]:
    """Feature spec of a 1-D numeric vector such as ``observation.state`` or ``action``."""
    if names is not None and len(names) != dim:
        raise ValueError(f"{len(names)} names for a {dim}-dim feature")
    return {
        "dtype": dtype,
        "shape": [int(dim)],
        "names": list(names) if names else [f"d{i}" for i in range(dim)],
    }


def make_features(
    state_dim: int,
    action_dim: int,
    cameras: Mapping[str, tuple[int, int]] | None = None,
    fps: int = 30,
    state_names: Sequence[str] | None = None,
    action_names: Sequence[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Features for a typical robot dataset: ``observation.state``, ``action`` and video cameras.

    ``cameras`` maps a camera name (``top``) to ``(height, width)``; keys become
    ``observation.images.<name>``. Default columns (timestamp, index, ...) are added by the writer.
    """
    feats: dict[str, dict[str, Any]] = {}
    for name, (h, w) in (cameras or {}).items():
        feats[f"observation.images.{name}"] = camera_feature(h, w, fps)
    feats["observation.state"] = vector_feature(state_dim, state_names)
    feats["action"] = vector_feature(action_dim, action_names)
    return feats
