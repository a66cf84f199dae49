"""Fixtures shared by the slow tests against the real lerobot (each module has its own `work` directory)."""

from __future__ import annotations

import os
import subprocess
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


@pytest.fixture(scope="module")
def lerobot_plugin() -> None:
    """Skips the module unless the lerobot venv ($ACTLAB_LEROBOT_PYTHON) has the plugin installed, asked of
    that venv's own python (as test_lerobot_plugin_real.py does)."""
    python = os.environ.get("ACTLAB_LEROBOT_PYTHON", "/work/lerobot-venv/bin/python")
    code = "import importlib.metadata as m; m.distribution('lerobot_policy_actlab')"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    if not os.path.exists(python) or subprocess.run([python, "-c", code], env=env, timeout=120).returncode:
        pytest.skip("no lerobot venv with the plugin (pip install . ./integrations/lerobot_policy_actlab)")
