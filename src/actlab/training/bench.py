"""``actlab bench train``: where a training step's time goes, measured side by side in one run.

Two loops over the same built run (same policy, optimizer, device):

- model-only: one batch gathered and augmented once, then ``run.step(batch)`` repeated; the batch is
  already on the device, so this is the step time with a perfect data pipeline;
- full: ``run.step(run.next_batch())``: sampling, gathering from the FrameStore, augmentation and
  the step, as ``actlab train`` runs it.

The blocks alternate (model-only, full, model-only, full, ...) so that machine noise hits both alike.
The data-stall fraction ``1 - model_only / full`` is the share of a training step spent waiting on data.

Model FLOPs per step are counted once on the real policy and batch (``actlab.profiling.flops``), and
turned into achieved FLOP/s for both step times and, on CUDA, into MFU against the device's peak in the
precision the step runs in (on a CPU there is no peak, and the notes say so).
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
    cfg: TrainConfig,
    *,
    steps: int = 20,
    rounds: int = 3,
    warmup: int = 3,
    device: Any = None,
    peak_tflops: float | None = None,
) -> dict[str, Any]:
    """Measure model-only and full step times for ``cfg`` (``data.path`` set); returns a report dict.

    ``peak_tflops`` (e.g. from ``measure_peak_tflops``) replaces the datasheet peak for MFU, and gives
    one where the table has none (a CPU, an unlisted GPU).
    """
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
        flops, precision = _count_step_flops(run, fixed)
        tp = dict(flops=flops, precision=precision, batch_size=cfg.batch_size, peak_tflops=peak_tflops)
        model_tp, notes = _throughput(run, seconds=statistics.median(model_s), **tp)
        full_tp, _ = _throughput(run, seconds=statistics.median(full_s), **tp)
        mfu = {}
        if "mfu" in model_tp:
            mfu = {
                "peak_tflops": model_tp["peak_tflops"],
                "mfu_model_only": model_tp["mfu"],
                "mfu_full": full_tp["mfu"],
            }
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
                "precision": precision,
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
                "gflops_per_step": model_tp["gflops_per_step"],
                "achieved_tflops_model_only": model_tp["achieved_tflops"],
                "achieved_tflops_full": full_tp["achieved_tflops"],
                **mfu,
            },
            "ratios": {"full_vs_model_only": full_ms / model_ms},
            "notes": [
                "model-only: one batch already on the device, step repeated; full: sample + gather + "
                "augment + step each time; blocks alternate so noise hits both",
                "step times: medians over blocks (fastest block beside them); data_stall_frac = 1 - median "
                "over adjacent block pairs of model_only/full (a negative value is measurement noise)",
                "gflops_per_step: model FLOPs of one forward + backward of the policy on one batch; "
                "achieved TFLOP/s = that / the median step time",
                *notes,
            ],
        }
    finally:
        run.close()


def _count_step_flops(run, batch: dict[str, Any]) -> tuple[int, str]:
    """(FLOPs of one forward + backward of the bare policy on ``batch``, the matmul precision name).

    Counted under the step's autocast (the count does not depend on the dtype; the memory does).
    Gradients left by the count are dropped, and the global RNG is forked so the count draws no dropout
    or latent samples from the training streams.
    """
    import torch

    from actlab.profiling.flops import precision_name, train_step_flops
    from actlab.training.step import autocast

    fork_devices = [run.device] if run.device.type == "cuda" else []
    with torch.random.fork_rng(devices=fork_devices), autocast(run.device, run.amp_dtype):
        flops = train_step_flops(run.policy, batch)
    return flops, precision_name(run.amp_dtype or torch.float32, run.device)


def _throughput(run, *, flops: int, precision: str, seconds: float, batch_size: int, peak_tflops):
    from actlab.profiling.flops import throughput_metrics

    return throughput_metrics(
        flops_per_step=flops,
        seconds_per_step=seconds,
        batch_size=batch_size,
        device=run.device,
        precision=precision,
        peak_tflops=peak_tflops,
        peak_source="the peak given with --peak-tflops" if peak_tflops is not None else None,
    )


def run_bench(
    cfg: TrainConfig,
    dataset: str | None,
    *,
    steps: int,
    rounds: int,
    device: Any = None,
    peak_tflops: float | None = None,
) -> dict[str, Any]:
    """``bench_train`` on ``dataset``, or on a synthetic dataset built in a temporary directory."""
    if dataset:
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, path=str(dataset)))
        return bench_train(cfg, steps=steps, rounds=rounds, device=device, peak_tflops=peak_tflops)
    with tempfile.TemporaryDirectory(prefix="actlab-bench-train-") as tmp:
        path = synth_for(cfg, Path(tmp) / "synth")
        data = dataclasses.replace(cfg.data, path=str(path), cache_dir=str(Path(tmp) / "cache"))
        cfg = dataclasses.replace(cfg, data=data)
        result = bench_train(cfg, steps=steps, rounds=rounds, device=device, peak_tflops=peak_tflops)
        result["config"]["dataset"] = "synthetic (temporary, 8 episodes x 60 frames)"
        return result
