"""``actlab sim ...``: record expert demonstrations, view a scene, check the expert, time the renderer
(argument parsing only; the work is in ``actlab.sim``)."""

from __future__ import annotations

import argparse
import json

from actlab.cli import _options, add_codec_flag, add_json_flag, group, subcommand

ORDER = 15

_EPILOG = """\
examples:
  actlab sim tasks                                    # the task suite: success, failure classes, length
  actlab sim expert --task so101_stack --episodes 30  # another task's expert
  actlab sim view --out runs/scene.png --seed 3 --image-size 80     # a frame strip of one expert episode
  actlab sim expert --episodes 100                    # scripted expert success rate on seeds 0..99
  actlab sim record --episodes 50 --out runs/sim50 --image-size 80 --seed 1000   # 50 more demos
  actlab data info runs/sim50
  actlab sim bench --image-size 128 --frames 400 --episodes 3   # render settings, physics speed

Observations and actions are the six SO-101 joints in LeRobot order (shoulder_pan, shoulder_lift,
elbow_flex, wrist_flex, wrist_roll, gripper) in degrees; cameras "top" and "wrist" (docs/sim.md).
`sim record --noise 1.0 --keep-failures` records a perturbed expert and keeps its failed attempts.
"""


def register(sub: argparse._SubParsersAction) -> None:
    g = group(
        sub,
        "sim",
        "built-in MuJoCo SO-101 task suite: list tasks, record demos, view, check the experts",
        _EPILOG,
    )
    _tasks(g)
    _record(g)
    _view(g)
    _expert(g)
    _bench(g)


def _parser(g, name: str, help: str) -> argparse.ArgumentParser:
    return subcommand(g, name, help, _EPILOG)


