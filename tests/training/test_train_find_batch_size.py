"""`actlab find-batch-size` end to end on CPU: real training steps of the tiny preset, real RSS."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from actlab.cli import main
from actlab.training.batch_probe import CpuProbe, load_config

MIB = 1024 * 1024


def test_finds_the_largest_fitting_batch_of_the_tiny_preset(tiny_dataset, capsys):
    cfg = load_config("tiny", str(tiny_dataset), [], "cpu")
    base = CpuProbe(cfg, limit_bytes=64 * 1024 * MIB, steps=1)(16)
    assert base.ok and base.memory_bytes > 50 * MIB, base
    # A budget (limit less the 10% margin) 30 MiB above what batch 16 needs: the boundary lands near a
    # hundred samples whatever this machine's baseline (torch import, dataset) happens to be (measured:
    # batch 32 +5 MiB, 96 +32, 112 +37 on top of 16's 344 MiB; 6 trials, where 60 MiB took 8 and twice
    # the time, its steps at batches up to 256).
    limit = int((base.memory_bytes + 30 * MIB) / 0.9)
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
    try:
        code = main(argv)
    except SystemExit as e:  # refused by argparse itself (an option's range is checked at parse time)
        code = e.code
    assert code == 2
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


def _fbs_argv(tiny_dataset, *extra: str) -> list[str]:
    argv = ["find-batch-size", "--preset", "tiny", "--dataset", str(tiny_dataset), "--device", "cpu"]
    return [*argv, "--start", "2", "--max", "2", "--steps", "1", *extra, "--json"]


def _fbs_json(tiny_dataset, capsys, *extra: str) -> tuple[int, dict]:
    code = main(_fbs_argv(tiny_dataset, *extra))
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def batch_2_auto(tiny_dataset) -> dict:
    """The search's JSON for batch 2 alone with frames_on_device=auto and a limit nothing reaches: one
    trial (a process of its own) that the two tests below both read, instead of one each."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(_fbs_argv(tiny_dataset, "--memory-limit", "64GiB")) == 0
    return json.loads(out.getvalue())


def test_the_frame_cache_counts_only_where_the_step_holds_it(tiny_dataset, capsys, batch_2_auto):
    # After the demo, the 1.7 GiB frame cache copied into RAM (frames_on_device=auto on CPU) was counted
    # against a 3 GiB limit: "even 1 exceeds the budget". auto is measured as the memmap and named in a note;
    # an explicit true is counted, and the trial says how much of its memory the frames were.
    frames = 3 * 40 * 3 * 32 * 32  # the tiny dataset's decoded frames (uint8)
    auto = batch_2_auto
    assert auto["trials"][0]["frames_bytes"] == 0
    assert any("not counted: the decoded frame cache" in n for n in auto["notes"]), auto["notes"]
    code, held = _fbs_json(
        tiny_dataset, capsys, "--memory-limit", "64GiB", "--set", "data.frames_on_device=true"
    )
    assert code == 0 and held["trials"][0]["frames_bytes"] == frames and held["notes"] == []
    t = held["trials"][0]
    assert 0 < t["before_step_bytes"] <= t["memory_bytes"]


def test_when_nothing_fits_it_says_what_used_the_budget(tiny_dataset, capsys, batch_2_auto):
    peak = batch_2_auto["trials"][0]["memory_bytes"]
    # A margin of 50% on a limit 20% above the peak: the trial runs to the end (the watchdog stops a
    # process only past the limit) and is over the budget.
    argv = ["find-batch-size", "--preset", "tiny", "--dataset", str(tiny_dataset), "--device", "cpu"]
    argv += ["--start", "2", "--max", "2", "--steps", "1", "--memory-limit", str(int(peak * 1.2))]
    assert main([*argv, "--margin", "0.5"]) == 1
    out = capsys.readouterr().out
    assert "no batch size fits: even batch 2 used" in out
    assert "MiB the built run before its first step" in out and "MiB the training steps" in out
    assert "fix:" in out and "--memory-limit" in out


def test_a_frame_copy_that_fills_the_budget_is_named_with_its_fix():
    from actlab.training.batch_size import Probe, SearchResult, Trial, render_search

    gib = 1024 * MIB
    p = Probe(1, ok=False, memory_bytes=3 * gib + 40 * MIB, frames_bytes=1791 * MIB, detail="stopped")
    result = SearchResult(limit_bytes=3 * gib, margin=0.1, trials=[Trial(p, False)], first_fail=1)
    text = render_search(result, "RSS")
    assert "1,791 MiB the decoded frame cache copied into memory" in text
    assert "the build alone passed the limit" in text
    assert "fix: --set data.frames_on_device=false" in text
