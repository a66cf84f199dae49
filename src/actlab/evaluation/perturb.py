"""Named perturbations of a sim evaluation, each a seeded, documented change at a level.

``actlab eval POLICY --perturb NAME[=LEVELS]`` evaluates a policy once per level on the same seeds
(:mod:`actlab.evaluation.perturb_sweep`). Each perturbation is one of:

- a change to the scene's look, made after every ``env.reset`` (then the first observation is rendered
  again): ``camera_shift``, ``lighting``, ``table_color``, ``object_color``;
- another scene: ``distractors`` evaluates ``so101_pick_place`` in ``so101_pick_clutter``'s scene with
  that many distractor objects (the cube and bowl where ``so101_pick_place`` puts them for the same seed);
- a change to what passes between policy and env: ``action_noise``, ``obs_delay``.

The random parts (a direction, a colour, noise) are drawn from ``(tag, episode seed)``, so a level means
the same change for every policy and every number of workers, and the scene itself is the unperturbed
episode's. The first level of each default list is the clean one (no change).
"""

from __future__ import annotations

import colorsys
import dataclasses
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from actlab.errors import ActlabError
from actlab.utils.config import comma_items, unknown_name_error

# A stream of its own for the perturbations' random numbers (not the env's, not the expert's).
_SEED_TAG = 38


@dataclasses.dataclass(frozen=True)
class Perturbation:
    """One named perturbation: what it changes and at which levels by default."""

    name: str  # the --perturb name
    unit: str  # unit of a level (for tables and axes)
    levels: tuple[float, ...]  # default sweep; the first is the clean level
    what: str  # the change, as docs/evaluation.md states it
    clean: float = 0.0  # the level that changes nothing

    def check(self, level: float) -> None:
        lo, hi = _LIMITS[self.name]
        if not lo <= level <= hi or not np.isfinite(level):
            raise ActlabError(
                f"level of --perturb {self.name} out of range",
                field=f"--perturb {self.name}",
                expected=f"{lo} to {hi} ({self.unit})",
                found=level,
            )


PERTURBATIONS: dict[str, Perturbation] = {
    p.name: p
    for p in (
        Perturbation(
            "camera_shift",
            "cm",
            (0.0, 1.0, 2.0, 4.0),
            "the overhead camera moved this far in a random horizontal direction, orientation kept",
        ),
        Perturbation(
            "lighting",
            "x brightness",
            (1.0, 0.7, 0.5, 0.3),
            "the key light and the headlight scaled to this fraction of their brightness",
            clean=1.0,
        ),
        Perturbation(
            "table_color",
            "fraction",
            (0.0, 0.25, 0.5, 0.75),
            "the table's colour moved this fraction of the way to a random colour",
        ),
        Perturbation(
            "object_color",
            "hue turn",
            (0.0, 0.04, 0.08, 0.16),
            "the cube's hue turned by this fraction of the colour circle, in a random direction",
        ),
        Perturbation(
            "distractors",
            "objects",
            (0.0, 1.0, 2.0, 3.0),
            "this many distractor objects on the table (so101_pick_clutter's, away from the cube and bowl)",
        ),
        Perturbation(
            "action_noise",
            "deg",
            (0.0, 1.0, 2.0, 4.0),
            "Gaussian noise of this standard deviation added to every joint target the policy sends",
        ),
        Perturbation(
            "obs_delay",
            "steps",
            (0.0, 1.0, 2.0, 4.0),
            "the policy sees the observation of this many control steps ago (the first one at the start)",
        ),
    )
}

# Levels a perturbation accepts (inclusive).
_LIMITS: dict[str, tuple[float, float]] = {
    "camera_shift": (0.0, 10.0),
    "lighting": (0.05, 3.0),
    "table_color": (0.0, 1.0),
    "object_color": (0.0, 0.5),
    "distractors": (0.0, 4.0),
    "action_noise": (0.0, 20.0),
    "obs_delay": (0.0, 30.0),
}


def parse_perturb(text: str) -> tuple[str, tuple[float, ...]]:
    """``NAME`` or ``NAME=L1,L2,...`` -> (name, levels); the default levels for a bare name."""
    name, eq, levels = text.partition("=")
    name = name.strip()
    if name not in PERTURBATIONS:
        raise unknown_name_error("perturbation", name, PERTURBATIONS, fix="docs/evaluation.md lists them")
    p = PERTURBATIONS[name]
    if not eq:
        return name, p.levels
    if not levels.strip():  # `NAME=` (an empty $LEVELS) ran the default levels without a word
        raise ActlabError(
            "no levels given after '='",
            field=f"--perturb {name}",
            expected=f"NAME=L1,L2,... (e.g. {name}={','.join(f'{v:g}' for v in p.levels)}), or NAME "
            "alone for those default levels",
            found=text,
            fix=f"list the levels after '=', or pass --perturb {name} for its defaults (nothing was run)",
        )
    try:
        values = tuple(float(v) for v in comma_items(levels, f"--perturb {name}", f"{name}=0,1"))
    except ValueError as e:
        raise ActlabError(
            "levels must be numbers", field=f"--perturb {name}", expected="NAME=0,1,2", found=levels
        ) from e
    if not values:
        raise ActlabError("no levels given", field=f"--perturb {name}", expected="NAME=0,1,2", found=text)
    for v in values:
        p.check(v)
    if name in ("distractors", "obs_delay") and any(v != int(v) for v in values):
        # (found was the Python tuple "(2.5,)", with neither the range nor a fix)
        lo, hi = _LIMITS[name]
        raise ActlabError(
            f"{name} levels are whole numbers",
            field=f"--perturb {name}",
            expected=f"whole numbers from {lo:g} to {hi:g}",
            found=", ".join(f"{v:g}" for v in values if v != int(v)),
            fix=f"round the levels, e.g. --perturb {name}={','.join(str(round(v)) for v in values)} "
            "(nothing was run)",
        )
    return name, values


