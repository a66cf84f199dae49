"""camera_fusion (tokens, mean, concat_mlp, gated) and n_obs_steps (K frames of context)."""

import pytest
import torch

from actlab.errors import ActlabError
from actlab.policies import make_policy
from conftest import make_batch, make_features, make_stats, tiny_act, tiny_relative

FUSIONS = ("tokens", "mean", "concat_mlp", "gated")
CAMS = ("top", "wrist")


def build(cfg, cameras=CAMS, hw=(32, 32)):
    torch.manual_seed(0)
    return make_policy(cfg, make_features(cameras=cameras, hw=hw), make_stats(horizon=cfg.chunk_size))


def _obs(seed: int, batch: int = 2) -> dict:
    g = torch.Generator().manual_seed(seed)
    obs = {"observation.state": torch.randn(batch, 6, generator=g)}
    for cam in CAMS:
        obs[f"observation.images.{cam}"] = torch.randint(
            0, 256, (batch, 3, 32, 32), generator=g, dtype=torch.uint8
        )
    return obs


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("fusion", FUSIONS)
def test_every_fusion_and_context_trains_with_a_gradient_on_every_parameter(fusion, k):
    policy = build(tiny_act(camera_fusion=fusion, n_obs_steps=k))
    policy.train()
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-3)
    losses = []
    for step in range(3):
        opt.zero_grad()
        loss, _ = policy(make_batch(policy, batch_size=4, seed=step))
        loss.backward()
        dead = [
            n
            for n, p in policy.named_parameters()
            if p.requires_grad and (p.grad is None or not p.grad.any())
        ]
        assert dead == [], f"step {step}"
        opt.step()
        losses.append(float(loss.detach()))
    assert all(torch.isfinite(torch.tensor(losses)))
    # image tokens per step: 2 cameras x 4x4 grid side by side, or one fused 4x4 grid
    per_step = 32 if fusion == "tokens" else 16
    assert policy._image_pos().shape == (k * per_step, 32)
    assert policy.encoder_1d_feature_pos_embed.num_embeddings == 1 + k
    assert hasattr(policy, "encoder_obs_time_embed") == (k > 1)


def test_context_offsets_are_only_the_frames_used():
    policy = build(tiny_act(n_obs_steps=3))
    assert policy.delta_indices == {
        "observation.state": [-2, -1, 0],
        "observation.images.top": [-2, -1, 0],
        "observation.images.wrist": [-2, -1, 0],
        "action": list(range(8)),
    }
    assert build(tiny_act()).delta_indices["observation.images.top"] == [0]


def test_select_action_feeds_the_last_k_observations_padded_with_the_first():
    policy = build(tiny_act(n_obs_steps=3, camera_fusion="gated", n_action_steps=1))
    policy.eval()
    obs = [_obs(i) for i in range(5)]

    def window(*frames):
        return {k: torch.stack([f[k] for f in frames], dim=1) for k in frames[0]}

    expected = [
        window(obs[0], obs[0], obs[0]),  # the episode's first observation fills the start
        window(obs[0], obs[0], obs[1]),
        window(obs[0], obs[1], obs[2]),
        window(obs[1], obs[2], obs[3]),
    ]
    policy.reset()
    for o, w in zip(obs, expected):
        torch.testing.assert_close(
            policy.select_action(o), policy.predict_action_chunk(w)[:, 0], rtol=0, atol=0
        )
    policy.reset()  # a new episode starts from its own first observation
    torch.testing.assert_close(
        policy.select_action(obs[4]),
        policy.predict_action_chunk(window(obs[4], obs[4], obs[4]))[:, 0],
        rtol=0,
        atol=0,
    )
    # the window changes the prediction (the past frames are really read)
    a = policy.predict_action_chunk(expected[3])
    b = policy.predict_action_chunk(window(obs[3], obs[3], obs[3]))
    assert not torch.equal(a, b)


@pytest.mark.parametrize("fusion", FUSIONS)
def test_cached_feature_windows_equal_image_windows(fusion):
    policy = build(tiny_act(n_obs_steps=3, camera_fusion=fusion, freeze_backbone=True))
    policy.eval()
    batch = make_batch(policy)
    cached = {k: v for k, v in batch.items() if not k.startswith("observation.images.")}
    for key in policy.camera_keys:
        frames = batch[key].flatten(0, 1)  # (B*3, C, H, W): features are computed per frame
        with torch.no_grad():
            f = policy.encode_images(key, frames)
        cached[key + ".features"] = f.view(*batch[key].shape[:2], *f.shape[1:])  # (B, 3, C', h, w)
    torch.testing.assert_close(policy(cached)[0], policy(batch)[0], rtol=1e-6, atol=1e-6)


def test_act_relative_with_context():
    policy = build(tiny_relative(n_obs_steps=3, obs_state_delta_frames=None, camera_fusion="mean"))
    loss, _ = policy(make_batch(policy))
    loss.backward()
    assert torch.isfinite(loss)
    policy.reset()
    assert policy.select_action(_obs(0)).shape == (2, 6)
    with pytest.raises(ActlabError, match="n_obs_steps"):
        tiny_relative(n_obs_steps=3, obs_state_delta_frames=2)


def test_fusion_and_context_errors():
    with pytest.raises(ActlabError, match="at least two"):
        build(tiny_act(camera_fusion="gated"), cameras=("top",))
    feats = make_features(cameras=("top",), hw=(32, 32))
    feats["observation.images.wrist"] = {"dtype": "video", "shape": [64, 64, 3], "names": None}
    torch.manual_seed(0)
    with pytest.raises(ActlabError, match="feature grids differ"):
        make_policy(tiny_act(camera_fusion="mean"), feats, make_stats(horizon=8))
    with pytest.raises(ActlabError, match="camera_fusion"):
        tiny_act(camera_fusion="concat")
    with pytest.raises(ActlabError, match="n_obs_steps"):
        tiny_act(n_obs_steps=0)
    policy = build(tiny_act(n_obs_steps=3))
    batch = make_batch(policy)
    batch["observation.images.top"] = batch["observation.images.top"][:, -1:]  # one frame, not three
    with pytest.raises(ActlabError, match="n_obs_steps"):
        policy(batch)
