"""``actlab eval``: evaluate checkpoints (a sweep for a run directory) in the sim or a peer gymnasium env.

Argument parsing only; the work is in ``actlab.evaluation``.
"""

from __future__ import annotations

import argparse

from actlab.cli import (
    _options,
    add_json_flag,
    add_lerobot_timeout,
    bounded,
    non_empty,
    option_ceiling,
    subcommand,
)

ORDER = 30

_EPILOG = """\
examples:
  actlab eval runs/demo/run --episodes 50 --out runs/sweep               # every checkpoint: a sweep
  actlab eval runs/demo/run/checkpoints/step_0002000 --episodes 50 --videos 3 \\
      --video-pick failures --out runs/eval2000    # film the failures first
  actlab eval runs/demo/run/checkpoints/step_0002000 --episodes 5 --whiskers --out runs/whiskers
  actlab eval --expert --episodes 50                                     # the scripted expert, for reference
  actlab eval runs/demo/run/checkpoints/step_0002000 --episodes 50 --perturb camera_shift=2,4 \\
      --perturb lighting=0.5 --out runs/robust     # robustness: perturb.md, perturb.png (docs/evaluation.md)
  actlab eval runs/demo/run/checkpoints/step_0002000 --episodes 20 --latency 0,4 \\
      --execution async,ensemble --out runs/delay     # a delay sweep: table, figure, a record per cell
  actlab eval --lerobot-policy outputs/train/diffusion/checkpoints/last/pretrained_model \\
      --lerobot-python ~/lerobot-venv/bin/python --episodes 20 --videos 2 --out runs/diffusion

step_0002000 is the CPU demo's best checkpoint (of 5; `ls runs/demo/run/checkpoints` lists them all).
--task gym_pusht/PushT-v0 (or another gymnasium id) evaluates in a peer environment. --lerobot-policy
evaluates any LeRobot policy (ACT, Diffusion, SmolVLA, Pi0 ...) in its own venv; a LeRobot run directory
sweeps its checkpoints, and a bundle given beside it is evaluated side by side on the same seeds.

Episode i starts from env.reset(seed=SEED+i) for every checkpoint (SEED 100000 by default: the
demo's sweep seeds, never the scenes its demonstrations were recorded from; seeds that meet a bundle's
training scenes are refused), the policy is reset before every episode, and each bundle's own
normalization statistics are used. Results: success rate with a Wilson
95% interval, failure taxonomy (never_picked_up, dropped_during_transport, missed_goal, timeout), pick
and drop rates, mean steps of successful episodes, max lift height (docs/evaluation.md).

Real time (--execution, --latency): the first chunk of an episode is computed before the clock starts;
after that an inference starts every --horizon steps from that step's observation and its chunk arrives
--latency control steps later, the previous chunk executing meanwhile. Modes: sync (the sim waits for the
policy: today's evaluation, the default), async (switch to the new chunk as it comes), ensemble (ACT's
temporal ensembling of every arrived chunk, a new inference as soon as the last one finished), blend
(the new chunk's overlap blended with the old one: inference-time RTC), rtc (blend, and the committed
actions handed to the policy as a prefix: act_relative trained with rtc_max_delay), correct (async's
chunks, each step's action corrected from the newest observation by the policy's correction head: a
policy trained with --set policy.correction_head=true). Comma lists make a
grid on the same seeds; every episode also reports chunk-boundary jump, spike factor, jerk and chunk
switches of the actions it executed.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = subcommand(
        sub,
        "eval",
        "evaluate checkpoints: success with 95%% CI, failure taxonomy, sweeps, videos, whiskers",
        _EPILOG,
        description="Roll out policy bundles (or every checkpoint of a run directory) on seeded episodes "
        "and report success with a 95% confidence interval and the failure taxonomy.",
    )
    p.add_argument("paths", nargs="*", metavar="PATH", help="checkpoint bundle(s) or run directory(ies)")
    p.add_argument("--expert", action="store_true", help="evaluate the sim's scripted expert (no PATH)")
    _add_lerobot_flags(p)
    p.add_argument(
        "--task",
        default="so101_pick_place",
        help="sim task or gymnasium id, e.g. gym_pusht/PushT-v0 (default so101_pick_place)",
    )
    p.add_argument("--episodes", type=int, default=50, metavar="N", help="episodes per checkpoint (50)")
    # 100000 is actlab.evaluation.seeds.DEFAULT_SEED, written out so that --help stays light (a test checks)
    p.add_argument(
        "--seed",
        type=int,
        default=100_000,
        metavar="S",
        help="episode i uses seed S+i (100000: above the seeds `actlab sim record` and the demo record from)",
    )
    p.add_argument(
        "--allow-training-seeds",
        action="store_true",
        help="evaluate even when seeds S.. include scenes a bundle's training data was recorded from "
        "(refused by default; the results then count those episodes)",
    )
    p.add_argument("--videos", type=int, default=0, metavar="K", help="mp4 of K episodes (0)")
    p.add_argument(
        "--video-pick",
        choices=["first", "failures"],
        default="first",
        help="which episodes --videos films: the first K (first), or the first failure of each failure "
        "class, then successes, re-run with the camera on after all episodes ran (failures)",
    )
    p.add_argument("--whiskers", action="store_true", help="also write a whiskers video (last checkpoint)")
    p.add_argument("--whiskers-episode", type=int, default=0, metavar="I", help="episode for --whiskers (0)")
    p.add_argument("--whiskers-every", type=int, default=1, metavar="K", help="predict every K steps (1)")
    p.add_argument("--out", metavar="DIR", help="write results.json/.md, plot and videos here (atomically)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out directory")
    p.add_argument("--workers", type=int, default=2, metavar="W", help="rollout processes (2)")
    p.add_argument("--batch-envs", type=int, default=4, metavar="B", help="envs per policy call (4)")
    p.add_argument("--threads", type=int, metavar="N", help="torch threads per rollout process (cores/W)")
    p.add_argument("--device", default="cpu", help="policy device: cpu, cuda, cuda:N, auto (cpu)")
    p.add_argument("--max-steps", type=int, metavar="T", help="episode step limit (the env's by default)")
    p.add_argument("--image-size", type=int, metavar="PX", help="sim render size (the bundle's by default)")
    p.add_argument("--markdown", action="store_true", help="print the summary as a markdown table")
    p.add_argument(
        "--units",
        choices=("degrees", "so101_follower"),
        help="sim joint units of the policy's data: degrees (the sim's, default) or so101_follower "
        "(gripper 0-100, as LeRobot's real follower)",
    )
    p.add_argument(
        "--perturb",
        action="append",
        default=[],
        metavar="NAME[=LEVELS]",
        help="robustness sweep, repeatable: camera_shift, lighting, table_color, object_color, distractors, "
        "action_noise, obs_delay; LEVELS a comma list (each name's default levels without one)",
    )
    _add_realtime_flags(p)
    add_json_flag(p)
    # each of these was accepted and did nothing without the option it belongs to
    _options.needs(p, "--whiskers-episode", on="--whiskers")
    _options.needs(p, "--whiskers-every", on="--whiskers")
    _options.needs(p, "--video-pick", on="--videos", what="--videos K (K above 0)")
    _options.needs(p, "--overwrite", on="--out")
    for flag in ("--lerobot-python", "--rename", "--lerobot-timeout", "--instruction"):
        _options.needs(p, flag, on="--lerobot-policy")
    p.set_defaults(_run=_run)
    _register_compare(p)


_COMPARE_EPILOG = """\
examples:
  actlab eval runs/demo/run/checkpoints/step_0002000 --episodes 20 --execution async --latency 4 \\
      --out runs/async4
  actlab eval runs/demo/run/checkpoints/step_0002000 --episodes 20 --out runs/sync
  actlab eval compare runs/sync runs/async4      # B (async at delay 4) against A (sync), seed by seed
  actlab eval compare runs/sync runs/async4 --json

