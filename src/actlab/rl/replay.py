"""Replay buffers on the training device, n-step returns, and RLPD's symmetric demo/online sampling.

Transitions are added one finished episode at a time (the n-step return needs the steps after each one):
``obs`` fields at step t, the [-1, 1] action, the n-step discounted reward sum, the discount to apply to
the bootstrap value (gamma^m, 0 when the episode terminated within those m steps) and the ``next_`` fields
at step t + m. A truncated episode (time limit) bootstraps; a terminated one (success) does not.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def nstep_transitions(
    steps: Sequence[dict[str, torch.Tensor]],
    final: dict[str, torch.Tensor],
    actions: Sequence[torch.Tensor],
    rewards: Sequence[float],
    terminated: bool,
    gamma: float,
    n: int,
) -> dict[str, torch.Tensor]:
    """One episode's transitions, stacked: ``steps[t]`` are the fields observed at step t (each a tensor
    without batch dim), ``final`` those after the last step; returns fields with a leading (T,) dim."""
    T = len(steps)
    obs_seq = [*steps, final]
    out: dict[str, list[torch.Tensor]] = {}
    rew, disc = [], []
    for t in range(T):
        m = min(n, T - t)
        rew.append(sum(gamma**k * rewards[t + k] for k in range(m)))
        done = terminated and t + m == T
        disc.append(0.0 if done else gamma**m)
        for key, value in obs_seq[t].items():
            out.setdefault(key, []).append(value)
        for key, value in obs_seq[t + m].items():
            out.setdefault("next_" + key, []).append(value)
    stacked = {k: torch.stack(v) for k, v in out.items()}
    stacked["action"] = torch.stack(list(actions)).float()
    stacked["reward"] = torch.tensor(rew, dtype=torch.float32)
    stacked["discount"] = torch.tensor(disc, dtype=torch.float32)
    return stacked


class ReplayBuffer:
    """A ring of transitions kept as preallocated tensors on ``device`` (uint8 images stay uint8)."""

    def __init__(self, capacity: int, device: str | torch.device = "cpu") -> None:
        self.capacity = capacity
        self.device = torch.device(device)
        self.data: dict[str, torch.Tensor] = {}
        self.ptr = 0  # next slot to write
        self.size = 0  # filled slots

    def __len__(self) -> int:
        return self.size

    def add(self, batch: dict[str, torch.Tensor]) -> None:
        """Append transitions (fields with a leading (N,) dim), overwriting the oldest when full."""
        n = len(batch["reward"])
        if not self.data:
            self.data = {
                k: torch.zeros((self.capacity, *v.shape[1:]), dtype=v.dtype, device=self.device)
                for k, v in batch.items()
            }
        idx = (torch.arange(n) + self.ptr) % self.capacity
        for k, v in batch.items():
            self.data[k][idx.to(self.device)] = v.to(self.device)
        self.ptr = (self.ptr + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, n: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """``n`` transitions drawn uniformly with replacement (indices from ``generator``, on the CPU)."""
        idx = torch.randint(0, self.size, (n,), generator=generator).to(self.device)
        return {k: v[idx] for k, v in self.data.items()}

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The filled part, in ring order (for a checkpoint)."""
        # clone: torch.save writes a view's whole storage, so a slice saved every row of the preallocated
        # ring (15.2 MB for 3000 transitions of 152 B: the capacity of 100000) into every checkpoint
        out = {k: v[: self.size].clone().cpu() for k, v in self.data.items()}
        out["_meta"] = torch.tensor([self.ptr, self.size, self.capacity])
        return out

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        ptr, size, capacity = (int(x) for x in state["_meta"])
        self.capacity, self.ptr, self.size = capacity, ptr, size
        self.data = {}
        for k, v in state.items():
            if k == "_meta":
                continue
            buf = torch.zeros((capacity, *v.shape[1:]), dtype=v.dtype, device=self.device)
            buf[:size] = v.to(self.device)
            self.data[k] = buf


def sample_mixed(
    online: ReplayBuffer, demos: ReplayBuffer | None, n: int, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """RLPD's symmetric sampling: half of the batch from demonstrations, half online (all online without
    demos)."""
    if demos is None or len(demos) == 0:
        return online.sample(n, generator)
    a, b = online.sample(n - n // 2, generator), demos.sample(n // 2, generator)
    return {k: torch.cat([a[k], b[k]]) for k in a if k in b}
