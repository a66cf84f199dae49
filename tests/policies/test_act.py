import warnings

import pytest
import torch

from actlab.errors import ActlabError
from actlab.policies import make_policy
from actlab.policies.ensemble import TemporalEnsembler, ensemble_offline
from conftest import (
    make_batch,
    make_features,
    make_stats,
    observation,
    tiny_act,
    tiny_relative,
)


def build(cfg, cameras=("top",), hw=(32, 32), **stats_kw):
    torch.manual_seed(0)
    return make_policy(
        cfg, make_features(cameras=cameras, hw=hw), make_stats(horizon=cfg.chunk_size, **stats_kw)
    )


@pytest.mark.parametrize("n_decoder_layers", [1, 7])
@pytest.mark.parametrize("make_cfg", [tiny_act, tiny_relative], ids=["act", "act_relative"])
@pytest.mark.parametrize("pre_norm", [False, True])
def test_every_trainable_parameter_gets_a_gradient(make_cfg, n_decoder_layers, pre_norm):
    policy = build(make_cfg(n_decoder_layers=n_decoder_layers, pre_norm=pre_norm), cameras=("top", "wrist"))
    policy.train()
    torch.manual_seed(1)
    loss, metrics = policy(make_batch(policy, batch_size=8))
    loss.backward()
    assert torch.isfinite(loss)
    assert set(metrics) >= {"l1_loss", "kld_loss", "loss"}
    assert all(v.ndim == 0 and not v.requires_grad for v in metrics.values())
    dead = [
        n for n, p in policy.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.any())
    ]
    assert dead == []
    assert len(policy.decoder.layers) == n_decoder_layers


@pytest.mark.parametrize("make_cfg", [tiny_act, tiny_relative], ids=["act", "act_relative"])
def test_padded_steps_change_the_loss_by_exactly_nothing(make_cfg):
    policy = build(make_cfg(dropout=0.1))
    policy.train()
    batch = make_batch(policy, batch_size=4, n_pad=5)
    pad = batch["action_is_pad"]
    other = dict(batch)
    other["action"] = batch["action"].clone()
    other["action"][pad] = float("nan")  # anything at all at padded steps
    other["action"][0, -1, 0] = 1e30
    results = []
    for b in (batch, other):
        policy.zero_grad()
        torch.manual_seed(3)  # same dropout, latent noise and RTC prefix lengths
        loss, _ = policy(b)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in policy.parameters()]))
    assert torch.equal(results[0][0], results[1][0])
    assert all(torch.equal(a, b) for a, b in zip(results[0][1], results[1][1]))


def test_l1_is_the_mean_over_unpadded_steps():
    policy = build(tiny_act())
    policy.eval()  # latent 0: the loss is the L1 of the inference prediction
    batch = make_batch(policy, batch_size=3, n_pad=5)
    _, metrics = policy(batch)
    pred = policy.predict_action_chunk(observation(batch, policy))
    norm = policy.normalizer
    err = (norm.normalize("action", pred) - norm.normalize("action", batch["action"])).abs()
    keep = ~batch["action_is_pad"]
    expected = err[keep].mean()
    torch.testing.assert_close(metrics["l1_loss"], expected, rtol=1e-5, atol=1e-6)
    assert metrics["kld_loss"] == 0


def test_batch_shape_errors_are_clear():
    policy = build(tiny_act())
    batch = make_batch(policy)
    bad = dict(batch, action_is_pad=batch["action_is_pad"][:, :-1])
    with pytest.raises(ActlabError, match="action_is_pad"):
        policy(bad)
    bad = dict(batch, action_is_pad=batch["action_is_pad"].float())
    with pytest.raises(ActlabError, match="bool mask"):
        policy(bad)
    bad = dict(batch, action=batch["action"][:, :5])
    with pytest.raises(ActlabError, match="wrong shape") as e:
        policy(bad)
    assert "chunk_size=8" in str(e.value)
    bad = {k: v for k, v in batch.items() if k != "observation.images.top"}
    with pytest.raises(ActlabError, match="no images for camera"):
        policy(bad)


