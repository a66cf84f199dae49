"""``actlab eval --perturb``: a policy evaluated at every level of named perturbations, on the same seeds.

Each (perturbation, level) cell is one evaluation of every policy with the env spec the level gives
(:func:`actlab.evaluation.perturb.spec_changes`); the unperturbed evaluation runs once and starts every
panel. Output: ``perturb.json`` (every cell: success, Wilson 95%
interval, outcome counts), ``perturb.md`` (the table) and ``perturb.png`` (the figure).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from actlab.evaluation.envs import EnvSpec
from actlab.evaluation.harness import EvalConfig
from actlab.evaluation.perturb import PERTURBATIONS, spec_changes
from actlab.evaluation.sweep import EVAL_KIND, run_eval
from actlab.utils.io import atomic_dir, atomic_write_json, atomic_write_text, check_out_dir
from actlab.utils.table import table
from actlab.viz.perturb import plot_perturb


def perturb_cells(
    sources: Sequence[Any],
    spec: EnvSpec,
    cfg: EvalConfig,
    perturbs: Sequence[tuple[str, tuple[float, ...]]],
    on_cell: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Evaluate every source at every level of every perturbation; one dict per (perturbation, level,
    policy). Each panel starts at the clean level: the unperturbed evaluation, run once and shared by
    every perturbation (the distractors' clean level is the clutter scene with none, which is the
    pick-and-place scene: evaluated as such)."""
    cells: list[dict] = []
    clean: list[dict] | None = None
    for name, levels in perturbs:
        p = PERTURBATIONS[name]
        for level in (p.clean, *(v for v in levels if v != p.clean)):
            if level == p.clean and clean is not None:
                rows = [{**c, "perturbation": name, "unit": p.unit, "level": level} for c in clean]
            else:
                changes = {} if level == p.clean else spec_changes(spec.task, name, level)
                if "env_kwargs" in changes:  # (the clutter scene's options join the evaluation's own)
                    changes["env_kwargs"] = {**spec.env_kwargs, **changes["env_kwargs"]}
                t0 = time.perf_counter()
                report = run_eval(sources, dataclasses.replace(spec, **changes), cfg)
                rows = [_cell(name, p.unit, level, ev, time.perf_counter() - t0) for ev in report.evals]
                if level == p.clean:
                    clean = rows
            for cell in rows:
                cells.append(cell)
                if on_cell is not None:
                    on_cell(cell)
    return cells


def _cell(name: str, unit: str, level: float, ev: Any, seconds: float) -> dict:
    s = ev.summary
    return {
        "perturbation": name,
        "unit": unit,
        "level": level,
        "policy": ev.name,
        "episodes": s.episodes,
        "successes": s.successes,
        "success_rate": s.success_rate,
        "ci_low": s.ci_low,
        "ci_high": s.ci_high,
        "outcomes": {k: v for k, v in s.outcomes.items() if v},
        "seconds": round(seconds, 2),
    }


def perturb_table(cells: Sequence[dict], markdown: bool = False) -> str:
    """Success with its 95% interval and the failures per cell."""
    rows = [
        [
            c["perturbation"],
            f"{c['level']:g} {c['unit']}",
            c["policy"],
            f"{c['successes']}/{c['episodes']} ({100 * c['success_rate']:.0f}%)",
            f"[{100 * c['ci_low']:.0f}%, {100 * c['ci_high']:.0f}%]",
            ", ".join(f"{k} {v}" for k, v in c["outcomes"].items() if k != "success") or "-",
        ]
        for c in cells
    ]
    return table(
        rows, ["perturbation", "level", "policy", "success", "95% CI", "failures"], markdown=markdown
    )


def execution_words(execution: Any) -> str:
    """How every cell executed its chunks, in words (perturb.md, the command's last line)."""
    if execution is None or execution.mode == "sync":  # (sync with a delay or a horizon is refused)
        return "execution sync (the sim waits for the policy)"
    horizon = execution.horizon if execution.horizon is not None else "the policy's n_action_steps"
    return f"execution {execution.mode} at delay {execution.latency} step(s), horizon {horizon}"


def run_perturb(
    sources: Sequence[Any],
    spec: EnvSpec,
    cfg: EvalConfig,
    perturbs: Sequence[tuple[str, tuple[float, ...]]],
    out_dir: str | Path | None = None,
    overwrite: bool = False,
    on_cell: Callable[[dict], None] | None = None,
) -> dict[str, Any]:
    """Run the sweep and (with ``out_dir``) write perturb.json, perturb.md and perturb.png atomically."""
    for name, _ in perturbs:  # every cell's spec checked before any episode runs
        spec_changes(spec.task, name, PERTURBATIONS[name].clean)
    inputs = [s.path or getattr(s.obj, "policy_dir", None) for s in sources] if out_dir else []
    if out_dir:
        check_out_dir(Path(out_dir), EVAL_KIND, overwrite, inputs)
    t0 = time.perf_counter()
    cells = perturb_cells(sources, spec, cfg, perturbs, on_cell)
    report = {
        "task": spec.task,
        "episodes": cfg.episodes,
        "seeds": f"{cfg.seed}..{cfg.seed + cfg.episodes - 1} (episode i uses seed + i, every cell)",
        "perturbations": {n: PERTURBATIONS[n].what for n, _ in perturbs},
        # how chunks were executed in every cell (--execution/--latency/--horizon; null: sync): a sweep
        # at delay 2 is not the same measurement as one where the sim waits for the policy
        "execution": dataclasses.asdict(cfg.execution) if cfg.execution is not None else None,
        "seconds": round(time.perf_counter() - t0, 2),
        "cells": cells,
    }
    if out_dir:
        with atomic_dir(Path(out_dir), overwrite=overwrite, kind=EVAL_KIND, inputs=inputs) as tmp:
            atomic_write_json(tmp / "perturb.json", report)
            what = "\n".join(f"- `{n}`: {w}" for n, w in report["perturbations"].items())
            atomic_write_text(
                tmp / "perturb.md",
                f"# actlab eval --perturb: {spec.task}\n\n{what}\n\n{execution_words(cfg.execution)}, "
                f"{report['seeds']}\n\n{perturb_table(cells, markdown=True)}\n",
            )
            plot_perturb(cells, tmp / "perturb.png", title=f"{spec.task}: success under perturbations")
    return report
