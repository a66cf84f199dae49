"""Training data: the episode split (pure index math) and the batch streams that feed the step.

The split is by episode, never by frame, so validation frames never sit next to training frames of the
same demonstration. Sampling is done by ``actlab.datasets.EpisodeSampler`` over half-open global frame
ranges; the ranges may be whole episodes, a truncated episode (``data.max_samples``) or single frames
(overfit mode). Windows and padding are computed by ``DeviceData`` from the dataset's real episode
borders, so a range that is part of an episode still gets correct windows.

:class:`BatchStream` hands out the training batches on the device and alone holds their position
(sampler state and augmentation generator) for checkpoints. When the FrameStore lives on the device it
gathers synchronously (on a GPU the gather is a few asynchronous kernels). Otherwise DeviceData's
background thread gathers from the memory-mapped store into pinned host memory and copies with
``non_blocking``, keeping ``prefetch`` batches ready so the step does not wait on the disk.
:func:`validation_batches` is the validation loss's own stream: the same fixed batches every time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.datasets import EpisodeSampler
from actlab.errors import ActlabError
from actlab.training.config import DataConfig

if TYPE_CHECKING:
    import torch

    from actlab.datasets import DeviceData, EpisodeSampler

Ranges = list[tuple[int, int]]


@dataclasses.dataclass(frozen=True)
class Split:
    """Global frame ranges (half-open) for training and validation, and the episodes behind them."""

    # episode indices used for training
    train_episodes: tuple[int, ...]
    # episode indices held out for the validation loss
    val_episodes: tuple[int, ...]
    # frame ranges the training sampler draws from
    train_ranges: tuple[tuple[int, int], ...]
    # frame ranges the validation sampler draws from
    val_ranges: tuple[tuple[int, int], ...]

    @property
    def train_frames(self) -> int:
        return sum(b - a for a, b in self.train_ranges)

    @property
    def val_frames(self) -> int:
        return sum(b - a for a, b in self.val_ranges)


def split_episodes(
    episodes: Sequence[Any],
    cfg: DataConfig,
    seed: int,
    where: str = "dataset",
    held_out: Sequence[int] | None = None,
) -> Split:
    """Choose validation episodes (seeded, by episode) and apply ``episodes`` / ``max_samples``.

    ``episodes`` are objects with ``index``, ``start`` and ``stop`` (EpisodeInfo). ``held_out``: the
    validation episodes themselves (a fine-tune's, its base's held-out episodes: init_from.held_out_episodes),
    used instead of the seeded draw when validation is asked for, every episode is trained on (no
    ``episodes`` list) and at least one is left to train on.
    """
    by_index = {int(e.index): e for e in episodes}
    if cfg.episodes:
        missing = [i for i in cfg.episodes if i not in by_index]
        if missing:
            raise ActlabError(
                "data.episodes names episodes the dataset does not have",
                file=where,
                field="data.episodes",
                expected=f"indices among {min(by_index)}..{max(by_index)}" if by_index else "episodes",
                found=missing,
            )
        chosen = [by_index[i] for i in cfg.episodes]
    else:
        chosen = [by_index[i] for i in sorted(by_index)]
    chosen = [e for e in chosen if int(e.stop) > int(e.start)]
    if not chosen:
        raise ActlabError(
            "no frames to train on", file=where, field="data.episodes", found="0 non-empty episodes"
        )
    n_val = round(cfg.val_fraction * len(chosen))
    if cfg.val_fraction > 0 and len(chosen) >= 2:
        n_val = min(max(n_val, 1), len(chosen) - 1)  # at least one of each when asked for validation
    else:
        n_val = 0
        if cfg.val_fraction > 0:  # asked for, cannot be made: said (it was dropped without a word)
            warnings.warn(
                f"data.val_fraction={cfg.val_fraction:g} asks for validation episodes, but {where} has "
                f"{len(chosen)} non-empty episode to train on (a split needs 2): training without a "
                "validation loss (no best checkpoint by it); pass --set data.val_fraction=0 to mean it, or "
                "use a dataset with more episodes",
                stacklevel=2,
            )
    order = np.random.default_rng(seed).permutation(len(chosen))
    val_set = set(order[:n_val].tolist())
    if held_out and n_val and not cfg.episodes:
        given = {i for i, e in enumerate(chosen) if int(e.index) in set(held_out)}
        if 0 < len(given) < len(chosen):
            val_set = given
    train = [e for i, e in enumerate(chosen) if i not in val_set]
    val = [e for i, e in enumerate(chosen) if i in val_set]
    train_ranges = _cap([(int(e.start), int(e.stop)) for e in train], cfg.max_samples)
    return Split(
        train_episodes=tuple(int(e.index) for e in train),
        val_episodes=tuple(int(e.index) for e in val),
        train_ranges=tuple(train_ranges),
        val_ranges=tuple((int(e.start), int(e.stop)) for e in val),
    )


def _cap(ranges: Ranges, max_samples: int | None) -> Ranges:
    if max_samples is None:
        return ranges
    out, left = [], max_samples
    for a, b in ranges:
        if left <= 0:
            break
        out.append((a, min(b, a + left)))
        left -= out[-1][1] - a
    return out


def overfit_ranges(train_ranges: Sequence[tuple[int, int]], n: int, seed: int) -> Ranges:
    """``n`` fixed training frames (seeded, spread over episodes) as single-frame ranges."""
    frames = np.concatenate([np.arange(a, b) for a, b in train_ranges])
    if n > len(frames):
        raise ActlabError(
            "--overfit asks for more samples than the training split has",
            field="overfit.samples",
            expected=f"<= {len(frames)}",
            found=n,
        )
    picked = np.sort(np.random.default_rng(seed).choice(frames, size=n, replace=False))
    return [(int(i), int(i) + 1) for i in picked]


def make_sampler(
    ranges: Sequence[tuple[int, int]], seed: int, rank: int = 0, world_size: int = 1, shuffle: bool = True
) -> EpisodeSampler:
    """An ``EpisodeSampler`` over ``ranges`` (this rank's disjoint share)."""
    starts = np.asarray([a for a, _ in ranges], dtype=np.int64)
    stops = np.asarray([b for _, b in ranges], dtype=np.int64)
    return EpisodeSampler(starts, stops, seed=seed, shuffle=shuffle, rank=rank, world_size=world_size)


class BatchStream:
    """The training batches of one rank, ready for the step, and the one owner of where they stand.

    A batch is drawn by ``sampler`` (an ``EpisodeSampler``), gathered on the device by
    ``DeviceData.batches`` (synchronously when the FrameStore is on the device; otherwise a background
    thread prefetches from the memory-mapped store into pinned buffers), then passed through ``prepare``
    (uint8 -> float in ``[0, 1]``, on-device augmentation drawing from ``generator``).

    Preparation runs in the training thread, in order. Why not a thread on CPU: measured on 2 cores,
    a preparing thread contends for the GIL with the step's many small ops and slowed the step by more
    than the ~0.3 ms of preparation it saved; on a GPU the ops are asynchronous kernels anyway.

    :meth:`state` is (sampler state, generator state) right after the last batch handed out, taken from
    what ``DeviceData.batches`` yields with each batch: a checkpoint taken between steps resumes with
    exactly the next batch and the next augmentation draws, even though the prefetcher has drawn ahead.
    :meth:`load_state` restores it. Nothing else reads or writes the sampler or the generator.
    """

    def __init__(
        self,
        device_data: DeviceData,
        sampler: EpisodeSampler,
        batch_size: int,
        prepare: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]],
        generator: torch.Generator,
        prefetch: int = 2,
    ) -> None:
        self.device_data = device_data
        self.sampler = sampler
        self.batch_size = batch_size
        self.prepare = prepare
        self.generator = generator
        self.prefetch = prefetch
        self._iter: Iterator[tuple[dict[str, torch.Tensor], dict[str, Any]]] | None = None
        self._state = (sampler.state_dict(), generator.get_state())

    def next(self) -> dict[str, torch.Tensor]:
        """The next prepared batch on the training device."""
        if self._iter is None:
            self._iter = self.device_data.batches(self.sampler, self.batch_size, prefetch=self.prefetch)
        raw, sampler_state = next(self._iter)
        batch = self.prepare(raw)
        self._state = (sampler_state, self.generator.get_state())
        return batch

    def state(self) -> tuple[dict[str, Any], torch.Tensor]:
        """(sampler state, generator state) after the last batch handed out."""
        return self._state

    def load_state(self, sampler_state: dict[str, Any], generator_state: torch.Tensor) -> bool:
        """Continue with the batch that follows ``sampler_state`` and the augmentation draws that follow
        ``generator_state`` (restarts prefetching).

        Returns False when ``generator_state`` is another device type's (a CUDA generator's state is not
        a CPU one's, and resuming on another device type is allowed): the generator is then reseeded
        deterministically from the sampler position instead, the same way every time.
        """
        self.close()
        self.sampler.load_state_dict(sampler_state)
        carried = generator_state.numel() == self.generator.get_state().numel()
        if carried:
            self.generator.set_state(generator_state)
        else:
            position = hashlib.sha256(json.dumps(sampler_state, sort_keys=True).encode()).digest()
            self.generator.manual_seed(int.from_bytes(position[:7], "little"))
        self._state = (self.sampler.state_dict(), self.generator.get_state())
        return carried

    def close(self) -> None:
        """Stop the prefetch thread (if any); safe to call twice."""
        if self._iter is not None:
            self._iter.close()
            self._iter = None


def validation_batches(
    device_data: DeviceData,
    ranges: Sequence[tuple[int, int]],
    seed: int,
    batch_size: int,
    count: int,
    rank: int = 0,
    world_size: int = 1,
) -> Iterator[dict[str, torch.Tensor]]:
    """``count`` raw batches (uint8 images) of ``ranges`` from a fresh sampler seeded with ``seed``.

    The same batches at every call, and a stream of its own: nothing of the training
    :class:`BatchStream` is read or moved, and nothing of this one is saved. Close the iterator
    (``contextlib.closing``) to stop its prefetch thread when leaving early.
    """
    sampler = make_sampler(ranges, seed, rank, world_size)
    batches = device_data.batches(sampler, batch_size, steps=count, prefetch=1)
    try:
        for batch, _ in batches:
            yield batch
    finally:
        batches.close()
