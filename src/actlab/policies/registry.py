"""Policy registry: type name -> config class and policy class (torch is imported only by make_policy)."""

from __future__ import annotations

import importlib
from typing import Any

from actlab.policies.configs import ACTConfig, ACTRelativeConfig
from actlab.policies.contract import PolicyConfig, TrainablePolicy
from actlab.utils.config import apply_overrides, check_override_key, unknown_name_error

# Registered policy types with a one-line description.
POLICY_TYPES: dict[str, str] = {
    "act": "ACT (CVAE + transformer, action chunks), LeRobot's defaults",
    "act_relative": "ACT with state-relative actions, state deltas and RTC prefix conditioning",
}

# Each config class satisfies PolicyConfig and each policy class TrainablePolicy (actlab.policies.contract;
# tests/policies/test_contract.py builds every type and checks).
_CONFIGS: dict[str, type[PolicyConfig]] = {"act": ACTConfig, "act_relative": ACTRelativeConfig}
_CLASSES: dict[str, str] = {
    "act": "actlab.policies.act:ACTPolicy",
    "act_relative": "actlab.policies.act_relative:ACTRelativePolicy",
}


def config_classes() -> dict[str, type[PolicyConfig]]:
    """``{type name: config class}`` for every registered policy."""
    return dict(_CONFIGS)


def get_config_class(type_name: str) -> type[PolicyConfig]:
    """The config class of a policy type; an unknown name fails with a did-you-mean."""
    if type_name not in _CONFIGS:
        raise unknown_name_error("policy type", str(type_name), _CONFIGS, fix="actlab policy info lists them")
    return _CONFIGS[type_name]


def get_policy_class(type_name: str) -> type[TrainablePolicy]:
    """The policy class (an ``nn.Module``) of a policy type; imports torch."""
    get_config_class(type_name)
    module, name = _CLASSES[type_name].split(":")
    return getattr(importlib.import_module(module), name)


def make_policy(
    cfg: PolicyConfig, features: dict[str, Any], stats: dict[str, Any], pretrained: bool = True
) -> TrainablePolicy:
    """Build the policy for ``cfg`` (its ``type`` picks the class) from dataset features and stats.

    ``pretrained=False`` skips downloading backbone weights (load_policy: the bundle has the weights).
    """
    type_name = getattr(cfg, "type", None)
    cls = get_policy_class(type_name)
    if not isinstance(cfg, get_config_class(type_name)):
        cfg_cls = get_config_class(type_name)
        raise unknown_name_error("policy config", type(cfg).__name__, [cfg_cls.__name__])
    return cls(cfg, features, stats, pretrained=pretrained)


def apply_config_overrides(cfg: PolicyConfig, overrides: list[str] | tuple[str, ...]) -> PolicyConfig:
    """``apply_overrides`` for a bare policy config: a ``policy.`` prefix on the keys is optional."""
    for item in overrides:  # as written: `policy..dim_model` was "unknown config key ''" once stripped
        if "=" in item:
            check_override_key(item)
    return apply_overrides(cfg, [o.removeprefix("policy.") for o in overrides])
