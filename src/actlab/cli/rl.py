"""``actlab rl`` (argument parsing only; the work is in ``actlab.rl``)."""

from __future__ import annotations

import argparse
import json
import sys

from actlab.cli import (
    _options,
    add_preset_flags,
    add_set_flag,
    answer_config_flags,
    group,
    resolve_preset_config,
    subcommand,
)

ORDER = 25

_EPILOG = """\
examples:
  actlab rl train --preset smoke --out runs/rl_smoke --set total_env_steps=400   # a few seconds
  actlab rl train --list-presets
  actlab rl report runs/rl_smoke --episodes 10 --out runs/rl_smoke_report   # success, taxonomy, curve
  actlab rl reward-model --demos runs/demo/data --base runs/demo/run/checkpoints/step_0001000 \\
      --out runs/rl_reward --set episodes=3 --set rollouts=2 --set rollout_envs=2 \\
      --set max_steps=30 --set steps=50                     # a success classifier, tiny
"""

_TRAIN_EPILOG = """\
examples:
  actlab rl train --preset smoke --out runs/rl_smoke --set total_env_steps=400   # a few seconds of reach
  actlab rl train --out runs/rl_smoke --resume --set total_env_steps=800       # continue it, longer
  actlab rl train --preset residual --base runs/demo/run/checkpoints/step_0001000 \\
      --demos runs/demo/data --out runs/rl_residual_check --set total_env_steps=300 \\
      --set sac.learning_starts=100 --set sac.actor_starts=100 --set env.num_envs=2 \\
      --set env.max_steps=40 --set eval.episodes=2 --set sac.demo_episodes=2   # the demo's first checkpoint
  actlab rl train --list-presets
  actlab rl train --preset reach --print-config
  actlab rl train --help-config                  # every key (section.key) with its meaning

Every config key can be overridden with --set section.key=value; the flat keys of the first RL runs
(utd=2) are refused naming their new key (sac.utd). Runs written with the flat config.json resume.

The run directory holds config.json, metrics.jsonl (returns, success, Q values, entropy, updates, env
steps/s, evaluations) and checkpoints/step_NNNNNNN/ (NNNNNNN = env steps) with last.json pointing at the
newest and, for a residual run, best.json naming the checkpoint handed back (none: the base is handed
back, no residual was significantly better than it on the evaluation seeds, nor the last one on 100
fresh seeds at the end: residual.confirm_episodes). A killed run continues
with --resume from its last checkpoint, exactly. docs/rl.md: the design.
"""


def register(sub: argparse._SubParsersAction) -> None:
    g = group(sub, "rl", "reinforcement learning in the sim (SAC, residual RL on a frozen policy)", _EPILOG)
    p = subcommand(
        g,
        "train",
        "train SAC from scratch or as a residual on a frozen chunk policy",
        _TRAIN_EPILOG,
        description="SAC in the sim: vectorized envs, replay on the training device, high update-to-data "
        "ratio, RLPD demo sampling, twin LayerNorm critics, entropy tuning, n-step returns; with --base a "
        "bounded per-step residual on a frozen chunk policy (docs/rl.md).",
    )
    add_preset_flags(p, "sac.utd=2")
    p.add_argument("--out", metavar="DIR", help="run directory (new, or an existing one with --resume)")
    p.add_argument("--base", metavar="BUNDLE", help="frozen base policy bundle: residual RL (sets base)")
    p.add_argument("--demos", metavar="DATASET", help="LeRobot dataset of demonstrations (sets demos)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON")
    _options.paths(p, outputs=("--out",), inputs=("--base", "--demos"), probe=False)
    _options.sets(p, "--base", "base")
    _options.sets(p, "--demos", "demos")
    p.set_defaults(_run=_train)

    rep = subcommand(
        g,
        "report",
        "before/after on the same fresh seeds: success with intervals, taxonomy side by side, curves",
        _EPILOG,
    )
    rep.add_argument(
        "run",
        metavar="RUN",
        help="RL run directory (the residual it hands back, best.json, is evaluated; when it hands back "
        "the base, its last checkpoint, marked as not handed back) or one of its checkpoints/step_N",
    )
    rep.add_argument(
        "--episodes", type=_bounded(1, 1_000_000), default=100, metavar="N", help="episodes per policy (100)"
    )
    rep.add_argument(
        "--seed",
        type=_bounded(0, 2**31 - 1_000_001),
        default=100_000,
        metavar="S",
        help="episode i uses seed S+i (100000)",
    )
    rep.add_argument("--out", metavar="DIR", required=True, help="where report.md/.json and the curve go")
    rep.add_argument(
        "--videos",
        type=_bounded(0, 1000),
        default=0,
        metavar="K",
        help="film K seeds the residual fixed and K seeds it broke (both policies on each)",
    )
    rep.add_argument("--json", action="store_true", help="print the result as JSON")
    rep.set_defaults(_run=_report)

    r = subcommand(
        g,
        "reward-model",
        "train a success classifier (HIL-SERL's reward model) from demo frames and failed rollouts",
        _EPILOG,
    )
    r.add_argument("--demos", metavar="DATASET", required=True, help="LeRobot dataset of successful demos")
    r.add_argument(
        "--base", metavar="BUNDLE", required=True, help="policy whose frozen backbone and rollouts are used"
    )
    r.add_argument("--out", metavar="DIR", required=True, help="output directory (model, metrics.json)")
    add_set_flag(r, "override a reward-model config key, e.g. --set rollouts=40")
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    r.set_defaults(_run=_reward_model)


