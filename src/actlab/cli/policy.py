"""``actlab policy ...``: info (argument parsing only; the work is in ``actlab.policies``)."""

from __future__ import annotations

import argparse
import json

from actlab.cli import add_json_flag, group

ORDER = 30

_INFO_EPILOG = """\
examples:
  actlab policy info act                                   # 6-dim state/action, one 480x640 camera
  actlab policy info act_relative --set rtc_max_delay=10 --set obs_state_delta_frames=5
  actlab policy info act --cameras top wrist --image-size 96 96 --set vision_backbone=cnn_small
  actlab policy info runs/pick/checkpoints/step_0100000    # a saved bundle
"""


def register(sub: argparse._SubParsersAction) -> None:
    g = group(sub, "policy", "inspect policies: parameter counts per module")
    p = g.add_parser(
        "info",
        help="parameter count per top-level module of a policy type or a saved bundle",
        description="Build a policy (default config + --set overrides) or load a bundle; count parameters.",
        epilog=_INFO_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="override a config field, e.g. --set dim_model=256 (repeatable)",
    )
    add_json_flag(p)
    p.set_defaults(_run=_run_info)


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
