"""Pieces of actlab.rl checked alone: n-step targets, the replay ring, RLPD sampling, the actor's
log-probability, config validation, the reach task."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from actlab.errors import ActlabError
from actlab.rl.config import RLConfig, get_preset, replace_keys
from actlab.rl.networks import Actor, spatial_features
from actlab.rl.replay import ReplayBuffer, nstep_transitions, sample_mixed
from actlab.rl.tasks import REACH_RADIUS, ReachEnv


def _episode(T: int):
    steps = [{"vec": torch.tensor([float(t)])} for t in range(T)]
    final = {"vec": torch.tensor([float(T)])}
    actions = [torch.zeros(6) for _ in range(T)]
    return steps, final, actions


def test_nstep_returns_discounts_and_next_observations():
    steps, final, actions = _episode(4)
    rewards = [0.0, 0.0, 1.0, 2.0]
    g = 0.5
    out = nstep_transitions(steps, final, actions, rewards, terminated=True, gamma=g, n=2)
    assert out["reward"].tolist() == [0.0, g * 1.0, 1.0 + g * 2.0, 2.0]
    # bootstrap gamma^2 from t+2, except where the window reached the terminal step (no bootstrap)
    assert out["discount"].tolist() == [g**2, g**2, 0.0, 0.0]
    assert out["next_vec"][:, 0].tolist() == [2.0, 3.0, 4.0, 4.0]
    trunc = nstep_transitions(steps, final, actions, rewards, terminated=False, gamma=g, n=2)
    assert trunc["discount"].tolist() == [g**2, g**2, g**2, g]  # a time limit bootstraps


def test_replay_ring_overwrites_the_oldest_and_round_trips():
    buf = ReplayBuffer(5)
    for start in (0, 3):
        steps, final, actions = _episode(3)
        tr = nstep_transitions(steps, final, actions, [0.0] * 3, False, 0.9, 1)
        tr["vec"] = tr["vec"] + start
        buf.add(tr)
    assert len(buf) == 5 and buf.ptr == 1
    assert sorted(buf.data["vec"][:, 0].tolist()) == [1.0, 2.0, 3.0, 4.0, 5.0]  # 0 was overwritten
    copy = ReplayBuffer(1)
    copy.load_state_dict(buf.state_dict())
    assert torch.equal(copy.data["vec"], buf.data["vec"]) and (copy.ptr, copy.size) == (1, 5)


def test_rlpd_sampling_takes_half_of_each_batch_from_the_demos():
    online, demos = ReplayBuffer(10), ReplayBuffer(10)
    for buf, value in ((online, 0.0), (demos, 1.0)):
        steps, final, actions = _episode(4)
        tr = nstep_transitions(steps, final, actions, [value] * 4, False, 0.9, 1)
        buf.add(tr)
    batch = sample_mixed(online, demos, 8, torch.Generator().manual_seed(0))
    assert batch["reward"].tolist() == [0.0] * 4 + [1.0] * 4
    assert sample_mixed(online, None, 8, torch.Generator())["reward"].sum() == 0


def test_actor_log_prob_matches_the_change_of_variables():
    torch.manual_seed(0)
    actor = Actor(5, 2, 16, zero_init=True, init_log_std=math.log(0.5))
    x = torch.randn(3, 5)
    a, logp = actor(x, generator=torch.Generator().manual_seed(1))
    pre = torch.atanh(a.clamp(-1 + 1e-6, 1 - 1e-6))  # zero-init mean: pre = 0.5 * noise
    normal = torch.distributions.Normal(torch.zeros(2), torch.full((2,), 0.5))
    expected = (normal.log_prob(pre) - torch.log1p(-a.pow(2))).sum(-1)
    assert torch.allclose(logp, expected, atol=1e-4)
    mean, _ = actor(x, deterministic=True)
    assert torch.equal(mean, torch.zeros(3, 2))  # the zero-initialized last layer: no residual at first


def test_spatial_features_find_where_a_channel_fires():
    fmap = torch.full((1, 1, 5, 5), -20.0)
    fmap[0, 0, 4, 0] = 20.0  # bottom-left
    f = spatial_features(fmap)
    assert f.shape == (1, 3) and f[0, 1].item() == pytest.approx(-1, abs=1e-3)
    assert f[0, 2].item() == pytest.approx(1, abs=1e-3)


def test_config_errors_name_the_field_and_presets_resolve():
    with pytest.raises(ActlabError, match="unknown obs.encoder") as e:
        replace_keys(RLConfig(), {"obs.encoder": "resnet"})
    assert "cnn" in str(e.value) and e.value.field == "obs.encoder"
    with pytest.raises(ActlabError, match="did you mean 'smoke'") as e:
        get_preset("smok")
    assert "actlab rl train --list-presets" in e.value.fix
    with pytest.raises(ActlabError, match="cameras"):
        replace_keys(RLConfig(), {"obs.encoder": "cnn"})
    with pytest.raises(ActlabError, match="base"):
        replace_keys(RLConfig(), {"env.task": "pick_place", "obs.encoder": "frozen"}).check_runnable()
    pick_with_demos = replace_keys(RLConfig(), {"demos": "x", "env.task": "pick_place"})
    assert get_preset("smoke").critic_privileged and not pick_with_demos.critic_privileged


def test_reach_targets_are_reachable_and_seeded():
    env = ReachEnv(max_steps=10)
    try:
        o1, _ = env.reset(seed=3)
        t1 = env.target.copy()
        o2, info = env.reset(seed=3)
        assert np.array_equal(t1, env.target) and np.array_equal(
            o1["observation.goal"], o2["observation.goal"]
        )
        assert info["distance"] > REACH_RADIUS  # targets are away from the start pose
        env.reset(seed=4)
        assert not np.array_equal(t1, env.target)
    finally:
        env.close()


def test_a_frame_stack_cnn_run_trains_its_encoder_through_the_critic_only(tmp_path):
    """Pick-and-place from pixels: a 2-frame stack of the top camera, privileged critic, a few updates."""
    from actlab.rl.train import load_agent, train_rl

    cfg = replace_keys(RLConfig(), {
        "env.task": "pick_place", "obs.encoder": "cnn", "obs.cameras": ["top"], "obs.image_size": 32,
        "obs.frame_stack": 2, "env.num_envs": 2, "env.max_steps": 20, "total_env_steps": 80,
        "sac.random_steps": 40, "sac.learning_starts": 40, "sac.batch_size": 16, "sac.hidden": 16,
        "sac.buffer_size": 200, "eval.episodes": 1, "eval.every": 0, "checkpoint.every": 0,
    })  # fmt: skip
    summary = train_rl(cfg, tmp_path / "run", progress=False)
    assert summary.updates == 40 and summary.final_eval["episodes"] == 1
    agent = load_agent(tmp_path / "run")
    assert agent.encoder.conv[0].in_channels == 6  # 2 frames x RGB
    # the stored transitions kept uint8 frames: (N, 6, 32, 32)
    replay = torch.load(tmp_path / "run/checkpoints/step_0000080/training_state/replay.pt", weights_only=True)
    assert replay["img"].dtype == torch.uint8 and tuple(replay["img"].shape[1:]) == (6, 32, 32)
    assert replay["priv"].shape[1] == 12  # asymmetric critic: cube, bowl, grasp point, phase flags


def test_flat_keys_of_the_first_layout_are_refused_naming_their_new_key_and_flat_configs_convert():
    from actlab.rl.config import apply_rl_overrides, config_from_dict, config_to_dict

    with pytest.raises(ActlabError, match="'utd' is now 'sac.utd'") as e:
        apply_rl_overrides(get_preset("smoke"), ["utd=2"])
    assert e.value.fix.startswith("--set sac.utd=2")
    with pytest.raises(ActlabError, match="'eval_every' is now 'eval.every'"):
        apply_rl_overrides(get_preset("smoke"), ["eval_every=0"])
    assert apply_rl_overrides(get_preset("smoke"), ["sac.utd=2"]).sac.utd == 2
    flat = {"name": "smoke", "task": "reach", "utd": 0.5, "residual_init_std": 0.2, "keep_last": 4}
    cfg = config_from_dict(flat)  # a config.json of version 1 (no "version" key)
    assert (cfg.env.task, cfg.sac.utd, cfg.sac.init_std, cfg.checkpoint.keep_last) == ("reach", 0.5, 0.2, 4)
    assert cfg.residual.patience == 0  # the first runs' behaviour: no roll-back
    assert config_from_dict(config_to_dict(cfg)) == cfg  # the sectioned layout round-trips
    with pytest.raises(ActlabError, match="did you mean 'utd'"):
        config_from_dict({"utdd": 1})


def test_train_and_rl_presets_share_one_lookup_and_help():
    from actlab.rl.config import PRESETS as RL
    from actlab.training.presets import PRESETS as TRAIN
    from actlab.utils.presets import PresetTable, iter_config_help

    assert type(RL) is type(TRAIN) is PresetTable
    for table, typo, fix in ((RL, "residul", "actlab rl train"), (TRAIN, "tny", "actlab train")):
        with pytest.raises(ActlabError, match="did you mean") as e:
            table.get(typo)
        assert e.value.fix == f"{fix} --list-presets shows them all"
    lines = list(iter_config_help(RL.get("residual")))
    assert "sac.utd = 0.5" in lines and "residual.patience = 2" in lines
    assert any("McNemar" in line for line in lines)  # the field comments are the help
