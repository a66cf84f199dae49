"""Before / after: the base policy and the handed-back residual on the same fresh seeds, through the harness.

Writes ``report.md`` (success with Wilson intervals and the failure-taxonomy table side by side, the
paired verdict "better / worse / no evidence" with McNemar's exact test, the seeds the residual fixed and
those it broke, the run's evaluations along training and the guard's decisions), ``report.json`` and
``learning_curve.png`` (training-episode success per round, the harness evaluations with their
intervals and the base on the same evaluation seeds as a line, against env steps).

The residual evaluated is the one the run hands back (``checkpoints/best.json``); when the run hands
back the base (no residual was significantly better than it during training), the last checkpoint is
evaluated instead and the report says that it is *not* the policy handed back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.evaluation.envs import EnvSpec
from actlab.evaluation.harness import EvalConfig, evaluate_many
from actlab.evaluation.results import results_table
from actlab.evaluation.sources import PolicySource
from actlab.lifecycle.checkpoints import STEP_DIR, read_pointer
from actlab.lifecycle.metrics_log import read_metrics
from actlab.rl.evaluate import evaluate_agent
from actlab.rl.train import BASE_COPY, load_agent, newest_checkpoint
from actlab.utils.config import is_number
from actlab.utils.io import atomic_file, atomic_write_json, atomic_write_text, claimed_out_dir, read_json
from actlab.utils.stats import paired_compare


def rl_report(
    run: str | Path, episodes: int, seed: int, out: str | Path, batch_envs: int = 10, videos: int = 0
) -> dict[str, Any]:
    """Evaluate the run's base (when residual) and its handed-back residual (else its last checkpoint)
    on ``episodes`` seeds from ``seed``; ``videos``: film up to that many seeds the residual fixed and as
    many it broke, both policies on each."""

    run, out = Path(run), Path(out)
    root = run.parent.parent if run.parent.name == "checkpoints" else run
    # refused before any evaluation: a directory of the user's files (report.md was overwritten), another
    # command's output, or one inside the run it reports on; a refusal of the run (no checkpoint, a damaged
    # agent, damaged metrics) leaves nothing of an --out this report made
    with claimed_out_dir(out, "actlab rl report", inputs=(root,)):
        return _report(run, episodes, seed, out, batch_envs, videos)


def _report(run: Path, episodes: int, seed: int, out: Path, batch_envs: int, videos: int) -> dict[str, Any]:
    chosen, handed = _choose(run)
    asked = run.parent.name == "checkpoints"
    agent = load_agent(chosen)
    if asked:
        run = run.parent.parent
    _checked_evals(read_metrics(run), run / "metrics.jsonl")  # before any episode runs
    # the checkpoint's env steps (its name: step_NNNNNNN): the table's step column, the curve's mark
    named = STEP_DIR.match(chosen.name)
    step = int(named.group(1)) if named else None
    cfg = agent.cfg
    if cfg.base is None:
        evals = [evaluate_agent(agent, cfg, episodes=episodes, seed=seed)]
    else:
        spec = EnvSpec(task="so101_pick_place", max_steps=cfg.env.max_steps)
        ecfg = EvalConfig(
            episodes=episodes, seed=seed, workers=1, batch_envs=batch_envs, threads_per_worker=1
        )
        residual = PolicySource(name="residual", obj=agent, step=step)
        sources = [PolicySource(name="base", path=_base(run, cfg)), residual]
        evals = evaluate_many(sources, spec, ecfg)
    out.mkdir(parents=True, exist_ok=True)
    rows = read_metrics(run)
    result = _result(evals, rows, run, episodes, seed, cfg.residual.alpha)
    result["residual_checkpoint"] = str(chosen)
    result["handed_back"] = handed
    result["asked"] = asked  # a checkpoint directory was given: it is evaluated whatever is handed back
    base_line = next((r["eval/base_success"] for r in rows if "eval/base_success" in r), None)
    mark = (step, "handed back" if handed == chosen.name else "evaluated here, not handed back")
    title = f"{run.resolve().name}: {cfg.name} preset" + (f", handed back: {handed}" if cfg.base else "")
    curve = plot_learning_curve(
        rows, out / "learning_curve.png", title, base_success=base_line, mark=mark if step else None
    )
    if videos and len(evals) == 2:
        seeds = result["fixed_by_residual"][:videos] + result["broken_by_residual"][:videos]
        result["videos"] = _film(agent, cfg, _base(run, cfg), seeds, out) if seeds else []
    atomic_write_json(out / "report.json", result)
    atomic_write_text(out / "report.md", _markdown(evals, result, curve.name))
    return result


def _choose(run: Path) -> tuple[Path, str]:
    """The checkpoint to evaluate and what the run hands back (``"base"`` or a checkpoint name). A
    checkpoint directory given is evaluated as it is; what its run hands back is still the run's (the
    checkpoint asked for is not the handed-back policy unless best.json names it)."""
    if run.parent.name == "checkpoints":
        root = run.parent.parent
        return run, _handed_back(root) if root.is_dir() else run.name
    if not (run / "checkpoints").is_dir():
        return run, run.name
    handed = _handed_back(run)
    return (newest_checkpoint(run) if handed == "base" else run / "checkpoints" / handed), handed


def _handed_back(root: Path) -> str:
    """What the run at ``root`` hands back: best.json's checkpoint, else the base (a residual run), else
    its newest checkpoint."""
    ckpts = root / "checkpoints"
    best = ckpts / "best.json"
    if best.is_file() and (ckpts / read_pointer(best)["path"]).is_dir():
        return read_pointer(best)["path"]
    residual = (root / BASE_COPY).is_dir() or _is_residual(root)
    return "base" if residual else newest_checkpoint(root).name


def _is_residual(run: Path) -> bool:
    try:
        return read_json(run / "config.json", "RL run config").get("base") is not None
    except ActlabError:
        return False


def _checked_evals(rows: list[dict], file: Path) -> list[dict]:
    """The training's evaluation rows as rl train writes them (a step, a success rate 0..1): an edited
    ``"eval/success": "NaN"`` was a format traceback in the report's table."""
    for i, r in enumerate(rows):
        for key in ("eval/success", "eval/base_success"):
            v = r.get(key)
            if key in r and not (is_number(v) and 0 <= v <= 1):
                raise ActlabError(
                    "the run's metrics.jsonl holds an evaluation row actlab did not write (edited?)",
                    file=file,
                    field=f"row {i + 1} (step {r.get('step')}): {key}",
                    expected="a success rate: a number from 0 to 1",
                    found=repr(v),
                    fix="undo the edit; the report's own evaluation does not need the row: remove the line "
                    "to report without it",
                )
    return rows


