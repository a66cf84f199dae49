"""bench train's kernel counts, busy share, inference latency, NVML and the lerobot side by side."""

import dataclasses
import os
import shutil
from pathlib import Path

import pytest
import torch

from actlab.profiling.kernels import summarize_events
from actlab.profiling.nvml import UtilSampler
from actlab.training.config import apply_train_overrides
from actlab.training.lerobot_bench import lerobot_act_fields
from actlab.training.presets import get_preset

# The python of a separate environment with lerobot 0.6.1 from PyPI (pip install
# "lerobot[dataset,training]==0.6.1"); the default is where the development machine keeps one.
LEROBOT_PYTHON = os.environ.get("ACTLAB_LEROBOT_PYTHON", "/work/lerobot-venv/bin/python")


# one torch thread in every test here (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _ev(name, device, start, end, top=True, leaf=True, numel=None):
    return {"name": name, "device": device, "start": start, "end": end, "top": top, "leaf": leaf,
            "numel": numel}  # fmt: skip


def test_cuda_counts_kernels_launches_and_the_busy_union():
    events = [
        _ev("cudaLaunchKernel", "cpu", 0, 1),
        _ev("cudaGraphLaunch", "cpu", 1, 2),
        _ev("aten::_to_copy", "cpu", 0, 1, numel=1024),  # a weight cast
        _ev("aten::_to_copy", "cpu", 0, 1, numel=1),  # a Python scalar wrapped: not a cast of data
        _ev("gemm", "cuda", 10, 30),
        _ev("relu", "cuda", 20, 40),  # overlaps the gemm (another stream): counted once in the union
        _ev("copy", "cuda", 60, 70),
    ]
    s = summarize_events(events, steps=2, window_us=100.0, cuda=True)
    assert s["kernels_per_step"] == 1.5 and s["launch_calls_per_step"] == 1.0
    assert s["device_busy_frac"] == pytest.approx(0.4)  # (10..40) + (60..70) of 100 us
    assert s["dtype_casts_per_step"] == 0.5 and "CUDA kernels" in s["counted"]


def test_cpu_counts_the_operators_that_do_the_work():
    events = [
        _ev("aten::linear", "cpu", 0, 10, top=True, leaf=False),
        _ev("aten::addmm", "cpu", 1, 9, top=False, leaf=True),
        _ev("aten::relu", "cpu", 20, 25, top=True, leaf=True),
        _ev("Optimizer.step#AdamW.step", "cpu", 30, 40, top=True, leaf=False),
    ]
    s = summarize_events(events, steps=1, window_us=50.0, cuda=False)
    assert s["kernels_per_step"] == 2 and s["launch_calls_per_step"] is None
    assert s["device_busy_frac"] == pytest.approx(15 / 50)  # top-level aten ops only
    assert "CPU torch operators" in s["counted"]


def test_nvml_sampler_without_a_gpu_says_why():
    with UtilSampler(0, interval_s=0.01) as s:
        if s.reason is None:
            pytest.skip("this machine has NVML and a GPU")
        assert s.median(0, 1e12) is None and s.samples == []


def test_lerobot_gets_the_same_act_fields_and_the_differences_are_said():
    cfg = get_preset("so101_sim")
    fields, notes = lerobot_act_fields(cfg)
    assert fields["vision_backbone"] == "resnet18" and fields["dim_model"] == 512
    assert fields["chunk_size"] == 100 and fields["n_decoder_layers"] == 1 and fields["use_vae"] is True
    assert fields["optimizer_lr"] == cfg.optim.lr and fields["optimizer_lr_backbone"] == cfg.optim.backbone_lr
    assert any("every camera" in n for n in notes)
    tiny_fields, tiny_notes = lerobot_act_fields(get_preset("tiny"))
    assert tiny_fields["vision_backbone"] == "resnet18" and any("cnn_small" in n for n in tiny_notes)
    rel = apply_train_overrides(get_preset("so101_sim"), ["policy.type=act_relative"])
    assert any("act_relative" in n for n in lerobot_act_fields(rel)[1])


def test_bench_train_reports_kernels_busy_share_and_inference_latency(tiny_dataset):
    from actlab.training.bench import run_bench

    cfg = apply_train_overrides(get_preset("tiny"), ["num_threads=0"])
    result = run_bench(cfg, str(tiny_dataset), steps=1, rounds=1)
    m = result["metrics"]
    assert m["kernels_per_step"] > 100 and 0 < m["device_busy_frac"] <= 1
    assert m["dtype_casts_per_step"] >= 0 and m["launch_calls_per_step"] == "n/a"
    assert "CPU torch operators" in result["config"]["profiler_counted"]
    assert m["inference_ms_per_chunk_eager"] > 0 and m["inference_ms_per_chunk_captured"] == "n/a"
    assert m["nvml_util_median_pct"] == "n/a" and any("no CUDA device" in n for n in result["notes"])
    assert result["config"]["cuda_graphs"] == "auto -> eager"


def test_bf16_autocast_casts_are_counted(tiny_dataset):
    """The profiler sees autocast's weight casts (what the issue measured: 481 per step on an H100)."""
    from actlab.profiling.kernels import profile_step
    from actlab.training import with_dataset
    from actlab.training.build import build_run

    cfg = apply_train_overrides(with_dataset(get_preset("tiny"), tiny_dataset), ["num_threads=0"])
    counts = {}
    for amp in ("off", "bf16"):
        run = build_run(dataclasses.replace(cfg, amp=amp))
        try:
            batch = run.next_batch()
            run.step(batch)
            counts[amp] = profile_step(lambda run=run, batch=batch: run.step(batch), torch.device("cpu"), 1)
        finally:
            run.close()
    assert counts["bf16"]["dtype_casts_per_step"] > counts["off"]["dtype_casts_per_step"] + 20


@pytest.mark.slow
@pytest.mark.skipif(not Path(LEROBOT_PYTHON).exists(), reason=f"no lerobot venv at {LEROBOT_PYTHON}")
def test_bench_train_runs_lerobot_s_own_step_side_by_side(make_dataset, tmp_path):
    """lerobot 0.6.1's ACT step on the same (real, lerobot-readable) dataset, in its own interpreter."""
    from actlab.training.bench import run_bench

    data = make_dataset(tmp_path, episodes=2, length=30, cameras={"top": (64, 64)})
    cfg = apply_train_overrides(
        get_preset("tiny"),
        ["num_threads=0", "data.image_size=null", "policy.vision_backbone=resnet18", "batch_size=2",
         "policy.pretrained_backbone_weights=null",
         f"data.cache_dir={tmp_path / 'cache'}"],
    )  # fmt: skip
    result = run_bench(cfg, str(data), steps=1, rounds=1, lerobot_python=LEROBOT_PYTHON,
                       lerobot_workers=0, lerobot_steps=2)  # fmt: skip
    m = result["metrics"]
    assert m["lerobot_samples_per_s"] > 0 and m["lerobot_nvml_util_median_pct"] == "n/a"
    assert result["ratios"]["full_vs_lerobot_samples_per_s"] == pytest.approx(
        m["samples_per_s_full"] / m["lerobot_samples_per_s"]
    )
    assert "lerobot 0.6.1" in result["config"]["lerobot"]
    assert not any("cnn_small" in n for n in result["notes"])  # the same model on both sides
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)
