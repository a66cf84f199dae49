"""Parameter counts of a policy per top-level module (``actlab policy info``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.policies.registry import POLICY_TYPES, apply_config_overrides, get_config_class, make_policy
from actlab.utils import config as cfgutil


def synthetic_features(
    state_dim: int, action_dim: int, cameras: tuple[str, ...], image_shape: tuple[int, int]
) -> dict[str, Any]:
    """A feature spec (LeRobot info.json style) for sizing a policy without a dataset."""
    feats: dict[str, Any] = {
        "observation.state": {"dtype": "float32", "shape": [state_dim], "names": None},
        "action": {"dtype": "float32", "shape": [action_dim], "names": None},
    }
    for cam in cameras:
        key = cam if cam.startswith("observation.images.") else f"observation.images.{cam}"
        feats[key] = {
            "dtype": "video",
            "shape": [image_shape[0], image_shape[1], 3],
            "names": ["height", "width", "channels"],
        }
    return feats


def unit_stats(cfg: Any, features: dict[str, Any]) -> dict[str, Any]:
    """Mean-0 / std-1 stats of the right shapes: enough to build a policy for counting parameters."""
    import numpy as np

    s = features["observation.state"]["shape"][-1]
    a = features["action"]["shape"][-1]
    h = cfg.chunk_size
    stats: dict[str, Any] = {
        "observation.state": {"mean": np.zeros(s), "std": np.ones(s)},
        "observation.state.delta": {"mean": np.zeros(s), "std": np.ones(s)},
        "action": {"mean": np.zeros(a), "std": np.ones(a)},
        "action.relative": {
            "mean": np.zeros(a),
            "std": np.ones(a),
            "mean_per_step": np.zeros((h, a)),
            "std_per_step": np.ones((h, a)),
        },
    }
    for key in features:
        if key.startswith("observation.images."):
            stats[key] = {"mean": np.full((3, 1, 1), 0.5), "std": np.full((3, 1, 1), 0.25)}
    return stats


def count_parameters(policy: Any) -> list[dict[str, Any]]:
    """One row per top-level child module: name, parameters, trainable parameters."""
    rows = []
    for name, module in policy.named_children():
        params = list(module.parameters())
        if not params:
            continue
        rows.append(
            {
                "module": name,
                "params": sum(p.numel() for p in params),
                "trainable": sum(p.numel() for p in params if p.requires_grad),
            }
        )
    own = [p for p in policy.parameters(recurse=False)]
    if own:
        rows.append(
            {
                "module": "(policy)",
                "params": sum(p.numel() for p in own),
                "trainable": sum(p.numel() for p in own if p.requires_grad),
            }
        )
    return rows


def build_for_info(
    name_or_path: str,
    state_dim: int = 6,
    action_dim: int = 6,
    cameras: tuple[str, ...] = ("top",),
    image_shape: tuple[int, int] = (480, 640),
    overrides: tuple[str, ...] = (),
) -> tuple[Any, str]:
    """A policy from a registered type name (default config + overrides) or from a bundle directory."""
    path = Path(name_or_path)
    if path.is_dir():
        # lazy: bundle imports torch; actlab policy info on a bundle's json files needs none
        from actlab.policies.bundle import load_policy

        if overrides:
            raise ActlabError(
                "--set applies to a policy type, not to a saved bundle",
                field="--set",
                found=list(overrides),
                fix="drop --set, or pass a type name such as act",
            )
        return load_policy(path), f"bundle {path}"
    if name_or_path not in POLICY_TYPES:
        raise cfgutil.unknown_name_error(
            "policy type",
            name_or_path,
            POLICY_TYPES,
            fix="pass a policy type or an existing bundle directory",
        )
    cfg = get_config_class(name_or_path)()
    cfg = apply_config_overrides(cfg, overrides)
    feats = synthetic_features(state_dim, action_dim, cameras, image_shape)
    policy = make_policy(cfg, feats, unit_stats(cfg, feats), pretrained=False)
    cams = ", ".join(f"{c} {image_shape[0]}x{image_shape[1]}" for c in cameras) or "no cameras"
    return policy, f"{name_or_path} (state {state_dim}, action {action_dim}, {cams})"


def policy_info(name_or_path: str, **kwargs: Any) -> dict[str, Any]:
    """``{"source", "type", "rows", "total", "trainable"}`` for a policy type or bundle."""
    policy, source = build_for_info(name_or_path, **kwargs)
    rows = count_parameters(policy)
    return {
        "source": source,
        "type": policy.config.type,
        "rows": rows,
        "total": sum(p.numel() for p in policy.parameters()),
        "trainable": sum(p.numel() for p in policy.parameters() if p.requires_grad),
    }