def parse_perturbs(texts: Sequence[str]) -> list[tuple[str, tuple[float, ...]]]:
    """Every ``--perturb`` of a command (:func:`parse_perturb`); a perturbation named twice, or a level
    given twice, is refused: each would be evaluated again as a cell of its own (the same episodes run
    twice, the table and figure showing two panels of one perturbation)."""
    parsed = [parse_perturb(text) for text in texts]
    names = [name for name, _ in parsed]
    for name in dict.fromkeys(names):
        if names.count(name) > 1:
            given = [t for t in texts if t.partition("=")[0].strip() == name]
            raise ActlabError(
                f"--perturb {name} is given {names.count(name)} times: each would be a panel of its own, "
                "the same levels evaluated again",
                field=f"--perturb {name}",
                expected="each perturbation once, with all its levels: NAME=L1,L2,...",
                found=", ".join(f"--perturb {t}" for t in given),
                fix=f"give one --perturb {name}=L1,L2,... (nothing was run)",
            )
    for name, levels in parsed:
        twice = sorted({v for v in levels if levels.count(v) > 1})
        if twice:
            raise ActlabError(
                f"a level of --perturb {name} is given twice: it would be evaluated twice",
                field=f"--perturb {name}",
                expected="each level once",
                found=", ".join(f"{v:g}" for v in twice),
                fix=f"list each level of --perturb {name} once (nothing was run)",
            )
    return parsed


def spec_changes(task: str, name: str, level: float) -> dict[str, Any]:
    """How the evaluation's EnvSpec changes for a level: ``task`` and ``env_kwargs`` for ``distractors``
    (another scene), ``perturb`` for every other perturbation (a wrapper around the env)."""
    if name == "distractors":
        if task != "so101_pick_place":
            raise ActlabError(
                "the distractors perturbation is so101_pick_place's scene with distractors",
                field="--perturb distractors",
                expected="--task so101_pick_place",
                found=task,
                fix="evaluate so101_pick_clutter directly for the clutter task",
            )
        return {"task": "so101_pick_clutter", "env_kwargs": {"distractors": int(level)}}
    return {"perturb": (name, float(level))}


class PerturbedEnv:
    """An actlab sim env with one perturbation at one level; everything else passes through."""

    def __init__(self, env: Any, name: str, level: float) -> None:
        if name not in PERTURBATIONS or name == "distractors":
            others = sorted(set(PERTURBATIONS) - {"distractors"})
            raise ActlabError("not an env perturbation", field="perturb", expected=others, found=name)
        PERTURBATIONS[name].check(level)
        self.env, self.name, self.level = env, name, float(level)
        self._rng = np.random.default_rng()
        self._past: deque = deque()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.env, attr)

    @property
    def unwrapped(self) -> Any:
        return self.env

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._rng = np.random.default_rng((_SEED_TAG, -1 if seed is None else int(seed)))
        if self._restyle():
            obs = self.env.observe()
        self._past = deque([obs] * (int(self.level) + 1), maxlen=int(self.level) + 1)
        return self._seen(obs), info

    def step(self, action) -> tuple[dict, float, bool, bool, dict]:
        action = np.asarray(action, dtype=np.float64)
        if self.name == "action_noise" and self.level > 0:
            action = action + self._rng.normal(0.0, self.level, action.shape)
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._past.append(obs)
        return self._seen(obs), reward, terminated, truncated, info

    def close(self) -> None:
        self.env.close()

    def _seen(self, obs: dict) -> dict:
        # obs_delay: the oldest of the last level+1 observations; otherwise the newest
        return self._past[0] if self.name == "obs_delay" and self._past else obs

    def _restyle(self) -> bool:
        """Apply a look perturbation after a reset; True when the look changed."""
        env, rng, level = self.env, self._rng, self.level
        if self.name == "camera_shift":
            angle = rng.uniform(0, 2 * np.pi)
            env.adjust_look(camera_offset=level / 100.0 * np.array([np.cos(angle), np.sin(angle), 0.0]))
        elif self.name == "lighting":
            env.adjust_look(light_scale=level)
        elif self.name == "table_color":
            target = rng.uniform(0.0, 1.0, 3)
            env.adjust_look(rgb={"table": (1 - level) * env.material_rgb("table") + level * target})
        elif self.name == "object_color":
            h, s, v = colorsys.rgb_to_hsv(*env.material_rgb("cube"))
            turn = level * (1 if rng.random() < 0.5 else -1)
            env.adjust_look(rgb={"cube": colorsys.hsv_to_rgb((h + turn) % 1.0, s, v)})
        else:
            return False
        return True


__all__ = ["PERTURBATIONS", "Perturbation", "PerturbedEnv", "parse_perturb", "parse_perturbs", "spec_changes"]
