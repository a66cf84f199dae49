"""Normalization as a module inside the policy: mean/std buffers saved with the weights.

``Normalizer`` holds one ``(mean, std)`` pair per feature key as buffers named
``normalizer.entries.<key with dots as underscores>.mean`` / ``.std``, so a checkpoint can never lose its
statistics. Degenerate stds are made safe when built from dataset stats, with a warning that names the
dimensions: a near-constant joint would otherwise turn a small deviation at deployment into a huge input.
Joint-like features (state, actions, deltas: units unknown) use ``mode="unit"``: a dimension whose std is
at or below the floor is treated as constant, centred and not scaled (std 1, as diffusion_policy's
normalizer does), because raising it to a tiny floor such as 1e-3 would still amplify a 0.5-unit
deviation 500x. Images (``[0, 1]`` units, known) use ``mode="floor"``: ``max(std, floor)``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from actlab.errors import ActlabError

STATS_FIX = (
    "compute stats with actlab.datasets.compute_stats(ds, **cfg.stats_request()) for this policy config"
)


def _safe(key: str) -> str:
    return key.replace(".", "_")


class MeanStd(nn.Module):
    """A pair of buffers; ``mean``/``std`` broadcast against the trailing dims of the data."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", mean.float().clone())
        self.register_buffer("std", std.float().clone())


class Normalizer(nn.Module):
    """Per-key affine normalization ``(x - mean) / std`` with the statistics stored as buffers."""

    def __init__(self, entries: Mapping[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
        super().__init__()
        self.feature_keys = list(entries)
        self.entries = nn.ModuleDict({_safe(k): MeanStd(m, s) for k, (m, s) in entries.items()})

    def get(self, key: str) -> MeanStd:
        """The (mean, std) buffers of a feature key such as ``"observation.state"``."""
        return self.entries[_safe(key)]

    def normalize(self, key: str, x: torch.Tensor) -> torch.Tensor:
        """``(x - mean) / std``, broadcasting the stats over the leading dims of ``x``."""
        e = self.get(key)
        return (x - e.mean) / e.std

    def unnormalize(self, key: str, x: torch.Tensor) -> torch.Tensor:
        """``x * std + mean``: the inverse of :meth:`normalize`."""
        e = self.get(key)
        return x * e.std + e.mean


def stat_array(stats: Mapping[str, Any], key: str, field: str, shape: tuple[int, ...]) -> np.ndarray:
    """``stats[key][field]`` as a float array of ``shape``, or an ActlabError naming what is missing."""
    if key not in stats:
        raise ActlabError(
            f"normalization stats have no entry for {key!r}",
            field=key,
            expected=f"stats[{key!r}] with {field!r} of shape {shape}",
            found="keys " + ", ".join(sorted(stats)),
            fix=STATS_FIX,
        )
    entry = stats[key]
    if not isinstance(entry, Mapping):
        raise ActlabError(
            f"normalization stats for {key!r} are not a mapping of fields",
            field=key,
            expected='{"mean": [...], "std": [...], ...}',
            found=str(entry)[:120],
            fix=STATS_FIX,
        )
    if field not in entry:
        raise ActlabError(
            f"normalization stats for {key!r} have no {field!r}",
            field=f"{key}.{field}",
            expected=f"shape {shape}",
            found="fields " + ", ".join(sorted(entry)),
            fix=STATS_FIX,
        )
    try:
        arr = np.asarray(entry[field], dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ActlabError(
            f"normalization stats for {key!r} are not numbers",
            field=f"{key}.{field}",
            expected=f"numbers of shape {shape}",
            found=str(entry[field])[:120],
            fix=STATS_FIX,
        ) from e
    if arr.size == int(np.prod(shape)) and arr.shape != shape:
        arr = arr.reshape(shape)  # e.g. image stats given as (3,) instead of (3, 1, 1)
    if arr.shape != shape:
        raise ActlabError(
            f"normalization stats for {key!r} have the wrong shape",
            field=f"{key}.{field}",
            expected=str(shape),
            found=str(arr.shape),
            fix="the stats were computed for other features or another chunk size; " + STATS_FIX,
        )
    if not np.all(np.isfinite(arr)):
        raise ActlabError(
            f"normalization stats for {key!r} contain NaN or inf",
            field=f"{key}.{field}",
            expected="finite values",
            found=str(arr.tolist())[:200],
            fix="recompute the stats; check the dataset with `actlab data doctor`",
        )
    return arr


def floored(key: str, std: np.ndarray, floor: float, mode: str = "floor") -> np.ndarray:
    """A std safe to divide by, warning once with the positions that were changed.

    ``mode="floor"``: ``max(std, floor)``. ``mode="unit"``: positions with ``std <= floor`` (a dimension
    that never moved; compute_stats may already have raised it to exactly its own floor) become 1.
    """
    tol = floor * (1 + 1e-6)  # stats pass through JSON and float32: "exactly the floor" within rounding
    low = std <= tol if mode == "unit" else std < floor
    if np.any(low):
        idx = np.argwhere(low).tolist()
        what = "treated as constant: centred, not scaled (std 1)" if mode == "unit" else f"using {floor:g}"
        warnings.warn(
            f"normalization std of {key!r} is at or below {floor:g} at {len(idx)} position(s) "
            f"(first {idx[:6]}, smallest {float(std.min()):.3g}); there {what}",
            stacklevel=3,
        )
    if mode == "unit":
        return np.where(low, 1.0, std)
    return np.maximum(std, floor)


def mean_std(
    stats: Mapping[str, Any],
    key: str,
    shape: tuple[int, ...],
    floor: float,
    mean_field: str = "mean",
    std_field: str = "std",
    mode: str = "unit",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validated (mean, std) tensors for one stats entry, degenerate stds made safe (see :func:`floored`)."""
    mean = stat_array(stats, key, mean_field, shape)
    std = floored(key, stat_array(stats, key, std_field, shape), floor, mode)
    return torch.from_numpy(mean).float(), torch.from_numpy(std).float()
