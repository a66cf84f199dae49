"""A shared CPU's slowdown is noticed and the cure said once (actlab.training.slowdown + the loop)."""

from __future__ import annotations

import re

import pytest
import torch

from actlab.cli import main
from actlab.lifecycle.metrics_log import read_metrics
from actlab.training.slowdown import SlowdownWatch, cure_applied

# The runs below are about the steps' threads and notes: no validation passes, no plot at the end.
QUIET = ["--set", "eval.every=0", "--set", "log.plot=false"]


def test_a_window_far_above_the_runs_steady_state_is_said_once():
    w = SlowdownWatch(cpus=2, threads=2)
    # warm-up window (slow, not judged), steady windows, then another job arrives: 50 ms -> 2.4 s
    said = [w.update(s, t, 1.5) for s, t in ((50, 0.9), (100, 0.05), (150, 0.06), (200, 2.4), (250, 2.5))]
    assert said[:3] == [None, None, None] and said[4] is None
    assert "at step 200: 2.40 s a step, 48x this run's steady 50 ms" in said[3]
    assert "OMP_WAIT_POLICY=PASSIVE" in said[3] and "num_threads=1" in said[3]


def test_a_busy_machine_is_said_before_the_steps_show_it_and_only_once():
    w = SlowdownWatch(cpus=2, threads=2)
    assert w.update(50, 0.05, 3.9) is None  # own 2 threads + 1.9 others: not beyond 2 CPUs
    note = w.update(100, 0.05, 4.5)
    assert note is not None and "load average 4.5 on 2 CPUs" in note and "OMP_WAIT_POLICY" in note
    assert w.update(150, 5.0, 9.0) is None


def test_noise_is_not_a_slowdown():
    w = SlowdownWatch(cpus=2, threads=2)
    assert all(w.update(s, t, 1.0) is None for s, t in enumerate([0.3, 0.08, 0.1, 0.09, 0.12, 0.2]))


def test_cure_applied():
    assert cure_applied({"OMP_WAIT_POLICY": "passive"}) and cure_applied({}, num_threads=1)
    assert not cure_applied({}, num_threads=2)


