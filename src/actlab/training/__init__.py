"""Training: config and presets, train step, loop, checkpoints and resume, DDP, overfit, batch-size finder.

Importing this package (and its config and presets) does not import torch; ``train``, ``build_run``
and ``overfit_config`` load the heavy modules on first use.

    from actlab.training import get_preset, train
    cfg = with_dataset(get_preset("so101_sim_cpu"), "runs/demo/data")
    summary = train(cfg, "runs/demo")
"""

from actlab.training.config import TrainConfig, apply_train_overrides, config_from_dict, config_to_dict
from actlab.training.presets import get_preset, list_presets, with_dataset

_LAZY = {
    "train": "actlab.training.loop",
    "overfit_config": "actlab.training.loop",
    "load_run_config": "actlab.training.loop",
    "RunSummary": "actlab.training.loop",
    "build_run": "actlab.training.build",
    "TrainRun": "actlab.training.build",
    "read_metrics": "actlab.lifecycle.metrics_log",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'actlab.training' has no attribute {name!r}")


__all__ = [
    "RunSummary",
    "TrainConfig",
    "TrainRun",
    "apply_train_overrides",
    "build_run",
    "config_from_dict",
    "config_to_dict",
    "get_preset",
    "list_presets",
    "load_run_config",
    "overfit_config",
    "read_metrics",
    "train",
    "with_dataset",
]
