"""The utilization timeline (actlab.viz.monitor) on synthetic samples, with and without GPUs."""

from __future__ import annotations

import pytest

from actlab.errors import ActlabError
from actlab.profiling.monitor import BASE_COLUMNS
from actlab.profiling.nvml import GPU_FIELDS, gpu_columns
from actlab.profiling.summary import summarize
from actlab.viz.monitor import check_plot_path, plot_monitor


def _gpu_run(n: int = 60):
    columns = [*BASE_COLUMNS, *gpu_columns(1)]
    rows = []
    for k in range(n):
        util = 0.0 if k < 10 else 85.0 + (k % 5)
        row = ["t", 1.9e9 + k, 0.5 * k, 120.0, 3000.0, 5, 30.0, 9000.0]
        vals = {
            "util_pct": util,
            "mem_util_pct": util / 3,
            "mem_used_mib": 500.0 + 200 * min(k, 20),
            "mem_total_mib": 24576.0,
            "sm_clock_mhz": 1800.0,
            "power_w": 250.0,
            "temp_c": 60.0,
        }
        rows.append(row + [vals[f] for f in GPU_FIELDS])
    return columns, rows


def test_plot_with_gpu(tmp_path):
    columns, rows = _gpu_run()
    summary = summarize(
        columns,
        rows,
        command=["actlab", "train", "--preset", "so101_sim"],
        exit_code=0,
        gpu_names=["NVIDIA L4"],
    )
    path = plot_monitor(columns, rows, tmp_path / "t.png", summary)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    svg = plot_monitor(columns, rows, tmp_path / "t.svg", summary).read_text()
    for text in ("GPU utilization", "warm-up (excluded)", "steady median", "memory (GiB)", "exit 0"):
        assert text in svg, text


def test_plot_without_gpu_and_without_summary(tmp_path):
    columns = list(BASE_COLUMNS)
    rows = [["t", 1.9e9 + k, 0.2 * k, 95.0, 100.0 + k, 1, 50.0, 4000.0] for k in range(12)]
    svg = plot_monitor(columns, rows, tmp_path / "c.svg").read_text()
    assert "GPU utilization" not in svg and "CPU (cores busy)" in svg and "memory (MiB)" in svg


def test_plot_path_is_checked():
    with pytest.raises(ActlabError, match="unsupported plot format"):
        check_plot_path("x.gif")
    assert check_plot_path("x.PNG").name == "x.PNG"
