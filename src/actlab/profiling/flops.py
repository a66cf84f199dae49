"""Model FLOPs and model FLOPs utilization (MFU).

FLOPs of one training step are counted on the real model and batch with
``torch.utils.flop_counter.FlopCounterMode`` (matmuls, convolutions and attention, forward and backward;
elementwise ops are not counted, as is usual for MFU). MFU is the achieved FLOP/s over the device's peak
dense FLOP/s in the precision the matmuls run in, taken from :data:`PEAK_TFLOPS` by the torch device name,
or measured with :func:`measure_peak_tflops`, or given by the user.

On a CPU there is no tabled peak: FLOP/s is reported and MFU is left out unless a peak is passed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from actlab.profiling.timing import time_callable

# Peak dense (no structured sparsity) TFLOP/s from the vendors' datasheets. bf16/fp16/tf32 are tensor-core
# rates with fp32 accumulation (what torch uses); fp32 is the non-tensor-core rate. None: not supported.
# Keys are matched case-insensitively as whole words in torch.cuda.get_device_name(); longest key first.
PEAK_TFLOPS: dict[str, dict[str, float | None]] = {
    "H200 NVL": {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0},
    "H200": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},
    "H100 NVL": {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0},
    "H100 PCIe": {"bf16": 756.5, "fp16": 756.5, "tf32": 378.0, "fp32": 51.2},
    "H100 80GB HBM3": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},  # H100 SXM5
    "H100 SXM": {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},
    "A100": {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},  # SXM4 and PCIe alike
    "L40S": {"bf16": 362.1, "fp16": 362.1, "tf32": 183.0, "fp32": 91.6},
    "L40": {"bf16": 181.0, "fp16": 181.0, "tf32": 90.5, "fp32": 90.5},
    "L4": {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3},
    "A10G": {"bf16": 70.0, "fp16": 70.0, "tf32": 35.0, "fp32": 35.0},  # AWS G5 variant of the A10
    "A10": {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2},
    "RTX A6000": {"bf16": 154.8, "fp16": 154.8, "tf32": 77.4, "fp32": 38.7},
    "RTX 4090": {"bf16": 165.2, "fp16": 165.2, "tf32": 82.6, "fp32": 82.6},
    "RTX 3090": {"bf16": 71.0, "fp16": 71.0, "tf32": 35.6, "fp32": 35.6},
    "V100": {"bf16": None, "fp16": 125.0, "tf32": None, "fp32": 15.7},
    "T4": {"bf16": None, "fp16": 65.0, "tf32": None, "fp32": 8.1},
}

PRECISIONS = ("bf16", "fp16", "tf32", "fp32")


def _cpu_attention_formulas() -> dict[Any, Callable[..., int]]:
    """FLOP formulas for the CPU fused attention kernels, which FlopCounterMode does not know.

    ``F.scaled_dot_product_attention`` on a CPU runs ``_scaled_dot_product_flash_attention_for_cpu``
    (and its backward); without these entries the attention matmuls of every policy count as 0 on CPU.
    The formulas are torch's own ones for the CUDA kernels (2 matmuls forward, 5 backward).
    """
    import torch
    from torch.utils import flop_counter

    aten = torch.ops.aten

    def forward(query, key, value, *args, out_shape=None, **kwargs) -> int:
        return flop_counter.sdpa_flop_count(query, key, value)

    def backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
        return flop_counter.sdpa_backward_flop_count(grad_out, query, key, value)

    out: dict[Any, Callable[..., int]] = {}
    for name, fn in (
        ("_scaled_dot_product_flash_attention_for_cpu", forward),
        ("_scaled_dot_product_flash_attention_for_cpu_backward", backward),
    ):
        op = getattr(aten, name, None)
        if op is not None and op not in flop_counter.flop_registry:
            out[op] = fn
    return out


def count_flops(step: Callable[[], Any]) -> int:
    """FLOPs performed by ``step()`` (e.g. a forward and a backward) as counted by FlopCounterMode
    (with the CPU attention kernels added, see :func:`_cpu_attention_formulas`)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping=_cpu_attention_formulas()) as counter:
        step()
    return int(counter.get_total_flops())


def train_step_flops(policy: Any, batch: dict[str, Any]) -> int:
    """FLOPs of one forward + backward of ``policy`` on ``batch`` (the real model, the real batch).

    Gradients produced by the count are dropped afterwards (set to None) so that calling this before a
    training run changes nothing.
    """

    def step() -> None:
        loss, _metrics = policy(batch)
        loss.backward()

    try:
        return count_flops(step)
    finally:
        for p in policy.parameters():
            p.grad = None