def _result(
    evals: list, rows: list[dict], run: Path, episodes: int, seed: int, alpha: float
) -> dict[str, Any]:
    res: dict[str, Any] = {
        "run": str(run),
        "episodes": episodes,
        "seeds": [seed, seed + episodes - 1],
        "policies": {e.name: e.summary.to_dict() for e in evals},
        "evaluations_during_training": [
            {"env_steps": r["step"], "success": r["eval/success"]} for r in rows if "eval/success" in r
        ],
    }
    base_rows = [r for r in rows if "eval/base_success" in r and "eval/success" not in r]
    if base_rows:
        res["base_during_training"] = base_rows[-1]["eval/base_success"]
    if len(evals) == 2:
        order = [sorted(ev.episodes, key=lambda e: e.index) for ev in evals]
        base, resid = ([bool(e.success) for e in eps] for eps in order)
        seeds = [e.seed for e in order[0]]
        res["fixed_by_residual"] = [s for s, b, r in zip(seeds, base, resid) if r and not b]
        res["broken_by_residual"] = [s for s, b, r in zip(seeds, base, resid) if b and not r]
        cmp = paired_compare(base, resid, alpha)
        res["paired_test"] = {**cmp.as_dict(), "sentence": cmp.sentence()}
    return res


def _base(run: Path, cfg: Any) -> str:
    """The run's own copy of its base bundle (what the residual was trained on), else ``cfg.base``."""
    return str(run / BASE_COPY) if (run / BASE_COPY).is_dir() else str(cfg.base)


