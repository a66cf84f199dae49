"""Aggregation: Wilson interval, rates with empty denominators, tables."""

from __future__ import annotations

import json

import pytest

from actlab.evaluation.results import (
    CheckpointEval,
    EpisodeResult,
    markdown_report,
    pick_video_episodes,
    results_table,
    summarize,
    wilson_interval,
)


def test_wilson_interval_known_values():
    # Reference values (Wilson 1927; e.g. statsmodels proportion_confint(method="wilson")).
    assert wilson_interval(0, 20) == pytest.approx((0.0, 0.16113), abs=1e-4)
    assert wilson_interval(20, 20) == pytest.approx((0.83887, 1.0), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.23659, 0.76341), abs=1e-4)
    assert wilson_interval(45, 50) == pytest.approx((0.78641, 0.95652), abs=1e-4)
    lo, hi = wilson_interval(0, 0)
    assert (lo, hi) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def ep(i, outcome, steps=100, picked=True, drops=0, lift=0.05):
    return EpisodeResult(i, 1000 + i, outcome, outcome == "success", steps, picked, drops, None, lift, 0.0)


def test_summarize_rates():
    eps = [
        ep(0, "success", 120),
        ep(1, "success", 140, drops=1),
        ep(2, "never_picked_up", 300, picked=False, lift=0.0),
        ep(3, "dropped_during_transport", 200, drops=1, lift=0.08),
    ]
    s = summarize(eps)
    assert s.successes == 2 and s.success_rate == 0.5
    assert s.outcomes == {
        "success": 2,
        "never_picked_up": 1,
        "dropped_during_transport": 1,
        "missed_goal": 0,
        "timeout": 0,
    }
    assert s.pick_rate == 0.75
    assert s.drop_rate == pytest.approx(2 / 3)
    assert s.mean_success_steps == 130
    assert s.max_lift_m == 0.08
    json.dumps(s.to_dict())  # JSON-ready, no NaN


def test_videos_show_the_first_failure_of_each_class_then_successes():
    outcomes = [
        "success",
        "success",
        "never_picked_up",
        "never_picked_up",
        "timeout",
        "success",
        "missed_goal",
    ]
    eps = [ep(i, o) for i, o in enumerate(outcomes)]
    assert pick_video_episodes(eps, 3) == [2, 4, 6]  # one failure per class first
    assert pick_video_episodes(eps, 5) == [2, 4, 6, 0, 1]  # then successes
    assert pick_video_episodes(eps, 7) == [2, 4, 6, 0, 1, 5, 3]  # then the other failures
    assert pick_video_episodes(eps, 1) == [2]  # any failure gets a video
    assert pick_video_episodes(eps[::-1], 2) == [2, 4]  # by episode index, not list order
    assert pick_video_episodes([ep(0, "success"), ep(1, "success")], 1) == [0]
    assert pick_video_episodes(eps, 0) == [] and sorted(pick_video_episodes(eps, 99)) == list(range(7))


def test_empty_denominators_are_none():
    s = summarize([ep(0, "timeout", picked=None, drops=None, lift=None)])
    assert s.pick_rate is None and s.drop_rate is None and s.mean_success_steps is None
    assert s.max_lift_m is None
    assert "nan" not in json.dumps(s.to_dict()).lower()


def test_tables_have_one_row_per_checkpoint():
    evals = [
        CheckpointEval(f"step_{k:07d}", None, k, summarize([ep(0, "success"), ep(1, "timeout")]), [])
        for k in (10, 20, 30)
    ]
    md = results_table(evals)
    lines = md.splitlines()
    assert len(lines) == 2 + 3
    assert "| step_0000020 | 20 | 1/2 (50.0%) |" in lines[3]
    assert "dropped_during_transport" in lines[0]
    page = markdown_report(evals, "sweep", {"task": "x"})
    assert page.startswith("# sweep") and "- task: x" in page


def test_a_tasks_own_failure_classes_get_columns_of_their_own():
    # so101_push's classes were counted in summary.outcomes but had no column: a push sweep's table
    # showed every failure column at 0 beside a success rate below 100 %.
    evals = [
        CheckpointEval("a", None, 10, summarize([ep(0, "never_touched"), ep(1, "success")]), []),
        CheckpointEval("b", None, 20, summarize([ep(0, "missed_zone"), ep(1, "never_touched")]), []),
    ]
    header, _, a, b = results_table(evals).splitlines()
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert cells[4:10] == [
        "never_picked_up",
        "dropped_during_transport",
        "missed_goal",
        "timeout",
        "never_touched",
        "missed_zone",
    ]
    assert [c.strip() for c in a.strip("|").split("|")][4:10] == ["0", "0", "0", "0", "1", "0"]
    assert [c.strip() for c in b.strip("|").split("|")][4:10] == ["0", "0", "0", "0", "1", "1"]
    terminal = results_table(evals, markdown=False).splitlines()[0]
    assert "never_touched" in terminal and "missed_zone" in terminal


def test_the_terminal_table_fits_a_terminal_and_says_which_episodes_were_filmed():
    # The eval table was ~190 columns wide in a terminal, and nothing said which episodes the videos show.
    import dataclasses

    from actlab.evaluation.results import COMPACT_LEGEND
    from actlab.evaluation.sweep import EvalReport

    eps = [ep(i, "success", 150) for i in range(48)] + [
        ep(48, "dropped_during_transport", 300, drops=1),
        ep(49, "never_picked_up", 300, picked=False),
    ]
    eps[48] = dataclasses.replace(eps[48], video="videos/step_0005000_episode_048.mp4")
    eps[0] = dataclasses.replace(eps[0], video="videos/step_0005000_episode_000.mp4")
    ev = CheckpointEval("step_0005000", "runs/demo/run/checkpoints/step_0005000", 5000, summarize(eps), eps)
    text = EvalReport([ev, ev], None, {}, {}).table(markdown=False)
    lines = text.splitlines()
    assert max(len(line) for line in lines[:4]) <= 110, lines[:4]
    assert "48/50 96%" in lines[2] and COMPACT_LEGEND in text
    assert lines[-1] == (
        "filmed (step_0005000): episode 0 (seed 1000, success), "
        "episode 48 (seed 1048, dropped_during_transport)"
    )
    # results.md keeps the full class names and lists each episode's video.
    md = markdown_report([ev], "t")
    assert "dropped_during_transport" in md and "videos/step_0005000_episode_048.mp4" in md
