"""``actlab bench data``: the training sampler's throughput against a LeRobot-style loader, side by side.

actlab's path: FrameStore (decoded once; build time reported separately) + EpisodeSampler + DeviceData
gather on the CPU, including all index math. Baseline, in the same run: what LeRobot's DataLoader does,
with actlab's own reader: a torch DataLoader whose workers call ``get_item`` per sample (random-access
video decode of every camera, action window with pad mask) and collate. Optionally real lerobot 0.6.1
from a separate interpreter (``--lerobot-python``).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from actlab.datasets.device import DeviceData
from actlab.datasets.framestore import FrameStore
from actlab.datasets.reader import LeRobotV3Dataset, open_dataset
from actlab.datasets.sampler import EpisodeSampler
from actlab.errors import ActlabError
from actlab.utils import procs

# lerobot-train's loader measured on a 2-core CPU (224x224 AV1, 1 camera, ACT chunk 100, batch 8, 2 workers,
# pyav or torchcodec): about 160 samples/s. Used when no baseline runs.
LEROBOT_REFERENCE_SAMPLES_PER_S = 160.0


def act_deltas(ds: LeRobotV3Dataset, action_horizon: int) -> dict[str, list[int]]:
    """What ACT fetches: the current state and camera frames, and ``action_horizon`` future actions."""
    deltas: dict[str, list[int]] = {k: [0] for k in ds.camera_keys}
    if "observation.state" in ds.features:
        deltas["observation.state"] = [0]
    deltas["action"] = list(range(action_horizon))
    return deltas


def _time_loop(step, seconds: float, batch_size: int, warmup: int = 3) -> tuple[float, int]:
    for _ in range(warmup):
        step()
    n = 0
    t0 = time.perf_counter()
    while True:
        step()
        n += 1
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return n * batch_size / dt, n


def bench_actlab(
    ds: LeRobotV3Dataset,
    batch_size: int,
    action_horizon: int,
    seconds: float,
    image_size: int | None,
    cache_dir: str | None,
    seed: int = 0,
) -> dict[str, Any]:
    """Samples/s of FrameStore + sampler + DeviceData.gather on the CPU; cache build timed apart."""
    import torch

    t0 = time.perf_counter()
    path = FrameStore.path_for(ds, image_size, None, cache_dir=cache_dir)
    cached = path.is_dir()
    store = FrameStore.build(ds, image_size=image_size, cache_dir=cache_dir)
    build_s = time.perf_counter() - t0
    data = DeviceData(ds, store, act_deltas(ds, action_horizon), device="cpu")
    starts = np.array([e.start for e in ds.episodes])
    stops = np.array([e.stop for e in ds.episodes])
    sampler = EpisodeSampler(starts, stops, seed=seed)

    def step() -> None:
        data.gather(sampler.next_batch(batch_size))

    # One intra-op thread: a batch gather is a few memory-bound copies, and OpenMP workers spin-waiting on
    # a busy 2-core machine cost far more than they bring (the other core belongs to the training step).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            rate, n = _time_loop(step, seconds, batch_size)
    finally:
        torch.set_num_threads(threads)
    return {
        "samples_per_s": rate,
        "batches": n,
        "cache_build_s": build_s,
        "cache_hit": cached,
        "store": store,
    }


class _PerSampleDataset:
    """torch-style map dataset: ``get_item`` per index, as LeRobot's ``__getitem__`` decodes per sample."""

    def __init__(self, root: str, deltas: dict[str, list[int]]) -> None:
        self.root, self.deltas = root, deltas
        self.ds: LeRobotV3Dataset | None = None

    def __len__(self) -> int:
        return len(open_dataset(self.root)) if self.ds is None else len(self.ds)

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self.ds is None:  # opened inside each worker: decoders are per process
            self.ds = open_dataset(self.root)
        return self.ds.get_item(int(i), self.deltas)


def bench_baseline(
    ds: LeRobotV3Dataset, batch_size: int, action_horizon: int, seconds: float, workers: int, seed: int = 0
) -> dict[str, Any]:
    """Samples/s of a LeRobot-style DataLoader (per-sample decode in ``workers`` processes)."""
    import torch
    from torch.utils.data import DataLoader

    dataset = _PerSampleDataset(str(ds.root), act_deltas(ds, action_horizon))
    g = torch.Generator().manual_seed(seed)
    loader = DataLoader(
        dataset,  # type: ignore[arg-type]
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        generator=g,
        drop_last=True,
        prefetch_factor=4 if workers else None,
        persistent_workers=False,
    )
    it = iter(loader)

    def step() -> None:
        nonlocal it
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            batch = next(it)
        for k, v in batch.items():  # LeRobot converts images to float in the main process
            if k in ds.camera_keys:
                v.float().div_(255)

    rate, n = _time_loop(step, seconds, batch_size, warmup=2)
    del it
    return {"samples_per_s": rate, "batches": n}


