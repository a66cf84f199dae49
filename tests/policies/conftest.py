"""Synthetic features, stats and batches for policy tests (policies never read files)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actlab.policies import ACTConfig, ACTRelativeConfig

D = 6  # state = action = 6 joints (SO-101), gripper at index 5
IMG = 32  # tiny square images


def make_features(
    dim: int = D, cameras: tuple[str, ...] = ("top",), hw: tuple[int, int] = (IMG, IMG)
) -> dict:
    feats = {
        "observation.state": {"dtype": "float32", "shape": [dim], "names": [f"j{i}" for i in range(dim)]},
        "action": {"dtype": "float32", "shape": [dim], "names": [f"j{i}" for i in range(dim)]},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    }
    for cam in cameras:
        feats[f"observation.images.{cam}"] = {
            "dtype": "video",
            "shape": [hw[0], hw[1], 3],
            "names": ["height", "width", "channels"],
        }
    return feats


def _entry(mean: np.ndarray, std: np.ndarray) -> dict:
    return {"mean": mean, "std": std, "min": mean - 2 * std, "max": mean + 2 * std, "count": np.array([1000])}


def make_stats(dim: int = D, horizon: int = 8, seed: int = 0, cameras: tuple[str, ...] = ("top",)) -> dict:
    """Stats in the dataset layer's format (absolute, relative with per-step, state delta, images)."""
    rng = np.random.default_rng(seed)
    stats = {
        "observation.state": _entry(rng.normal(0, 0.5, dim), rng.uniform(0.5, 1.5, dim)),
        "action": _entry(rng.normal(0, 0.5, dim), rng.uniform(0.5, 1.5, dim)),
        "observation.state.delta": _entry(np.zeros(dim), rng.uniform(0.05, 0.2, dim)),
    }
    rel = _entry(rng.normal(0, 0.1, dim), rng.uniform(0.1, 0.5, dim))
    rel["mean_per_step"] = rng.normal(0, 0.1, (horizon, dim))
    rel["std_per_step"] = rng.uniform(0.1, 0.5, (horizon, dim))
    stats["action.relative"] = rel
    for cam in cameras:
        stats[f"observation.images.{cam}"] = _entry(np.full((3, 1, 1), 0.4), np.full((3, 1, 1), 0.2))
    return stats


def tiny_kwargs(**over) -> dict:
    kw = dict(
        chunk_size=8,
        n_action_steps=8,
        vision_backbone="cnn_small",
        pretrained_backbone_weights=None,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=2,
        n_decoder_layers=1,
        latent_dim=8,
        n_vae_encoder_layers=1,
        dropout=0.0,
    )
    kw.update(over)
    return kw


def tiny_act(**over) -> ACTConfig:
    return ACTConfig(**tiny_kwargs(**over))


def tiny_relative(**over) -> ACTRelativeConfig:
    kw = dict(rtc_max_delay=3, obs_state_delta_frames=2)
    kw.update(over)
    return ACTRelativeConfig(**tiny_kwargs(**kw))


def make_batch(policy, batch_size: int = 4, seed: int = 0, n_pad: int = 3) -> dict:
    """A training batch shaped by ``policy.delta_indices`` (uint8 images, padded tail on example 0)."""
    g = torch.Generator().manual_seed(seed)
    batch: dict[str, torch.Tensor] = {}
    for key, offsets in policy.delta_indices.items():
        t = len(offsets)
        if key == "action":
            batch[key] = torch.randn(batch_size, t, policy.action_dim, generator=g)
            pad = torch.zeros(batch_size, t, dtype=torch.bool)
            if n_pad:
                pad[0, t - n_pad :] = True
            batch["action_is_pad"] = pad
        elif key in ("observation.state", "observation.state.future"):
            batch[key] = torch.randn(batch_size, t, policy.state_dim, generator=g)
            batch[key + "_is_pad"] = torch.zeros(batch_size, t, dtype=torch.bool)
        elif key == "action.past_chunks":  # correction_only: the frozen policy's chunks of earlier frames
            batch[key] = torch.randn(batch_size, t, t, policy.action_dim, generator=g)
            batch[key + "_is_pad"] = torch.zeros(batch_size, t, dtype=torch.bool)
        else:
            c, h, w = policy.image_shapes[key]
            batch[key] = torch.randint(0, 256, (batch_size, t, c, h, w), generator=g, dtype=torch.uint8)
            batch[key + "_is_pad"] = torch.zeros(batch_size, t, dtype=torch.bool)
    return batch


def observation(batch: dict, policy) -> dict:
    """The inference observation (no time axis) of a training batch."""
    obs = {"observation.state": batch["observation.state"][:, -1]}
    for key in policy.camera_keys:
        obs[key] = batch[key][:, -1]
    return obs


@pytest.fixture
def features() -> dict:
    return make_features()


@pytest.fixture
def stats() -> dict:
    return make_stats()


@pytest.fixture(autouse=True)
def _one_torch_thread(one_torch_thread):
    """Every policy test at one torch thread (tests/conftest.py's one_torch_thread)."""
