"""``actlab data ...``: info, doctor, curate, stats, convert, cache, synth (argument parsing only; the work
is in ``actlab.datasets``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from actlab.cli import _options, add_codec_flag, add_json_flag, group, subcommand

ORDER = 10

_EPILOG = """\
examples:
  actlab data info runs/demo/data                  # episodes, frames, fps, features
  actlab data doctor runs/demo/data --json         # exit 1 with a list of problems, 0 when clean
  actlab data doctor runs/demo/data --fail-on warning --report runs/doctor   # CI gate, report.html
  actlab data curate runs/demo/data --out runs/curated --drop-episodes 1 --trim 2:0:120
  actlab data stats runs/demo/data --relative-horizon 30 --absolute-dims 5 --state-delta 5 \\
      --out runs/stats.json
  actlab data cache runs/demo/data --image-size 80 --cache-dir runs/demo/cache   # the demo's FrameStore
  actlab data cache runs/demo/data --cache-dir runs/demo/cache --verify    # check every checksum
  actlab data synth --episodes 20 --frames 4000 --image-size 224 --out runs/bench224
  actlab data info runs/bench224
  actlab data convert my_npy_episodes --out runs/converted --fps 30 --task "pick the cube"
  actlab data view runs/demo/data --episode 0 --out runs/view     # runs/view/episode_000.html

