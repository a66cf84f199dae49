"""A new actlab policy for ``lerobot-train --policy.type=actlab_act|actlab_act_relative`` (the plugin).

LeRobot hands the plugin its dataset metadata; the policy's features and normalization statistics come
from the same dataset read by actlab (``compute_stats``: absolute statistics, and for act_relative the
relative-action statistics LeRobot does not compute), so a LeRobot-trained actlab policy normalizes
exactly as an actlab-trained one would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actlab.datasets import compute_stats, open_dataset
from actlab.errors import ActlabError
from actlab.policies import get_config_class, make_policy
from actlab.utils.config import from_dict, refused_value


def build_policy_for_dataset(fields: dict[str, Any], root: str | Path, dataset_stats: Any = None) -> Any:
    """actlab policy (fresh weights) for the LeRobot v3 dataset at ``root`` from config ``fields``."""
    cls = get_config_class(fields.get("type", "act"))
    try:
        cfg = from_dict(cls, {k: v for k, v in fields.items() if k != "type"}, where="policy.actlab_config")
    except ValueError as e:  # dim_model "x" or NaN: _coerce's ValueError was a traceback in lerobot-train
        raise refused_value(
            e,
            "--policy.actlab_config holds a value of the wrong type",
            field="policy.actlab_config",
            fix="give the field a value of its type (actlab train --help-config lists the fields and types)",
        ) from e
    if getattr(cfg, "obs_state_delta_frames", None) is not None:
        raise ActlabError(
            "state deltas need windows of the state alone; lerobot-train windows every observation key",
            field="obs_state_delta_frames",
            expected="null when training in lerobot-train",
            found=cfg.obs_state_delta_frames,
            fix="train it with actlab train (then export), or drop obs_state_delta_frames",
        )
    ds = open_dataset(root)
    stats = compute_stats(ds, **cfg.stats_request(), image_samples=64, use_cache=False)
    return make_policy(cfg, ds.features, stats)
