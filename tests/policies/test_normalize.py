"""Normalization: degenerate stds must not blow up inputs; the bundle's stats are the ones used."""

import json
import warnings

import numpy as np
import pytest
import torch

from actlab.policies import load_policy, make_policy, save_policy
from conftest import make_batch, make_features, make_stats, observation, tiny_act, tiny_relative


def quiet_policy(cfg, stats):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        return make_policy(cfg, make_features(), stats)


def test_a_joint_that_never_moved_is_centred_not_blown_up():
    stats = make_stats()
    stats["observation.state"]["std"][3] = 0.0  # a joint that never moved in the demonstrations
    stats["action"]["std"][3] = 0.0
    with pytest.warns(UserWarning) as record:
        policy = make_policy(tiny_act(), make_features(), stats)
    messages = [str(w.message) for w in record]
    assert any("'observation.state'" in m and "[[3]]" in m and "not scaled" in m for m in messages)
    assert any("'action'" in m and "[[3]]" in m for m in messages)
    mean = torch.as_tensor(stats["observation.state"]["mean"]).float()
    x = mean.clone()[None]
    x[0, 3] += 0.5  # at deployment the joint reads half a unit off its training value
    z = policy.normalizer.normalize("observation.state", x)
    assert z[0, 3].abs() <= 0.5 + 1e-6  # centred, not divided by a floor such as 1e-3 (-> 500)
    assert torch.equal(z[0, :3], torch.zeros(3))
    # The action of that joint is unnormalized with the same stats: a 0 output is its constant value.
    a = policy.normalizer.unnormalize("action", torch.zeros(1, 6))
    assert a[0, 3] == torch.tensor(stats["action"]["mean"][3]).float()
    # The other joints keep their dataset std.
    std = policy.normalizer.get("observation.state").std
    torch.testing.assert_close(std[:3], torch.as_tensor(stats["observation.state"]["std"][:3]).float())


def test_relative_and_delta_stds_at_the_dataset_floor_are_not_amplified():
    # compute_stats raises the std of a constant joint to max(1% of its range, 1e-3) = 1e-3 exactly.
    stats = make_stats()
    stats["observation.state.delta"]["std"][2] = 1e-3
    stats["action.relative"]["std_per_step"][:, 2] = 1e-3
    policy = quiet_policy(tiny_relative(), stats)
    delta = torch.zeros(1, 6)
    delta[0, 2] = 0.3
    assert policy.normalizer.normalize("observation.state.delta", delta)[0, 2].abs() <= 0.3 + 1e-6
    # The RTC prefix is an input too: a committed action 0.3 off the state on that joint stays small.
    state = torch.zeros(1, 6)
    prefix = torch.zeros(1, 2, 6)
    prefix[..., 2] = 0.3
    rel_stats = stats["action.relative"]
    z = policy._normalized_prefix(prefix, state)
    expected = (0.3 - torch.as_tensor(rel_stats["mean_per_step"][:2, 2]).float()) / 1.0
    torch.testing.assert_close(z[0, :, 2], expected)


def test_image_std_of_a_uniform_scene_is_floored(tmp_path):
    stats = make_stats()
    stats["observation.images.top"]["std"][:] = 0.002
    with pytest.warns(UserWarning, match="observation.images.top"):
        policy = make_policy(tiny_act(image_norm="dataset"), make_features(), stats)
    std = policy.normalizer.get("observation.images.top").std
    assert torch.all(std == 0.05)
    img = torch.full((1, 3, 32, 32), 0.4)
    img[..., 0, 0] += 1 / 255  # one grey level of noise
    z = policy.normalizer.normalize("observation.images.top", img)
    assert z.abs().max() < 0.1


def test_load_policy_uses_the_stats_saved_in_the_weights_not_stats_json(tmp_path):
    policy = quiet_policy(tiny_relative(), make_stats(seed=0)).eval()
    obs = observation(make_batch(policy, batch_size=2), policy)
    ref = policy.predict_action_chunk(obs)
    path = save_policy(policy, tmp_path / "bundle")
    # stats.json is a human-readable copy of the normalizer in the weights: other stats written there
    # never change what the loaded policy does. They are refused, naming the file (an edit that had no
    # effect was loaded with at most a digest warning: the seventh fault run's SILENT row).
    other = make_stats(seed=1)
    data = {k: {f: np.asarray(v).tolist() for f, v in e.items()} for k, e in other.items()}
    saved = (path / "stats.json").read_text()
    (path / "stats.json").write_text(json.dumps(data))
    from actlab.errors import ActlabError

    with pytest.raises(ActlabError, match="stats.json disagrees with the normalizer") as e:
        load_policy(path)
    assert str(e.value.file) == str(path / "stats.json")
    (path / "stats.json").write_text(saved)
    loaded = load_policy(path)
    assert torch.equal(loaded.predict_action_chunk(obs), ref)
    for key in loaded.normalizer.feature_keys:
        e, e0 = loaded.normalizer.get(key), policy.normalizer.get(key)
        assert torch.equal(e.mean, e0.mean) and torch.equal(e.std, e0.std)
    # A policy constructed from the other stats differs: the test would notice stats.json being used.
    assert not torch.equal(quiet_policy(tiny_relative(), other).eval().predict_action_chunk(obs), ref)
