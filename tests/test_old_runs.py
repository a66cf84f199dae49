"""Runs written by the previous code (tests/fixtures/old_runs, made by a8f039d) still resume, and continue
exactly as that code's own --resume of them did (tests/fixtures/old_runs/expected.json)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from actlab.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "old_runs"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


# Both resumes run in this process (`actlab.cli.main`): neither is killed, and a process of its own would
# only add its start (~5 s of imports on 2 cores). The cache is the test's own, as a fresh process had it.


@pytest.mark.timeout(300)
def test_a_training_run_of_the_previous_code_resumes_on_the_same_curve(
    tiny_dataset, tmp_path, monkeypatch, capsys
):
    run = tmp_path / "train"
    shutil.copytree(FIXTURES / "train_a8f039d", run)
    exp = EXPECTED["train"]
    monkeypatch.setenv("ACTLAB_CACHE", str(tmp_path / "cache"))
    args = [*exp["resume_args"], "--set", "log.plot=false", "--json"]  # log.* may change on a resume
    code = main(["train", "--out", str(run), "--resume", "--dataset", str(tiny_dataset), *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["step"] == 4
    from actlab.lifecycle.metrics_log import read_metrics

    losses = {str(row["step"]): row["loss"] for row in read_metrics(run) if "loss" in row}
    assert losses == pytest.approx(exp["loss_by_step"], rel=1e-5)
    assert json.loads((run / "checkpoints" / "last.json").read_text())["step"] == 4


@pytest.mark.timeout(300)
def test_an_rl_run_of_the_previous_code_resumes_to_the_same_weights(tmp_path, monkeypatch, capsys):
    run = tmp_path / "rl"
    shutil.copytree(FIXTURES / "rl_a8f039d", run)
    exp = EXPECTED["rl"]
    monkeypatch.setenv("ACTLAB_CACHE", str(tmp_path / "cache"))
    code = main(["rl", "train", "--out", str(run), "--resume", *exp["resume_args"], "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["env_steps"] == exp["final_env_steps"]
    from safetensors.torch import load_file

    last = json.loads((run / "checkpoints" / "last.json").read_text())
    agent = load_file(str(run / "checkpoints" / last["path"] / "agent.safetensors"))
    sums = {k: float(v.double().sum()) for k, v in sorted(agent.items())}
    assert sums.keys() == exp["agent_tensor_sums"].keys()
    assert sums == pytest.approx(exp["agent_tensor_sums"], rel=1e-6, abs=1e-9)
