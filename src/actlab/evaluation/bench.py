"""Evaluation throughput, measured side by side in one run: serial rollouts vs worker processes vs
lockstep-batched envs (one policy call for B envs), on the same seeded episodes.

Run as ``actlab bench eval PATH [--episodes N] [--max-steps T] [--json]`` (PATH: a policy bundle, or
``expert`` for the scripted expert, which cannot be batched). Prints the report format of
``actlab.profiling.report``. The three modes must agree on every episode's outcome; the report says so.
"""

from __future__ import annotations

import os
import time
from typing import Any

from actlab.evaluation.envs import EnvSpec
from actlab.evaluation.experts import expert_source
from actlab.evaluation.harness import EvalConfig, evaluate


def _timed(source: Any, spec: EnvSpec, cfg: EvalConfig) -> tuple[float, Any]:
    t0 = time.perf_counter()
    ev = evaluate(source, spec, cfg)
    return time.perf_counter() - t0, ev


def bench_modes(
    episodes: int, seed: int, workers: int, batch_envs: int, batched: bool = True
) -> dict[str, EvalConfig]:
    """The configs the bench compares: serial (1 process, B = 1), ``workers<W>`` (W processes, B = 1) and,
    for policies that take a batch, ``batched<B>`` (1 process, B envs in lockstep). One torch thread per
    process everywhere, so the modes differ only in processes and batching."""

    def cfg(w: int, b: int) -> EvalConfig:
        return EvalConfig(episodes=episodes, seed=seed, workers=w, batch_envs=b, threads_per_worker=1)

    # batch_envs is explicit in every mode (EvalConfig's default of 4 would batch "serial" too).
    modes = {"serial": cfg(1, 1), f"workers{workers}": cfg(workers, 1)}
    if batched:
        modes[f"batched{batch_envs}"] = cfg(1, batch_envs)
    return modes


def bench_eval(
    path: str,
    task: str = "so101_pick_place",
    episodes: int = 8,
    max_steps: int | None = 100,
    workers: int = 2,
    batch_envs: int = 4,
    seed: int = 0,
) -> dict[str, Any]:
    """Time ``episodes`` episodes three ways and return the bench report dict (``emit`` prints it)."""
    if path == "expert":
        source: Any = expert_source(task)
    else:
        source = path
    spec = EnvSpec(task=task, max_steps=max_steps)
    cores = os.cpu_count() or 1
    modes = bench_modes(episodes, seed, workers, batch_envs, batched=path != "expert")
    seconds, outcomes, steps = {}, {}, {}
    for name, cfg in modes.items():
        seconds[name], ev = _timed(source, spec, cfg)
        # Outcome, length and lift per episode: the modes must agree on each episode, not just its class.
        outcomes[name] = [(e.outcome, e.steps, e.max_lift_m) for e in ev.episodes]
        steps[name] = sum(e.steps for e in ev.episodes)
    metrics: dict[str, float] = {}
    for name in modes:
        metrics[f"{name}_episodes_per_s"] = episodes / seconds[name]
        metrics[f"{name}_env_steps_per_s"] = steps[name] / seconds[name]
        metrics[f"{name}_wall_s"] = seconds[name]
    ratios = {f"{name}_vs_serial": seconds["serial"] / seconds[name] for name in modes if name != "serial"}
    same = all(o == outcomes["serial"] for o in outcomes.values())
    notes = [
        "one torch thread per process in every mode; wall time includes worker start-up (spawned "
        "processes import torch and mujoco once each)",
        "outcomes identical across modes" if same else f"OUTCOMES DIFFER across modes: {outcomes}",
        f"{cores} CPU cores; other processes on the machine make these numbers noisy",
    ]
    return {
        "benchmark": "eval",
        "device": "cpu",
        "config": {
            "policy": path,
            "task": task,
            "episodes": episodes,
            "max_steps": max_steps,
            "workers": workers,
            "batch_envs": batch_envs,
            "seed": seed,
        },
        "metrics": metrics,
        "ratios": ratios,
        "notes": notes,
    }
