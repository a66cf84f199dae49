"""`actlab find-batch-size` end to end on CPU: real training steps of the tiny preset, real RSS."""

from __future__ import annotations

import json

import pytest

from actlab.cli import main
from actlab.training.batch_probe import CpuProbe, load_config

MIB = 1024 * 1024


def test_finds_the_largest_fitting_batch_of_the_tiny_preset(tiny_dataset, capsys):
    cfg = load_config("tiny", str(tiny_dataset), [], "cpu")
    base = CpuProbe(cfg, limit_bytes=64 * 1024 * MIB, steps=1)(16)
    assert base.ok and base.memory_bytes > 50 * MIB, base
    # A budget (limit less the 10% margin) 60 MiB above what batch 16 needs: the boundary lands at a
    # hundred or two samples whatever this machine's baseline (torch import, dataset) happens to be.
    limit = int((base.memory_bytes + 60 * MIB) / 0.9)
    argv = ["find-batch-size", "--preset", "tiny", "--dataset", str(tiny_dataset), "--device", "cpu"]
    argv += [
        "--memory-limit",
        str(limit),
        "--start",
        "16",
        "--multiple-of",
        "16",
        "--tolerance",
        "0.1",
        "--steps",
        "1",
    ]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)

    assert out["measure"] == "RSS" and out["limit_bytes"] == limit
    budget = out["budget_bytes"]
    trials = {t["batch_size"]: t for t in out["trials"]}
    rec, fail = out["recommended"], out["first_fail"]
    assert rec is not None and rec >= 32 and rec % 16 == 0
    assert fail is not None and fail > rec and fail - rec <= max(16, 0.1 * rec)
    assert trials[rec]["fits"] and not trials[fail]["fits"]
    for b, t in trials.items():
        # Every verdict follows from its own measurement, and nothing above the answer fit.
        assert t["memory_bytes"] is not None
        assert t["fits"] == (t["ran"] and t["memory_bytes"] <= budget), t
        if b > rec:
            assert not t["fits"]
        if not t["ran"]:
            assert t["memory_bytes"] > limit and "past the limit" in t["detail"]
    # The doubling phase went past the boundary and was stopped by the RSS watchdog or the budget.
    assert max(trials) >= 2 * 16 and len(trials) <= 12


def test_cpu_needs_a_memory_limit(tiny_dataset, capsys):
    argv = ["find-batch-size", "--preset", "tiny", "--dataset", str(tiny_dataset), "--device", "cpu"]
    assert main(argv) == 2
    assert "--memory-limit" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--memory-limit", "lots"], "bad memory size"),
        (["--memory-limit", "1GiB", "--margin", "1.5"], "--margin"),
        (["--memory-limit", "1GiB", "--steps", "0"], "--steps"),
        (["--memory-limit", "1GiB", "--preset", "tiny_typo"], "did you mean 'tiny'"),
    ],
)
def test_bad_settings_fail_before_any_trial(tiny_dataset, capsys, extra, needle):
    argv = ["find-batch-size", "--preset", "tiny", "--dataset", str(tiny_dataset), "--device", "cpu", *extra]
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def test_missing_dataset(tmp_path, capsys):
    argv = [
        "find-batch-size",
        "--preset",
        "tiny",
        "--dataset",
        str(tmp_path / "nope"),
        "--memory-limit",
        "1GiB",
    ]
    assert main(argv) == 2
    assert "dataset not found" in capsys.readouterr().err


@pytest.mark.gpu
def test_finds_a_batch_on_the_gpu(tiny_dataset, capsys):
    # 2 GiB for the tiny preset: the boundary lies in the thousands; --max keeps the test short.
    argv = ["find-batch-size", "--preset", "tiny", "--dataset", str(tiny_dataset), "--device", "cuda"]
    argv += ["--memory-limit", "2GiB", "--start", "64", "--max", "1024", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["measure"] == "GPU memory reserved" and out["recommended"] is not None
    ran = sorted((t["batch_size"], t["memory_bytes"]) for t in out["trials"] if t["ran"])
    assert ran[-1][1] > ran[0][1] > 0  # reserved memory grows with the batch
