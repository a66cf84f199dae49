"""``actlab demo``: record demonstrations in the built-in sim, train, evaluate a checkpoint sweep, report.

Four stages, each writing its own directory under the demo's output directory::

    DIR/data/        LeRobot v3 dataset recorded by the scripted expert  (actlab sim record)
    DIR/run/         training run: config, metrics.jsonl, training.png, checkpoints  (actlab train)
    DIR/cache/       the decoded FrameStore (reused by re-runs)
    DIR/eval/sweep/  every checkpoint on the same held-out seeds  (actlab eval DIR/run)
    DIR/eval/best/   the best checkpoint again on fresh seeds (the unbiased success rate the report leads
                     with: the sweep's best is chosen on the sweep's seeds), rollout videos, whiskers
    DIR/eval/realtime/  with ``--realtime`` only: the best checkpoint under inference delays (sync, async,
                     blend; rtc for an act_relative policy), as ``actlab eval --latency --execution``
    DIR/report.md, report.html, summary.json, scene.png

``DIR/demo_state.json`` records each finished stage with the settings it ran with. A re-run reuses every
stage whose settings are unchanged and whose outputs are still there, redoes the first stage that
changed (and everything after it), and resumes an interrupted training run from its last checkpoint.
``--fresh`` starts over. The number of workers is not a setting of any stage (recordings and evaluations
are identical for any). A non-empty directory without the state file is refused: the demo never writes
into (or deletes) a directory it did not make.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import shlex
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actlab.demo.report import write_report
from actlab.demo.run_check import (
    CHECKPOINTS,
    check_data_sources,
    check_is_demo_dir,
    check_run_data,
    data_sources,
    evaluation_outdated,
    run_checkpoints,
    stage_markers,
    stage_rewritten,
)
from actlab.errors import ActlabError, Terminated
from actlab.evaluation import EnvSpec, EvalConfig, run_eval, wilson_interval
from actlab.evaluation.realtime import mark_vs_sync, plan_cells, run_sweep, write_sweep
from actlab.evaluation.results import FAILURES
from actlab.evaluation.seeds import DEFAULT_SEED
from actlab.evaluation.sources import source_limits
from actlab.evaluation.sweep import best_checkpoint, resolve_paths
from actlab.lifecycle.metrics_log import read_metrics
from actlab.policies.info import synthetic_features, unit_stats
from actlab.policies.registry import make_policy
from actlab.sim import RecordConfig, record_dataset
from actlab.sim.env import FPS, PickPlaceConfig
from actlab.sim.expert import ExpertConfig
from actlab.sim.tasks import TASKS, task_config
from actlab.sim.view import render_strip
from actlab.training import apply_train_overrides, get_preset, load_run_config, preflight, train, with_dataset
from actlab.training.checkpoint import CheckpointManager
from actlab.training.config import refuse_inert_train_overrides, resume_diff
from actlab.utils.config import override_key, to_dict
from actlab.utils.device import resolve_device
from actlab.utils.disk import free_bytes
from actlab.utils.io import atomic_write_json, read_json, read_output_marker
from actlab.utils.kinds import refuse_cache_inside_output
from actlab.utils.lock import LOCK_FILE, DirLock
from actlab.utils.progress import progress_bar
from actlab.utils.units import human_bytes
from actlab.viz.eval import plot_success_vs_step

STAGES = ("record", "train", "eval", "report")
# With --realtime: the delay sweep runs after the evaluation (it sweeps the checkpoint the evaluation chose).
# Also the order in which a redone stage forgets the later ones.
REALTIME_STAGES = ("record", "train", "eval", "realtime", "report")
# Execution modes of the real-time sweep; rtc only for a policy trained to continue a prefix
# (act_relative with rtc_max_delay > 0).
REALTIME_MODES = ("sync", "async", "blend", "rtc")
# Inference delays of the real-time sweep, in control steps (0, 133 and 267 ms at the sim's 30 fps); those
# a policy cannot run (longer than its execution horizon, or its chunk) are left out and said so.
REALTIME_DELAYS = (0, 4, 8)
# The task the demo runs unless --task names another (its results and settings are what they always were).
DEFAULT_TASK = "so101_pick_place"
REALTIME_DIR = "eval/realtime"
# The report's success figure (the sweep and the fresh-seed confirmation), relative to the demo directory.
SUCCESS_PLOT = "eval/success_vs_step.png"
STATE_FILE = "demo_state.json"
# Evaluation seeds start far from the recording seeds (0, 1, ...): the sweep measures held-out cube
# positions, not the demonstrations' own initial states (`actlab eval`'s default seed, the same).
EVAL_SEED = DEFAULT_SEED
# The best checkpoint is confirmed on other seeds again: picking the maximum of several checkpoints' success
# rates on the same episodes overestimates the chosen one's.
CONFIRM_SEED = 200_000

# Disk estimate (measured on a toy demo, 4 episodes x 163 frames at 80 px, and on the full CPU demo,
# 1.9 GB in all): the recorder's AV1 video takes ~3.6% of the raw RGB bytes of a frame (682 B per 80 px
# frame); the parquet files and metadata ~220 B per frame; an H.264 rollout video (two cameras drawn at
# 256 px, side by side) ~1.6 kB per frame and a whiskers video ~2.6 kB per frame.
VIDEO_RAW_FRACTION = 0.036
TABLE_BYTES_PER_FRAME = 220
ROLLOUT_VIDEO_BYTES_PER_FRAME = 1600
WHISKERS_VIDEO_BYTES_PER_FRAME = 2600
# Plots, metrics.jsonl, results files and the report pages: well under this.
REPORT_BYTES = 2_000_000
# Rollout videos of the best checkpoint when --videos is not given (fewer when there are fewer episodes).
DEFAULT_VIDEOS = 3
# The CPU demo's training recipe over the so101_sim_cpu preset (a --set of the same key wins): batch 16
# with an EMA of the weights over the preset's 5,000 steps. A batch-16 step costs half a batch-32 step
# (74.8 against 144.3 ms at 1 thread, `actlab policy bench`), so the whole demo fits in 5 minutes on 2
# cores that train the preset at 56 ms a step (266 s against 395 s), and it learns as well: the last
# checkpoint 49/50 and 47/50 on the sweep's seeds, 99 and 97 of 100 fresh, with training seeds 0 and 1,
# against 49/50 and 99/100 for the preset's batch 32 without EMA; 3,000 batch-32 steps with EMA, the
# other way to halve the time, gave 46/50 and 96/100, and 131/150 with seed 1 (docs/benchmarks.md "Demo").
CPU_DEMO_RECIPE = ("batch_size=16", "ema_decay=0.995")


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """What ``actlab demo`` does; every field has a command-line flag."""

    # output directory holding every stage's results and the report
    out: str = "runs/demo"
    # training device: "auto" (CUDA when available, which also selects the GPU preset), "cpu", "cuda", ...
    device: str = "auto"
    # training preset; None picks so101_sim_cpu on CPU and so101_sim on a GPU
    preset: str | None = None
    # scripted-expert demonstrations to record
    episodes: int = 300
    # camera image size (pixels, square); None: 80 for the CPU preset, 128 for the GPU preset
    image_size: int | None = None
    # evaluation episodes per checkpoint of the sweep (held-out seeds from EVAL_SEED)
    eval_episodes: int = 50
    # rollout videos of the best checkpoint; None: DEFAULT_VIDEOS, or every evaluation episode when there
    # are fewer (a default must not refuse `--eval-episodes 2`); an explicit number is never changed
    videos: int | None = None
    # simulation / rollout worker processes
    workers: int = 2
    # training config overrides (``key=value``, as ``actlab train --set``)
    overrides: tuple[str, ...] = ()
    # discard every previous result in ``out`` and start over
    fresh: bool = False
    # after the evaluation, sweep the best checkpoint over inference delays and execution modes (opt in:
    # it costs about one evaluation of --eval-episodes per cell, 7 cells for an ACT policy)
    realtime: bool = False
    # that sweep's delays in control steps (no flag: the tests' knob for a cheaper sweep)
    realtime_delays: tuple[int, ...] = REALTIME_DELAYS
    # the sim task to record, train on and evaluate (actlab sim tasks lists them)
    task: str = DEFAULT_TASK
    # the recording's video codec (sim record's --codec): "auto" writes h264 on a busy CPU, so two runs
    # on differently loaded machines train on differently compressed frames; "av1" or "h264" pins it
    codec: str = "auto"

    def __post_init__(self) -> None:
        task_config(self.task)  # an unknown task name fails here, with a did-you-mean
        if self.videos is None:  # frozen: resolved once here, so every later reader sees a number
            object.__setattr__(self, "videos", min(DEFAULT_VIDEOS, self.eval_episodes))
        for name, low in (("episodes", 2), ("eval_episodes", 1), ("videos", 0), ("workers", 1)):
            if getattr(self, name) < low:
                raise ActlabError(
                    f"{name} must be >= {low}", field=f"--{name.replace('_', '-')}", found=getattr(self, name)
                )
        if self.videos > self.eval_episodes:
            raise ActlabError(
                "more videos than evaluation episodes",
                field="--videos",
                expected=f"<= --eval-episodes ({self.eval_episodes})",
                found=self.videos,
                fix=f"pass --videos {self.eval_episodes} or fewer, or leave --videos out (it then films "
                f"min({DEFAULT_VIDEOS}, --eval-episodes))",
            )
        if not self.realtime_delays or min(self.realtime_delays) < 0:
            raise ActlabError(
                "real-time delays must be >= 0 control steps",
                field="realtime_delays",
                found=self.realtime_delays,
            )
        if self.image_size is not None and (self.image_size < 16 or self.image_size % 2):
            raise ActlabError(
                "image size must be even and >= 16 (yuv420p video)",
                field="--image-size",
                found=self.image_size,
            )


@dataclasses.dataclass
class StageLog:
    """Prints one clear line per stage and keeps the timings for the summary."""

    stream: Any = dataclasses.field(default_factory=lambda: sys.stderr)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    reused: list[str] = dataclasses.field(default_factory=list)
    stages: tuple[str, ...] = STAGES  # the stages this run has (REALTIME_STAGES with --realtime)

    def start(self, stage: str, text: str) -> float:
        index = self.stages.index(stage) + 1
        print(f"\n[{index}/{len(self.stages)}] {text}", file=self.stream, flush=True)
        return time.perf_counter()

    def done(self, stage: str, t0: float, text: str) -> None:
        self.seconds[stage] = round(time.perf_counter() - t0, 1)
        print(f"      {text} ({self.seconds[stage]:.0f} s)", file=self.stream, flush=True)

    def reuse(self, stage: str, text: str, entry: dict) -> None:
        self.reused.append(stage)
        self.seconds[stage] = entry.get("seconds", 0.0)  # as measured when the stage ran
        print(f"      reusing {text} (--fresh starts over)", file=self.stream, flush=True)


# ------------------------------------------------------------------------------------------ planning


def estimate_disk(cfg: DemoConfig, plan: dict[str, Any]) -> dict[str, int]:
    """Bytes each part of the demo directory will take, estimated from the settings before anything runs:
    the recording (video + tables), the decoded frame cache (exact: frames x cameras x pixels), the
    checkpoints and the log allowance the trainer's disk preflight reserves before its first step
    (weights + AdamW state times the checkpoints alive at once) and the evaluation media. Frames per
    episode: the scripted expert's planned episode length."""
    rec = RecordConfig()
    train_cfg = plan["train"]
    size = plan["image_size"]
    frames = cfg.episodes * ExpertConfig().episode_steps  # the recorder writes one frame per step
    pixels = size * size * 3
    policy_cams = [c.rsplit(".", 1)[-1] for c in (train_cfg.policy.cameras or ())] or list(rec.cameras)
    # Counted on the real policy (built without pretrained weights: nothing is downloaded).
    feats = synthetic_features(6, 6, tuple(policy_cams), (size, size))
    policy = make_policy(train_cfg.policy, feats, unit_stats(train_cfg.policy, feats), pretrained=False)
    n_params = sum(p.numel() for p in policy.parameters())
    n_train = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    keep = train_cfg.checkpoint
    # what training itself reserves before its first step (actlab.training.preflight: keep_last, the best
    # one and the one being written, plus its logs): the checkpoints kept at the end and no log reserve
    # let a disk with room for the demo's figure but not the trainer's record, then training refuse
    alive = preflight.plan(n_params, n_train, keep.keep_last, keep.keep_best).checkpoints_alive
    episode_frames = PickPlaceConfig().max_steps + 1  # at most: a failed episode runs to the limit
    return {
        "recording": int(frames * (len(rec.cameras) * pixels * VIDEO_RAW_FRACTION + TABLE_BYTES_PER_FRAME)),
        "frame cache": frames * len(policy_cams) * pixels,
        f"checkpoints ({alive} reserved by training)": alive * preflight.checkpoint_bytes(n_params, n_train),
        "training logs (reserved)": preflight.RUN_DIR_OVERHEAD_BYTES,
        "evaluation media": episode_frames
        * (cfg.videos * ROLLOUT_VIDEO_BYTES_PER_FRAME + WHISKERS_VIDEO_BYTES_PER_FRAME)
        + REPORT_BYTES,
    }


