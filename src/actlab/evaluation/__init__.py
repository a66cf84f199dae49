"""Evaluation: rollouts with failure taxonomy, checkpoint sweeps, rollout videos, whiskers.

Public API::

    from actlab.evaluation import EnvSpec, EvalConfig, evaluate, run_eval, resolve_paths

    ev = evaluate(policy_or_bundle_or_factory, EnvSpec("so101_pick_place"), EvalConfig(episodes=50))
    ev.summary.success_rate, ev.summary.ci_low, ev.summary.outcomes, ev.episodes[0].outcome

    report = run_eval(resolve_paths(["runs/demo/run"]), EnvSpec("so101_pick_place"), EvalConfig(videos=2),
                      out_dir="eval/pick")           # results.json, results.md, plot, videos

Nothing here imports torch or mujoco at import time.
"""

from actlab.evaluation.envs import EnvSpec, make_eval_env
from actlab.evaluation.harness import EvalConfig, evaluate, evaluate_many
from actlab.evaluation.results import (
    CheckpointEval,
    EpisodeResult,
    Summary,
    results_table,
    summarize,
    wilson_interval,
)
from actlab.evaluation.sources import PolicySource, as_source
from actlab.evaluation.sweep import EvalReport, best_checkpoint, resolve_paths, run_eval
from actlab.evaluation.taxonomy import FAILURES, OUTCOMES, PhaseRecord, classify

__all__ = [
    "FAILURES",
    "OUTCOMES",
    "CheckpointEval",
    "EnvSpec",
    "EpisodeResult",
    "EvalConfig",
    "EvalReport",
    "PhaseRecord",
    "PolicySource",
    "Summary",
    "as_source",
    "best_checkpoint",
    "classify",
    "evaluate",
    "evaluate_many",
    "make_eval_env",
    "resolve_paths",
    "results_table",
    "run_eval",
    "summarize",
    "wilson_interval",
]
