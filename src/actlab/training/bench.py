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

Also in the same run: the kernels per step and the share of the step the device was busy
(``actlab.profiling.kernels``, torch.profiler; on a CPU it counts torch operators and says so), the
inference latency per predicted chunk at batch 1 (eager, and replayed from a CUDA graph on CUDA), the
NVML utilization during the full-step blocks (n/a without NVML or a GPU), and with ``lerobot_python``
lerobot 0.6.1's own ACT training step on the same dataset and device, side by side.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from actlab.datasets.synth import synth_dataset
from actlab.policies.contract import FEATURES_SUFFIX
from actlab.profiling.flops import precision_name, throughput_metrics, train_step_flops
from actlab.profiling.kernels import profile_step
from actlab.profiling.nvml import UtilSampler
from actlab.profiling.timing import synchronize
from actlab.training.build import build_run
from actlab.training.config import TrainConfig
from actlab.training.lerobot_bench import run_lerobot_step
from actlab.training.step import autocast
from actlab.utils.device import resolve_device


def synth_for(cfg: TrainConfig, out: Path, episodes: int = 8, length: int = 60) -> Path:
    """A real LeRobot v3 dataset (AV1 video) with the cameras and dimensions the config's policy expects."""
    keys = list(getattr(cfg.policy, "cameras", ()) or ("observation.images.top",))
    size = cfg.data.image_size or 64
    size += size % 2  # yuv420p needs even sizes
    cameras = {k.removeprefix("observation.images."): (size, size) for k in keys}
    dim = 14 if cfg.name == "aloha" else 6
    return synth_dataset(
        out, episodes=episodes, length=length, cameras=cameras, state_dim=dim, action_dim=dim
    )


def _block(run, steps: int, batch: dict[str, Any] | None, windows: list | None = None) -> float:
    """Seconds for ``steps`` steps; ``batch`` None draws a fresh batch per step (the full path).

    ``windows`` gets the block's wall-clock ``(start, end)`` (for the NVML samples taken during it).
    """
    synchronize(run.device)  # start with an empty queue
    wall0, t0 = time.time(), time.perf_counter()
    for _ in range(steps):
        run.step(batch if batch is not None else run.next_batch())
    synchronize(run.device)  # the last step's kernels belong to the measurement
    if windows is not None:
        windows.append((wall0, time.time()))
    return time.perf_counter() - t0


def _median_util(sampler, windows: list[tuple[float, float]]) -> float | None:
    """Median NVML utilization over the samples inside any of ``windows`` (None without samples)."""
    import statistics

    if sampler is None:
        return None
    inside = [u for t, u in list(sampler.samples) if any(a <= t <= b for a, b in windows)]
    return statistics.median(inside) if inside else None


def _inference_obs(run, batch: dict[str, Any]) -> dict[str, Any]:
    """Batch-1 observation from a training batch: the policy's observation keys (or cached features)."""
    keys = set(run.policy.observation_delta_indices)
    return {
        k: v[:1]
        for k, v in batch.items()
        if (k in keys or k.endswith(FEATURES_SUFFIX)) and not k.endswith("_is_pad")
    }


def bench_train(
    cfg: TrainConfig,
    *,
    steps: int = 20,
    rounds: int = 3,
    warmup: int = 3,
    device: Any = None,
    peak_tflops: float | None = None,
    util_sampler: Any = None,
    profile_steps: int = 3,
) -> dict[str, Any]:
    """Measure model-only and full step times for ``cfg`` (``data.path`` set); returns a report dict.

    ``peak_tflops`` (e.g. from ``measure_peak_tflops``) replaces the datasheet peak for MFU, and gives
    one where the table has none (a CPU, an unlisted GPU). ``util_sampler`` (a profiling.nvml
    UtilSampler) gives the NVML utilization during the full-step blocks.
    """
    # lazy: inference imports torch; training modules import without it
    from actlab.policies.inference import chunk_latency_ms

    run = build_run(cfg, device)
    try:
        _block(run, warmup, None)  # allocator, autotuning, compile, graph capture, prefetch thread start
        fixed = run.next_batch()
        model_s, full_s, full_windows = [], [], []
        for _ in range(rounds):
            model_s.append(_block(run, steps, fixed) / steps)
            full_s.append(_block(run, steps, None, full_windows) / steps)
        util = _median_util(util_sampler, full_windows)
        prof = profile_step(lambda: run.step(fixed), run.device, steps=profile_steps)
        latency = chunk_latency_ms(run.policy, _inference_obs(run, fixed))
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
                "cuda_graphs": f"{cfg.cuda_graphs} -> {'captured' if run.graphed is not None else 'eager'}",
                "precision": precision,
                "profiler_counted": prof["counted"],
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
                "kernels_per_step": prof["kernels_per_step"],
                "launch_calls_per_step": _na(prof["launch_calls_per_step"]),
                "device_busy_frac": prof["device_busy_frac"],
                "dtype_casts_per_step": prof["dtype_casts_per_step"],
                "nvml_util_median_pct": _na(util),
                "inference_ms_per_chunk_eager": latency["eager_ms"],
                "inference_ms_per_chunk_captured": _na(latency["captured_ms"]),
            },
            "ratios": {"full_vs_model_only": full_ms / model_ms},
            "notes": [
                "model-only: one batch already on the device, step repeated; full: sample + gather + "
                "augment + step each time; blocks alternate so noise hits both",
                "step times: medians over blocks (fastest block beside them); data_stall_frac = 1 - median "
                "over adjacent block pairs of model_only/full (a negative value is measurement noise)",
                "gflops_per_step: model FLOPs of one forward + backward of the policy on one batch; "
                "achieved TFLOP/s = that / the median step time",
                f"kernels_per_step counts {prof['counted']} over {profile_steps} model-only steps under "
                "torch.profiler; device_busy_frac = union of their intervals / wall time (profiled steps "
                "are slower: their time is not reported); dtype_casts_per_step = aten::_to_copy on tensors",
                "inference_ms_per_chunk: median latency of predict_action_chunk at batch 1 (a sync before "
                "and after each call); captured = replayed from a CUDA graph (CUDA only)",
                "nvml_util_median_pct: NVML utilization.gpu during the full-step blocks"
                + ("" if util is not None else f" (n/a: {_no_util_reason(util_sampler)})"),
                *([run.graphs_off_reason] if run.graphs_off_reason else []),
                *notes,
            ],
        }
    finally:
        run.close()


