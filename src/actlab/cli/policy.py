"""``actlab policy ...``: info, bench (argument parsing only; the work is in ``actlab.policies``)."""

from __future__ import annotations

import argparse
import json

from actlab.cli import add_json_flag, add_set_flag, group, subcommand

ORDER = 30

_INFO_EPILOG = """\
examples:
  actlab policy info runs/demo/run/checkpoints/step_0005000   # the demo's policy, as saved
  actlab policy info act                                   # 6-dim state/action, one 480x640 camera
  actlab policy info act --cameras top wrist --image-size 80 80 --set vision_backbone=cnn_small
  actlab policy info act_relative --set rtc_max_delay=10 --set obs_state_delta_frames=5
"""
# The group's help: the first example of each subcommand.
_GROUP_EPILOG = """\
examples:
  actlab policy info runs/demo/run/checkpoints/step_0005000   # parameters per module of the demo's policy
  actlab policy bench act --batch-size 32 --steps 10 --cameras top wrist --image-size 80 80 \\
      --set vision_backbone=cnn_small --variant base: --variant frozen:cached_features=true
"""


def register(sub: argparse._SubParsersAction) -> None:
    g = group(sub, "policy", "inspect policies: parameter counts per module", _GROUP_EPILOG)
    p = subcommand(
        g,
        "info",
        "parameter count per top-level module of a policy type or a saved bundle",
        _INFO_EPILOG,
        description="Build a policy (default config + --set overrides) or load a bundle; count parameters.",
    )
    p.add_argument(
        "target", metavar="NAME|PATH", help="policy type (act, act_relative) or a bundle directory"
    )
    p.add_argument("--state-dim", type=int, default=6, help="observation.state size (default 6, SO-101)")
    p.add_argument("--action-dim", type=int, default=6, help="action size (default 6)")
    p.add_argument(
        "--cameras", nargs="*", default=["top"], help="camera names (default: top); none for no camera"
    )
    p.add_argument(
        "--image-size",
        type=int,
        nargs=2,
        default=[480, 640],
        metavar=("H", "W"),
        help="camera image height and width (default 480 640)",
    )
    add_set_flag(p, "override a config field, e.g. --set dim_model=256 (repeatable)")
    add_json_flag(p)
    p.set_defaults(_run=_run_info)
    _register_bench(g)


def _run_info(args: argparse.Namespace) -> int:
    from actlab.policies.info import policy_info
    from actlab.utils.table import table

    info = policy_info(
        args.target,
        state_dim=args.state_dim,
        action_dim=args.action_dim,
        cameras=tuple(args.cameras),
        image_shape=tuple(args.image_size),
        overrides=tuple(args.overrides),
    )
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    rows = [(r["module"], f"{r['params']:,}", f"{r['trainable']:,}") for r in info["rows"]]
    rows.append(("total", f"{info['total']:,}", f"{info['trainable']:,}"))
    print(f"policy: {info['source']}\n")
    print(table(rows, ["module", "params", "trainable"]))
    print(f"\n{info['total'] / 1e6:.1f}M parameters ({info['trainable'] / 1e6:.1f}M trainable)")
    return 0


_BENCH_EPILOG = """\
examples:
  # the CPU demo's policy: 64 vs 25 image tokens per camera, and a frozen backbone with cached features
  actlab policy bench act --batch-size 64 --steps 10 --cameras top wrist --image-size 80 80 \\
      --threads 2 --set vision_backbone=cnn_small --set chunk_size=30 --set n_action_steps=10 \\
      --set dim_model=128 --set n_heads=4 --set dim_feedforward=512 --set n_encoder_layers=2 \\
      --set n_vae_encoder_layers=2 --set latent_dim=16 --variant grid8: \\
      --variant grid5:cnn_small_max_grid=5 --variant cached:cached_features=true
"""


def _register_bench(g) -> None:
    p = subcommand(
        g,
        "bench",
        "training-step time of policy variants, measured side by side",
        _BENCH_EPILOG,
        description="Time forward + backward + optimizer steps of config variants in one process.",
    )
    p.add_argument("type", metavar="NAME", help="policy type (act, act_relative)")
    add_set_flag(p, "override the base config (repeatable)")
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:K=V,K=V",
        dest="variants",
        help="a variant of the base config; the first is the reference (default: the base only); "
        "cached_features=true freezes the backbone and feeds precomputed features",
    )
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--cameras", nargs="*", default=["top"], help="camera names (default: top)")
    p.add_argument("--image-size", type=int, nargs=2, default=[480, 640], metavar=("H", "W"))
    p.add_argument("--state-dim", type=int, default=6)
    p.add_argument("--action-dim", type=int, default=6)
    p.add_argument("--steps", type=int, default=10, help="timed steps per variant (after 2 warm-up steps)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (default cpu)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    add_json_flag(p)
    p.set_defaults(_run=_run_bench)


def _run_bench(args: argparse.Namespace) -> int:
    import torch

    from actlab.policies.bench import bench_policy
    from actlab.profiling.report import emit
    from actlab.utils.device import resolve_device

    if args.threads:
        torch.set_num_threads(args.threads)
    result = bench_policy(
        args.type,
        overrides=tuple(args.overrides),
        variants=tuple(args.variants) or ("base:",),
        batch_size=args.batch_size,
        cameras=tuple(args.cameras),
        image_shape=tuple(args.image_size),
        state_dim=args.state_dim,
        action_dim=args.action_dim,
        steps=args.steps,
        device=str(resolve_device(args.device)),
    )
    emit(result, args.json)
    return 0
