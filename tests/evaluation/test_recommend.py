"""The mode for the arm: the best measured mode the LeRobot plugin can run and the exact commands, from
hand-built cells on real bundles (act_relative with and without rtc_max_delay) and from real sweeps."""

from __future__ import annotations

import json

import pytest
from evalpolicies import tiny_rel_bundle

from actlab.cli import main
from actlab.evaluation.recommend import NOT_IN_PLUGIN, Measured, recommend
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
def test_rtc_is_recommended_with_its_queue_threshold_and_the_better_blend_named(bundles):
    rec = recommend(bundles["rtc"], [SYNC, ASYNC4, BLEND4, RTC4])
    assert (rec.mode, rec.latency, rec.successes, rec.episodes) == ("rtc", 4, 17, 20)
    # chunk 12, 6 actions per chunk: LeRobot computes a chunk when its queue holds 12 - 6 = 6 actions
    assert rec.flags == "--inference.type=rtc --inference.queue_threshold=6"
    assert rec.export.endswith("/rtc --to lerobot --out exports/rtc")
    assert rec.rollout_sim == (
        "lerobot-rollout --strategy.type=base --policy.path=exports/rtc --inference.type=rtc "
        "--inference.queue_threshold=6 --robot.type=actlab_so101_sim --duration=200 "
        "--return_to_initial_position=false --task='pick the cube and place it in the bowl'"
    )
    assert "--robot.type=so101_follower --robot.port=/dev/ttyACM0" in rec.rollout_arm
    b = rec.best_measured
    assert (b["mode"], b["successes"], b["why"]) == ("blend", 18, NOT_IN_PLUGIN["blend"])
    # blend solved seeds 17 (rtc lost it): 0 gained, 1 lost -> p = 1
    assert b["test"] == (
        "rtc no evidence either way: 0 seeds gained, 1 lost of 20 "
        "(17 vs 18 solved; McNemar exact p = 1 >= 0.05)"
    )
    text = rec.text()
    assert text.startswith("recommendation for the arm (p, delay 4): rtc, 17/20 solved")
    assert "measured best: blend (18/20), which cannot run through the plugin yet" in text


@pytest.mark.timeout(60)
def test_the_best_mode_is_recommended_alone_when_the_plugin_runs_it(bundles):
    best_rtc = _cell("rtc", 4, [1] * 19 + [0])
    rec = recommend(bundles["rtc"], [SYNC, ASYNC4, BLEND4, best_rtc])
    assert rec.mode == "rtc" and rec.best_measured is None
    # equal successes: the smaller boundary jump wins
    smooth = _cell("rtc", 4, [1] * 18 + [0] * 2, jump=0.5)
    assert recommend(bundles["rtc"], [BLEND4, smooth]).best_measured is None


@pytest.mark.timeout(60)
def test_a_policy_without_rtc_falls_back_to_sync_and_says_why(bundles):
    rec = recommend(bundles["plain"], [SYNC, ASYNC4, BLEND4, RTC4])
    assert (rec.mode, rec.flags, rec.successes) == ("sync", "", 20)
    assert "no mode measured at delay 4 runs through the plugin yet, so sync" in rec.note
    assert rec.best_measured["mode"] == "blend" and rec.best_measured["why"] == NOT_IN_PLUGIN["blend"]
    # rtc (17/20) was measured, but this policy has no rtc_max_delay: the plugin cannot run it
    assert "sync better than blend" not in rec.best_measured["test"]
    assert "--inference" not in rec.rollout_sim
    # without a sync cell: sync's commands, marked as not measured
    rec = recommend(bundles["plain"], [ASYNC4, BLEND4])
    assert rec.mode == "sync" and rec.episodes == 0 and "sync, not measured" in rec.text()
    assert "measure sync (--execution sync,...)" in rec.note
    # at delay 0 every cell is a candidate
    assert recommend(bundles["plain"], [SYNC]).mode == "sync"
    assert recommend(PolicySource(name="x", obj=object()), [SYNC]) is None  # not a bundle


@pytest.mark.timeout(170)
def test_eval_and_sweeps_end_with_the_recommendation(bundles, tmp_path, capsys):
    bundle = bundles["rtc"].path
    common = ["--episodes", "2", "--max-steps", "14", "--workers", "1", "--batch-envs", "2"]
    assert main(["eval", bundle, *common, "--execution", "rtc", "--latency", "2"]) == 0
    out = capsys.readouterr().out
    assert "recommendation for the arm (rtc, delay 2): rtc, 0/2 solved" in out
    assert "--inference.type=rtc --inference.queue_threshold=6 --robot.type=actlab_so101_sim" in out
    sweep = tmp_path / "sweep"
    args = [*common, "--execution", "sync,async", "--latency", "0,2", "--out", str(sweep), "--json"]
    assert main(["eval", bundle, *args]) == 0
    (rec,) = json.loads(capsys.readouterr().out)["recommendations"]
    assert (rec["policy"], rec["latency"]) == ("rtc", 2) and rec["mode"] == "sync"  # async cannot run
    assert json.loads((sweep / "sweep.json").read_text())["recommendations"] == [rec]
    md = (sweep / "sweep.md").read_text()
    assert "## Recommendation for the arm (rtc, delay 2): sync, 0/2 solved" in md
    assert "```bash\nactlab policy export" in md and "# on the arm:\nlerobot-rollout" in md
