"""Runs written by the previous code (tests/fixtures/old_runs, made by a8f039d) still resume, and continue
exactly as that code's own --resume of them did (tests/fixtures/old_runs/expected.json)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from procs import run_cli

FIXTURES = Path(__file__).parent / "fixtures" / "old_runs"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


def _env(tmp_path):
    import os

    return {**os.environ, "ACTLAB_CACHE": str(tmp_path / "cache")}


@pytest.mark.timeout(300)
def test_a_training_run_of_the_previous_code_resumes_on_the_same_curve(tiny_dataset, tmp_path):
    run = tmp_path / "train"
    shutil.copytree(FIXTURES / "train_a8f039d", run)
    exp = EXPECTED["train"]
    r = run_cli("train", "--out", run, "--resume", "--dataset", tiny_dataset, *exp["resume_args"], "--json",
                timeout=240, env=_env(tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["step"] == 4
    from actlab.lifecycle.metrics_log import read_metrics

    losses = {str(row["step"]): row["loss"] for row in read_metrics(run) if "loss" in row}
    assert losses == pytest.approx(exp["loss_by_step"], rel=1e-5)
    assert json.loads((run / "checkpoints" / "last.json").read_text())["step"] == 4


@pytest.mark.timeout(300)
def test_an_rl_run_of_the_previous_code_resumes_to_the_same_weights(tmp_path):
    run = tmp_path / "rl"
    shutil.copytree(FIXTURES / "rl_a8f039d", run)
    exp = EXPECTED["rl"]
    r = run_cli("rl", "train", "--out", run, "--resume", *exp["resume_args"], "--json", timeout=240,
                env=_env(tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["env_steps"] == exp["final_env_steps"]
    from safetensors.torch import load_file

    last = json.loads((run / "checkpoints" / "last.json").read_text())
    agent = load_file(str(run / "checkpoints" / last["path"] / "agent.safetensors"))
    sums = {k: float(v.double().sum()) for k, v in sorted(agent.items())}
    assert sums.keys() == exp["agent_tensor_sums"].keys()
    assert sums == pytest.approx(exp["agent_tensor_sums"], rel=1e-6, abs=1e-9)
