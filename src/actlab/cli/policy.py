"""``actlab policy ...``: info, bench, doctor, export, import (argument parsing only; the work is in
``actlab.policies``, ``actlab.evaluation.doctor`` and ``actlab.lerobot``)."""

from __future__ import annotations

import argparse
import json

from actlab.cli import _options, add_json_flag, add_lerobot_timeout, add_set_flag, group, subcommand

ORDER = 30

_INFO_EPILOG = """\
examples:
  actlab policy info runs/demo/run/checkpoints/step_0002000   # the demo's policy, as saved
  actlab policy info act                                   # 6-dim state/action, one 480x640 camera
  actlab policy info act --cameras top wrist --image-size 80 80 --set vision_backbone=cnn_small
  actlab policy info act_relative --set rtc_max_delay=10 --set obs_state_delta_frames=5
"""
# The group's help: the first example of each subcommand.
_GROUP_EPILOG = """\
examples:
  actlab policy info runs/demo/run/checkpoints/step_0002000   # parameters per module of the demo's policy
  actlab policy bench act --batch-size 32 --steps 10 --cameras top wrist --image-size 80 80 \\
      --set vision_backbone=cnn_small --set dim_model=128 --set dim_feedforward=512 --set n_action_steps=10 \\
      --set chunk_size=30 --variant base: --variant frozen:cached_features=true   # small ACT, frozen or not
  actlab policy doctor runs/demo/run/checkpoints/step_0002000 --dataset runs/demo/data
  actlab policy import outputs/train/act_so101/checkpoints/last/pretrained_model --out runs/lerobot_act

`actlab policy export --help` shows how any bundle goes to LeRobot (its own ACT or actlab's plugin).
"""


def register(sub: argparse._SubParsersAction) -> None:
    g = group(
        sub,
        "policy",
        "inspect policies (parameter counts, step time, the doctor); export to / import from LeRobot",
        _GROUP_EPILOG,
    )
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
    # (defaults None: given with a bundle, which has its own features, they are refused; see _shapes)
    p.add_argument("--state-dim", type=int, default=None, help="observation.state size (default 6, SO-101)")
    p.add_argument("--action-dim", type=int, default=None, help="action size (default 6)")
    p.add_argument(
        "--cameras", nargs="*", default=None, help="camera names (default: top); none for no camera"
    )
    p.add_argument(
        "--image-size",
        type=int,
        nargs=2,
        default=None,
        metavar=("H", "W"),
        help="camera image height and width (default 480 640)",
    )
    add_set_flag(p, "override a config field, e.g. --set dim_model=256 (repeatable)")
    add_json_flag(p)
    p.set_defaults(_run=_run_info)
    _register_bench(g)
    _register_doctor(g)
    _register_export(g)
    _register_import(g)


_SHAPE_DEFAULTS = {"state_dim": 6, "action_dim": 6, "cameras": ["top"], "image_size": [480, 640]}


def _shapes(args: argparse.Namespace, bundle: bool = False) -> dict:
    """The synthetic features' sizes of `policy info TYPE` / `policy bench`, checked: an image side below
    16 px (0 was counted without a word), a camera named twice (counted as two), and, for a saved bundle
    (whose features are its own), any of them given (--cameras was ignored without a word)."""
    from actlab.errors import ActlabError

    given = [k for k in _SHAPE_DEFAULTS if getattr(args, k, None) is not None]
    if bundle and given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise ActlabError(
            f"{flags} size a policy type's inputs, not a saved bundle's",
            field=flags,
            expected="a policy type (act, act_relative) with these options, or a bundle without them",
            found=f"{args.target}: a bundle, counted with the features it was trained on",
            fix=f"drop {flags} (nothing was run), or pass the bundle's type with them",
        )
    values = {
        k: getattr(args, k) if getattr(args, k, None) is not None else v for k, v in _SHAPE_DEFAULTS.items()
    }
    if any(side < 16 for side in values["image_size"]):
        raise ActlabError(
            "camera image too small",
            field="--image-size",
            expected="H and W of at least 16 pixels",
            found=" ".join(map(str, values["image_size"])),
            fix="pass --image-size H W with both >= 16 (nothing was run)",
        )
    twice = sorted({c for c in values["cameras"] if values["cameras"].count(c) > 1})
    if twice:
        raise ActlabError(
            "a camera is named twice",
            field="--cameras",
            expected="each camera once",
            found=" ".join(values["cameras"]),
            fix=f"name {', '.join(twice)} once (nothing was run)",
        )
    return {
        "state_dim": values["state_dim"],
        "action_dim": values["action_dim"],
        "cameras": tuple(values["cameras"]),
        "image_shape": tuple(values["image_size"]),
    }


