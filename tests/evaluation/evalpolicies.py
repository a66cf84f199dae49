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


class ExpertChunkPolicy:
    """The sim's scripted expert exposed as a chunking policy: ``predict_action_chunk`` returns the next
    ``horizon`` actions of its plan, ``select_action`` executes them one by one. Bound to its env."""

    def __init__(self, env, horizon: int = 20) -> None:
        from actlab.sim import ExpertPolicy

        self.expert = ExpertPolicy(env)
        self.horizon = horizon
        self.t = 0

    def reset(self) -> None:
        self.expert.reset()
        self.t = 0

    def _plan(self, obs) -> np.ndarray:
        if self.expert._plan is None:
            self.expert.select_action(obs)  # makes the plan for the current scene
            self.expert._t = 0
        return self.expert._plan

    def predict_action_chunk(self, obs) -> torch.Tensor:
        plan = self._plan(obs)
        idx = np.minimum(np.arange(self.t, self.t + self.horizon), len(plan) - 1)
        return torch.from_numpy(plan[idx])[None]  # (1, H, 6)

    def select_action(self, obs) -> torch.Tensor:
        plan = self._plan(obs)
        action = plan[min(self.t, len(plan) - 1)]
        self.t += 1
        return torch.from_numpy(action)[None]  # (1, 6)


def expert_chunk_factory(env) -> ExpertChunkPolicy:
    return ExpertChunkPolicy(env)