def test_vae_key_padding_mask_hides_padded_actions():
    policy = build(tiny_act())
    policy.train()
    batch = make_batch(policy, batch_size=2, n_pad=4)
    seen = {}

    def hook(module, args):
        seen["keep"] = args[2]

    handle = policy.vae_encoder.register_forward_pre_hook(hook)
    policy(batch)
    handle.remove()
    keep = seen["keep"]
    assert keep.shape == (2, 2 + 8) and keep.dtype == torch.bool
    assert keep[:, :2].all()  # cls and state tokens
    assert torch.equal(keep[:, 2:], ~batch["action_is_pad"])


def test_images_uint8_and_float_agree_and_channels_last():
    policy = build(tiny_act()).eval()
    batch = make_batch(policy)
    obs = observation(batch, policy)
    ref = policy.predict_action_chunk(obs)
    as_float = dict(obs, **{"observation.images.top": obs["observation.images.top"].float() / 255})
    torch.testing.assert_close(policy.predict_action_chunk(as_float), ref, rtol=1e-5, atol=1e-5)
    cl = dict(
        obs,
        **{
            "observation.images.top": obs["observation.images.top"].contiguous(
                memory_format=torch.channels_last
            )
        },
    )
    torch.testing.assert_close(policy.predict_action_chunk(cl), ref, rtol=1e-5, atol=1e-5)


def test_cameras_share_one_backbone_and_every_camera_is_used():
    policy = build(tiny_act(), cameras=("top", "wrist")).eval()
    assert policy.encoder_cam_pos.shape == (2 * 4 * 4, 32)  # two 4x4 cnn_small grids at 32 px
    batch = make_batch(policy)
    obs = observation(batch, policy)
    ref = policy.predict_action_chunk(obs)
    for key in policy.camera_keys:
        changed = dict(obs, **{key: 255 - obs[key]})
        assert not torch.allclose(policy.predict_action_chunk(changed), ref)
    # The batched call over both cameras equals one call per camera.
    tokens = policy._image_tokens(obs)
    parts = [
        policy.encoder_img_feat_input_proj(policy.encode_images(k, obs[k])).flatten(2).transpose(1, 2)
        for k in policy.camera_keys
    ]
    torch.testing.assert_close(tokens, torch.cat(parts, dim=1), rtol=1e-5, atol=1e-5)


def test_cameras_of_different_sizes_and_downscale():
    feats = make_features(cameras=("top",), hw=(48, 64))
    feats["observation.images.wrist"] = {
        "dtype": "video",
        "shape": [32, 32, 3],
        "names": ["height", "width", "channels"],
    }
    policy = make_policy(tiny_act(), feats, make_stats())
    grids = [policy._feature_grid(k) for k in policy.camera_keys]
    assert grids == [(6, 8), (4, 4)]  # top 48x64 -> stride 8; wrist 32x32
    out = policy.predict_action_chunk(observation(make_batch(policy), policy))
    assert out.shape == (4, 8, 6)
    policy = make_policy(tiny_act(downscale_img_square=40), feats, make_stats())
    assert [policy._feature_grid(k) for k in policy.camera_keys] == [(5, 5), (5, 5)]
    assert policy.predict_action_chunk(observation(make_batch(policy), policy)).shape == (4, 8, 6)


def test_state_only_policy():
    policy = build(tiny_act(), cameras=())
    assert policy.delta_indices == {"observation.state": [0], "action": list(range(8))}
    loss, _ = policy(make_batch(policy))
    loss.backward()
    assert not hasattr(policy, "backbone")


