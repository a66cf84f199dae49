"""Exponential moving average (EMA) of the weights, for checkpoints and validation.

``ema = d * ema + (1 - d) * w`` after every optimizer step, with the decay warmed up as
``d_n = min(decay, (1 + n) / (10 + n))`` after ``n`` updates (so the first updates do not drag the average
towards the random initial weights for thousands of steps). A single multi-tensor ``lerp`` per step: no
host sync, a few kernels whatever the number of tensors.

Averaged weights are what checkpoints hold and what validation measures (an average over the last ~1/(1-d)
steps varies less from checkpoint to checkpoint than the raw weights at one step); training itself
continues from the raw weights, which are saved with the optimizer state for resuming.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

# Keys under which the raw weights and the update count travel in the optimizer-state dict of a checkpoint.
RAW_WEIGHTS_KEY = "actlab_ema_raw_weights"
UPDATES_KEY = "actlab_ema_updates"


def ema_decay_at(decay: float, updates: int) -> float:
    """Decay used for update number ``updates`` (0-based): warmed up, never above ``decay``."""
    return min(decay, (1.0 + updates) / (10.0 + updates))


class WeightEMA:
    """EMA of every floating-point parameter of ``module`` (fp32 shadows on the module's device)."""

    def __init__(self, module: torch.nn.Module, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"EMA decay must be in (0, 1), not {decay}")
        self.module = module
        self.decay = decay
        self.updates = 0
        self.names = [n for n, p in module.named_parameters() if p.is_floating_point()]
        params = dict(module.named_parameters())
        self.params = [params[n] for n in self.names]
        self.shadow = [p.detach().float().clone() for p in self.params]
        self._raw: list[torch.Tensor] | None = None  # the raw weights while the average is swapped in

    @torch.no_grad()
    def update(self) -> None:
        """Fold the current weights into the average (call after each optimizer step)."""
        weight = 1.0 - ema_decay_at(self.decay, self.updates)
        current = [p.detach().float() for p in self.params]  # no copy for fp32 parameters
        torch._foreach_lerp_(self.shadow, current, weight)
        self.updates += 1

    @contextlib.contextmanager
    def swapped_in(self) -> Iterator[None]:
        """The averaged weights in the module for the duration of the block; the raw ones afterwards.

        Values are copied in place (a captured CUDA graph keeps the addresses of these very tensors).
        """
        if self._raw is not None:  # already swapped in (nested use)
            yield
            return
        with torch.no_grad():
            self._raw = [p.detach().clone() for p in self.params]
            for p, s in zip(self.params, self.shadow):
                p.copy_(s)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, r in zip(self.params, self._raw):
                    p.copy_(r)
            self._raw = None

    def state_for_checkpoint(self) -> dict[str, Any]:
        """The raw weights (CPU) and the update count, to be saved beside a checkpoint of averaged weights
        (also while the average is swapped in: the raw weights are then the ones set aside)."""
        raw = self._raw if self._raw is not None else [p.detach() for p in self.params]
        return {
            RAW_WEIGHTS_KEY: {n: r.cpu().clone() for n, r in zip(self.names, raw)},
            UPDATES_KEY: torch.tensor(self.updates),
        }

    @torch.no_grad()
    def restore_from_checkpoint(self, state: dict[str, Any]) -> None:
        """The module currently holds the checkpoint's averaged weights: they become the average again, and
        the raw weights saved beside them go back into the module."""
        raw = state[RAW_WEIGHTS_KEY]
        for s, p in zip(self.shadow, self.params):
            s.copy_(p.detach().float())
        for n, p in zip(self.names, self.params):
            p.copy_(raw[n].to(p.device, p.dtype))
        self.updates = int(state[UPDATES_KEY])
