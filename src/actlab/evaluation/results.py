"""Episode results, their aggregation (success rate with a Wilson 95% interval, taxonomy counts, pick and
drop rates, lift heights) and the JSON / markdown forms of one evaluation or a checkpoint sweep."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from actlab.evaluation.taxonomy import FAILURES, OUTCOMES
from actlab.utils.kinds import recorded_digests
from actlab.utils.table import table


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% for the default z).

    Unlike the normal approximation it stays inside [0, 1] and is sensible at 0/n and n/n, which is
    where small robot evaluations live (0/20 gives [0, 0.161], 20/20 gives [0.839, 1]).
    """
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}], found {successes}")
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    # Clamp the rounding noise at the ends (0/n must give exactly 0 as the lower bound).
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


@dataclass(frozen=True)
class EpisodeResult:
    """What one rollout produced."""

    index: int  # episode index i within the evaluation (seed = base_seed + i)
    seed: int  # seed passed to env.reset
    outcome: str  # one of taxonomy.OUTCOMES
    success: bool  # outcome == "success"
    steps: int  # env steps executed
    picked: bool | None  # grasped and lifted at some step; None where the env has no phase signals
    drop_events: int | None  # grasp lost in the air away from the goal (count); None without phases
    release_step: int | None  # step of the final release, if the taxonomy found one
    max_lift_m: float | None  # highest cube height above its starting height (metres), if known
    reward_sum: float  # sum of env rewards
    video: str | None = None  # path of the rollout video, when one was written
    # Smoothness of the executed actions (actlab.policies.execution.chunk_metrics); None where undefined
    boundary_jump: float | None = None  # mean ||a[b] - a[b-1]|| over chunk boundaries b (joint space)
    step_change: float | None = None  # mean ||a[t] - a[t-1]|| away from chunk boundaries
    spike_factor: float | None = None  # boundary_jump / step_change (1: a boundary is an ordinary step)
    jerk: float | None = None  # mean norm of the third difference of the commanded actions (per step^3)
    chunk_switches: int | None = None  # chunk boundaries in the episode (None: not a chunked policy)
    inference_ms: list[float] | None = None  # time of each inference started in the episode (async modes)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Summary:
    """Aggregate over the episodes of one policy/checkpoint."""

    episodes: int  # number of episodes
    successes: int  # number of successful episodes
    success_rate: float  # successes / episodes
    ci_low: float  # Wilson 95% interval, lower bound
    ci_high: float  # Wilson 95% interval, upper bound
    outcomes: dict[str, int]  # count per outcome (every key of OUTCOMES present)
    pick_rate: float | None  # episodes with a pick / episodes (None: env has no phase signals)
    drop_rate: float | None  # episodes with >= 1 drop event / episodes with a pick (None: no picks)
    mean_success_steps: float | None  # mean steps of successful episodes (None: no success)
    mean_max_lift_m: float | None  # mean over episodes of the per-episode max lift (metres)
    max_lift_m: float | None  # highest lift over all episodes (metres)
    mean_reward: float  # mean per-episode reward sum
    # Means over episodes of the per-episode smoothness metrics (EpisodeResult); None where undefined
    boundary_jump: float | None = None  # mean chunk-boundary jump (joint space)
    step_change: float | None = None  # mean step-to-step change away from boundaries
    spike_factor: float | None = None  # mean of the per-episode boundary_jump / step_change
    jerk: float | None = None  # mean jerk of the commanded actions
    chunk_switches: float | None = None  # mean chunk switches per episode
    inference_ms_median: float | None = None  # median time of one inference (async modes), pooled
    inference_ms_p99: float | None = None  # 99th percentile of the same

    def to_dict(self) -> dict:
        return asdict(self)


def best_index(success_rates: Sequence[float]) -> int:
    """Which of a sweep's checkpoints (in step order) is best: the highest success rate, ties to the later
    checkpoint (more training). The one rule of the sweep, the demo and the policy doctor."""
    return max(enumerate(success_rates), key=lambda ir: (ir[1], ir[0]))[0]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (linear interpolation), None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


def _smoothness(results: Sequence[EpisodeResult]) -> dict[str, float | None]:
    def mean_of(name: str) -> float | None:
        return _mean([getattr(r, name) for r in results if getattr(r, name) is not None])

    times = [x for r in results for x in (r.inference_ms or [])]
    return {
        **{k: mean_of(k) for k in ("boundary_jump", "step_change", "spike_factor", "jerk", "chunk_switches")},
        "inference_ms_median": percentile(times, 50),
        "inference_ms_p99": percentile(times, 99),
    }


