"""On a busy CPU an evaluation runs its rollouts at one torch thread, decided once (evaluation.sources'
threads_for_load), and the passes beside it (whiskers) follow the same rule."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("mujoco")

from evalpolicies import ExpertChunkPolicy, HoldPolicy

from actlab.evaluation.envs import EnvSpec
from actlab.evaluation.harness import EvalConfig, evaluate


class ThreadLog(HoldPolicy):
    """Holds the arm still and notes torch's thread count at every action."""

    def __init__(self) -> None:
        super().__init__([0.0] * 6)
        self.threads: set[int] = set()

    def select_action(self, obs: dict) -> torch.Tensor:
        self.threads.add(torch.get_num_threads())
        return super().select_action(obs)


@pytest.mark.parametrize("load, given, expected", [(64.0, None, 1), (0.2, None, 2), (64.0, 2, 2)])
def test_a_busy_cpu_gets_one_thread_unless_the_user_gave_a_count(load, given, expected, monkeypatch, capsys):
    import actlab.evaluation.sources as sources

    monkeypatch.setattr(sources, "load_1m", lambda: load)  # the wiring is under test, not the machine
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    policy = ThreadLog()
    try:
        evaluate(
            policy,
            EnvSpec("so101_pick_place", cameras=(), max_steps=5),
            EvalConfig(episodes=2, workers=1, batch_envs=1, threads_per_worker=given),
        )
        assert torch.get_num_threads() == 2  # the count is the evaluation's alone
    finally:
        torch.set_num_threads(before)
    assert policy.threads == {expected}
    err = capsys.readouterr().err
    said = "the CPUs are busy (load average 64.0 on" in err and "instead of 2" in err
    assert said == (expected == 1), err


@pytest.mark.parametrize("load, expected", [(64.0, 1), (0.2, 2)])
def test_a_whiskers_pass_on_a_busy_cpu_runs_at_one_thread_too(load, expected, monkeypatch, tmp_path):
    """A whiskers pass at 2 threads beside a test run crawled at 1 step/s (35 quiet): it follows the
    rollouts' rule."""
    import actlab.evaluation.sources as sources
    from actlab.evaluation.whiskers import whiskers_video

    monkeypatch.setattr(sources, "load_1m", lambda: load)
    seen: set[int] = set()

    def factory(env):
        policy = ExpertChunkPolicy(env)
        plan = policy.predict_action_chunk

        def predict(*args, **kwargs):
            seen.add(torch.get_num_threads())
            return plan(*args, **kwargs)

        policy.predict_action_chunk = predict
        return policy

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        spec = EnvSpec("so101_pick_place", cameras=(), max_steps=6)
        whiskers_video(factory, spec, EvalConfig(episodes=1, workers=1), tmp_path / "w.mp4", still=False)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen == {expected}
