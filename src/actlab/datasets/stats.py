"""Normalization statistics: absolute (LeRobot's stats.json), relative actions, state deltas, images.

Every stat is ``{"min","max","mean","std","count","q01","q10","q50","q90","q99"}`` of numpy arrays, per
dimension; image stats are per channel with shape (3, 1, 1) in [0, 1] units (as in LeRobot's stats.json).

Relative actions (UMI's "relative trajectory", pi0's "delta actions"):
``rel[t, k] = action[t + k] - state[t]`` for ``k < H``. The action window is clamped at the episode end
exactly as the sampler does, and the clamped (padded) positions are excluded from the statistics because
the policy's loss ignores them. Dims listed in ``absolute_action_dims`` (e.g. the gripper) keep absolute
values. Stats are reported per chunk position (``mean_per_step`` / ``std_per_step``, shape (H, A)) and
pooled per joint (shape (A,)).

Std floor: a joint that barely moves relative to the state (or a constant feature) would normalize
numerical noise to huge values. Relative and delta stds are raised to at least
``max(std_floor_frac * range, std_floor_abs)``, where ``range`` is that dimension's absolute max - min
over the dataset (default: 1% of the range, and never below 1e-3). The floor used is stored as
``std_floor`` next to the stats.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.datasets.format import QUANTILES
from actlab.datasets.framestore import cache_root
from actlab.datasets.sources import source_record, sources_changed
from actlab.errors import ActlabError
from actlab.utils.io import atomic_write_json, atomic_write_text, read_json

if TYPE_CHECKING:
    from actlab.datasets.reader import LeRobotV3Dataset

Stats = dict[str, dict[str, np.ndarray]]

# Cap on the values kept for quantiles; quantiles above it come from an evenly strided subsample.
_QUANTILE_SAMPLE = 200_000


def _quantiles(x: np.ndarray) -> dict[str, np.ndarray]:
    """Per-column quantiles of ``x`` (N, ...), from at most ``_QUANTILE_SAMPLE`` rows."""
    if len(x) > _QUANTILE_SAMPLE:
        x = x[:: int(np.ceil(len(x) / _QUANTILE_SAMPLE))]
    qs = np.quantile(x, list(QUANTILES.values()), axis=0)
    return {name: qs[i] for i, name in enumerate(QUANTILES)}


def feature_stats(x: np.ndarray) -> dict[str, np.ndarray]:
    """Stats over axis 0 of ``x`` (N, *shape), computed in float64."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if len(x) == 0:
        raise ValueError("no values to compute stats from")
    out = {
        "min": x.min(axis=0),
        "max": x.max(axis=0),
        "mean": x.mean(axis=0),
        "std": x.std(axis=0),
        "count": np.array([len(x)], dtype=np.int64),
    }
    out.update(_quantiles(x))
    return out


def image_stats(frames: np.ndarray, channels_first: bool = False, max_pixels: int = 4096) -> dict:
    """Per-channel stats of uint8 frames, shape (3, 1, 1), in [0, 1].

    ``frames`` is (n, H, W, 3) (or (n, 3, H, W) with ``channels_first``); pixels are strided so that at
    most ``max_pixels`` per frame enter the quantiles.
    """
    if channels_first:
        frames = np.moveaxis(frames, 1, -1)
    n, h, w, c = frames.shape
    step = max(1, int(np.sqrt(h * w / max_pixels)))
    pix = frames[:, ::step, ::step, :].reshape(-1, c).astype(np.float32) / 255.0  # (P, 3)
    st = feature_stats(pix)
    out = {k: v.reshape(c, 1, 1) for k, v in st.items() if k != "count"}
    out["count"] = np.array([n], dtype=np.int64)
    return out


