"""``actlab bench ...``: benchmarks that print ratios measured side by side in one run (argument parsing
only; the work is in the areas' bench modules).

Each subcommand is one ``_register_<name>(group)`` function listed in ``_SUBCOMMANDS``; adding a benchmark
is adding one such function and its ``_run_<name>`` handler.
"""

from __future__ import annotations

import argparse

from actlab.cli import _options, add_json_flag, add_set_flag, group, subcommand

ORDER = 50


_GROUP_EPILOG = """\
examples:
  actlab bench data runs/demo/data --image-size 80 --batch-size 32 --action-horizon 30 --seconds 5 \\
      --baseline-seconds 15                         # the demo's sampler vs a LeRobot-style loader
  actlab bench train --preset tiny --steps 10 --rounds 10   # model-only vs full step (synthetic data)
  actlab bench eval runs/demo/run/checkpoints/step_0002000 --episodes 8 --max-steps 100
  actlab bench encode --encodes 200                 # video-writer stress (about a minute)
"""


def register(sub: argparse._SubParsersAction) -> None:
    g = group(
        sub, "bench", "benchmarks: throughput measured side by side with a baseline in one run", _GROUP_EPILOG
    )
    for add in _SUBCOMMANDS:
        add(g)


# ------------------------------------------------------------------------------------------ bench data

_DATA_EPILOG = """\
examples:
  actlab bench data runs/demo/data --image-size 80 --batch-size 32 --action-horizon 30 --seconds 5 \\
      --baseline-seconds 15          # at the demo's 80 px: reuses its frame cache runs/demo/cache
  actlab data synth --episodes 20 --frames 4000 --image-size 224 --out runs/bench224
  actlab bench data runs/bench224 --batch-size 8 --action-horizon 100 --seconds 5 --baseline-seconds 15
  actlab bench data runs/bench224 --batch-size 8 --action-horizon 100 \\
      --lerobot-python /work/lerobot-venv/bin/python          # also time real lerobot 0.6.1

samples_per_s is the training sampler (FrameStore + EpisodeSampler + DeviceData.gather on CPU, index
math included); the one-time FrameStore build is reported separately (cache_build_s). The frame cache goes
to --cache-dir, else $ACTLAB_CACHE/frames (~/.cache/actlab/frames), unless a finished one of the same
dataset fingerprint, image size and cameras already exists elsewhere (built with a cache dir, or in
cache/ beside the dataset): that one is reused, and the command says which. The baseline is a
LeRobot-style DataLoader (per-sample random-access video decode in worker processes), timed in the same
run. vs_lerobot_reference_160 is samples_per_s over 160 samples/s, what lerobot 0.6.1's loader delivered
on the 2-core reference machine (224 px AV1, batch 8, 2 workers): a yardstick when no lerobot runs here.
"""


def _register_data(g) -> None:
    p = subcommand(
        g,
        "data",
        "training-sampler samples/s vs a LeRobot-style per-sample-decode loader",
        _DATA_EPILOG,
        description="Measure actlab's training sampler and a LeRobot-style loader on one dataset.",
    )
    p.add_argument("path", metavar="PATH", help="LeRobot v3.0 dataset directory")
    p.add_argument("--batch-size", type=int, default=8, help="samples per batch (default 8)")
    p.add_argument("--action-horizon", type=int, default=100, help="action chunk length (default 100: ACT's)")
    p.add_argument("--seconds", type=float, default=5.0, help="time actlab's sampler this long (default 5)")
    p.add_argument(
        "--image-size", type=int, default=None, help="FrameStore image size in px (default: the native size)"
    )
    p.add_argument("--no-baseline", action="store_true", help="skip the LeRobot-style baseline")
    p.add_argument(
        "--baseline-seconds", type=float, default=15.0, help="time the baseline this long (default 15)"
    )
    p.add_argument("--workers", type=int, default=2, help="baseline DataLoader workers (default 2)")
    p.add_argument("--lerobot-python", default=None, help="python of a lerobot 0.6.1 venv: also time it")
    p.add_argument(
        "--cache-dir",
        default=None,
        help="FrameStore location (default: $ACTLAB_CACHE/frames, or a finished store found elsewhere)",
    )
    add_json_flag(p)
    _options.paths(p, outputs=("--cache-dir",), inputs=("PATH",))
    p.set_defaults(_run=_run_data)


def _run_data(args) -> int:
    import sys

    from actlab.datasets.bench import bench_data
    from actlab.profiling.report import emit
    from actlab.utils.kinds import refuse_cache_inside_output

    refuse_cache_inside_output(args.cache_dir, "--cache-dir")
    result = bench_data(
        args.path,
        batch_size=args.batch_size,
        action_horizon=args.action_horizon,
        seconds=args.seconds,
        image_size=args.image_size,
        baseline=not args.no_baseline,
        baseline_seconds=args.baseline_seconds,
        workers=args.workers,
        lerobot_python=args.lerobot_python,
        cache_dir=args.cache_dir,
        progress=sys.stderr,  # stdout stays the report (or --json)
    )
    emit(result, args.json)
    return 0