def _no_util_reason(sampler) -> str:
    if sampler is None:
        return "no CUDA device"
    return sampler.reason or "no sample fell inside the timed blocks"


def _na(value: Any) -> Any:
    """``"n/a"`` for a value that does not exist on this machine (a CPU has no NVML, no CUDA graph)."""
    return "n/a" if value is None else value


def _count_step_flops(run, batch: dict[str, Any]) -> tuple[int, str]:
    """(FLOPs of one forward + backward of the bare policy on ``batch``, the matmul precision name).

    Counted under the step's autocast (the count does not depend on the dtype; the memory does).
    Gradients left by the count are dropped, and the global RNG is forked so the count draws no dropout
    or latent samples from the training streams.
    """
    import torch

    fork_devices = [run.device] if run.device.type == "cuda" else []
    with torch.random.fork_rng(devices=fork_devices), autocast(run.device, run.amp_dtype):
        flops = train_step_flops(run.policy, batch)
    return flops, precision_name(run.amp_dtype or torch.float32, run.device)


def _throughput(run, *, flops: int, precision: str, seconds: float, batch_size: int, peak_tflops):
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
    lerobot_python: str | None = None,
    lerobot_workers: int = 4,
    lerobot_steps: int = 30,
) -> dict[str, Any]:
    """``bench_train`` on ``dataset``, or on a synthetic dataset built in a temporary directory; with
    ``lerobot_python`` also lerobot's own ACT step on the same dataset, device and config (after actlab's
    run is closed, so the two never share the device)."""
    with tempfile.TemporaryDirectory(prefix="actlab-bench-train-") as tmp:
        if dataset:
            cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, path=str(dataset)))
        else:
            path = synth_for(cfg, Path(tmp) / "synth")
            data = dataclasses.replace(cfg.data, path=str(path), cache_dir=str(Path(tmp) / "cache"))
            cfg = dataclasses.replace(cfg, data=data)
        sampler = _util_sampler(cfg, device)
        try:
            result = bench_train(
                cfg, steps=steps, rounds=rounds, device=device, peak_tflops=peak_tflops, util_sampler=sampler
            )
            if not dataset:
                result["config"]["dataset"] = "synthetic (temporary, 8 episodes x 60 frames)"
            if lerobot_python:
                _add_lerobot(result, cfg, lerobot_python, lerobot_workers, lerobot_steps, sampler)
        finally:
            if sampler is not None:
                sampler.close()
        return result


def _util_sampler(cfg: TrainConfig, device: Any):
    """An NVML sampler for the training GPU (None off CUDA: nothing to sample)."""
    import torch

    dev = resolve_device(cfg.device if device is None else str(device), field="device")
    if dev.type != "cuda":
        return None
    try:  # NVML numbers GPUs by PCI bus, CUDA by speed and CUDA_VISIBLE_DEVICES: torch maps one to the other
        index = torch.cuda._get_nvml_device_index(dev)
    except Exception:
        index = dev.index or 0
    return UtilSampler(index)


def _add_lerobot(result, cfg, python, workers, steps, sampler) -> None:
    """lerobot's ACT step on the same dataset and device, its samples/s and NVML utilization beside ours."""
    import torch

    if result["device"].startswith("cuda"):
        torch.cuda.empty_cache()  # actlab's run is closed: give its cached memory back before lerobot runs
    lr = run_lerobot_step(
        python,
        cfg.data.path,
        cfg,
        device=result["device"],
        amp=result["config"]["amp"] != "off",
        workers=workers,
        steps=steps,
        threads=torch.get_num_threads() if result["device"] == "cpu" else 0,
    )
    util = sampler.median(lr["timed_start"], lr["timed_end"]) if sampler is not None else None
    m = result["metrics"]
    m["lerobot_samples_per_s"] = lr["samples_per_s"]
    m["lerobot_step_ms"] = lr["step_ms"]
    m["lerobot_data_wait_ms"] = lr["data_ms"]
    m["lerobot_nvml_util_median_pct"] = _na(util)
    result["ratios"]["full_vs_lerobot_samples_per_s"] = m["samples_per_s_full"] / lr["samples_per_s"]
    result["config"]["lerobot"] = (
        f"lerobot {lr['lerobot_version']} (torch {lr['torch_version']}), {lr['workers']} DataLoader workers, "
        f"{lr['steps']} timed steps, amp {lr['amp']}, video {lr['video_backend']}, {lr['params']:,} params"
    )
    result["notes"].append(
        "lerobot: its own dataset/DataLoader (video decoded per sample), policy, processors, AdamW preset, "
        "Accelerator and update_policy, timed in a child process after actlab's run was closed"
    )
    result["notes"] += [f"lerobot: {n}" for n in lr["notes"]]
