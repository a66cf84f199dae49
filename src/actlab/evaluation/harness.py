"""The evaluation harness: policies (objects, bundle paths or factories) x seeded episodes -> results.

Guarantees, for every policy evaluated:
- ``policy.reset()`` before every episode (see rollout.py);
- episode ``i`` starts from ``env.reset(seed=cfg.seed + i)``, so all checkpoints of a sweep meet exactly
  the same initial states;
- a bundle is loaded with its own normalization (the stats inside the bundle, via ``load_policy``), and
  its cameras are rendered at the size it was trained on (or resized to it).

Where the episodes run:
- a policy *object* runs in this process (it cannot be sent to another one);
- a bundle *path* or a picklable *factory* (``factory(env) -> policy``, e.g. a scripted expert bound to
  its env) runs in ``cfg.workers`` spawned processes, each building its own envs and loading the policy
  once (CPU by default, one torch thread per worker so that workers do not fight over cores);
- with ``cfg.batch_envs = B > 1`` a worker steps B envs in lockstep and calls the policy once per step
  with a batch of B observations (batched inference); factories, bound to one env, always use B = 1.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import pickle
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.evaluation.envs import EnvSpec, env_fps, make_eval_env
from actlab.evaluation.policy_io import ObsAdapter, bundle_inputs, policy_inputs
from actlab.evaluation.results import CheckpointEval, EpisodeResult, pick_video_episodes, summarize
from actlab.evaluation.rollout import EpisodeTrace, rollout, to_result
from actlab.evaluation.seeds import (
    DEFAULT_SEED,
    check_trained_units,
    check_training_seeds,
    other_task_warnings,
)
from actlab.evaluation.sources import (
    PolicySource,
    as_source,
    check_sources_execution,
    policy_device,
    rollout_threads,
    source_inputs,
    spec_for_inputs,
    threads_for_load,
)
from actlab.evaluation.video import VIDEO_HOLD_S, annotate_episode, env_frame, write_video
from actlab.policies.contract import RolloutPolicy
from actlab.policies.execution import ExecutionSpec
from actlab.utils import procs
from actlab.utils.procs import worker_pool
from actlab.utils.say import say
from actlab.utils.threads import torch_threads

VIDEO_PICKS = ("first", "failures")


@dataclass(frozen=True)
class EvalConfig:
    """How many episodes, where they run and what is written besides the numbers."""

    episodes: int = 50  # episodes per policy
    # episode i is reset with seed + i (identical for every checkpoint); the default starts above the sim
    # recorder's seeds (actlab.evaluation.seeds), so it never replays the demonstrations' own scenes
    seed: int = DEFAULT_SEED
    # evaluate even on seeds a bundle's training data was recorded from (refused otherwise); the
    # results then count, per policy, the episodes that start from a training scene
    allow_training_seeds: bool = False
    workers: int = 2  # worker processes for bundle/factory sources (1: run in this process)
    # envs stepped in lockstep per policy call in one process (batched inference; factories always 1)
    batch_envs: int = 4
    videos: int = 0  # write an mp4 of `videos` episodes (which ones: video_pick)
    # "first": the first `videos` episodes, filmed as they run; "failures": after every episode ran, the
    # first failure of each failure class, then the first successes (results.pick_video_episodes), run
    # again with the camera on (the same seeds and policy, so the same episodes)
    video_pick: str = "first"
    device: str = "cpu"  # device the policy runs on (in workers and in process)
    video_min_height: int = 256  # video frames are upscaled (nearest) to at least this many rows
    # torch threads per rollout process (None: cores // workers, at least 1); in-process runs use it too
    # (restored afterwards). Small policies run fastest on 1 thread, and on a busy machine much faster.
    threads_per_worker: int | None = None
    # how chunks are executed while the next is computed (actlab.policies.execution); None: sync
    execution: ExecutionSpec | None = None

    def __post_init__(self) -> None:
        for name, low in (("episodes", 1), ("seed", 0), ("workers", 1), ("batch_envs", 1), ("videos", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < low:
                raise ActlabError(f"{name} must be an integer >= {low}", field=name, found=value)
        if self.threads_per_worker is not None and self.threads_per_worker < 1:
            raise ActlabError(
                "threads must be >= 1", field="threads_per_worker", found=self.threads_per_worker
            )
        if self.video_min_height < 16:
            raise ActlabError(
                "video height too small",
                field="video_min_height",
                expected=">= 16",
                found=self.video_min_height,
            )
        if self.video_pick not in VIDEO_PICKS:
            raise ActlabError(
                "unknown video_pick",
                field="video_pick",
                expected=" or ".join(VIDEO_PICKS),
                found=self.video_pick,
            )
        if self.videos > self.episodes:
            raise ActlabError(
                "more videos than episodes requested",
                field="videos",
                expected=f"<= episodes ({self.episodes})",
                found=self.videos,
            )


# --------------------------------------------------------------------------------- one group of episodes
@dataclass(frozen=True)
class WorkItem:
    """A group of episodes of one policy, run by one process (plain data: sent to workers)."""

    source: PolicySource  # path or factory (never an object when sent to a worker)
    spec: EnvSpec  # env to build
    indices: tuple[int, ...]  # episode indices i (seed = base_seed + i)
    base_seed: int  # seed of episode 0
    video_dir: str | None  # where videos go
    filmed: tuple[int, ...]  # episode indices that get a video
    device: str  # policy device
    video_min_height: int  # frame upscaling for videos
    execution: ExecutionSpec | None = None  # chunk execution (None: sync)


@dataclass
class _Cache:
    """Envs and the last loaded policy of one process, reused across work items."""

    envs: dict[str, list[Any]] = field(default_factory=dict)
    policy_key: str | None = None
    policy: RolloutPolicy | None = None

    def close(self) -> None:
        """Close every env (their renderers) and drop the policy."""
        for envs in self.envs.values():
            for env in envs:
                close = getattr(env, "close", None)
                if close is not None:
                    close()
        self.envs.clear()
        self.policy, self.policy_key = None, None

    def get_envs(self, spec: EnvSpec, n: int) -> list[Any]:
        envs = self.envs.setdefault(spec.cache_key(), [])
        while len(envs) < n:
            envs.append(make_eval_env(spec))
        return envs[:n]

    def get_policy(self, src: PolicySource, device: str, env: Any = None) -> RolloutPolicy:
        """The loaded bundle, or the factory's policy bound to ``env``; built once and then reused, so
        that every episode after the first relies on ``reset()`` (as a real evaluation does)."""
        if src.factory is not None:
            # Factories arrive freshly unpickled with every work item: key them by their pickled form.
            key = f"{pickle.dumps(src.factory)!r}|{id(env)}"
        else:
            key = f"{src.path}|{device}"
        if self.policy_key != key:
            self.policy, self.policy_key = None, None  # free the previous checkpoint first
            if src.factory is not None:
                self.policy = src.factory(env)
            else:
                # lazy: bundles load torch; evaluation imports without it (the scripted expert needs none)
                from actlab.policies import load_policy

                self.policy = load_policy(src.path, device=device)
                # On CUDA, chunks are replayed from CUDA graphs (no per-call launch overhead); a no-op on CPU.
                if callable(getattr(self.policy, "use_cuda_graphs", None)):
                    self.policy.use_cuda_graphs("auto")
            self.policy_key = key
        return self.policy


def _video_path(item: WorkItem, index: int) -> Path | None:
    if item.video_dir is None or index not in item.filmed:
        return None
    return Path(item.video_dir) / f"episode_{index:03d}.mp4"


def _finish(item: WorkItem, index: int, trace: EpisodeTrace, fps: int) -> EpisodeResult:
    result = to_result(index, trace)
    path = _video_path(item, index)
    if path is not None and trace.frames:
        header = f"{item.source.name}  ep {index}  seed {trace.seed}"
        success = [bool(info.get("is_success")) for info in trace.infos]
        hold = round(VIDEO_HOLD_S * fps)
        frames = annotate_episode(trace.frames, result.outcome, header, trace.steps, success, hold)
        write_video(path, frames, fps)
        result = replace(result, video=str(path))
    return result


def run_item(item: WorkItem, cache: _Cache, policy_obj: RolloutPolicy | None = None) -> list[EpisodeResult]:
    """Run a work item in this process (the worker body, also used directly for in-process policies)."""
    seeds = [item.base_seed + i for i in item.indices]
    record = [_video_path(item, i) is not None for i in item.indices]

    def frames(env, o):
        return env_frame(env, o, item.video_min_height)

    results = []
    if item.source.factory is not None:
        # A factory's policy is bound to one env (e.g. a scripted expert reading the sim state): B = 1.
        env = cache.get_envs(item.spec, 1)[0]
        policy = cache.get_policy(item.source, item.device, env)
        adapter = ObsAdapter(policy_inputs(policy), "cpu")
        for i, seed, rec in zip(item.indices, seeds, record):
            (trace,) = rollout(
                policy, [env], [seed], adapter, [rec], item.spec.reset_options, frame_fn=frames
            )
            results.append(_finish(item, i, trace, env_fps(env)))
        return results
    policy = policy_obj if policy_obj is not None else cache.get_policy(item.source, item.device)
    inputs = policy_inputs(policy) or (bundle_inputs(item.source.path) if item.source.path else None)
    adapter = ObsAdapter(inputs, policy_device(policy, item.device))
    envs = cache.get_envs(item.spec, len(item.indices))
    traces = rollout(
        policy,
        envs,
        seeds,
        adapter,
        record,
        item.spec.reset_options,
        frame_fn=frames,
        execution=item.execution,
    )
    return [_finish(item, i, t, env_fps(envs[0])) for i, t in zip(item.indices, traces)]


# ------------------------------------------------------------------------------------------- the pool
_WORKER_CACHE: _Cache | None = None


def _init_worker(threads: int) -> None:
    """Worker start-up: headless GL, a bounded number of torch threads, an empty cache."""
    global _WORKER_CACHE
    os.environ.setdefault("MUJOCO_GL", "egl")
    import torch

    torch.set_num_threads(threads)
    _WORKER_CACHE = _Cache()


def _worker_run(item: WorkItem) -> list[EpisodeResult]:
    assert _WORKER_CACHE is not None, "worker not initialised"
    return run_item(item, _WORKER_CACHE)


def _items(
    src: PolicySource,
    spec: EnvSpec,
    cfg: EvalConfig,
    video_dir: Path | None,
    indices: Sequence[int] | None = None,
    filmed: Sequence[int] | None = None,
) -> list[WorkItem]:
    """The work items of ``indices`` (every episode by default), filming ``filmed`` (by default the first
    ``cfg.videos`` when they are picked as they run)."""
    batch = 1 if src.factory is not None else cfg.batch_envs
    indices = list(range(cfg.episodes)) if indices is None else list(indices)
    if filmed is None:
        filmed = range(cfg.videos) if cfg.video_pick == "first" else ()
    return [
        WorkItem(
            source=src,
            spec=spec,
            indices=tuple(indices[start : start + batch]),
            base_seed=cfg.seed,
            video_dir=str(video_dir) if video_dir is not None else None,
            filmed=tuple(filmed) if video_dir is not None else (),
            device=cfg.device,
            video_min_height=cfg.video_min_height,
            execution=cfg.execution,
        )
        for start in range(0, len(indices), batch)
    ]


def evaluate_many(
    policies: Sequence[RolloutPolicy | PolicySource | str | Path | Callable[[Any], RolloutPolicy]],
    spec: EnvSpec,
    cfg: EvalConfig,
    out_dir: str | Path | None = None,
    on_episode: Callable[[PolicySource, EpisodeResult], None] | None = None,
) -> list[CheckpointEval]:
    """Evaluate several policies on the same seeded episodes (one worker pool shared by all).

    ``policies``: PolicySource objects, bundle paths, policy objects or factories. Videos go to
    ``out_dir/videos/<name>/episode_NNN.mp4`` (only when ``out_dir`` is given and ``cfg.videos > 0``).
    """
    sources = [as_source(p) for p in policies]
    names = [s.name for s in sources]
    # the directory each one is loaded from (a bundle's path, a LeRobot policy's directory), resolved: a
    # bundle and a link to it were evaluated twice under two names, exit 0 (25th fault run)
    dirs = [s.path or getattr(s.obj, "policy_dir", None) for s in sources]
    paths = [str(Path(d).resolve()) if d is not None else None for d in dirs]
    twice = sorted({p for p in paths if p is not None and paths.count(p) > 1})
    if len(set(names)) != len(names) or twice:
        if twice:  # a run and one of its checkpoints (or a path given twice): "rename one" could not help
            raise ActlabError(
                # (`eval B B` was told of a run directory it was not given: 25th run, ev_two_same_bundle)
                "a checkpoint is given twice (the same path twice, a link to it, or a run directory and one "
                "of its checkpoints: a run directory holds every one of them)",
                field="PATH"
                if all(s.path for s, p in zip(sources, paths) if p in twice)
                else "--lerobot-policy",
                expected="each checkpoint once",
                found=", ".join(twice),
                fix="pass each checkpoint once: drop the repeated PATH, or pass the run directory alone",
            )
        raise ActlabError("two policies have the same name", found=", ".join(names), fix="rename one")
    # a delay a policy cannot take fails before any episode; a horizon the executor chose is said
    for note in check_sources_execution(sources, cfg.execution):
        say(f"note: {note}")
    if not spec.is_peer:
        check_trained_units(sources, spec.env_kwargs.get("units") or "degrees")
    for line in other_task_warnings(sources, spec.task):
        say(f"warning: {line}")
    trained_on = check_training_seeds(sources, spec.task, cfg.seed, cfg.episodes, cfg.allow_training_seeds)
    for name, overlap in trained_on.items():
        say(
            f"warning: {name}: {len(overlap['seeds'])} of {cfg.episodes} episodes start from scenes it was "
            f"trained on ({overlap['dataset']}); --allow-training-seeds was given"
        )
    first_inputs = next((i for i in map(source_inputs, sources) if i is not None), None)
    spec = spec_for_inputs(spec, first_inputs)
    cfg = threads_for_load(cfg)  # after every refusal: a note about the load never precedes an error
    video_root = Path(out_dir) / "videos" if out_dir is not None and cfg.videos > 0 else None
    results: dict[str, list[EpisodeResult]] = {s.name: [] for s in sources}

    def collect(src: PolicySource, rs: list[EpisodeResult]) -> None:
        for r in rs:
            results[src.name].append(r)
            if on_episode is not None:
                on_episode(src, r)

    pooled = [s for s in sources if not s.in_process_only and cfg.workers > 1]
    local = [s for s in sources if s not in pooled]
    cache = _Cache()
    try:
        with torch_threads(rollout_threads(cfg.threads_per_worker, cfg.workers, pooled=False)):
            for src in local:
                vdir = video_root / src.name if video_root is not None else None
                for item in _items(src, spec, cfg, vdir):
                    collect(src, run_item(replace(item, source=src), cache, policy_obj=src.obj))
    finally:
        cache.close()  # renderers hold OpenGL contexts: free them now, not at garbage collection
    if pooled:
        _run_pool(pooled, spec, cfg, video_root, collect)
    if video_root is not None and cfg.video_pick == "failures":
        for src in sources:
            results[src.name] = _film(src, spec, cfg, video_root / src.name, results[src.name])
    out = []
    for src in sources:
        eps = sorted(results[src.name], key=lambda r: r.index)
        seen = len(trained_on.get(src.name, {}).get("seeds", ()))
        out.append(CheckpointEval(src.name, src.path, src.step, summarize(eps), eps, training_scenes=seen))
    return out


def _film(
    src: PolicySource, spec: EnvSpec, cfg: EvalConfig, video_dir: Path, results: list[EpisodeResult]
) -> list[EpisodeResult]:
    """Run the episodes ``pick_video_episodes`` picks from ``results`` again, in this process with the
    camera on, and attach their videos to ``results``.

    Each is run in the same batch of envs as the first time (its whole group, the others without
    camera), with the same torch thread count as a worker, so the batched policy computes the same
    numbers and the episode repeats itself. The video is stamped with what its own run did; an outcome
    that differs from the first run's is warned about (a rollout that is not reproducible)."""
    chosen = pick_video_episodes(results, cfg.videos)
    if not chosen:
        return results
    batch = 1 if src.factory is not None else cfg.batch_envs
    groups = sorted({i // batch for i in chosen})  # the first pass ran range(g * batch, ...) together
    indices = [i for g in groups for i in range(g * batch, min(cfg.episodes, (g + 1) * batch))]
    pooled = not src.in_process_only and cfg.workers > 1
    threads = rollout_threads(cfg.threads_per_worker, cfg.workers, pooled)
    filmed: dict[int, EpisodeResult] = {}
    cache = _Cache()
    try:
        with torch_threads(threads):
            for item in _items(src, spec, cfg, video_dir, indices=indices, filmed=chosen):
                for r in run_item(item, cache, policy_obj=src.obj):
                    filmed[r.index] = r
    finally:
        cache.close()
    out = []
    for r in results:
        again = filmed.get(r.index)
        if again is not None and again.video is not None:
            if again.outcome != r.outcome:
                warnings.warn(
                    f"{src.name} episode {r.index} (seed {r.seed}) ended {again.outcome} when run again for "
                    f"its video, {r.outcome} the first time: the rollout is not reproducible",
                    stacklevel=2,
                )
            r = replace(r, video=again.video)
        out.append(r)
    return out


def _run_pool(sources, spec, cfg, video_root, collect) -> None:
    threads = rollout_threads(cfg.threads_per_worker, cfg.workers)
    # Spawned workers that die with this process (SIGKILL included) and are killed when the block is left
    # by an error or a SIGTERM (actlab.utils.procs).
    with worker_pool(cfg.workers, _init_worker, (threads,)) as pool:
        futures = {}
        try:
            for src in sources:  # submitted checkpoint by checkpoint: each worker loads each checkpoint once
                vdir = video_root / src.name if video_root is not None else None
                for item in _items(src, spec, cfg, vdir):
                    futures[pool.submit(_worker_run, item)] = src
            for fut in procs.as_completed(pool, futures):  # a dead worker is noticed, never waited on
                collect(futures[fut], fut.result())
        except cf.process.BrokenProcessPool as e:  # a worker's own exceptions are re-raised as they are
            for fut in futures:
                fut.cancel()
            raise ActlabError(
                "a rollout worker process died (killed, out of memory, or crashed while starting)",
                field="--workers",
                found=f"{cfg.workers} spawned workers; {e}",
                fix="free memory or use fewer --workers (--workers 1 runs in this process and shows a crash "
                "there); a script that evaluates with workers needs `if __name__ == '__main__':` (spawned "
                "workers re-import it)",
            ) from e
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise


def evaluate(
    policy: RolloutPolicy | PolicySource | str | Path | Callable[[Any], RolloutPolicy],
    spec: EnvSpec | str = "so101_pick_place",
    cfg: EvalConfig | None = None,
    out_dir: str | Path | None = None,
    name: str | None = None,
) -> CheckpointEval:
    """Evaluate one policy (object, bundle path or factory) on ``cfg.episodes`` seeded episodes."""
    spec = EnvSpec(task=spec) if isinstance(spec, str) else spec
    return evaluate_many([as_source(policy, name=name)], spec, cfg or EvalConfig(), out_dir)[0]