def _disk_line(parts: dict[str, int]) -> str:
    items = ", ".join(f"{k} {human_bytes(v)}" for k, v in parts.items())
    return f"disk: about {human_bytes(sum(parts.values()))} ({items})"


# What makes each part of the estimate smaller (the refusal's fix names the largest part's).
_SHRINK = {
    "recording": "fewer --episodes or a smaller --image-size",
    "frame cache": "fewer --episodes or a smaller --image-size",
    "checkpoints": "a lower --set checkpoint.keep_last, or --set checkpoint.keep_best=false",
    "training logs": "the trainer reserves it for every run; it is fixed",
    "evaluation media": "fewer --videos",
}


def _check_disk(out: Path, parts: dict[str, int]) -> None:
    """Refuse to start when the free space (plus what an earlier run of this demo already holds, which a
    re-run reuses or replaces) is below the estimate."""
    need = sum(parts.values())
    held = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) if out.is_dir() else 0
    free = free_bytes(out)
    if free + held < need:
        largest = max(parts, key=parts.__getitem__)
        raise ActlabError(
            "not enough disk space for the demo; refusing to start rather than fail later",
            file=out,
            expected=_disk_line(parts),
            found=f"{human_bytes(free)} free" + (f" + {human_bytes(held)} in {out}" if held else ""),
            fix=f"free disk space or choose an --out on a larger disk; its largest part is the {largest} "
            f"({human_bytes(parts[largest])}): {_SHRINK.get(largest.split(' (')[0], 'see the estimate')}",
        )