def _task(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", default="so101_pick_place", help="sim task (so101_pick_place; actlab sim tasks)")


# ----------------------------------------------------------------------------------------------- tasks


def _tasks(g) -> None:
    p = _parser(
        g, "tasks", "list the sim tasks: what success means, failure classes, episode length, cameras"
    )
    add_json_flag(p)
    p.set_defaults(_run=_run_tasks)


def _run_tasks(args) -> int:
    from actlab.sim import FPS, TASKS
    from actlab.utils.table import table

    rows = []
    for t in TASKS.values():
        cfg = t.defaults
        rows.append(
            {
                "task": t.name,
                "does": t.summary,
                "success": t.success,
                "failures": [name for name, _ in t.failures],
                "max_steps": cfg.max_steps,
                "seconds": cfg.max_steps / FPS,
                "cameras": list(cfg.cameras),
                "instruction": t.env.task_text,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(
        table(
            [
                [
                    r["task"],
                    r["success"],
                    ", ".join(r["failures"]),
                    f"{r['max_steps']} steps ({r['seconds']:.0f} s)",
                    ",".join(r["cameras"]),
                ]
                for r in rows
            ],
            ["task", "success means", "failure classes", "episode", "cameras"],
        )
    )
    return 0


# ---------------------------------------------------------------------------------------------- record


def _record(g) -> None:
    p = _parser(g, "record", "record scripted-expert episodes into a LeRobot v3.0 dataset")
    _task(p)
    p.add_argument("--episodes", type=int, default=50, metavar="N", help="episodes to write (50)")
    p.add_argument("--out", required=True, metavar="DIR", help="new dataset directory (written atomically)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="attempt i uses seed S+i (0)")
    p.add_argument("--image-size", type=int, default=128, metavar="PX", help="square camera size (128)")
    p.add_argument(
        "--cameras", type=_options.camera_list, default=("top", "wrist"), help="comma list (top,wrist)"
    )
    p.add_argument("--keep-failures", action="store_true", help="also write episodes the expert failed")
    p.add_argument(
        "--workers", type=int, default=2, metavar="W", help="simulation processes (2; 0: this process)"
    )
    p.add_argument("--noise", type=float, default=0.0, help="expert noise scale, 0 = none (0)")
    p.add_argument(
        "--units",
        default="degrees",
        choices=("degrees", "so101_follower"),
        help="joint units: the sim's degrees, or LeRobot's real so101_follower (gripper 0-100) (degrees)",
    )
    add_codec_flag(p)
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out directory")
    p.set_defaults(_run=_run_record)


def _run_record(args) -> int:
    from actlab.sim.record import RecordConfig, record_dataset

    cfg = RecordConfig(
        task=args.task,
        episodes=args.episodes,
        seed=args.seed,
        image_size=args.image_size,
        cameras=args.cameras,
        keep_failures=args.keep_failures,
        workers=args.workers,
        expert_noise=args.noise,
        units=args.units,
        codec=args.codec,
    )
    summary = record_dataset(args.out, cfg, overwrite=args.overwrite)
    print(summary.line())
    return 0


# ------------------------------------------------------------------------------------------------ view


def _view(g) -> None:
    p = _parser(g, "view", "write a PNG strip of frames of one expert episode from every camera")
    _task(p)
    p.add_argument("--out", required=True, metavar="FILE.png", help="PNG to write")
    _options.file_outputs(p, "--out")
    p.add_argument("--seed", type=int, default=0, help="episode seed (0)")
    p.add_argument("--image-size", type=int, default=128, metavar="PX", help="frame size (128)")
    p.add_argument("--frames", type=int, default=8, help="frames per camera, evenly spaced (8)")
    p.add_argument(
        "--cameras", type=_options.camera_list, default=("top", "wrist"), help="comma list (top,wrist)"
    )
    p.set_defaults(_run=_run_view)


def _run_view(args) -> int:
    from actlab.sim.view import render_strip

    r = render_strip(
        args.out,
        args.task,
        seed=args.seed,
        image_size=args.image_size,
        frames=args.frames,
        cameras=args.cameras,
    )
    outcome = "success" if r["success"] else "failure"
    print(
        f"wrote {r['path']}: {len(args.cameras)} camera(s) x steps {r['frame_steps']} "
        f"of {r['steps']} ({outcome})"
    )
    return 0


# ---------------------------------------------------------------------------------------------- expert


def _expert(g) -> None:
    p = _parser(g, "expert", "scripted expert success rate over seeded episodes (no rendering)")
    _task(p)
    p.add_argument("--episodes", type=int, default=100, metavar="N", help="episodes (100)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seeds S..S+N-1 (0)")
    p.add_argument("--noise", type=float, default=0.0, help="expert noise scale (0)")
    add_json_flag(p)
    p.set_defaults(_run=_run_expert)


def _run_expert(args) -> int:
    from actlab.sim.bench import expert_success

    r = expert_success(args.task, episodes=args.episodes, seed=args.seed, noise=args.noise)
    if args.json:
        print(json.dumps(r, indent=2))
        return 0
    print(
        f"expert success {r['successes']}/{r['episodes']} ({100 * r['success_rate']:.1f}%) "
        f"on seeds {r['seeds']}; "
        f"grasped {r['ever_grasped']}, lifted {r['ever_lifted']}; {r['mean_steps']:.0f} steps/episode; "
        f"{r['seconds']:.1f} s"
    )
    if r["failed_seeds"]:
        print(f"failed seeds: {r['failed_seeds']}")
    return 0


# ----------------------------------------------------------------------------------------------- bench


def _bench(g) -> None:
    p = _parser(
        g, "bench", "render fps of the fast settings vs MuJoCo's usual ones, physics and episode speed"
    )
    p.add_argument("--image-size", type=int, default=128, metavar="PX", help="camera size (128)")
    p.add_argument("--frames", type=int, default=400, help="frames rendered per setting (400)")
    p.add_argument("--episodes", type=int, default=3, help="expert episodes timed with two cameras (3)")
    add_json_flag(p)
    p.set_defaults(_run=_run_bench)


def _run_bench(args) -> int:
    from actlab.profiling.report import emit
    from actlab.sim.bench import bench_sim

    emit(bench_sim(image_size=args.image_size, frames=args.frames, episodes=args.episodes), args.json)
    return 0