@pytest.mark.parametrize("make_cfg", [tiny_act, tiny_relative], ids=["act", "act_relative"])
def test_frozen_backbone_cached_features_match_images(make_cfg):
    policy = build(make_cfg(freeze_backbone=True), cameras=("top", "wrist"))
    assert not any(p.requires_grad for p in policy.backbone.parameters())
    batch = make_batch(policy)
    cached = {k: v for k, v in batch.items() if not k.startswith("observation.images.")}
    for key in policy.camera_keys:
        frames = batch[key][:, -1]  # (B, C, H, W) uint8, as a trainer caches per frame
        with torch.no_grad():
            cached[key + ".features"] = policy.encode_images(key, frames)[:, None]  # (B, 1, C', h, w)
    policy.eval()
    l_img, _ = policy(batch)
    l_feat, _ = policy(cached)
    torch.testing.assert_close(l_feat, l_img, rtol=1e-6, atol=1e-6)
    obs = observation(batch, policy)
    obs_feat = {"observation.state": obs["observation.state"]}
    obs_feat.update({k + ".features": cached[k + ".features"][:, 0] for k in policy.camera_keys})
    torch.testing.assert_close(policy.predict_action_chunk(obs_feat), policy.predict_action_chunk(obs))
    policy.train()
    loss, _ = policy(cached)
    loss.backward()
    names = {n for g in policy.param_groups(1e-3, 1e-4, 0.1) for n in [g["name"]]}
    assert not any(n.startswith("backbone") for n in names)


def test_param_groups_cover_every_trainable_parameter_once():
    policy = build(tiny_relative(), cameras=("top",))
    groups = policy.param_groups(lr=1e-3, backbone_lr=1e-4, weight_decay=0.01)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids))
    assert set(ids) == {id(p) for p in policy.parameters() if p.requires_grad}
    by_name = {g["name"]: g for g in groups}
    assert by_name["backbone"]["lr"] == 1e-4 and by_name["head"]["lr"] == 1e-3
    no_decay = {id(p) for g in groups if g["weight_decay"] == 0 for p in g["params"]}
    assert id(policy.decoder_pos_embed.weight) in no_decay
    assert id(policy.encoder.layers[0].norm1.weight) in no_decay
    assert id(policy.action_head.bias) in no_decay
    assert id(policy.action_head.weight) not in no_decay
    opt = torch.optim.AdamW(groups)  # the groups are valid optimizer input
    assert len(opt.param_groups) == len(groups)


def test_select_action_pops_a_queue_and_reset_clears_it():
    policy = build(tiny_act(n_action_steps=3)).eval()
    obs = observation(make_batch(policy, batch_size=2), policy)
    calls = []
    original = policy.predict_action_chunk

    def spy(o, prefix=None):
        calls.append(1)
        return original(o, prefix)

    policy.predict_action_chunk = spy
    chunk = original(obs)
    actions = [policy.select_action(obs) for _ in range(4)]
    assert len(calls) == 2  # steps 0 and 3
    for i in range(3):
        torch.testing.assert_close(actions[i], chunk[:, i])
    torch.testing.assert_close(actions[3], chunk[:, 0])
    policy.select_action(obs)
    policy.reset()
    policy.select_action(obs)
    assert len(calls) == 3  # reset dropped the queued actions


def test_predict_restores_training_mode():
    policy = build(tiny_act(dropout=0.5))
    policy.train()
    obs = observation(make_batch(policy), policy)
    a = policy.predict_action_chunk(obs)
    b = policy.predict_action_chunk(obs)
    assert policy.training
    assert torch.equal(a, b)  # no dropout, latent 0 at inference


