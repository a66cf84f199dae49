"""ACT temporal ensembling, online (as LeRobot's ``ACTTemporalEnsembler``) and the offline formula.

A chunk is predicted at every step; the action executed at time t is the weighted average of every
prediction made for t, ``sum_i w_i a_i / sum_i w_i`` with ``w_i = exp(-coeff * i)`` and ``i = 0`` the
*oldest* prediction (ACT paper; a positive coeff favours old predictions).
"""

from __future__ import annotations

import torch


def accumulation_dtype(device: torch.device) -> torch.dtype:
    """float64 for the running average where the device has it; MPS has no float64 (float32 there)."""
    return torch.float32 if device.type == "mps" else torch.float64


class TemporalEnsembler:
    """Online running weighted average over overlapping chunks (O(H) work per step)."""

    def __init__(self, coeff: float, chunk_size: int) -> None:
        self.chunk_size = chunk_size
        self.weights = torch.exp(-coeff * torch.arange(chunk_size, dtype=torch.float64))  # (H,)
        self.weights_cumsum = torch.cumsum(self.weights, dim=0)  # (H,)
        self.reset()

    def reset(self) -> None:
        """Forget every pending prediction (call between episodes)."""
        self.actions: torch.Tensor | None = None  # (B, H', A) running averages for the next H' steps
        self.counts: torch.Tensor | None = None  # (H',) predictions averaged into each position

    def update(self, chunk: torch.Tensor) -> torch.Tensor:
        """Add the chunk predicted now (B, H, A); return the action to execute now (B, A)."""
        dtype = accumulation_dtype(chunk.device)
        w = self.weights.to(chunk.device, dtype)
        wc = self.weights_cumsum.to(chunk.device, dtype)
        chunk64 = chunk.to(dtype)
        if self.actions is None:
            self.actions = chunk64.clone()
            self.counts = torch.ones(self.chunk_size, dtype=torch.long, device=chunk.device)
        else:
            # Position j already averages counts[j] older predictions: re-weight the running mean.
            c = self.counts  # (H-1,)
            avg = self.actions * wc[c - 1][None, :, None] + chunk64[:, :-1] * w[c][None, :, None]
            self.actions = torch.cat([avg / wc[c][None, :, None], chunk64[:, -1:]], dim=1)
            self.counts = torch.cat([(c + 1).clamp(max=self.chunk_size), c.new_ones(1)])
        action = self.actions[:, 0].to(chunk.dtype)
        self.actions, self.counts = self.actions[:, 1:], self.counts[1:]
        return action


def ensemble_offline(chunks: torch.Tensor, coeff: float) -> torch.Tensor:
    """Reference formula: chunks (T, B, H, A) predicted at steps 0..T-1 -> executed actions (T, B, A)."""
    n_steps, _, horizon, _ = chunks.shape
    out = []
    for t in range(n_steps):
        starts = range(max(0, t - horizon + 1), t + 1)  # oldest first
        preds = torch.stack([chunks[s, :, t - s] for s in starts]).double()  # (n, B, A)
        w = torch.exp(-coeff * torch.arange(len(starts), dtype=torch.float64))  # (n,)
        out.append((preds * w[:, None, None]).sum(0) / w.sum())
    return torch.stack(out).to(chunks.dtype)