def resolve(cfg: DemoConfig) -> dict[str, Any]:
    """Device, preset, image size and the training config the demo will use (validated, nothing run)."""
    device = resolve_device(cfg.device)
    gpu = device.type == "cuda"
    preset = cfg.preset or ("so101_sim" if gpu else "so101_sim_cpu")
    image_size = cfg.image_size or (128 if gpu else 80)
    out = Path(cfg.out)
    train_cfg = with_dataset(get_preset(preset), str(out / "data"))
    demo_overrides = [f"device={device}", f"data.image_size={image_size}", f"data.cache_dir={out / 'cache'}"]
    if preset == "so101_sim":
        # The full preset trains 100k steps; a demo stops at 20k and checkpoints 5 times on the way.
        demo_overrides += [
            "steps=20000",
            "checkpoint.every=4000",
            "checkpoint.keep_last=5",
            "eval.every=4000",
        ]
    elif preset == "so101_sim_cpu":
        demo_overrides += list(CPU_DEMO_RECIPE)
    _refuse_owned_overrides(cfg.overrides)
    train_cfg = apply_train_overrides(train_cfg, [*demo_overrides, *cfg.overrides])
    refuse_inert_train_overrides(train_cfg, cfg.overrides)
    # checked here, not where the training stage meets them: after the recording stage had run
    refuse_cache_inside_output(train_cfg.data.cache_dir, "data.cache_dir", own=out)
    beyond = sorted(e for e in train_cfg.data.episodes if e >= cfg.episodes)
    if beyond:
        raise ActlabError(
            "data.episodes names episodes the demo does not record",
            field="data.episodes",
            expected=f"indices among 0..{cfg.episodes - 1} (--episodes {cfg.episodes})",
            found=beyond,
            fix="name recorded episodes only, or record more with --episodes (nothing was run)",
        )
    plan = {"device": str(device), "preset": preset, "image_size": image_size, "train": train_cfg}
    return {**plan, "task": cfg.task} if cfg.task != DEFAULT_TASK else plan


