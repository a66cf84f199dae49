import pytest
import torch

from actlab.errors import ActlabError
from actlab.policies import make_policy, to_absolute, to_relative
from conftest import make_batch, make_features, make_stats, observation, tiny_act, tiny_relative


def build(cfg, cameras=("top",)):
    torch.manual_seed(0)
    return make_policy(
        cfg, make_features(cameras=cameras), make_stats(horizon=cfg.chunk_size, cameras=cameras)
    )


def test_relative_absolute_round_trip_is_exact():
    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([True, True, True, True, True, False])  # gripper (5) stays absolute
    # Joint values on a 2^-12 grid (like encoder ticks): differences and sums are exact in float32.
    actions = torch.randint(-4096, 4096, (4, 10, 6), generator=g).float() / 4096 * 3
    state = torch.randint(-4096, 4096, (4, 6), generator=g).float() / 4096 * 3
    rel = to_relative(actions, state, mask)
    assert torch.equal(to_absolute(rel, state, mask), actions)
    assert torch.equal(to_relative(to_absolute(rel, state, mask), state, mask), rel)
    assert torch.equal(rel[..., 5], actions[..., 5])  # absolute dim untouched, bit for bit
    assert torch.equal(rel[..., :5], actions[..., :5] - state[:, None, :5])
    # Arbitrary floats: within one rounding of the subtraction.
    actions, state = torch.randn(4, 10, 6, generator=g), torch.randn(4, 6, generator=g)
    back = to_absolute(to_relative(actions, state, mask), state, mask)
    torch.testing.assert_close(back, actions, rtol=0, atol=1e-6)
    assert torch.equal(back[..., 5], actions[..., 5])


def test_training_targets_are_relative_to_the_current_state_and_normalized_with_relative_stats():
    policy = build(tiny_relative())
    batch = make_batch(policy)
    targets = policy._action_targets(batch)  # (B, H, A) normalized relative
    cur = batch["observation.state"][:, -1]  # offsets [-2, 0]: the current state is the last one
    stats = make_stats(horizon=8)["action.relative"]
    mean = torch.as_tensor(stats["mean_per_step"]).float()
    std = torch.as_tensor(stats["std_per_step"]).float()
    expected = (to_relative(batch["action"], cur, policy.relative_mask) - mean) / std
    torch.testing.assert_close(targets, expected)
    # Unnormalize + to absolute recovers the actions (what predict_action_chunk does to the output).
    back = policy._to_actions(targets, batch)
    torch.testing.assert_close(back, batch["action"], rtol=0, atol=1e-5)


def test_pooled_relative_stats_option():
    policy = build(tiny_relative(relative_stats_per_step=False))
    assert policy.normalizer.get("action.relative").mean.shape == (6,)
    assert build(tiny_relative()).normalizer.get("action.relative").mean.shape == (8, 6)


def test_relative_stats_for_another_horizon_are_rejected():
    stats = make_stats(horizon=10)
    with pytest.raises(ActlabError, match="wrong shape") as e:
        make_policy(tiny_relative(), make_features(), stats)
    assert e.value.field == "action.relative.mean_per_step"


def test_prefix_actions_are_returned_exactly_and_condition_the_rest():
    policy = build(tiny_relative(rtc_max_delay=3)).eval()
    obs = observation(make_batch(policy, batch_size=2), policy)
    no_prefix = policy.predict_action_chunk(obs)
    prefix = torch.randn(2, 3, 6)
    out = policy.predict_action_chunk(obs, prefix=prefix)
    assert out.shape == (2, 8, 6)
    assert torch.equal(out[:, :3], prefix)
    assert not torch.allclose(out[:, 3:], no_prefix[:, 3:])  # the prefix tokens are read
    out2 = policy.predict_action_chunk(obs, prefix=prefix[:, :1])
    assert torch.equal(out2[:, :1], prefix[:, :1])
    torch.testing.assert_close(policy.predict_action_chunk(obs, prefix=prefix[:, :0]), no_prefix)


def test_prefix_is_re_expressed_against_the_current_state():
    # Shifting the state and the committed actions by the same offset (relative joints only) leaves the
    # normalized prefix unchanged, so the model sees the same tokens.
    policy = build(tiny_relative(rtc_max_delay=3))
    state = torch.randn(2, 6)
    prefix = torch.randn(2, 3, 6)
    shift = torch.tensor([0.5, -0.25, 1.0, 0.0, 0.75, 0.0])  # gripper not shifted
    a = policy._normalized_prefix(prefix, state)
    b = policy._normalized_prefix(prefix + shift, state + shift)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_prefix_errors():
    policy = build(tiny_relative(rtc_max_delay=3))
    obs = observation(make_batch(policy), policy)
    with pytest.raises(ActlabError, match="wrong shape"):
        policy.predict_action_chunk(obs, prefix=torch.randn(4, 4, 6))  # longer than rtc_max_delay
    act = build(tiny_act())
    with pytest.raises(ActlabError, match="not trained with an RTC prefix"):
        act.predict_action_chunk(observation(make_batch(act), act), prefix=torch.randn(4, 2, 6))


