"""``actlab monitor`` and ``actlab find-batch-size`` (argument parsing only; the work is in
``actlab.profiling`` and ``actlab.training.batch_probe``)."""

from __future__ import annotations

import argparse
import json
import sys

from actlab.cli import _options, add_json_flag, add_set_flag, subcommand

ORDER = 40

_MONITOR_EPILOG = """\
examples:
  actlab monitor --out runs/train.csv --plot runs/train.png -- actlab train --preset so101_sim_cpu \\
      --dataset runs/demo/data --out runs/monitored --set data.cache_dir=runs/demo/cache --set steps=500
  actlab monitor --summary-json runs/eval.json -- actlab eval runs/demo/run --episodes 10
  actlab monitor --out runs/lerobot.csv -- lerobot-train --policy.type=act --dataset.repo_id=me/pick

The command's stdout/stderr pass through unchanged; the summary goes to stderr at the end, and
actlab monitor exits with the command's exit code (128 + N if it died of signal N).
"""

_FBS_EPILOG = """\
examples:
  actlab find-batch-size --preset so101_sim_cpu --dataset runs/demo/data --device cpu \\
      --memory-limit 3GiB --max 512 --set data.cache_dir=runs/demo/cache
  actlab find-batch-size --preset so101_sim --dataset runs/demo/data --device cuda \\
      --multiple-of 8 --set compile=true                       # against the GPU's memory
"""


def register(sub: argparse._SubParsersAction) -> None:
    _register_monitor(sub)
    _register_find_batch_size(sub)


def _register_monitor(sub: argparse._SubParsersAction) -> None:
    p = subcommand(
        sub,
        "monitor",
        "run any command and record GPU/CPU utilization and memory while it runs",
        _MONITOR_EPILOG,
        description="Run CMD, sample every GPU (NVML: utilization, memory, SM clock, power, temperature) "
        "and CMD's process tree (CPU %, RSS) every --interval seconds, and print a summary of the steady "
        "part (warm-up detected and excluded). Without a GPU, CPU and RAM are still recorded.",
    )
    p.add_argument("--interval", default="0.5", metavar="S", help="seconds between samples (default 0.5)")
    p.add_argument("--out", metavar="FILE.csv", help="write every sample to this CSV (header + one row each)")
    p.add_argument("--plot", metavar="FILE.png", help="write a utilization timeline (.png, .pdf or .svg)")
    p.add_argument(
        "--warmup",
        default="auto",
        metavar="auto|S",
        help="samples to leave out of the summary: 'auto' (detected, default) or a number of seconds",
    )
    p.add_argument("--summary-json", metavar="FILE.json", help="also write the summary as JSON")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the command to run")
    # the CSV, the plot and the summary are three files: one path given twice lost all but the last
    _options.paths(p, outputs=("--out", "--plot", "--summary-json"))
    _options.file_outputs(p, "--out", "--plot", "--summary-json")
    p.set_defaults(_run=_run_monitor)


def _check_file_arg(path: str | None, flag: str) -> None:
    from pathlib import Path

    from actlab.errors import ActlabError

    if path is not None and Path(path).is_dir():
        raise ActlabError("the output path is a directory", file=path, field=flag, fix="give a file name")