# Training keys the demo sets from its own options: a --set of one of them made the demo record its
# dataset and then train on another (`--set data.path=X`) or at another size or device than it recorded
# and evaluates with, without a word. Each maps to the demo option that sets it (None: no option).
_OWNED_KEYS = {"data.path": None, "device": "--device", "data.image_size": "--image-size"}


def _refuse_owned_overrides(overrides: Sequence[str]) -> None:
    for item in overrides:
        key = override_key(item)
        if key in _OWNED_KEYS:
            option = _OWNED_KEYS[key]
            raise ActlabError(
                f"--set {key} is the demo's own setting",
                field=f"--set {key}",
                expected="a training setting the demo does not set itself"
                + (f" ({key} is set by {option})" if option else f" ({key} is the dataset the demo records)"),
                found=item,
                fix=(
                    f"pass {option} instead"
                    if option
                    else "leave it out; to train on a dataset of your own, run `actlab train --dataset PATH`"
                )
                + " (nothing was run)",
            )


def _load_state(out: Path) -> dict[str, Any]:
    path = out / STATE_FILE
    # (the fix was "repair or regenerate the file": no command regenerates it, --fresh starts over)
    fix = (
        "restore it from a copy, or run the demo again with --fresh (every stage runs again; the "
        "directory's data/, run/ and eval/ are replaced)"
    )
    return read_json(path, "demo state file", fix=fix) if path.is_file() else {}


def _stage_current(state: dict, stage: str, settings: dict, outputs: list[Path], out: Path) -> bool:
    """The stage ran with ``settings``, its outputs are there and its recorded result is the one it wrote
    (then moved to ``out`` where the demo directory was moved or copied). A result edited or cut in
    demo_state.json was the report's (a KeyError or matplotlib's traceback, or numbers the evaluation never
    gave): the stage runs again, with a note."""
    entry = state.get(stage)
    if not (
        isinstance(entry, dict) and entry.get("settings") == settings and all(p.exists() for p in outputs)
    ):
        return False
    result = entry.get("result")
    digest = entry.get("digest")
    # An entry without a digest (an earlier actlab's, or one whose digest was removed) cannot be told from
    # an edited one: its result was reused as written (a count edited to 5/2 in the report, or
    # matplotlib's traceback). It runs again, once: the stage then writes its digest.
    if not isinstance(result, dict) or digest != _digest(result):
        why = (
            "has no digest (written by an earlier actlab, or removed): it cannot be told from an edit"
            if digest is None and isinstance(result, dict)
            else "was changed since the stage wrote it (edited?)"
        )
        print(
            f"      {out / STATE_FILE}: the {stage} stage's result {why}: running the stage again",
            file=sys.stderr,
            flush=True,
        )
        return False
    changed = stage_rewritten(entry, out, stage)
    if changed:
        print(f"      {changed}: written again since the {stage} stage wrote it (by another command?): "
              "running the stage again", file=sys.stderr, flush=True)  # fmt: skip
        return False
    old = entry.get("out") or _legacy_out(state)
    if old and old != str(out.resolve()):  # a moved or copied demo: paths into the old directory follow it
        entry["result"] = _rebased(result, old, str(out.resolve()))
        # the state written at the next finished stage holds the moved result: its digest follows
        entry.update(out=str(out.resolve()), digest=_digest(entry["result"]))
    return True


def _digest(result: dict) -> str:
    return hashlib.sha256(json.dumps(result, sort_keys=True, default=str).encode()).hexdigest()


def _legacy_out(state: dict) -> str | None:
    """The demo directory a state file written before entries recorded it was in: its dataset's parent."""
    path = ((state.get("record") or {}).get("result") or {}).get("path")
    return str(Path(path).parent) if isinstance(path, str) and path else None