# ----------------------------------------------------------------------------------------- bench train

_TRAIN_EPILOG = """\
examples:
  actlab bench train --preset tiny --steps 10 --rounds 10            # synthetic dataset in a temp dir
  actlab bench train --preset so101_sim_cpu --dataset runs/demo/data --set data.cache_dir=runs/demo/cache \\
      --steps 10 --rounds 10 --json                                  # the demo's training step
  actlab bench train --preset so101_sim --dataset runs/demo/data --device cuda \\
      --lerobot-python /work/lerobot-venv/bin/python                 # lerobot 0.6.1's own step beside it
  actlab bench train --preset tiny --set policy.vision_backbone=clip_vit --compare-features \\
      --set policy.pretrained_backbone_weights=null --steps 3 --rounds 3 \\
      --set 'policy.vit_config={"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}'
  actlab bench train --preset aloha_clip --device cuda --compare-features   # the real CLIP ViT-B/32

model_only_step_ms: the step on a batch already on the device (repeated); full_step_ms: sample +
gather + augment + step, as `actlab train` runs it. Blocks of each alternate in one run;
data_stall_frac = 1 - model_only / full. gflops_per_step: model FLOPs of one forward + backward
(counted on the real policy and batch); achieved_tflops_* = FLOPs / step time; on CUDA mfu_* =
achieved / the device's datasheet peak in the step's precision (--peak-tflops overrides it, and gives
an MFU on a CPU, which has no tabled peak). kernels_per_step and device_busy_frac come from
torch.profiler (CUDA kernels on a GPU, torch operators on a CPU: the report says which);
inference_ms_per_chunk is predict_action_chunk at batch 1, eager and CUDA-graph replayed;
nvml_util_median_pct is NVML utilization.gpu (n/a without a GPU). --lerobot-python runs lerobot's own
ACT training step on the same dataset, device and config in a child process, after actlab's run.
--compare-features (a frozen backbone) adds the model-only step on the same samples as images, the
frozen encoder run inside every step: encoder_every_step_ms vs cached_features_step_ms (above: a
small CLIP with random weights, seconds on a CPU; then the aloha_clip preset's CLIP ViT-B/32).
"""


def _register_train(g) -> None:
    p = subcommand(
        g,
        "train",
        "model-only vs full training step time and the data-stall fraction",
        _TRAIN_EPILOG,
        description="Build a training run for a preset and time, in one run, the step on a batch already "
        "on the device and the full step. Without --dataset a small synthetic LeRobot v3 dataset is "
        "written to a temporary directory.",
    )
    p.add_argument("--preset", default="tiny", metavar="NAME", help="training preset (default tiny)")
    p.add_argument("--dataset", metavar="PATH", help="LeRobot v3 dataset (default: synthetic)")
    add_set_flag(p, "override a config key (repeatable), e.g. --set batch_size=64")
    p.add_argument("--device", metavar="DEV", help="device (default: the preset's)")
    p.add_argument("--steps", type=int, default=10, metavar="N", help="steps per timed block (default 10)")
    _options.sets(p, "--dataset", "data.path")
    _options.sets(p, "--device", "device")
    p.add_argument("--rounds", type=int, default=10, metavar="R", help="block pairs (default 10)")
    p.add_argument(
        "--peak-tflops",
        type=float,
        metavar="T",
        help="peak TFLOP/s for MFU instead of the datasheet table (e.g. a measured matmul peak)",
    )
    p.add_argument("--lerobot-python", metavar="PY", help="python of a lerobot 0.6.1 venv: time its step too")
    p.add_argument("--lerobot-workers", type=int, default=4, metavar="N", help="its DataLoader workers (4)")
    p.add_argument("--lerobot-steps", type=int, default=30, metavar="N", help="its timed steps (30)")
    p.add_argument(
        "--compare-features",
        action="store_true",
        help="frozen backbone: also time the step with the encoder run every step instead of cached features",
    )
    add_json_flag(p)
    p.set_defaults(_run=_run_train)


