"""Fixtures shared by the slow tests against the real lerobot (each module has its own `work` directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from procs import run_cli


@pytest.fixture(scope="module")
def sim_data(work) -> Path:
    """2 scripted-expert episodes, top + wrist cameras at 64 px (actlab sim record), in the module's work."""
    out = work / "sim"
    res = run_cli(
        "sim", "record", "--episodes", "2", "--image-size", "64", "--workers", "1", "--out", out, timeout=600
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return out
