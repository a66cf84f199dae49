"""``actlab demo``: the main job, end to end (argument parsing only; the work is in actlab.demo)."""

from __future__ import annotations

import argparse

from actlab.cli import add_codec_flag, add_set_flag, subcommand

ORDER = 0

_EPILOG = """\
stages (each reused on a re-run when its settings are unchanged; --fresh starts over; --set steps=8000
trains longer: the recording is reused and the run resumes from its last checkpoint):
  1. record   scripted-expert demonstrations in the built-in SO-101 sim  -> DIR/data
  2. train    the so101_sim_cpu preset at batch 16 with an EMA of the weights (CPU; --set batch_size=32
              --set ema_decay=0 for the preset as it is) or so101_sim (GPU)  -> DIR/run
  3. eval     every checkpoint on the same held-out episodes, then the best one again on fresh
              seeds (the unbiased success rate), with rollout videos and whiskers -> DIR/eval
     --realtime: then the best checkpoint under inference delays 0/4/8 steps (sync, async, blend;
              rtc for act_relative): a "Real time" report section -> DIR/eval/realtime
  4. report   DIR/report.md, DIR/report.html, DIR/summary.json

examples:
  actlab demo --out runs/demo                        # the whole demo; says its disk need before it starts
  actlab demo --out runs/demo --json                 # again: every stage reused, summary.json on stdout
  actlab demo --task so101_stack --out runs/demo_stack   # the same recipe on another sim task
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = subcommand(
        sub,
        "demo",
        "record demos in the built-in sim, train, evaluate a checkpoint sweep, write a report",
        _EPILOG,
        description="Record demonstrations in the built-in SO-101 simulator, train a policy, evaluate "
        "every checkpoint on held-out episodes and write a report with pictures and videos.",
    )
    p.add_argument("--out", default="runs/demo", metavar="DIR", help="output directory (runs/demo)")
    p.add_argument(
        "--device", default="auto", help="auto (CUDA if available, with the GPU preset), cpu, cuda"
    )
    p.add_argument("--preset", default=None, help="training preset (so101_sim_cpu on CPU, so101_sim on GPU)")
    p.add_argument(
        "--task", default="so101_pick_place", help="sim task (so101_pick_place; actlab sim tasks lists them)"
    )
    p.add_argument("--episodes", type=int, default=300, help="demonstrations to record (300)")
    p.add_argument("--image-size", type=int, default=None, help="camera size in px (80 CPU / 128 GPU)")
    p.add_argument("--eval-episodes", type=int, default=50, help="evaluation episodes per checkpoint (50)")
    p.add_argument(
        "--videos",
        type=int,
        default=None,
        help="rollout videos of the best checkpoint (3, or --eval-episodes when that is fewer)",
    )
    p.add_argument(
        "--workers", type=int, default=2, help="simulation and rollout processes (2; 1: this process alone)"
    )
    add_codec_flag(p)
    add_set_flag(p, "training config override, as in actlab train (repeatable)")
    p.add_argument("--fresh", action="store_true", help="discard previous results in --out and start over")
    p.add_argument(
        "--realtime",
        action="store_true",
        help="also sweep the best checkpoint over inference delays and execution modes (about one "
        "evaluation per cell, so opt in)",
    )
    p.add_argument("--json", action="store_true", help="print summary.json to stdout at the end")
    p.set_defaults(_run=_run)


def demo_config(args: argparse.Namespace):
    """The DemoConfig of parsed ``actlab demo`` arguments."""
    from actlab.demo import DemoConfig

    return DemoConfig(
        out=args.out,
        device=args.device,
        preset=args.preset,
        episodes=args.episodes,
        image_size=args.image_size,
        eval_episodes=args.eval_episodes,
        videos=args.videos,
        workers=args.workers,
        overrides=tuple(args.overrides),
        fresh=args.fresh,
        realtime=args.realtime,
        task=args.task,
        codec=args.codec,
    )


def _run(args: argparse.Namespace) -> int:
    import json

    from actlab.demo import run_demo
    from actlab.errors import Terminated

    cfg = demo_config(args)
    # A stop keeps the stages that finished (the next run reuses them); "partial output removed" alone
    # read as if the whole demo were gone (21st fault run, left then).
    kept = f"the stages that finished in {args.out} are kept: actlab demo --out {args.out} again reuses them"
    try:
        summary = run_demo(cfg)
    except Terminated as e:
        e.note = e.note or kept
        raise
    except KeyboardInterrupt as e:
        if str(e):
            raise
        raise KeyboardInterrupt(kept) from None
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        low, high = summary["success_ci95"]
        print(
            f"\nsuccess rate {100 * summary['success_rate']:.0f}% (95% interval {100 * low:.0f}-"
            f"{100 * high:.0f}%, {summary['outcomes']['success']}/{summary['eval_episodes']} fresh episodes) "
            f"of {summary['best_checkpoint']}; {summary['wall_s'] / 60:.1f} min this run"
        )
        print(f"report: {args.out}/report.html  ({args.out}/report.md, {args.out}/summary.json)")
    return 0