def reference_ensemble(chunks: torch.Tensor, coeff: float) -> torch.Tensor:
    """The ACT paper's formula written out, the oracle of the tests: chunks (T, B, H, A) predicted at
    steps 0..T-1 -> executed actions (T, B, A), each the exp(-coeff * i) average (i = 0 the oldest) of
    every prediction made for its step."""
    n_steps, _, horizon, _ = chunks.shape
    out = []
    for t in range(n_steps):
        starts = range(max(0, t - horizon + 1), t + 1)  # oldest first
        preds = torch.stack([chunks[s, :, t - s] for s in starts]).double()  # (n, B, A)
        w = torch.exp(-coeff * torch.arange(len(starts), dtype=torch.float64))  # (n,)
        out.append((preds * w[:, None, None]).sum(0) / w.sum())
    return torch.stack(out).to(chunks.dtype)


def test_temporal_ensembler_online_equals_offline_formula():
    g = torch.Generator().manual_seed(0)
    chunks = torch.randn(25, 2, 6, 3, generator=g)  # (T, B, H, A)
    coeff = 0.3
    ens = TemporalEnsembler(coeff, chunk_size=6)
    online = torch.stack([ens.update(chunks[t]) for t in range(25)])
    torch.testing.assert_close(online, reference_ensemble(chunks, coeff), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ensemble_offline(chunks, coeff), online)
    # Hand check at t = 1: predictions from chunk 0 (older, weight 1) and chunk 1 (weight e^-coeff).
    w1 = torch.exp(torch.tensor(-coeff))
    torch.testing.assert_close(online[1], (chunks[0, :, 1] + w1 * chunks[1, :, 0]) / (1 + w1))


def test_select_action_with_temporal_ensembling():
    policy = build(tiny_act(n_action_steps=1, temporal_ensemble_coeff=0.01)).eval()
    g = torch.Generator().manual_seed(1)
    obs_seq = [
        {
            "observation.state": torch.randn(2, 6, generator=g),
            "observation.images.top": torch.randint(0, 256, (2, 3, 32, 32), generator=g, dtype=torch.uint8),
        }
        for _ in range(12)
    ]
    chunks = torch.stack([policy.predict_action_chunk(o) for o in obs_seq])  # (T, B, H, A)
    policy.reset()
    online = torch.stack([policy.select_action(o) for o in obs_seq])
    torch.testing.assert_close(online, reference_ensemble(chunks, 0.01), rtol=1e-5, atol=1e-6)
    policy.reset()
    torch.testing.assert_close(policy.select_action(obs_seq[5]), chunks[5, :, 0])  # reset forgets the past


