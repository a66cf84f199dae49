"""Small policies for evaluation tests. They are real policies (they act on real envs), not fakes of
actlab.policies: the harness takes any object with reset()/select_action()."""

from __future__ import annotations

import numpy as np
import torch


class HoldPolicy:
    """Commands the same target every step; counts resets (the harness must reset before every episode)."""

    def __init__(self, target) -> None:
        self.target = torch.as_tensor(np.asarray(target, dtype=np.float32))
        self.resets = 0
        self.calls = 0

    def reset(self) -> None:
        self.resets += 1

    def select_action(self, obs: dict) -> torch.Tensor:
        self.calls += 1
        batch = obs["observation.state"].shape[0]
        return self.target.expand(batch, -1).clone()  # (B, A)


def pusht_hold_factory(env) -> HoldPolicy:
    """Picklable factory for worker processes (a factory gets the env it will act in)."""
    return HoldPolicy([300.0, 300.0])