def _mean(values: Sequence[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


def summarize(results: Sequence[EpisodeResult]) -> Summary:
    """Aggregate episode results; rates whose denominator is empty are None (never NaN in JSON)."""
    n = len(results)
    k = sum(r.success for r in results)
    low, high = wilson_interval(k, n)
    counts = dict.fromkeys(OUTCOMES, 0)
    for r in results:
        counts[r.outcome] = counts.get(r.outcome, 0) + 1  # a sim task's own classes join the generic ones
    with_phases = [r for r in results if r.picked is not None]
    picked = [r for r in with_phases if r.picked]
    lifts = [r.max_lift_m for r in results if r.max_lift_m is not None]
    return Summary(
        episodes=n,
        successes=k,
        success_rate=k / n if n else 0.0,
        ci_low=low,
        ci_high=high,
        outcomes=counts,
        pick_rate=len(picked) / len(with_phases) if with_phases else None,
        drop_rate=sum(1 for r in picked if r.drop_events) / len(picked) if picked else None,
        mean_success_steps=_mean([r.steps for r in results if r.success]),
        mean_max_lift_m=_mean(lifts),
        max_lift_m=max(lifts) if lifts else None,
        mean_reward=_mean([r.reward_sum for r in results]) or 0.0,
        **_smoothness(results),
    )


def pick_video_episodes(results: Sequence[EpisodeResult], k: int) -> list[int]:
    """Indices of ``k`` episodes worth watching, in the order shown: the first failure of each failure
    class (in the order the classes first occur), then the first successes, then further failures.
    So an evaluation with any failure always has a failure video, and one per kind of failure where
    ``k`` allows."""
    ordered = sorted(results, key=lambda r: r.index)
    chosen, seen = [], set()
    for r in ordered:
        if not r.success and r.outcome not in seen:
            seen.add(r.outcome)
            chosen.append(r.index)
    chosen += [r.index for r in ordered if r.success]
    chosen += [r.index for r in ordered if not r.success and r.index not in chosen]
    return chosen[: max(0, k)]


@dataclass
class CheckpointEval:
    """The evaluation of one policy: where it came from, its episodes and their summary."""

    name: str  # display name (checkpoint directory name, bundle name or "policy")
    path: str | None  # bundle path, None for an in-process policy object
    step: int | None  # training step of the checkpoint, when known
    summary: Summary  # aggregate
    episodes: list[EpisodeResult] = field(default_factory=list)  # per-episode results, by index
    # episodes that started from a scene of the policy's training data (only with allow_training_seeds)
    training_scenes: int = 0

    def to_dict(self) -> dict:
        out = {
            "name": self.name,
            "path": self.path,
            "step": self.step,
            "summary": self.summary.to_dict(),
            "episodes": [e.to_dict() for e in self.episodes],
        }
        if self.training_scenes:
            out["training_scene_episodes"] = self.training_scenes
        weights = recorded_weights(self.path)
        if weights is not None:  # which weights were measured (`policy doctor --sweep` compares them)
            out["weights_sha256"] = weights
        return out


def recorded_weights(bundle: str | Path | None) -> str | None:
    """The sha256 of a bundle's model.safetensors as its actlab.json records it (the loader checks the
    file against it), or None (no bundle, an older or damaged actlab.json)."""
    found = None if bundle is None else (recorded_digests(bundle) or {}).get("model.safetensors")
    return found if isinstance(found, str) else None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
    return "-" if x is None else f"{x * scale:.{digits}f}{unit}"


SUMMARY_HEADERS: tuple[str, ...] = (
    "checkpoint",
    "step",
    "success",
    "95% CI",
    *FAILURES,
    "pick rate",
    "drop rate",
    "mean success steps",
    "max lift",
)


def task_failures(outcomes: Iterable[Mapping[str, int]]) -> tuple[str, ...]:
    """The failure classes beyond the pick-and-place ones that occurred in ``outcomes`` (a sim task's own:
    so101_push's never_touched, so101_pick_moving's carried_away, ...), in the order first met: the tables
    give each a column after the generic ones."""
    seen: dict[str, None] = {}
    for counts in outcomes:
        for name, n in counts.items():
            if name not in OUTCOMES and n:
                seen.setdefault(name)
    return tuple(seen)


def summary_row(ev: CheckpointEval, extra: Sequence[str] = ()) -> list[str]:
    """One table row: success with CI, each failure class as a count (the generic ones, then ``extra``,
    a task's own), rates, steps and lift (cm)."""
    s = ev.summary
    # an evaluation on training scenes (--allow-training-seeds) says so in its own row
    flag = f" ({ev.training_scenes} training scenes)" if ev.training_scenes else ""
    return [
        ev.name + flag,
        "-" if ev.step is None else str(ev.step),
        f"{s.successes}/{s.episodes} ({_pct(s.success_rate)})",
        f"[{_pct(s.ci_low)}, {_pct(s.ci_high)}]",
        *[str(s.outcomes.get(f, 0)) for f in (*FAILURES, *extra)],
        _pct(s.pick_rate),
        _pct(s.drop_rate),
        _num(s.mean_success_steps),
        _num(s.max_lift_m, 1, 100.0, " cm"),
    ]


# The terminal's table: short headers and cells (with the full names it was ~190 columns wide), the
# names spelled out in a legend below it. Markdown pages wrap, so they keep SUMMARY_HEADERS.
COMPACT_HEADERS: tuple[str, ...] = (
    "checkpoint", "step", "success", "95% CI", "not picked", "dropped", "missed", "timeout", "pick",
    "drop", "steps", "lift",
)  # fmt: skip
COMPACT_LEGEND = (
    "not picked: never_picked_up, dropped: dropped_during_transport, missed: missed_goal (episode counts); "
    "pick, drop: pick and drop rates; steps: mean length of the successful episodes; lift: max lift"
)


def _compact_row(ev: CheckpointEval, extra: Sequence[str] = ()) -> list[str]:
    s = ev.summary

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.0f}%"

    return [
        ev.name,
        "-" if ev.step is None else str(ev.step),
        f"{s.successes}/{s.episodes} {pct(s.success_rate)}",
        f"{pct(s.ci_low)[:-1]}-{pct(s.ci_high)}",
        *[str(s.outcomes.get(f, 0)) for f in (*FAILURES, *extra)],
        pct(s.pick_rate),
        pct(s.drop_rate),
        _num(s.mean_success_steps, 0),
        _num(s.max_lift_m, 1, 100.0, " cm"),
    ]


def results_table(evals: Sequence[CheckpointEval], markdown: bool = True) -> str:
    """The summary table, one row per checkpoint (a sweep) or a single row; for a terminal
    (``markdown=False``) with short headers and a legend below."""
    extra = task_failures(e.summary.outcomes for e in evals)
    at = 4 + len(FAILURES)  # the task's own classes follow the generic failure columns
    if markdown:
        headers = [*SUMMARY_HEADERS[:at], *extra, *SUMMARY_HEADERS[at:]]
        return table([summary_row(e, extra) for e in evals], headers, markdown=True)
    headers = [*COMPACT_HEADERS[:at], *extra, *COMPACT_HEADERS[at:]]
    return table([_compact_row(e, extra) for e in evals], headers) + "\n" + COMPACT_LEGEND


def filmed_lines(evals: Sequence[CheckpointEval]) -> list[str]:
    """Which episodes were filmed, one line per checkpoint that has videos: index, seed, outcome."""
    lines = []
    for ev in evals:
        filmed = [e for e in ev.episodes if e.video]
        if filmed:
            what = ", ".join(f"episode {e.index} (seed {e.seed}, {e.outcome})" for e in filmed)
            lines.append(f"filmed ({ev.name}): {what}")
    return lines


def episodes_table(ev: CheckpointEval, markdown: bool = True) -> str:
    """Per-episode table of one checkpoint: seed, outcome, steps, pick, drops, lift."""
    rows = [
        [
            e.index,
            e.seed,
            e.outcome,
            e.steps,
            "-" if e.picked is None else ("yes" if e.picked else "no"),
            "-" if e.drop_events is None else e.drop_events,
            _num(e.max_lift_m, 1, 100.0, " cm"),
            e.video or "-",
        ]
        for e in ev.episodes
    ]
    headers = ["episode", "seed", "outcome", "steps", "picked", "drops", "max lift", "video"]
    return table(rows, headers, markdown)


def markdown_report(evals: Sequence[CheckpointEval], title: str, meta: dict | None = None) -> str:
    """A markdown page: the summary table, then one per-episode table per checkpoint."""
    lines = [f"# {title}", ""]
    for k, v in (meta or {}).items():
        lines.append(f"- {k}: {v}")
    if meta:
        lines.append("")
    lines += ["## Summary", "", results_table(evals, markdown=True), ""]
    for ev in evals:
        lines += [f"## {ev.name}", "", episodes_table(ev, markdown=True), ""]
    return "\n".join(lines)
