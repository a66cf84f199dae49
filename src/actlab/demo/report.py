"""The report ``actlab demo`` writes: ``report.md``, ``report.html`` and ``summary.json``.

Everything shown here was computed by the stages and handed in by the pipeline (recording summary,
training metrics rows, evaluation results, the failure classes; scene.png is rendered by the pipeline);
this module only arranges it into tables, figures and links relative to the demo directory.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from actlab.evaluation.results import task_failures
from actlab.evaluation.video import write_last_frame
from actlab.sim.tasks import TASKS
from actlab.training.slowdown import SLOW_FACTOR
from actlab.utils.io import atomic_write_json
from actlab.viz.report import Report

_TIME_KEYS = (
    ("data wait", "time_data_s"),
    ("forward + backward", "time_fwd_bwd_s"),
    ("optimizer", "time_optim_s"),
)


def step_time_breakdown(
    rows: list[dict[str, Any]], batch_size: int | None = None, skip_first: int = 1
) -> dict[str, Any]:
    """The steady state of a run's step time, and how busy the machine was, from its metrics rows.

    One source for every figure: the windows after the first (warm-up) that took less than
    ``SLOW_FACTOR`` x the fastest quarter's step time are the steady ones; the phases, the whole step and
    samples/s (``batch_size`` / step time: the same windows, so the three agree) are their means. Windows
    slowed down by other work on a shared CPU (5-40x seen) are counted apart (``slow_windows``,
    ``slowest_step_s``), with the highest 1-minute load average recorded (``max_load_avg_1m``).
    """
    import numpy as np

    timed = [r for r in rows if "time_step_s" in r]
    later = timed[skip_first:] or timed
    if not later:
        return {}
    fast = float(np.percentile([r["time_step_s"] for r in later], 25))
    steady = [r for r in later if r["time_step_s"] < SLOW_FACTOR * fast] or later
    out: dict[str, Any] = {
        key: sum(r[key] for r in steady) / len(steady) for _, key in _TIME_KEYS if key in steady[0]
    }
    out["time_step_s"] = sum(r["time_step_s"] for r in steady) / len(steady)
    if batch_size and out["time_step_s"] > 0:
        out["samples_per_s"] = batch_size / out["time_step_s"]
    else:  # no batch size given: the steady windows' own wall-clock rates
        out["samples_per_s"] = float(np.median([r.get("samples_per_s", 0.0) for r in steady]))
    out["batch_size"] = batch_size
    out["windows"], out["slow_windows"] = len(later), len(later) - len(steady)
    out["slowest_step_s"] = max(r["time_step_s"] for r in later)
    loads = [r["load_avg_1m"] for r in timed if isinstance(r.get("load_avg_1m"), (int, float))]
    out["max_load_avg_1m"] = max(loads) if loads else None
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def duration(seconds: float) -> str:
    """``42 s`` under two minutes, ``7.3 min`` above."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def write_report(
    out: Path,
    plan: dict[str, Any],
    record: dict[str, Any],
    train: dict[str, Any],
    evaluation: dict[str, Any],
    stage_seconds: dict[str, float],
    reused: list[str],
    wall0: float,
    rows: list[dict[str, Any]],
    failures: tuple[str, ...],
    success_plot: str | None = None,
    batch_size: int | None = None,
    realtime: dict[str, Any] | None = None,
    next_steps: list[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """Write the demo's report pages and summary.json into ``out``; returns the summary dict.

    ``rows``: the training run's metrics rows; ``failures``: the evaluation's failure classes, in the
    order of the table's columns; ``success_plot``: the figure of the sweep with the fresh-seed
    confirmation beside it (relative to ``out``; default: the sweep's own plot, without it);
    ``batch_size``: the run's, so that the step time and samples/s of the report come from one source;
    ``realtime``: the ``--realtime`` stage's result (its delay sweep), None without the flag (no section);
    ``next_steps``: ``(why, command line)`` pairs, the report's last section (none: no section).
    """
    sweep, media = evaluation["sweep"], evaluation["media"]
    best = next(c for c in sweep["checkpoints"] if c["name"] == evaluation["best"])
    conf = media["checkpoints"][0]["summary"]
    summary = {
        # The best checkpoint on fresh seeds: unbiased, unlike its rate on the seeds it was chosen on.
        "success_rate": conf["success_rate"],
        "success_ci95": [conf["ci_low"], conf["ci_high"]],
        "eval_episodes": conf["episodes"],
        "eval_seeds": media["seeds"],
        "outcomes": conf["outcomes"],
        "best_checkpoint": best["path"],
        "best_step": best["step"],
        "sweep": {
            "best_success_rate": best["summary"]["success_rate"],
            "best_ci95": [best["summary"]["ci_low"], best["summary"]["ci_high"]],
            "episodes": best["summary"]["episodes"],
            "seeds": sweep["seeds"],
        },
        "checkpoints": [
            {"name": c["name"], "step": c["step"], "success_rate": c["summary"]["success_rate"]}
            for c in sweep["checkpoints"]
        ],
        "device": plan["device"],
        "preset": plan["preset"],
        "image_size": plan["image_size"],
        "dataset": {k: record[k] for k in ("episodes", "frames", "successes", "attempts")},
        "train": {k: train[k] for k in ("step", "final_loss", "best_val_loss", "samples_per_s", "wall_s")},
        "step_time": step_time_breakdown(rows, batch_size),
        "stage_seconds": stage_seconds,  # as measured when each stage ran (earlier runs for reused ones)
        "reused_stages": reused,
    }
    if realtime is not None:
        keys = ("mode", "latency_steps", "latency_ms", "success_rate", "ci_low", "ci_high", "boundary_jump")
        summary["realtime"] = {
            "dir": realtime["dir"],
            "seeds": realtime["seeds"],
            "cells": [{k: c[k] for k in keys} for c in realtime["cells"]],
        }
    summary["wall_s"] = round(time.perf_counter() - wall0, 1)  # this invocation
    # record + train + eval as measured when they ran: the demo's cost from scratch
    summary["pipeline_s"] = round(sum(v for k, v in stage_seconds.items() if k != "report"), 1)
    posters = write_posters(out, media)
    report = _build(
        plan, record, train, sweep, media, best, summary, failures, success_plot, posters, realtime
    )
    if next_steps:
        report.heading("Next: what to do with this policy")
        report.paragraph(
            f"Each command runs as written from the directory the demo ran in; {best['name']} is the "
            "checkpoint chosen above."
        )
        report.code("\n\n".join(f"# {why}\n{line}" for why, line in next_steps))
        summary["next_steps"] = [{"why": why, "command": line} for why, line in next_steps]
    report.write(out)
    atomic_write_json(out / "summary.json", summary)
    return summary


def write_posters(out: Path, media: dict[str, Any]) -> dict[str, str]:
    """The last frame of each filmed rollout as a PNG beside its video: ``{video: poster}``, relative to
    ``out``. Why the last: a browser previews a video with frame 0, where every episode looks the same; the
    last frame shows how it ended (the failure's class is written on it)."""
    posters = {}
    for e in media["checkpoints"][0]["episodes"]:
        if e.get("video"):
            video = Path("eval/best") / e["video"]
            poster = video.with_suffix(".last.png")
            if (out / video).is_file():
                write_last_frame(out / video, out / poster)
                posters[str(video)] = str(poster)
    return posters


def _build(
    plan, record, train, sweep, media, best, summary, failures, success_plot, posters, realtime
) -> Report:
    s, c = best["summary"], media["checkpoints"][0]["summary"]
    r = Report(f"actlab demo: {plan['task']}" if "task" in plan else "actlab demo: SO-101 pick-and-place")
    # what a success is, in the task's words (a push or a stack puts nothing in a bowl)
    spec = TASKS.get(plan.get("task", "so101_pick_place"), TASKS["so101_pick_place"])
    did = "put the cube in the bowl" if "bowl" in spec.success else f"succeeded ({spec.success})"
    r.paragraph(
        f"The best checkpoint, {best['name']} (step {best['step']}), {did} in "
        f"{c['successes']} of {c['episodes']} fresh held-out episodes ({_pct(c['success_rate'])}, "
        f"95% interval {_pct(c['ci_low'])}-{_pct(c['ci_high'])}; seeds {media['seed']}.."
        f"{media['seed'] + c['episodes'] - 1}){_failures(c['outcomes'])}. It was chosen as the best of the "
        f"sweep below with {s['successes']} of {s['episodes']} on other seeds ({_pct(s['success_rate'])}, "
        f'"chosen" in the success figure); the fresh episodes ("fresh seeds" there) make the rate above '
        f"free of that choice. Preset {plan['preset']} on {plan['device']}, {plan['image_size']} px cameras."
    )
    _time_table(r, summary)
    _dataset_section(r, record, plan)
    _training_section(r, train, summary["step_time"])
    _eval_section(r, sweep, failures, success_plot, c)
    if realtime is not None:
        _realtime_section(r, realtime)
    _media_section(r, media, posters)
    r.heading("Reproduce")
    r.code(
        "actlab demo --out DIR            # this report (re-running reuses finished stages)\n"
        "actlab data doctor DIR/data      # check the recorded dataset\n"
        f"actlab eval DIR/run --episodes {s['episodes']} --seed {sweep['seed']} --out DIR/eval2"
        "   # the sweep again\n"
        f"actlab eval DIR/run/checkpoints/{Path(best['path']).name} --episodes {c['episodes']} "
        f"--seed {media['seed']} --out DIR/eval3"
        "   # the best checkpoint on the fresh seeds"
    )
    return r


def _failures(outcomes: dict[str, int]) -> str:
    """``; failures: 2 never picked up, 1 timeout`` (empty when every episode succeeded)."""
    parts = [f"{n} {k.replace('_', ' ')}" for k, n in outcomes.items() if k != "success" and n]
    return f"; failures: {', '.join(parts)}" if parts else ""


# What each stage's time covers (the train stage is more than the training loop of the Training table).
_STAGE_COVERS = {
    "record": "scripted-expert episodes in the sim, video encoding",
    "train": "decoding the frame cache, statistics, building the model, then the training loop",
    "eval": "the sweep, the best checkpoint on fresh seeds, its videos and whiskers",
    "realtime": "the best checkpoint under inference delays (--realtime)",
}


def _time_table(r: Report, summary: dict) -> None:
    rows = []
    for stage in ("record", "train", "eval", "realtime"):
        seconds = summary["stage_seconds"].get(stage)
        if seconds is not None:
            when = "reused from an earlier run" if stage in summary["reused_stages"] else "this run"
            rows.append([stage, duration(seconds), _STAGE_COVERS[stage], when])
    rows.append(["this invocation, in all", duration(summary["wall_s"]), "", "wall clock"])
    r.table(rows, ["stage", "time", "covers", "when"])


def _dataset_section(r: Report, record: dict, plan: dict) -> None:
    r.heading("Demonstrations")
    r.table(
        [
            ["episodes recorded", record["episodes"]],
            ["frames", record["frames"]],
            ["scripted expert success", f"{record['successes']}/{record['attempts']}"],
            ["cameras", f"top + wrist, {plan['image_size']}x{plan['image_size']} px, 30 fps"],
            ["recording time", duration(record["seconds"])],
        ],
        ["dataset (data/)", "value"],
    )
    r.image(
        "scene.png",
        "One scripted demonstration as the policy sees it (its own pixels, drawn 2x): top camera (upper "
        "row) and wrist camera (lower row), time running left to right.",
    )


def _training_section(r: Report, train: dict, times: dict) -> None:
    r.heading("Training")
    r.table(
        [
            ["steps", train["step"]],
            ["final training loss", f"{train['final_loss']:.4f}" if train["final_loss"] is not None else "-"],
            ["best validation loss", f"{train['best_val_loss']:.4f}" if train["best_val_loss"] else "-"],
            ["samples/s over the whole loop", f"{train['samples_per_s']:.0f}"],
            ["training loop time", duration(train["wall_s"])],
        ],
        ["run (run/)", "value"],
    )
    r.paragraph(
        "The training loop time and its samples/s cover the optimizer steps with the validation passes "
        "and checkpoint writes between them (and any stretch the machine was busy); the steady-state "
        "figures are below the training figure. The train stage's time in the table above is longer: it "
        "also includes decoding every camera frame once into the frame cache (cache/), computing the "
        "normalization statistics and building the model before the first step, and drawing this figure "
        "after the last."
    )
    r.image(
        "run/training.png",
        "Training curves: loss terms with the validation loss (top), learning rates (middle), and where "
        "each step's time went, with samples/s (bottom).",
    )
    if times:
        total = times["time_step_s"]
        rows = [
            [label, f"{1000 * times[key]:.1f} ms", f"{100 * times[key] / total:.1f}%"]
            for label, key in _TIME_KEYS
            if key in times
        ]
        per = f" at batch {times['batch_size']}" if times.get("batch_size") else ""
        rows.append(["whole step", f"{1000 * total:.1f} ms", f"{times['samples_per_s']:.0f} samples/s{per}"])
        r.paragraph(
            "Where a steady training step's time went (mean over the logged windows after the first, "
            "leaving out windows slowed down 3x or more by other work on the machine; samples/s is the "
            "batch size over this step time):"
        )
        r.table(rows, ["phase", "time per step", "share"])
        busy = busy_sentence(times)
        if busy:
            r.paragraph(busy)


def busy_sentence(times: dict[str, Any]) -> str:
    """Says when the machine was busy during training (empty when it was not, as far as the rows show)."""
    slow, n = times.get("slow_windows", 0), times.get("windows", 0)
    load = times.get("max_load_avg_1m")
    if not slow:
        return ""
    load_words = f", 1-minute load average up to {load:.1f}" if load is not None else ""
    return (
        f"The machine was busy during training: {slow} of {n} logged windows took 3x or more the steady "
        f"step time (up to {1000 * times['slowest_step_s']:,.0f} ms a step{load_words}). They are left out "
        "of the breakdown above and drawn off the scale in the figure; the whole-loop samples/s includes "
        "them. On a shared CPU run with OMP_WAIT_POLICY=PASSIVE (docs/training.md)."
    )


def _eval_section(
    r: Report, sweep: dict, failures: tuple[str, ...], success_plot: str | None, confirmed: dict
) -> None:
    r.heading("Evaluation: every checkpoint on the same held-out episodes")
    own = task_failures(c["summary"]["outcomes"] for c in sweep["checkpoints"])
    failures = (*failures, *own)
    also = f", or by the task's own classes ({', '.join(own)})" if own else ""
    r.paragraph(
        f"{sweep['episodes']} episodes per checkpoint, seeds {sweep['seeds']}; the cube positions differ "
        "from every recorded demonstration. Failures are classified as never_picked_up, "
        f"dropped_during_transport, missed_goal or timeout{also} (docs/evaluation.md)."
    )
    # Spaces instead of underscores so the long class names wrap in narrow columns.
    headers = ["checkpoint", "step", "success", "95% CI", *(f.replace("_", " ") for f in failures)]
    headers += ["pick rate", "drop rate"]
    rows = []
    for c in sweep["checkpoints"]:
        s = c["summary"]
        rows.append(
            [
                c["name"],
                c["step"],
                f"{s['successes']}/{s['episodes']} ({_pct(s['success_rate'])})",
                f"{_pct(s['ci_low'])}-{_pct(s['ci_high'])}",
                *[s["outcomes"].get(f, 0) for f in failures],
                _pct(s["pick_rate"]),
                _pct(s["drop_rate"]),
            ]
        )
    r.table(rows, headers)
    if success_plot is not None:
        r.image(
            success_plot,
            "Top: success rate per checkpoint on the same held-out episodes with 95% intervals (green; "
            '"chosen" marks the best, which picked the checkpoint), and that checkpoint again on '
            f'{confirmed["episodes"]} fresh episodes (red diamond, "fresh seeds": '
            f"{_pct(confirmed['success_rate'])}, the headline's number). Bottom: the failure classes of the "
            "sweep's other episodes.",
        )
    elif "plot" in sweep["files"]:
        r.image(
            f"eval/sweep/{sweep['files']['plot']}",
            "Success rate per checkpoint with 95% intervals (top) and the failure classes of the other "
            "episodes (bottom).",
        )


def _media_section(r: Report, media: dict, posters: dict[str, str]) -> None:
    files = media["files"]
    if "whiskers_still" in files:
        r.heading("Whiskers: predicted action chunks")
        r.image(
            f"eval/best/{files['whiskers_still']}",
            "A frame of the whiskers video (top camera): the gripper paths of the latest predicted chunks "
            "in green (older ones fading) and the path the gripper really took in magenta.",
        )
        r.video(
            f"eval/best/{files['whiskers']}",
            "whiskers video, fresh episode 0",
            poster=f"eval/best/{files['whiskers_still']}",
        )
    episodes = media["checkpoints"][0]["episodes"]
    filmed = [e for e in episodes if e["video"]]
    if not filmed:
        return
    # Failures first (the evaluation filmed the first failure of each kind, then successes).
    filmed.sort(key=lambda e: (e["outcome"] == "success", e["index"]))
    failed = sum(e["outcome"] != "success" for e in episodes)
    r.heading("Rollout videos of the best checkpoint (fresh seeds)")
    shown = sum(e["outcome"] != "success" for e in filmed)
    what = (
        f"{shown} of its {failed} failure(s) (the first of each kind of failure) and "
        f"{len(filmed) - shown} success(es)"
        if failed
        else f"{len(filmed)} success(es): every episode succeeded, so there is no failure to show"
    )
    r.paragraph(
        f"{len(filmed)} of the {len(episodes)} fresh episodes, {what}. SUCCESS appears from the step the "
        "simulator reports the cube in the bowl; a failure's class appears when the episode has ended "
        "(the last frame is held for a second). Each preview is the video's last frame: how it ended."
    )
    for e in filmed:
        outcome = e["outcome"].replace("_", " ")
        video = f"eval/best/{e['video']}"
        r.video(video, f"episode {e['index']} (seed {e['seed']}): {outcome}", poster=posters.get(video))


# What each execution mode of the real-time section means (one sentence each; docs/evaluation.md has the
# exact rules). D is the delay in control steps.
_MODE_MEANS = {
    "sync": "the simulation waits while the policy computes its next chunk: no delay, the reference "
    "(the evaluation above ran this way)",
    "async": "the arm executes the old chunk while the next is computed, and switches to the new chunk when "
    "it arrives D steps later (from its index D)",
    "blend": "as async, but where the new chunk overlaps the rest of the old one the two are blended (old "
    "chunk weight 1 for the D committed steps, decaying to 0)",
    "rtc": "as blend, and the D committed actions are handed to the policy as a prefix, which an "
    "act_relative policy trained with rtc_max_delay continues",
}


def _realtime_section(r: Report, rt: dict[str, Any]) -> None:
    fps = rt["fps"]
    r.heading("Real time: the best checkpoint under inference delays")
    r.paragraph(
        f"On a robot the arm keeps moving while the next chunk is computed. {rt['checkpoint']} ran "
        f"{rt['episodes']} episodes per cell, the same in every cell: the fresh seeds above "
        f"({rt['seeds']}); a delay of D control steps is D/{fps} s at the simulator's {fps} fps "
        f"(4 steps = {1000 * 4 / fps:.0f} ms). Boundary jump: the mean joint-space jump (degrees) at the "
        "steps that began a new chunk; spike: its ratio to an ordinary step's change (docs/evaluation.md)."
    )
    rows = [
        [
            c["mode"],
            f"{c['latency_steps']} ({c['latency_ms']:.0f} ms)",
            c["horizon"],
            f"{c['successes']}/{c['episodes']} ({_pct(c['success_rate'])})",
            f"{_pct(c['ci_low'])}-{_pct(c['ci_high'])}",
            "-" if c["boundary_jump"] is None else f"{c['boundary_jump']:.3f}",
            "-" if c["spike_factor"] is None else f"{c['spike_factor']:.2f}",
        ]
        for c in rt["cells"]
    ]
    r.table(rows, ["mode", "delay", "horizon", "success", "95% CI", "boundary jump", "spike"])
    r.image(
        f"{rt['dir']}/sweep.png",
        "Success with its 95% interval (left) and the mean chunk-boundary jump (right) against the delay, "
        "one line per mode; sync (no delay) is the dashed line.",
    )
    modes = list(dict.fromkeys(c["mode"] for c in rt["cells"]))
    r.paragraph(" ".join(f"{m}: {_MODE_MEANS[m]}." for m in modes if m in _MODE_MEANS))
    if rt["skipped"]:
        left = "; ".join(
            f"{s['mode']}"
            + (f" at delay {s['latency_steps']}" if s["latency_steps"] is not None else "")
            + f" ({s['reason']})"
            for s in rt["skipped"]
        )
        r.paragraph(f"Not run, as this policy cannot: {left}.")
    r.paragraph(f"Files: {rt['dir']}/sweep.json (one record per cell), sweep.md, sweep.png.")
