"""The shared bench result format: JSON round trip, table output, validation."""

from __future__ import annotations

import io
import json

import pytest

from actlab.profiling.report import check_result, emit, make_result


def _result():
    return make_result(
        "train",
        {"samples_per_s": 1234.5678, "mfu": 0.31, "phases_ms": {"data": 1.0, "fwd_bwd": 8.5}},
        device="cuda (NVIDIA H100 80GB HBM3)",
        config={"preset": "so101_sim", "batch_size": 64},
        ratios={"vs_baseline": 2.7},
        notes=["measured side by side in one run"],
    )


def test_json_round_trip():
    buf = io.StringIO()
    emit(_result(), as_json=True, stream=buf)
    back = json.loads(buf.getvalue())
    assert back == _result()
    assert list(back) == ["benchmark", "device", "config", "metrics", "ratios", "notes"]


def test_table_output():
    buf = io.StringIO()
    emit(_result(), as_json=False, stream=buf)
    text = buf.getvalue()
    assert text.startswith("actlab bench train  (device: cuda (NVIDIA H100 80GB HBM3))")
    assert "samples_per_s" in text and "1,235" in text and "vs_baseline" in text
    assert '{"data": 1.0, "fwd_bwd": 8.5}' in text  # nested values as compact JSON
    assert text.rstrip().endswith("note: measured side by side in one run")


def test_results_without_optional_sections_print():
    buf = io.StringIO()
    emit({"benchmark": "data", "metrics": {"samples_per_s": 10.0}}, as_json=False, stream=buf)
    assert "samples_per_s" in buf.getvalue() and "ratios" not in buf.getvalue()


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"benchmark": "x"},
        {"benchmark": "x", "metrics": []},
        {"benchmark": "x", "metrics": {}, "notes": "n"},
        {"benchmark": "", "metrics": {}},
        {"benchmark": "x", "metrics": {}, "ratios": [1]},
    ],
)
def test_malformed_results_are_refused(bad):
    with pytest.raises(ValueError):
        check_result(bad)
