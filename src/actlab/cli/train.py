"""``actlab train`` (argument parsing only; the work is in ``actlab.training``)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from actlab.cli import _options, add_preset_flags, answer_config_flags, resolve_preset_config, subcommand

ORDER = 20

_EPILOG = """\
examples:
  actlab train --preset so101_sim_cpu --dataset runs/demo/data --out runs/cpu \\
      --set data.cache_dir=runs/demo/cache --set steps=2000      # the demo's preset, on its frames
  actlab train --out runs/cpu --resume --set steps=3000          # continue from the last checkpoint
  actlab train --preset tiny --dataset runs/demo/data --out runs/check --overfit 8
  actlab train --preset so101_sim_cpu --dataset runs/demo/data --out runs/finetune \\
      --init-from runs/demo/run/checkpoints/step_0002000 --set data.cache_dir=runs/demo/cache \\
      --set steps=500                                            # fine-tune a bundle's weights
  actlab train --preset so101_sim --dataset runs/demo/data --out runs/gpu --device cuda \\
      --set batch_size=64 --set compile=true                     # the full-size ACT on a GPU
  torchrun --nproc_per_node 2 -m actlab.cli train --preset so101_sim --dataset runs/demo/data \\
      --out runs/ddp --device cuda                               # one process per GPU (DDP)
  actlab train --list-presets
  actlab train --preset so101_sim_cpu --print-config             # the resolved config as JSON

Every config key can be overridden with --set section.key=value (--help-config lists them all).
The run directory holds config.json, metrics.jsonl and checkpoints/step_NNNNNNN/ (policy bundles
loadable by `actlab eval`), with checkpoints/last.json and best.json pointing at the newest and best.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = subcommand(
        sub,
        "train",
        "train a policy (presets, overrides, resume, overfit check, DDP under torchrun)",
        _EPILOG,
        description="Train a policy on a LeRobot v3 dataset. Frames are decoded once into a FrameStore "
        "and gathered on the training device; checkpoints are atomic, resumable bit for bit on CPU, and "
        "a disk preflight refuses runs whose checkpoints cannot fit.",
    )
    add_preset_flags(p, "optim.lr=3e-4")
    p.add_argument("--dataset", metavar="PATH", help="LeRobot v3 dataset directory (sets data.path)")
    p.add_argument(
        "--out",
        metavar="DIR",
        help="run directory: new or empty (a run that stopped before its first checkpoint starts over); "
        "an existing run needs --resume; locked while a run trains in it",
    )
    p.add_argument(
        "--device",
        metavar="DEV",
        help="auto, cpu, cuda, cuda:N (default: the preset's; sets the config key device)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --out from its last checkpoint (its saved config unless --preset)",
    )
    p.add_argument(
        "--overfit",
        type=int,
        metavar="N",
        help="sanity check: train on N samples until the loss < overfit.loss_threshold, else fail",
    )
    p.add_argument(
        "--disk-limit",
        metavar="BYTES",
        help="refuse to start if checkpoints + FrameStore need more than this (e.g. 20GB, 500MiB)",
    )
    p.add_argument(
        "--init-from",
        metavar="BUNDLE",
        help="fine-tune: start from this bundle's weights and policy config (e.g. an imported LeRobot ACT); "
        "normalization comes from --dataset",
    )
    p.add_argument("--json", action="store_true", help="print the run summary as JSON")
    # a run inside its dataset changed the dataset's meta/ hash (the identity a resume checks) or its files
    _options.paths(p, outputs=("--out",), inputs=("--dataset", "--init-from"), probe=False)
    for option, key in (("--dataset", "data.path"), ("--device", "device"), ("--init-from", "init_from")):
        _options.sets(p, option, key)
    p.set_defaults(_run=_run)