def bench_lerobot(
    python: str, path: Path, batch_size: int, action_horizon: int, seconds: float, workers: int
) -> dict[str, Any]:
    """Run real lerobot's DataLoader in its own interpreter (``lerobot_probe.py``); returns its JSON."""
    probe = Path(__file__).with_name("lerobot_probe.py")
    cmd = [python, str(probe), "bench", str(path), "--batch-size", str(batch_size)]
    cmd += ["--action-horizon", str(action_horizon), "--seconds", str(seconds), "--workers", str(workers)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    limit = seconds * 10 + 300
    try:
        code, stdout, stderr = procs.run_tree(cmd, timeout=limit, env=env, field="--lerobot-python")
    except subprocess.TimeoutExpired:
        raise ActlabError(
            f"lerobot's data loader did not finish in {limit:.0f} s (its processes were ended)",
            field="--lerobot-python",
            found=python,
            fix="check that this python runs lerobot 0.6.1, or give fewer --seconds",
        ) from None
    if code != 0:
        raise ActlabError(
            "lerobot benchmark failed",
            field="--lerobot-python",
            expected="a Python with lerobot 0.6.1 installed",
            found=(stderr.strip().splitlines() or ["no output"])[-1],
            fix="see docs/datasets.md (checking with real LeRobot)",
        )
    return json.loads(stdout.strip().splitlines()[-1])


def bench_data(
    path: str | Path,
    batch_size: int = 8,
    action_horizon: int = 100,
    seconds: float = 5.0,
    image_size: int | None = None,
    baseline: bool = True,
    baseline_seconds: float = 15.0,
    workers: int = 2,
    lerobot_python: str | None = None,
    cache_dir: str | None = None,
    seed: int = 0,
    progress: Any = None,
) -> dict[str, Any]:
    """Run the data benchmark; returns the ``actlab.profiling.report`` result dict. ``progress``: a text
    stream told what is being timed, and for how long, before each part (None: silent)."""

    def say(text: str) -> None:
        if progress is not None:
            print(text, file=progress, flush=True)

    if batch_size < 1 or action_horizon < 1:
        raise ActlabError(
            "batch size and action horizon must be >= 1",
            field="--batch-size/--action-horizon",
            found=(batch_size, action_horizon),
        )
    if workers < 0 or seconds <= 0 or baseline_seconds <= 0:
        raise ActlabError(
            "--workers must be >= 0 and --seconds/--baseline-seconds > 0",
            field="--workers/--seconds/--baseline-seconds",
            found=(workers, seconds, baseline_seconds),
        )
    ds = open_dataset(path)
    cams = {k: ds.features[k]["shape"] for k in ds.camera_keys}
    parts = 1 + int(baseline) + int(bool(lerobot_python))
    say(f"[1/{parts}] actlab's sampler: the frame cache, then {seconds:g} s")
    mine = bench_actlab(ds, batch_size, action_horizon, seconds, image_size, cache_dir, seed)
    say(f"      {mine['samples_per_s']:,.0f} samples/s")
    result: dict[str, Any] = {
        "benchmark": "data",
        "device": "cpu",
        "config": {
            "dataset": str(ds.root),
            "episodes": len(ds.episodes),
            "frames": len(ds),
            "cameras": json.dumps(cams),
            "batch_size": batch_size,
            "action_horizon": action_horizon,
            "image_size": image_size or "native",
            "baseline_workers": workers,
            "actlab_torch_threads": 1,
            "cpu_cores": os.cpu_count(),
            "python": platform.python_version(),
        },
        "metrics": {
            "samples_per_s": round(mine["samples_per_s"], 1),
            "cache_build_s": round(mine["cache_build_s"], 2),
            "cache_hit": mine["cache_hit"],
            "store_mb": round(mine["store"].nbytes / 1e6, 1),
        },
        "ratios": {},
        "notes": [
            "samples_per_s: FrameStore + EpisodeSampler + DeviceData.gather on CPU, index math included, "
            "one-time cache build excluded (cache_build_s)",
        ],
    }
    if baseline:
        say(
            f"[2/{parts}] LeRobot-style loader: {workers} worker processes decoding "
            f"every sample, {baseline_seconds:g} s after their start-up"
        )
        base = bench_baseline(ds, batch_size, action_horizon, baseline_seconds, workers, seed)
        say(f"      {base['samples_per_s']:,.0f} samples/s")
        result["metrics"]["baseline_samples_per_s"] = round(base["samples_per_s"], 1)
        result["ratios"]["vs_baseline"] = round(mine["samples_per_s"] / base["samples_per_s"], 1)
        result["notes"].append(
            f"baseline: LeRobot-style DataLoader ({workers} workers, per-sample random-access decode with "
            "actlab's reader, default collate, uint8->float in the main process), same run"
        )
    if lerobot_python:
        say(f"[{parts}/{parts}] lerobot 0.6.1 in {lerobot_python}: {baseline_seconds:g} s after its start-up")
        lr = bench_lerobot(lerobot_python, ds.root, batch_size, action_horizon, baseline_seconds, workers)
        result["metrics"]["lerobot_samples_per_s"] = round(lr["samples_per_s"], 1)
        result["ratios"]["vs_lerobot"] = round(mine["samples_per_s"] / lr["samples_per_s"], 1)
        result["notes"].append(f"lerobot {lr.get('lerobot_version')}: LeRobotDataset + DataLoader, same run")
    result["ratios"]["vs_lerobot_reference_160"] = round(
        mine["samples_per_s"] / LEROBOT_REFERENCE_SAMPLES_PER_S, 1
    )
    result["notes"].append(
        "vs_lerobot_reference_160: samples_per_s over the 160 samples/s lerobot 0.6.1's loader delivered on "
        "the 2-core reference machine (224 px AV1, batch 8, 2 workers): a yardstick when it does not run here"
    )
    return result


if __name__ == "__main__":  # pragma: no cover
    print(json.dumps(bench_data(sys.argv[1]), indent=2, default=str))
