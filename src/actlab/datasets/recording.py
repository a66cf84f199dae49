"""The doctor's checks for faults of the recording: data that is well formed but teaches the wrong thing.

Three families, each a vectorized pass over the columns of one episode at a time:

- **the teleoperation leader**: actions frozen for a long stretch (``frozen_actions``), one action joint
  pinned at a value while the rest of the arm moves (``pinned_action``: clipping, a calibration range too
  narrow), a state joint that stops reading while its action moves (``dead_state``: a dead encoder);
- **the recording**: an episode of a few frames (``short_episode``), the same episode twice under two
  indices (``duplicate_episode``) (the cameras are sampled by :mod:`actlab.datasets.doctor`);
- **the labels**: an action column that is the measured state itself (``action_is_state``: no lead, a
  converter wrote the wrong key) or actions that lag the state (``action_lag``).

Every threshold is derived from the data, so that a clean recording from the sim, from LeRobot or from
teleoperation raises nothing: "still" means a change below ``STILL_FRACTION`` of the dimension's spread
over the dataset (a servo tick, 0.088 degrees, is far above it: 1.5e-3 of a 60-degree range); a stretch
is long next to the same quantity in the other episodes; a joint counts as a continuous one only with
more than ``DISCRETE_VALUES`` distinct values (a scripted gripper that is only ever open or closed is not
"pinned"). Each finding names the episodes, the frame range, the feature and the dimension.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actlab.datasets.records import EpisodeInfo, Layout, Report

# A change smaller than this fraction of a dimension's spread (q99 - q01 over the dataset) is no change.
STILL_FRACTION = 1e-5
# A dimension with at most this many distinct values over the dataset is a command (a gripper open or
# closed), not a joint trajectory: exact plateaus are its normal shape.
DISCRETE_VALUES = 20
# An episode shorter than this fraction of the median length (or than MIN_FRAMES) is a false start.
SHORT_FRACTION = 0.25
MIN_FRAMES = 3
# A still stretch shorter than this is never "long" (at 30 fps, a third of a second).
MIN_STILL_FRAMES = 10
# Warnings name at most this many episodes in their text (all of them are in ``episodes``).
SHOWN = 8

CURATE = "actlab data curate"


def _names(feature: Mapping[str, Any], n: int) -> list[str]:
    names = feature.get("names")
    if isinstance(names, dict):
        names = next((v for v in names.values() if isinstance(v, list)), None)
    if isinstance(names, list) and len(names) == n:
        return [str(x) for x in names]
    return [str(i) for i in range(n)]


def _runs(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and length of each run of True in a 1-D bool array."""
    edges = np.diff(np.r_[0, mask.astype(np.int8), 0])
    starts = np.flatnonzero(edges == 1)
    return starts, np.flatnonzero(edges == -1) - starts


def _longest(mask: np.ndarray) -> tuple[int, int]:
    """(start, length) of the longest run of True; (0, 0) when there is none."""
    starts, lengths = _runs(mask)
    if not len(lengths):
        return 0, 0
    i = int(np.argmax(lengths))
    return int(starts[i]), int(lengths[i])


def _list(eps: Sequence[int]) -> str:
    return ", ".join(map(str, eps[:SHOWN])) + (f" ... ({len(eps)} in all)" if len(eps) > SHOWN else "")


def _drop(eps: Sequence[int]) -> str:
    return (
        f"drop the episodes (`{CURATE} DATASET --out NEW --drop-episodes "
        f"{','.join(map(str, eps[:SHOWN]))}`) or re-record them"
    )


def _drop_fix(eps: Sequence[int], what: str) -> str:
    return f"{what}; otherwise {_drop(eps)}"