`data convert` reads a directory of your own recordings: observations.npy, actions.npy and
rollout_length.npy (docs/datasets.md). A PATH may be a Hub repo id (owner/name) of a dataset in LeRobot's
local cache. `data view` writes one episode as a page: its video, a filmstrip, state and action curves.
The demo's FrameStore lives in runs/demo/cache (the default
is $ACTLAB_CACHE/frames or ~/.cache/actlab/frames).
"""


def register(sub: argparse._SubParsersAction) -> None:
    g = group(sub, "data", "inspect, validate, convert and cache LeRobot v3 datasets", _EPILOG)
    _info(g)
    _doctor(g)
    _curate(g)
    _stats(g)
    _convert(g)
    _cache(g)
    _synth(g)
    _view(g)


def _parser(g, name: str, help: str) -> argparse.ArgumentParser:
    return subcommand(g, name, help, _EPILOG)


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))


# ------------------------------------------------------------------------------------------------ info


def _info(g) -> None:
    p = _parser(g, "info", "episodes, frames, fps and features of a dataset")
    p.add_argument("path", metavar="PATH", help="LeRobot v3.0 dataset directory")
    add_json_flag(p)
    p.set_defaults(_run=_run_info)


def _run_info(args) -> int:
    from actlab.datasets import open_dataset
    from actlab.utils.table import table

    s = open_dataset(args.path).summary()
    if args.json:
        _print_json(s)
        return 0
    print(f"{s['root']}  ({s['codebase_version']}, robot {s['robot_type']})")
    print(f"episodes {s['episodes']}  frames {s['frames']}  fps {s['fps']}  size {s['size_mb']} MB")
    print(f"tasks: {'; '.join(s['tasks'])}\n")
    rows = [(k, f["dtype"], "x".join(map(str, f["shape"]))) for k, f in s["features"].items()]
    print(table(rows, ["feature", "dtype", "shape"]))
    return 0


# ---------------------------------------------------------------------------------------------- doctor


def _doctor(g) -> None:
    p = _parser(g, "doctor", "check a dataset; exit 1 with a list of problems and their fixes")
    p.add_argument("path", metavar="PATH", help="LeRobot v3.0 dataset directory")
    p.add_argument(
        "--fail-on",
        choices=("error", "warning"),
        default="error",
        help="exit 1 on a finding this grave or worse (default error; warning: also on recording faults)",
    )
    p.add_argument(
        "--video-samples",
        type=int,
        default=4,
        metavar="N",
        help="frames decoded per episode and camera to find black, frozen or broken video (4; 0: none)",
    )
    p.add_argument("--report", default=None, metavar="DIR", help="also write DIR/report.md and report.html")
    add_json_flag(p)
    _options.paths(p, outputs=("--report",), inputs=("PATH",))
    p.set_defaults(_run=_run_doctor)


DOCTOR_REPORT_KIND = "actlab data doctor"


def _run_doctor(args) -> int:
    import contextlib

    from actlab.datasets.doctor import examine
    from actlab.utils.io import claimed_out_dir

    # claimed before the examination: a user's report.md was overwritten, now refused at once; a failed
    # examination or report leaves nothing of the --report directory it made
    claim = (
        claimed_out_dir(args.report, DOCTOR_REPORT_KIND, inputs=(args.path,), option="--report")
        if args.report
        else contextlib.nullcontext()
    )
    with claim:
        result = examine(args.path, video_samples=args.video_samples)
        if args.report:
            from actlab.viz.data_doctor import write_data_doctor_report  # viz: only when a report is asked

            write_data_doctor_report(result.as_dict(), args.report, result.frames)
    if args.json:
        _print_json(result.as_dict())
    else:
        for p in result.problems:
            print(p.render() + "\n")
        worst = sorted(result.episodes, key=lambda e: e.score)
        low = [f"{e.episode} ({e.score:g})" for e in worst if e.score < 1.0][:10]
        if low:
            print(f"lowest episode scores: {', '.join(low)}")
        print(
            f"{result.summary()}: {args.path}"
            + (f" (report: {args.report}/report.html)" if args.report else "")
        )
    return result.exit_code(args.fail_on)


# --------------------------------------------------------------------------------------------- curate


def _curate(g) -> None:
    p = _parser(g, "curate", "a new dataset without bad episodes or frames (the input is never modified)")
    p.add_argument("path", metavar="PATH", help="LeRobot v3.0 dataset directory (only read)")
    p.add_argument("--out", required=True, metavar="NEW", help="new dataset directory (must not exist)")
    p.add_argument(
        "--overwrite", action="store_true", help="replace --out if it is an earlier output of data curate"
    )
    p.add_argument("--drop-episodes", default=None, metavar="E,..", help="episode indices to drop, e.g. 3,7")
    p.add_argument(
        "--min-score",
        type=float,
        default=None,
        metavar="S",
        help="drop episodes the doctor scores below S (0..1)",
    )
    p.add_argument("--drop-flagged", action="store_true", help="drop every episode a doctor finding names")
    p.add_argument(
        "--trim",
        action="append",
        default=[],
        metavar="EP:START:END",
        help="keep only frames START..END-1 of episode EP (repeatable)",
    )
    p.add_argument(
        "--video-samples",
        type=int,
        default=4,
        metavar="N",
        help="the doctor's video samples for the score rules (default 4)",
    )
    add_codec_flag(p)
    add_json_flag(p)
    p.set_defaults(_run=_run_curate)


def _run_curate(args) -> int:
    from actlab.datasets import parse_episodes
    from actlab.datasets.curate import CurateSpec, curate, parse_trim

    spec = CurateSpec(
        drop=tuple(parse_episodes(args.drop_episodes, "--drop-episodes") or ()),
        trim=parse_trim(args.trim),
        min_score=args.min_score,
        drop_flagged=args.drop_flagged,
        video_samples=args.video_samples,
    )
    summary = curate(args.path, args.out, spec, overwrite=args.overwrite, video=args.codec)
    if args.json:
        _print_json(summary)
    else:
        for ep, why in summary["removed"].items():
            print(f"dropped episode {ep}: {why}")
        for t in summary["trimmed"]:
            print(
                f"trimmed episode {t['episode']} to frames {t['kept_frames'][0]}..{t['kept_frames'][1] - 1}"
            )
        d = summary["doctor"]
        print(
            f"wrote {summary['episodes']} episodes, {summary['frames']} frames to {summary['out']} "
            f"(doctor: {d['error']} error(s), {d['warning']} warning(s), {d['note']} note(s))"
        )
    return 0


# ----------------------------------------------------------------------------------------------- stats


def _stats(g) -> None:
    p = _parser(g, "stats", "normalization stats: absolute, relative actions, state deltas, images")
    p.add_argument("path", metavar="PATH", help="LeRobot v3.0 dataset directory")
    p.add_argument(
        "--relative-horizon",
        type=int,
        default=None,
        metavar="H",
        help="also compute action[t+k] - state[t] stats for k < H",
    )
    p.add_argument(
        "--absolute-dims",
        default=None,
        metavar="D,..",
        help="action dims kept absolute in the relative stats (e.g. the gripper: 5)",
    )
    p.add_argument(
        "--state-delta", type=int, default=None, metavar="N", help="also compute state[t] - state[t-N] stats"
    )
    p.add_argument(
        "--image-samples", type=int, default=512, help="frames sampled for image stats (default 512)"
    )
    p.add_argument("--out", default=None, help="write all stats to this JSON file")
    p.add_argument("--write-meta", action="store_true", help="rewrite meta/stats.json (absolute stats)")
    p.add_argument("--no-cache", action="store_true", help="recompute even if cached")
    add_json_flag(p)
    # (--absolute-dims 9 without --relative-horizon was accepted and ignored: it shapes only those stats)
    _options.needs(p, "--absolute-dims", "--relative-horizon")
    p.set_defaults(_run=_run_stats)


def _dim_names(feature, n: int) -> list[str]:
    """Names of a feature's ``n`` dimensions: its ``names`` when they fit (a list, or a dict's first
    list), the channel for a camera, else the index."""
    names = (feature or {}).get("names")
    if isinstance(names, dict):
        names = next((v for v in names.values() if isinstance(v, list)), None)
    if isinstance(feature, dict) and feature.get("dtype") in ("video", "image") and n == 3:
        return ["red", "green", "blue"]
    if isinstance(names, list) and len(names) == n:
        return [str(x) for x in names]
    return [str(i) for i in range(n)]


def _run_stats(args) -> int:
    import numpy as np

    from actlab.datasets import compute_stats, open_dataset, parse_episodes, save_stats
    from actlab.datasets.format import DEFAULT_FEATURES, STATS_PATH
    from actlab.datasets.stats import stats_to_json
    from actlab.errors import ActlabError
    from actlab.utils.io import check_writable, related_input
    from actlab.utils.table import table

    ds = open_dataset(args.path)
    for target in ([args.out] if args.out else []) + ([ds.root / STATS_PATH] if args.write_meta else []):
        check_writable(target)  # a read-only disk found before the computation, not after it
    if args.out and related_input(Path(args.out), [ds.root]) is not None:  # before the computation
        raise ActlabError(
            "--out lies inside the dataset the stats are computed from",
            file=args.out,
            field="--out",
            expected="a file outside the dataset",
            found=f"inside {ds.root}",
            fix="choose an --out outside the dataset; --write-meta is the way to write its meta/stats.json",
        )
    if args.out:  # (another dataset's meta/stats.json was replaced by these stats)
        _options.refuse_replacing_anothers_file("--out", args.out)
    try:
        dims = parse_episodes(args.absolute_dims, "--absolute-dims") or []
    except ActlabError as e:
        if e.fix:  # (an empty item: said as it is, with its fix)
            raise
        raise ActlabError(
            "cannot read the absolute dims", field="--absolute-dims", expected="e.g. 5 or 0,5", found=e.found
        ) from e
    stats = compute_stats(
        ds,
        relative_action_horizon=args.relative_horizon,
        absolute_action_dims=dims,
        state_delta_frames=args.state_delta,
        image_samples=args.image_samples,
        use_cache=not args.no_cache,
    )
    if args.out:
        save_stats(stats, args.out)
    if args.write_meta:
        keep = {k: v for k, v in stats.items() if k in ds.features}
        save_stats(keep, ds.root / STATS_PATH)
    if args.json:
        _print_json(stats_to_json(stats))
        return 0
    # One row per dimension: a vector in one cell wrapped mid-row (numpy breaks long arrays into lines).
    rows = []
    for key, st in stats.items():
        if key in DEFAULT_FEATURES:
            continue
        mean, std = np.asarray(st["mean"]).ravel(), np.asarray(st["std"]).ravel()
        lo = np.asarray(st.get("min", mean)).ravel()
        hi = np.asarray(st.get("max", mean)).ravel()
        # action.relative / observation.state.delta: the names of the feature they are computed from
        names = _dim_names(ds.features.get(key) or ds.features.get(key.rsplit(".", 1)[0]), len(mean))
        for i in range(len(mean)):
            rows.append(
                (
                    key if i == 0 else "",
                    names[i],
                    f"{mean[i]:.4g}",
                    f"{std[i]:.4g}",
                    f"{lo[i]:.4g}",
                    f"{hi[i]:.4g}",
                )
            )
    print(table(rows, ["feature", "dim", "mean", "std", "min", "max"]))
    if args.out:
        print(f"\nwrote {args.out}")
    if args.write_meta:
        print(f"wrote {ds.root / STATS_PATH}")
    return 0


# --------------------------------------------------------------------------------------------- convert


def _convert(g) -> None:
    p = _parser(g, "convert", "convert .npy episodes (observations/actions/rollout_length) to LeRobot v3")
    p.add_argument(
        "src", metavar="SRC", help="directory with observations.npy, actions.npy, rollout_length.npy"
    )
    p.add_argument("--out", required=True, help="new dataset directory")
    p.add_argument("--fps", type=int, default=30, help="frames per second of the recording (default 30)")
    p.add_argument("--task", default="task", help="task description stored with every episode")
    p.add_argument("--robot-type", default=None, help="robot_type written to info.json")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    add_codec_flag(p)
    add_json_flag(p)
    p.set_defaults(_run=_run_convert)


def _run_convert(args) -> int:
    from actlab.datasets.npy_import import convert_npy

    summary = convert_npy(
        args.src,
        args.out,
        fps=args.fps,
        task=args.task,
        robot_type=args.robot_type,
        overwrite=args.overwrite,
        video=args.codec,
    )
    if args.json:
        _print_json(summary)
    else:
        print(f"wrote {summary['episodes']} episodes, {summary['frames']} frames to {summary['out']}")
        if summary["ignored_keys"]:
            print(f"ignored observation keys: {', '.join(summary['ignored_keys'])}", file=sys.stderr)
    return 0


# ----------------------------------------------------------------------------------------------- cache


def _cache(g) -> None:
    p = _parser(g, "cache", "decode every camera frame once into the FrameStore (uint8 memmap)")
    p.add_argument("path", metavar="PATH", help="LeRobot v3.0 dataset directory")
    p.add_argument("--image-size", type=int, default=None, help="resize the longer side and pad to square")
    p.add_argument(
        "--cache-dir", default=None, help="default: $ACTLAB_CACHE/frames or ~/.cache/actlab/frames"
    )
    p.add_argument("--rebuild", action="store_true", help="rebuild even if a valid store exists")
    p.add_argument(
        "--verify",
        action="store_true",
        help="check every checksum of this dataset's stores (all camera sets; only --image-size's if "
        "given) instead of building; exit 2 naming damaged frames",
    )
    add_json_flag(p)
    _options.paths(p, outputs=("--cache-dir",), inputs=("PATH",))  # frames decoded into the dataset
    p.set_defaults(_run=_run_cache)


def _run_cache(args) -> int:
    import time

    from actlab.datasets import FrameStore, open_dataset
    from actlab.utils.kinds import refuse_cache_inside_output

    ds = open_dataset(args.path)
    t0 = time.perf_counter()
    if args.verify:
        return _verify_cache(args, ds, t0)
    refuse_cache_inside_output(args.cache_dir, "--cache-dir")
    store = FrameStore.build(ds, image_size=args.image_size, cache_dir=args.cache_dir, rebuild=args.rebuild)
    out = {
        "store": str(store.root),
        "frames": {k: list(v.shape) for k, v in store.frames.items()},
        "bytes": store.nbytes,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if args.json:
        _print_json(out)
    else:
        print(f"{out['store']}  {out['bytes'] / 1e6:.1f} MB  {out['frames']}  ({out['seconds']} s)")
    return 0


def _verify_cache(args, ds, t0: float) -> int:
    import time

    from actlab.datasets.framestore import verify_stores
    from actlab.errors import ActlabError

    if args.rebuild:
        raise ActlabError(
            "--verify checks stores, --rebuild replaces one", field="--verify", fix="pass one of them"
        )
    results = verify_stores(ds, image_size=args.image_size, cache_dir=args.cache_dir)
    seconds = round(time.perf_counter() - t0, 2)
    if args.json:
        _print_json({"stores": [r.as_dict() for r in results], "seconds": seconds})
    else:
        for r in results:
            print(f"{r.path}  {'ok' if r.ok else 'DAMAGED'}  {r.detail}")
    damaged = [r for r in results if not r.ok]
    if damaged:
        raise damaged[0].error
    return 0


# ----------------------------------------------------------------------------------------------- synth


def _view(g) -> None:
    p = _parser(g, "view", "one episode as an HTML page: its video, a filmstrip, state and action curves")
    p.add_argument("path", metavar="PATH", help="LeRobot v3.0 dataset directory (or owner/name, see above)")
    p.add_argument("--episode", type=int, default=0, help="episode index (default 0)")
    p.add_argument(
        "--out", required=True, metavar="DIR", help="directory for episode_NNN.html and its images"
    )
    p.set_defaults(_run=_run_view)


# What data view's --out marker names (its pages of other episodes may be added to the same directory).
VIEW_KIND = "actlab data view"


def _run_view(args) -> int:
    from actlab.datasets import open_dataset
    from actlab.datasets.view import episode_view
    from actlab.utils.io import claimed_out_dir
    from actlab.viz.dataset import write_episode_page

    ds = open_dataset(args.path)
    view = episode_view(ds, args.episode)  # (reads only: a wrong --episode is refused before any write)
    # --out gathers the pages of several episodes, but never over a user's files or into the dataset; a
    # page that fails (a full disk) leaves nothing of an --out this run made
    # the dataset's identity and its videos' sizes and times: an --out of another recording under the
    # same name, or of this one before its files changed, is not added to (26th fault run)
    videos = {
        p.relative_to(ds.root).as_posix(): [p.stat().st_size, p.stat().st_mtime_ns]
        for p in sorted((ds.root / "videos").rglob("*.mp4"))
    }
    identity = {**ds.identity, "videos": videos}
    with claimed_out_dir(args.out, VIEW_KIND, inputs=(ds.root,), identity=identity) as out:
        page = write_episode_page(view, out)
    print(f"wrote {page} (open it in a browser; .md beside it)")
    return 0


def _synth(g) -> None:
    p = _parser(g, "synth", "write a synthetic LeRobot v3 dataset of moving shapes, e.g. for benchmarks")
    p.add_argument("--out", required=True, help="new dataset directory")
    p.add_argument("--episodes", type=int, default=20, help="episodes (default 20)")
    p.add_argument(
        "--frames", type=int, default=4000, help="total frames, split evenly over episodes (default 4000)"
    )
    p.add_argument("--image-size", type=int, default=224, help="square camera size in px, even (default 224)")
    p.add_argument(
        "--cameras",
        type=_options.camera_list,
        default=("top",),
        help="comma-separated camera names (default top)",
    )
    p.add_argument("--state-dim", type=int, default=6, help="observation.state size (default 6)")
    p.add_argument("--action-dim", type=int, default=6, help="action size (default 6)")
    p.add_argument("--fps", type=int, default=30, help="frames per second (default 30)")
    p.add_argument("--seed", type=int, default=0, help="seed of the shapes' motion (default 0)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    add_codec_flag(p)
    p.set_defaults(_run=_run_synth)


def _run_synth(args) -> int:
    import time

    from actlab.datasets.synth import synth_dataset

    cams = {c: (args.image_size, args.image_size) for c in args.cameras}
    t0 = time.perf_counter()
    path = synth_dataset(
        args.out,
        episodes=args.episodes,
        frames=args.frames,
        cameras=cams,
        state_dim=args.state_dim,
        action_dim=args.action_dim,
        fps=args.fps,
        seed=args.seed,
        overwrite=args.overwrite,
        length=None,
        video=args.codec,
    )
    print(
        f"wrote {args.episodes} episodes, {args.frames} frames to {path} ({time.perf_counter() - t0:.1f} s)"
    )
    return 0