def aggregate_stats(parts: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Combine per-episode stats: exact min/max/mean/std, count-weighted quantiles (as LeRobot does)."""
    counts = np.array([float(np.asarray(p["count"]).reshape(-1)[0]) for p in parts])
    w = counts / counts.sum()
    means = np.stack([np.asarray(p["mean"], dtype=np.float64) for p in parts])
    stds = np.stack([np.asarray(p["std"], dtype=np.float64) for p in parts])
    bshape = (-1,) + (1,) * (means.ndim - 1)
    mean = (w.reshape(bshape) * means).sum(axis=0)
    var = (w.reshape(bshape) * (stds**2 + (means - mean) ** 2)).sum(axis=0)
    out = {
        "min": np.min(np.stack([p["min"] for p in parts]), axis=0),
        "max": np.max(np.stack([p["max"] for p in parts]), axis=0),
        "mean": mean,
        "std": np.sqrt(np.maximum(var, 0.0)),
        "count": np.array([int(counts.sum())], dtype=np.int64),
    }
    for q in QUANTILES:
        if all(q in p for p in parts):
            out[q] = (w.reshape(bshape) * np.stack([np.asarray(p[q], np.float64) for p in parts])).sum(0)
    return out


def stats_to_json(stats: Mapping[str, Mapping[str, Any]]) -> dict:
    """Numpy arrays -> nested lists (the shape of LeRobot's stats.json)."""
    return {k: {s: np.asarray(v).tolist() for s, v in st.items()} for k, st in stats.items()}


def stats_from_json(obj: Mapping[str, Mapping[str, Any]]) -> Stats:
    """Nested lists -> numpy arrays (float64; ``count`` int64)."""
    out: Stats = {}
    for k, st in obj.items():
        out[k] = {s: np.asarray(v, dtype=np.int64 if s == "count" else np.float64) for s, v in st.items()}
    return out


def save_stats(stats: Stats, path: str | Path) -> None:
    """Write stats as JSON (atomic)."""
    atomic_write_json(path, stats_to_json(stats))


def load_stats(path: str | Path) -> Stats:
    """Read stats written by :func:`save_stats` or a LeRobot ``meta/stats.json``."""
    return stats_from_json(read_json(path, "stats file"))


# ---------------------------------------------------------------------------------------- dataset stats


class _Moments:
    """Running masked sums for per-position mean/std/min/max over chunks of frames."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.n = np.zeros(shape[:1], dtype=np.float64)  # (H,)
        self.s = np.zeros(shape, dtype=np.float64)  # (H, A)
        self.ss = np.zeros(shape, dtype=np.float64)
        self.lo = np.full(shape, np.inf)
        self.hi = np.full(shape, -np.inf)

    def add(self, x: np.ndarray, valid: np.ndarray) -> None:
        # x (n, H, A), valid (n, H)
        m = valid[..., None]
        self.n += valid.sum(axis=0)
        self.s += np.where(m, x, 0.0).sum(axis=0)
        self.ss += np.where(m, x * x, 0.0).sum(axis=0)
        self.lo = np.minimum(self.lo, np.where(m, x, np.inf).min(axis=0))
        self.hi = np.maximum(self.hi, np.where(m, x, -np.inf).max(axis=0))


def _floor(abs_stats: Mapping[str, np.ndarray], frac: float, floor_abs: float) -> np.ndarray:
    rng = np.asarray(abs_stats["max"], np.float64) - np.asarray(abs_stats["min"], np.float64)
    return np.maximum(frac * rng, floor_abs)


def relative_action_stats(
    action: np.ndarray,
    state: np.ndarray,
    starts: np.ndarray,
    stops: np.ndarray,
    horizon: int,
    absolute_action_dims: Iterable[int] = (),
    std_floor: np.ndarray | None = None,
    chunk: int = 2048,
) -> dict[str, np.ndarray]:
    """Stats of ``action[t+k] - state[t]`` over every frame t and chunk position k < ``horizon``.

    ``action`` (N, A), ``state`` (N, A), ``starts``/``stops`` (N,) per-frame episode bounds. Positions
    past the episode end (padded by the sampler) are excluded. Returns pooled (A,) stats plus
    ``mean_per_step``/``std_per_step``/``count_per_step`` over positions.
    """
    n, a = action.shape
    absdims = np.asarray(sorted(set(absolute_action_dims)), dtype=np.int64)
    mom = _Moments((horizon, a))
    keep: list[np.ndarray] = []
    per_frame_keep = max(1, _QUANTILE_SAMPLE // max(n, 1))
    k = np.arange(horizon)
    for t0 in range(0, n, chunk):
        t = np.arange(t0, min(n, t0 + chunk))
        raw = t[:, None] + k[None, :]  # (n, H)
        stop = stops[t][:, None]
        valid = raw < stop
        idx = np.minimum(raw, stop - 1)
        target = action[idx].astype(np.float64)  # (n, H, A)
        rel = target - state[t][:, None, :].astype(np.float64)
        if absdims.size:
            rel[..., absdims] = target[..., absdims]
        mom.add(rel, valid)
        # Quantile sample: a few valid positions per frame, evenly spread over the chunk.
        sel = rel[:, :: max(1, horizon // per_frame_keep)][valid[:, :: max(1, horizon // per_frame_keep)]]
        keep.append(sel)
    total = mom.n.sum()
    mean = mom.s.sum(axis=0) / total
    var = mom.ss.sum(axis=0) / total - mean**2
    std = np.sqrt(np.maximum(var, 0.0))
    cnt = np.maximum(mom.n, 1)[:, None]
    mean_k = mom.s / cnt
    std_k = np.sqrt(np.maximum(mom.ss / cnt - mean_k**2, 0.0))
    floor = np.zeros(a) if std_floor is None else np.asarray(std_floor, np.float64)
    out = {
        "min": mom.lo.min(axis=0),
        "max": mom.hi.max(axis=0),
        "mean": mean,
        "std": np.maximum(std, floor),
        "count": np.array([int(total)], dtype=np.int64),
        "mean_per_step": mean_k,
        "std_per_step": np.maximum(std_k, floor[None, :]),
        "count_per_step": mom.n.astype(np.int64),
        "std_floor": floor,
    }
    out.update(_quantiles(np.concatenate(keep, axis=0)))
    return out


def state_delta_stats(
    state: np.ndarray, starts: np.ndarray, frames: int, std_floor: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """Stats of ``state[t] - state[t - frames]`` over frames whose ``t - frames`` is inside the episode."""
    t = np.arange(len(state))
    valid = t - frames >= starts
    if not valid.any():
        raise ActlabError(
            "no frame has a state delta inside its episode",
            field="state_delta_frames",
            expected=f"episodes longer than {frames} frames",
            found=f"{frames}",
            fix="use a smaller state_delta_frames",
        )
    delta = state[t[valid]].astype(np.float64) - state[t[valid] - frames].astype(np.float64)
    out = feature_stats(delta)
    floor = np.zeros(state.shape[1]) if std_floor is None else np.asarray(std_floor, np.float64)
    out["std"] = np.maximum(out["std"], floor)
    out["std_floor"] = floor
    return out


def _image_stats_of(ds: LeRobotV3Dataset, key: str, samples: int, store: Any) -> dict:
    n = len(ds)
    idx = np.unique(np.linspace(0, n - 1, num=min(samples, n)).round().astype(np.int64))
    if store is not None and key in store.frames:
        return image_stats(np.asarray(store.frames[key][idx]), channels_first=True)
    return image_stats(ds.read_frames(key, idx))


def _store_digest(store: Any) -> str | None:
    keys = getattr(store, "meta", {}).get("keys") if store is not None else None
    if not isinstance(keys, dict):
        return None
    sums = {k: v.get("checksums") for k, v in sorted(keys.items()) if isinstance(v, dict)}
    return hashlib.sha256(json.dumps(sums).encode()).hexdigest()[:16]


def _cache_path(ds: LeRobotV3Dataset, args: Mapping[str, Any], cache_dir: Path | None) -> Path:
    key = hashlib.sha256(json.dumps([ds.fingerprint, args], sort_keys=True).encode()).hexdigest()[:20]
    return (cache_dir or cache_root() / "stats") / f"{key}.json"


def compute_stats(
    ds: LeRobotV3Dataset,
    relative_action_horizon: int | None = None,
    absolute_action_dims: Sequence[int] = (),
    state_delta_frames: int | None = None,
    *,
    image_samples: int = 512,
    std_floor_frac: float = 0.01,
    std_floor_abs: float = 1e-3,
    store: Any = None,
    use_cache: bool = True,
    cache_dir: str | Path | None = None,
    action_key: str = "action",
    state_key: str = "observation.state",
) -> Stats:
    """Stats for training: absolute per feature, plus ``action.relative`` and ``observation.state.delta``.

    Tabular stats come straight from the parquet columns; image stats from ``image_samples`` frames
    evenly spread over the dataset (read from ``store`` when given, else decoded). Results are cached
    under the cache dir, keyed by the dataset fingerprint and these arguments.
    """
    args = {
        "rel": relative_action_horizon,
        "absdims": sorted(int(d) for d in absolute_action_dims),
        "delta": state_delta_frames,
        "img": image_samples,
        "floor": [std_floor_frac, std_floor_abs],
        "keys": [action_key, state_key],
        # Image size the image stats come from: a resized/padded FrameStore gives other values than the
        # native frames (which a native FrameStore and the video decode share).
        "img_size": {
            k: store.image_size if store is not None and k in store.frames else None for k in ds.camera_keys
        },
        # The frames the image stats come from: a store rebuilt after a video was edited in place with
        # its size and mtime kept (the fingerprint the same) has other checksums (23rd fault run).
        "frames": _store_digest(store),
        # 2: a float feature stored as integers is refused since the sixth fault run; version 1 entries
        # computed from such columns (actions truncated to 0) were served by `data stats` with exit 0
        "v": 2,
    }
    for name, value in (("state_delta_frames", state_delta_frames), ("image_samples", image_samples)):
        if value is not None and value < 1:  # a 0-frame delta is all zeros; negative ones look ahead
            raise ActlabError(f"{name} must be >= 1", field=name, expected=">= 1", found=value)
    path = _cache_path(ds, args, Path(cache_dir) if cache_dir else None)
    # the files the stats were read from (the data files, and the videos decoded without a store): the
    # key's fingerprint hashes only the edges of a large file, so a middle edit with its size and mtime
    # kept was served the old stats (23rd fault run)
    sources = path.with_name(path.name + ".sources")
    if use_cache and path.is_file() and _cache_intact(path) and not _sources_moved(ds, sources):
        try:
            return load_stats(path)
        except ActlabError:
            pass  # a damaged cache entry is recomputed
    stats: Stats = {}
    for key in ds.numeric_keys:
        stats[key] = feature_stats(ds.column(key))
    for key in ds.camera_keys:
        stats[key] = _image_stats_of(ds, key, image_samples, store)
    if relative_action_horizon is not None or state_delta_frames is not None:
        for k in (action_key, state_key):
            if k not in ds.features:
                raise ActlabError(
                    f"relative stats need feature {k!r}",
                    file=ds.root / "meta/info.json",
                    field="features",
                    expected=k,
                    found=", ".join(ds.features),
                )
    if relative_action_horizon is not None:
        stats[f"{action_key}.relative"] = _relative(
            ds, relative_action_horizon, absolute_action_dims, stats, std_floor_frac, std_floor_abs, args
        )
    if state_delta_frames is not None:
        floor = _floor(stats[state_key], std_floor_frac, std_floor_abs)
        stats[f"{state_key}.delta"] = state_delta_stats(
            ds.column(state_key), ds.frame_episode_start, state_delta_frames, floor
        )
    if use_cache:
        decoded = [k for k in ds.camera_keys if store is None or k not in store.frames]
        atomic_write_json(sources, source_record(ds, decoded, data=True))
        save_stats(stats, path)
        atomic_write_text(_digest_path(path), _file_digest(path))
    return stats


def _sources_moved(ds: LeRobotV3Dataset, sources: Path) -> bool:
    """True when a file recorded beside a cache entry changed since (none recorded: an older entry,
    taken as it is)."""
    try:
        record = read_json(sources, "stats cache sources")
    except ActlabError:
        return False
    return sources_changed(ds, record) is not None


def _digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cache_intact(path: Path) -> bool:
    """A cache entry whose content is what was written: an entry edited or damaged in place would still
    parse, and its numbers would normalize a new policy without a word (an entry without a digest, from
    an older actlab, is recomputed too)."""
    try:
        return _digest_path(path).read_text(encoding="utf-8").strip() == _file_digest(path)
    except (OSError, UnicodeDecodeError):
        return False


def _relative(ds, horizon, absdims, stats, frac, floor_abs, args) -> dict:
    action_key, state_key = args["keys"]
    action, state = ds.column(action_key), ds.column(state_key)
    if horizon < 1:
        raise ActlabError(
            "relative_action_horizon must be >= 1", field="relative_action_horizon", found=horizon
        )
    if action.shape[1] != state.shape[1]:
        raise ActlabError(
            "relative actions need the action and the state in the same space",
            file=ds.root / "meta/info.json",
            field=f"{action_key}.shape",
            expected=f"same dimension as {state_key} ({state.shape[1]})",
            found=action.shape[1],
            fix="use absolute actions for this dataset",
        )
    bad = [d for d in absdims if not 0 <= d < action.shape[1]]
    if bad:
        raise ActlabError(
            "absolute_action_dims out of range",
            field="absolute_action_dims",
            expected=f"0..{action.shape[1] - 1}",
            found=bad,
        )
    floor = _floor(stats[action_key], frac, floor_abs)
    return relative_action_stats(
        action, state, ds.frame_episode_start, ds.frame_episode_stop, horizon, absdims, floor
    )