def precision_name(dtype: Any, device: Any = None) -> str:
    """The peak-table column for matmuls in ``dtype`` (``torch.bfloat16`` -> ``"bf16"``; fp32 on CUDA
    becomes ``"tf32"`` when torch is allowed to use TF32 tensor cores for matmuls)."""
    import torch

    if isinstance(dtype, str) and dtype in PRECISIONS:
        return dtype
    if dtype in (torch.bfloat16, "bfloat16"):
        return "bf16"
    if dtype in (torch.float16, "float16", "half"):
        return "fp16"
    on_cuda = getattr(device, "type", str(device)) == "cuda"
    if on_cuda and torch.get_float32_matmul_precision() != "highest":
        return "tf32"
    return "fp32"


def lookup_peak_tflops(device_name: str, precision: str) -> tuple[float | None, str | None]:
    """(peak TFLOP/s, table key) for a device name such as ``"NVIDIA H100 80GB HBM3"``; (None, None)
    when the device is not in the table, (None, key) when it lacks that precision."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    name = device_name.lower()
    for key in sorted(PEAK_TFLOPS, key=len, reverse=True):
        # Whole-word match: "A10" must not match "A100" or "A10G", nor "L4" match "L40S".
        if re.search(rf"(?<![a-z0-9]){re.escape(key.lower())}(?![a-z0-9])", name):
            return PEAK_TFLOPS[key][precision], key
    return None, None


def measure_peak_tflops(device: Any, dtype: Any, size: int = 8192, iters: int = 20) -> float:
    """Achieved TFLOP/s of a large square matmul on ``device``: a measured stand-in for the peak."""
    import torch

    a = torch.randn(size, size, device=device, dtype=dtype)  # (N, N)
    b = torch.randn(size, size, device=device, dtype=dtype)  # (N, N)
    seconds = time_callable(lambda: a @ b, device, warmup=3, iters=iters)
    return 2.0 * size**3 / seconds / 1e12


def device_name(device: Any) -> str:
    """The torch name of ``device`` (``torch.cuda.get_device_name``), or ``"cpu"``."""
    if getattr(device, "type", str(device)) == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    return str(getattr(device, "type", device))


def throughput_metrics(
    *,
    flops_per_step: int | None,
    seconds_per_step: float,
    batch_size: int,
    device: Any,
    precision: str,
    peak_tflops: float | None = None,
    peak_source: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Metrics for a bench result: samples/s, achieved TFLOP/s, peak and MFU, plus notes saying where
    the peak came from or why MFU is missing. ``peak_tflops`` (measured or given) overrides the table."""
    metrics: dict[str, Any] = {
        "samples_per_s": batch_size / seconds_per_step,
        "step_ms": 1000.0 * seconds_per_step,
    }
    notes: list[str] = []
    if flops_per_step is None:
        notes.append("FLOPs not counted, so no FLOP/s or MFU")
        return metrics, notes
    achieved = flops_per_step / seconds_per_step / 1e12
    metrics["gflops_per_step"] = flops_per_step / 1e9
    metrics["achieved_tflops"] = achieved
    name = device_name(device)
    if peak_tflops is None:
        peak_tflops, key = (None, None)
        if getattr(device, "type", str(device)) == "cuda":
            peak_tflops, key = lookup_peak_tflops(name, precision)
        if peak_tflops is not None:
            peak_source = f"datasheet peak for {key} ({precision}, dense)"
        elif getattr(device, "type", str(device)) != "cuda":
            notes.append(
                f"no MFU on {name}: a CPU has no tabled peak; pass a measured peak (e.g. bench train "
                "--peak-tflops) to get one"
            )
        elif key is not None:
            notes.append(f"no MFU: the table has no {precision} peak for {key}; pass a measured peak")
        else:
            notes.append(f"no MFU: {name!r} is not in the peak table; pass a measured peak")
    if peak_tflops is not None:
        metrics["peak_tflops"] = peak_tflops
        metrics["mfu"] = achieved / peak_tflops
        notes.append(f"MFU against {peak_source or 'the given peak'}: {peak_tflops:g} TFLOP/s")
    notes.append("FLOPs counted with torch FlopCounterMode: matmuls, convolutions, attention (fwd + bwd)")
    return metrics, notes