def test_training_on_a_busy_cpu_says_what_to_do(tiny_dataset, tmp_path, capsys, monkeypatch):
    import actlab.training.loop as loop

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setattr(loop, "load_1m", lambda: 64.0)  # the real value varies; the wiring is under test
    threads = torch.get_num_threads()
    argv = ["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(tmp_path / "run")]
    argv += ["--set", "steps=6", "--set", "log.every=2", "--set", "num_threads=2", "--device", "cpu"]
    argv += QUIET
    try:
        assert main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert err.count("OMP_WAIT_POLICY=PASSIVE") == 1 and "load average 64.0" in err
    rows = [r for r in read_metrics(tmp_path / "run") if "time_step_s" in r]
    assert rows and all(r["load_avg_1m"] == pytest.approx(64.0) for r in rows)


def test_thread_probe_times_each_count_in_turn_and_keeps_the_fastest():
    from actlab.utils.threads import ThreadProbe

    probe = ThreadProbe(candidates=(2, 1), rounds=3, warmup=1)
    assert probe.units == 7
    plan = [probe.threads_for(u) for u in range(probe.units)]
    assert plan == [2, 2, 1, 2, 1, 2, 1]  # warm-up at the first count, then interleaved
    # 2 threads spin on a busy CPU: 2.0 s a step; 1 thread 0.4 s (the measurements)
    seconds = {2: 2.0, 1: 0.4}
    decided = [probe.record(u, n, seconds[n] + 0.01 * u) for u, n in enumerate(plan)]
    assert decided[:-1] == [None] * 6 and decided[-1] == 1 and probe.chosen == 1
    assert probe.threads_for(100) == 1 and probe.times[2] and len(probe.times[1]) == 3
    assert (
        probe.sentence().startswith("median 2 threads 2.03 s, 1 thread 4")
        and "1 thread (4.6x the slowest)" in probe.sentence()
    )
    # a quiet machine: more threads are faster, and they are kept
    quiet = ThreadProbe(candidates=(2, 1), rounds=1, warmup=0)
    quiet.record(0, 2, 0.05)
    assert quiet.record(1, 1, 0.08) == 2


def test_a_busy_cpu_makes_the_trainer_time_its_first_steps_at_both_thread_counts(
    tiny_dataset, tmp_path, capsys, monkeypatch
):
    import actlab.training.loop as loop

    monkeypatch.setattr(loop, "load_1m", lambda: 64.0)  # busy: the wiring is under test, not the machine
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    argv = ["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(tmp_path / "run")]
    argv += ["--set", "steps=10", "--set", "log.every=5", "--set", "num_threads=0", "--device", "cpu"]
    argv += QUIET
    try:
        assert main(argv) == 0
        assert torch.get_num_threads() == 2  # the probe's choice does not outlive the run
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert "the CPUs are busy (load average 64.0" in err and "timing the first 7 steps at 2 and 1" in err
    said = re.search(
        r"threads: median 2 threads [\d.]+ m?s, 1 thread [\d.]+ m?s: (\d) threads? .*; (\d) from now on", err
    )
    assert said and said.group(1) == said.group(2), err
    # A count given by the user is never probed.
    argv[argv.index("num_threads=0")] = "num_threads=2"
    argv[argv.index(str(tmp_path / "run"))] = str(tmp_path / "run2")
    try:
        assert main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    assert "timing the first" not in capsys.readouterr().err


def test_the_thread_count_is_timed_again_when_the_load_changes_and_only_then():
    from actlab.utils.threads import AdaptiveThreads

    a = AdaptiveThreads(most=2, cpus=2)
    assert a.start(1, 0.5) is None and a.threads_for(1) == 2  # quiet: torch's own count, no probe
    assert a.window(50, 0.08, 0.7) is None and a.window(100, 0.08, 0.9) is None  # steady, quiet
    note = a.window(150, 0.09, 6.0)  # another job arrives: the load crosses the busy line
    assert note is not None and "the load changed (load average 6.0 on 2 CPUs, busy now)" in note
    assert "timing the next 7 steps at 2 and 1 torch threads" in note
    plan = [a.threads_for(s) for s in range(151, 158)]
    assert plan == [2, 2, 1, 2, 1, 2, 1]  # the probe starts at the step after the window
    said = [a.record(s, n, {2: 2.0, 1: 0.4}[n]) for s, n in zip(range(151, 158), plan)]
    assert said[:-1] == [None] * 6 and "1 from now on" in said[-1] and a.threads_for(158) == 1
    # still busy: the choice stands, window after window
    assert all(a.window(s, 0.4, 6.5) is None for s in (200, 250, 300, 350))
    # a window 3x slower than the steady time at 1 thread: timed again though the load says the same
    note = a.window(400, 1.3, 6.4)
    assert note is not None and "the steps slowed down 3x" in note and a.threads_for(401) == 1
    for s in range(401, 408):
        a.record(s, a.threads_for(s), {2: 5.0, 1: 1.3}[a.threads_for(s)])
    assert a.current == 1 and a.probe is None and a.choices == 2
    # the other job ends: quiet again, so 2 threads get their turn and win
    assert a.window(450, 0.09, 1.0) is None  # the first window after a choice is not judged
    note = a.window(500, 0.09, 1.0)
    assert note is not None and "quiet now" in note and "at 1 and 2 torch threads" in note
    for s in range(501, 508):
        n = a.threads_for(s)
        a.record(s, n, {2: 0.08, 1: 0.15}[n])
    assert a.current == 2 and a.threads_for(600) == 2


def test_a_run_that_starts_quiet_switches_threads_when_the_machine_gets_busy(
    tiny_dataset, tmp_path, capsys, monkeypatch
):
    import itertools

    import actlab.training.loop as loop

    # quiet for the start and two logging windows, then busy: the wiring is under test, not the machine
    loads = itertools.chain([0.5, 0.5, 0.5], itertools.repeat(64.0))
    monkeypatch.setattr(loop, "load_1m", lambda: next(loads))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    argv = ["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(tmp_path / "run")]
    argv += ["--set", "steps=24", "--set", "log.every=3", "--set", "num_threads=0", "--device", "cpu"]
    argv += QUIET
    try:
        assert main(argv) == 0
        assert torch.get_num_threads() == 2  # the choices do not outlive the run
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert "timing the first" not in err  # quiet at the start
    assert "the load changed (load average 64.0 on" in err and "timing the next 7 steps at 2 and 1" in err
    assert re.search(r"threads: median 2 threads .*: (\d) threads? .*; \1 from now on", err), err
    assert "OMP_WAIT_POLICY" not in err  # nothing to restart: the run adapted
