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

from typing import Any

from actlab.training.config import AugmentConfig

GREY = (0.299, 0.587, 0.114)  # ITU-R BT.601 luma weights


def random_shift(x, pad: int, generator):
    """Shift each image of ``x`` ``(N, C, H, W)`` by up to ``pad`` pixels in x and y (edge replicate)."""
    import torch

    n, c, h, w = x.shape
    off = torch.randint(0, 2 * pad + 1, (n, 2), generator=generator, device=x.device) - pad  # (N, 2)
    rows = (torch.arange(h, device=x.device)[None, :] + off[:, :1]).clamp_(0, h - 1)  # (N, H)
    cols = (torch.arange(w, device=x.device)[None, :] + off[:, 1:]).clamp_(0, w - 1)  # (N, W)
    # Why a flat gather: one contiguous kernel, 3x faster on CPU than advanced indexing + permute,
    # and clamping the source index is exactly replicate padding without materializing the pad.
    src = (rows[:, :, None] * w + cols[:, None, :]).view(n, 1, h * w).expand(n, c, h * w)  # (N, C, H*W)
    return x.reshape(n, c, h * w).gather(2, src).view(n, c, h, w)


def colour_jitter(x, brightness: float, contrast: float, generator, frames_per_sample: int = 1):
    """Brightness then contrast jitter of ``x`` ``(N, 3, H, W)`` in ``[0, 1]``; factors in ``1 ± amount``.

    With ``frames_per_sample = T`` the N images are B windows of T consecutive frames, and each window
    gets one factor so its appearance stays consistent over time.
    """
    import torch

    b = x.shape[0] // frames_per_sample

    def factors(amount: float):  # (N, 1, 1, 1): one draw per sample, repeated over its frames
        f = 1 + (torch.rand(b, generator=generator, device=x.device) * 2 - 1) * amount
        return f.repeat_interleave(frames_per_sample).view(-1, 1, 1, 1).to(x.dtype)

    if brightness > 0:
        x = x * factors(brightness)
    if contrast > 0 and x.shape[1] == 3:
        weights = torch.tensor(GREY, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
        mean = (x * weights).sum(1, keepdim=True).mean((2, 3), keepdim=True)  # (N, 1, 1, 1)
        x = (x - mean) * factors(contrast) + mean
    return x.clamp(0.0, 1.0)


def augment_image(x, cfg: AugmentConfig, generator):
    """Augment a float image batch ``(B, C, H, W)`` or ``(B, T, C, H, W)``; one draw per sample."""
    if not cfg.enabled:
        return x
    shape = x.shape
    t = shape[1] if x.ndim == 5 else 1
    if cfg.shift_pad > 0:
        # (B, T*C, H, W): one shift per sample for its whole window
        folded = x.reshape(shape[0], -1, shape[-2], shape[-1])
        x = random_shift(folded, cfg.shift_pad, generator).reshape(shape)
    if cfg.brightness > 0 or cfg.contrast > 0:
        frames = x.reshape(-1, *shape[-3:])  # (B*T, C, H, W)
        x = colour_jitter(frames, cfg.brightness, cfg.contrast, generator, frames_per_sample=t).reshape(shape)
    return x


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
        x = x.float().div_(255.0)
        if cfg is not None:
            x = augment_image(x, cfg, generator)
        if channels_last and x.ndim == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        out[key] = x
    return out
