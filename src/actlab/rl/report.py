"""Before / after: the base policy and the residual agent on the same fresh seeds, through the harness.

Writes ``report.md`` (success with Wilson intervals and the failure-taxonomy table side by side, the seeds
the base failed and the residual solved and the reverse, the run's evaluations along training) ,
``report.json`` and ``learning_curve.png`` (training-episode success per round and the harness
evaluations with their intervals, against env steps).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.evaluation.envs import EnvSpec
from actlab.evaluation.harness import EvalConfig, evaluate_many
from actlab.evaluation.results import results_table
from actlab.evaluation.sources import PolicySource
from actlab.lifecycle.metrics_log import read_metrics
from actlab.rl.evaluate import evaluate_agent
from actlab.rl.train import BASE_COPY, load_agent
from actlab.utils.io import atomic_write_json, atomic_write_text


def rl_report(
    run: str | Path, episodes: int, seed: int, out: str | Path, batch_envs: int = 10, videos: int = 0
) -> dict[str, Any]:
    """Evaluate the run's base (when residual) and its last agent on ``episodes`` seeds from ``seed``;
    ``videos``: film up to that many seeds the base failed and the residual solved, both policies."""

    run, out = Path(run), Path(out)
    agent = load_agent(run)  # a run's last checkpoint, or the checkpoint directory given
    if run.parent.name == "checkpoints":
        run = run.parent.parent
    cfg = agent.cfg
    if cfg.base is None:
        evals = [evaluate_agent(agent, cfg, episodes=episodes, seed=seed)]
    else:
        spec = EnvSpec(task="so101_pick_place", max_steps=cfg.max_steps)
        ecfg = EvalConfig(
            episodes=episodes, seed=seed, workers=1, batch_envs=batch_envs, threads_per_worker=1
        )
        sources = [PolicySource(name="base", path=_base(run, cfg)), PolicySource(name="residual", obj=agent)]
        evals = evaluate_many(sources, spec, ecfg)
    out.mkdir(parents=True, exist_ok=True)
    rows = read_metrics(run)
    curve = plot_learning_curve(rows, out / "learning_curve.png", cfg.name)
    result = _result(evals, rows, run, episodes, seed)
    if videos and result.get("fixed_by_residual"):
        result["videos"] = _film(agent, cfg, _base(run, cfg), result["fixed_by_residual"][:videos], out)
    atomic_write_json(out / "report.json", result)
    atomic_write_text(out / "report.md", _markdown(evals, result, curve.name))
    return result


def _result(evals: list, rows: list[dict], run: Path, episodes: int, seed: int) -> dict[str, Any]:
    res: dict[str, Any] = {
        "run": str(run),
        "episodes": episodes,
        "seeds": [seed, seed + episodes - 1],
        "policies": {e.name: e.summary.to_dict() for e in evals},
        "evaluations_during_training": [
            {"env_steps": r["step"], "success": r["eval/success"]} for r in rows if "eval/success" in r
        ],
    }
    if len(evals) == 2:
        base, resid = ({e.index: e.success for e in ev.episodes} for ev in evals)
        res["fixed_by_residual"] = [evals[0].episodes[i].seed for i in base if resid[i] and not base[i]]
        res["broken_by_residual"] = [evals[0].episodes[i].seed for i in base if base[i] and not resid[i]]
    return res


def _base(run: Path, cfg: Any) -> str:
    """The run's own copy of its base bundle (what the residual was trained on), else ``cfg.base``."""
    return str(run / BASE_COPY) if (run / BASE_COPY).is_dir() else str(cfg.base)


def _film(agent: Any, cfg: Any, base: str, seeds: list[int], out: Path) -> list[str]:
    """Videos of both policies on each seed (one episode each, run again in this process with the camera
    on; the video is stamped with what that run did)."""
    spec = EnvSpec(task="so101_pick_place", max_steps=cfg.max_steps)
    paths = []
    for s in seeds:
        ecfg = EvalConfig(episodes=1, seed=s, workers=1, batch_envs=1, videos=1, threads_per_worker=1)
        sources = [PolicySource(name="base", path=base), PolicySource(name="residual", obj=agent)]
        for ev in evaluate_many(sources, spec, ecfg, out_dir=out / f"seed_{s}"):
            paths += [e.video for e in ev.episodes if e.video]
    return paths


def _markdown(evals: list, result: dict[str, Any], curve: str) -> str:
    lines = [
        "# RL report",
        "",
        f"- run: {result['run']}",
        f"- {result['episodes']} episodes per policy, seeds {result['seeds'][0]}..{result['seeds'][1]} "
        "(the same for each)",
        "",
        results_table(evals, markdown=True),
        "",
    ]
    if "fixed_by_residual" in result:
        lines += [
            f"- base failed, residual succeeded: {len(result['fixed_by_residual'])} seeds "
            f"{result['fixed_by_residual'][:20]}",
            f"- base succeeded, residual failed: {len(result['broken_by_residual'])} seeds "
            f"{result['broken_by_residual'][:20]}",
            "",
        ]
    if result.get("videos"):
        lines += ["Videos (base failed, residual solved; the same seed for both):", ""]
        lines += [f"- {v}" for v in result["videos"]] + [""]
    lines += ["## Evaluations during training", "", "| env steps | success |", "|---|---|"]
    lines += [f"| {e['env_steps']} | {e['success']:.2f} |" for e in result["evaluations_during_training"]]
    lines += ["", f"![learning curve]({curve})", ""]
    return "\n".join(lines)


def plot_learning_curve(rows: list[dict[str, Any]], path: str | Path, title: str) -> Path:
    """PNG: training-episode success per round (and its running mean) and evaluation success vs env steps."""
    import matplotlib

    matplotlib.use("Agg")  # headless
    import matplotlib.pyplot as plt
    import numpy as np

    train = [(r["step"], r["train/success"]) for r in rows if "train/success" in r]
    evals = [(r["step"], r["eval/success"]) for r in rows if "eval/success" in r]
    if not train:
        raise ActlabError("the run logged no training round", file=path, fix="train longer")
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x, y = np.array(train).T
    ax.plot(x, y, ".", alpha=0.35, color="#888888", label="training episodes (per round, with noise)")
    k = min(10, len(y))
    ax.plot(
        x[k - 1 :], np.convolve(y, np.ones(k) / k, mode="valid"), color="#444444", label=f"running mean ({k})"
    )
    if evals:
        ex, ey = np.array(evals).T
        ax.plot(ex, ey, "o-", color="#1b998b", label="harness evaluation (deterministic)")
    ax.set(xlabel="env steps", ylabel="success", ylim=(-0.02, 1.02), title=title)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
