"""Index math (pure numpy, tested alone): windows with episode clamping, episode subsets, the sampler.

A window for key ``k`` with offsets ``d`` (T,) at frame ``i`` of an episode ``[start, stop)`` reads rows
``clip(i + d, start, stop - 1)``; ``k_is_pad`` is True where ``i + d`` fell outside the episode
(LeRobot's ``delta_timestamps`` semantics: ``_get_query_indices`` in lerobot 0.6.1's
``lerobot/datasets/dataset_reader.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from actlab.errors import ActlabError
from actlab.utils.config import comma_items, refuse_repeated


def window_indices(
    index: np.ndarray, offsets: np.ndarray, ep_start: np.ndarray, ep_stop: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Rows and pad mask of windows: ``index`` (B,), ``offsets`` (T,), episode bounds (B,) -> (B, T) each."""
    raw = np.asarray(index)[:, None] + np.asarray(offsets)[None, :]  # (B, T)
    lo = np.asarray(ep_start)[:, None]
    hi = np.asarray(ep_stop)[:, None] - 1
    rows = np.minimum(np.maximum(raw, lo), hi)
    return rows, (raw < lo) | (raw > hi)


def delta_timestamps_to_indices(
    delta_timestamps: Mapping[str, Sequence[float]], fps: int, tolerance_s: float = 1e-4
) -> dict[str, list[int]]:
    """LeRobot's ``delta_timestamps`` (seconds) -> integer frame offsets; each must be a multiple of 1/fps."""
    out: dict[str, list[int]] = {}
    for key, seconds in delta_timestamps.items():
        offsets = []
        for s in seconds:
            k = round(s * fps)
            if abs(k / fps - s) > tolerance_s:
                raise ActlabError(
                    "delta timestamp is not a multiple of 1/fps",
                    field=f"delta_timestamps.{key}",
                    expected=f"multiples of {1 / fps:.6f} s",
                    found=s,
                )
            offsets.append(k)
        out[key] = offsets
    return out


# The largest episode index a list may name: more than any dataset holds (the CLI's --episode ceiling), and
# the bound on what a range expands to before the dataset is read.
MAX_EPISODE_INDEX = 10**7


def parse_episodes(spec: str | Sequence[int] | None, field: str = "--episodes") -> list[int] | None:
    """``"0,3,5"`` or ``"0-9,12"`` (or a list) -> episode indices; None means all. ``field``: the option
    that gave ``spec`` (`--drop-episodes -1` was refused as --episodes, an option curate does not have)."""
    if spec is None:
        return None
    if not isinstance(spec, str):
        return [int(e) for e in spec]
    out: list[int] = []
    items: list[str] = []  # the item each index came from (a refusal of one given twice names both)
    for part in comma_items(spec, field, "0,3,5 or 0-9"):
        try:
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                if not a <= b <= MAX_EPISODE_INDEX:
                    raise ActlabError(
                        "an episode range is backwards"
                        if a > b
                        else "an episode range reaches past any dataset",
                        field=field,
                        expected=f"FIRST-LAST with FIRST <= LAST <= {MAX_EPISODE_INDEX}, e.g. 0-9",
                        found=f"{part} in {spec!r}",
                        # (5-3 selected nothing without a word; 0-99999999 built a list for minutes)
                        fix=f"write it as {b}-{a}" if a > b else "name the episodes the dataset has",
                    )
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
            items += [part] * (len(out) - len(items))
        except ValueError as e:
            raise ActlabError(
                "cannot read the episode list",
                field=field,
                expected="comma-separated indices or ranges, e.g. 0,3,5 or 0-9",
                found=spec,
            ) from e
    refuse_repeated(out, items, field, spec, "0,3,5 or 0-9")  # 0-3,2 dropped 2 once, without a word
    return out


