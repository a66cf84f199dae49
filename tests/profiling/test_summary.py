"""Warm-up detection and steady-part statistics on synthetic samples (pure functions)."""

from __future__ import annotations

import numpy as np
import pytest

from actlab.errors import ActlabError
from actlab.profiling.monitor import BASE_COLUMNS
from actlab.profiling.nvml import GPU_FIELDS, gpu_columns
from actlab.profiling.summary import (
    detect_warmup,
    fixed_warmup,
    parse_warmup,
    render_summary,
    stats,
    summarize,
)


def _rows(util_per_gpu: list[list[float | None]], interval: float = 0.5, rss: float = 500.0):
    """Synthetic monitor rows with ``len(util_per_gpu)`` GPUs."""
    n_gpu, n = len(util_per_gpu), len(util_per_gpu[0])
    columns = [*BASE_COLUMNS, *gpu_columns(n_gpu)]
    rows = []
    for k in range(n):
        row = [
            "2030-01-01T00:00:00.000+00:00",
            1.9e9 + k * interval,
            k * interval,
            150.0,
            rss + k,
            3,
            40.0,
            8000.0,
        ]
        for g in range(n_gpu):
            u = util_per_gpu[g][k]
            vals = {
                "util_pct": u,
                "mem_util_pct": None if u is None else u / 2,
                "mem_used_mib": 1000.0 + 10 * k,
                "mem_total_mib": 81559.0,
                "sm_clock_mhz": 1980.0,
                "power_w": 300.0,
                "temp_c": 50.0 + k % 7,
            }
            row += [vals[f] for f in GPU_FIELDS]
        rows.append(row)
    return columns, rows


def test_warmup_excludes_the_idle_start():
    util = [0.0] * 10 + [90.0, 95.0, 85.0] * 10  # 5 s idle, then busy
    columns, rows = _rows([util])
    s = summarize(columns, rows, gpu_names=["NVIDIA H100 80GB HBM3"])
    assert s["warmup"]["samples"] == 10 and s["warmup"]["seconds"] == pytest.approx(5.0)
    assert "50%" in s["warmup"]["rule"] and "excluded the first 5.00 s" in s["warmup"]["rule"]
    u = s["gpus"][0]["util_pct"]
    assert u["median"] == pytest.approx(90.0) and u["mean"] == pytest.approx(90.0)
    assert u["p10"] == pytest.approx(85.0) and u["p90"] == pytest.approx(95.0)
    assert s["steady"]["samples"] == 30
    assert s["gpus"][0]["peak_mem_used_mib"] == pytest.approx(1000 + 10 * 39)
    assert s["gpus"][0]["peak_mem_pct"] == pytest.approx(100 * 1390 / 81559)
    assert s["process"]["peak_rss_mib"] == pytest.approx(539)
    text = render_summary(s)
    assert "gpu0 utilization %" in text and "NVIDIA H100 80GB HBM3" in text
    assert "1,390 MiB of 81,559 MiB" in text and "not how full the SMs were" in text


def test_no_warmup_when_busy_from_the_start_or_idle_throughout():
    busy = summarize(*_rows([[80.0] * 20]))
    assert busy["warmup"]["samples"] == 0
    idle = summarize(*_rows([[0.0] * 20]))
    assert idle["warmup"]["samples"] == 0 and "stayed at 0" in idle["warmup"]["rule"]
    assert idle["gpus"][0]["util_pct"]["mean"] == 0.0


def test_too_few_samples_exclude_nothing():
    s = summarize(*_rows([[0.0, 0.0, 90.0]]))
    assert s["warmup"]["samples"] == 0 and "too few samples" in s["warmup"]["rule"]


def test_warmup_is_capped_at_half_the_run():
    # A signal that only rises in the last quarter: the median over the second half is 0... so use
    # a rise at 60% of the run with a high plateau: the first crossing is after the half mark.
    elapsed = np.arange(20, dtype=float)
    signal = np.array([0.0] * 12 + [100.0] * 8)
    w = detect_warmup(elapsed, signal, "GPU utilization")
    assert w["first_steady"] == 10 and "capped at half the run" in w["rule"]


def test_busiest_gpu_drives_the_warmup():
    g0 = [0.0] * 20  # an idle second GPU must not hide the busy one's warm-up
    g1 = [0.0] * 6 + [70.0] * 14
    s = summarize(*_rows([g0, g1]))
    assert s["warmup"]["samples"] == 6 and "busiest GPU" in s["warmup"]["rule"]
    assert len(s["gpus"]) == 2 and s["gpus"][1]["util_pct"]["median"] == pytest.approx(70.0)


def test_missing_gpu_readings_are_ignored():
    util = [None, 0.0, 0.0, None] + [60.0] * 16
    s = summarize(*_rows([util]))
    assert s["warmup"]["samples"] == 4
    assert s["gpus"][0]["util_pct"]["median"] == pytest.approx(60.0)


def test_fixed_warmup_and_whole_run_inside_it():
    columns, rows = _rows([[50.0] * 10])
    s = summarize(columns, rows, warmup=2.0)
    assert s["warmup"]["mode"] == "fixed" and s["warmup"]["samples"] == 4
    s = summarize(columns, rows, warmup=100.0)
    assert s["steady"]["samples"] == 10 and "whole run fell inside the warm-up" in s["notes"][0]
    assert fixed_warmup(np.arange(5.0), 0.0)["samples"] == 0


def test_no_gpu_summary_says_so():
    columns = list(BASE_COLUMNS)
    rows = [["t", 1.9e9 + k, float(k), 100.0, 200.0, 1, 50.0, 4000.0] for k in range(10)]
    s = summarize(
        columns, rows, gpu_reason="NVML Shared Library Not Found", exit_code=0, command=["sleep", "9"]
    )
    text = render_summary(s)
    assert "no GPU found (NVML: NVML Shared Library Not Found)" in text
    assert "`sleep 9` exited with code 0" in text
    assert s["gpus"] == [] and s["process"]["cpu_pct"]["median"] == 100.0


def test_stats_and_parse_warmup():
    assert stats(np.array([np.nan, np.nan])) is None
    s = stats(np.arange(11, dtype=float))
    assert (s["p10"], s["median"], s["p90"], s["mean"]) == (1.0, 5.0, 9.0, 5.0)
    assert parse_warmup("auto") == "auto" and parse_warmup("3.5") == 3.5 and parse_warmup(0) == 0.0
    for bad in ("-1", "soon", "inf"):
        with pytest.raises(ActlabError):
            parse_warmup(bad)
