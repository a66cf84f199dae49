"""Checkpoint sweeps and the files an evaluation writes.

``resolve_paths`` turns what a user passes (bundles, run directories, ``checkpoints/`` directories) into
policy sources sorted by training step; ``run_eval`` evaluates them all on the same seeded episodes and
writes, into one output directory built atomically:

    results.json          everything: config, env, per checkpoint summary and per-episode results
    results.md            the summary table (one row per checkpoint) and per-episode tables
    success_vs_step.png   success rate with 95% CI against training step (sweeps of >= 2 checkpoints)
    videos/<name>/episode_NNN.mp4   the first K episodes of each checkpoint, outcome written on them
    whiskers/<name>_episode_NNN.mp4 predicted gripper paths drawn on the frames (``whiskers=True``)
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.evaluation.envs import EnvSpec
from actlab.evaluation.harness import EvalConfig, evaluate_many
from actlab.evaluation.results import (
    CheckpointEval,
    EpisodeResult,
    best_index,
    filmed_lines,
    markdown_report,
    results_table,
)
from actlab.evaluation.sources import PolicySource, as_source, source_dir
from actlab.evaluation.whiskers import check_whiskers_options, whiskers_video
from actlab.utils.io import atomic_dir, atomic_write_json, atomic_write_text, read_json
from actlab.utils.kinds import BUNDLE_DAMAGED_FIX, describe
from actlab.viz.eval import plot_success_vs_step

STEP_RE = re.compile(r"^step_(\d+)$")
# Files whose presence marks a directory as a policy bundle (actlab.policies.save_policy writes both).
BUNDLE_MARKERS = ("model.safetensors", "config.json")
# What an evaluation output directory says wrote it: --overwrite replaces only an earlier one.
EVAL_KIND = "actlab eval"


def is_bundle(path: Path) -> bool:
    """True for a directory holding a policy bundle."""
    return path.is_dir() and all((path / m).is_file() for m in BUNDLE_MARKERS)


def _step_of(path: Path) -> int | None:
    m = STEP_RE.match(path.name)
    if m:
        return int(m.group(1))
    meta = path / "actlab.json"
    if meta.is_file():
        step = read_json(meta, "bundle metadata", fix=BUNDLE_DAMAGED_FIX).get("step")
        if isinstance(step, int):
            return step
    return None


def checkpoints_in(run_dir: Path) -> list[Path]:
    """Every ``step_*`` bundle of a run directory (or of its ``checkpoints/`` folder), by step."""
    root = run_dir / "checkpoints" if (run_dir / "checkpoints").is_dir() else run_dir
    steps = [p for p in root.iterdir() if STEP_RE.match(p.name)]
    found = [p for p in steps if is_bundle(p)]
    # A step_N that is not a whole bundle (an interrupted copy, a file deleted by hand: the trainer itself
    # writes each checkpoint under a temporary name) was left out of the sweep without a word.
    for p in sorted(set(steps) - set(found)):
        missing = [m for m in BUNDLE_MARKERS if not (p / m).is_file()] if p.is_dir() else ["a directory"]
        note_left_out(p, "checkpoint", ", ".join(missing))
    return sorted(found, key=lambda p: int(STEP_RE.match(p.name).group(1)))


def note_left_out(path: Path, what: str, missing: str) -> None:
    """Say on stderr that the checkpoint directory ``path`` is left out of a sweep: not a complete
    ``what`` (it has no ``missing``)."""
    print(
        f"note: {path.name} is left out of the sweep: not a complete {what} ({path} has no {missing}); "
        "evaluate it alone to see what is wrong, or move it away",
        file=sys.stderr,
    )


def resolve_paths(paths: Sequence[str | Path]) -> list[PolicySource]:
    """Bundles and run directories -> policy sources (a run directory expands to all its checkpoints)."""
    sources: list[PolicySource] = []
    for raw in paths:
        p = Path(raw)
        if is_bundle(p):
            bundles = [p]
        elif p.is_dir():
            bundles = checkpoints_in(p)
            if not bundles:
                raise ActlabError(
                    "no checkpoint found",
                    file=p,
                    expected="a policy bundle (model.safetensors + config.json) or a run directory with "
                    "checkpoints/step_NNNNNNN/ bundles",
                    found=describe(p) or "a directory without either",
                    fix="pass a bundle such as RUN/checkpoints/step_0001000, or the run directory "
                    "(a LeRobot policy: --lerobot-policy DIR --lerobot-python PY)",
                )
        elif p.exists():  # a file (model.safetensors itself, a results.json) was "does not exist"
            raise ActlabError(
                "a checkpoint is a directory, not a file",
                file=p,
                expected="a policy bundle directory or a run directory",
                found="a file",
                fix=f"pass the directory that holds it ({p.parent}) if it is a bundle's file",
            )
        else:
            raise ActlabError("checkpoint path does not exist", file=p, fix="check the path")
        for b in bundles:
            step = _step_of(b)
            name = b.name if step is not None or len(paths) == 1 else f"{b.parent.name}_{b.name}"
            sources.append(PolicySource(name=name, path=str(b.resolve()), step=step))
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        # Two runs with the same step names: qualify every name with its run directory.
        sources = [replace(s, name=f"{Path(s.path).parents[1].name}/{s.name}") for s in sources]
    if all(s.step is not None for s in sources):
        sources.sort(key=lambda s: s.step)
    return sources


@dataclass
class EvalReport:
    """The outcome of ``run_eval``: per-checkpoint results and the files written."""

    evals: list[CheckpointEval]  # per checkpoint, in sweep order
    out_dir: Path | None  # output directory (None: nothing written)
    files: dict[str, str]  # kind -> path relative to out_dir (results.json, results.md, plot, whiskers)
    meta: dict[str, Any]  # task, episodes, seed, env spec, timing

    def to_dict(self) -> dict:
        best = best_checkpoint(self.evals)
        return {
            **self.meta,
            "out_dir": str(self.out_dir) if self.out_dir else None,
            "files": self.files,
            "best": best.name if best else None,
            "checkpoints": [e.to_dict() for e in self.evals],
        }

    def table(self, markdown: bool = False) -> str:
        """The summary table, then which episodes were filmed (when any were)."""
        return "\n".join([results_table(self.evals, markdown=markdown), *filmed_lines(self.evals)])


def best_checkpoint(evals: Sequence[CheckpointEval]) -> CheckpointEval | None:
    """Highest success rate; ties go to the later checkpoint (ties in success favour more training)."""
    if not evals:
        return None
    return evals[best_index([e.summary.success_rate for e in evals])]


def _relative(result: EpisodeResult, tmp: Path) -> EpisodeResult:
    if result.video is None:
        return result
    return replace(result, video=str(Path(result.video).relative_to(tmp)))


def run_eval(
    policies: Sequence[Any],
    spec: EnvSpec,
    cfg: EvalConfig,
    out_dir: str | Path | None = None,
    overwrite: bool = False,
    whiskers: dict[str, Any] | None = None,
    on_episode: Callable[[PolicySource, EpisodeResult], None] | None = None,
) -> EvalReport:
    """Evaluate policies (a sweep when several), then write results, table, plot and videos to ``out_dir``.

    ``whiskers``: keyword arguments for :func:`actlab.evaluation.whiskers.whiskers_video` (episode, every,
    ...) to also write a whiskers video of the last policy; None for none.
    """
    sources = [as_source(p) for p in policies]
    if whiskers is not None:
        # before the evaluation, not after it
        check_whiskers_options(whiskers, spec, cfg.execution, cfg.episodes)
    meta = {
        "task": spec.task,
        "episodes": cfg.episodes,
        "seed": cfg.seed,
        "seeds": f"{cfg.seed}..{cfg.seed + cfg.episodes - 1} (episode i uses seed + i)",
        "env": asdict(spec),
        "config": asdict(cfg),
    }
    if out_dir is None:
        if cfg.videos or whiskers is not None:
            raise ActlabError(
                "videos and whiskers need an output directory", field="--out", fix="pass --out DIR"
            )
        t0 = time.perf_counter()
        evals = evaluate_many(sources, spec, cfg, None, on_episode)
        meta["seconds"] = round(time.perf_counter() - t0, 2)
        return EvalReport(evals, None, {}, meta)
    out_dir = Path(out_dir)
    # Never deleted by --overwrite, nor written into: the bundles, and a bridged LeRobot policy's directory.
    inputs = [source_dir(s) for s in sources]
    with atomic_dir(out_dir, overwrite=overwrite, kind=EVAL_KIND, inputs=inputs) as tmp:
        t0 = time.perf_counter()
        evals = evaluate_many(sources, spec, cfg, tmp, on_episode)
        meta["seconds"] = round(time.perf_counter() - t0, 2)
        for ev in evals:
            ev.episodes = [_relative(e, tmp) for e in ev.episodes]
        files = _write_outputs(tmp, evals, sources, spec, cfg, meta, whiskers)
    return EvalReport(evals, out_dir, files, meta)


def _write_outputs(tmp, evals, sources, spec, cfg, meta, whiskers) -> dict[str, str]:
    files = {"json": "results.json", "markdown": "results.md"}
    if len(evals) >= 2:
        plot_success_vs_step(evals, tmp / "success_vs_step.png")
        files["plot"] = "success_vs_step.png"
    if whiskers is not None:
        src = sources[-1]
        episode = int(whiskers.get("episode", 0))
        rel = Path("whiskers") / f"{src.name.replace('/', '_')}_episode_{episode:03d}.mp4"
        info = whiskers_video(src, spec, cfg, tmp / rel, **whiskers)
        files["whiskers"] = str(rel)
        meta["whiskers"] = {**info, "path": str(rel)}  # relative to the output directory
        if info.get("still"):
            files["whiskers_still"] = meta["whiskers"]["still"] = str(rel.with_suffix(".png"))
    title = f"actlab eval: {spec.task}"
    md_meta = {k: meta[k] for k in ("task", "episodes", "seeds", "seconds")}
    atomic_write_text(tmp / "results.md", markdown_report(evals, title, md_meta) + "\n")
    report = EvalReport(evals, None, files, meta).to_dict()
    atomic_write_json(tmp / "results.json", report)
    return files


__all__ = ["EvalReport", "best_checkpoint", "checkpoints_in", "is_bundle", "resolve_paths", "run_eval"]
