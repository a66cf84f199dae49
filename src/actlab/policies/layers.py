"""Transformer building blocks of ACT (DETR style), batch-first and compile-friendly.

Parameter names follow LeRobot's ACT (``self_attn.in_proj_weight``, ``linear1``, ``norm1`` ...) so its
layout is recognizable, but attention runs through ``F.scaled_dot_product_attention`` (fused kernels,
no attention-weight tensor is materialized) instead of ``nn.MultiheadAttention(need_weights=True)``.
Positions are added to queries and keys only (not values), as in DETR.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    """Multi-head attention with ``nn.MultiheadAttention``'s parameter names and SDPA inside."""

    def __init__(self, dim: int, n_heads: int, dropout: float) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.dropout = dropout
        self.in_proj_weight = nn.Parameter(torch.empty(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * dim))
        self.out_proj = nn.Linear(dim, dim)
        nn.init.xavier_uniform_(self.in_proj_weight)
        nn.init.zeros_(self.out_proj.bias)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # (B, S, D) -> (B, h, S, D/h)
        b, s, d = x.shape
        return x.view(b, s, self.n_heads, d // self.n_heads).transpose(1, 2)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_keep: torch.Tensor | None = None
    ) -> torch.Tensor:
        """q (B, Sq, D), k and v (B, Sk, D); key_keep (B, Sk) bool, False for keys to ignore."""
        w_q, w_k, w_v = self.in_proj_weight.chunk(3)
        b_q, b_k, b_v = self.in_proj_bias.chunk(3)
        q = self._heads(F.linear(q, w_q, b_q))  # (B, h, Sq, dh)
        k = self._heads(F.linear(k, w_k, b_k))  # (B, h, Sk, dh)
        v = self._heads(F.linear(v, w_v, b_v))
        mask = None if key_keep is None else key_keep[:, None, None, :]  # (B, 1, 1, Sk), broadcast over heads
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0
        )  # (B, h, Sq, dh)
        b, _, s, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, s, -1))  # (B, Sq, D)


def _activation(name: str):
    return F.gelu if name == "gelu" else F.relu


class EncoderLayer(nn.Module):
    """Self-attention + feed-forward, post-norm (ACT default) or pre-norm."""

    def __init__(self, dim: int, n_heads: int, dim_ff: int, dropout: float, activation: str, pre_norm: bool):
        super().__init__()
        self.self_attn = Attention(dim, n_heads, dropout)
        self.linear1 = nn.Linear(dim, dim_ff)
        self.linear2 = nn.Linear(dim_ff, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = _activation(activation)
        self.pre_norm = pre_norm

    def forward(
        self, x: torch.Tensor, pos: torch.Tensor, key_keep: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x (B, S, D); pos (1 or B, S, D) added to queries and keys."""
        skip = x
        if self.pre_norm:
            x = self.norm1(x)
        qk = x + pos
        x = skip + self.dropout1(self.self_attn(qk, qk, x, key_keep))
        if self.pre_norm:
            skip = x
            x = self.norm2(x)
        else:
            x = self.norm1(x)
            skip = x
        x = skip + self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))
        if not self.pre_norm:
            x = self.norm2(x)
        return x


class Encoder(nn.Module):
    """A stack of encoder layers; a final LayerNorm only with pre-norm (post-norm layers end normalized)."""

    def __init__(
        self,
        n_layers: int,
        dim: int,
        n_heads: int,
        dim_ff: int,
        dropout: float,
        activation: str,
        pre_norm: bool,
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [EncoderLayer(dim, n_heads, dim_ff, dropout, activation, pre_norm) for _ in range(n_layers)]
        )
        self.norm = nn.LayerNorm(dim) if pre_norm else nn.Identity()

    def forward(
        self, x: torch.Tensor, pos: torch.Tensor, key_keep: torch.Tensor | None = None
    ) -> torch.Tensor:
        for layer in self.layers:  # a loop over layers (static), not over positions
            x = layer(x, pos, key_keep)
        return self.norm(x)


class DecoderLayer(nn.Module):
    """DETR decoder layer: self-attention over queries, cross-attention to the encoder, feed-forward."""

    def __init__(self, dim: int, n_heads: int, dim_ff: int, dropout: float, activation: str, pre_norm: bool):
        super().__init__()
        self.self_attn = Attention(dim, n_heads, dropout)
        self.multihead_attn = Attention(dim, n_heads, dropout)
        self.linear1 = nn.Linear(dim, dim_ff)
        self.linear2 = nn.Linear(dim_ff, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.norm3 = nn.LayerNorm(dim)
        self.dropout = nn.Dropout(dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.activation = _activation(activation)
        self.pre_norm = pre_norm

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        pos: torch.Tensor,
        memory_pos: torch.Tensor,
        memory_keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x (B, H, D) queries; memory (B, S, D) encoder output; pos (1, H, D); memory_pos (1, S, D)."""
        skip = x
        if self.pre_norm:
            x = self.norm1(x)
        qk = x + pos
        x = skip + self.dropout1(self.self_attn(qk, qk, x))
        if self.pre_norm:
            skip = x
            x = self.norm2(x)
        else:
            x = self.norm1(x)
            skip = x
        x = skip + self.dropout2(self.multihead_attn(x + pos, memory + memory_pos, memory, memory_keep))
        if self.pre_norm:
            skip = x
            x = self.norm3(x)
        else:
            x = self.norm2(x)
            skip = x
        x = skip + self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))
        if not self.pre_norm:
            x = self.norm3(x)
        return x


