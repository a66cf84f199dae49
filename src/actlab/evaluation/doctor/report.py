"""The doctor's report: the text (:func:`render`), the replay figure's episodes and the report directory
(report.md, doctor.json, replay.png) of a :class:`DoctorResult`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actlab.evaluation.doctor.findings import (
    DoctorResult,
)
from actlab.utils.io import atomic_dir, atomic_write_json, atomic_write_text
from actlab.utils.table import table
from actlab.viz.doctor import plot_replay

_MARK = {"ok": "ok", "warning": "WARN", "error": "ERROR"}
_REPLAY_HEADERS = ["episodes", "n", "frames", "first action", "chunk", "hold chunk", "mean chunk", "skill"]
_JOINT_HEADERS = ["episodes", "joint", "first action", "chunk", "hold chunk", "mean chunk"]


def _replay_rows(result: DoctorResult) -> list[tuple[Any, ...]]:
    nan = {"chunk_mean": float("nan"), "chunk": [float("nan")] * len(result.joint_names)}
    rows = []
    for split, s in result.replay.items():
        p = s["policy"]
        hold = s.get("hold", nan)["chunk_mean"]
        rows.append(
            (
                split,
                len(s["episodes"]),
                s["frames"],
                p["first_mean"],
                p["chunk_mean"],
                hold,
                s["mean"]["chunk_mean"],
                s["skill"],
            )
        )
    return rows


def _joint_rows(result: DoctorResult) -> list[tuple[Any, ...]]:
    rows = []
    for split, s in result.replay.items():
        hold = s["hold"]["chunk"] if "hold" in s else [float("nan")] * len(result.joint_names)
        for j, joint in enumerate(result.joint_names):
            p = s["policy"]
            rows.append((split, joint, p["first"][j], p["chunk"][j], hold[j], s["mean"]["chunk"][j]))
    return rows


def render(result: DoctorResult, markdown: bool = False, figure: str | None = None) -> str:
    """The findings, the replay tables and the verdict, as plain text or as markdown (report.md);
    ``figure``: the replay PNG's file name to link from the markdown."""
    findings = table(
        [(_MARK[f.severity], f.check, f.name, f.message) for f in result.findings],
        ["", "check", "what", "finding"],
        markdown,
    )
    replay = table(_replay_rows(result), _REPLAY_HEADERS, markdown) if result.replay else ""
    if not markdown:
        out = [f"policy:  {result.policy}", f"dataset: {result.dataset}", "", findings]
        if replay:
            out += [
                "",
                "open-loop replay (mean absolute error in dataset action std; skill: chunk / best baseline):",
                replay,
            ]
        out += ["", f"verdict: {result.verdict.name}", f"  {result.verdict.message}"]
        return "\n".join(out) + "\n"
    out = [
        f"# Policy doctor: {result.verdict.name}",
        "",
        f"- policy: `{result.policy}`",
        f"- dataset: `{result.dataset}`",
        "",
        f"**Verdict: {result.verdict.name}**: {result.verdict.message}.",
        "",
        "## Findings",
        "",
        findings,
    ]
    if replay:
        out += [
            "",
            "## Open-loop replay",
            "",
            "Mean absolute error in units of the dataset's action std, of the first predicted action and of "
            "the whole chunk, for the policy and two baselines on the same frames (hold the current state; "
            "the dataset's mean action). Skill: the policy's chunk error over the better baseline's "
            "(1 = baseline level, 0 = exact).",
            "",
            replay,
            "",
            table(_joint_rows(result), _JOINT_HEADERS, True),
        ]
        if figure:
            out += ["", f"![predicted vs recorded actions]({figure})"]
    return "\n".join(out) + "\n"


def figure_episodes(result: DoctorResult, per_set: int = 2) -> list[dict[str, Any]]:
    """Plain arrays for ``actlab.viz.doctor.plot_replay``: the first ``per_set`` episodes of each set."""
    out = []
    for split, reps in result.episodes.items():
        for r in reps[:per_set]:
            n = r.pred.shape[2]
            out.append(
                {
                    "title": f"{'training' if split == 'train' else 'held-out'} episode {r.episode}",
                    "frames": r.frames - r.frames[0],
                    "recorded": r.target[:, 0],
                    "predicted": r.pred[:, 0],
                    "chunks": r.pred,
                    "hold": r.state[:, :n] if r.state.shape[1] >= n else None,
                }
            )
    return out


# What a doctor report directory says wrote it: --overwrite replaces only an earlier report.
DOCTOR_KIND = "actlab policy doctor"


def write_report(
    result: DoctorResult, out_dir: str | Path, per_set: int = 2, overwrite: bool = False
) -> Path:
    """Write ``out_dir`` atomically: report.md, doctor.json (``as_dict()``) and replay.png."""
    episodes = figure_episodes(result, per_set)
    with atomic_dir(out_dir, overwrite, kind=DOCTOR_KIND, inputs=(result.policy, result.dataset)) as tmp:
        atomic_write_json(tmp / "doctor.json", result.as_dict())
        if episodes:
            title = f"{result.policy}: {result.verdict.name}"
            plot_replay(episodes, result.joint_names, tmp / "replay.png", title=title)
        atomic_write_text(tmp / "report.md", render(result, True, "replay.png" if episodes else None))
    return Path(out_dir)
