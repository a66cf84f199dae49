"""Training data: the episode split (pure index math) and the batch source that feeds the step.

The split is by episode, never by frame, so validation frames never sit next to training frames of the
same demonstration. Sampling is done by ``actlab.datasets.EpisodeSampler`` over half-open global frame
ranges; the ranges may be whole episodes, a truncated episode (``data.max_samples``) or single frames
(overfit mode). Windows and padding are computed by ``DeviceData`` from the dataset's real episode
borders, so a range that is part of an episode still gets correct windows.

:class:`BatchSource` hands out batches on the training device. When the FrameStore lives on the device
it gathers synchronously (on a GPU the gather is a few asynchronous kernels). Otherwise DeviceData's
background thread gathers from the memory-mapped store into pinned host memory and copies with
``non_blocking``, keeping ``prefetch`` batches ready so the step does not wait on the disk.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from actlab.datasets import EpisodeSampler
from actlab.errors import ActlabError
from actlab.training.config import DataConfig

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


def split_episodes(episodes: Sequence[Any], cfg: DataConfig, seed: int, where: str = "dataset") -> Split:
    """Choose validation episodes (seeded, by episode) and apply ``episodes`` / ``max_samples``.

    ``episodes`` are objects with ``index``, ``start`` and ``stop`` (EpisodeInfo).
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
    order = np.random.default_rng(seed).permutation(len(chosen))
    val_set = set(order[:n_val].tolist())
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
):
    """An ``EpisodeSampler`` over ``ranges`` (this rank's disjoint share)."""
    starts = np.asarray([a for a, _ in ranges], dtype=np.int64)
    stops = np.asarray([b for _, b in ranges], dtype=np.int64)
    return EpisodeSampler(starts, stops, seed=seed, shuffle=shuffle, rank=rank, world_size=world_size)


class BatchSource:
    """Batches on the training device, drawn by an ``EpisodeSampler`` and gathered by ``DeviceData``.

    Wraps :meth:`DeviceData.batches`, which gathers synchronously when the frames are on the device and
    otherwise prefetches from the memory-mapped FrameStore on a background thread into pinned buffers.
    ``state_dict()`` is the sampler position right after the last batch *handed out*, so a checkpoint
    taken between steps resumes with exactly the next batch even when the prefetcher has drawn ahead.
    """

    def __init__(self, device_data: Any, sampler: Any, batch_size: int, prefetch: int = 2) -> None:
        self.device_data = device_data
        self.sampler = sampler
        self.batch_size = batch_size
        self.prefetch = prefetch
        self._state = sampler.state_dict()
        self._iter = None

    def next(self) -> dict[str, Any]:
        """The next batch (images uint8 ``(B, [T,] C, H, W)``, floats, ``*_is_pad``) on the device."""
        if self._iter is None:
            self._iter = self.device_data.batches(self.sampler, self.batch_size, prefetch=self.prefetch)
        batch = next(self._iter)
        # read at once: the attribute is shared by every generator of this DeviceData
        self._state = dict(self.device_data.sampler_state)
        return batch

    def close(self) -> None:
        """Stop the prefetch thread (if any); safe to call twice."""
        if self._iter is not None:
            self._iter.close()
            self._iter = None

    def state_dict(self) -> dict[str, Any]:
        return self._state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue after the batch that ``state`` was taken after (restarts prefetching)."""
        self.close()
        self.sampler.load_state_dict(state)
        self._state = self.sampler.state_dict()


class PreparedBatches:
    """Training batches ready for the step: raw batches from a :class:`BatchSource` passed through
    ``prepare`` (uint8 -> float in ``[0, 1]``, on-device augmentation drawing from ``generator``).

    Preparation runs in the training thread, in order. Why not a thread on CPU: measured on 2 cores,
    a preparing thread contends for the GIL with the step's many small ops and slowed the step by more
    than the ~0.3 ms of preparation it saved; on a GPU the ops are asynchronous kernels anyway.
    :meth:`state` is the sampler position and generator state right after the last batch handed out.
    """

    def __init__(self, source: BatchSource, prepare, generator) -> None:
        self.source = source
        self.prepare = prepare
        self.generator = generator
        self._state = (source.state_dict(), generator.get_state())

    def next(self) -> dict[str, Any]:
        """The next prepared batch on the training device."""
        batch = self.prepare(self.source.next())
        self._state = (self.source.state_dict(), self.generator.get_state())
        return batch

    def state(self) -> tuple[dict[str, Any], Any]:
        """(sampler state, generator state) after the last batch handed out."""
        return self._state

    def load_state(self, sampler_state: dict[str, Any], generator_state: Any) -> None:
        """Continue with the batch that follows ``sampler_state`` and the augmentation draws that follow
        ``generator_state``."""
        self.source.load_state_dict(sampler_state)
        self.generator.set_state(generator_state)
        self._state = (self.source.state_dict(), self.generator.get_state())

    def close(self) -> None:
        """Stop the raw source's prefetcher; safe to call twice."""
        self.source.close()