def _run_train(args) -> int:
    import dataclasses

    from actlab.errors import ActlabError
    from actlab.profiling.report import emit
    from actlab.training.bench import run_bench
    from actlab.training.config import apply_train_overrides
    from actlab.training.presets import get_preset
    from actlab.utils.kinds import refuse_cache_inside_output

    if args.steps < 1 or args.rounds < 1:
        raise ActlabError(
            "--steps and --rounds must be >= 1", field="--steps/--rounds", found=(args.steps, args.rounds)
        )
    if args.peak_tflops is not None and not args.peak_tflops > 0:
        raise ActlabError("--peak-tflops must be > 0", field="--peak-tflops", found=args.peak_tflops)
    cfg = apply_train_overrides(get_preset(args.preset), args.overrides)
    refuse_cache_inside_output(cfg.data.cache_dir, "data.cache_dir")
    if args.device:
        cfg = dataclasses.replace(cfg, device=args.device)
    if args.lerobot_steps < 1 or args.lerobot_workers < 0:
        raise ActlabError(
            "--lerobot-steps must be >= 1 and --lerobot-workers >= 0",
            field="--lerobot-steps/--lerobot-workers",
            found=(args.lerobot_steps, args.lerobot_workers),
        )
    result = run_bench(
        cfg,
        args.dataset,
        steps=args.steps,
        rounds=args.rounds,
        peak_tflops=args.peak_tflops,
        lerobot_python=args.lerobot_python,
        lerobot_workers=args.lerobot_workers,
        lerobot_steps=args.lerobot_steps,
        compare_features=args.compare_features,
    )
    emit(result, args.json)
    return 0


# ------------------------------------------------------------------------------------------ bench eval

_EVAL_EPILOG = """\
examples:
  actlab bench eval runs/demo/run/checkpoints/step_0002000 --episodes 24 --max-steps 100
  actlab bench eval expert --episodes 16 --max-steps 200     # the scripted expert (B = 1 only)

The same seeded episodes are rolled out three ways, one torch thread per process in each: serial (one
process, one env), workers<W> (W spawned processes, their start-up included), batched<B> (one process,
B envs stepped in lockstep with one policy call per step). The report says whether every episode's
outcome agreed across the modes.
"""


def _register_eval(g) -> None:
    p = subcommand(
        g,
        "eval",
        "rollout env steps/s: serial vs worker processes vs lockstep-batched envs",
        _EVAL_EPILOG,
        description="Time evaluation rollouts of one policy three ways on the same seeded episodes.",
    )
    p.add_argument("path", metavar="PATH", help="policy bundle directory, or 'expert'")
    p.add_argument("--task", default="so101_pick_place", help="env (default so101_pick_place)")
    p.add_argument("--episodes", type=int, default=8, help="episodes per mode (default 8)")
    p.add_argument("--max-steps", type=int, default=100, help="step limit per episode (default 100)")
    p.add_argument("--workers", type=int, default=2, help="processes of the workers mode (default 2)")
    p.add_argument("--batch-envs", type=int, default=4, help="envs of the batched mode (default 4)")
    # 100000: actlab.evaluation.seeds.DEFAULT_SEED (held out from every recording), written out to stay light
    p.add_argument(
        "--seed", type=int, default=100_000, help="seed of episode 0 (default 100000, as actlab eval's)"
    )
    add_json_flag(p)
    p.set_defaults(_run=_run_eval)


def _run_eval(args) -> int:
    import sys

    from actlab.evaluation.bench import bench_eval
    from actlab.profiling.report import emit

    result = bench_eval(
        args.path,
        args.task,
        args.episodes,
        args.max_steps,
        args.workers,
        args.batch_envs,
        args.seed,
        progress=sys.stderr,  # stdout stays the report (or --json)
    )
    emit(result, args.json)
    return 0


# --------------------------------------------------------------------------------------- bench threads

_THREADS_EPILOG = """\
examples:
  actlab bench threads --rounds 10                       # the demo's policy (so101_sim_cpu), batch 32, 80 px
  actlab bench threads --preset tiny --batch-size 8 --image-size 32 --rounds 5

The same training step (forward, backward, AdamW; synthetic batch) at 1 torch thread and at every CPU's,
round by round, under whatever load the machine has now: the 1-minute load average before and after is in
the report. On a busy CPU torch's threads spin waiting for each other and one thread can be several times
faster; the trainer times its first steps the same way when it starts on a busy CPU (num_threads=0).
"""


def _register_threads(g) -> None:
    p = subcommand(
        g,
        "threads",
        "training step time at 1 torch thread vs all CPUs', under the load of the moment",
        _THREADS_EPILOG,
        description="Time one preset's training step at several torch thread counts, interleaved.",
    )
    p.add_argument(
        "--preset", default="so101_sim_cpu", help="training preset whose policy is timed (so101_sim_cpu)"
    )
    p.add_argument("--batch-size", type=int, default=32, help="batch size (32, the demo's)")
    p.add_argument("--image-size", type=int, default=80, help="camera size in px (80, the demo's)")
    p.add_argument("--rounds", type=int, default=10, help="timed steps per thread count (10)")
    p.add_argument(
        "--threads", default=None, metavar="LIST", help="counts to compare, e.g. 1,2 (1 and every CPU)"
    )
    add_json_flag(p)
    p.set_defaults(_run=_run_threads)


