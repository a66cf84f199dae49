"""Fixtures of the RL tests: a tiny real ACT bundle as a base policy, with a matching LeRobot dataset."""

from __future__ import annotations

import pytest

IMG = 32  # px: the tiny base sees the sim's top camera at this size


@pytest.fixture(scope="session")
def rl_demos(make_dataset, tmp_path_factory):
    """A real LeRobot v3 dataset (2 episodes x 20 frames, top camera 32 px, 6-D state/action)."""
    return make_dataset(tmp_path_factory.mktemp("rl-demos"), episodes=2, length=20)


@pytest.fixture(scope="session")
def tiny_base(rl_demos, tmp_path_factory):
    """A tiny ACT bundle (random weights, chunks of 8, executes 4) built on ``rl_demos``' features/stats."""
    import torch

    from actlab.datasets import compute_stats, open_dataset
    from actlab.policies import ACTConfig, make_policy, save_policy

    torch.manual_seed(0)
    ds = open_dataset(rl_demos)
    cfg = ACTConfig(
        cameras=("observation.images.top",),
        chunk_size=8,
        n_action_steps=4,
        vision_backbone="cnn_small",
        pretrained_backbone_weights=None,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        latent_dim=8,
        n_vae_encoder_layers=1,
        dropout=0.0,
    )
    stats = compute_stats(ds, **cfg.stats_request())
    policy = make_policy(cfg, ds.features, stats, pretrained=False)
    return save_policy(policy, tmp_path_factory.mktemp("rl-base") / "base")
