"""Evaluation throughput, measured side by side in one run: serial rollouts vs worker processes vs
lockstep-batched envs (one policy call for B envs), on the same seeded episodes.

Run as ``actlab bench eval PATH [--episodes N] [--max-steps T] [--json]`` (PATH: a policy bundle, or
``expert`` for the scripted expert, which cannot be batched). Prints the report format of
``actlab.profiling.report``. The three modes must agree on every episode's outcome; the report says so.
"""

from __future__ import annotations

import os
import time
from typing import Any, TextIO

from actlab.evaluation.envs import EnvSpec
from actlab.evaluation.experts import expert_source
from actlab.evaluation.harness import EvalConfig, evaluate
from actlab.evaluation.seeds import DEFAULT_SEED


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

    # batch_envs is explicit in every mode (EvalConfig's default of 4 would batch "serial" too). A mode
    # of 1 worker or 1 env per call is serial's own configuration: timed again, it was reported 19-30x
    # faster than serial (serial had paid the one-time start), so it is left out (bench_eval says so).
    modes = {"serial": cfg(1, 1)}
    if workers > 1:
        modes[f"workers{workers}"] = cfg(workers, 1)
    if batched and batch_envs > 1:
        modes[f"batched{batch_envs}"] = cfg(1, batch_envs)
    return modes


def compare_outcomes(outcomes: dict[str, list[tuple[str, int, float]]]) -> list[str]:
    """Notes comparing each mode's ``(outcome, steps, max lift)`` per episode with the serial run's.

    Outcome and length must be equal: they are what an evaluation reports. The lift is only compared
    in words: a policy called on a batch of B envs computes with other matrix shapes, so its actions
    differ in the last bits and a lift of millimetres differs with them (seen: 13.3 vs 17.2 mm in a
    never_picked_up episode of 60 steps, every outcome and length equal) without anything being wrong.
    A real difference lists the episodes that differ, one line each.
    """
    ref = outcomes["serial"]
    differ = []
    for name, got in outcomes.items():
        for i, (a, b) in enumerate(zip(ref, got)):
            if a[:2] != b[:2]:
                differ.append(f"episode {i}: serial {a[0]} in {a[1]} steps, {name} {b[0]} in {b[1]} steps")
    if differ:
        return [f"OUTCOMES DIFFER across modes in {len(differ)} episode(s): " + "; ".join(differ)]
    lift = max((abs(a[2] - b[2]) for got in outcomes.values() for a, b in zip(ref, got)), default=0.0)
    note = f"outcomes and episode lengths identical across modes ({len(ref)} episodes)"
    if lift > 1e-9:
        note += (
            f"; the max lift differs by up to {1000 * lift:.1f} mm (batched inference rounds differently, "
            "so trajectories differ slightly: expected)"
        )
    return [note]


def bench_eval(
    path: str,
    task: str = "so101_pick_place",
    episodes: int = 8,
    max_steps: int | None = 100,
    workers: int = 2,
    batch_envs: int = 4,
    seed: int = DEFAULT_SEED,
    progress: TextIO | None = None,
) -> dict[str, Any]:
    """Time ``episodes`` episodes three ways and return the bench report dict (``emit`` prints it).
    ``progress``: where to say which mode is being timed and how long it took (None: silent)."""
    if path == "expert":
        source: Any = expert_source(task)
    else:
        source = path
    spec = EnvSpec(task=task, max_steps=max_steps)
    cores = os.cpu_count() or 1
    modes = bench_modes(episodes, seed, workers, batch_envs, batched=path != "expert")
    same = []  # options that name serial's own configuration: left out of the timing
    if workers <= 1:
        same.append(f"--workers {workers}")
    if batch_envs <= 1 and path != "expert":
        same.append(f"--batch-envs {batch_envs}")
    if progress is not None:
        print(
            "[warm-up] one untimed episode (policy load, MuJoCo, first calls) ...", file=progress, flush=True
        )
    # Paid once by whichever mode ran first (serial): the modes are timed on an equal footing after it.
    warm_up = EvalConfig(episodes=1, seed=seed, workers=1, batch_envs=1, threads_per_worker=1)
    evaluate(source, EnvSpec(task=task, max_steps=2), warm_up)
    seconds, outcomes, steps = {}, {}, {}
    for i, (name, cfg) in enumerate(modes.items()):
        if progress is not None:
            how = f"{cfg.workers} process(es), {cfg.batch_envs} env(s) per policy call"
            print(
                f"[{i + 1}/{len(modes)}] {name}: {episodes} episodes ({how}) ...", file=progress, flush=True
            )
        seconds[name], ev = _timed(source, spec, cfg)
        if progress is not None:
            print(f"      {name}: {seconds[name]:.1f} s", file=progress, flush=True)
        # Outcome, length and lift per episode: the modes must agree on each episode, not just its class.
        outcomes[name] = [(e.outcome, e.steps, e.max_lift_m) for e in ev.episodes]
        steps[name] = sum(e.steps for e in ev.episodes)
    metrics: dict[str, float] = {}
    for name in modes:
        metrics[f"{name}_episodes_per_s"] = episodes / seconds[name]
        metrics[f"{name}_env_steps_per_s"] = steps[name] / seconds[name]
        metrics[f"{name}_wall_s"] = seconds[name]
    ratios = {f"{name}_vs_serial": seconds["serial"] / seconds[name] for name in modes if name != "serial"}
    notes = [
        "one torch thread per process in every mode; wall time includes worker start-up (spawned "
        "processes import torch and mujoco once each); one untimed warm-up episode ran first",
        *(
            [
                f"{' and '.join(same)} {'are' if len(same) > 1 else 'is'} serial's configuration (1 process, "
                "1 env per call): not timed twice"
            ]
            if same
            else []
        ),
        *compare_outcomes(outcomes),
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
