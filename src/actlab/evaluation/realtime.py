"""Real time in the sim: chunked policies executed while their next chunk is computed, and delay sweeps.

``actlab eval BUNDLE --latency 0,2,4,8 --execution sync,async,rtc`` evaluates every (mode, delay) cell
of the grid on the same seeded episodes (one ``evaluate_many`` per cell: the same workers, batching and
seeds as a plain ``actlab eval``) and writes one table, one figure (success with its 95% interval and
the chunk-boundary jump against the delay, one line per mode) and one JSON record per cell. The
execution rules themselves are :mod:`actlab.policies.execution`'s; here they are checked against each
policy before any episode runs, and latencies are parsed (steps, milliseconds, or ``measured``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.evaluation.compare import several_horizons
from actlab.evaluation.envs import make_eval_env
from actlab.evaluation.harness import evaluate_many
from actlab.evaluation.policy_io import ObsAdapter, policy_inputs
from actlab.evaluation.recommend import Recommendation, from_cells, recommend
from actlab.evaluation.results import percentile
from actlab.evaluation.sources import (
    PolicySource,
    check_sources_execution,
    policy_device,
    rollout_threads,
    source_dir,
    source_inputs,
    source_limits,
    spec_for_inputs,
    threads_for_load,
)
from actlab.evaluation.sweep import EVAL_KIND
from actlab.policies.execution import (
    EXECUTION_MODES,
    RENAMED_MODES,
    ExecutionSpec,
    check_execution,
    horizon_note,
)
from actlab.utils.config import comma_items, refuse_repeated
from actlab.utils.io import atomic_dir, atomic_file, atomic_write_json, atomic_write_text, check_out_dir
from actlab.utils.say import said_once
from actlab.utils.stats import paired_compare
from actlab.utils.table import table
from actlab.utils.threads import torch_threads
from actlab.viz.eval import figure

MEASURED = "measured"
# Timed inferences of a --latency measured calibration, after WARMUP_CALLS untimed ones: the first calls
# pay one-off costs (allocator growth, lazy init, CUDA graph capture) that a latency estimate must not
# keep forever (a LeRobot user saw the warm-up spike used as the delay for the whole run, lerobot #4454).
MEASURE_CALLS = 20
WARMUP_CALLS = 3


def parse_modes(text: str) -> list[str]:
    """``"sync,async,rtc"`` -> the modes, each checked."""
    modes = comma_items(text, "--execution", "sync,async")
    bad = [m for m in modes if m not in EXECUTION_MODES]
    renamed = [f"{m} is now {RENAMED_MODES[m]}" for m in bad if m in RENAMED_MODES]
    if renamed:
        raise ActlabError(
            "renamed execution mode",
            field="--execution",
            expected=" / ".join(EXECUTION_MODES),
            found=text,
            fix="; ".join(renamed),
        )
    if not modes or bad:
        raise ActlabError(
            "unknown execution mode",
            field="--execution",
            expected="a comma list of " + " / ".join(EXECUTION_MODES),
            found=text,
            fix="e.g. --execution sync,async,rtc",
        )
    return list(dict.fromkeys(modes))


def parse_latencies(text: str, fps: int) -> list[int | str]:
    """``"0,2,4,8"`` (control steps), ``"100ms"`` (rounded up to steps at ``fps``) or ``"measured"``."""
    out: list[int | str] = []
    raws = comma_items(text, "--latency", "0,2,4")
    for raw in raws:
        try:
            if raw == MEASURED:
                out.append(MEASURED)
            elif raw.endswith("ms"):
                ms = float(raw[:-2])
                # (1e308ms is finite, its steps are not: math.ceil's OverflowError traceback, 25th run)
                if ms < 0 or not math.isfinite(ms * fps / 1000.0):
                    raise ValueError
                out.append(math.ceil(round(ms * fps / 1000.0, 9)))  # round(): 100 ms at 30 fps is 3 steps
            else:
                steps = int(raw)
                if steps < 0:
                    raise ValueError
                out.append(steps)
        except ValueError:
            raise ActlabError(
                "bad latency",
                field="--latency",
                expected="a comma list of control steps (0,2,4), milliseconds (100ms) or 'measured'",
                found=text,
                fix="e.g. --latency 0,2,4,8 or --latency 100ms",
            ) from None
    refuse_repeated(out, raws, "--latency", text, "0,2,4")  # 3,100ms at 30 fps: one delay twice
    return out


def parse_horizons(text: str | None) -> list[int | None]:
    """``--horizon``: None (the policy's n_action_steps) or a comma list of actions executed per chunk
    (each a whole number >= 1, checked when the command line was read), each once."""
    if text is None:
        return [None]
    raws = comma_items(str(text), "--horizon", "8,10")
    values: list[int | None] = [int(x) for x in raws]
    refuse_repeated(values, raws, "--horizon", str(text), "8,10")  # 8,08: one horizon twice
    return values


def measure_inference(src: PolicySource, spec: Any, cfg: Any, fps: int) -> dict[str, float | int]:
    """Time ``predict_action_chunk`` of a bundle on its device, with a batch of ``cfg.batch_envs`` real
    first observations, as the rollout workers call it (their thread count); the delay is the median
    time in control steps, rounded up. Returns median_ms, p99_ms, steps and calls."""
    import torch

    from actlab.policies import load_policy  # lazy: torch loads only when a latency is measured

    if getattr(src, "path", None) is None:
        raise ActlabError(
            "--latency measured times a checkpoint bundle",
            field="--latency",
            found=src.name,
            fix="pass PATHs",
        )
    policy = load_policy(src.path, device=cfg.device)
    env = make_eval_env(spec_for_inputs(spec, source_inputs(src)))
    try:
        obs, _ = env.reset(seed=cfg.seed)
        adapter = ObsAdapter(policy_inputs(policy), policy_device(policy, cfg.device))
        batch = adapter([obs] * cfg.batch_envs)
    finally:
        getattr(env, "close", lambda: None)()
    # as the rollout workers run it (one thread on a busy CPU, as evaluate_many decides for them)
    threads = rollout_threads(threads_for_load(cfg, note=False).threads_per_worker, cfg.workers)
    times = []
    with torch_threads(threads), torch.inference_mode():
        for _ in range(WARMUP_CALLS + MEASURE_CALLS):
            t0 = time.perf_counter()
            out = policy.predict_action_chunk(batch)
            out.float().cpu()  # Why: waits for the device, so the time is the whole inference
            times.append(1000 * (time.perf_counter() - t0))
    return delay_from_timings(times, fps)


def delay_from_timings(times_ms: Sequence[float], fps: int, warmup: int = WARMUP_CALLS) -> dict:
    """Inference times (ms, in call order) -> the delay in control steps: the median of the calls after
    the first ``warmup`` (whose one-off costs must not set the delay), rounded up; with median_ms, p99_ms
    and the number of calls timed."""
    kept = list(times_ms)[warmup:]
    if not kept:
        raise ValueError(f"no timings after {warmup} warm-up calls")
    median = percentile(kept, 50) or 0.0
    return {
        "median_ms": round(median, 3),
        "p99_ms": round(percentile(kept, 99) or 0.0, 3),
        "steps": math.ceil(round(median * fps / 1000.0, 9)),
        "calls": len(kept),
    }


@dataclass
class Cell:
    """One (policy, mode, delay) cell of a sweep."""

    policy: str  # source name
    mode: str  # execution mode
    latency: int  # delay in control steps
    horizon: int  # actions executed per chunk
    summary: Any  # results.Summary
    seconds: float  # wall time of the cell
    measured: dict | None = None  # --latency measured: the calibration
    outcomes: dict[int, str] = field(default_factory=dict)  # seed -> outcome of its episode
    vs_sync: dict | None = None  # McNemar against the policy's sync cell on the same seeds (mark_vs_sync)
    note: str | None = None  # how the horizon was chosen, when the executor chose it

    def to_dict(self, fps: int) -> dict:
        s = self.summary
        return {
            "policy": self.policy,
            "mode": self.mode,
            "latency_steps": self.latency,
            "latency_ms": round(1000.0 * self.latency / fps, 1),
            "horizon": self.horizon,
            "episodes": s.episodes,
            "successes": s.successes,
            "success_rate": s.success_rate,
            "ci_low": s.ci_low,
            "ci_high": s.ci_high,
            "boundary_jump": s.boundary_jump,
            "step_change": s.step_change,
            "spike_factor": s.spike_factor,
            "jerk": s.jerk,
            "chunk_switches": s.chunk_switches,
            "inference_ms_median": s.inference_ms_median,
            "inference_ms_p99": s.inference_ms_p99,
            "seconds": round(self.seconds, 2),
            "measured": self.measured,
            "vs_sync": self.vs_sync,
            "horizon_note": self.note,
            "outcomes_by_seed": {str(k): v for k, v in sorted(self.outcomes.items())},
        }


def plan_cells(
    sources: Sequence[PolicySource],
    modes: Sequence[str],
    latencies: Sequence[int],
    horizons: Sequence[int | None] = (None,),
    skipped: list[dict] | None = None,
) -> list[tuple[PolicySource, ExecutionSpec, int]]:
    """Every cell of the grid, each checked against its policy (so a bad one fails before any episode).
    ``sync`` runs once per policy, at delay 0 (the sim waits for it, whatever the delay); every other mode
    at each delay with each of ``horizons`` (None: the policy's n_action_steps).

    With several horizons a (delay, horizon) pair that cannot run (the horizon shorter than the delay, or
    the two past the chunk) is left out and recorded in ``skipped`` (mode, latency_steps, horizon,
    reason): `--latency 4,8 --horizon 4,8` measures h4 at delay 4 and h8 at both. A horizon that fits
    none of the delays is refused, as every other fault of a cell is."""
    cells = []
    many = len(horizons) > 1
    for src in sources:
        for mode in modes:
            if mode == "sync":
                cells.append(_plan_cell(src, ExecutionSpec(mode="sync", latency=0)))
                continue
            first: dict[int | None, ActlabError] = {}  # per horizon: why it cannot run at a delay
            fits: set[int | None] = set()
            for d in latencies:
                for h in horizons:
                    try:
                        cells.append(_plan_cell(src, ExecutionSpec(mode=mode, latency=d, horizon=h)))
                        fits.add(h)
                    except ActlabError as e:
                        if not many or skipped is None or e.field != "--horizon":
                            raise
                        first.setdefault(h, e)
                        k = {"policy": src.name, "mode": mode, "latency_steps": d, "horizon": h}
                        skipped.append({**k, "reason": e.problem.removeprefix(f"{src.name}: ")})
            for h, e in first.items():
                if h not in fits:  # a horizon that fits no delay of the sweep is a mistake, not a gap
                    raise e
    return cells


def _plan_cell(src: PolicySource, spec: ExecutionSpec) -> tuple[PolicySource, ExecutionSpec, int]:
    check_sources_execution([src], spec)
    limits = source_limits(src)
    return src, spec, check_execution(spec, limits, where=src.name) if limits is not None else 1


def run_sweep(
    sources: Sequence[PolicySource],
    env_spec: Any,
    cfg: Any,
    modes: Sequence[str],
    latencies: Sequence[int | str],
    horizons: Sequence[int | None],
    fps: int,
    on_cell: Callable[[Cell], None] | None = None,
    skipped: list[dict] | None = None,
) -> tuple[list[Cell], dict[str, dict]]:
    """Evaluate every cell on the same seeds; returns the cells and the measured latencies per policy.
    ``skipped`` collects the (delay, horizon) pairs of several horizons that cannot run (plan_cells)."""
    measured: dict[str, dict] = {}
    if MEASURED in latencies:
        for src in sources:
            measured[src.name] = measure_inference(src, env_spec, cfg, fps)
    planned = []
    for src in sources:  # every cell checked (measured delays included) before any episode runs
        steps = [measured[src.name]["steps"] if d == MEASURED else d for d in latencies]
        try:
            planned += plan_cells([src], modes, list(dict.fromkeys(int(d) for d in steps)), horizons, skipped)
        except ActlabError as e:
            if src.name not in measured:
                raise
            m = measured[src.name]
            raise ActlabError(
                f"{e.problem} (the measured inference: {m['median_ms']:.1f} ms median at batch "
                f"{cfg.batch_envs} = {m['steps']} steps at {fps} fps)",
                field=e.field,
                expected=e.expected,
                found=e.found,
                fix=f"{e.fix}; or a faster --device, or a smaller --batch-envs",
            ) from e
    cells_out = []
    with said_once():  # every cell's evaluation finds the same notes about its policy: said once
        for src, spec, s in planned:
            t0 = time.perf_counter()
            (ev,) = evaluate_many([src], env_spec, replace(cfg, execution=spec))
            is_measured = src.name in measured and spec.latency == measured[src.name]["steps"]
            cell = Cell(
                policy=src.name,
                mode=spec.mode,
                latency=spec.latency,
                horizon=s,
                summary=ev.summary,
                seconds=time.perf_counter() - t0,
                measured=measured.get(src.name) if is_measured and spec.mode != "sync" else None,
                outcomes={e.seed: e.outcome for e in ev.episodes},
                note=_note(src, spec),
            )
            cells_out.append(cell)
            if on_cell is not None:
                on_cell(cell)
    return cells_out, measured


def sweep_recommendations(
    sources: Sequence[PolicySource], cells: Sequence[Cell], measured: dict[str, dict], env: Any = None
) -> list[Recommendation]:
    """The mode for the arm per policy (actlab.evaluation.recommend): at its measured delay when the sweep
    timed it, else at the longest delay of the sweep; ``env`` the EnvSpec the sweep ran."""
    per_policy = from_cells(cells)
    out = []
    for src in sources:
        m = measured.get(src.name)
        rec = recommend(src, per_policy.get(src.name, []), delay=m["steps"] if m else None, env=env)
        if rec is not None:
            out.append(rec)
    return out


def _note(src: PolicySource, spec: ExecutionSpec) -> str | None:
    limits = source_limits(src)
    return None if limits is None else horizon_note(spec, limits, where=src.name)


def mark_vs_sync(cells: Sequence[Cell], alpha: float = 0.05) -> None:
    """Set each cell's ``vs_sync``: McNemar's exact test (actlab.utils.stats.paired_compare) of the cell
    against its policy's sync cell (delay 0) on the same seeds: gained, lost, p and the verdict. Cells of a
    policy without a sync cell keep None (nothing to compare with)."""
    sync = {c.policy: c for c in cells if c.mode == "sync"}
    for c in cells:
        ref = sync.get(c.policy)
        if ref is None or c is ref or set(ref.outcomes) != set(c.outcomes):
            continue
        seeds = sorted(ref.outcomes)
        pc = paired_compare(
            [ref.outcomes[s] == "success" for s in seeds], [c.outcomes[s] == "success" for s in seeds], alpha
        )
        c.vs_sync = {"gained": pc.gained, "lost": pc.lost, "p": pc.p, "verdict": pc.verdict}


def vs_sync_text(c: Cell) -> str:
    """The sweep table's "vs sync" cell: ``worse* (p=0.004, -9/+1)``; ``*`` marks p < alpha."""
    v = c.vs_sync
    if v is None:
        return "-"
    mark = "*" if v["verdict"] != "no evidence" else ""
    word = v["verdict"] if mark else "same"
    return f"{word}{mark} (p={v['p']:.2g}, +{v['gained']}/-{v['lost']})"


# The files of a delay sweep's output directory (an ``actlab eval`` output: EVAL_KIND).
SWEEP_FILES = ("sweep.json", "sweep.md", "sweep.png")


def delay_sweep(
    sources: Sequence[PolicySource],
    env_spec: Any,
    cfg: Any,
    modes: Sequence[str],
    latencies: Sequence[int | str],
    horizons: Sequence[int | None],
    fps: int,
    out: str | Path | None = None,
    overwrite: bool = False,
    on_cell: Callable[[Cell], None] | None = None,
) -> tuple[list[Cell], dict]:
    """``actlab eval --execution A,B --latency X,Y [--horizon S,T]``: every cell checked against every
    policy (and ``out`` against the output rules) before any episode runs, then run; returns the cells and
    the sweep's record (what sweep.json holds: its ``skipped`` the (delay, horizon) pairs of several
    horizons that cannot run), written to ``out`` when given."""
    fixed = [d for d in latencies if d != MEASURED]  # a measured delay is checked once it is timed
    plan_cells(sources, modes, [int(d) for d in fixed], horizons, [])
    inputs = [source_dir(s) for s in sources]
    if out is not None:  # an input is never an output, checked before the sweep runs
        check_out_dir(Path(out), EVAL_KIND, overwrite, inputs)
    t0 = time.perf_counter()
    skipped: list[dict] = []
    cells, measured = run_sweep(sources, env_spec, cfg, modes, latencies, horizons, fps, on_cell, skipped)
    mark_vs_sync(cells)
    record = {
        "task": env_spec.task,
        "episodes": cfg.episodes,
        "seeds": f"{cfg.seed}..{cfg.seed + cfg.episodes - 1} (episode i uses seed + i, every cell)",
        "fps": fps,
        "seconds": round(time.perf_counter() - t0, 2),
        "measured_inference": measured or None,
        "cells": [c.to_dict(fps) for c in cells],
        "horizons": list(horizons),  # as asked (null: the policy's own); several name the cells by horizon
        "skipped": skipped,
        "recommendations": [r.to_dict() for r in sweep_recommendations(sources, cells, measured, env_spec)],
    }
    if out is not None:
        heading = f"actlab eval delay sweep: {env_spec.task}"
        title = f"{env_spec.task}: success and boundary jump vs delay"
        write_sweep(out, cells, fps, record, heading, title, overwrite=overwrite, inputs=inputs)
    return cells, record


def write_sweep(
    out: str | Path,
    cells: Sequence[Cell],
    fps: int,
    record: dict,
    heading: str,
    title: str,
    *,
    overwrite: bool,
    inputs: Sequence[str | Path | None],
) -> list[Path]:
    """A delay sweep's directory, written atomically (the one writer of ``actlab eval`` and ``actlab
    demo``): sweep.json (``record``, its ``cells`` the cells' records), sweep.md (``heading`` and the
    table) and sweep.png (``title``). Returns the files' paths."""
    out = Path(out)
    with atomic_dir(out, overwrite=overwrite, kind=EVAL_KIND, inputs=inputs) as tmp:
        atomic_write_json(tmp / "sweep.json", record)
        md = sweep_table(cells, fps, markdown=True)
        recs = "".join(f"\n{recommendation_markdown(r)}\n" for r in record.get("recommendations") or [])
        left = "".join(f"- {skipped_text(k)}\n" for k in record.get("skipped") or [])
        left = f"\nLeft out (cells this policy cannot run):\n\n{left}" if left else ""
        atomic_write_text(tmp / "sweep.md", f"# {heading}\n\n{md}\n\n{VS_SYNC_LEGEND}\n{left}{recs}")
        plot_sweep(record["cells"], tmp / "sweep.png", title=title, by_horizon=several_horizons(record))
    return [out / f for f in SWEEP_FILES]


def skipped_text(k: dict) -> str:
    """A left-out cell of a sweep: ``rel: async@8 h4: REASON`` (a horizon that cannot run at a delay,
    plan_cells), ``rtc@None: REASON`` (a mode the demo's policy cannot run at any delay)."""
    who = f"{k['policy']}: " if k.get("policy") else ""
    horizon = f" h{k['horizon']}" if k.get("horizon") is not None else ""
    return f"{who}{k.get('mode')}@{k.get('latency_steps')}{horizon}: {k.get('reason')}"


def recommendation_markdown(r: dict) -> str:
    """A recommendation record (Recommendation.to_dict) as a markdown section: what, why, the commands."""
    rec = Recommendation(**r)
    head, *notes = rec.text().splitlines()[:-3]  # the last three lines are the commands
    body = "".join(f"- {n.strip()}\n" for n in notes)
    cmds = "\n".join([rec.export, rec.rollout_sim, "# on the arm:", rec.rollout_arm])
    return f"## {head[0].upper()}{head[1:]}\n\n{body}\n```bash\n{cmds}\n```"


VS_SYNC_LEGEND = (
    "vs sync: McNemar's exact test of the cell against its policy's sync cell on the same seeds (+ seeds "
    "only the cell solved, - seeds only sync solved); * marks p < 0.05 (better / worse), circled in "
    "sweep.png; same: no evidence of a difference."
)

SWEEP_HEADERS = (
    "policy",
    "mode",
    "delay",
    "horizon",
    "success",
    "95% CI",
    "boundary jump",
    "step change",
    "spike",
    "jerk",
    "switches",
    "vs sync",
    "s",
)


def _f(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def sweep_table(cells: Sequence[Cell], fps: int, markdown: bool = False) -> str:
    """One row per cell: success with its interval and the smoothness figures."""
    rows = []
    for c in cells:
        s = c.summary
        rows.append(
            [
                c.policy,
                c.mode,
                f"{c.latency} ({1000 * c.latency / fps:.0f} ms)",
                c.horizon,
                f"{s.successes}/{s.episodes} ({100 * s.success_rate:.0f}%)",
                f"[{100 * s.ci_low:.0f}%, {100 * s.ci_high:.0f}%]",
                _f(s.boundary_jump, 4),
                _f(s.step_change, 4),
                _f(s.spike_factor, 2),
                _f(s.jerk, 4),
                _f(s.chunk_switches, 1),
                vs_sync_text(c),
                f"{c.seconds:.1f}",
            ]
        )
    return table(rows, list(SWEEP_HEADERS), markdown=markdown)


def plot_sweep(
    records: Sequence[dict], path: str | Path, title: str | None = None, by_horizon: bool = False
) -> Path:
    """PNG: success (95% interval) and mean chunk-boundary jump against delay, one line per policy+mode
    (and horizon, ``by_horizon``). ``sync`` (delay 0 only) is drawn as a dashed horizontal reference."""
    fig = sweep_figure(records, title, by_horizon)
    path = Path(path)
    with atomic_file(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    figure().close(fig)
    return path


def sweep_figure(records: Sequence[dict], title: str | None = None, by_horizon: bool = False) -> Any:
    """The matplotlib figure :func:`plot_sweep` writes (open: the caller closes it)."""
    plt = figure()
    fig, (ax_s, ax_j) = plt.subplots(1, 2, figsize=(11, 4.2))
    groups: dict[tuple[str, str, int | None], list[dict]] = {}
    for r in records:
        h = r.get("horizon") if by_horizon and r["mode"] != "sync" else None
        groups.setdefault((r["policy"], r["mode"], h), []).append(r)
    many = len({r["policy"] for r in records}) > 1
    delays = sorted({r["latency_steps"] for r in records})
    marked: set[str] = set()
    for (policy, mode, h), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["latency_steps"])
        label = (f"{policy}: {mode}" if many else mode) + ("" if h is None else f" h{h}")
        x = [r["latency_steps"] for r in rs]
        y = [100 * r["success_rate"] for r in rs]
        err = [
            [100 * (r["success_rate"] - r["ci_low"]) for r in rs],
            [100 * (r["ci_high"] - r["success_rate"]) for r in rs],
        ]
        jumps = [r["boundary_jump"] if r["boundary_jump"] is not None else float("nan") for r in rs]
        if mode == "sync" and len(rs) == 1 and len(delays) > 1:
            line = ax_s.axhline(y[0], ls="--", lw=1, color="0.3", label=f"{label} (no delay)")
            ax_s.axhspan(100 * rs[0]["ci_low"], 100 * rs[0]["ci_high"], color=line.get_color(), alpha=0.08)
            ax_j.axhline(jumps[0], ls="--", lw=1, color=line.get_color(), label=f"{label} (no delay)")
            continue
        line = ax_s.errorbar(x, y, yerr=err, marker="o", capsize=3, label=label)
        ax_j.plot(x, jumps, marker="o", label=label, color=line[0].get_color())
        for r, xi, yi in zip(rs, x, y):  # cells that differ from sync by McNemar's test: circled
            verdict = (r.get("vs_sync") or {}).get("verdict", "no evidence")
            if verdict != "no evidence":
                color = "tab:red" if verdict == "worse" else "tab:green"
                ax_s.plot(xi, yi, "o", ms=15, mfc="none", mec=color, mew=2, label=f"_{verdict}")
                marked.add(verdict)
    ax_s.set_xlabel("inference delay (control steps)")
    ax_s.set_ylabel("success (%), 95% interval")
    ax_s.set_ylim(-2, 102)
    ax_j.set_xlabel("inference delay (control steps)")
    ax_j.set_ylabel("mean chunk-boundary jump (action units)")
    for ax in (ax_s, ax_j):
        ax.set_xticks(delays)
        ax.grid(alpha=0.3)
    for verdict in sorted(marked):  # one legend entry per kind of marker drawn
        color = "tab:red" if verdict == "worse" else "tab:green"
        ax_s.plot(
            [], [], "o", ms=10, mfc="none", mec=color, mew=2, label=f"{verdict} than sync (McNemar p<0.05)"
        )
    pad = 0.05 * max(delays[-1] - delays[0], 1)
    for ax in (ax_s, ax_j):  # after the legend's empty plots, which autoscaled x to the circled cells
        ax.set_xlim(delays[0] - pad, delays[-1] + pad)  # (delay 0, the sync line's, fell off the axis)
    ax_s.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
