"""``actlab bench train``: where a training step's time goes, measured side by side in one run.

Two loops over the same built run (same policy, optimizer, device):

- model-only: one batch gathered and augmented once, then ``run.step(batch)`` repeated; the batch is
  already on the device, so this is the step time with a perfect data pipeline;
- full: ``run.step(run.next_batch())``: sampling, gathering from the FrameStore, augmentation and
  the step, as ``actlab train`` runs it.

The blocks alternate (model-only, full, model-only, full, ...) so that machine noise hits both alike.
The data-stall fraction ``1 - model_only / full`` is the share of a training step spent waiting on data.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from actlab.training.config import TrainConfig


def synth_for(cfg: TrainConfig, out: Path, episodes: int = 8, length: int = 60) -> Path:
    """A real LeRobot v3 dataset (AV1 video) with the cameras and dimensions the config's policy expects."""
    from actlab.datasets.synth import synth_dataset

    keys = list(getattr(cfg.policy, "cameras", ()) or ("observation.images.top",))
    size = cfg.data.image_size or 64
    size += size % 2  # yuv420p needs even sizes
    cameras = {k.removeprefix("observation.images."): (size, size) for k in keys}
    dim = 14 if cfg.name == "aloha" else 6
    return synth_dataset(
        out, episodes=episodes, length=length, cameras=cameras, state_dim=dim, action_dim=dim
    )


def _block(run, steps: int, batch: dict[str, Any] | None) -> float:
    """Seconds for ``steps`` steps; ``batch`` None draws a fresh batch per step (the full path)."""
    from actlab.profiling.timing import synchronize

    synchronize(run.device)  # start with an empty queue
    t0 = time.perf_counter()
    for _ in range(steps):
        run.step(batch if batch is not None else run.next_batch())
    synchronize(run.device)  # the last step's kernels belong to the measurement
    return time.perf_counter() - t0


def bench_train(
    cfg: TrainConfig, *, steps: int = 20, rounds: int = 3, warmup: int = 3, device: Any = None
) -> dict[str, Any]:
    """Measure model-only and full step times for ``cfg`` (``data.path`` set); returns a report dict."""
    from actlab.training.build import build_run

    run = build_run(cfg, device)
    try:
        _block(run, warmup, None)  # allocator, autotuning, compile, prefetch thread start
        fixed = run.next_batch()
        model_s, full_s = [], []
        for _ in range(rounds):
            model_s.append(_block(run, steps, fixed) / steps)
            full_s.append(_block(run, steps, None) / steps)
        # Adjacent blocks see the same machine load, so the median over pairs of their ratio is the
        # robust stall estimate on a shared machine; the fastest blocks are reported beside it.
        model_ms, full_ms = 1000 * statistics.median(model_s), 1000 * statistics.median(full_s)
        stall = 1.0 - statistics.median(m / f for m, f in zip(model_s, full_s))
        on_device = bool(run.device_data.frames_on_device)
        n_params = sum(p.numel() for p in run.policy.parameters())
        return {
            "benchmark": "train",
            "device": str(run.device),
            "config": {
                "preset": cfg.name,
                "policy": cfg.policy_type,
                "batch_size": cfg.batch_size,
                "params": n_params,
                "cameras": ", ".join(run.image_keys) or "-",
                "image_size": cfg.data.image_size or "native",
                "frames_on_device": on_device,
                "amp": str(run.amp_dtype).replace("torch.", "") if run.amp_dtype is not None else "off",
                "compile": cfg.compile,
                "cuda_graphs": cfg.cuda_graphs,
                "steps_timed": f"{rounds} alternating block pairs x {steps} steps",
                "dataset": cfg.data.path,
            },
            "metrics": {
                "model_only_step_ms": model_ms,
                "full_step_ms": full_ms,
                "data_stall_frac": stall,
                "model_only_step_ms_fastest": 1000 * min(model_s),
                "full_step_ms_fastest": 1000 * min(full_s),
                "samples_per_s_model_only": 1000 * cfg.batch_size / model_ms,
                "samples_per_s_full": 1000 * cfg.batch_size / full_ms,
            },
            "ratios": {"full_vs_model_only": full_ms / model_ms},
            "notes": [
                "model-only: one batch already on the device, step repeated; full: sample + gather + "
                "augment + step each time; blocks alternate so noise hits both",
                "step times: medians over blocks (fastest block beside them); data_stall_frac = 1 - median "
                "over adjacent block pairs of model_only/full (a negative value is measurement noise)",
            ],
        }
    finally:
        run.close()


def run_bench(
    cfg: TrainConfig,
    dataset: str | None,
    *,
    steps: int,
    rounds: int,
    device: Any = None,
) -> dict[str, Any]:
    """``bench_train`` on ``dataset``, or on a synthetic dataset built in a temporary directory."""
    if dataset:
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, path=str(dataset)))
        return bench_train(cfg, steps=steps, rounds=rounds, device=device)
    with tempfile.TemporaryDirectory(prefix="actlab-bench-train-") as tmp:
        path = synth_for(cfg, Path(tmp) / "synth")
        data = dataclasses.replace(cfg.data, path=str(path), cache_dir=str(Path(tmp) / "cache"))
        result = bench_train(dataclasses.replace(cfg, data=data), steps=steps, rounds=rounds, device=device)
        result["config"]["dataset"] = "synthetic (temporary, 8 episodes x 60 frames)"
        return result