def _film(agent: Any, cfg: Any, base: str, seeds: list[int], out: Path) -> list[str]:
    """Videos of both policies on each seed (one episode each, run again in this process with the camera
    on; the video is stamped with what that run did)."""
    spec = EnvSpec(task="so101_pick_place", max_steps=cfg.env.max_steps)
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
    ]
    handed, evaluated = result.get("handed_back"), result["residual_checkpoint"]
    which = "the checkpoint asked for" if result.get("asked") else "the last checkpoint"
    if handed and handed == Path(evaluated).name:
        lines.append(f"- handed back: {handed} ({evaluated})")
    elif handed == "base":
        lines.append(
            f"- handed back: **the base** (no residual was significantly better on the run's evaluation "
            f"seeds, nor in a confirmation at its end where one ran); the "
            f"residual evaluated is {which}, {evaluated}, not handed back"
        )
    elif handed:
        lines.append(f"- handed back: {handed}; the residual evaluated is {which}, {evaluated}, not it")
    lines += ["", results_table(evals, markdown=True), ""]
    if "paired_test" in result:
        lines += [
            f"**Verdict on these fresh seeds: {result['paired_test']['verdict']}**. "
            f"{result['paired_test']['sentence']}.",
            "",
            f"- base failed, residual succeeded: {len(result['fixed_by_residual'])} seeds "
            f"{result['fixed_by_residual'][:20]}",
            f"- base succeeded, residual failed: {len(result['broken_by_residual'])} seeds "
            f"{result['broken_by_residual'][:20]}",
            "",
        ]
    if result.get("videos"):
        lines += ["Videos (seeds the residual fixed, then seeds it broke; the same seed for both):", ""]
        lines += [f"- {v}" for v in result["videos"]] + [""]
    lines += ["## Evaluations during training", ""]
    if "base_during_training" in result:
        lines += [f"The base on the run's evaluation seeds: {result['base_during_training']:.2f}.", ""]
    lines += ["| env steps | success |", "|---|---|"]
    lines += [f"| {e['env_steps']} | {e['success']:.2f} |" for e in result["evaluations_during_training"]]
    lines += ["", f"![learning curve]({curve})", ""]
    return "\n".join(lines)


def plot_learning_curve(
    rows: list[dict[str, Any]],
    path: str | Path,
    title: str,
    base_success: float | None = None,
    mark: tuple[int, str] | None = None,
) -> Path:
    """PNG (written atomically): training-episode success per round (and its running mean), evaluation
    success vs env steps, ``base_success`` (the base on the same evaluation seeds) as a horizontal line,
    and ``mark`` = (env steps, label): a star on that step's evaluation (the checkpoint a report evaluates).
    The legend sits right of the axes: inside, it covered the last evaluations, where a run ends."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    train = [(r["step"], r["train/success"]) for r in rows if "train/success" in r]
    evals = [(r["step"], r["eval/success"]) for r in rows if "eval/success" in r]
    if not train:
        raise ActlabError("the run logged no training round", file=path, fix="train longer")
    fig = Figure(figsize=(9.5, 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    x, y = np.array(train).T
    ax.plot(x, y, ".", alpha=0.35, color="#888888", label="training episodes (per round, with noise)")
    k = min(10, len(y))
    ax.plot(
        x[k - 1 :], np.convolve(y, np.ones(k) / k, mode="valid"), color="#444444", label=f"running mean ({k})"
    )
    if evals:
        ex, ey = np.array(evals).T
        ax.plot(ex, ey, "o-", color="#1b998b", label="harness evaluation (deterministic)")
        marked = [(s, v) for s, v in evals if mark is not None and s == mark[0]]
        if marked:
            ax.plot(*marked[0], "*", color="#f39c12", ms=16, mec="black", zorder=5, label=mark[1])
    if base_success is not None:
        ax.axhline(base_success, color="#c0392b", linestyle="--", label="base on the same evaluation seeds")
    ax.set(xlabel="env steps", ylabel="success", ylim=(-0.02, 1.02))
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0, fontsize=8)
    path = Path(path)
    with atomic_file(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    return path