def _run_info(args: argparse.Namespace) -> int:
    from pathlib import Path

    # lazily, like every actlab import in cli: `actlab --help` never imports torch
    from actlab.policies.info import policy_info
    from actlab.utils.table import table

    info = policy_info(
        args.target, **_shapes(args, bundle=Path(args.target).is_dir()), overrides=tuple(args.overrides)
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
    p.add_argument("--batch-size", type=int, default=8, help="samples per step (default 8)")
    p.add_argument("--cameras", nargs="*", default=["top"], help="camera names (default: top)")
    p.add_argument(
        "--image-size",
        type=int,
        nargs=2,
        default=[480, 640],
        metavar=("H", "W"),
        help="camera size (default 480 640)",
    )
    p.add_argument("--state-dim", type=int, default=6, help="observation.state size (default 6)")
    p.add_argument("--action-dim", type=int, default=6, help="action size (default 6)")
    p.add_argument(
        "--steps", type=int, default=10, help="timed steps per variant, after 2 warm-up steps (default 10)"
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (default cpu)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    add_json_flag(p)
    p.set_defaults(_run=_run_bench)


def _refuse_bench_path(name: str) -> None:
    """`policy bench RUN/checkpoints/step_N` said "unknown policy type 'RUN/...'", fix "actlab policy info
    lists them": bench times a type's config, it loads no bundle."""
    from pathlib import Path

    # lazily, like every actlab import in cli
    from actlab.errors import ActlabError
    from actlab.policies.registry import POLICY_TYPES
    from actlab.utils.kinds import describe

    if name not in POLICY_TYPES and Path(name).exists():
        raise ActlabError(
            "policy bench times a policy type's config, not a saved policy",
            field="NAME",
            expected=f"a policy type: {' or '.join(POLICY_TYPES)}",
            found=f"{name}: {describe(name) or 'a path'}",
            fix="pass the bundle's type (actlab policy info PATH prints its config) with its settings as "
            "--set KEY=VALUE; to time a saved policy's rollouts, actlab bench eval PATH",
        )


def _run_bench(args: argparse.Namespace) -> int:
    import sys

    import torch

    # lazily, like every actlab import in cli: `actlab --help` never imports torch
    from actlab.policies.bench import bench_policy
    from actlab.profiling.report import emit
    from actlab.utils.device import resolve_device

    if args.threads:
        torch.set_num_threads(args.threads)
    _refuse_bench_path(args.type)
    shapes = _shapes(args)  # checked before any policy is built
    result = bench_policy(
        args.type,
        overrides=tuple(args.overrides),
        variants=tuple(args.variants) or ("base:",),
        batch_size=args.batch_size,
        **shapes,
        steps=args.steps,
        device=str(resolve_device(args.device)),
        progress=sys.stderr,  # stdout stays the report (or --json)
    )
    emit(result, args.json)
    return 0


_DOCTOR_EPILOG = """\
examples:
  # the demo's first and last checkpoints on the demo's data (training/held-out split from the bundle)
  actlab policy doctor runs/demo/run/checkpoints/step_0001000 --dataset runs/demo/data
  actlab policy doctor runs/demo/run/checkpoints/step_0002000 --dataset runs/demo/data --out runs/doctor/2000
  # a bundle without a recorded split (e.g. from `actlab policy import`): say which episodes trained it
  actlab policy doctor runs/demo/run/checkpoints/step_0002000 --dataset runs/demo/data \\
      --train-episodes 0-2 --heldout-episodes 3 --json
  # any LeRobot policy (ACT, Diffusion, SmolVLA, Pi0 ...), run in lerobot's own environment
  actlab policy doctor --lerobot-policy outputs/train/act/checkpoints/last/pretrained_model \\
      --lerobot-python ~/lerobot-venv/bin/python --dataset runs/demo/data

exit status: 0 no error finding, 1 an error finding (the verdict says which), 2 bad input
"""


def _register_doctor(g) -> None:
    p = subcommand(
        g,
        "doctor",
        "did the policy learn, or is the evaluation wrong? offline checks on a dataset, with a verdict",
        _DOCTOR_EPILOG,
        description="Check a policy bundle or a LeRobot policy against a dataset: inputs (cameras, sizes), "
        "normalization stats, open-loop replay of training and held-out episodes against two baselines "
        "(hold the state, the mean action), action range, gripper and chunk switches, and deployment "
        "(action de-normalization, reset() clearing the action queue). Ends with a verdict; exit 1 on an "
        "error.",
    )
    p.add_argument(
        "bundle", nargs="?", metavar="BUNDLE", help="policy bundle directory (e.g. RUN/checkpoints/step_N)"
    )
    p.add_argument("--dataset", required=True, metavar="PATH", help="LeRobot v3 dataset directory")
    p.add_argument(
        "--train-episodes",
        metavar="LIST",
        help="episodes the policy was trained on, e.g. 0-39 (default: the split recorded in the bundle)",
    )
    p.add_argument(
        "--heldout-episodes",
        metavar="LIST",
        help="episodes it was not trained on, e.g. 40-49 (default: the split recorded in the bundle)",
    )
    p.add_argument(
        "--max-episodes", type=int, default=10, help="episodes replayed per set, evenly spread (10; 0: all)"
    )
    p.add_argument("--stride", type=int, default=1, help="replay every N-th frame (1)")
    p.add_argument("--batch-size", type=int, default=64, help="frames per policy call (64)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, auto (cpu)")
    p.add_argument(
        "--cache-dir", metavar="DIR", help="FrameStore cache (default: the run's, else $ACTLAB_CACHE)"
    )
    p.add_argument(
        "--sweep",
        metavar="RESULTS",
        help="results.json (or its directory) of a checkpoint sweep of the bundle's run (actlab eval RUN "
        "--out DIR): compare the checkpoint with the run's best by success there (default: the demo's "
        "DIR/eval/sweep for DIR/run/checkpoints/step_N, else by validation loss)",
    )
    p.add_argument("--out", metavar="DIR", help="also write report.md, doctor.json and replay.png there")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out directory")
    g = p.add_argument_group("LeRobot policies (run in the user's lerobot environment; docs/lerobot.md)")
    g.add_argument(
        "--lerobot-policy",
        metavar="DIR",
        help="a LeRobot pretrained_model directory of any policy type, instead of BUNDLE",
    )
    g.add_argument("--lerobot-python", metavar="PY", help="python of the environment lerobot is installed in")
    g.add_argument(
        "--rename",
        action="append",
        default=[],
        metavar="A=B",
        help="feed a policy input from another dataset key, e.g. "
        "observation.images.front=observation.images.top",
    )
    add_lerobot_timeout(g)
    add_json_flag(p)
    # a --cache-dir inside --out went with the report it replaced (--overwrite); one inside the dataset
    # or the bundle wrote into them (--out itself: check_out_dir, before the diagnosis)
    _options.paths(
        p, outputs=("--out", "--cache-dir"), inputs=("BUNDLE", "--dataset", "--sweep", "--lerobot-policy")
    )
    for flag in ("--lerobot-python", "--rename", "--lerobot-timeout"):
        _options.needs(p, flag, on="--lerobot-policy")
    _options.needs(p, "--overwrite", on="--out")
    p.set_defaults(_run=_run_doctor)


def _run_doctor(args: argparse.Namespace) -> int:
    # lazily, like every actlab import in cli: `actlab --help` never imports torch
    from actlab.datasets import parse_episodes
    from actlab.errors import ActlabError
    from actlab.evaluation.doctor import DOCTOR_KIND, DoctorConfig, doctor_bundle, render, write_report
    from actlab.utils.device import resolve_device
    from actlab.utils.io import check_out_dir
    from actlab.utils.kinds import refuse_cache_inside_output

    def episodes(spec: str | None, flag: str) -> tuple[int, ...] | None:
        return None if spec is None else tuple(parse_episodes(spec, flag))  # its errors name flag

    refuse_cache_inside_output(args.cache_dir, "--cache-dir")
    cfg = DoctorConfig(
        train_episodes=episodes(args.train_episodes, "--train-episodes"),
        heldout_episodes=episodes(args.heldout_episodes, "--heldout-episodes"),
        max_episodes=args.max_episodes,
        stride=args.stride,
        batch_size=args.batch_size,
        device=str(resolve_device(args.device)),
        cache_dir=args.cache_dir,
        sweep=args.sweep,
    )
    if bool(args.bundle) == bool(args.lerobot_policy):
        raise ActlabError(
            "give a BUNDLE or --lerobot-policy DIR (one of them)",
            field="BUNDLE/--lerobot-policy",
            found=f"BUNDLE={args.bundle}, --lerobot-policy={args.lerobot_policy}",
            fix="actlab policy doctor RUN/checkpoints/step_N --dataset D, or actlab policy doctor "
            "--lerobot-policy DIR --lerobot-python PY --dataset D",
        )
    if args.out:  # before the diagnosis: a refused --out costs nothing
        inputs = (args.bundle or args.lerobot_policy, args.dataset)
        check_out_dir(args.out, DOCTOR_KIND, args.overwrite, inputs)
    if args.lerobot_policy:
        # lazily, like every actlab import in cli: `actlab --help` never imports torch
        from actlab.lerobot.doctor import doctor_lerobot

        if not args.lerobot_python:
            raise ActlabError(
                "--lerobot-policy needs --lerobot-python",
                field="--lerobot-python",
                expected="the python of the environment lerobot is installed in",
                fix="e.g. --lerobot-python ~/lerobot-venv/bin/python (docs/lerobot.md)",
            )
        result = doctor_lerobot(
            args.lerobot_policy,
            args.lerobot_python,
            args.dataset,
            cfg,
            rename=tuple(args.rename),
            timeout_s=args.lerobot_timeout,
        )
    elif args.rename:
        raise ActlabError("--rename applies to --lerobot-policy only", field="--rename", found=args.rename)
    else:
        result = doctor_bundle(args.bundle, args.dataset, cfg)
    if args.out:
        write_report(result, args.out, overwrite=args.overwrite)
    print(json.dumps(result.as_dict(), indent=2) if args.json else render(result).rstrip("\n"))
    return result.exit_code


_EXPORT_EPILOG = """\
examples:
  # the demo's policy (small CNN, learned decoder queries): actlab's LeRobot plugin type
  actlab policy export runs/demo/run/checkpoints/step_0002000 --to lerobot --out runs/demo_lerobot
  # LeRobot's own ACT where it is exactly equivalent (a ResNet backbone, zeros into the decoder)
  actlab train --preset tiny --dataset runs/demo/data --out runs/lerobot_ready --set steps=20 \\
      --set policy.vision_backbone=resnet18 --set policy.pretrained_backbone_weights=null \\
      --set policy.decoder_input=zeros
  actlab policy export runs/lerobot_ready/checkpoints/step_0000020 --to lerobot --out runs/act_lerobot
  actlab policy import runs/act_lerobot --out runs/roundtrip      # and back: the same weights and stats

--lerobot-type auto (default) writes LeRobot's plain `act` where its ACT computes exactly the same actions
(no plugin on the robot machine), else the plugin's type (`actlab_act`, `actlab_act_relative`), and prints
the pip line the robot machine needs. On the arm (in lerobot's venv): lerobot-rollout --strategy.type=base
--policy.path=runs/demo_lerobot --robot.type=so101_follower ...; on the simulated arm:
--robot.type=actlab_so101_sim (docs/lerobot.md).
"""


def _register_export(g) -> None:
    p = subcommand(
        g,
        "export",
        "write an actlab bundle as a LeRobot 0.6.x pretrained-policy directory (lerobot-rollout, -eval)",
        _EXPORT_EPILOG,
        description="Convert a bundle into a directory lerobot loads with --policy.path: LeRobot's own ACT "
        "(config.json, model.safetensors, normalizer statistics) where exact, else the type of actlab's "
        "LeRobot plugin (integrations/lerobot_policy_actlab).",
    )
    p.add_argument("bundle", metavar="BUNDLE", help="actlab policy bundle directory")
    p.add_argument("--to", choices=["lerobot"], default="lerobot", help="target format (lerobot)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (new; atomic)")
    p.add_argument(
        "--lerobot-type",
        choices=["auto", "act", "plugin"],
        default="auto",
        help="auto: LeRobot's own act where exact, else the plugin's type (default); act: refuse (listing "
        "every reason) unless exact; plugin: always the plugin's type",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out directory")
    add_json_flag(p)
    p.set_defaults(_run=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    # lazily, like every actlab import in cli: `actlab --help` never imports torch
    from actlab.lerobot.export import export_bundle

    summary = export_bundle(args.bundle, args.out, overwrite=args.overwrite, lerobot_type=args.lerobot_type)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    kind = summary["policy_type"]
    print(f"LeRobot {summary['lerobot_format']} policy (type {kind}) written to {summary['out']}")
    print(f"  {summary['n_parameters']:,} parameters, {summary['n_tensors']} tensors")
    for key, feat in summary["input_features"].items():
        print(f"  input  {key}: {feat['type']} {feat['shape']}")
    for note in summary["notes"]:
        print(f"  note: {note}")
    if summary["needs"]:
        print(
            "the robot machine's lerobot venv needs actlab's plugin (run from this repository's root): "
            + summary["needs"]
        )
    print(f"deploy: lerobot-rollout --policy.path={summary['out']} ...  (docs/lerobot.md)")
    return 0


_IMPORT_EPILOG = """\
examples:
  actlab policy import outputs/train/act_so101/checkpoints/last/pretrained_model --out runs/lerobot_act
  actlab eval runs/lerobot_act --episodes 50
  actlab train --preset tiny --dataset runs/demo/data --init-from runs/lerobot_act --out runs/finetune \\
      --set steps=500                                   # fine-tune it (the model is the bundle's)

LeRobot ACT checkpoints and checkpoints of actlab's LeRobot plugin (exports, lerobot-train runs of
--policy.type=actlab_act / actlab_act_relative) can be imported; evaluate any other type (Diffusion,
SmolVLA, Pi0 ...) through the bridge: actlab eval --lerobot-policy DIR --lerobot-python PY.
"""


def _register_import(g) -> None:
    p = subcommand(
        g,
        "import",
        "turn a LeRobot ACT checkpoint into an actlab bundle (evaluate, fine-tune)",
        _IMPORT_EPILOG,
        description="Read a LeRobot pretrained-policy directory (no lerobot needed) and write an actlab "
        "bundle with the same weights and normalization.",
    )
    p.add_argument("policy_dir", metavar="DIR", help="LeRobot pretrained_model directory")
    p.add_argument("--out", required=True, metavar="BUNDLE", help="output bundle directory (new; atomic)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out directory")
    add_json_flag(p)
    p.set_defaults(_run=_run_import)


def _run_import(args: argparse.Namespace) -> int:
    # lazily, like every actlab import in cli: `actlab --help` never imports torch
    from actlab.lerobot.import_ import import_lerobot_act

    summary = import_lerobot_act(args.policy_dir, args.out, overwrite=args.overwrite)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"actlab bundle written to {summary['out']}")
    kind = summary["policy_type"]
    print(f"  {kind}, {summary['n_parameters']:,} parameters, cameras {', '.join(summary['cameras'])}")
    for note in summary["notes"]:
        print(f"  note: {note}")
    return 0
