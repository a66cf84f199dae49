"""Writes episodes into LeRobot v3.0 datasets with lerobot's own writer (run by the lerobot 0.6.1 python).

    python lerobot_writer.py JOBS.json     # JOBS: [[EPISODES.npz, OUT, vcodec or null], ...]
    python lerobot_writer.py --load OUT    # prints {"episodes", "frames", "item": {key: shape}}

EPISODES.npz holds ``meta`` (JSON: fps, robot_type, features, tasks) and ``{i}/{key}`` arrays, one per
episode and feature (cameras (T, H, W, 3) uint8). Imports only the standard library, numpy and lerobot.
"""

from __future__ import annotations

import json
import sys


def write(npz: str, out: str, vcodec: str | None) -> None:
    import numpy as np
    from lerobot.configs.video import RGBEncoderConfig
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    z = np.load(npz)
    meta = json.loads(str(z["meta"]))
    kw = {"rgb_encoder": RGBEncoderConfig(vcodec=vcodec)} if vcodec else {}
    ds = LeRobotDataset.create(
        "local/x", meta["fps"], meta["features"], root=out, robot_type=meta["robot_type"], **kw
    )
    for i, task in enumerate(meta["tasks"]):
        for t in range(len(z[f"{i}/action"])):
            ds.add_frame({**{k: z[f"{i}/{k}"][t] for k in meta["features"]}, "task": task})
        ds.save_episode()
    ds.finalize()


def load(root: str) -> None:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("local/x", root=root, video_backend="pyav")
    item = ds[len(ds) - 1]  # the last frame: decodes video at the far end of the files
    shapes = {k: list(v.shape) for k, v in item.items() if hasattr(v, "shape")}
    print(json.dumps({"episodes": ds.num_episodes, "frames": ds.num_frames, "item": shapes}))


if __name__ == "__main__":
    if sys.argv[1] == "--load":
        load(sys.argv[2])
    else:
        with open(sys.argv[1]) as f:
            for npz, out, vcodec in json.load(f):
                write(npz, out, vcodec)
