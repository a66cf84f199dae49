"""Record scripted-expert demonstrations into a LeRobot v3.0 dataset.

Worker processes each own an env and an expert and simulate whole episodes (rendering dominates the cost,
so it is what runs in parallel); the main process writes the episodes through
:class:`actlab.datasets.DatasetWriter` strictly in seed order, so the dataset is the same whatever the
number of workers. Episode ``i`` of the attempt sequence uses ``env.reset(seed=seed + i)``; without
``keep_failures`` failed attempts are skipped until ``episodes`` successful ones are written.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from actlab.datasets import DatasetWriter, make_features
from actlab.datasets.format import SIM_INFO_KEY
from actlab.datasets.video import CODEC_CHOICES, VideoOptions, write_video_with_retry
from actlab.errors import ActlabError
from actlab.sim.env import FPS
from actlab.sim.expert import ExpertConfig, ExpertPolicy
from actlab.sim.gl import check_rendering
from actlab.sim.scene import JOINT_NAMES
from actlab.sim.tasks import TASKS, make_env, task_config
from actlab.utils import procs
from actlab.utils.disk import require_free
from actlab.utils.procs import worker_pool
from actlab.utils.progress import progress_bar
from actlab.utils.units import human_bytes


@dataclasses.dataclass(frozen=True)
class RecordConfig:
    """What ``actlab sim record`` records."""

    # Sim task name.
    task: str = "so101_pick_place"
    # Episodes to write: successful ones, or every attempt when keep_failures is set.
    episodes: int = 50
    # Attempt i uses env.reset(seed=seed + i).
    seed: int = 0
    # Side of the square camera images (pixels, even: the videos are yuv420p).
    image_size: int = 128
    # Cameras to record, any of "top" and "wrist".
    cameras: tuple[str, ...] = ("top", "wrist")
    # Also write episodes in which the expert failed.
    keep_failures: bool = False
    # Simulation worker processes; 0 simulates in the main process.
    workers: int = 2
    # Scripted-expert noise scale (0 = deterministic given the cube pose; see ExpertConfig.noise).
    expert_noise: float = 0.0
    # Give up after this many attempts per requested episode (only matters if the expert fails often).
    max_attempts_per_episode: float = 2.0
    # Extra PickPlaceConfig fields (randomization options and the like).
    env_overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Units of observation.state and action: "degrees" (the sim's own) or "so101_follower" (the gripper
    # 0-100 like LeRobot's real so101_follower, whose recordings a policy may then be trained with).
    units: str = "degrees"
    # Video codec: "auto" (AV1 like LeRobot, h264 on a busy CPU or an old PyAV: see
    # actlab.datasets.video.auto_video_options), "av1" or "h264" (kept for a second attempt after a
    # stall too).
    codec: str = "auto"

    def __post_init__(self) -> None:
        if self.codec not in CODEC_CHOICES:
            raise ActlabError(
                "unknown video codec", field="--codec", expected=" or ".join(CODEC_CHOICES), found=self.codec
            )
        if self.episodes < 1:
            raise ActlabError("episodes must be at least 1", field="--episodes", found=self.episodes)
        if self.image_size < 16 or self.image_size % 2:
            raise ActlabError(
                "image size must be an even number of pixels, at least 16 (yuv420p video)",
                field="--image-size",
                expected="e.g. 64, 96, 128",
                found=self.image_size,
            )
        if not self.cameras:
            raise ActlabError("record at least one camera", field="cameras", expected="top and/or wrist")
        if self.workers < 0:
            raise ActlabError("workers must be >= 0", field="--workers", found=self.workers)
        # Checked here, in the parent: a worker that raises it dies before its first episode, which the
        # pool could only report as "a worker died" (with advice about memory).
        ExpertConfig(noise=self.expert_noise)
        if self.max_attempts_per_episode < 1:
            raise ActlabError(
                "max_attempts_per_episode must be >= 1",
                field="max_attempts_per_episode",
                found=self.max_attempts_per_episode,
            )

    def env_kwargs(self) -> dict[str, Any]:
        """Arguments for ``make_env``: recording never stops an episode early on success."""
        return {
            **self.env_overrides,
            "units": self.units,
            "image_size": self.image_size,
            "cameras": tuple(self.cameras),
            "terminate_on_success": False,
        }


@dataclasses.dataclass(frozen=True)
class RecordSummary:
    """Outcome of a recording."""

    path: str  # dataset directory
    episodes: int  # episodes written
    frames: int  # frames written
    attempts: int  # expert episodes simulated
    successes: int  # of which the expert succeeded
    failed_seeds: tuple[int, ...]  # seeds of failed attempts
    seconds: float  # wall time of the whole recording

    @property
    def success_rate(self) -> float:
        """Expert success rate over the attempts."""
        return self.successes / max(self.attempts, 1)

    def line(self, timed: bool = True) -> str:
        """The one-line summary printed by ``actlab sim record``; ``timed=False`` leaves out the time (for a
        caller that prints its own, as the demo's stage line does)."""
        took = f" in {self.seconds:.1f} s" if timed else ""
        return (
            f"recorded {self.episodes} episodes ({self.frames} frames) to {self.path}{took}; "
            f"expert success {self.successes}/{self.attempts} ({100 * self.success_rate:.1f}%)"
        )


# --------------------------------------------------------------------------------- one expert episode


def run_expert_episode(env, policy, seed: int, keep_frames: bool = True) -> dict[str, Any]:
    """Simulate one expert episode from ``env.reset(seed=seed)``.

    Returns ``{"seed", "success", "length", "info", "frames"}`` (``info``: the env's last info);
    ``frames`` maps feature keys to arrays with one
    row per step: ``observation.state`` (T, 6) and ``action`` (T, 6) float32 (degrees), and each camera
    (T, H, W, 3) uint8. Row t is the observation before action t.
    """
    obs, info = env.reset(seed=seed)
    policy.reset(seed=seed)  # the expert's optional noise is drawn per episode seed (worker-independent)
    rows: dict[str, list[np.ndarray]] = collections.defaultdict(list)
    steps = 0
    while True:
        action = np.asarray(policy.select_action(obs), dtype=np.float32)
        if keep_frames:
            for key, value in obs.items():
                rows[key].append(value)
            rows["action"].append(action)
        obs, _, terminated, truncated, info = env.step(action)
        steps += 1
        if policy.done or terminated or truncated:
            break
    frames = {key: np.stack(values) for key, values in rows.items()}
    return {
        "seed": seed,
        "success": bool(info["is_success"]),
        "length": steps,
        "info": info,
        "frames": frames,
    }


_WORKER: dict[str, Any] = {}


def _worker_init(config: RecordConfig) -> None:
    os.environ.setdefault("MUJOCO_GL", "egl")

    env = make_env(config.task, **config.env_kwargs())
    _WORKER["env"] = env
    _WORKER["policy"] = ExpertPolicy(env, ExpertConfig(noise=config.expert_noise), seed=config.seed)


def _worker_episode(seed: int) -> dict[str, Any]:
    return run_expert_episode(_WORKER["env"], _WORKER["policy"], seed)


def _episodes_in_order(config: RecordConfig, max_attempts: int) -> Iterator[dict[str, Any]]:
    """Expert episodes for seeds seed, seed+1, ... in order, simulated by the worker pool."""
    seeds = iter(range(config.seed, config.seed + max_attempts))
    if config.workers == 0:
        _worker_init(config)
        try:
            for s in seeds:
                yield _worker_episode(s)
        finally:
            _WORKER.pop("env").close()
        return
    # ProcessPoolExecutor, not multiprocessing.Pool: a Pool whose worker dies (OOM killer, a crash in the GL
    # driver, a failing initializer) replaces the process and waits forever for the lost episode; the
    # executor fails instead. worker_pool: spawned workers that die with this process; leaving early (an
    # error, or the consumer closing this generator) kills the running episodes.
    with worker_pool(config.workers, _worker_init, (config,)) as pool:
        try:
            # A bounded window of episodes in flight keeps memory flat (an episode's frames are ~10-20 MB).
            window = 2 * config.workers
            pending: collections.deque = collections.deque()
            for s in seeds:
                pending.append(pool.submit(_worker_episode, s))
                if len(pending) >= window:
                    yield procs.result(pool, pending.popleft())  # a dead worker is noticed, never waited on
            while pending:
                yield procs.result(pool, pending.popleft())
        except cf.process.BrokenProcessPool as e:  # from submit() or result(); a worker's errors pass as is
            raise ActlabError(
                "a recording worker process died (killed, out of memory, or crashed while starting)",
                field="--workers",
                found=f"{config.workers} spawned workers; {e}",
                fix="free memory or use fewer --workers (--workers 0 records in this process and shows a "
                "crash there); a script that records with workers needs `if __name__ == '__main__':` "
                "(spawned workers re-import it)",
            ) from e


def dataset_features(config: RecordConfig) -> dict[str, dict[str, Any]]:
    """LeRobot features of a recorded dataset: state and action (degrees) and one video per camera."""
    size = config.image_size
    return make_features(
        state_dim=len(JOINT_NAMES),
        action_dim=len(JOINT_NAMES),
        cameras={cam: (size, size) for cam in config.cameras},
        fps=30,
        state_names=[f"{n}.pos" for n in JOINT_NAMES],
        action_names=[f"{n}.pos" for n in JOINT_NAMES],
    )


# What a recording writes, measured on the SO-101 scenes with the writer's defaults (AV1 crf 30, gop 2,
# preset 12): a camera frame takes about 8 bytes per pixel of image side (140 B at 16 px, 1.0 KB at
# 128 px), a row of state and action about 80 B, the metadata 64 KiB plus ~3 KiB per episode; the expert
# takes ~163 steps per episode (`actlab sim expert`).
CAMERA_FRAME_BYTES_PER_PX = 8
DATA_ROW_BYTES = 80
META_BYTES = 64 << 10
META_EPISODE_BYTES = 3 << 10
EXPERT_EPISODE_STEPS = 163
# What a recorded dataset says wrote it: --overwrite replaces only an earlier recording.
RECORD_KIND = "actlab sim record"
# Seconds without an encoded frame before the recorder's watchdog calls an encoder stalled. A sim camera
# frame (64-480 px) takes milliseconds to encode, and well under a second at a load average of 20, so 30 s
# (not the writer's general 120 s) still never fires on a slow machine and a deadlocked SVT-AV1 costs
# half a minute before the recording starts over.
RECORD_STALL_S = 30.0


def estimate_bytes(config: RecordConfig) -> int:
    """Roughly the size of the dataset ``config`` records (within ~20% for the built-in task)."""
    steps = min(EXPERT_EPISODE_STEPS, task_config(config.task, **config.env_kwargs()).max_steps)
    frame = DATA_ROW_BYTES + len(config.cameras) * CAMERA_FRAME_BYTES_PER_PX * config.image_size
    return META_BYTES + config.episodes * (META_EPISODE_BYTES + steps * frame)


def _check_disk(out_dir: Path, config: RecordConfig, need: int) -> None:
    """Refuse a recording that clearly cannot fit (less than half the estimate free) before simulating
    anything: the estimate is rough, so a recording it merely doubts starts, and a disk that fills up
    anyway stops it with the writer's error (nothing left behind). An existing dataset that --overwrite
    replaces stays until the new one is complete, so the new one needs all of its space free."""
    cams = len(config.cameras)
    require_free(
        need // 2,
        out_dir,
        problem="not enough disk space for this recording; refusing to start rather than fail later",
        expected=f"about {human_bytes(need)} for {config.episodes} episodes x ~{EXPERT_EPISODE_STEPS} "
        f"frames x {cams} camera{'s' if cams > 1 else ''} at {config.image_size} px "
        "(refused below half of that)",
        fix="free space on that disk, record fewer --episodes or a smaller --image-size, or choose an --out "
        "on another disk",
    )


def record_dataset(
    out_dir: str | Path,
    config: RecordConfig | None = None,
    *,
    overwrite: bool = False,
    progress: bool = True,
    on_episode: Callable[[dict[str, Any]], None] | None = None,
) -> RecordSummary:
    """Record expert demonstrations into a new LeRobot v3.0 dataset at ``out_dir`` (written atomically).

    Raises :class:`ActlabError` if the expert fails so often that ``episodes`` successes cannot be
    collected within ``episodes * max_attempts_per_episode`` attempts, when the disk clearly lacks the
    space (before anything runs), or when the disk fills up or a write fails (nothing is written then, and
    a dataset that ``overwrite`` would replace is kept).

    A video encoder that stalls (the watchdog's :class:`EncoderStalled`: rare, seen under heavy CPU
    contention) leaves nothing written; the recording then starts once more from the beginning, which
    gives the same dataset (episodes are a pure function of their seeds), and a second stall is raised.
    """
    return write_video_with_retry(
        lambda video: _record_once(
            out_dir, config, video, overwrite=overwrite, progress=progress, on_episode=on_episode
        ),
        (config or RecordConfig()).codec,
        stall_s=RECORD_STALL_S,
        what="recording",
    )


def _record_once(
    out_dir: str | Path,
    config: RecordConfig | None,
    video: VideoOptions,
    *,
    overwrite: bool,
    progress: bool,
    on_episode: Callable[[dict[str, Any]], None] | None,
) -> RecordSummary:
    config = config or RecordConfig()
    task_config(config.task, **config.env_kwargs())  # validate the env options before spawning workers
    if config.workers > 0:
        check_rendering()  # a MUJOCO_GL that cannot render, said here, not as "a worker process died"
    out_dir = Path(out_dir)
    max_attempts = (
        config.episodes if config.keep_failures else int(config.episodes * config.max_attempts_per_episode)
    )
    need = estimate_bytes(config)
    if overwrite or not out_dir.exists():  # (else the writer refuses the existing output first)
        _check_disk(out_dir, config, need)
    start = time.perf_counter()
    attempts = successes = frames = written = 0
    failed: list[int] = []
    seeds: list[int] = []  # the reset seed of every written episode, in episode order
    with DatasetWriter(
        out_dir,
        fps=FPS,
        features=dataset_features(config),
        robot_type="so101",
        overwrite=overwrite,
        estimated_bytes=need,
        video=video,
        kind=RECORD_KIND,
    ) as writer:
        bar = progress_bar(config.episodes, "recording", "ep", disable=not progress)
        episodes = _episodes_in_order(config, max_attempts)
        try:
            for episode in episodes:
                attempts += 1
                successes += episode["success"]
                if not episode["success"]:
                    failed.append(episode["seed"])
                if episode["success"] or config.keep_failures:
                    writer.add_episode(episode["frames"], task=TASKS[config.task].env.task_text)
                    seeds.append(int(episode["seed"]))
                    frames += episode["length"]
                    written += 1
                    bar.update(1)
                bar.set_postfix(expert=f"{successes}/{attempts}")
                if on_episode is not None:
                    on_episode(episode)
                if written >= config.episodes:
                    break
        finally:
            episodes.close()  # stops the worker pool now, also on an error (episodes in flight are dropped)
        if written < config.episodes:
            bar.close()
            raise ActlabError(
                "the scripted expert failed too often to record the requested episodes",
                field="--episodes",
                expected=f"{config.episodes} successful episodes within {max_attempts} attempts",
                found=f"{written} successes (failed seeds: {failed[:10]}...)",
                fix="record with --keep-failures, or lower the randomization ranges",
            )
        # Which initial scenes the demonstrations start from: `actlab eval` refuses to score a policy on
        # the seeds its training data was recorded from (docs/evaluation.md, "Seeds").
        block = {"task": config.task, "episode_seeds": seeds}
        if config.units != "degrees":  # (a recording in the sim's own units says nothing: as before)
            block["units"] = config.units
        writer.add_info(SIM_INFO_KEY, block)
    bar.close()
    return RecordSummary(
        path=str(out_dir),
        episodes=written,
        frames=frames,
        attempts=attempts,
        successes=successes,
        failed_seeds=tuple(failed),
        seconds=time.perf_counter() - start,
    )
