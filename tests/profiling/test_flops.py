"""FLOP counting, the peak table and MFU metrics (CPU; the GPU paths are marked)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from actlab.profiling.flops import (
    PEAK_TFLOPS,
    count_flops,
    lookup_peak_tflops,
    measure_peak_tflops,
    precision_name,
    throughput_metrics,
    train_step_flops,
)
from actlab.profiling.timing import time_callable


class _TwoLayer(nn.Module):
    """A plain module with the policy calling convention: forward(batch) -> (loss, metrics)."""

    def __init__(self, d_in: int, d_hidden: int) -> None:
        super().__init__()
        self.a = nn.Linear(d_in, d_hidden, bias=False)
        self.b = nn.Linear(d_hidden, 1, bias=False)

    def forward(self, batch):
        y = self.b(torch.relu(self.a(batch["x"])))  # (B, 1)
        loss = (y - batch["y"]).abs().mean()
        return loss, {"l1": loss.detach()}


def test_linear_forward_backward_flops_match_the_formula():
    B, i, o = 16, 32, 64
    layer = nn.Linear(i, o, bias=False)
    x = torch.randn(B, i, requires_grad=True)
    # forward 2*B*i*o; backward: grad of input and grad of weight, 2*B*i*o each.
    assert count_flops(lambda: layer(x).sum().backward()) == 3 * 2 * B * i * o


def test_attention_flops_are_counted_on_cpu_too():
    # Hand count: scores q @ k^T and out = p @ v are 2 matmuls of 2*L*S*E FLOPs per (batch, head) forward;
    # backward recomputes the scores and does 4 more (grad of p, v, q, k): 5 matmuls.
    B, H, L, S, E = 2, 3, 5, 7, 8
    q, k, v = (torch.randn(B, H, n, E, requires_grad=True) for n in (L, S, S))
    mm = 2 * B * H * L * S * E
    sdpa = torch.nn.functional.scaled_dot_product_attention
    assert count_flops(lambda: sdpa(q, k, v)) == 2 * mm
    assert count_flops(lambda: sdpa(q, k, v).sum().backward()) == 2 * mm + 5 * mm
    mask = torch.ones(L, S, dtype=torch.bool)  # a key-padding style mask takes the same kernel
    assert count_flops(lambda: sdpa(q, k, v, attn_mask=mask)) == 2 * mm


def test_conv_flops_match_the_formula():
    # forward 2*N*Cout*Ho*Wo*Cin*k*k; backward without an input gradient: the weight gradient, the same
    B, cin, cout, hw, kk = 2, 3, 4, 8, 3
    conv = nn.Conv2d(cin, cout, kk, padding=1, bias=False)
    x = torch.randn(B, cin, hw, hw)
    assert count_flops(lambda: conv(x).sum().backward()) == 2 * (2 * B * cout * hw * hw * cin * kk * kk)


def test_train_step_flops_counts_and_leaves_no_gradients():
    B, d_in, h = 8, 20, 30
    model = _TwoLayer(d_in, h)
    batch = {"x": torch.randn(B, d_in), "y": torch.randn(B, 1)}
    flops = train_step_flops(model, batch)
    # fwd: 2B(d_in*h + h); bwd: weight grads of both layers + input grad of the second layer.
    fwd = 2 * B * (d_in * h + h)
    bwd = 2 * B * (d_in * h + h) + 2 * B * h
    assert flops == fwd + bwd
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize(
    ("name", "precision", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "bf16", (989.4, "H100 80GB HBM3")),
        ("NVIDIA H100 PCIe", "bf16", (756.5, "H100 PCIe")),
        ("NVIDIA H200", "bf16", (989.4, "H200")),
        ("NVIDIA A100-SXM4-80GB", "tf32", (156.0, "A100")),
        ("NVIDIA A10G", "bf16", (70.0, "A10G")),
        ("NVIDIA A10", "bf16", (125.0, "A10")),
        ("NVIDIA L4", "fp32", (30.3, "L4")),
        ("NVIDIA L40S", "bf16", (362.1, "L40S")),
        ("NVIDIA GeForce RTX 4090", "bf16", (165.2, "RTX 4090")),
        ("Tesla T4", "bf16", (None, "T4")),
        ("Some Future GPU", "bf16", (None, None)),
    ],
)
def test_peak_lookup_matches_whole_names(name, precision, expected):
    assert lookup_peak_tflops(name, precision) == expected


def test_peak_table_is_consistent():
    for key, row in PEAK_TFLOPS.items():
        assert set(row) == {"bf16", "fp16", "tf32", "fp32"}, key
        for v in row.values():
            assert v is None or 1 < v < 5000, key
        if row["bf16"] and row["fp32"]:
            assert row["bf16"] >= row["fp32"], key  # tensor cores are never slower than plain fp32


def test_precision_name():
    assert precision_name(torch.bfloat16) == "bf16"
    assert precision_name(torch.float16) == "fp16"
    assert precision_name(torch.float32, torch.device("cpu")) == "fp32"
    assert precision_name("tf32") == "tf32"


def test_throughput_metrics_on_cpu_has_no_mfu_and_says_why():
    metrics, notes = throughput_metrics(
        flops_per_step=2 * 10**9,
        seconds_per_step=0.5,
        batch_size=64,
        device=torch.device("cpu"),
        precision="fp32",
    )
    assert metrics["samples_per_s"] == pytest.approx(128.0)
    assert metrics["achieved_tflops"] == pytest.approx(0.004)
    assert "mfu" not in metrics and any("no MFU on cpu" in n for n in notes)


def test_throughput_metrics_with_a_given_peak():
    metrics, notes = throughput_metrics(
        flops_per_step=10**12,
        seconds_per_step=0.01,
        batch_size=8,
        device="cpu",
        precision="fp32",
        peak_tflops=200.0,
        peak_source="measured matmul peak",
    )
    assert metrics["mfu"] == pytest.approx(0.5)
    assert any("measured matmul peak" in n for n in notes)


def test_measured_peak_and_timer_on_cpu():
    assert measure_peak_tflops("cpu", torch.float32, size=128, iters=3) > 0
    assert time_callable(lambda: sum(range(1000)), "cpu", warmup=1, iters=3) > 0
    with pytest.raises(ValueError):
        time_callable(lambda: None, "cpu", iters=0)


@pytest.mark.gpu
def test_gpu_peak_measurement_is_below_the_datasheet():
    dev = torch.device("cuda")
    measured = measure_peak_tflops(dev, torch.bfloat16)
    tabled, _ = lookup_peak_tflops(torch.cuda.get_device_name(dev), "bf16")
    assert measured > 1
    if tabled is not None:
        assert measured < 1.05 * tabled


def test_flops_of_the_real_tiny_policy_scale_with_the_batch(tiny_dataset):
    import dataclasses

    from actlab.training.batch_probe import load_config
    from actlab.training.build import build_run

    cfg = load_config("tiny", str(tiny_dataset), [], "cpu")
    counts = {}
    for b in (4, 8):
        run = build_run(dataclasses.replace(cfg, batch_size=b), "cpu")
        try:
            batch = run.next_batch()
            counts[b] = train_step_flops(run.policy, batch)
            assert train_step_flops(run.policy, batch) == counts[b]  # deterministic
            assert all(p.grad is None for p in run.policy.parameters())
        finally:
            run.close()
    assert counts[4] > 1e6
    assert counts[8] / counts[4] == pytest.approx(2.0, rel=0.02)  # every counted FLOP is per sample
