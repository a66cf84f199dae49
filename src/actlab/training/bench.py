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

With ``compare_features`` (a frozen backbone, whose features the run caches once per stored frame), a
third block joins the alternation: the model-only step on the same samples given as images, so the
frozen encoder runs inside every step, which is what training costs without the feature cache.
"""

from __future__ import annotations

import dataclasses
import statistics
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
from actlab.utils.io import scratch_dir
from actlab.utils.threads import keeps_torch_threads


def synth_for(cfg: TrainConfig, out: Path, episodes: int = 8, length: int = 60) -> Path:
    """A real LeRobot v3 dataset (AV1 video) with the cameras and dimensions the config's policy expects."""
    # two cameras named like `actlab data convert`'s when the policy fuses cameras (gated needs two)
    default = ("observation.images.top",)
    if getattr(cfg.policy, "camera_fusion", "tokens") != "tokens":
        default = ("observation.images.left", "observation.images.right")
    keys = list(getattr(cfg.policy, "cameras", ()) or default)
    size = cfg.data.image_size or 64
    size += size % 2  # yuv420p needs even sizes
    cameras = {k.removeprefix("observation.images."): (size, size) for k in keys}
    dim = 14 if cfg.name.startswith("aloha") else 6
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


def _image_batch(run, batch: dict[str, Any]) -> dict[str, Any]:
    """``batch``'s samples with the camera images in place of their cached features (prepared for the
    step as the trainer prepares images, without augmentation): the frozen encoder then runs in the step."""
    # lazy: DeviceData may import torch (actlab.datasets keeps it lazy); training modules import without it
    from actlab.datasets import DeviceData
    from actlab.errors import ActlabError
    from actlab.training.augment import prepare_images

    if not run.policy.config.freeze_backbone or not any(k.endswith(FEATURES_SUFFIX) for k in batch):
        raise ActlabError(
            "--compare-features compares cached backbone features with the backbone run in every step, "
            "but this run caches no features",
            field="policy.freeze_backbone",
            expected="a frozen backbone and at least one camera",
            found=f"freeze_backbone={run.policy.config.freeze_backbone}, cameras {run.image_keys or 'none'}",
            fix="--set policy.freeze_backbone=true (the ViT backbones are frozen by default)",
        )
    deltas = {k: v for k, v in run.policy.delta_indices.items() if k in run.image_keys}
    images = DeviceData(run.dataset, run.store, deltas, run.device, frames_on_device=False).gather(
        batch["index"]
    )
    raw = {k: v for k, v in batch.items() if not k.endswith(FEATURES_SUFFIX + "_is_pad")}
    raw = {k: v for k, v in raw.items() if not k.endswith(FEATURES_SUFFIX)}
    raw.update({k: v for k, v in images.items() if k != "index"})
    return prepare_images(raw, run.image_keys, None, None, run.cfg.channels_last)


@keeps_torch_threads
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
    compare_features: bool = False,
) -> dict[str, Any]:
    """Measure model-only and full step times for ``cfg`` (``data.path`` set); returns a report dict.

    ``peak_tflops`` (e.g. from ``measure_peak_tflops``) replaces the datasheet peak for MFU, and gives
    one where the table has none (a CPU, an unlisted GPU). ``util_sampler`` (a profiling.nvml
    UtilSampler) gives the NVML utilization during the full-step blocks. ``compare_features`` adds the
    step with the frozen encoder run every step (images instead of cached features), same samples.
    """
    # lazy: inference imports torch; training modules import without it
    from actlab.policies.inference import chunk_latency_ms

    run = build_run(cfg, device)
    try:
        _block(run, warmup, None)  # allocator, autotuning, compile, graph capture, prefetch thread start
        fixed = run.next_batch()
        with_images = _image_batch(run, fixed) if compare_features else None
        if with_images is not None:
            _block(run, 1, with_images)  # its own first-call costs (allocator, autotuning) stay out
        model_s, full_s, full_windows, encoder_s = [], [], [], []
        for _ in range(rounds):
            model_s.append(_block(run, steps, fixed) / steps)
            full_s.append(_block(run, steps, None, full_windows) / steps)
            if with_images is not None:
                encoder_s.append(_block(run, steps, with_images) / steps)
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
        features = _features_comparison(run, model_s, encoder_s, with_images)
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
                **features["config"],
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
                **features["metrics"],
            },
            "ratios": {"full_vs_model_only": full_ms / model_ms, **features["ratios"]},
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
                *features["notes"],
                *notes,
            ],
        }
    finally:
        run.close()


def _features_comparison(run, model_s: list[float], encoder_s: list[float], with_images) -> dict[str, Any]:
    """Report entries of the cached-features vs encoder-every-step comparison (empty when not asked)."""
    out: dict[str, Any] = {"config": {}, "metrics": {}, "ratios": {}, "notes": []}
    if with_images is None:
        return out
    cfg = run.policy.config
    n_frames = sum(
        int(v.shape[0]) * (int(v.shape[1]) if v.ndim == 5 else 1)
        for k, v in with_images.items()
        if k in run.image_keys
    )
    out["config"]["backbone"] = f"{cfg.vision_backbone} (frozen), {n_frames} frames per batch"
    weights = getattr(cfg, "pretrained_backbone_weights", None)
    if weights is None:
        out["config"]["backbone"] += ", random weights (timing only)"
    cached_ms, every_ms = 1000 * statistics.median(model_s), 1000 * statistics.median(encoder_s)
    out["metrics"] = {
        "cached_features_step_ms": cached_ms,
        "encoder_every_step_ms": every_ms,
        "encoder_every_step_ms_fastest": 1000 * min(encoder_s),
    }
    # adjacent blocks see the same machine load: the median of their ratios is robust on a shared machine
    out["ratios"]["encoder_every_step_vs_cached"] = statistics.median(
        e / m for e, m in zip(encoder_s, model_s)
    )
    out["notes"].append(
        "cached_features_step_ms = model_only_step_ms (the frozen backbone's features computed once per "
        "stored frame, gathered by index); encoder_every_step_ms: the same samples as images, the frozen "
        "backbone run inside every step (no gradient through it); blocks alternate with the others"
    )
    return out


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


@keeps_torch_threads
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
    compare_features: bool = False,
) -> dict[str, Any]:
    """``bench_train`` on ``dataset``, or on a synthetic dataset built in a temporary directory; with
    ``lerobot_python`` also lerobot's own ACT step on the same dataset, device and config (after actlab's
    run is closed, so the two never share the device)."""
    # scratch_dir: a SIGKILLed run left its synthetic dataset in /tmp for good; the next run removes it
    with scratch_dir("actlab-bench-train") as tmp:
        if dataset:
            cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, path=str(dataset)))
        else:
            path = synth_for(cfg, Path(tmp) / "synth")
            data = dataclasses.replace(cfg.data, path=str(path), cache_dir=str(Path(tmp) / "cache"))
            cfg = dataclasses.replace(cfg, data=data)
        sampler = _util_sampler(cfg, device)
        try:
            result = bench_train(
                cfg,
                steps=steps,
                rounds=rounds,
                device=device,
                peak_tflops=peak_tflops,
                util_sampler=sampler,
                compare_features=compare_features,
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
