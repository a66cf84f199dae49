"""Build everything a training step needs for a config on a device, and run steps with it.

:func:`build_run` is the one place that wires the dataset layer (open_dataset, FrameStore, compute_stats,
EpisodeSampler, DeviceData) to the policy layer (make_policy, param_groups) and the optimizer and
schedule. ``actlab train``, ``actlab bench train`` and the batch-size finder all use it::

    run = build_run(cfg, device)            # cfg: a TrainConfig with data.path set
    batch = run.next_batch()                # gathered + augmented on the device
    metrics = run.step(batch)               # dict of 0-dim device tensors (no host sync)
    run.close()
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.datasets import FrameStore, cache_root, compute_stats, open_dataset
from actlab.datasets.doctor import warnings_line
from actlab.datasets.framestore import stored_features
from actlab.errors import ActlabError
from actlab.policies import make_policy
from actlab.policies.contract import FEATURES_SUFFIX, FUTURE_STATE, PAST_CHUNKS, TrainablePolicy
from actlab.training import ddp, preflight
from actlab.training.augment import prepare_images
from actlab.training.capture import GraphPlan, announce_fallback, plan_cuda_graphs
from actlab.training.checkpoint import jsonable
from actlab.training.config import TrainConfig
from actlab.training.data import (
    BatchStream,
    Split,
    make_sampler,
    overfit_ranges,
    split_episodes,
    validation_batches,
)
from actlab.training.ddp import DistInfo
from actlab.training.init_from import (
    bundle_policy_config,
    bundle_stats,
    check_same_features,
    held_out_episodes,
    load_initial_weights,
)
from actlab.training.schedule import build_scheduler
from actlab.training.step import CaptureError, GraphedStep, WorkingWeights, autocast, train_step
from actlab.utils.device import resolve_device
from actlab.utils.disk import same_filesystem
from actlab.utils.threads import say_if_oversubscribed

if TYPE_CHECKING:
    import torch

    from actlab.datasets import DeviceData, FrameStore
    from actlab.datasets.reader import LeRobotV3Dataset
    from actlab.training.ema import WeightEMA

# Offset between the validation sampler's seed and the run seed (any constant; fixed for reproducibility).
VAL_SEED_OFFSET = 7919


@dataclasses.dataclass
class TrainRun:
    """A built training setup: data sources, policy, optimizer and schedule on one device."""

    # the config it was built from
    cfg: TrainConfig
    # training device of this process
    device: torch.device
    # this process's place in a DDP job
    dist: DistInfo
    # the opened dataset (actlab.datasets)
    dataset: LeRobotV3Dataset
    # the decoded FrameStore (None when the policy uses no camera)
    store: FrameStore | None
    # normalization statistics given to the policy
    stats: dict[str, Any]
    # dataset features given to the policy (cameras the policy does not use removed)
    features: dict[str, Any]
    # the bare policy module (what checkpoints save)
    policy: TrainablePolicy
    # what the step calls: the policy, possibly wrapped by DDP and/or torch.compile
    model: torch.nn.Module
    # AdamW over the policy's param groups
    optimizer: torch.optim.Optimizer
    # LambdaLR (warmup + cosine/constant)
    scheduler: torch.optim.lr_scheduler.LambdaLR
    # trainable parameters (for gradient clipping)
    params: list[torch.nn.Parameter]
    # episode split and frame ranges
    split: Split
    # gathers batches from the FrameStore on the device
    device_data: DeviceData
    # training batches of this rank, prepared (float images, augmentation) for the step; owns the
    # sampler position and the augmentation generator (what checkpoints save of the data)
    batches: BatchStream
    # camera keys present in batches
    image_keys: list[str]
    # autocast dtype, or None for full precision
    amp_dtype: torch.dtype | None
    # CUDA-graph step (cuda_graphs true, or auto on CUDA), else None (eager steps)
    graphed: GraphedStep | None = None
    # why the step is not captured although cuda_graphs asked for it (None: captured, or not wanted)
    graphs_off_reason: str | None = None
    # EMA of the weights (ema_decay > 0), else None
    ema: WeightEMA | None = None
    # bf16 working weight copies (bf16 autocast with bf16_weights, one process, no compile), else None
    weights: WorkingWeights | None = None

    @property
    def aug_generator(self) -> torch.Generator:
        """RNG of the on-device augmentation (the batch stream's; saved with checkpoints)."""
        return self.batches.generator

    # ------------------------------------------------------------------------------------ the step
    def next_batch(self) -> dict[str, Any]:
        """The next training batch on the device, images as float ``[0, 1]`` (augmented if enabled)."""
        return self.batches.next()

    def step(self, batch: dict[str, Any], timer=None) -> dict[str, Any]:
        """One optimizer step; returns 0-dim device tensors ``loss``, policy terms, ``grad_norm``."""
        if self.graphed is not None:
            try:
                out = self.graphed(batch, self.scheduler, timer)
            except CaptureError as e:
                self._capture_failed(str(e))  # weights and optimizer untouched: this step runs eagerly
            else:
                return self._after_step(out)
        out = train_step(
            self.model,
            batch,
            self.optimizer,
            self.scheduler,
            self.params,
            grad_clip=self.cfg.optim.grad_clip,
            device=self.device,
            amp_dtype=self.amp_dtype,
            timer=timer,
            weights=self.weights,
        )
        return self._after_step(out)

    def _after_step(self, out: dict[str, Any]) -> dict[str, Any]:
        if self.ema is not None:
            self.ema.update()  # queued after the step's kernels: no sync
        return out

    def averaged_weights(self):
        """Context: the EMA weights in ``policy`` (checkpoints, validation); a no-op without EMA."""
        return self.ema.swapped_in() if self.ema is not None else contextlib.nullcontext()

    def optimizer_state(self) -> dict[str, Any]:
        """What a checkpoint saves as the optimizer state: AdamW's, plus with EMA the raw weights and the
        EMA update count (the checkpoint's bundle holds the averaged weights)."""
        state = self.optimizer.state_dict()
        return {**state, **self.ema.state_for_checkpoint()} if self.ema is not None else state

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`optimizer_state`; call after loading the checkpoint's weights into ``policy``."""
        # lazy: ema imports torch; training modules import without it
        from actlab.training.ema import RAW_WEIGHTS_KEY, UPDATES_KEY

        extra = {k: state[k] for k in (RAW_WEIGHTS_KEY, UPDATES_KEY) if k in state}
        self.optimizer.load_state_dict({k: v for k, v in state.items() if k not in extra})
        if self.ema is not None:
            if not extra:
                raise ActlabError(
                    "the checkpoint has no raw weights to continue an EMA run from",
                    field="ema_decay",
                    fix="resume with the ema_decay the run was started with",
                )
            self.ema.restore_from_checkpoint(extra)

    def _capture_failed(self, why: str) -> None:
        """The first step could not be captured: ``cuda_graphs=auto`` warns once and trains eagerly from
        now on; an explicit ``cuda_graphs=true`` is an error."""
        self.graphed = None
        self.graphs_off_reason = f"CUDA graphs off: capturing the step failed ({why})"
        if self.cfg.cuda_graphs is True:
            raise ActlabError(
                "the training step cannot be captured in a CUDA graph",
                field="cuda_graphs",
                found=why,
                fix="set cuda_graphs=auto (falls back to eager steps with a warning) or cuda_graphs=false",
            )
        announce_fallback(self.graphs_off_reason)

    def lrs(self) -> dict[str, float]:
        """Current learning rates: ``lr`` (head) and ``lr_backbone`` when the backbone trains (no sync)."""
        out: dict[str, float] = {}
        for group in self.optimizer.param_groups:
            key = "lr_backbone" if "backbone" in str(group.get("name", "")) else "lr"
            lr = group["lr"]
            out.setdefault(key, float(lr.item()) if hasattr(lr, "item") else float(lr))
        return out

    # ------------------------------------------------------------------------------------ validation
    def evaluate(self) -> float | None:
        """Mean validation loss over ``eval.batches`` fixed batches (all ranks), or None without a split.

        The same batches every time (:func:`validation_batches`: a stream of its own with a fixed seed,
        which never moves the training batch stream); the global torch RNG is forked so validation never
        shifts the training random streams (a resumed run stays bitwise identical).
        """
        import torch

        if not self.split.val_ranges:
            return None
        batches = validation_batches(
            self.device_data,
            self.split.val_ranges,
            self.cfg.seed + VAL_SEED_OFFSET,
            self.cfg.batch_size,
            self.cfg.eval.batches,
            self.dist.rank,
            self.dist.world_size,
        )
        fork_devices = [self.device] if self.device.type == "cuda" else []
        total = torch.zeros((), device=self.device)
        was_training = self.policy.training
        self.policy.eval()
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=fork_devices), self.averaged_weights():
                for raw in batches:
                    batch = prepare_images(raw, self.image_keys, None, None, self.cfg.channels_last)
                    with autocast(self.device, self.amp_dtype):
                        loss, _ = self.policy(batch)
                    total += loss.float()
        finally:
            batches.close()
            self.policy.train(was_training)
        mean = ddp.all_reduce_mean({"val": total / self.cfg.eval.batches}, self.dist)["val"]
        return float(mean.item())  # one sync per evaluation

    # ------------------------------------------------------------------------------------ RNG state
    def rng_state(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(tensors for torch.save, JSON-able dict) holding every random stream of this rank: the batch
        stream's position (``sampler``, ``augment``) and the process-wide streams
        (:func:`process_rng_state`)."""
        sampler_state, aug_state = self.batches.state()  # as of the last batch handed to the step
        streams, meta = process_rng_state(self.device)
        tensors = {"torch_cpu": streams.pop("torch_cpu"), "augment": aug_state, **streams}
        return tensors, {"sampler": jsonable(sampler_state), **meta}

    def load_rng_state(self, tensors: dict[str, Any], meta: dict[str, Any]) -> None:
        """Restore what :meth:`rng_state` saved. Resumed on another device type (allowed: ``device`` may
        change), the CUDA streams and the augmentation generator cannot carry over (a CUDA generator's
        state is not a CPU one's): they are reseeded deterministically and a warning says the
        continuation is not bitwise the uninterrupted run's."""
        cuda_carried = load_process_rng_state(tensors, meta, self.device)
        aug_carried = self.batches.load_state(meta["sampler"], tensors["augment"])
        if not (cuda_carried and aug_carried):
            warnings.warn(
                f"resumed on {self.device.type} from a checkpoint written on another device type: the "
                "CUDA and augmentation random streams are reseeded, so the run continues but not bit for "
                "bit as it would have",
                stacklevel=2,
            )

    def close(self) -> None:
        self.batches.close()


# ---------------------------------------------------------------------------------------------- build
def build_run(
    cfg: TrainConfig,
    device: Any = None,
    dist: DistInfo | None = None,
    *,
    out_dir: str | Path | None = None,
    existing_checkpoint_bytes: int = 0,
    resume_from: str | Path | None = None,
) -> TrainRun:
    """Open the data, build policy + optimizer + schedule for ``cfg`` on ``device`` (None: ``cfg.device``).

    ``resume_from``: the checkpoint a resumed run continues from; with ``cfg.init_from`` it replaces the
    bundle as the source of the starting weights (and of correction_only's statistics).

    With ``out_dir`` the disk preflight runs before the FrameStore is written and before step 1.
    Seeds: the policy init uses ``cfg.seed`` on every rank (identical weights); dropout, augmentation
    and sampling use per-rank streams derived from it.
    """
    import torch

    dist = dist or DistInfo()
    # resolved in every case (a "cuda" string or torch.device("cuda") becomes indexed, cuda:LOCAL_RANK)
    device = resolve_device(
        cfg.device if device is None else str(device),
        local_rank=dist.local_rank if dist.distributed else None,
        distributed=dist.distributed,
        field="device",
    )
    graphs = plan_cuda_graphs(
        cfg.cuda_graphs, device_type=device.type, distributed=dist.distributed, compile=cfg.compile
    )
    if cfg.num_threads:
        if dist.is_main:
            say_if_oversubscribed(cfg.num_threads, "num_threads")
        torch.set_num_threads(cfg.num_threads)
    ds = open_data(cfg)
    if dist.is_main and (line := warnings_line(cfg.data.path)):
        print(line, file=sys.stderr)  # likely recording faults: trained on, but said
    features = select_features(ds, cfg)
    # A resumed run takes its starting weights and (correction_only) statistics from its own checkpoint,
    # not from --init-from again: the bundle may have been replaced since (its stats were written into the
    # new checkpoints beside the old normalizer: a bundle refused at load, exit 0) or removed.
    source = resume_from if resume_from is not None else cfg.init_from
    if source:
        bundle_policy_config(source)  # a run, an export, no bundle at all: said as --init-from's
        check_same_features(features, source)
    store = _cached_store(ds, cfg)
    stats = _stats(ds, cfg, store, source)
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank
    policy = _make_policy(cfg, features, stats, device)
    if source:
        load_initial_weights(policy, source)
    if out_dir is not None:
        _preflight(cfg, policy, ds, store, out_dir, existing_checkpoint_bytes)
    store = store if store is not None else _build_store(ds, cfg, dist)
    check_store_matches(store, features)
    seed_streams(cfg.seed, dist.rank)
    held = held_out_episodes(source, ds) if source and cfg.data.val_fraction > 0 else None
    if held and dist.is_main and resume_from is None:
        print(
            f"note: validating on the {len(held)} episodes {source} held out (the same dataset): a "
            "fine-tune keeps its base's validation episodes out of training (data.val_fraction's draw is "
            "not used)",
            file=sys.stderr,
        )
    return _assemble(cfg, device, dist, ds, store, stats, features, policy, graphs, held)


def _say_chunk_past_episodes(chunk: int | None, split: Any, where: str) -> None:
    """A chunk longer than every training episode: its tail is padding in every sample (masked out of the
    loss, never learned), which trained without a word (policy.chunk_size=1000 on 10-frame episodes)."""
    longest = max((b - a for a, b in split.train_ranges), default=0)
    if chunk and longest and chunk > longest:
        from actlab.utils.say import say  # lazy: only a chunk longer than the episodes needs it

        say(
            f"note: policy.chunk_size={chunk} is longer than the longest training episode of {where} "
            f"({longest} frames): the last {chunk - longest} or more actions of every chunk are padding, "
            f"masked out of the loss and never learned; --set policy.chunk_size={longest} or less fits them"
        )


def _assemble(
    cfg, device, dist, ds, store, stats, features, policy, graphs: GraphPlan, held: tuple[int, ...] | None
) -> TrainRun:
    import torch

    split = split_episodes(ds.episodes, cfg.data, cfg.seed, where=str(ds.root), held_out=held)
    _say_chunk_past_episodes(getattr(policy.config, "chunk_size", None), split, str(ds.root))
    train_ranges = list(split.train_ranges)
    if cfg.overfit.samples:
        train_ranges = overfit_ranges(train_ranges, cfg.overfit.samples, cfg.seed)
        split = dataclasses.replace(split, train_ranges=tuple(train_ranges), val_ranges=())
    device_data = _device_data(ds, store, policy, cfg, device)
    groups = policy.param_groups(cfg.optim.lr, cfg.optim.backbone_lr, cfg.optim.weight_decay)
    params = [p for g in groups for p in g["params"] if p.requires_grad]
    optimizer = _optimizer(cfg, groups, device, capturable=graphs.enabled)
    scheduler = build_scheduler(optimizer, cfg.steps, cfg.schedule)
    model = ddp.wrap(policy, dist, device)
    if cfg.compile:
        model = torch.compile(model)
    gen = torch.Generator(device=device)
    gen.manual_seed(cfg.seed + 1_000_003 * (dist.rank + 1))
    aug = cfg.augment if cfg.overfit.samples == 0 else None  # overfit: memorize, no augmentation
    keys = [k for k in features if k in ds.camera_keys]

    def prepare(raw: dict[str, Any]) -> dict[str, Any]:
        return prepare_images(raw, keys, aug, gen, cfg.channels_last)

    sampler = make_sampler(train_ranges, cfg.seed, dist.rank, dist.world_size)
    batches = BatchStream(device_data, sampler, cfg.batch_size, prepare, gen)
    amp_dtype = torch.bfloat16 if _amp_on(cfg, device) else None
    weights = None
    if amp_dtype is not None and cfg.bf16_weights and not dist.distributed and not cfg.compile:
        weights = WorkingWeights(policy, amp_dtype)
    graphed = None
    if graphs.enabled:
        graphed = GraphedStep(
            model, optimizer, params, grad_clip=cfg.optim.grad_clip, device=device, amp_dtype=amp_dtype,
            weights=weights,
        )  # fmt: skip
    elif graphs.reason is not None and dist.is_main:
        announce_fallback(graphs.reason)
    return TrainRun(
        cfg=cfg,
        device=device,
        dist=dist,
        dataset=ds,
        store=store,
        stats=stats,
        features=features,
        policy=policy,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        params=params,
        split=split,
        device_data=device_data,
        batches=batches,
        image_keys=keys,
        amp_dtype=amp_dtype,
        graphed=graphed,
        graphs_off_reason=graphs.reason,
        ema=_ema(cfg, policy),
        weights=weights,
    )


def _ema(cfg: TrainConfig, policy):
    if cfg.ema_decay <= 0:
        return None
    # lazy: ema imports torch; training modules import without it
    from actlab.training.ema import WeightEMA

    return WeightEMA(policy, cfg.ema_decay)


def seed_streams(seed: int, rank: int) -> None:
    """Seed torch (dropout, VAE sampling), numpy and python for this rank."""
    import torch

    torch.manual_seed(seed + 1 + rank)
    np.random.seed((seed + 1 + rank) % 2**32)
    random.seed(seed + 1 + rank)


def process_rng_state(device: torch.device) -> tuple[dict[str, Any], dict[str, Any]]:
    """The process-wide random streams :func:`seed_streams` seeds, as (tensors, JSON-able dict):
    ``torch_cpu`` (and ``torch_cuda`` on a CUDA device), ``numpy``, ``python``."""
    import torch

    tensors = {"torch_cpu": torch.get_rng_state()}
    if device.type == "cuda":
        tensors["torch_cuda"] = torch.cuda.get_rng_state(device)
    py = random.getstate()
    meta = {"numpy": jsonable(list(np.random.get_state())), "python": [py[0], list(py[1]), py[2]]}
    return tensors, meta


def load_process_rng_state(tensors: dict[str, Any], meta: dict[str, Any], device: torch.device) -> bool:
    """Inverse of :func:`process_rng_state`. False when the CUDA stream cannot carry over (the state
    was saved on another device type); it then keeps its seeding."""
    import torch

    torch.set_rng_state(tensors["torch_cpu"])
    if device.type == "cuda" and "torch_cuda" in tensors:
        torch.cuda.set_rng_state(tensors["torch_cuda"], device)
    kind, keys, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    version, state, gauss = meta["python"]
    random.setstate((version, tuple(state), gauss))
    return (device.type == "cuda") == ("torch_cuda" in tensors)


def _amp_on(cfg: TrainConfig, device) -> bool:
    return cfg.amp == "bf16" or (cfg.amp == "auto" and device.type == "cuda")


def open_data(cfg: TrainConfig):
    """Open ``cfg.data.path`` and run the dataset's cheap checks (those of ``actlab data doctor`` that
    read no video): a dataset the doctor calls wrong is refused here, before anything is built, with an
    ActlabError naming the check, the file and the fix. A clear error too when the path is unset."""
    if not cfg.data.path:
        raise ActlabError(
            "no dataset given",
            field="data.path",
            expected="a LeRobot v3 dataset directory",
            fix="pass --dataset PATH (or --set data.path=PATH)",
        )
    ds = open_dataset(cfg.data.path)  # metadata checks (info, tasks, episodes)
    ds.check_data()  # rows vs episodes, column types, order, timestamps, NaN/inf
    return ds


def select_features(ds, cfg: TrainConfig) -> dict[str, Any]:
    """The features the policy is built from, exactly as batches carry them: the dataset's features
    without the cameras the policy does not use (their frames are never decoded), and the used cameras
    at the size the FrameStore stores them (``data.image_size``, with the resize recorded so that the
    bundle's features.json tells evaluation how to resize observations)."""
    used = camera_keys(ds, cfg)
    kept = {k: v for k, v in ds.features.items() if k not in ds.camera_keys or k in used}
    return stored_features(kept, cfg.data.image_size, used)


def check_store_matches(store, features: dict[str, Any]) -> None:
    """The frames of ``store`` have the shape the policy was built for (the FrameStore and
    :func:`select_features` size images the same way; a store that disagrees is refused, never fed)."""
    for key, frames in ({} if store is None else store.frames).items():
        if key not in features:
            continue
        h, w, c = features[key]["shape"]
        if tuple(frames.shape[1:]) != (c, h, w):
            raise ActlabError(
                "the frame store holds images of another size than the policy was built for",
                file=store.root,
                field=key,
                expected=f"(N, {c}, {h}, {w})",
                found=tuple(frames.shape),
                fix="rebuild the store: `actlab data cache DATASET --image-size SIZE --rebuild`",
            )


def camera_keys(ds, cfg: TrainConfig) -> list[str]:
    """The cameras this run trains on (``policy.cameras``; every camera when it is empty)."""
    try:
        return list(cfg.policy.camera_keys(ds.features))
    except ActlabError as e:
        raise ActlabError(
            e.problem,
            file=Path(ds.root) / "meta/info.json",
            field="policy.cameras",
            expected=e.expected,
            found=e.found,
            fix=e.fix,
        ) from e


def _cached_store(ds, cfg: TrainConfig):
    """The FrameStore if it is already decoded on disk (cheap to open), else None."""
    keys = camera_keys(ds, cfg)
    if not keys:
        return None
    path = FrameStore.path_for(ds, cfg.data.image_size, keys, cfg.data.cache_dir)
    # None where there is none or it is damaged (a camera removed from its store.json too): rebuilt later
    return FrameStore.try_open(path, keys, ds)[0]


def _build_store(ds, cfg: TrainConfig, dist: DistInfo):
    """Decode the FrameStore once: rank 0 first, the other ranks then open the finished cache."""
    keys = camera_keys(ds, cfg)
    if not keys:
        return None

    def build():
        return FrameStore.build(
            ds, image_size=cfg.data.image_size, cache_dir=cfg.data.cache_dir, keys=keys, progress=dist.is_main
        )

    store = build() if dist.is_main else None
    ddp.barrier(dist)
    return store if store is not None else build()


def _stats(ds, cfg: TrainConfig, store, source: str | Path | None = None) -> dict[str, Any]:
    cache = Path(cfg.data.cache_dir) / "stats" if cfg.data.cache_dir else None
    stats = compute_stats(ds, **cfg.policy.stats_request(), store=store, cache_dir=cache)
    if getattr(cfg.policy, "correction_only", False) and source:
        # The frozen policy must plan the chunks it planned when it was trained, so it keeps its own
        # statistics (its bundle's stats.json), not this dataset's: the head corrects the deployed
        # policy's chunks. A key the bundle lacks (act_relative's absolute action stats, which only a
        # correction head reads) stays this dataset's.
        stats = {**stats, **bundle_stats(source)}
    return stats


def _make_policy(cfg: TrainConfig, features, stats, device) -> TrainablePolicy:
    import torch

    if cfg.policy is None:
        raise ActlabError(
            "the config has no policy", field="policy", fix="start from a preset (--preset NAME)"
        )
    policy = make_policy(cfg.policy, features, stats).to(device)
    if cfg.channels_last:
        policy = policy.to(memory_format=torch.channels_last)
    policy.train()
    return policy


def _preflight(cfg: TrainConfig, policy, ds, store, out_dir, existing_checkpoint_bytes: int) -> None:
    n_params = sum(p.numel() for p in policy.parameters())
    n_train = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    fs_bytes = 0
    keys = camera_keys(ds, cfg)
    if store is None and keys:
        cache = cfg.data.cache_dir or cache_root() / "frames"
        if same_filesystem(cache, out_dir):
            fs_bytes = int(FrameStore.estimate_bytes(ds, cfg.data.image_size, keys))
    plan = preflight.plan(
        n_params,
        n_train,
        cfg.checkpoint.keep_last,
        cfg.checkpoint.keep_best,
        framestore_bytes=fs_bytes,
        existing_checkpoint_bytes=existing_checkpoint_bytes,
    )
    preflight.check(plan, out_dir, cfg.checkpoint.disk_limit_bytes)


def _check_shift_pad(cfg: TrainConfig, store) -> None:
    """A random shift of ``shift_pad`` pixels or more can move a stored frame wholly out of its crop (the
    edge pixels repeated): `--set augment.shift_pad=100` on 16 px frames trained on such crops, exit 0."""
    if store is None or cfg.augment.shift_pad <= 0 or not store.frames:
        return
    side = min(min(a.shape[-2:]) for a in store.frames.values())  # (N, C, H, W)
    if cfg.augment.shift_pad >= side:
        raise ActlabError(
            "augment.shift_pad is as large as the frames: a shifted crop can hold none of the image",
            field="augment.shift_pad",
            expected=f"< {side} (the frames are {side} px on their shorter side; presets use 2-8)",
            found=cfg.augment.shift_pad,
            fix=f"--set augment.shift_pad=N with N < {side}, or 0 for no shift",
        )


def _device_data(ds, store, policy: TrainablePolicy, cfg: TrainConfig, device) -> DeviceData:
    """DeviceData for the policy's keys; with a frozen backbone, cached features replace the images."""
    # lazy: DeviceData may import torch (actlab.datasets keeps it lazy); training modules import without it
    from actlab.datasets import DeviceData

    on_device = _frames_on_device(cfg, store, device)
    _check_shift_pad(cfg, store)
    deltas = dict(policy.delta_indices)
    override = None
    correction_only = bool(getattr(cfg.policy, "correction_only", False))
    if (cfg.policy.freeze_backbone or correction_only) and store is not None:
        if correction_only:
            # everything but the head is frozen: one backbone pass per stored frame serves every step
            print(
                "correction_only: the frozen policy's image features and chunks are computed once per "
                "frame (augment.* does not apply)",
                file=sys.stderr,
            )
        elif cfg.augment.enabled:
            warnings.warn(
                "augment.* is ignored with policy.freeze_backbone: backbone features are computed once per "
                "stored frame, so images are never augmented (set augment.shift_pad=0 etc. to silence this)",
                stacklevel=2,
            )
        override = precompute_features(policy, store, camera_keys(ds, cfg), device, _amp_on(cfg, device))
        deltas = {
            (k + FEATURES_SUFFIX if k + FEATURES_SUFFIX in override else k): v for k, v in deltas.items()
        }
    if FUTURE_STATE in deltas:
        # the state column again, at the offsets the policy asks for under this name (a correction head's
        # states over its chunk), beside observation.state's own window
        override = {
            **(override or {}),
            FUTURE_STATE: np.asarray(ds.column("observation.state"), dtype=np.float32),
        }
    if PAST_CHUNKS in deltas:
        chunks = precompute_chunks(policy, ds, store, deltas, override, device, _amp_on(cfg, device))
        override = {**(override or {}), PAST_CHUNKS: chunks}
    return DeviceData(ds, store, deltas, device, frames_on_device=on_device, feature_override=override)


def _frames_on_device(cfg: TrainConfig, store, device) -> bool | str:
    """``data.frames_on_device``, with "auto" on CPU resolved to a RAM copy when it fits in half the free
    memory. Why: DeviceData's CPU "auto" reads the memmap through a prefetch thread, and on 2 cores that
    thread's GIL contention with the step cost more (bench train: ~5-6 % stall) than gathering from RAM
    in the training thread (~2-4 %)."""
    if cfg.data.frames_on_device != "auto" or device.type != "cpu" or store is None:
        return cfg.data.frames_on_device
    import psutil

    return store.nbytes < psutil.virtual_memory().available // 2


def precompute_chunks(
    policy: TrainablePolicy, ds, store, deltas, override, device, amp: bool, chunk: int = 256
):
    """``(N, H, A)``: the (frozen) policy's inference chunk at every frame, absolute actions.

    Why: with ``correction_only`` a training sample at frame ``t`` needs the chunk planned at ``t - k``,
    for any ``k`` up to the chunk size; the policy never changes, so each frame's chunk is computed once
    (latent 0, eval mode: what ``predict_action_chunk`` returns) and gathered like any other column.
    """
    import time

    import torch

    from actlab.datasets import DeviceData  # lazy: DeviceData may import torch, as in _device_data

    # what inference reads: the state and the cameras (as cached features when they are), no targets
    obs_deltas = {k: v for k, v in deltas.items() if k not in ("action", FUTURE_STATE, PAST_CHUNKS)}
    data = DeviceData(ds, store, obs_deltas, device, frames_on_device=False, feature_override=override)
    t0 = time.perf_counter()
    parts = []
    with autocast(device, torch.bfloat16 if amp else None):
        for i in range(0, len(ds), chunk):
            batch = data.gather(np.arange(i, min(i + chunk, len(ds))))
            batch = {k: v for k, v in batch.items() if k != "index" and not k.endswith("_is_pad")}
            parts.append(policy.predict_action_chunk(batch).float())  # (b, H, A)
    print(
        f"correction_only: {len(ds)} chunks of the frozen policy in {time.perf_counter() - t0:.0f} s",
        file=sys.stderr,
    )
    return torch.cat(parts)


def precompute_features(
    policy: TrainablePolicy, store: FrameStore, keys: list[str], device, amp: bool, chunk: int = 256
) -> dict[str, Any]:
    """``{camera + FEATURES_SUFFIX: (N, C', h, w)}``: the frozen backbone run once over every stored frame.

    Why: with ``freeze_backbone`` the backbone output of a frame never changes, so computing it once
    turns every later step into a head-only step. Kept on the device (bf16 under autocast).
    """
    import torch

    out: dict[str, Any] = {}
    was_training = policy.training
    policy.eval()
    try:
        with torch.no_grad(), autocast(device, torch.bfloat16 if amp else None):
            for key in keys:
                frames = store.frames[key]  # (N, C, H, W) uint8 memmap
                parts = [
                    policy.encode_images(key, torch.from_numpy(np.array(frames[i : i + chunk])).to(device))
                    for i in range(0, frames.shape[0], chunk)
                ]
                out[key + FEATURES_SUFFIX] = torch.cat(parts)  # (N, C', h, w)
    finally:
        policy.train(was_training)
    return out


def _optimizer(cfg: TrainConfig, groups: list[dict[str, Any]], device, capturable: bool = False):
    import functools

    import torch

    kwargs: dict[str, Any] = {
        "lr": cfg.optim.lr,
        "betas": cfg.optim.betas,
        "eps": cfg.optim.eps,
        "weight_decay": cfg.optim.weight_decay,
    }
    groups = [dict(g) for g in groups]
    for g in groups:
        # The schedule's base rates stay Python floats (LambdaLR keeps "initial_lr" when it is set), so
        # a tensor learning rate never leaks into the scheduler state or a checkpoint's base rates.
        g["initial_lr"] = float(g.get("lr", cfg.optim.lr))
    if device.type in ("cuda", "cpu"):
        # fused: one kernel for all parameters instead of a few per tensor. On the CPU (torch >= 2.4) the
        # default is a Python loop over tensors: 2.5 ms per step for the CPU demo's 239k parameters vs
        # 0.5 ms fused (~2.5% of its 80 ms step, measured on the 2-core development machine).
        kwargs["fused"] = True
    if device.type == "cuda" and capturable:
        # capturable + tensor lr: the step lives in a CUDA graph and LambdaLR updates lr in place
        kwargs["capturable"] = True
        for g in groups:
            g["lr"] = torch.tensor(g["initial_lr"], device=device)
    optimizer = torch.optim.AdamW(groups, **kwargs)
    optimizer.register_load_state_dict_post_hook(
        functools.partial(_rehome_lrs, device=device, as_tensor=capturable)
    )
    return optimizer


def _rehome_lrs(optimizer, *, device, as_tensor: bool) -> None:
    """After ``optimizer.load_state_dict``: learning rates in the form this run needs.

    Loading replaces each group's ``lr`` with the saved one (a tensor read onto the CPU if the
    checkpoint came from a captured run, a float otherwise). A captured step needs a tensor on the
    device (updated in place by the schedule); an eager non-capturable AdamW refuses a tensor rate.
    So a run can be resumed with or without CUDA graphs, on either device type.
    """
    import torch

    for g in optimizer.param_groups:
        lr = float(g["lr"].item()) if torch.is_tensor(g["lr"]) else float(g["lr"])
        g["lr"] = torch.tensor(lr, device=device) if as_tensor else lr
        if torch.is_tensor(g.get("initial_lr")):
            g["initial_lr"] = float(g["initial_lr"].item())