A and B: directories actlab eval --out wrote (results.json, or a delay sweep's sweep.json) or those
files; PATH#NAME picks one checkpoint of a sweep over checkpoints (runs/sweep#step_0002000) or one cell
of a delay sweep (runs/delay#async@4). Both must hold the same seeds (refused otherwise, naming them).
Reported: per-seed agreement, the difference B - A with its paired 95% interval (Agresti-Min),
McNemar's exact test, and the episodes a difference of that size needs (Connor 1987, power 80%).
"""


class _EvalParser(argparse.ArgumentParser):
    """``actlab eval``'s parser: ``actlab eval compare A B`` is handed to the compare parser (eval's own
    positional PATHs would otherwise take ``compare`` for a checkpoint)."""

    compare_parser: argparse.ArgumentParser | None = None

    def parse_known_args(self, args=None, namespace=None):
        if args and args[0] == "compare" and self.compare_parser is not None:
            return self.compare_parser.parse_known_args(args[1:], namespace)
        return super().parse_known_args(args, namespace)


def _register_compare(p: argparse.ArgumentParser) -> None:
    c = argparse.ArgumentParser(
        prog="actlab eval compare",
        description="Compare two evaluations on the same seeds: per-seed agreement, the success difference "
        "with its paired 95% interval, McNemar's exact test, and the episodes such a difference needs.",
        epilog=_COMPARE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("a", metavar="A", help="the reference evaluation: DIR, results.json, sweep.json, [#NAME]")
    c.add_argument("b", metavar="B", help="the evaluation compared with it, on the same seeds")
    c.add_argument("--alpha", type=float, default=0.05, help="significance level of the test (0.05)")
    add_json_flag(c)
    c.set_defaults(_run=_run_compare, command="eval")
    p.__class__ = _EvalParser  # the subparsers action builds plain parsers; this one dispatches compare
    p.compare_parser = c
    p.epilog = (p.epilog or "") + (
        "\nactlab eval compare A B compares two evaluations on the same seeds (actlab eval compare --help).\n"
    )


def _run_compare(args: argparse.Namespace) -> int:
    import json
    import sys

    # lazily, like every actlab import in cli: `actlab --help` never imports torch
    from actlab.evaluation.compare import compare, compare_text, load_outcomes

    result = compare(load_outcomes(args.a), load_outcomes(args.b), alpha=args.alpha)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(compare_text(result))
    return 0


def _run(args: argparse.Namespace) -> int:
    import json
    import sys

    # lazily, like every actlab import in cli: `actlab --help` never imports torch
    from actlab.errors import ActlabError
    from actlab.evaluation import EnvSpec, EvalConfig, resolve_paths, run_eval

    if bool(args.expert) == bool(args.paths or args.lerobot_policy):
        raise ActlabError(
            "give checkpoint PATHs and/or --lerobot-policy DIRs, or --expert alone",
            field="PATH",
            found=f"{len(args.paths)} path(s), --expert={args.expert}, "
            f"--lerobot-policy {len(args.lerobot_policy)} time(s)",
            fix="actlab eval RUN_DIR ..., actlab eval --lerobot-policy DIR --lerobot-python PY, "
            "or actlab eval --expert",
        )
    # lazily, like every actlab import in cli: `actlab --help` never imports torch
    from actlab.utils.device import resolve_device

    device = str(resolve_device(args.device))  # every spelling checked here; CUDA always indexed
    units = {"units": args.units} if args.units else {}  # (a peer env has no units option)
    spec = EnvSpec(task=args.task, image_size=args.image_size, max_steps=args.max_steps, env_kwargs=units)
    realtime = _realtime_plan(args, spec)
    # lazily, like every actlab import in cli: `actlab --help` never imports torch
    from actlab.utils.threads import say_if_oversubscribed

    say_if_oversubscribed(args.threads, "--threads")
    cfg = EvalConfig(
        episodes=args.episodes,
        seed=args.seed,
        allow_training_seeds=args.allow_training_seeds,
        workers=args.workers,
        batch_envs=args.batch_envs,
        videos=args.videos,
        video_pick=args.video_pick,
        device=device,
        threads_per_worker=args.threads,
        execution=realtime.get("execution"),
    )
    if args.expert:
        # lazily, like every actlab import in cli: `actlab --help` never imports torch
        from actlab.evaluation.experts import expert_source

        sources = [expert_source(args.task)]
    else:
        # actlab bundles and bridged LeRobot policies side by side, on the same seeds
        sources = resolve_paths(args.paths) if args.paths else []
        if args.lerobot_policy:
            sources += _lerobot_sources(args, spec, device)
    whiskers = {"episode": args.whiskers_episode, "every": args.whiskers_every} if args.whiskers else None
    if whiskers is not None and args.expert:
        raise ActlabError(
            "whiskers need a policy that predicts action chunks; the scripted expert does not",
            field="--whiskers",
            found="--expert",
            fix="pass a checkpoint PATH for --whiskers",
        )
    if args.perturb:
        return _run_perturb(args, sources, spec, cfg, realtime)
    if realtime.get("grid"):
        return _run_sweep(args, sources, spec, cfg, realtime)
    progress = _progress(len(sources) * cfg.episodes, quiet=args.json)
    try:
        report = run_eval(sources, spec, cfg, args.out, args.overwrite, whiskers, on_episode=progress)
    finally:
        for src in sources:
            close = getattr(src.obj, "close", None)  # bridged LeRobot policies: stop their child process
            if close is not None:
                close()
    if progress is not None:
        progress.close()
    rec = _recommendation(report, sources, cfg, spec)
    if args.json:
        json.dump({**report.to_dict(), "recommendation": rec and rec.to_dict()}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(report.table(markdown=args.markdown))
    if cfg.execution is not None:
        print(_smoothness_line(report.evals, cfg.execution))
    print(
        f"\n{cfg.episodes} episodes per checkpoint, seeds {cfg.seed}..{cfg.seed + cfg.episodes - 1}, "
        f"{report.meta['seconds']:.1f} s"
    )
    if report.out_dir is not None:
        for kind, rel in report.files.items():
            print(f"{kind}: {report.out_dir / rel}")
        if cfg.videos:
            print(f"videos: {report.out_dir / 'videos'}")
    if rec is not None:
        print("\n" + rec.text())
    return 0


def _recommendation(report, sources, cfg, spec):
    """The mode for the arm from this evaluation: its best checkpoint in the mode it ran, on its task."""
    # lazily, like every actlab import in cli: `actlab --help` never imports torch
    from actlab.evaluation.recommend import from_eval, recommend
    from actlab.evaluation.sources import source_limits
    from actlab.evaluation.sweep import best_checkpoint

    best = best_checkpoint(report.evals)
    src = next((s for s in sources if best is not None and s.name == best.name), None)
    if src is None or src.path is None:
        return None
    return recommend(src, [from_eval(best, cfg.execution, source_limits(src))], env=spec)


def _add_realtime_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "real time: chunks computed while the previous one executes (docs/evaluation.md)"
    )
    g.add_argument(
        "--execution",
        default="sync",
        metavar="MODES",
        help="sync (default: the sim waits for the policy), async (switch to each new chunk as it arrives), "
        "ensemble (temporal ensembling of the arrived chunks), blend (overlap blended with the old chunk), "
        "rtc (blend + the committed actions as the policy's prefix; act_relative with rtc_max_delay), "
        "correct (async + the policy's correction head at every step; correction_head=true); "
        "a comma list makes a sweep",
    )
    g.add_argument(
        "--latency",
        default="0",
        metavar="D",
        help="inference delay in control steps, e.g. 4 (default 0: no delay, also for a real-time "
        "--execution), milliseconds rounded up at the env's fps, e.g. 100ms, or 'measured' (median time of "
        "the policy on --device, batch --batch-envs); a comma list makes a sweep",
    )
    g.add_argument(
        "--horizon",
        type=non_empty(_horizon_items),  # '' refused as every text option's is
        metavar="S",
        help="actions executed per chunk (steps between inference starts); default: the policy's "
        "n_action_steps (ensemble: max(1, delay)); a comma list, e.g. 8,10, makes a sweep that measures "
        "each (a pair that cannot run with a delay of the sweep is left out and said)",
    )


def _horizon_items(text: str) -> str:
    """--horizon's items checked at parse time, each as every count option is (a whole number >= 1 and
    within the ceiling, named in argparse's usage error); the list itself (empty or repeated items) is
    read by parse_horizons after parsing, as every comma list is."""
    check = bounded(int, 1, *option_ceiling("horizon"))  # as an int option's: floor 1, its ceiling
    for item in text.split(","):
        if item.strip():
            try:
                check(item.strip())
            except ValueError:  # argparse would name the function: "invalid _horizon_items value"
                raise argparse.ArgumentTypeError(
                    f"expected a whole number of actions (or a comma list of them), found {item.strip()!r}"
                ) from None
    return text


def _realtime_plan(args: argparse.Namespace, spec) -> dict:
    """Parsed --execution/--latency/--horizon: one ExecutionSpec, or a grid for the sweep."""
    # lazily, like every actlab import in cli: `actlab --help` never imports torch
    from actlab.evaluation.realtime import MEASURED, parse_horizons, parse_latencies, parse_modes
    from actlab.policies.execution import ExecutionSpec

    modes = parse_modes(args.execution)
    horizons = parse_horizons(args.horizon)
    text = str(args.latency)
    fps = _task_fps(spec) if ("ms" in text or MEASURED in text or len(modes) > 1 or "," in text) else 30
    latencies = parse_latencies(text, fps)
    if set(modes) == {"sync"} and any(d != 0 for d in latencies):
        # lazily, like every actlab import in cli: `actlab --help` never imports torch
        from actlab.errors import ActlabError

        # sync runs at delay 0 whatever --latency says: 'measured' timed the policy and then ran sync
        raise ActlabError(
            "--latency has no effect with --execution sync (the sim waits for the policy: delay 0)",
            field="--latency",
            expected="--latency 0 with --execution sync, or a real-time mode",
            found=f"--latency {text} --execution {args.execution}",
            fix="add a real-time mode, e.g. --execution sync,async (sync is then the reference), "
            "or leave --latency out (nothing was run)",
        )
    if len(modes) * len(latencies) * len(horizons) > 1 or MEASURED in latencies:
        return {"grid": True, "modes": modes, "latencies": latencies, "horizons": horizons, "fps": fps}
    (mode,), (d,), (h,) = modes, latencies, horizons
    if mode == "sync" and d == 0 and h is None:
        return {}
    return {"execution": ExecutionSpec(mode=mode, latency=int(d), horizon=h)}


def _task_fps(spec) -> int:
    """Control rate of the task (for --latency in ms and the sweep's ms column)."""
    if not spec.is_peer:
        # lazily, like every actlab import in cli: `actlab --help` never imports torch
        from actlab.sim.env import FPS

        return FPS  # every actlab sim task steps at this rate
    # lazily, like every actlab import in cli: `actlab --help` never imports torch
    from actlab.evaluation.envs import env_fps, make_eval_env

    env = make_eval_env(spec)
    try:
        return env_fps(env)
    finally:
        getattr(env, "close", lambda: None)()


def _smoothness_line(evals, execution) -> str:
    parts = []
    for ev in evals:
        s = ev.summary
        jump = "-" if s.boundary_jump is None else f"{s.boundary_jump:.4f}"
        spike = "-" if s.spike_factor is None else f"{s.spike_factor:.2f}"
        jerk = "-" if s.jerk is None else f"{s.jerk:.4f}"
        parts.append(f"{ev.name}: boundary jump {jump}, spike {spike}, jerk {jerk}")
    return f"\nexecution {execution.mode}, latency {execution.latency} steps: " + "; ".join(parts)


def _run_sweep(args: argparse.Namespace, sources, spec, cfg, plan: dict) -> int:
    import json
    import sys
    from pathlib import Path

    # lazily, like every actlab import in cli: `actlab --help` never imports torch
    from actlab.errors import ActlabError
    from actlab.evaluation.realtime import SWEEP_FILES, delay_sweep, skipped_text, sweep_table

    if cfg.videos or args.whiskers:
        raise ActlabError(
            "videos and whiskers are per evaluation, not per sweep cell",
            field="--videos / --whiskers",
            fix="run one cell (a single --execution and --latency) with --videos",
        )
    fps = plan["fps"]

    def say(cell) -> None:
        if not args.json:
            s = cell.summary
            h = f" horizon {cell.horizon}" if len(plan["horizons"]) > 1 and cell.mode != "sync" else ""
            print(
                f"  {cell.policy} {cell.mode} delay {cell.latency}{h}: {s.successes}/{s.episodes} "
                f"({cell.seconds:.1f} s)",
                file=sys.stderr,
            )

    cells, record = delay_sweep(
        sources,
        spec,
        cfg,
        plan["modes"],
        plan["latencies"],
        plan["horizons"],
        fps,
        args.out,
        args.overwrite,
        say,
    )
    if args.json:
        json.dump(record, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(sweep_table(cells, fps, markdown=args.markdown))
    for k in record["skipped"]:
        print(f"left out (a cell this policy cannot run): {skipped_text(k)}")
    for name, m in (record["measured_inference"] or {}).items():
        print(
            f"\n{name}: inference {m['median_ms']:.1f} ms median, {m['p99_ms']:.1f} ms p99 per chunk "
            f"(batch {cfg.batch_envs}, {m['calls']} timed calls) -> delay {m['steps']} steps at {fps} fps"
        )
    print(f"\n{cfg.episodes} episodes per cell, same seeds in every cell, {record['seconds']:.1f} s")
    # lazily, like every actlab import in cli: `actlab --help` never imports torch
    from actlab.evaluation.recommend import Recommendation

    for rec in record["recommendations"]:
        print("\n" + Recommendation(**rec).text())
    if args.out:
        for f in SWEEP_FILES:
            print(f"{f}: {Path(args.out) / f}")
    return 0


def _run_perturb(args: argparse.Namespace, sources, spec, cfg, realtime: dict) -> int:
    import json
    import sys
    from pathlib import Path

    from actlab.errors import ActlabError
    from actlab.evaluation.perturb import parse_perturbs
    from actlab.evaluation.perturb_sweep import execution_words, perturb_table, run_perturb

    if cfg.videos or args.whiskers or realtime.get("grid"):
        raise ActlabError(
            "--perturb is a sweep of its own: no videos, whiskers or delay grid in it",
            field="--perturb",
            fix="run one evaluation with --videos, or the delay sweep, separately",
        )
    perturbs = parse_perturbs(args.perturb)

    def say(cell: dict) -> None:
        if not args.json:
            print(
                f"  {cell['policy']} {cell['perturbation']}={cell['level']:g}: "
                f"{cell['successes']}/{cell['episodes']} ({cell['seconds']:.1f} s)",
                file=sys.stderr,
            )

    report = run_perturb(sources, spec, cfg, perturbs, args.out, args.overwrite, on_cell=say)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(perturb_table(report["cells"], markdown=args.markdown))
    print(
        f"\n{cfg.episodes} episodes per cell, {report['seeds']}, {execution_words(cfg.execution)}, "
        f"{report['seconds']:.1f} s"
    )
    if args.out:
        for f in ("perturb.json", "perturb.md", "perturb.png"):
            print(f"{f}: {Path(args.out) / f}")
    return 0


class _Progress:
    """A tqdm bar on stderr counting finished episodes (the callback the harness calls)."""

    def __init__(self, total: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, unit="ep", desc="eval", leave=False)

    def __call__(self, source, result) -> None:
        self.bar.update(1)
        self.bar.set_postfix_str(f"{source.name}: {result.outcome}")

    def close(self) -> None:
        self.bar.close()


def _progress(total: int, quiet: bool) -> _Progress | None:
    import sys

    return None if quiet or not sys.stderr.isatty() else _Progress(total)


def _add_lerobot_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("LeRobot policies (run in the user's lerobot environment; docs/lerobot.md)")
    g.add_argument(
        "--lerobot-policy",
        action="append",
        default=[],
        metavar="DIR",
        help="a LeRobot pretrained_model directory of any policy type, a lerobot-train output directory "
        "(every checkpoint: a sweep), or owner/name of a policy in the local Hugging Face cache; repeatable",
    )
    g.add_argument("--lerobot-python", metavar="PY", help="python of the environment lerobot is installed in")
    g.add_argument(
        "--rename",
        action="append",
        default=[],
        metavar="A=B",
        help="feed a policy input from another env key, e.g. observation.images.front=observation.images.top",
    )
    add_lerobot_timeout(g)
    g.add_argument(
        "--instruction",
        metavar="TEXT",
        help="language task sent with every observation (default: the sim task's; VLA policies read it)",
    )


def _lerobot_sources(args: argparse.Namespace, spec, device: str) -> list:
    # lazily, like every actlab import in cli: `actlab --help` never imports torch
    from actlab.errors import ActlabError
    from actlab.lerobot.bridge import lerobot_sources

    if not args.lerobot_python:
        raise ActlabError(
            "--lerobot-policy needs --lerobot-python",
            field="--lerobot-python",
            expected="the python of the environment lerobot is installed in",
            fix="e.g. --lerobot-python ~/lerobot-venv/bin/python (docs/lerobot.md)",
        )
    instruction = args.instruction
    if instruction is None and not spec.is_peer:
        # lazily, like every actlab import in cli: `actlab --help` never imports torch
        from actlab.sim.tasks import TASKS

        # the task's own dataset string, what a policy trained on its recordings was told (every sim task
        # was told pick-and-place's "pick the cube and place it in the bowl", also so101_push)
        instruction = TASKS[spec.task].env.task_text if spec.task in TASKS else None
    sources, _ = lerobot_sources(
        args.lerobot_policy,
        args.lerobot_python,
        rename=tuple(args.rename),
        device=device,
        instruction=instruction,
        threads=args.threads,
        timeout_s=args.lerobot_timeout,
    )
    return sources
