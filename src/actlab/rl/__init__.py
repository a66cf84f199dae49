"""Reinforcement learning in the sim: SAC from scratch or as a residual on a frozen chunk policy.

Public API::

    from actlab.rl import RLConfig, get_preset, train_rl, load_agent, rl_report

    summary = train_rl(get_preset("smoke"), "runs/rl_smoke")      # RLSummary: env steps, final eval
    agent = load_agent("runs/rl_smoke")                            # a RolloutPolicy (reset/select_action)
    rl_report("runs/rl_residual", episodes=100, seed=200000, out="runs/report")

Only the config is imported eagerly (no torch); the rest loads on first use. docs/rl.md has the design.
"""

from __future__ import annotations

import importlib
from typing import Any

from actlab.rl.config import PRESETS, RLConfig, get_preset, list_presets

_LAZY = {
    "train_rl": "actlab.rl.train",
    "load_agent": "actlab.rl.train",
    "RLSummary": "actlab.rl.train",
    "rl_report": "actlab.rl.report",
    "train_reward_model": "actlab.rl.reward_model",
    "RewardModelConfig": "actlab.rl.reward_model",
    "evaluate_agent": "actlab.rl.evaluate",
}

__all__ = ["PRESETS", "RLConfig", "get_preset", "list_presets", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'actlab.rl' has no attribute {name!r}")
