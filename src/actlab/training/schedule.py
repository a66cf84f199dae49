"""Learning-rate schedule: linear warmup, then cosine decay or a constant rate.

The shape is a pure function of the step (tested alone); :func:`build_scheduler` wraps it in a torch
``LambdaLR`` whose state (the step counter) is saved with every checkpoint.
"""

from __future__ import annotations

import math

from actlab.training.config import ScheduleConfig


def lr_factor(step: int, total_steps: int, cfg: ScheduleConfig) -> float:
    """Multiplier of the peak learning rate for optimizer step ``step`` (0-based) of ``total_steps``.

    Warmup ramps linearly from ``1/(warmup+1)`` to 1 so the very first step already moves the weights;
    cosine then decays from 1 at the end of warmup to ``min_lr_ratio`` at the last step.
    """
    if step < cfg.warmup_steps:
        return (step + 1) / (cfg.warmup_steps + 1)
    if cfg.kind == "constant":
        return 1.0
    decay_steps = max(1, total_steps - cfg.warmup_steps - 1)
    progress = min(1.0, (step - cfg.warmup_steps) / decay_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine


def build_scheduler(optimizer, total_steps: int, cfg: ScheduleConfig):
    """``LambdaLR`` applying :func:`lr_factor` to every param group's peak learning rate."""
    import torch

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, total_steps, cfg))


def sync_lr(scheduler) -> None:
    """Set every param group's learning rate to what ``scheduler`` gives at its current step.

    After ``optimizer.load_state_dict`` the groups hold the rate the *saved* schedule chose; when the
    total number of steps changed on resume, the current schedule's rate differs. Same formula as
    ``LambdaLR`` (``base_lr * factor``), so an unchanged schedule gives bitwise the same rate. A tensor
    learning rate (CUDA graphs) is updated in place, because a captured graph holds its address.
    """
    for group, base, fn in zip(scheduler.optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
        lr = base * fn(scheduler.last_epoch)
        if hasattr(group["lr"], "fill_"):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr
