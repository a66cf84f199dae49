"""A policy with 3 observations of context and gated camera fusion, trained by `actlab train` on sim
demonstrations, evaluated by `actlab eval` on the sim: the rollout feeds it its observation history."""

from __future__ import annotations

import json

import pytest

from actlab.cli import main

pytest.importorskip("mujoco")


class HistoryLog:
    """Records the observation window the policy reads at every select_action (a real policy inside)."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.windows: list[int] = []

    def __getattr__(self, name: str):
        return getattr(self.policy, name)  # features, camera_keys, ...: what the harness reads

    def reset(self) -> None:
        self.policy.reset()

    def select_action(self, obs):
        self.windows.append(len(self.policy._obs_history))
        return self.policy.select_action(obs)


@pytest.mark.timeout(240)
def test_context_policy_trains_and_evaluates_on_the_sim(tmp_path, capsys):
    from actlab.evaluation import EnvSpec, EvalConfig, evaluate
    from actlab.policies import load_policy
    from actlab.sim import RecordConfig, record_dataset

    data = tmp_path / "data"
    record_dataset(data, RecordConfig(episodes=2, image_size=32, workers=0), progress=False)
    run = tmp_path / "run"
    args = ["train", "--preset", "tiny", "--dataset", data, "--out", run, "--set", "steps=4"]
    args += [
        "--set",
        "checkpoint.every=4",
        "--set",
        "policy.n_obs_steps=3",
        "--set",
        "policy.camera_fusion=gated",
    ]
    # In this process (a process of its own adds only its start: ~7 s of imports on 2 cores).
    assert main([*map(str, args), "--set", "log.plot=false"]) == 0
    capsys.readouterr()
    bundle = run / "checkpoints" / "step_0000004"
    assert json.loads((bundle / "config.json").read_text())["n_obs_steps"] == 3
    # actlab eval on the sim, as a user runs it
    assert main(["eval", str(bundle), "--episodes", "1", "--max-steps", "6", "--workers", "1", "--json"]) == 0
    (checkpoint,) = json.loads(capsys.readouterr().out)["checkpoints"]
    assert checkpoint["summary"]["episodes"] == 1 and len(checkpoint["episodes"]) == 1
    assert checkpoint["episodes"][0]["steps"] == 6  # an untrained policy never succeeds early
    # the harness's rollout: one reset, then the history grows to K - 1 = 2 past observations
    log = HistoryLog(load_policy(bundle))
    ev = evaluate(
        log, EnvSpec("so101_pick_place", max_steps=5), EvalConfig(episodes=1, workers=1, batch_envs=1)
    )
    assert ev.episodes[0].steps == 5
    assert log.windows == [0, 1, 2, 2, 2]
