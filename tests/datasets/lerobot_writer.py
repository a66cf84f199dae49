"""Writes episodes into a LeRobot v3.0 dataset with lerobot's own writer (run by the lerobot 0.6.1 python).

    python lerobot_writer.py EPISODES.npz OUT [--vcodec h264]   # write OUT from the episodes
    python lerobot_writer.py --load OUT                          # print {"episodes", "frames", "item"}

EPISODES.npz holds ``meta`` (JSON: fps, robot_type, features, tasks) and ``{i}/{key}`` arrays, one per
episode and feature (cameras (T, H, W, 3) uint8). Imports only numpy and lerobot.
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
        n = len(z[f"{i}/action"])
        for t in range(n):
            frame = {k: z[f"{i}/{k}"][t] for k in meta["features"]}
            ds.add_frame({**frame, "task": task})
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
        write(
            sys.argv[1], sys.argv[2], sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--vcodec" else None
        )
