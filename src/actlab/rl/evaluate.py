"""Evaluation of an SAC agent through the evaluation harness: same seeds for every checkpoint, the
failure taxonomy, the harness's rollout (one batched policy call per step).

``pick_place`` goes through :func:`actlab.evaluation.harness.evaluate` (the agent is a RolloutPolicy
object, so it runs in this process); ``reach`` is not a harness task, so its envs are built here and
run by the harness's ``rollout`` and summarized the same way.
"""

from __future__ import annotations

from typing import Any

from actlab.evaluation.envs import EnvSpec
from actlab.evaluation.harness import EvalConfig, evaluate
from actlab.evaluation.policy_io import ObsAdapter, inputs_from_features
from actlab.evaluation.results import CheckpointEval, summarize
from actlab.evaluation.rollout import rollout, to_result
from actlab.rl.tasks import make_task_env


def evaluate_agent(
    agent: Any, cfg: Any, episodes: int | None = None, seed: int | None = None
) -> CheckpointEval:
    """Success, interval and taxonomy of the agent's deterministic policy on ``episodes`` fixed seeds."""
    episodes = episodes or cfg.eval.episodes
    seed = cfg.eval.seed if seed is None else seed
    batch = min(episodes, 10)
    if cfg.env.task == "pick_place":
        spec = EnvSpec(task="so101_pick_place", max_steps=cfg.env.max_steps)
        ecfg = EvalConfig(
            episodes=episodes, seed=seed, workers=1, batch_envs=batch, threads_per_worker=cfg.threads
        )
        return evaluate(agent, spec, ecfg, name="rl")
    envs = [make_task_env(cfg.env.task, cfg.env.max_steps) for _ in range(batch)]
    adapter = ObsAdapter(inputs_from_features(agent.features), cfg.device)
    results = []
    try:
        for start in range(0, episodes, batch):
            idx = list(range(start, min(episodes, start + batch)))
            traces = rollout(agent, envs[: len(idx)], [seed + i for i in idx], adapter)
            results += [to_result(i, t) for i, t in zip(idx, traces)]
    finally:
        for env in envs:
            env.close()
    return CheckpointEval("rl", None, None, summarize(results), results)
