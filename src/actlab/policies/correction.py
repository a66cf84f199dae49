"""The correction head: a small per-step MLP that corrects the executing chunk's action from the newest
observation (A2C2, "Leave No Observation Behind", arXiv 2509.23224), fitted to ACT and act_relative.

A chunk predicted from the observation of step ``t`` is executed over the following steps; at step
``t + k`` the head reads the newest state ``s[t+k]``, the chunk's planned action there ``p[k]`` and ``k``
(the steps since the chunk's observation, which under ``actlab eval --execution correct --latency D`` is
at least ``D``), and outputs a residual: the executed action is ``p[k] + r``. Residual and inputs are in
the policy's normalized action / state units (``(x - mean) / std`` of the dataset), so the residual
``r_n`` becomes ``p[k] + r_n * std_action``: exactly ``p[k]`` when the head outputs zero. Its last layer
is zero-initialised, so an untrained head changes nothing.

What it reads, and why only the state: at inference the head runs at every control step, so it must
cost one small MLP call (measured in docs/policies.md), not a backbone pass over the cameras; in training
the sampler fetches fixed offsets per key, so images at a random ``t + k`` would cost ``chunk_size``
frames per sample, where the state at every step of the chunk is ``chunk_size x D`` floats. The head
therefore sees the arm (where it is against the plan), not the cameras: what it can correct is what the
state shows (the arm lagging or overshooting the plan, contact), not a target that moved in the images.

Training (the cheaper equivalent of drawing a chunk from ``t - k``): for a sample at frame ``t`` the
chunk comes from the same batch's observation at ``t`` and the head gets the state at ``t + k`` (the
sampler's ``observation.state.future`` window, offsets ``0 .. H-1``), ``k`` drawn uniformly from
``0 .. H-1`` per sample, and learns ``a[t+k] - p[k]`` (L1, masked where ``t + k`` leaves the episode).
This is the same triple (newest observation, planned action, steps since the chunk's observation) the
executor hands it, with the roles of ``t`` and ``t - k`` swapped, at one extra state window per sample.
The chunk ``p`` is the one inference would give: the latent at 0 (a CVAE's training chunk sees the true
actions through its latent, and its residuals would be too small), computed without gradient; the head's
loss reaches only the head, so the chunk's training is exactly what it is without it.
"""

from __future__ import annotations

import torch
from torch import nn


class CorrectionHead(nn.Module):
    """``(state_n (B, D), planned_n (B, A), k (B,) int64) -> residual_n (B, A)``, normalized units."""

    def __init__(self, state_dim: int, action_dim: int, chunk_size: int, hidden: int) -> None:
        super().__init__()
        self.chunk_size = chunk_size
        self.input_proj = nn.Linear(state_dim + action_dim, hidden)
        self.step_embed = nn.Embedding(chunk_size, hidden)  # k: steps since the chunk's observation
        self.mlp = nn.Sequential(
            nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, action_dim)
        )
        # Zero residual at the start: an untrained head executes the chunk as it is.
        nn.init.zeros_(self.mlp[-1].weight)
        nn.init.zeros_(self.mlp[-1].bias)

    def forward(self, state_n: torch.Tensor, planned_n: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        w = self.input_proj.weight
        x = self.input_proj(torch.cat([state_n, planned_n], dim=-1).to(w.dtype))  # (B, hidden)
        x = x + self.step_embed(k.clamp(0, self.chunk_size - 1)).to(x.dtype)  # (B, hidden)
        return self.mlp(x)  # (B, A)


def pick_steps(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``x`` (B, H, ...) at step ``k[b]`` of each row -> (B, ...) (a gather: no host sync)."""
    return x[torch.arange(x.shape[0], device=x.device), k]