def _rebased(value: Any, old: str, new: str) -> Any:
    """``value`` with every string that is ``old`` or a path under it moved to ``new``: the report named
    the checkpoint of the directory the demo was copied from."""
    if isinstance(value, dict):
        return {k: _rebased(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebased(v, old, new) for v in value]
    if isinstance(value, str) and (value == old or value.startswith(old + "/")):
        return new + value[len(old) :]
    return value


def _finish_stage(
    out: Path, state: dict, stage: str, settings: dict, result: dict, seconds: float, **extra: Any
) -> None:
    result = json.loads(json.dumps(result, default=str))  # as the state file holds it (its digest too)
    state[stage] = {
        "settings": settings,
        "result": result,
        "seconds": seconds,
        "out": str(out.resolve()),
        "digest": _digest(result),
        **stage_markers(out, stage),
        **extra,
    }
    # Later stages depended on this one: forget them so they run again.
    for later in REALTIME_STAGES[REALTIME_STAGES.index(stage) + 1 :]:
        state.pop(later, None)
    atomic_write_json(out / STATE_FILE, state)


# ------------------------------------------------------------------------------------------ stages


def _record(cfg: DemoConfig, plan: dict, out: Path, state: dict, log: StageLog) -> dict:
    data = out / "data"
    rec = RecordConfig(
        task=cfg.task,
        episodes=cfg.episodes,
        image_size=plan["image_size"],
        # One worker is this process, as for the evaluation's --workers 1: a pool of one spawned recorder
        # only added its start-up (torch and MuJoCo imported again, ~3 s of CPU).
        workers=cfg.workers if cfg.workers > 1 else 0,
        codec=cfg.codec,
    )
    settings = json.loads(json.dumps(dataclasses.asdict(rec)))
    del settings["workers"]  # the recording is identical for any number of workers: not a reason to redo
    for key, default in (("units", "degrees"), ("codec", "auto")):  # a demo recorded before they existed
        if settings.get(key) == default:  # is current
            del settings[key]
    t0 = log.start("record", f"recording {cfg.episodes} scripted-expert demonstrations -> {data}")
    if _stage_current(state, "record", settings, [data / "meta" / "info.json"], out):
        check_data_sources(state["record"], data)
        log.reuse("record", f"the dataset in {data}", state["record"])
        return state["record"]["result"]
    _forget_unmarked(data)
    summary = record_dataset(data, rec, overwrite=True)
    _remove_run(out / "run")  # trained and evaluated on the old data
    shutil.rmtree(out / "eval", ignore_errors=True)
    result = {**dataclasses.asdict(summary), "success_rate": summary.success_rate}
    result["failed_seeds"] = list(result["failed_seeds"])
    log.done("record", t0, summary.line(timed=False))  # the stage line adds the time, once
    # each file's sha256, in the same write: a later edit is not reused (24th fault run)
    _finish_stage(out, state, "record", settings, result, log.seconds["record"], sources=data_sources(data))
    return result


def _train(plan: dict, out: Path, state: dict, log: StageLog) -> dict:
    run = out / "run"
    train_cfg = plan["train"]
    settings = to_dict(train_cfg)
    # Where the data and cache are follows from --out (absolute or relative, or a moved directory):
    # not a setting that changes the run.
    settings["data"] = {k: v for k, v in settings["data"].items() if k not in ("path", "cache_dir")}
    t0 = log.start("train", f"training preset {plan['preset']} on {plan['device']} -> {run}")
    if _stage_current(state, "train", settings, [run / "checkpoints"], out):
        check_run_data(train_cfg, run)
        log.reuse("train", f"the finished run in {run}", state["train"])
        return state["train"]["result"]
    resume = _can_resume(run, train_cfg, log)
    if not resume:
        _remove_run(run)
    summary = train(train_cfg, run, resume=resume)
    if summary.stopped in ("sigterm", "sigint"):
        # the user's own stop: exit as the signal asks (143 / 130) and say how to go on, not "error:
        # training stopped early (sigterm)", exit 2
        where = f"training stopped at step {summary.step} after writing a checkpoint in {run}"
        again = "run actlab demo again with the same options: it continues from that checkpoint"
        if summary.stopped == "sigint":
            raise KeyboardInterrupt(f"{where}; {again}")
        stop = Terminated(15)
        stop.note = f"{where}; {again}"
        raise stop
    if summary.stopped != "completed":
        raise ActlabError(
            f"training stopped early ({summary.stopped}) at step {summary.step}",
            file=run,
            fix="run actlab demo again with the same options to resume from the last checkpoint",
        )
    result = summary.as_dict()
    log.done("train", t0, f"{summary.step} steps, {summary.samples_per_s:.0f} samples/s")
    _finish_stage(out, state, "train", settings, result, log.seconds["train"])
    return result


def _forget_unmarked(stage_dir: Path) -> None:
    """Delete a stage's output written by an actlab before outputs carried their writer's marker: the demo
    owns it (its state file is in the directory) and is about to redo the stage, but ``overwrite`` replaces
    only a marked output of the same command."""
    if stage_dir.is_dir() and not stage_dir.is_symlink() and read_output_marker(stage_dir) is None:
        shutil.rmtree(stage_dir)


def _remove_run(run: Path) -> None:
    """Delete the demo's training run directory, never while a process trains in it (`actlab train --out
    DIR/run --resume`, or a second demo): its run lock (the DirLock `actlab train` holds) is taken first,
    and a held lock is an ActlabError naming that process. The lock file itself is removed by the release
    and the directory after it: deleting a lock file while holding it would let two later processes
    lock two different files."""
    if not run.exists():
        return
    fix = "wait for pid {pid} to finish (or stop it), then run actlab demo again; or choose another --out"
    with DirLock(run, "demo's training run directory", fix=fix):
        for child in run.iterdir():
            if child.name != LOCK_FILE:
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    with contextlib.suppress(OSError):  # empty now, unless a run started in it since the release
        run.rmdir()


def _can_resume(run: Path, train_cfg: Any, log: StageLog) -> bool:
    """An interrupted run of a compatible config (the trainer's own rule) is continued, not restarted."""
    if not (run / "config.json").is_file():
        return False
    keep = train_cfg.checkpoint
    last = CheckpointManager(run, keep.keep_last, keep.keep_best).last_step()
    if last is None:
        return False
    diff = resume_diff(load_run_config(run), train_cfg)
    if diff:
        print(f"      the earlier run differs in {', '.join(diff)}: starting it over", file=log.stream)
        return False
    if last > train_cfg.steps:
        # Resuming would train nothing and report the longer run as this one (its schedule ran to more steps).
        print(
            f"      the earlier run went past steps={train_cfg.steps} (to {last}): starting it over",
            file=log.stream,
        )
        return False
    if last == train_cfg.steps:
        print(f"      the run already reached step {last}: reusing it", file=log.stream, flush=True)
    else:
        print(f"      resuming the interrupted run from step {last}", file=log.stream, flush=True)
    return True


def _evaluate(cfg: DemoConfig, out: Path, state: dict, log: StageLog) -> dict:
    run, sweep_dir, best_dir = out / "run", out / "eval" / "sweep", out / "eval" / "best"
    # Not the number of workers: the outcomes are the same for any (tested in tests/evaluation).
    settings = {
        "episodes": cfg.eval_episodes,
        "seed": EVAL_SEED,
        "confirm_seed": CONFIRM_SEED,
        "videos": cfg.videos,
        "video_pick": "failures",
    }
    if cfg.task != DEFAULT_TASK:  # (the default's settings stay as they were: earlier demos are reused)
        settings["task"] = cfg.task
    t0 = log.start(
        "eval", f"evaluating every checkpoint on {cfg.eval_episodes} held-out episodes -> {sweep_dir}"
    )
    outdated = evaluation_outdated(state.get("eval"), run, log.stream)
    if not outdated and _stage_current(
        state, "eval", settings, [sweep_dir / "results.json", best_dir / "results.json"], out
    ):
        log.reuse("eval", f"the evaluation in {out / 'eval'}", state["eval"])
        return state["eval"]["result"]
    spec = EnvSpec(cfg.task)
    sources = resolve_paths([run])
    _forget_unmarked(sweep_dir)
    _forget_unmarked(best_dir)
    sweep_cfg = EvalConfig(episodes=cfg.eval_episodes, seed=EVAL_SEED, workers=cfg.workers)
    with _episode_bar(len(sources) * cfg.eval_episodes, "sweep", cfg.eval_episodes, log) as on_episode:
        sweep = run_eval(sources, spec, sweep_cfg, sweep_dir, overwrite=True, on_episode=on_episode)
    best = best_checkpoint(sweep.evals)
    assert best is not None and best.path is not None  # resolve_paths refuses a run without checkpoints
    print(
        f"      best checkpoint: {best.name} ({100 * best.summary.success_rate:.0f}% success on the sweep's "
        f"seeds); confirming it on {cfg.eval_episodes} fresh episodes, with rollout videos and whiskers "
        f"-> {best_dir}",
        file=log.stream,
        flush=True,
    )
    # Videos of the first failure of each kind, then of successes: a report of only successes would hide
    # what the failures look like.
    media_cfg = EvalConfig(
        episodes=cfg.eval_episodes,
        seed=CONFIRM_SEED,
        workers=cfg.workers,
        videos=cfg.videos,
        video_pick="failures",
    )
    with _episode_bar(cfg.eval_episodes, "confirm", cfg.eval_episodes, log) as on_episode:
        media = run_eval(
            [best.path], spec, media_cfg, best_dir, True, whiskers={"episode": 0}, on_episode=on_episode
        )
    confirmed = media.evals[0].summary
    result = {"sweep": sweep.to_dict(), "best": best.name, "best_path": best.path, "media": media.to_dict()}
    result[CHECKPOINTS] = run_checkpoints(run)
    log.done(
        "eval",
        t0,
        f"best {best.name}: {best.summary.successes}/{best.summary.episodes} on the sweep's seeds, "
        f"{confirmed.successes}/{confirmed.episodes} on fresh seeds",
    )
    _finish_stage(out, state, "eval", settings, result, log.seconds["eval"])
    return result


def _realtime(cfg: DemoConfig, out: Path, state: dict, evaluation: dict, log: StageLog) -> dict:
    """``--realtime``: the best checkpoint on the confirmation seeds under inference delays, one cell per
    (mode, delay) as ``actlab eval --latency ... --execution ...`` runs them (the same planner and runner),
    written atomically to DIR/eval/realtime (sweep.json, sweep.md, sweep.png)."""
    rt_dir = out / REALTIME_DIR
    # The confirmation seeds (CONFIRM_SEED): held out from the recording, and the sync cell is the
    # confirmation itself again (same checkpoint, same episodes), a check that the sweep measures the same.
    settings = {
        "episodes": cfg.eval_episodes,
        "seed": CONFIRM_SEED,
        "modes": list(REALTIME_MODES),
        "delays": list(cfg.realtime_delays),
        "checkpoint": evaluation["best"],
    }
    if CHECKPOINTS in evaluation:  # its weights: another run's under the same name is swept again
        settings["weights"] = evaluation[CHECKPOINTS].get(evaluation["best"])
    t0 = log.start(
        "realtime",
        f"sweeping {evaluation['best']} over inference delays {', '.join(map(str, cfg.realtime_delays))} "
        f"(control steps) on {cfg.eval_episodes} fresh episodes -> {rt_dir}",
    )
    if _stage_current(state, "realtime", settings, [rt_dir / "sweep.json"], out):
        log.reuse("realtime", f"the delay sweep in {rt_dir}", state["realtime"])
        return state["realtime"]["result"]
    # The checkpoint in this demo directory (the recorded path is stale once the directory is moved).
    best_path = out / "run" / "checkpoints" / Path(evaluation["best_path"]).name
    (src,) = resolve_paths([best_path])
    grid, skipped = _realtime_grid(src, cfg.realtime_delays)
    spec = EnvSpec(cfg.task)
    eval_cfg = EvalConfig(episodes=cfg.eval_episodes, seed=CONFIRM_SEED, workers=cfg.workers)

    def say(cell) -> None:
        s = cell.summary
        rate = _rate_line(s.successes, s.episodes)
        print(
            f"      {cell.mode} delay {cell.latency}: {rate} ({cell.seconds:.0f} s)",
            file=log.stream,
            flush=True,
        )

    cells = []
    for mode, delays in grid:  # run_sweep plans and checks its cells again: one planner for eval and demo
        cells += run_sweep([src], spec, eval_cfg, [mode], delays, [None], FPS, on_cell=say)[0]
    mark_vs_sync(cells)  # McNemar against the sync cell, as actlab eval's sweep marks them
    last = CONFIRM_SEED + cfg.eval_episodes - 1
    result = {
        "dir": REALTIME_DIR,
        # (eval compare pairs a cell with another evaluation of the same task: without it the demo's own
        # sync cell and its confirmation were refused as "no task (removed from the record?)")
        "task": cfg.task,
        "checkpoint": evaluation["best"],
        "episodes": cfg.eval_episodes,
        "seeds": f"{CONFIRM_SEED}..{last}",  # episode i uses seed + i, in every cell
        "fps": FPS,
        "skipped": skipped,
        "cells": [c.to_dict(FPS) for c in cells],
    }
    _forget_unmarked(rt_dir)
    heading = f"actlab demo delay sweep: {evaluation['best']}"
    title = f"{evaluation['best']}: success and boundary jump vs delay"
    write_sweep(rt_dir, cells, FPS, result, heading, title, overwrite=True, inputs=[best_path])
    log.done("realtime", t0, f"{len(cells)} cells" + (f", {len(skipped)} left out" if skipped else ""))
    _finish_stage(out, state, "realtime", settings, result, log.seconds["realtime"])
    return result


def _realtime_grid(src: Any, delays: tuple[int, ...]) -> tuple[list[tuple[str, list[int]]], list[dict]]:
    """The (mode, delays) the policy can run, each cell checked by ``plan_cells`` (the rule ``actlab eval``
    applies), and the cells left out with the reason. rtc only for a policy trained on prefixes: at delay
    0 the check would pass for any chunk policy, but its prefix argument means nothing to plain ACT."""
    limits = source_limits(src)
    grid, skipped = [], []
    for mode in REALTIME_MODES:
        if mode == "rtc" and (limits is None or limits.rtc_max_delay == 0):
            reason = "not act_relative with rtc_max_delay"
            skipped.append({"mode": mode, "latency_steps": None, "reason": reason})
            continue
        ok = []
        for d in [0] if mode == "sync" else list(dict.fromkeys(delays)):
            try:
                plan_cells([src], [mode], [d])
            except ActlabError as e:
                skipped.append({"mode": mode, "latency_steps": d, "reason": e.problem})
                continue
            ok.append(d)
        if ok:
            grid.append((mode, ok))
    return grid, skipped


class _episode_bar:
    """A tqdm bar over evaluation episodes, fed by ``run_eval``'s ``on_episode`` callback. Its postfix
    counts the successes of the checkpoint the last episode belonged to, and each checkpoint gets a line
    of its own (successes, rate, 95% interval) once all its episodes are in: a count pooled over every
    checkpoint of a sweep would describe none of them."""

    def __init__(self, total: int, desc: str, per_source: int, log: StageLog) -> None:
        self.total, self.desc, self.per_source, self.log = total, desc, per_source, log

    def __enter__(self):
        self.bar = progress_bar(self.total, self.desc, "ep")
        self.counts: dict[str, list[int]] = {}  # source name -> [successes, episodes]

        def on_episode(source, result) -> None:
            k_n = self.counts.setdefault(source.name, [0, 0])
            k_n[0] += bool(result.success)
            k_n[1] += 1
            self.bar.update(1)
            self.bar.set_postfix_str(f"{source.name} {k_n[0]}/{k_n[1]} success")
            if k_n[1] == self.per_source:
                self.bar.write(f"      {source.name}: {_rate_line(*k_n)}", file=self.log.stream)

        return on_episode

    def __exit__(self, *exc) -> None:
        self.bar.close()


def _rate_line(successes: int, episodes: int) -> str:
    """``48/50 success (96%, 95% interval 87-99%)``."""
    low, high = wilson_interval(successes, episodes)
    rate = successes / episodes if episodes else 0.0
    return (
        f"{successes}/{episodes} success ({100 * rate:.0f}%, 95% interval {100 * low:.0f}-{100 * high:.0f}%)"
    )


# ------------------------------------------------------------------------------------------ next steps
# Episodes of the "evaluate on more seeds" command: 200 give a 95% interval about +-3 points at 95%.
MORE_EPISODES = 200
# Seconds of the lerobot-rollout command (about 12 episodes of the sim robot at 30 fps).
ROLLOUT_DURATION_S = 120


def demo_argv(cfg: DemoConfig, plan: dict[str, Any], overrides: tuple[str, ...] | None = None) -> list[str]:
    """``actlab demo`` with this run's settings spelled out (a re-run with it reuses every finished stage;
    ``overrides`` replaces the --set list)."""
    argv = ["actlab", "demo", "--out", str(cfg.out), "--device", plan["device"], "--preset", plan["preset"]]
    argv += ["--episodes", str(cfg.episodes), "--image-size", str(plan["image_size"])]
    argv += [
        "--eval-episodes",
        str(cfg.eval_episodes),
        "--videos",
        str(cfg.videos),
        "--workers",
        str(cfg.workers),
    ]
    for o in cfg.overrides if overrides is None else overrides:
        argv += ["--set", o]
    return argv


def next_steps(cfg: DemoConfig, plan: dict[str, Any], best_path: str | Path) -> list[tuple[str, list[str]]]:
    """What to do next with the demo's policy: ``(why, argv)`` pairs, each a command that runs as written
    from the directory the demo ran in (the report's last section)."""
    out = Path(cfg.out)
    best = out / "run" / "checkpoints" / Path(best_path).name  # in this directory, also after a move
    steps = plan["train"].steps
    longer = (*(o for o in cfg.overrides if not o.startswith("steps=")), f"steps={2 * steps}")
    fresh = CONFIRM_SEED + cfg.eval_episodes  # after the confirmation's seeds: never seen by this demo
    lerobot = out / "lerobot"
    rollout = ["lerobot-rollout", "--strategy.type=base", f"--policy.path={lerobot}"]
    rollout += ["--robot.type=actlab_so101_sim", f"--robot.image_size={plan['image_size']}"]
    if cfg.task != DEFAULT_TASK:  # the demo's task, told as its recordings were (not pick-and-place's)
        rollout += [f"--robot.task={cfg.task}"]
    rollout += [f"--robot.output_dir={out / 'rollout'}", f"--duration={ROLLOUT_DURATION_S}"]
    rollout += ["--return_to_initial_position=false", f"--task={TASKS[cfg.task].env.task_text}"]
    return [
        (
            f"measure the chosen checkpoint on {MORE_EPISODES} more fresh seeds (a narrower interval)",
            [
                *("actlab", "eval", str(best), "--episodes", str(MORE_EPISODES), "--seed", str(fresh)),
                *("--workers", str(cfg.workers), "--out", str(out / "eval" / "more")),
            ],
        ),
        (
            "ask the policy doctor what it learned (it compares with the sweep's best by success)",
            ["actlab", "policy", "doctor", str(best), "--dataset", str(out / "data")],
        ),
        (
            f"train longer ({2 * steps} steps): the recording is reused, the run resumes from its last "
            "checkpoint, and the sweep runs again",
            demo_argv(cfg, plan, longer),
        ),
        (
            "sweep the chosen checkpoint over inference delays (the real-time section)",
            [*demo_argv(cfg, plan), "--realtime"],
        ),
        (
            "export it for LeRobot (a directory lerobot loads with --policy.path)",
            ["actlab", "policy", "export", str(best), "--to", "lerobot", "--out", str(lerobot)],
        ),
        (
            "run the export in LeRobot's own runtime on the simulated SO-101 (in the environment where "
            "lerobot and actlab's plugin are installed: docs/lerobot.md); one line per episode on stderr",
            rollout,
        ),
    ]


def command_line(argv: list[str]) -> str:
    """A shell line for ``argv`` (quoted where needed)."""
    return shlex.join(argv)


# ------------------------------------------------------------------------------------------ entry point


def run_demo(cfg: DemoConfig) -> dict[str, Any]:
    """Run (or resume) every stage and write the report; returns the summary written to summary.json."""
    wall0 = time.perf_counter()
    out = Path(cfg.out)
    plan = resolve(cfg)  # config errors surface before anything is written
    if out.exists():
        # Both --fresh (deletes everything) and a plain run (replaces data/, run/, eval/) destroy files:
        # only in a directory the demo made.
        check_is_demo_dir(out, STATE_FILE, LOCK_FILE)
    # One demo at a time in a directory: a second one would record, train and evaluate into the same
    # stage directories. The lock is released by the kernel when this process dies, however it dies.
    fix = "wait for pid {pid} (another actlab demo) to finish, or stop it; or choose another --out"
    with DirLock(out, "demo directory", fix=fix):
        if cfg.fresh:
            _remove_run(out / "run")
            for child in out.iterdir():
                if child.name != LOCK_FILE:
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        return _run_stages(cfg, plan, out, wall0)


def _run_stages(cfg: DemoConfig, plan: dict[str, Any], out: Path, wall0: float) -> dict[str, Any]:
    state = _load_state(out)
    if not (out / STATE_FILE).is_file():
        atomic_write_json(out / STATE_FILE, state)  # marks the directory as the demo's from the start
    log = StageLog(stages=REALTIME_STAGES if cfg.realtime else STAGES)
    disk = estimate_disk(cfg, plan)
    print(
        f"actlab demo -> {out}  (device {plan['device']}, preset {plan['preset']}, "
        f"{plan['image_size']} px cameras)\n{_disk_line(disk)}",
        file=log.stream,
        flush=True,
    )
    _check_disk(out, disk)
    record = _record(cfg, plan, out, state, log)
    trained = _train(plan, out, state, log)
    evaluation = _evaluate(cfg, out, state, log)
    realtime = _realtime(cfg, out, state, evaluation, log) if cfg.realtime else None
    t0 = log.start("report", f"writing {out / 'report.md'} and report.html")
    rows = read_metrics(out / "run")
    render_strip(out / "scene.png", seed=0, image_size=plan["image_size"], frames=8, upscale=2)
    # The sweep with the chosen checkpoint's fresh-seed result beside it: the report's headline number.
    plot_success_vs_step(
        evaluation["sweep"]["checkpoints"], out / SUCCESS_PLOT, confirm=evaluation["media"]["checkpoints"][0]
    )
    summary = write_report(
        out,
        plan,
        record,
        trained,
        evaluation,
        log.seconds,
        log.reused,
        wall0,
        rows=rows,
        failures=FAILURES,
        success_plot=SUCCESS_PLOT,
        batch_size=load_run_config(out / "run").batch_size,
        realtime=realtime,
        next_steps=[
            (why, command_line(argv)) for why, argv in next_steps(cfg, plan, evaluation["best_path"])
        ],
    )
    log.done("report", t0, f"{out / 'report.html'}")
    return summary
