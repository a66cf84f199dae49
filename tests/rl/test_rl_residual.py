"""Residual RL on a frozen chunk policy: the zero-initialized residual is the base exactly, training
never changes the base, demonstrations enter as residual actions, and the success classifier trains."""

from __future__ import annotations

import pathlib

import torch

from actlab.evaluation.policy_io import ObsAdapter, inputs_from_features
from actlab.policies import load_policy
from actlab.rl.agent import Agent
from actlab.rl.config import get_preset, replace_keys
from actlab.rl.sac import SAC
from actlab.rl.train import load_agent, train_rl
from actlab.sim import make_env


def _cfg(base, demos=None, **over):
    """The residual preset, tiny; keyword ``section__key`` sets ``section.key``."""
    small = {
        "base": str(base), "demos": str(demos) if demos else None, "env.num_envs": 2, "env.max_steps": 30,
        "total_env_steps": 120, "sac.learning_starts": 40, "sac.actor_starts": 60, "sac.batch_size": 32,
        "sac.hidden": 32, "eval.episodes": 2, "eval.every": 0, "checkpoint.every": 0,
        "sac.demo_episodes": 2, "sac.buffer_size": 1000, "residual.confirm_episodes": 2,
    }  # fmt: skip
    return replace_keys(
        get_preset("residual"), {**small, **{k.replace("__", "."): v for k, v in over.items()}}
    )


def test_the_initial_residual_policy_is_the_base_exactly_and_the_base_is_in_no_optimizer(tiny_base):
    agent = Agent(_cfg(tiny_base), load_policy(tiny_base))
    base = load_policy(tiny_base)  # a second copy, run alone
    env = make_env("so101_pick_place", cameras=("top",), image_size=32)
    adapter = ObsAdapter(inputs_from_features(agent.features))
    try:
        obs, _ = env.reset(seed=0)
        agent.reset(), base.reset()
        for _ in range(10):  # across chunk boundaries (the base executes 4 of every 8 actions)
            batch = adapter([obs])
            a = agent.select_action(batch)
            assert torch.equal(a, base.select_action(batch))
            obs, *_ = env.step(a[0].numpy())
    finally:
        env.close()
    sac = SAC(agent)
    optimized = {
        id(p) for opt in (sac.critic_opt, sac.actor_opt) for g in opt.param_groups for p in g["params"]
    }
    assert not optimized & {id(p) for p in agent.base.parameters()}
    assert not any(p.requires_grad for p in agent.base.parameters())


def test_residual_training_with_demos_leaves_the_base_untouched(tiny_base, rl_demos, tmp_path, monkeypatch):
    before = {k: v.clone() for k, v in load_policy(tiny_base).state_dict().items()}
    summary = train_rl(_cfg(tiny_base, rl_demos), tmp_path / "run", progress=False)
    assert summary.updates > 0 and summary.final_eval["episodes"] == 2
    after = load_policy(tiny_base).state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # the bundle on disk is the same
    agent = load_agent(tmp_path / "run")
    assert agent.actor.mean.weight.abs().sum() > 0  # the residual moved off its zero start
    assert all(torch.equal(before[k], v) for k, v in agent.base.state_dict().items())
    # A resume of the finished run trains nothing, so it does not prepare the demonstrations first
    # (3 minutes of the base on every frame for the docs' residual run, before it said so).
    import actlab.rl.demos

    def not_needed(*args, **kwargs):
        raise AssertionError("demonstrations prepared for a run with nothing to train")

    monkeypatch.setattr(actlab.rl.demos, "demo_buffer", not_needed)
    again = train_rl(_cfg(tiny_base, rl_demos), tmp_path / "run", resume=True, progress=False)
    assert again.env_steps == summary.env_steps and again.updates == summary.updates


def test_demo_transitions_are_residuals_against_the_base(tiny_base, rl_demos):
    from actlab.rl.demos import demo_buffer

    cfg = _cfg(tiny_base, rl_demos)
    agent = Agent(cfg, load_policy(tiny_base))
    buf = demo_buffer(cfg, agent)
    assert len(buf) == 2 * 19  # 2 episodes of 20 frames: 19 transitions each (the last frame is final)
    acts = buf.data["action"]
    assert acts.abs().max() <= 1.0 and acts.abs().sum() > 0
    assert buf.data["reward"].sum() > 0  # the successful ends
    assert (buf.data["discount"] == 0).sum() == 2 * cfg.sac.n_step  # windows reaching the terminal step


def test_success_classifier_trains_and_tunes_its_threshold(tiny_base, rl_demos, tmp_path):
    from actlab.rl.reward_model import RewardModelConfig, load_reward_model, train_reward_model

    cfg = RewardModelConfig(episodes=2, rollouts=2, rollout_envs=2, max_steps=20, steps=30, success_frames=3)
    result = train_reward_model(cfg, str(rl_demos), str(tiny_base), tmp_path / "rm")
    assert 0.05 <= result["threshold"] <= 0.95 and 0.0 <= result["heldout_accuracy"] <= 1.0
    assert result["split_episodes"] == {"train": 2, "val": 1, "test": 1}
    model = load_reward_model(tmp_path / "rm")
    assert model.threshold == result["threshold"]


def test_report_puts_base_and_residual_side_by_side_on_the_same_seeds(tiny_base, tmp_path):
    """... and the run keeps its own copy of the base: the report still works once the bundle --base named
    is gone (a shared demo checkpoint was deleted under a real run)."""
    import shutil

    from actlab.rl.report import rl_report

    base = shutil.copytree(tiny_base, tmp_path / "base_elsewhere")
    train_rl(_cfg(base), tmp_path / "run", progress=False)
    shutil.rmtree(base)
    result = rl_report(tmp_path / "run", episodes=2, seed=7, out=tmp_path / "report", batch_envs=2)
    assert set(result["policies"]) == {"base", "residual"} and result["seeds"] == [7, 8]
    page = (tmp_path / "report" / "report.md").read_text()
    assert "| base |" in page and "| residual |" in page and "never_picked_up" in page
    # the residual's row carries the env steps of the checkpoint evaluated
    steps = int(pathlib.Path(result["residual_checkpoint"]).name.removeprefix("step_"))
    assert f"| residual | {steps} |" in page
    assert (tmp_path / "report" / "learning_curve.png").stat().st_size > 1000
