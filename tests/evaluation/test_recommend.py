"""The mode for the arm: the best measured mode (every mode runs through the LeRobot plugin) and the exact
commands, from hand-built cells on real bundles (act_relative with and without rtc_max_delay) and from real
sweeps. That the flags run the measured actions in lerobot-rollout: test_lerobot_modes_real.py (slow)."""

from __future__ import annotations

import json

import pytest
from evalpolicies import tiny_rel_bundle

from actlab.cli import main
from actlab.evaluation.recommend import Measured, recommend
from actlab.evaluation.sources import PolicySource

SEED = 100_000


def _cell(mode, delay, successes, horizon=6, jump=1.0):
    outcomes = {SEED + i: "success" if s else "timeout" for i, s in enumerate(successes)}
    return Measured("p", mode, delay, horizon, sum(successes), len(successes), jump, outcomes)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    root = tmp_path_factory.mktemp("rec")
    return {
        "rtc": PolicySource(name="p", path=str(tiny_rel_bundle(root / "rtc", rtc_max_delay=4))),
        "plain": PolicySource(name="p", path=str(tiny_rel_bundle(root / "plain", rtc_max_delay=0))),
    }


SYNC = _cell("sync", 0, [1] * 20)
ASYNC4 = _cell("async", 4, [1] * 10 + [0] * 10)
BLEND4 = _cell("blend", 4, [1] * 18 + [0] * 2)
RTC4 = _cell("rtc", 4, [1] * 17 + [0] * 3)


@pytest.mark.timeout(60)
def test_the_best_measured_mode_is_recommended_with_the_plugin_flags_that_run_it(bundles):
    rec = recommend(bundles["rtc"], [SYNC, ASYNC4, BLEND4, RTC4])
    assert (rec.mode, rec.latency, rec.successes, rec.episodes) == ("blend", 4, 18, 20)
    # the cell's own delay and horizon: actlab's executor in the plugin's select_action
    assert rec.flags == "--policy.execution=blend --policy.execution_latency=4 --policy.execution_horizon=6"
    assert rec.export.endswith("/rtc --to lerobot --out exports/rtc")
    assert rec.rollout_sim == (
        "lerobot-rollout --strategy.type=base --policy.path=exports/rtc --policy.execution=blend "
        "--policy.execution_latency=4 --policy.execution_horizon=6 --robot.type=actlab_so101_sim "
        "--robot.image_size=32 --duration=200 --return_to_initial_position=false "
        "--task='pick the cube and place it in the bowl'"
    )
    # (the sim robot renders at the policy's camera size, as the cells were measured: 32 px here)
    assert "--robot.type=so101_follower --robot.port=/dev/ttyACM0" in rec.rollout_arm
    assert "image_size" not in rec.rollout_arm and rec.flags in rec.rollout_arm
    assert "--inference.type" not in rec.rollout_arm
    assert "worker thread" in rec.note
    text = rec.text()
    assert text.startswith("recommendation for the arm (p, delay 4): blend, 18/20 solved")


@pytest.mark.timeout(60)
def test_every_mode_can_be_the_recommendation(bundles):
    ens = _cell("ensemble", 4, [1] * 19 + [0], horizon=4)
    assert recommend(bundles["plain"], [SYNC, ASYNC4, BLEND4, ens]).flags == (
        "--policy.execution=ensemble --policy.execution_latency=4 --policy.execution_horizon=4"
    )
    best_rtc = _cell("rtc", 4, [1] * 19 + [0])
    assert recommend(bundles["rtc"], [SYNC, ASYNC4, BLEND4, best_rtc]).mode == "rtc"
    best_async = _cell("async", 4, [1] * 20)
    assert recommend(bundles["plain"], [SYNC, best_async, BLEND4]).mode == "async"
    # equal successes: the smaller boundary jump wins
    smooth = _cell("rtc", 4, [1] * 18 + [0] * 2, jump=0.5)
    assert recommend(bundles["rtc"], [BLEND4, smooth]).mode == "rtc"


@pytest.mark.timeout(60)
def test_sync_is_recommended_with_no_flags_at_delay_0_or_when_only_sync_was_measured(bundles):
    rec = recommend(bundles["plain"], [SYNC])
    assert (rec.mode, rec.flags, rec.successes) == ("sync", "", 20)
    assert "--policy.execution" not in rec.rollout_sim and "waits for each chunk" in rec.note
    # at delay 0 every cell is a candidate: sync beats a worse blend@0
    assert recommend(bundles["plain"], [SYNC, _cell("blend", 0, [1] * 10 + [0] * 10)]).mode == "sync"
    # at the measured delay 2 nothing was measured but sync: sync
    assert recommend(bundles["plain"], [SYNC, ASYNC4], delay=2).mode == "sync"
    assert recommend(PolicySource(name="x", obj=object()), [SYNC]) is None  # not a bundle


@pytest.mark.timeout(170)
def test_eval_and_sweeps_end_with_the_recommendation(bundles, tmp_path, capsys):
    bundle = bundles["rtc"].path
    common = ["--episodes", "2", "--max-steps", "14", "--workers", "1", "--batch-envs", "2"]
    assert main(["eval", bundle, *common, "--execution", "rtc", "--latency", "2"]) == 0
    out = capsys.readouterr().out
    assert "recommendation for the arm (rtc, delay 2): rtc, 0/2 solved" in out
    flags = "--policy.execution=rtc --policy.execution_latency=2 --policy.execution_horizon=6"
    assert f"{flags} --robot.type=actlab_so101_sim" in out
    sweep = tmp_path / "sweep"
    args = [*common, "--execution", "sync,async", "--latency", "0,2", "--out", str(sweep), "--json"]
    assert main(["eval", bundle, *args]) == 0
    (rec,) = json.loads(capsys.readouterr().out)["recommendations"]
    # every cell 0/2: async at delay 2 (the only mode measured there) is the recommendation
    assert (rec["policy"], rec["latency"], rec["mode"]) == ("rtc", 2, "async")
    assert (
        rec["flags"] == "--policy.execution=async --policy.execution_latency=2 --policy.execution_horizon=6"
    )
    assert json.loads((sweep / "sweep.json").read_text())["recommendations"] == [rec]
    md = (sweep / "sweep.md").read_text()
    assert "## Recommendation for the arm (rtc, delay 2): async, 0/2 solved" in md
    assert "```bash\nactlab policy export" in md and "# on the arm:\nlerobot-rollout" in md


@pytest.mark.timeout(60)
def test_a_lone_mode_or_one_that_loses_to_sync_is_said_in_the_note(bundles):
    """A sweep of one mode "recommended" it whatever it scored (a head trained alone: 107/200 at delay
    8 where plain async made 132): the note says nothing was weighed against it, and when sync did better."""
    lone = recommend(bundles["plain"], [_cell("correct", 8, [1] * 5 + [0] * 15)])
    assert lone.mode == "correct" and "the only mode measured at delay 8" in lone.note
    assert "--execution sync,async,correct --latency 8" in lone.note
    rec = recommend(bundles["plain"], [SYNC, ASYNC4, BLEND4])
    assert "only mode" not in rec.note and "sync solved more (20/20)" in rec.note
    even = recommend(bundles["plain"], [_cell("sync", 0, [1] * 10 + [0] * 10), ASYNC4])
    assert "sync solved more" not in even.note and "only mode" in even.note
