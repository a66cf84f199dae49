"""ACT temporal ensembling: the one implementation, used by ACT's ``select_action`` (a chunk every step),
by :class:`actlab.policies.execution.ChunkExecutor`'s ``ensemble`` mode (a chunk every ``s`` steps,
arriving ``latency`` steps after its inference started) and offline (:func:`ensemble_offline`).

The action executed at step t is the weighted average of every live chunk's prediction for t,
``sum_i w_i a_i / sum_i w_i`` with ``w_i = exp(-coeff * i)`` and ``i = 0`` the *oldest* prediction (ACT
paper; a positive coeff favours old predictions). At one chunk per step this is LeRobot's
``ACTTemporalEnsembler`` (which keeps running averages instead of the chunks: the same actions up to
float64 rounding).
"""

from __future__ import annotations

import torch


def accumulation_dtype(device: torch.device) -> torch.dtype:
    """float64 for the weighted average where the device has it; MPS has no float64 (float32 there)."""
    return torch.float32 if device.type == "mps" else torch.float64


class TemporalEnsembler:
    """The chunks that still cover upcoming steps, and their weighted average for a step.

    ``add(chunk, start)``: a chunk ``(B, H, A)`` or ``(H, A)`` whose index k is the action for step
    ``start + k``; ``action(t)``: the average for step t over every added chunk that covers it (older
    chunks are dropped as t passes them). ``update(chunk)`` is the one-chunk-per-step use (ACT's
    ``select_action``): the chunk predicted now, and the action to execute now.
    """

    def __init__(self, coeff: float, chunk_size: int) -> None:
        self.chunk_size = chunk_size
        self.weights = torch.exp(-coeff * torch.arange(chunk_size, dtype=torch.float64))  # (H,), oldest first
        self.reset()

    def reset(self) -> None:
        """Forget every chunk (call between episodes)."""
        self.live: list[tuple[int, torch.Tensor]] = []  # (start step, chunk), oldest first
        self.t = 0  # the step update() acts at

    def add(self, chunk: torch.Tensor, start: int) -> None:
        """A chunk whose index 0 is the action for step ``start`` (``start`` never before the last one's)."""
        self.live.append((start, chunk))

    def action(self, t: int) -> torch.Tensor:
        """The weighted average of every live chunk's prediction for step ``t`` (``([B,] A)``, the chunks'
        dtype); t never goes back."""
        self.live = [(s, c) for s, c in self.live if t - s < self.chunk_size]
        if not self.live or t < self.live[0][0]:
            raise ValueError(f"no chunk covers step {t}")
        chunk = self.live[0][1]
        dtype = accumulation_dtype(chunk.device)
        preds = torch.stack([c[..., t - s, :] for s, c in self.live if s <= t]).to(dtype)  # (n, [B,] A)
        w = self.weights[: len(preds)].to(chunk.device, dtype).view(-1, *[1] * (preds.ndim - 1))  # (n, 1..)
        return ((preds * w).sum(0) / w.sum()).to(chunk.dtype)

    def update(self, chunk: torch.Tensor) -> torch.Tensor:
        """Add the chunk predicted now (B, H, A); return the action to execute now (B, A)."""
        self.add(chunk, self.t)
        action = self.action(self.t)
        self.t += 1
        return action


def ensemble_offline(chunks: torch.Tensor, coeff: float) -> torch.Tensor:
    """Chunks (T, B, H, A) predicted at steps 0..T-1 -> the executed actions (T, B, A)."""
    ens = TemporalEnsembler(coeff, chunks.shape[2])
    return torch.stack([ens.update(chunks[t]) for t in range(chunks.shape[0])])