def select_ranges(
    episode_starts: Sequence[int],
    episode_stops: Sequence[int],
    episode_indices: Sequence[int],
    episodes: Sequence[int] | None = None,
    max_samples: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Frame ranges ``[start, stop)`` the sampler draws from: chosen episodes, at most ``max_samples`` frames.

    ``max_samples`` keeps whole episodes in the given order and cuts the last one short; episode borders
    used for windows are not changed by it (the cut frames can still appear inside action windows).
    """
    starts = np.asarray(episode_starts, dtype=np.int64)
    stops = np.asarray(episode_stops, dtype=np.int64)
    ids = list(int(e) for e in episode_indices)
    if episodes is not None:
        pos = {e: i for i, e in enumerate(ids)}
        missing = [e for e in episodes if e not in pos]
        if missing:
            raise ActlabError(
                "episode not in dataset",
                field="--episodes",
                expected=f"indices among {ids[0]}..{ids[-1]}" if ids else "an episode",
                found=missing,
            )
        sel = [pos[e] for e in episodes]
        starts, stops = starts[sel], stops[sel]
    if max_samples is not None:
        if max_samples < 1:
            raise ActlabError("--max-samples must be >= 1", field="--max-samples", found=max_samples)
        lengths = stops - starts
        before = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        keep = before < max_samples
        starts, stops = starts[keep], stops[keep]
        stops = np.minimum(stops, starts + (max_samples - before[keep]))
    return starts, stops


def _whole(value: Any) -> int | None:
    """An integer as a state file holds it (an int, or its digits as a string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


class EpisodeSampler:
    """Deterministic, resumable shuffling of the frames of selected episode ranges, shared over ranks.

    Each epoch is a permutation of every frame in ``[starts[i], stops[i])`` drawn from
    ``seed`` and the epoch number; rank ``r`` of ``world_size`` takes positions ``r, r + W, ...`` of it
    (disjoint shares of equal size, the remainder dropped). ``next_batch`` runs on across epochs.
    ``state_dict()`` / ``load_state_dict()`` resume mid-epoch exactly.
    """

    def __init__(
        self,
        episode_starts: Sequence[int] | np.ndarray,
        episode_stops: Sequence[int] | np.ndarray,
        seed: int,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        starts = np.asarray(episode_starts, dtype=np.int64)
        stops = np.asarray(episode_stops, dtype=np.int64)
        if starts.shape != stops.shape or (stops < starts).any():
            raise ActlabError(
                "episode ranges are malformed", field="episode_starts/stops", found=(starts, stops)
            )
        if not 0 <= rank < world_size:
            raise ActlabError("rank out of range", field="rank", expected=f"0..{world_size - 1}", found=rank)
        self.frames = np.concatenate(
            [np.arange(a, b) for a, b in zip(starts, stops)] or [np.zeros(0, np.int64)]
        )
        self.per_rank = len(self.frames) // world_size
        if self.per_rank == 0:
            raise ActlabError(
                "no frames to sample",
                field="episodes",
                expected=f"at least {world_size} frames",
                found=len(self.frames),
                fix="select more episodes or raise --max-samples",
            )
        self.seed, self.shuffle, self.rank, self.world_size = int(seed), shuffle, rank, world_size
        self.epoch = 0
        self.position = 0  # within this rank's share of the current epoch
        self._order = self._epoch_order(0)

    def __len__(self) -> int:
        """Frames per epoch on this rank."""
        return self.per_rank

    def _epoch_order(self, epoch: int) -> np.ndarray:
        if self.shuffle:
            rng = np.random.default_rng([self.seed, epoch])
            perm = rng.permutation(len(self.frames))
        else:
            perm = np.arange(len(self.frames))
        return self.frames[perm[self.rank :: self.world_size][: self.per_rank]]

    def next_batch(self, batch_size: int) -> np.ndarray:
        """The next ``batch_size`` global frame indices, (B,) int64; crosses epoch borders seamlessly."""
        parts = []
        need = batch_size
        while need:
            take = min(need, self.per_rank - self.position)
            parts.append(self._order[self.position : self.position + take])
            self.position += take
            need -= take
            if self.position == self.per_rank:
                self.epoch += 1
                self.position = 0
                self._order = self._epoch_order(self.epoch)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue from the same position (JSON-serializable)."""
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "position": self.position,
            "frames": len(self.frames),
            "rank": self.rank,
            "world_size": self.world_size,
            "shuffle": self.shuffle,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume at a saved position; refuses a state from a different frame set or seed."""
        for key, mine in (("frames", len(self.frames)), ("seed", self.seed), ("world_size", self.world_size)):
            if _whole(state.get(key, -1)) != mine:
                raise ActlabError(
                    "sampler state does not match this dataset selection",
                    field=f"sampler.{key}",
                    expected=mine,
                    found=state.get(key),
                    fix="resume with the same dataset, episodes, max-samples, seed and world size",
                )
        # The rest as this sampler wrote it: a position of -5 was a reshape traceback, 999 (of 20) an epoch
        # cut short without a word, an edited shuffle or rank dropped without one, "x" a ValueError.
        epoch, position = _whole(state.get("epoch")), _whole(state.get("position"))
        for key, ok, want in (
            ("epoch", epoch is not None and epoch >= 0, "an integer >= 0"),
            ("position", position is not None and 0 <= position < self.per_rank, f"0 to {self.per_rank - 1}"),
            ("shuffle", state.get("shuffle", self.shuffle) == self.shuffle, self.shuffle),
            ("rank", _whole(state.get("rank", self.rank)) == self.rank, self.rank),
        ):
            if not ok:
                raise ActlabError(
                    "the checkpoint's sampler state is damaged (edited?): it is not what actlab wrote",
                    field=f"sampler.{key}",
                    expected=want,
                    found=state.get(key),
                    fix="use the previous checkpoint (move this one out of checkpoints/ and resume), or "
                    "train on from this checkpoint's weights in a new run: actlab train --init-from CKPT",
                )
        self.epoch, self.position = int(epoch), int(position)
        self._order = self._epoch_order(self.epoch)