class RecordingChecks:
    """The recording checks over the numeric columns of a dataset (``columns`` as read by the rows)."""

    def __init__(self, layout: Layout, columns: Mapping[str, np.ndarray], report: Report) -> None:
        self.layout = layout
        self.fps = float(layout.info["fps"])
        rows = max((len(v) for v in columns.values()), default=0)
        self.episodes = [e for e in layout.episodes if e.stop <= rows]  # rows missing: the row checks say
        self.report = report
        self.features = layout.features
        self.action = self._float("action", columns)
        self.state = self._float("observation.state", columns)
        self.columns = columns

    @staticmethod
    def _float(key: str, columns: Mapping[str, np.ndarray]) -> np.ndarray | None:
        arr = columns.get(key)
        if arr is None or not len(arr) or not np.issubdtype(arr.dtype, np.floating):
            return None
        flat = arr.reshape(len(arr), -1).astype(np.float64)
        return flat if np.isfinite(flat).all() else None  # NaN/inf: reported by the row checks

    def file(self, e: EpisodeInfo) -> Path:
        return self.layout.root / (e.data_file or "data")

    def run(self) -> None:
        if not self.episodes:
            return
        self.short_episodes()
        self.duplicate_episodes()
        if self.action is not None:
            self.frozen_actions()
            self.pinned_actions()
        if self.state is not None:
            self.dead_state()
        if self.action is not None and self.state is not None and self.action.shape == self.state.shape:
            self.labels()

    # ------------------------------------------------------------------------------------- recording

    def short_episodes(self) -> None:
        lengths = np.array([e.length for e in self.episodes])
        limit = max(MIN_FRAMES, SHORT_FRACTION * float(np.median(lengths)))
        short = [e for e in self.episodes if e.length < limit]
        if not short:
            return
        eps = [e.index for e in short]
        self.report.add(
            "short_episode",
            f"{len(short)} episode(s) of a few frames: {_list(eps)}",
            self.file(short[0]),
            "length",
            f">= {limit:.0f} frames ({SHORT_FRACTION:g} x the median length {np.median(lengths):.0f}, "
            f"at least {MIN_FRAMES})",
            ", ".join(f"episode {e.index}: {e.length}" for e in short[:SHOWN]),
            _drop_fix(eps, "a recording stopped right after it started (a false start)"),
            "warning",
            eps,
        )

    def duplicate_episodes(self) -> None:
        keys = [k for k, v in self.columns.items() if k not in _BOOKKEEPING and len(v)]
        if not keys:
            return
        first: dict[str, int] = {}
        dups: list[tuple[int, int]] = []
        for e in self.episodes:
            h = hashlib.sha1()
            for k in sorted(keys):
                h.update(np.ascontiguousarray(self.columns[k][e.start : e.stop]).tobytes())
            seen = first.setdefault(h.hexdigest(), e.index)
            if seen != e.index:
                dups.append((seen, e.index))
        if not dups:
            return
        eps = [b for _, b in dups]
        e0 = next(e for e in self.episodes if e.index == dups[0][1])
        self.report.add(
            "duplicate_episode",
            f"{len(dups)} episode(s) repeat an earlier episode frame for frame",
            self.file(e0),
            ", ".join(sorted(keys)),
            "every episode recorded once",
            ", ".join(f"episode {b} = episode {a}" for a, b in dups[:SHOWN]),
            _drop_fix(eps, "the same recording was written twice (a retry appended again, a merge)"),
            "warning",
            eps,
        )

    # ------------------------------------------------------------------------------ the leader (actions)

    def _spread(self, arr: np.ndarray) -> np.ndarray:
        lo, hi = np.quantile(arr, [0.01, 0.99], axis=0)
        return np.maximum(hi - lo, np.ptp(arr, axis=0))

    def frozen_actions(self) -> None:
        """Every action dim unchanged for a stretch: the leader arm stopped reporting (a USB stall repeats
        the last reading). Long means at least 0.5 s (or a fifth of a shorter episode), 10 frames,
        and more than 3x the median of the longest such stretch over the episodes (a recording that
        pauses in every episode, e.g. while the gripper closes, sets its own scale)."""
        a = self.action
        eps_still = STILL_FRACTION * np.maximum(self._spread(a), 1e-9)
        longest = []
        for e in self.episodes:
            seg = a[e.start : e.stop]
            still = np.all(np.abs(np.diff(seg, axis=0)) <= eps_still, axis=1)
            s, n = _longest(still)
            longest.append((s, n + 1 if n else 1))
        typical = float(np.median([n for _, n in longest]))
        hits = []
        for e, (s, n) in zip(self.episodes, longest):
            limit = max(MIN_STILL_FRAMES, 3 * typical + 1, min(0.5 * self.fps, 0.2 * e.length))
            if n >= limit:
                hits.append((e, s, n, limit))
        if not hits:
            return
        e, s, n, limit = hits[0]
        eps = [h[0].index for h in hits]
        self.report.add(
            "frozen_actions",
            f"actions frozen (every dimension unchanged) for a long stretch in {len(hits)} episode(s): "
            f"{_list(eps)}",
            self.file(e),
            f"action (all {a.shape[1]} dims)",
            f"< {limit:.0f} frames unchanged (the episodes' median longest stretch is {typical:.0f})",
            "; ".join(
                f"episode {h[0].index} frames {h[1]}-{h[1] + h[2] - 1} ({h[2] / self.fps:.1f} s)"
                for h in hits[:SHOWN]
            ),
            _drop_fix(
                eps,
                "the leader stopped reporting: trim the frozen frames "
                f"(`{CURATE} DATASET --out NEW --trim {e.index}:0:{s}`) if the rest is good",
            ),
            "warning",
            eps,
        )

    def pinned_actions(self) -> None:
        """One continuous action joint held exactly at the episode's extreme of that joint, entered and
        left at speed, while the other joints keep moving: a reading clipped at the end of a range
        (clipping, a calibration range too narrow). A pause of the whole arm, a held gripper command
        or the resting pose at the start are not."""
        a = self.action
        names = _names(self.features.get("action", {}), a.shape[1])
        spread = np.maximum(self._spread(a), 1e-9)
        eps_still = STILL_FRACTION * spread
        cont = [j for j in range(a.shape[1]) if len(np.unique(a[:, j])) > DISCRETE_VALUES]
        min_len = max(MIN_STILL_FRAMES, round(self.fps / 3))
        found: dict[int, list[tuple[EpisodeInfo, int, int, float]]] = {}
        for e in self.episodes:
            seg = a[e.start : e.stop]
            if len(seg) < 3 * min_len:
                continue
            d = np.abs(np.diff(seg, axis=0))  # (T-1, A)
            moving = d > eps_still
            for j in cont:
                others = [k for k in cont if k != j]
                if not others:
                    continue
                starts, lengths = _runs(~moving[:, j])
                speed = np.median(d[moving[:, j], j]) if moving[:, j].any() else 0.0
                lo, hi = seg[:, j].min(), seg[:, j].max()
                for s, n in zip(starts, lengths):
                    stop = s + n  # frames s..stop are equal (n diffs)
                    if n + 1 < min_len or s == 0 or stop >= len(seg) - 1:
                        continue
                    v = float(np.median(seg[s : stop + 1, j]))
                    if min(abs(v - hi), abs(v - lo)) > eps_still[j]:
                        continue
                    if d[s - 1, j] < 0.5 * speed or d[stop, j] < 0.5 * speed:
                        continue  # came to rest and left gently: a motion, not a wall
                    if moving[s:stop][:, others].any(axis=1).mean() < 0.5:
                        continue  # the whole arm paused
                    found.setdefault(j, []).append((e, int(s), int(n + 1), float(v)))
        self._constant_actions(found, spread, eps_still)
        for j, hits in found.items():
            eps = sorted({h[0].index for h in hits})
            e, s, n, v = hits[0]
            values = np.array([h[3] for h in hits])
            same = len(eps) > 1 and np.ptp(values) <= 2 * eps_still[j]
            self.report.add(
                "pinned_action",
                f"action dim {j} ({names[j]}) pinned at one value while the arm moves, in {len(eps)} "
                f"episode(s): {_list(eps)}" + (f", always at {values[0]:.4g}" if same else ""),
                self.file(e),
                f"action dim {j} ({names[j]})",
                "a joint trajectory that slows down before it turns (no flat top at an extreme)",
                "; ".join(
                    f"episode {h[0].index} frames {h[1]}-{h[1] + h[2] - 1} at {h[3]:.4g}"
                    for h in hits[:SHOWN]
                ),
                "the leader's reading is clipped at the end of its range: recalibrate the leader arm "
                f"(its range must cover the follower's) and re-record, or {_drop(eps)}",
                "warning",
                eps,
            )

    def _constant_actions(
        self,
        found: dict[int, list[tuple[EpisodeInfo, int, int, float]]],
        spread: np.ndarray,
        eps_still: np.ndarray,
    ) -> None:
        """An action joint at one value for a whole episode while its follower joint moves by more than
        a tenth of its spread: the leader's reading pinned (a range that collapsed to one value). Needs
        a state of the action's shape (which joint follows which)."""
        a, s = self.action, self.state
        if s is None or s.shape != a.shape:
            return
        s_spread = np.maximum(self._spread(s), 1e-9)
        for e in self.episodes:
            if e.length < MIN_STILL_FRAMES:
                continue
            seg, st = a[e.start : e.stop], s[e.start : e.stop]
            for j in np.flatnonzero(
                (np.ptp(seg, axis=0) <= eps_still) & (np.ptp(st, axis=0) > 0.1 * s_spread)
            ):
                if not any(h[0].index == e.index for h in found.get(int(j), [])):
                    found.setdefault(int(j), []).append((e, 0, e.length, float(seg[0, j])))

    # ------------------------------------------------------------------------------ the follower (state)

    def dead_state(self) -> None:
        """A state joint that reads one value for the whole episode (or a long stretch) while its action
        moves it (or while it moves in the other episodes): a dead encoder or an unplugged motor."""
        s_all = self.state
        names = _names(self.features.get("observation.state", {}), s_all.shape[1])
        spread = np.maximum(self._spread(s_all), 1e-9)
        eps_still = STILL_FRACTION * spread
        paired = self.action is not None and self.action.shape == s_all.shape
        per_dim: dict[int, list[tuple[EpisodeInfo, int, int]]] = {}
        longest = np.zeros((len(self.episodes), s_all.shape[1]), dtype=int)
        runs = []
        for i, e in enumerate(self.episodes):
            seg = s_all[e.start : e.stop]
            still = np.abs(np.diff(seg, axis=0)) <= eps_still  # (T-1, D)
            row = []
            for j in range(seg.shape[1]):
                st, n = _longest(still[:, j])
                longest[i, j] = n + 1 if n else 1
                row.append((st, longest[i, j]))
            runs.append(row)
        typical = np.median(longest, axis=0)
        # the scale an action must move by to count as commanding the joint: the state's own spread, or
        # the action's where the state never moves anywhere (an encoder dead for the whole recording)
        scale = spread.copy()
        if paired:
            never = np.ptp(s_all, axis=0) <= eps_still
            scale[never] = self._spread(self.action)[never]
        for i, e in enumerate(self.episodes):
            for j in range(s_all.shape[1]):
                if not paired and np.ptp(s_all[:, j]) <= eps_still[j]:
                    continue  # never moves anywhere, and nothing says it should: an unused joint
                st, n = runs[i][j]
                whole = n >= e.length >= MIN_STILL_FRAMES
                limit = max(self.fps, 3 * typical[j] + 1)
                if not whole and (n < limit or n < MIN_STILL_FRAMES):
                    continue
                if paired:
                    act = self.action[e.start + st : e.start + st + n, j]
                    if np.ptp(act) < 0.1 * scale[j] or scale[j] <= 1e-9:
                        continue  # not commanded to move either: the arm was resting
                elif not whole:
                    continue
                per_dim.setdefault(j, []).append((e, int(st), int(n)))
        for j, hits in per_dim.items():
            eps = [h[0].index for h in hits]
            e, st, n = hits[0]
            self.report.add(
                "dead_state",
                f"state dim {j} ({names[j]}) reads one value while "
                f"{'its action moves it' if paired else 'it moves in other episodes'}, in {len(eps)} "
                f"episode(s): {_list(eps)}",
                self.file(e),
                f"observation.state dim {j} ({names[j]})",
                "a reading that follows the joint",
                "; ".join(
                    f"episode {h[0].index} frames {h[1]}-{h[1] + h[2] - 1} at "
                    f"{s_all[h[0].start + h[1], j]:.4g}"
                    for h in hits[:SHOWN]
                ),
                "check that joint's encoder and its cable (a dead sensor repeats its last value), then "
                + _drop(eps),
                "warning",
                eps,
            )

    # -------------------------------------------------------------------------------------- the labels

    def labels(self) -> None:
        """The action should lead the state: the follower reaches ``action[t]`` some frames later, so
        ``|action[t] - state[t + L]|`` is smallest at some L >= 0. An action equal to the state (L = 0
        exactly, nothing left to learn) or closest to an earlier state (L < 0: the labels lag) is a
        converter that wrote the wrong column or shifted it."""
        a, s = self.action, self.state
        spread = np.maximum(self._spread(s), 1e-9)
        cont = [j for j in range(a.shape[1]) if len(np.unique(a[:, j])) > DISCRETE_VALUES]
        if not cont:
            return
        same, lag = [], []
        for e in self.episodes:
            A, S = a[e.start : e.stop][:, cont], s[e.start : e.stop][:, cont]
            if len(A) < 8:
                continue
            if np.all(np.abs(A - S) <= STILL_FRACTION * spread[cont]):
                same.append(e)
                continue
            k = int(min(round(0.5 * self.fps), len(A) // 4))
            err = {}
            for L in range(-k, k + 1):
                x, y = (A[: len(A) - L], S[L:]) if L >= 0 else (A[-L:], S[: len(S) + L])
                err[L] = float(np.mean(np.median(np.abs(x - y), axis=0) / spread[cont]))
            best = min(err, key=err.get)
            if best < 0 and err[best] < 0.7 * err[0]:
                lag.append((e, best, err[best], err[0]))
        if same:
            eps = [e.index for e in same]
            self.report.add(
                "action_is_state",
                f"the action column equals observation.state in {len(same)} episode(s): {_list(eps)}",
                self.file(same[0]),
                "action",
                "the commanded positions (the leader arm), which lead the measured state",
                f"action == observation.state in every frame of dims {cont}",
                "the converter wrote the state into the action column: export the leader's (commanded) "
                "positions as action and convert again",
                "warning",
                eps,
            )
        if lag:
            eps = [h[0].index for h in lag]
            self.report.add(
                "action_lag",
                f"actions lag the state in {len(lag)} episode(s): {_list(eps)}",
                self.file(lag[0][0]),
                "action",
                "action[t] closest to state[t + L] for some L >= 0 (the follower moves after the command)",
                "; ".join(
                    f"episode {h[0].index}: closest at L = {h[1]} ({-h[1] / self.fps * 1000:.0f} ms "
                    f"behind; error {h[2]:.3g} vs {h[3]:.3g} at L = 0)"
                    for h in lag[:SHOWN]
                ),
                "the action column is shifted (or is a delayed copy of the state): re-export with the "
                "commands aligned to their frames (action[t] is what was sent at frame t)",
                "warning",
                eps,
            )


# Columns that say where a frame is, not what was recorded.
_BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def check_recording(layout: Layout, columns: Mapping[str, np.ndarray], report: Report) -> None:
    """Run every recording check over the columns of a dataset (see the module docstring)."""
    RecordingChecks(layout, columns, report).run()