def _run_threads(args) -> int:
    import sys

    from actlab.cli import option_ceiling
    from actlab.errors import ActlabError
    from actlab.policies.bench import bench_threads
    from actlab.profiling.report import emit
    from actlab.training import get_preset
    from actlab.utils.config import comma_items, refuse_repeated
    from actlab.utils.threads import usable_cpus

    try:
        items = comma_items(args.threads, "--threads", "1,2") if args.threads is not None else []
        counts = tuple(int(x) for x in items) if items else tuple(dict.fromkeys((1, usable_cpus())))
    except ValueError as e:
        raise ActlabError(
            "--threads takes thread counts", field="--threads", expected="e.g. 1,2", found=args.threads
        ) from e
    if items:  # 1,01: one count twice (1,1 is refused by comma_items)
        refuse_repeated(list(counts), items, "--threads", args.threads, "1,2")
    if min(counts) < 1:
        raise ActlabError("thread counts are >= 1", field="--threads", found=args.threads)
    ceiling, why = option_ceiling("threads")
    if max(counts) > ceiling:  # (a list escapes the parser's ceilings: 999 ran for minutes)
        raise ActlabError(
            f"thread counts are <= {ceiling:g} ({why}), as every --threads option's",
            field="--threads",
            expected=f"counts from 1 to {ceiling:g}, e.g. 1,2",
            found=args.threads,
            fix="leave --threads out to compare 1 thread with every CPU (nothing was run)",
        )
    result = bench_threads(
        get_preset(args.preset).policy,
        counts,
        batch_size=args.batch_size,
        image_size=args.image_size,
        rounds=args.rounds,
        progress=sys.stderr,  # stdout stays the report (or --json)
    )
    emit(result, args.json)
    return 0


# ---------------------------------------------------------------------------------------- bench encode

_ENCODE_EPILOG = """\
examples:
  actlab bench encode --encodes 200                          # a quick look (about a minute)
  actlab bench encode --encodes 2000 --frames 150 --image-size 96 --workers 2 --json   # recorder-sized

Worker processes write real datasets through DatasetWriter (one encoder thread and mp4 per camera, as a
recording does) while --burners busy processes load the CPU. A worker that finishes no episode for
--hang-seconds is counted as a hang (its thread stacks go into the notes), killed and replaced; writer
errors are counted with their message. encodes = episodes x cameras.
"""


def _register_encode(g) -> None:
    p = subcommand(
        g,
        "encode",
        "video-writer stress: hangs and errors over thousands of encodes under CPU contention",
        _ENCODE_EPILOG,
        description="Encode many short episodes in parallel under CPU contention; count hangs and errors.",
    )
    p.add_argument("--encodes", type=int, default=2000, help="episode-camera encodes in all (default 2000)")
    p.add_argument("--workers", type=int, default=4, help="writer processes at once (default 4)")
    p.add_argument("--burners", type=int, default=-1, help="busy processes; -1: one per core (default -1)")
    p.add_argument("--cameras", type=int, default=2, help="cameras per dataset (default 2)")
    p.add_argument("--frames", type=int, default=30, help="frames per episode (default 30)")
    p.add_argument("--image-size", type=int, default=64, help="square frame side, even (default 64)")
    p.add_argument("--episodes-per-dataset", type=int, default=10, help="episodes per file (default 10)")
    p.add_argument(
        "--hang-seconds", type=float, default=60.0, help="no episode for this long = hung (default 60)"
    )
    p.add_argument("--codec", default="libsvtav1", help="libsvtav1 (default) or libx264")
    add_json_flag(p)
    p.set_defaults(_run=_run_encode)


def _run_encode(args) -> int:
    from actlab.datasets.encode_bench import EncodeStressConfig, run_encode_stress
    from actlab.datasets.video import VideoOptions
    from actlab.profiling.report import emit

    video = VideoOptions(codec=args.codec)
    cfg = EncodeStressConfig(
        encodes=args.encodes,
        workers=args.workers,
        burners=args.burners,
        cameras=args.cameras,
        frames=args.frames,
        image_size=args.image_size,
        episodes_per_dataset=args.episodes_per_dataset,
        hang_s=args.hang_seconds,
        video=video,
    )
    result = run_encode_stress(cfg, progress=not args.json)
    emit(result, args.json)
    return 1 if result["metrics"]["hangs"] or result["metrics"]["errors"] else 0


# Add a benchmark: write _register_<name>(g) + _run_<name>(args) above and list it here.
_SUBCOMMANDS = [_register_data, _register_train, _register_eval, _register_threads, _register_encode]
