"""Each taxonomy rule on synthetic phase records (the same rules as docs/evaluation.md)."""

from __future__ import annotations

import numpy as np
import pytest

from actlab.errors import ActlabError
from actlab.evaluation.taxonomy import (
    DROPPED_DURING_TRANSPORT,
    MISSED_GOAL,
    NEVER_PICKED_UP,
    SUCCESS,
    TIMEOUT,
    PhaseRecord,
    classify,
    drop_events,
)


def record(grasped: str, lifted: str, near: str, in_goal: str | None = None, success_last: bool = False):
    """Build a record from strings of 0/1, one character per step."""

    def b(s: str) -> np.ndarray:
        return np.array([c == "1" for c in s], dtype=bool)

    n = len(grasped)
    succ = np.zeros(n, dtype=bool)
    succ[-1] = success_last
    height = 0.0125 + 0.1 * b(lifted).astype(float)
    return PhaseRecord(
        is_success=succ,
        grasped=b(grasped),
        lifted=b(lifted),
        near_goal=b(near),
        in_goal=b(in_goal) if in_goal is not None else b("0" * n),
        cube_height=height,
    )


def test_success_wins_even_after_a_drop():
    rec = record("0111001110", "0011000110", "0000000011", in_goal="0000000001", success_last=True)
    c = classify(rec)
    assert c.outcome == SUCCESS and c.picked and c.drop_events == 1


def test_never_picked_up_when_grasped_but_never_lifted():
    # Grasped (pushing the cube around) and once lifted without a grasp (knocked up): still never picked.
    c = classify(record("0011100", "0000010", "0000000"))
    assert c.outcome == NEVER_PICKED_UP and c.picked is False and c.release_step is None


def test_dropped_in_the_air_away_from_the_goal():
    c = classify(record("0111100000", "0011110000", "0000000000"))
    assert c.outcome == DROPPED_DURING_TRANSPORT
    assert c.release_step == 5 and c.drop_events == 1


def test_released_above_the_goal_but_ended_outside_is_missed_goal():
    c = classify(record("0111110000", "0011111000", "0000011100"))
    assert c.outcome == MISSED_GOAL and c.drop_events == 0


def test_put_down_on_the_table_away_from_the_goal_is_missed_goal():
    # Carried, lowered to the table while still grasped, then opened: a placement in the wrong place.
    c = classify(record("0111111000", "0011100000", "0000000000"))
    assert c.outcome == MISSED_GOAL and c.release_step == 7 and c.drop_events == 0


def test_still_holding_at_the_end_is_timeout():
    c = classify(record("0011111111", "0001111111", "0000000000"))
    assert c.outcome == TIMEOUT and c.picked


def test_released_into_goal_without_success_is_timeout():
    c = classify(record("011110000", "001111000", "000011111", in_goal="000000111"))
    assert c.outcome == TIMEOUT


def test_last_release_decides_after_a_regrasp():
    # Dropped once in transport, re-grasped, then released above the goal and missed: missed_goal.
    c = classify(record("01110011110000", "00110001111000", "00000000011100"))
    assert c.outcome == MISSED_GOAL and c.drop_events == 1 and c.release_step == 10


def test_max_lift_is_relative_to_start_height():
    c = classify(record("0111100000", "0011110000", "0000000000"))
    assert c.max_lift_m == pytest.approx(0.1)


def test_env_without_phase_signals_is_success_or_timeout():
    ok = PhaseRecord(is_success=np.array([False, False, True]))
    bad = PhaseRecord(is_success=np.array([False, True, False]))
    assert classify(ok).outcome == SUCCESS and classify(ok).picked is None
    assert classify(bad).outcome == TIMEOUT and drop_events(bad) == 0


def test_from_infos_reads_the_signals_present():
    infos = [
        {"grasped": False, "lifted": False, "in_goal": False, "is_success": False, "cube_height": 0.01},
        {"grasped": True, "lifted": True, "in_goal": False, "is_success": False, "cube_height": 0.05},
        {"grasped": False, "lifted": True, "in_goal": False, "is_success": False, "cube_height": 0.05},
    ]
    rec = PhaseRecord.from_infos(infos)
    assert rec.near_goal is None and rec.has_phases and rec.steps == 3
    assert classify(rec).outcome == DROPPED_DURING_TRANSPORT


def test_mismatched_lengths_are_refused():
    with pytest.raises(ActlabError, match="different lengths"):
        PhaseRecord(is_success=np.zeros(3, bool), grasped=np.zeros(2, bool), lifted=np.zeros(3, bool))
    with pytest.raises(ActlabError, match="no steps"):
        PhaseRecord.from_infos([])