class Decoder(nn.Module):
    """A stack of decoder layers, every one applied, then a LayerNorm."""

    def __init__(
        self,
        n_layers: int,
        dim: int,
        n_heads: int,
        dim_ff: int,
        dropout: float,
        activation: str,
        pre_norm: bool,
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [DecoderLayer(dim, n_heads, dim_ff, dropout, activation, pre_norm) for _ in range(n_layers)]
        )
        self.norm = nn.LayerNorm(dim)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        pos: torch.Tensor,
        memory_pos: torch.Tensor,
        memory_keep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, memory, pos, memory_pos, memory_keep)
        return self.norm(x)


def sinusoid_1d(n_positions: int, dim: int) -> torch.Tensor:
    """Fixed 1-D sinusoidal table (n_positions, dim): sin on even, cos on odd channels (ACT's VAE encoder)."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    rate = torch.pow(10000.0, 2 * (torch.arange(dim, dtype=torch.float64) // 2) / dim)  # (D,)
    angle = pos / rate  # (P, D)
    table = torch.where(torch.arange(dim) % 2 == 0, angle.sin(), angle.cos())
    return table.float()


def sinusoid_2d(h: int, w: int, dim: int) -> torch.Tensor:
    """Fixed 2-D sinusoidal positions (h * w, dim) in row-major token order (DETR / ACT).

    Half of the channels encode y, half x; coordinates are normalized to (0, 2*pi].
    """
    half = dim // 2
    eps, two_pi = 1e-6, 2 * math.pi
    y = torch.arange(1, h + 1, dtype=torch.float32) / (h + eps) * two_pi  # (h,)
    x = torch.arange(1, w + 1, dtype=torch.float32) / (w + eps) * two_pi  # (w,)
    freq = 10000 ** (2 * (torch.arange(half, dtype=torch.float32) // 2) / half)  # (half,)

    def enc(coord: torch.Tensor) -> torch.Tensor:  # (n,) -> (n, half), interleaved sin/cos pairs
        a = coord[:, None] / freq
        return torch.stack((a[:, 0::2].sin(), a[:, 1::2].cos()), dim=-1).flatten(1)

    pos_y = enc(y)[:, None, :].expand(h, w, half)  # (h, w, half)
    pos_x = enc(x)[None, :, :].expand(h, w, half)
    return torch.cat((pos_y, pos_x), dim=-1).reshape(h * w, dim)  # (h*w, dim)