def test_training_prefix_uses_true_actions_and_the_pad_token():
    policy = build(tiny_relative(rtc_max_delay=3, obs_state_delta_frames=None))
    policy.train()
    batch = make_batch(policy, batch_size=64, n_pad=0)
    batch["action_is_pad"][1, 1:] = True  # example 1: only its first step is real
    targets = policy._action_targets(batch)
    keep = ~batch["action_is_pad"]
    torch.manual_seed(0)
    tokens = policy._prefix_tokens(batch, targets, keep, None)  # (B, M, D)
    pad = policy.rtc_pad_embed.weight[0]
    real = policy.rtc_prefix_proj(targets[:, :3])
    is_pad = (tokens == pad).all(-1)  # (B, M)
    is_real = torch.isclose(tokens, real).all(-1)
    assert torch.all(is_pad ^ is_real)
    lengths = (~is_pad).sum(1)
    assert torch.all((~is_pad) == (torch.arange(3)[None] < lengths[:, None]))  # a prefix, then pads
    assert set(lengths.tolist()) == {0, 1, 2, 3}  # d drawn over [0, M]
    assert is_pad[1, 1:].all()  # padded steps never enter the prefix


def test_state_delta_window_and_select_action_history():
    policy = build(tiny_relative(n_action_steps=1, obs_state_delta_frames=2)).eval()
    assert policy.delta_indices["observation.state"] == [-2, 0]
    g = torch.Generator().manual_seed(0)
    states = [torch.randn(1, 6, generator=g) for _ in range(5)]
    image = torch.randint(0, 256, (1, 3, 32, 32), generator=g, dtype=torch.uint8)
    policy.reset()
    got = [policy.select_action({"observation.state": s, "observation.images.top": image}) for s in states]
    for t, s in enumerate(states):
        past = states[max(0, t - 2)]  # clamped at the episode start, like the sampler
        window = torch.stack([past, s], dim=1)  # (1, 2, D)
        ref = policy.predict_action_chunk({"observation.state": window, "observation.images.top": image})
        torch.testing.assert_close(got[t], ref[:, 0])
    policy.reset()
    assert len(policy._state_history) == 0
    first = policy.select_action({"observation.state": states[4], "observation.images.top": image})
    ref = policy.predict_action_chunk(
        {"observation.state": torch.stack([states[4], states[4]], 1), "observation.images.top": image}
    )
    torch.testing.assert_close(first, ref[:, 0])


def test_state_delta_changes_the_prediction():
    policy = build(tiny_relative(obs_state_delta_frames=2)).eval()
    obs = observation(make_batch(policy), policy)
    s = obs["observation.state"]
    a = policy.predict_action_chunk(dict(obs, **{"observation.state": torch.stack([s, s], 1)}))
    b = policy.predict_action_chunk(dict(obs, **{"observation.state": torch.stack([s - 0.3, s], 1)}))
    assert not torch.allclose(a, b)


def test_training_without_the_state_window_is_a_clear_error():
    policy = build(tiny_relative(obs_state_delta_frames=2))
    batch = make_batch(policy)
    batch["observation.state"] = batch["observation.state"][:, -1]
    with pytest.raises(ActlabError, match="state window"):
        policy(batch)


def test_feature_errors():
    feats = make_features()
    feats["action"]["shape"] = [7]
    with pytest.raises(ActlabError, match="same size"):
        make_policy(tiny_relative(), feats, make_stats())
    with pytest.raises(ActlabError, match="absolute_action_dims"):
        make_policy(tiny_relative(absolute_action_dims=(6,)), make_features(), make_stats())


def test_prefix_for_another_batch_size_is_a_clear_error():
    policy = build(tiny_relative(rtc_max_delay=3)).eval()
    obs = observation(make_batch(policy, batch_size=4), policy)
    with pytest.raises(ActlabError, match="batch") as e:
        policy.predict_action_chunk(obs, prefix=torch.randn(1, 2, 6))
    assert e.value.field == "prefix"


def test_gripper_names_that_disagree_with_absolute_action_dims_warn():
    import warnings

    feats = make_features(dim=14, cameras=())
    joints = ("waist", "a", "b", "c", "d", "e", "gripper")
    names = [f"{side}_{j}" for side in ("left", "right") for j in joints]
    feats["action"]["names"] = feats["observation.state"]["names"] = names
    stats = make_stats(dim=14, cameras=())
    with pytest.warns(UserWarning, match=r"grippers at \[6, 13\]"):
        make_policy(tiny_relative(), feats, stats)  # default (5,) is the SO-101 gripper
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_policy(tiny_relative(absolute_action_dims=(6, 13)), feats, stats)
        so101 = make_features()
        so101["action"]["names"] = ["shoulder_pan.pos", "a", "b", "c", "wrist_roll.pos", "gripper.pos"]
        make_policy(tiny_relative(), so101, make_stats())
