"""Policies: ACT and ACT-relative (relative actions, state deltas, RTC prefix), checkpoint bundles.

Configs and the registry import without torch (so ``actlab ... --help`` and config validation stay light);
the modules, bundles and the RTC simulator load torch when first used::

    from actlab.policies import ACTConfig, make_policy, save_policy, load_policy

The contract the other packages are typed against (``TrainablePolicy``, ``InferencePolicy``,
``RolloutPolicy``, ``PolicyConfig``, ``FEATURES_SUFFIX``) is in ``actlab.policies.contract``.
See docs/policies.md and docs/internals.md (section actlab.policies).
"""

from __future__ import annotations

import importlib
from typing import Any

from actlab.policies.configs import ACTConfig, ACTRelativeConfig
from actlab.policies.contract import (
    FEATURES_SUFFIX,
    InferencePolicy,
    PolicyConfig,
    RolloutPolicy,
    TrainablePolicy,
    contract_problems,
)
from actlab.policies.registry import (
    POLICY_TYPES,
    config_classes,
    get_config_class,
    get_policy_class,
    make_policy,
)

# Heavy names (torch) resolved on first access.
_LAZY = {
    "ACTPolicy": "actlab.policies.act",
    "ACTRelativePolicy": "actlab.policies.act_relative",
    "to_relative": "actlab.policies.act_relative",
    "to_absolute": "actlab.policies.act_relative",
    "save_policy": "actlab.policies.bundle",
    "load_policy": "actlab.policies.bundle",
    "write_bundle": "actlab.policies.bundle",
    "TemporalEnsembler": "actlab.policies.ensemble",
    "Normalizer": "actlab.policies.normalize",
}

__all__ = [
    "FEATURES_SUFFIX",
    "POLICY_TYPES",
    "ACTConfig",
    "ACTRelativeConfig",
    "InferencePolicy",
    "PolicyConfig",
    "RolloutPolicy",
    "TrainablePolicy",
    "config_classes",
    "contract_problems",
    "get_config_class",
    "get_policy_class",
    "make_policy",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'actlab.policies' has no attribute {name!r}")
