"""Failure taxonomy for pick-and-place episodes: a pure function over the per-step phase signals.

An episode is recorded as a :class:`PhaseRecord` (one value per executed step, taken from the env's
``info`` after that step) and :func:`classify` gives exactly one outcome:

1. ``success``: ``is_success`` holds at the last step of the episode.
2. ``never_picked_up``: there is no step at which the cube was both grasped and lifted.
3. ``timeout``: the cube was picked up and is still grasped at the last step (the policy was carrying or
   holding it when time ran out), or it was released but ended inside the goal without the success
   condition holding (for example still moving or resting on the rim when the episode ended).
4. Otherwise the cube was picked up and then let go. The release step ``r`` is the first step after the
   last carried step (grasped and lifted) at which it is no longer grasped; ``r - 1`` is the last step
   it was held.

   * ``missed_goal``: the cube was near the goal (``near_goal``) at ``r - 1`` (released above or beside
     the goal but it ended outside), or it was not lifted at ``r - 1`` (put down on the table away from
     the goal, a deliberate placement in the wrong place).
   * ``dropped_during_transport``: the cube was lifted and away from the goal at ``r - 1``: the grasp was
     lost in the air on the way.

A *drop event* (for the drop rate) is any step ``t`` where the cube was grasped and lifted and away from
the goal at ``t - 1`` and not grasped at ``t``; an episode can recover from one (re-grasp) and still
succeed. Envs without phase signals (peer gymnasium envs) get only ``success`` or ``timeout``.

A task of the sim's suite with failure classes of its own (``actlab.sim.tasks``: knocked_base, lifted_cube,
carried_away, ...) names them in ``info["task_failure"]``; a failed episode whose last step names one gets
that class, before the rules 2-4 above (it says more: "the tray carried the cube away" beats
"never picked up").
The same rules are written out in docs/evaluation.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from actlab.errors import ActlabError

SUCCESS = "success"
NEVER_PICKED_UP = "never_picked_up"
DROPPED_DURING_TRANSPORT = "dropped_during_transport"
MISSED_GOAL = "missed_goal"
TIMEOUT = "timeout"

# Every outcome, success first, in the order tables show them.
OUTCOMES: tuple[str, ...] = (SUCCESS, NEVER_PICKED_UP, DROPPED_DURING_TRANSPORT, MISSED_GOAL, TIMEOUT)
# The failure classes alone.
FAILURES: tuple[str, ...] = OUTCOMES[1:]

# info keys read after every step; the boolean ones become PhaseRecord arrays.
PHASE_KEYS: tuple[str, ...] = ("grasped", "lifted", "in_goal", "near_goal")


@dataclass(frozen=True)
class PhaseRecord:
    """Per-step phase signals of one episode; every array has one entry per executed step (T,)."""

    is_success: np.ndarray  # (T,) bool: the env's success condition after each step
    grasped: np.ndarray | None = None  # (T,) bool: cube held between the jaws; None for envs without phases
    lifted: np.ndarray | None = None  # (T,) bool: cube above the lift threshold
    in_goal: np.ndarray | None = None  # (T,) bool: cube inside the goal region
    near_goal: np.ndarray | None = None  # (T,) bool: cube above or beside the goal (xy near the goal)
    cube_height: np.ndarray | None = None  # (T,) float: cube height in metres (sim: bottom above the table)
    task_failure: tuple[str, ...] | None = None  # (T,) a sim task's own failure class per step, "" for none

    def __post_init__(self) -> None:
        n = len(self.is_success)
        if n == 0:
            raise ActlabError("an episode record has no steps", field="is_success", expected=">= 1 step")
        for name in ("grasped", "lifted", "in_goal", "near_goal", "cube_height", "task_failure"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ActlabError(
                    "phase signals of one episode have different lengths",
                    field=name,
                    expected=f"{n} steps (as is_success)",
                    found=f"{len(value)} steps",
                )

    @property
    def has_phases(self) -> bool:
        """True when the grasp/lift signals needed for the full taxonomy are present."""
        return self.grasped is not None and self.lifted is not None

    @property
    def steps(self) -> int:
        return len(self.is_success)

    @classmethod
    def from_infos(cls, infos: Sequence[Mapping]) -> PhaseRecord:
        """Build a record from the ``info`` dicts returned by each ``env.step`` of one episode.

        Signals missing from the first info are left out (None); ``is_success`` defaults to False.
        """
        if not infos:
            raise ActlabError("an episode record has no steps", field="infos", expected=">= 1 step")
        first = infos[0]

        def column(key: str, dtype: type) -> np.ndarray | None:
            if key not in first:
                return None
            return np.asarray([bool(i[key]) if dtype is bool else float(i[key]) for i in infos], dtype=dtype)

        success = np.asarray([bool(i.get("is_success", False)) for i in infos], dtype=bool)
        return cls(
            is_success=success,
            grasped=column("grasped", bool),
            lifted=column("lifted", bool),
            in_goal=column("in_goal", bool),
            near_goal=column("near_goal", bool),
            cube_height=column("cube_height", float),
            task_failure=tuple(str(i.get("task_failure", "")) for i in infos)
            if "task_failure" in first
            else None,
        )


@dataclass(frozen=True)
class Classification:
    """The outcome of one episode and the facts the summary needs."""

    outcome: str  # one of OUTCOMES
    picked: bool | None  # the cube was grasped and lifted at some step (None: env has no phase signals)
    drop_events: int | None  # number of drop events (see module docstring); None without phase signals
    release_step: int | None  # step index r of the final release after the last carry, if any
    max_lift_m: float | None  # highest cube height minus its height after the first step (metres)


def _false_like(n: int) -> np.ndarray:
    return np.zeros(n, dtype=bool)


def drop_events(rec: PhaseRecord) -> int:
    """Count steps where a lifted cube away from the goal left the grasp (see module docstring)."""
    if not rec.has_phases:
        return 0
    near = rec.near_goal if rec.near_goal is not None else _false_like(rec.steps)
    carried = rec.grasped & rec.lifted & ~near  # (T,)
    return int(np.count_nonzero(carried[:-1] & ~rec.grasped[1:]))


def classify(rec: PhaseRecord) -> Classification:
    """Apply the taxonomy rules (module docstring) to one episode's phase record."""
    max_lift = None
    if rec.cube_height is not None:
        max_lift = float(np.max(rec.cube_height) - rec.cube_height[0])
    if not rec.has_phases:
        outcome = SUCCESS if rec.is_success[-1] else TIMEOUT
        return Classification(outcome, None, None, None, max_lift)

    grasped, lifted = rec.grasped, rec.lifted
    carried = grasped & lifted  # (T,)
    picked = bool(carried.any())
    drops = drop_events(rec)
    if rec.is_success[-1]:
        return Classification(SUCCESS, picked, drops, None, max_lift)
    if rec.task_failure is not None and rec.task_failure[-1]:
        return Classification(rec.task_failure[-1], picked, drops, None, max_lift)
    if not picked:
        return Classification(NEVER_PICKED_UP, False, drops, None, max_lift)
    if grasped[-1]:
        return Classification(TIMEOUT, True, drops, None, max_lift)

    last_carry = int(np.flatnonzero(carried)[-1])
    # grasped[-1] is False, so a not-grasped step exists after last_carry.
    release = last_carry + 1 + int(np.argmin(grasped[last_carry + 1 :]))
    held = release - 1
    if rec.in_goal is not None and rec.in_goal[-1]:
        return Classification(TIMEOUT, True, drops, release, max_lift)
    near = bool(rec.near_goal[held]) if rec.near_goal is not None else False
    if near or not lifted[held]:
        outcome = MISSED_GOAL
    else:
        outcome = DROPPED_DURING_TRANSPORT
    return Classification(outcome, True, drops, release, max_lift)
