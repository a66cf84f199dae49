import torch

from actlab.training.augment import colour_jitter, prepare_images, random_shift
from actlab.training.config import AugmentConfig


def test_random_shift_is_a_clamped_translation():
    x = torch.arange(2 * 1 * 6 * 6, dtype=torch.float32).view(2, 1, 6, 6)
    g = torch.Generator().manual_seed(0)
    out = random_shift(x, 2, g)
    assert out.shape == x.shape
    g = torch.Generator().manual_seed(0)
    off = torch.randint(0, 5, (2, 2), generator=g) - 2  # the same draw random_shift made
    for i in range(2):
        dy, dx = off[i].tolist()
        rows = (torch.arange(6) + dy).clamp(0, 5)
        cols = (torch.arange(6) + dx).clamp(0, 5)
        assert torch.equal(out[i, 0], x[i, 0][rows][:, cols])


def test_shift_is_shared_by_the_frames_of_a_window():
    frame = torch.rand(1, 1, 3, 8, 8)
    x = frame.expand(4, 2, 3, 8, 8).clone()  # (B, T, C, H, W), both frames identical
    out = prepare_images(
        {"img": (x * 255).to(torch.uint8)},
        ["img"],
        AugmentConfig(shift_pad=3),
        torch.Generator().manual_seed(1),
    )["img"]
    assert out.shape == (4, 2, 3, 8, 8) and out.dtype == torch.float32
    assert torch.equal(out[:, 0], out[:, 1])
    assert not all(torch.equal(out[0], out[i]) for i in range(1, 4))  # samples get different shifts


def test_colour_jitter_bounds_and_determinism():
    x = torch.rand(16, 3, 5, 5)
    a = colour_jitter(x, 0.3, 0.3, torch.Generator().manual_seed(2))
    b = colour_jitter(x, 0.3, 0.3, torch.Generator().manual_seed(2))
    assert torch.equal(a, b)
    assert a.min() >= 0 and a.max() <= 1
    assert not torch.allclose(a, x)
    # brightness only: every image is scaled by one factor within [0.7, 1.3] (before clamping)
    c = colour_jitter(x * 0.5, 0.3, 0.0, torch.Generator().manual_seed(3))
    ratio = c / (x * 0.5)
    per_image = ratio.flatten(1)
    assert torch.allclose(per_image, per_image[:, :1].expand_as(per_image), atol=1e-5)
    assert per_image.min() >= 0.7 - 1e-6 and per_image.max() <= 1.3 + 1e-6


def test_prepare_without_augmentation_only_scales_and_leaves_other_keys():
    img = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
    state = torch.rand(2, 6)
    out = prepare_images({"img": img, "state": state}, ["img"], None, None, channels_last=True)
    assert torch.equal(out["img"], img.float() / 255)
    assert out["img"].is_contiguous(memory_format=torch.channels_last)
    assert out["state"] is state