def _bounded(low: int, high: int):
    """An argparse type: an integer in [low, high], refused at parse time naming the limit."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, found {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {low} <= N <= {high}, found {value}")
        return value

    return parse


def _resolve(args: argparse.Namespace):
    """Preset (or the saved config on --resume) + --base + --demos + --set."""
    from actlab.rl.config import PRESETS, apply_rl_overrides, refuse_inert_rl_overrides
    from actlab.rl.train import load_run_config

    sets = list(args.overrides)
    if args.base:
        sets.append(f"base={args.base}")
    if args.demos:
        sets.append(f"demos={args.demos}")
    cfg = resolve_preset_config(args, PRESETS, load_run_config, help_preset="residual")
    cfg = apply_rl_overrides(cfg, sets)
    refuse_inert_rl_overrides(cfg, args.overrides)
    return cfg


def _train(args: argparse.Namespace) -> int:
    from actlab.errors import ActlabError
    from actlab.rl.config import PRESETS, config_to_dict

    cfg = answer_config_flags(args, PRESETS, lambda: _resolve(args), config_to_dict)
    if cfg is None:
        return 0
    if not args.out:
        raise ActlabError("--out is required", field="--out", fix="pass --out DIR (a new run directory)")
    from actlab.rl.train import train_rl

    summary = train_rl(cfg, args.out, resume=args.resume, progress=not args.json)
    if summary.stopped in ("sigterm", "sigint"):
        from actlab.lifecycle.stop import EXIT_SIGINT, EXIT_SIGTERM, stopped_line

        if args.json:
            print(json.dumps(summary.as_dict(), indent=2))
        resume = f"actlab rl train --out {args.out} --resume"
        print(stopped_line(summary.stopped, summary.last_checkpoint, resume), file=sys.stderr)
        return EXIT_SIGTERM if summary.stopped == "sigterm" else EXIT_SIGINT  # the run is not finished
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2))
    else:
        ev = summary.final_eval or {}
        print(f"{summary.env_steps} env steps, {summary.episodes} episodes, {summary.updates} updates "
              f"in {summary.wall_s:.1f} s", file=sys.stderr)  # fmt: skip
        if ev:
            lo, hi = ev["ci95"]
            print(f"success {ev['successes']}/{ev['episodes']} (95% CI {lo:.2f}-{hi:.2f})")
        print(f"checkpoint: {summary.last_checkpoint}")
        if summary.guard is not None:
            base = summary.guard["base"]
            print(f"base on the evaluation seeds: {base['successes']}/{base['episodes']}")
            for event in summary.guard["events"]:
                print(f"guard @ {event['step']}: {event['event']}: {event['reason']}")
            print(f"handed back: {summary.handed_back}" + (" (no residual was significantly better)"
                  if summary.handed_back == "base" else " (checkpoints/best.json)"))  # fmt: skip
    return 0


def _report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from actlab.rl.report import rl_report

    result = rl_report(args.run, args.episodes, args.seed, args.out, videos=args.videos)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print((Path(args.out) / "report.md").read_text())
    return 0


def _reward_model(args: argparse.Namespace) -> int:
    from actlab.errors import Terminated
    from actlab.rl.reward_model import RewardModelConfig, train_reward_model
    from actlab.utils.config import apply_overrides

    cfg = apply_overrides(RewardModelConfig(), args.overrides)
    try:
        result = train_reward_model(cfg, args.demos, args.base, args.out)
    except Terminated as e:  # the model is written at the end, in one atomic step: nothing of it yet
        e.note = (
            f"nothing was written to {args.out} (the model is written once trained; an earlier one is kept)"
        )
        raise
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"held-out accuracy {result['heldout_accuracy']:.3f} at threshold {result['threshold']:.2f} "
              f"({result['heldout_n']} frames); model in {args.out}")  # fmt: skip
        if result["heldout_positives"] in (0, result["heldout_n"]):  # (an accuracy of one class's frames)
            one = "successes" if result["heldout_positives"] else "failures"
            print(f"note: the held-out frames are all {one}: the accuracy says nothing of telling the two "
                  f"apart (balanced accuracy {result['heldout_balanced_accuracy']:.3f}); more rollouts or "
                  "episodes split them better",
                  file=sys.stderr)  # fmt: skip
    return 0
