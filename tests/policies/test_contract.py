"""Every registered policy type satisfies the policy contract (actlab.policies.contract), structurally
and by signature, so a subclass such as ACTRelativePolicy cannot drift from it silently."""

import pytest
import torch

from actlab.policies import (
    FEATURES_SUFFIX,
    POLICY_TYPES,
    InferencePolicy,
    PolicyConfig,
    RolloutPolicy,
    TrainablePolicy,
    contract_problems,
    get_config_class,
    get_policy_class,
    make_policy,
)
from conftest import make_batch, make_features, make_stats, observation, tiny_act, tiny_relative

# A tiny config per registered type: a new type fails here until it has one (and so gets checked).
TINY = {"act": tiny_act, "act_relative": tiny_relative}


def test_every_registered_type_has_a_tiny_config_here():
    assert set(TINY) == set(POLICY_TYPES)


@pytest.fixture(params=sorted(POLICY_TYPES))
def built(request):
    cfg = TINY[request.param]()
    assert type(cfg) is get_config_class(request.param)
    torch.manual_seed(0)
    policy = make_policy(cfg, make_features(), make_stats(horizon=cfg.chunk_size), pretrained=False)
    assert type(policy) is get_policy_class(request.param)
    return policy


def test_registered_policies_satisfy_every_protocol(built):
    assert isinstance(built, torch.nn.Module)
    for protocol in (RolloutPolicy, InferencePolicy, TrainablePolicy):
        assert isinstance(built, protocol)
        assert contract_problems(built, protocol) == []
    assert isinstance(built.config, PolicyConfig)
    assert contract_problems(built.config, PolicyConfig) == []


def test_registered_policies_behave_as_the_contract_says(built):
    # The return values the protocols document: run the members on a tiny batch.
    batch = make_batch(built, batch_size=3)
    built.train()
    loss, metrics = built(batch)
    assert loss.ndim == 0 and loss.requires_grad
    assert all(isinstance(v, torch.Tensor) and v.ndim == 0 and not v.requires_grad for v in metrics.values())
    assert set(built.delta_indices) == {*built.observation_delta_indices, "action"}
    assert built.action_delta_indices == list(range(built.config.chunk_size))
    assert built.delta_indices == built.config.delta_indices(built.camera_keys)
    assert built.camera_keys == built.config.camera_keys(built.features)
    groups = built.param_groups(1e-4, 1e-5, 1e-4)
    assert all({"name", "params", "lr", "weight_decay"} <= set(g) for g in groups)
    key = built.camera_keys[0]
    feats = built.encode_images(key, batch[key][:, -1])  # (B, C', h, w)
    assert feats.ndim == 4 and feats.shape[0] == 3
    with_feats = {k: v for k, v in batch.items() if k != key}
    with_feats[key + FEATURES_SUFFIX] = feats
    built.eval()
    with torch.no_grad():
        torch.testing.assert_close(built(with_feats)[0], built(batch)[0])  # cached features, same loss
    assert set(built.stats_for_bundle()) >= {"observation.state"}
    obs = observation(batch, built)
    chunk = built.predict_action_chunk(obs)
    assert chunk.shape == (3, built.config.chunk_size, built.action_dim)
    built.reset()
    assert built.select_action(obs).shape == (3, built.action_dim)


class _Hold:
    """A plain rollout policy (what evaluation runs besides actlab's own): reset and select_action."""

    def reset(self) -> None:
        pass

    def select_action(self, obs):
        return torch.zeros(obs["observation.state"].shape[0], 6)


def test_a_plain_object_is_a_rollout_policy_and_not_more():
    hold = _Hold()
    assert isinstance(hold, RolloutPolicy) and contract_problems(hold, RolloutPolicy) == []
    assert not isinstance(hold, InferencePolicy)
    assert contract_problems(hold, InferencePolicy) == ["_Hold has no 'predict_action_chunk'"]


def test_drift_from_the_contract_is_named():
    # What isinstance cannot see: a renamed, reordered or added parameter, a property turned method.
    base = get_policy_class("act_relative")

    class Drifted(base):
        def select_action(self, observation, extra):
            return super().select_action(observation)

        def param_groups(self, lr, weight_decay, backbone_lr=0.0):
            return super().param_groups(lr, backbone_lr, weight_decay)

        def reset(self, hard=False):  # an extra parameter with a default is fine
            super().reset()

        @property
        def stats_for_bundle(self):  # a method turned property
            return {}

    policy = Drifted(tiny_relative(), make_features(), make_stats(horizon=8), pretrained=False)
    assert isinstance(policy, TrainablePolicy)  # the structural check alone passes
    problems = contract_problems(policy, TrainablePolicy)
    assert "select_action(): has no parameter 'obs'" in problems
    assert any("'extra' needs a default" in p for p in problems)
    assert any(p.startswith("param_groups(): parameter 'backbone_lr'") for p in problems)
    assert not any(p.startswith("reset()") for p in problems)
    assert "'stats_for_bundle' must be a method" in problems
