"""The guard of a residual run: never hand back a policy worse than the base.

The run measures the base (the agent with its residual at zero: exactly the base's actions) on its own
evaluation seeds before training. Every later evaluation runs the residual on the same seeds and is
paired with it (:func:`actlab.utils.stats.paired_compare`, McNemar's exact test):

- **handed back**: the base, until a residual is *significantly better* (p < ``residual.alpha``); then
  the checkpoint of the best such residual (``checkpoints/best.json``).
- **widened**: an evaluation not below the base (at least as many seeds solved) multiplies the
  residual's bound by ``residual.bound_growth`` (up to the full ``env.action_scale_deg``), and its actor
  becomes the "last good" one.
- **rolled back**: ``residual.patience`` consecutive evaluations below the base (fewer seeds solved)
  restore the last good actor (or the zero residual: the base) and divide the bound by the growth.
- **stopped**: a roll-back due after ``residual.max_rollbacks`` of them stops the run instead.
- **weak base**: a base under ``residual.weak_below`` on the evaluation seeds starts at the full bound with
  no size penalty (it has little to lose and needs large corrections); the rules above still hold.

This module decides; the trainer (``actlab.rl.train``) measures, restores and saves. The decisions are
pure functions of the evaluations, so they are tested without a simulator.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from actlab.errors import ActlabError
from actlab.lifecycle.checkpoints import step_dir_name
from actlab.utils.config import from_dict
from actlab.utils.stats import paired_compare


@dataclass
class GuardState:
    """What the guard knows, saved in every checkpoint's state.json (``meta["guard"]``)."""

    bound: float  # the residual's bound now, a fraction of env.action_scale_deg
    base: dict[str, Any] | None = None  # the base on the eval seeds: seed, episodes, per_seed, successes
    below: int = 0  # consecutive evaluations below the base
    rollbacks: int = 0
    good_step: int | None = None  # env steps of the last evaluation not below the base (its actor kept)
    best: dict[str, Any] | None = None  # the handed-back residual: step and its comparison; None: the base
    weak_base: bool = False  # the base measured under residual.weak_below: full bound, no size penalty
    events: list[dict[str, Any]] = field(default_factory=list)  # widenings, roll-backs, a stop, with reasons

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GuardState:
        """The state as saved; a key it does not have or a value of the wrong type is a ValueError naming
        the key (an edited state.json was ``__init__``'s TypeError traceback)."""
        try:
            state = from_dict(cls, data, where="guard")
        except ActlabError as e:  # an unknown key, with its did-you-mean
            raise ValueError(f"{e.field}: {e.problem}") from e
        if not 0.0 < state.bound <= 1.0:
            raise ValueError(f"guard.bound: expected a number above 0 and at most 1, found {state.bound!r}")
        return state


@dataclass(frozen=True)
class Decision:
    """What the trainer must do after an evaluation."""

    action: str  # "keep", "rollback" or "stop"
    comparison: dict[str, Any]  # the paired comparison with the base (PairedComparison.as_dict)
    new_best: bool  # this residual is now the handed-back policy (checkpoint it, point best.json at it)
    good: bool  # this residual is the new "last good" one (keep its actor)
    reason: str  # one line for the log and the summary


def decide(state: GuardState, cfg: Any, step: int, per_seed: list[bool]) -> Decision:
    """Update ``state`` with an evaluation of the residual at ``step`` (per-seed successes on the base's
    seeds) and say what to do. ``cfg`` is the run's RLConfig (its ``residual`` section)."""
    g = cfg.residual
    cmp = paired_compare(state.base["per_seed"], per_seed, g.alpha)
    text = cmp.sentence()
    new_best = cmp.verdict == "better" and (
        state.best is None or cmp.candidate_successes > state.best["comparison"]["candidate_successes"]
    )
    if new_best:
        state.best = {"step": step, "comparison": cmp.as_dict()}
        state.events.append({"step": step, "event": "handed_back", "reason": text})
    below = cmp.candidate_successes < cmp.reference_successes
    if not below:
        state.below = 0
        state.good_step = step
        if state.bound < 1.0:
            old, state.bound = state.bound, min(1.0, state.bound * g.bound_growth)
            state.events.append(
                {"step": step, "event": "widened", "bound": [old, state.bound], "reason": text}
            )
        return Decision("keep", cmp.as_dict(), new_best, True, text)
    state.below += 1
    if not g.patience or state.below < g.patience:
        return Decision("keep", cmp.as_dict(), new_best, False, text)
    target = f"the residual of step {state.good_step}" if state.good_step is not None else "the zero residual"
    why = f"{state.below} consecutive evaluations below the base (last: {text})"
    state.below = 0
    if state.rollbacks >= g.max_rollbacks:
        reason = f"stopped after {state.rollbacks} roll-backs: {why}"
        state.events.append({"step": step, "event": "stopped", "reason": reason})
        return Decision("stop", cmp.as_dict(), new_best, False, reason)
    state.rollbacks += 1
    old, state.bound = state.bound, state.bound / g.bound_growth
    reason = f"rolled back to {target}, bound {old:g} -> {state.bound:g}: {why}"
    state.events.append({"step": step, "event": "rolled_back", "to": state.good_step, "reason": reason})
    return Decision("rollback", cmp.as_dict(), new_best, False, reason)


def adapt_to_base(state: GuardState, cfg: Any) -> str | None:
    """After the base's first measurement (``state.base``): a base under ``residual.weak_below`` of the
    evaluation seeds is weak, and its residual starts at the full bound with no size penalty. Returns the
    reason (also an event), or None for a base that keeps the preset's narrow start."""
    g, base = cfg.residual, state.base
    if base is None or base["success_rate"] >= g.weak_below or state.weak_base:
        return None
    state.weak_base = True
    old, state.bound = state.bound, 1.0
    reason = (
        f"weak base: {base['successes']}/{base['episodes']} of the evaluation seeds (under "
        f"residual.weak_below {g.weak_below:g}): the residual starts at the full bound ({old:g} -> 1) with "
        "no size penalty; the base is still what is handed back until a residual is significantly better"
    )
    state.events.append({"step": 0, "event": "weak_base", "bound": [old, 1.0], "reason": reason})
    return reason


def handed_back(state: GuardState | None) -> str:
    """``"base"`` or the checkpoint directory name of the handed-back residual."""
    if state is None or state.best is None:
        return "base"
    return step_dir_name(int(state.best["step"]))
