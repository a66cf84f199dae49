"""The correction head: a small per-step MLP that corrects the executing chunk's action from the newest
observation (A2C2, "Leave No Observation Behind", arXiv 2509.23224), fitted to ACT and act_relative.

A chunk predicted from the observation of step ``t`` is executed over the following steps; at step
``t + k`` the head reads the newest state ``s[t+k]``, the chunk's planned action there ``p[k]`` and ``k``
(the steps since the chunk's observation, which under ``actlab eval --execution correct --latency D`` is
at least ``D``), and outputs a residual: the executed action is ``p[k] + r``. Residual and inputs are in
the policy's normalized action / state units (``(x - mean) / std`` of the dataset), so the residual
``r_n`` becomes ``p[k] + r_n * std_action``: exactly ``p[k]`` when the head outputs zero. Its last layer
is zero-initialised, so an untrained head changes nothing.

Two ways to train it:

- **With the policy** (``correction_head = true``): the head reads the arm's state only. For a sample at
  frame ``t`` the chunk comes from the same batch's observation at ``t`` and the head gets the state at
  ``t + k`` (the sampler's ``observation.state.future`` window), ``k`` uniform in ``0 .. H-1``, and learns
  ``a[t+k] - p[k]`` (L1, masked where ``t + k`` leaves the episode). The chunk ``p`` is the inference one
  (latent 0), computed without gradient: the head's loss reaches only the head. Images at a random
  ``t + k`` would cost ``chunk_size`` frames per sample while the chunk still trains, so this head sees
  the arm, not what moved in the cameras. Measured on the moving task (a belt that reverses), it lost to
  plain async at every delay.
- **Alone, on a trained policy** (``correction_only = true``, ``actlab train --init-from``; A2C2's
  recipe): every other weight is frozen, so each frame's chunk and backbone features are computed once.
  A sample at frame ``t`` is the newest observation, and its chunk is the one the frozen policy planned
  at ``t - k`` (``action.past_chunks``), exactly what the executor hands the head ``k`` steps into a
  chunk; the head learns ``a[t] - p_{t-k}[k]``. With ``correction_images`` it also reads the cameras'
  newest frame (spatial keypoints of the backbone's features, below): where the cube is now. On the
  moving task this head held the 10,000-step ACT within 1.5 points of sync at 133 and 267 ms, where
  plain async lost 10 (docs/evaluation.md).

At inference the head runs at every control step: one small MLP call (and, with images, one backbone
pass over the newest frame: ~1 ms for the demo's cnn_small on two 80 px cameras on one CPU core).
"""

from __future__ import annotations

import torch
from torch import nn


class CorrectionHead(nn.Module):
    """``(state_n (B, D), planned_n (B, A), k (B,) int64[, feats]) -> residual_n (B, A)``, normalized units.

    With ``cameras`` > 0 (``correction_images``) the head also reads each camera's backbone features of
    the newest frame, ``feats``: a list of ``(B, C', h, w)`` in camera order. Each camera's map goes
    through its own 1x1 conv to ``keypoints`` channels, and each channel gives where it fires (its spatial
    softmax's expected x and y in [-1, 1]) and how much (its mean): the position of a moving object is
    what a late chunk gets wrong, and a spatial softmax keeps position where average pooling drops it
    (Levine et al. 2016, the keypoints diffusion_policy's ResNet encoder uses too).
    """

    def __init__(
        self,
        state_dim: int,
        action_dim: int,
        chunk_size: int,
        hidden: int,
        cameras: int = 0,
        image_channels: int = 0,
        keypoints: int = 16,
    ) -> None:
        super().__init__()
        self.chunk_size = chunk_size
        self.keypoint_convs = nn.ModuleList(nn.Conv2d(image_channels, keypoints, 1) for _ in range(cameras))
        self.input_proj = nn.Linear(state_dim + action_dim + 3 * keypoints * cameras, hidden)
        self.step_embed = nn.Embedding(chunk_size, hidden)  # k: steps since the chunk's observation
        self.mlp = nn.Sequential(
            nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, action_dim)
        )
        # Zero residual at the start: an untrained head executes the chunk as it is.
        nn.init.zeros_(self.mlp[-1].weight)
        nn.init.zeros_(self.mlp[-1].bias)

    def forward(
        self,
        state_n: torch.Tensor,
        planned_n: torch.Tensor,
        k: torch.Tensor,
        feats: list[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        w = self.input_proj.weight
        parts = [state_n.to(w.dtype), planned_n.to(w.dtype)]
        if len(self.keypoint_convs):
            if feats is None or len(feats) != len(self.keypoint_convs):
                raise ValueError(
                    f"this correction head reads {len(self.keypoint_convs)} camera feature maps, "
                    f"got {0 if feats is None else len(feats)}"
                )
            parts += [keypoints(conv(f.to(w.dtype))) for conv, f in zip(self.keypoint_convs, feats)]
        x = self.input_proj(torch.cat(parts, dim=-1))  # (B, hidden)
        x = x + self.step_embed(k.clamp(0, self.chunk_size - 1)).to(x.dtype)  # (B, hidden)
        return self.mlp(x)  # (B, A)


def keypoints(maps: torch.Tensor) -> torch.Tensor:
    """``(B, K, h, w)`` -> ``(B, 3K)``: each channel's spatial-softmax expected x and y (in [-1, 1]) and
    its mean activation."""
    b, n, h, w = maps.shape
    attn = maps.flatten(2).softmax(-1).view(b, n, h, w)  # (B, K, h, w)
    ys = torch.linspace(-1.0, 1.0, h, device=maps.device, dtype=maps.dtype)
    xs = torch.linspace(-1.0, 1.0, w, device=maps.device, dtype=maps.dtype)
    x = (attn.sum(2) * xs).sum(-1)  # (B, K)
    y = (attn.sum(3) * ys).sum(-1)  # (B, K)
    return torch.cat([x, y, maps.mean((2, 3))], dim=-1)


def pick_steps(x: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``x`` (B, H, ...) at step ``k[b]`` of each row -> (B, ...) (a gather: no host sync)."""
    return x[torch.arange(x.shape[0], device=x.device), k]