def _run(args: argparse.Namespace) -> int:
    from actlab.errors import ActlabError
    from actlab.training.config import config_to_dict
    from actlab.training.presets import PRESETS

    cfg = answer_config_flags(args, PRESETS, lambda: _resolve_config(args), config_to_dict)
    if cfg is None:
        return 0
    if not args.out:
        raise ActlabError("--out is required", field="--out", fix="pass --out DIR (a new run directory)")
    from actlab.training import train

    summary = train(cfg, args.out, resume=args.resume)
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2))
    else:
        _print_summary(summary)
    if summary.stopped in ("sigterm", "sigint"):
        from actlab.lifecycle.stop import EXIT_SIGINT, EXIT_SIGTERM, stopped_line

        resume = resume_command(args.out)
        print(stopped_line(summary.stopped, summary.last_checkpoint, resume), file=sys.stderr)
        return EXIT_SIGTERM if summary.stopped == "sigterm" else EXIT_SIGINT  # the run is not finished
    return 0


def resume_command(out: str) -> str:
    """The command that continues a stopped run: under torchrun with as many processes (the plain command
    is refused for a run of several: it said "continue with actlab train --out DIR --resume")."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world > 1:
        per_node = os.environ.get("LOCAL_WORLD_SIZE") or str(world)
        return f"torchrun --nproc_per_node {per_node} -m actlab.cli train --out {out} --resume"
    return f"actlab train --out {out} --resume"


def _resolve_config(args: argparse.Namespace):
    """Preset (or the saved config on --resume) + --dataset + --set + --disk-limit + --overfit."""
    import dataclasses
    from pathlib import Path

    from actlab.errors import ActlabError
    from actlab.training.config import apply_train_overrides, refuse_inert_train_overrides
    from actlab.training.loop import load_run_config, overfit_config
    from actlab.training.presets import PRESETS, with_dataset

    cfg = resolve_preset_config(args, PRESETS, load_run_config, help_preset="tiny")
    if args.dataset:
        cfg = with_dataset(cfg, args.dataset)
    if args.init_from:
        from actlab.training.init_from import bundle_policy_config

        # The bundle's model; --set policy.* may still change the training-only fields.
        policy = bundle_policy_config(args.init_from)
        cfg = dataclasses.replace(cfg, policy=policy, init_from=str(Path(args.init_from).resolve()))
    cfg = apply_train_overrides(cfg, args.overrides)
    if args.device:
        cfg = dataclasses.replace(cfg, device=args.device)
    if args.disk_limit:
        from actlab.utils.units import parse_bytes

        limit = parse_bytes(args.disk_limit, "--disk-limit")
        cfg = dataclasses.replace(cfg, checkpoint=dataclasses.replace(cfg.checkpoint, disk_limit_bytes=limit))
    if args.overfit is not None:
        if args.overfit < 1:
            raise ActlabError("--overfit needs N >= 1", field="--overfit", found=args.overfit)
        cfg = overfit_config(cfg, args.overfit)
    refuse_inert_train_overrides(cfg, args.overrides)  # after --overfit, which sets overfit.samples
    return cfg


def _print_summary(summary) -> None:
    lines = [
        f"run directory:   {summary.run_dir}",
        f"steps:           {summary.step} ({summary.stopped})",
        f"final loss:      {summary.final_loss:.5g}" if summary.final_loss is not None else "final loss: -",
        f"samples/s:       {summary.samples_per_s:.1f}",
    ]
    if summary.best_val_loss is not None:  # lowest seen; validations between checkpoints count too
        lines.append(f"best val loss:   {summary.best_val_loss:.5g}")
    if summary.best_checkpoint:  # lowest among the saved checkpoints (checkpoints/best.json)
        lines.append(f"best checkpoint: {summary.best_checkpoint}")
    if summary.last_checkpoint:
        lines.append(f"last checkpoint: {summary.last_checkpoint}")
    if summary.overfit_step is not None:
        lines.append(f"overfit check:   passed at step {summary.overfit_step}")
    print("\n".join(lines), file=sys.stdout)