def _run_monitor(args: argparse.Namespace) -> int:
    from actlab.profiling.monitor import check_command, parse_interval, run_monitored
    from actlab.profiling.summary import parse_warmup, render_summary, summarize

    # Every argument is checked before the command starts: a typo must not cost an 8-hour run its plot.
    interval = parse_interval(args.interval)
    warmup = parse_warmup(args.warmup)
    cmd = check_command(args.cmd)
    for path, flag in ((args.out, "--out"), (args.plot, "--plot"), (args.summary_json, "--summary-json")):
        _check_file_arg(path, flag)  # (each is also written to once before: actlab.cli._options)
    if args.plot:
        from actlab.viz.monitor import check_plot_path

        check_plot_path(args.plot)

    run = run_monitored(cmd, interval, csv_path=args.out)
    summary = summarize(
        run.columns,
        run.rows,
        warmup=warmup,
        command=run.command,
        exit_code=run.exit_code,
        signal_name=run.signal_name,
        duration_s=run.duration_s,
        interval_s=run.interval_s,
        gpu_names=run.gpu_names,
        gpu_reason=run.gpu_reason,
    )
    outputs = []
    if args.out:
        outputs.append(f"csv: {args.out} ({len(run.rows)} rows)")
    if args.plot:
        from actlab.viz.monitor import plot_monitor

        plot_monitor(run.columns, run.rows, args.plot, summary)
        outputs.append(f"plot: {args.plot}")
    if args.summary_json:
        from actlab.utils.io import atomic_write_json

        atomic_write_json(args.summary_json, summary)
        outputs.append(f"summary: {args.summary_json}")
    print("\n" + render_summary(summary), file=sys.stderr)
    for line in outputs:
        print(line, file=sys.stderr)
    sys.stderr.flush()
    return run.exit_code


def _register_find_batch_size(sub: argparse._SubParsersAction) -> None:
    p = subcommand(
        sub,
        "find-batch-size",
        "find the largest batch size whose training step fits in memory (with a safety margin)",
        _FBS_EPILOG,
        description="Double the batch size, then bisect, running real training steps of the preset on the "
        "dataset, until the step no longer fits: on a GPU in its memory (peak reserved by the allocator), "
        "on CPU in --memory-limit (peak resident memory of a fresh process per batch size). Prints the "
        "memory measured for every batch size tried and the largest that fits with the margin.",
    )
    p.add_argument("--preset", required=True, help="training preset (actlab train --list-presets)")
    p.add_argument("--dataset", required=True, metavar="PATH", help="LeRobot v3 dataset directory")
    p.add_argument("--device", default=None, help="auto, cpu, cuda, cuda:N (default: the preset's device)")
    _options.sets(p, "--dataset", "data.path")
    _options.sets(p, "--device", "device")
    p.add_argument(
        "--memory-limit",
        metavar="SIZE",
        help="CPU: resident memory the training process may use, e.g. 2GiB (required on CPU); "
        "GPU: use this instead of the device's total memory",
    )
    p.add_argument("--margin", type=float, default=0.1, help="fraction of the limit kept free (default 0.1)")
    p.add_argument("--start", type=int, default=1, help="first batch size tried (default 1)")
    p.add_argument("--max", type=int, default=None, dest="max_batch", help="largest batch size to try")
    p.add_argument(
        "--multiple-of", type=int, default=1, help="only try multiples of this, e.g. 8 (default 1)"
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=0.05,
        help="stop bisecting when the gap is within this fraction of the best fit (default 0.05; 0: exact)",
    )
    p.add_argument("--steps", type=int, default=2, help="training steps run per batch size (default 2)")
    add_set_flag(p, "override a config key as in actlab train, e.g. --set policy.chunk_size=50 (repeatable)")
    add_json_flag(p)
    p.set_defaults(_run=_run_find_batch_size)


def _run_find_batch_size(args: argparse.Namespace) -> int:
    from actlab.training.batch_probe import find_batch_size
    from actlab.training.batch_size import render_search

    result, what = find_batch_size(
        preset=args.preset,
        dataset=args.dataset,
        overrides=args.overrides,
        device=args.device,
        memory_limit=args.memory_limit,
        margin=args.margin,
        start=args.start,
        max_batch=args.max_batch,
        multiple_of=args.multiple_of,
        tolerance=args.tolerance,
        steps=args.steps,
        progress=None if args.json else sys.stderr,
    )
    if args.json:
        print(json.dumps(result.as_dict() | {"measure": what}, indent=2))
    else:
        print(render_search(result, what))
    return 0 if result.recommended is not None else 1
