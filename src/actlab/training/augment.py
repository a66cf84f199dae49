"""Image preparation and augmentation on the training device, vectorized over the batch.

Batches arrive with uint8 images ``(B, [T,] C, H, W)``. :func:`prepare_images` converts them to floating
``[0, 1]`` (the policy normalizes them itself) and, for training batches, applies

- random shift (DrQ / diffusion_policy): pad by ``p`` pixels replicating the border, crop back to
  ``H x W`` at a random offset. Implemented as a clamped gather, so no padded copy is materialized;
- colour jitter: a brightness factor, then a contrast factor around each image's grey mean.

One draw per (sample, camera), shared by the frames of a time window so motion stays consistent. All
randomness comes from the ``torch.Generator`` passed in (saved with checkpoints for a bitwise resume).
"""

from __future__ import annotations

import functools
from typing import Any

from actlab.training.config import AugmentConfig

GREY = (0.299, 0.587, 0.114)  # ITU-R BT.601 luma weights


@functools.lru_cache(maxsize=64)
def _arange(n: int, device):
    import torch

    return torch.arange(n, device=device)


@functools.lru_cache(maxsize=64)
def _const(values: tuple[float, ...], device):
    """Small constant tensors, made once per device (saves a host-to-device copy per batch)."""
    import torch

    return torch.tensor(values, device=device)


def random_shift(x, pad: int, generator):
    """Shift each image of ``x`` ``(N, C, H, W)`` by up to ``pad`` pixels in x and y (edge replicate)."""
    import torch

    n, c, h, w = x.shape
    off = torch.randint(-pad, pad + 1, (n, 2), generator=generator, device=x.device)  # (N, 2)
    rows = (_arange(h, x.device)[None, :] + off[:, :1]).clamp_(0, h - 1)  # (N, H)
    cols = (_arange(w, x.device)[None, :] + off[:, 1:]).clamp_(0, w - 1)  # (N, W)
    # Why a flat gather: one contiguous kernel, 3x faster on CPU than advanced indexing + permute,
    # and clamping the source index is exactly replicate padding without materializing the pad.
    src = (rows[:, :, None] * w + cols[:, None, :]).view(n, 1, h * w).expand(n, c, h * w)  # (N, C, H*W)
    return x.reshape(n, c, h * w).gather(2, src).view(n, c, h, w)


def colour_jitter(x, brightness: float, contrast: float, generator, frames_per_sample: int = 1):
    """Brightness then contrast jitter of ``x`` ``(N, 3, H, W)`` in ``[0, 1]``; factors in ``1 ± amount``.

    With ``frames_per_sample = T`` the N images are B windows of T consecutive frames, and each window
    gets one factor so its appearance stays consistent over time. Both factors come from one draw.
    """
    import torch

    n = x.shape[0]
    u = torch.rand(2, n // frames_per_sample, generator=generator, device=x.device)  # (2, B) in [0, 1)
    lo, span = (
        _const((1 - brightness, 1 - contrast), x.device),
        _const((2 * brightness, 2 * contrast), x.device),
    )
    f = torch.addcmul(lo.view(2, 1), u, span.view(2, 1)).to(x.dtype)  # (2, B): 1 - a + 2a*u in [1-a, 1+a)
    f = f.repeat_interleave(frames_per_sample, dim=1).view(2, n, 1, 1, 1)  # one factor per window
    b, c = f[0], f[1]  # (N, 1, 1, 1) each
    if contrast <= 0 or x.shape[1] != 3:
        return (x * b).clamp_(0.0, 1.0)
    grey = _const(GREY, x.device).to(x.dtype)
    mean = (x.mean((2, 3)) @ grey).view(n, 1, 1, 1)  # (N, 1, 1, 1) grey level before brightness
    # brightness then contrast around the brightened grey mean, fused: x*b*c + mean*b*(1 - c)
    return torch.addcmul(mean * b * (1 - c), x, b * c).clamp_(0.0, 1.0)


def augment_image(x, cfg: AugmentConfig, generator):
    """Augment an image batch ``(B, C, H, W)`` or ``(B, T, C, H, W)`` (uint8 or float); one draw per sample.

    The shift moves pixels and works on any dtype; colour jitter needs float ``[0, 1]`` images.
    """
    if not cfg.enabled:
        return x
    x = shift_images(x, cfg, generator)
    return jitter_images(x, cfg, generator)


def shift_images(x, cfg: AugmentConfig, generator):
    """Random shift of ``(B, [T,] C, H, W)``; one shift per sample for its whole window."""
    if cfg.shift_pad <= 0:
        return x
    shape = x.shape
    folded = x.reshape(shape[0], -1, shape[-2], shape[-1])  # (B, T*C, H, W)
    return random_shift(folded, cfg.shift_pad, generator).reshape(shape)


def jitter_images(x, cfg: AugmentConfig, generator):
    """Colour jitter of float ``(B, [T,] C, H, W)`` in ``[0, 1]``; one factor pair per sample."""
    if cfg.brightness <= 0 and cfg.contrast <= 0:
        return x
    shape = x.shape
    t = shape[1] if x.ndim == 5 else 1
    frames = x.reshape(-1, *shape[-3:])  # (B*T, C, H, W)
    return colour_jitter(frames, cfg.brightness, cfg.contrast, generator, frames_per_sample=t).reshape(shape)


def prepare_images(
    batch: dict[str, Any],
    image_keys: list[str],
    cfg: AugmentConfig | None,
    generator,
    channels_last: bool = False,
) -> dict[str, Any]:
    """uint8 images -> float ``[0, 1]`` (+ augmentation when ``cfg`` is given); other keys untouched."""
    import torch

    out = dict(batch)
    for key in image_keys:
        x = out.get(key)
        if x is None or x.dtype != torch.uint8:
            continue  # precomputed features (frozen backbone) or an absent camera
        if cfg is not None:
            x = shift_images(x, cfg, generator)  # on uint8: a quarter of the bytes to move
        x = x.float().div_(255.0)
        if cfg is not None:
            x = jitter_images(x, cfg, generator)
        if channels_last and x.ndim == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        out[key] = x
    return out