def test_stats_errors_and_std_floor_warning():
    feats = make_features()
    stats = make_stats()
    del stats["action"]
    with pytest.raises(ActlabError, match="no entry for 'action'") as e:
        make_policy(tiny_act(), feats, stats)
    assert "stats_request" in e.value.fix
    stats = make_stats()
    stats["observation.state"]["std"] = stats["observation.state"]["std"][:5]
    with pytest.raises(ActlabError, match="wrong shape"):
        make_policy(tiny_act(), feats, stats)
    stats = make_stats()
    stats["observation.images.top"]["std"][:] = 0.002
    with pytest.warns(UserWarning, match="observation.images.top"):
        policy = make_policy(tiny_act(image_norm="dataset"), feats, stats)
    assert torch.all(policy.normalizer.get("observation.images.top").std == 0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ImageNet normalization ignores the degenerate dataset stds
        make_policy(tiny_act(), feats, stats)


def test_features_errors():
    feats = make_features()
    del feats["action"]
    with pytest.raises(ActlabError, match="no 'action'"):
        make_policy(tiny_act(), feats, make_stats())
    feats = make_features()
    feats["observation.images.top"]["shape"] = [32, 32, 4]
    with pytest.raises(ActlabError, match="3 channels"):
        make_policy(tiny_act(), feats, make_stats())


def test_inference_observation_errors_are_clear():
    policy = build(tiny_act()).eval()
    obs = observation(make_batch(policy, batch_size=2), policy)
    top = obs["observation.images.top"]
    cases = [
        ({"observation.state": obs["observation.state"]}, "observation.images.top"),
        (dict(obs, **{"observation.images.top": top.permute(0, 2, 3, 1)}), "observation.images.top"),  # HWC
        (dict(obs, **{"observation.images.top": top[..., :16, :]}), "observation.images.top"),  # other size
        (dict(obs, **{"observation.state": obs["observation.state"][:, :5]}), "observation.state"),
        ({k: v for k, v in obs.items() if k != "observation.state"}, "observation.state"),
    ]
    for bad, field in cases:
        with pytest.raises(ActlabError) as e:
            policy.predict_action_chunk(bad)
        assert e.value.field == field
    # With downscale_img_square any image size is accepted (it is resized first).
    policy = build(tiny_act(downscale_img_square=32)).eval()
    small = dict(obs, **{"observation.images.top": top[..., :16, :24]})
    assert policy.predict_action_chunk(small).shape == (2, 8, 6)


def test_vae_encoder_output_ignores_padded_action_tokens():
    # forward() zeroes padded targets first, so only a direct call shows that the attention mask works.
    policy = build(tiny_act()).train()
    batch = make_batch(policy, batch_size=2, n_pad=4)
    keep = ~batch["action_is_pad"]
    state_n = policy._state_input(batch)
    targets = policy._action_targets(batch)
    torch.manual_seed(0)
    _, mu, logvar = policy._latent(state_n, targets, keep)
    other = targets.clone()
    other[~keep] = 100.0
    torch.manual_seed(0)
    _, mu2, logvar2 = policy._latent(state_n, other, keep)
    torch.testing.assert_close(mu2, mu, rtol=0, atol=1e-6)
    torch.testing.assert_close(logvar2, logvar, rtol=0, atol=1e-6)
    other = targets.clone()
    other[0, 0] += 1.0  # a real step changes the posterior
    _, mu3, _ = policy._latent(state_n, other, keep)
    assert not torch.allclose(mu3[0], mu[0])


def test_reparameterized_latent_and_kl_formula():
    policy = build(tiny_act(dropout=0.0)).train()
    batch = make_batch(policy, batch_size=4)
    seen = {}
    h1 = policy.vae_encoder_latent_output_proj.register_forward_hook(
        lambda m, a, out: seen.__setitem__("params", out.detach())
    )
    h2 = policy.encoder_latent_input_proj.register_forward_pre_hook(
        lambda m, a: seen.__setitem__("latent", a[0].detach())
    )
    torch.manual_seed(11)
    _, metrics = policy(batch)  # no dropout: the latent noise is the first draw of the generator
    h1.remove()
    h2.remove()
    mu, logvar = seen["params"].chunk(2, dim=-1)  # (B, latent) each: mu and log(sigma^2)
    torch.manual_seed(11)
    eps = torch.randn(mu.shape)
    torch.testing.assert_close(seen["latent"], mu + torch.exp(0.5 * logvar) * eps)
    # KL(N(mu, sigma^2) || N(0, 1)) summed over latent dims, averaged over the batch (as LeRobot).
    kl = (0.5 * (mu**2 + logvar.exp() - 1 - logvar)).sum(dim=1).mean()
    torch.testing.assert_close(metrics["kld_loss"], kl)
    torch.testing.assert_close(metrics["loss"], metrics["l1_loss"] + 10.0 * kl)
    # Inference: the VAE encoder does not run and the latent is 0.
    seen.clear()
    h2 = policy.encoder_latent_input_proj.register_forward_pre_hook(
        lambda m, a: seen.__setitem__("latent", a[0].detach())
    )
    policy.predict_action_chunk(observation(batch, policy))
    h2.remove()
    assert torch.equal(seen["latent"], torch.zeros(4, 8))


def test_ensembler_accumulates_in_a_dtype_the_device_has():
    from actlab.policies.ensemble import accumulation_dtype

    assert accumulation_dtype(torch.device("cpu")) == torch.float64
    assert accumulation_dtype(torch.device("mps")) == torch.float32  # MPS has no float64
