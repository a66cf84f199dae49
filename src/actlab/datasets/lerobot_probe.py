"""Run inside a lerobot 0.6.1 environment (NOT actlab's): check that lerobot loads a dataset, or time it.

    LEROBOT_PYTHON src/actlab/datasets/lerobot_probe.py check DATASET_DIR
    LEROBOT_PYTHON src/actlab/datasets/lerobot_probe.py bench DATASET_DIR --batch-size 8 \
        --action-horizon 100 --seconds 15 --workers 2

Imports only the standard library, torch and lerobot; prints one JSON line on stdout.

LEROBOT_PYTHON is the python of a separate environment with lerobot from PyPI, e.g.
``python3.12 -m venv lerobot-venv && lerobot-venv/bin/pip install "lerobot[dataset,training]==0.6.1"``.
"""

from __future__ import annotations

import argparse
import json
import time


def _backend() -> str:
    """torchcodec when it loads (it needs FFmpeg shared libraries), else pyav: both are lerobot's."""
    try:
        import torchcodec.decoders  # noqa: F401
    except Exception:
        return "pyav"
    return "torchcodec"


def _open(root: str, delta_timestamps=None):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    return LeRobotDataset(
        "actlab/local", root=root, delta_timestamps=delta_timestamps, video_backend=_backend()
    )


def check(root: str) -> dict:
    """Load with lerobot, read the first and last samples of every episode border, report shapes."""
    import lerobot

    probe = _open(root)
    fps = probe.meta.fps
    ds = _open(root, {"action": [i / fps for i in range(5)]})
    shapes = {}
    items = []
    for ep in range(ds.meta.total_episodes):
        row = ds.meta.episodes[ep]
        for i in (row["dataset_from_index"], row["dataset_to_index"] - 1):
            item = ds[int(i)]
            items.append(int(i))
            shapes = {k: list(v.shape) for k, v in item.items() if hasattr(v, "shape")}
    last = ds[len(ds) - 1]
    cams = list(ds.meta.camera_keys)
    return {
        "ok": True,
        "lerobot_version": getattr(lerobot, "__version__", "?"),
        "frames": len(ds),
        "episodes": ds.meta.total_episodes,
        "fps": fps,
        "video_backend": _backend(),
        "camera_keys": list(ds.meta.camera_keys),
        "items_read": len(items),
        "shapes": shapes,
        "last_action_is_pad": [bool(x) for x in last["action_is_pad"].tolist()],
        "last_action": last["action"].tolist(),
        "last_state": last["observation.state"].tolist(),
        # Float [0, 1] CHW, as lerobot returns it: compared with actlab's own decode by the caller.
        "last_image": {k: last[k].tolist() for k in cams},
        "stats_shapes": {k: {s: list(v.shape) for s, v in st.items()} for k, st in ds.meta.stats.items()},
    }


def bench(root: str, batch_size: int, action_horizon: int, seconds: float, workers: int) -> dict:
    """Samples/s of lerobot's own dataset + DataLoader with ACT's delta timestamps."""
    import lerobot
    import torch

    fps = _open(root).meta.fps
    ds = _open(root, {"action": [i / fps for i in range(action_horizon)]})
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        drop_last=True,
        prefetch_factor=4 if workers else None,
    )
    it = iter(loader)

    def step():
        nonlocal it
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            batch = next(it)
        for k in ds.meta.camera_keys:
            batch[k].float()

    for _ in range(2):
        step()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        n += 1
    rate = n * batch_size / (time.perf_counter() - t0)
    return {
        "samples_per_s": rate,
        "batches": n,
        "lerobot_version": getattr(lerobot, "__version__", "?"),
        "video_backend": _backend(),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["check", "bench"])
    p.add_argument("root")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--action-horizon", type=int, default=100)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args()
    if a.mode == "check":
        out = check(a.root)
    else:
        out = bench(a.root, a.batch_size, a.action_horizon, a.seconds, a.workers)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
