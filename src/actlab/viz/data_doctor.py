"""The data doctor's report page: the findings and a per-episode table, worst episodes first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actlab.viz.dataset import write_filmstrip
from actlab.viz.report import Report

# Episodes listed in the per-episode table (the worst first); the JSON has them all.
EPISODE_ROWS = 50


def write_data_doctor_report(
    result: Mapping[str, Any], out_dir: str | Path, frames: Sequence[tuple[str, np.ndarray]] = ()
) -> tuple[Path, Path]:
    """``report.md`` and ``report.html`` in ``out_dir`` from ``DoctorResult.as_dict()``; ``frames``
    (``DoctorResult.frames``: caption, (S, H, W, 3) uint8) are shown as filmstrips, one PNG each."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    counts = result["counts"]
    r = Report(f"Data doctor: {result['root']}")
    sampled = (
        f"{result['video_samples']} frames per episode and camera decoded"
        if result["video_samples"]
        else "video content not sampled"
    )
    r.paragraph(
        f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['note']} note(s); {sampled}. "
        "Errors: the data is wrong. Warnings: likely a recording fault a policy would learn from. "
        "Notes: worth a look."
    )
    r.heading("Findings")
    if not result["problems"]:
        r.paragraph("None.")
    for i, p in enumerate(result["problems"], 1):
        r.heading(f"{i}. [{p['severity']}] {p['check']}: {p['problem']}", level=3)
        rows = [("file", p["file"]), ("field", p["field"])]
        if p["episodes"]:
            rows.append(("episodes", ", ".join(map(str, p["episodes"]))))
        rows += [("expected", p["expected"]), ("found", p["found"]), ("fix", p["fix"])]
        r.table(rows, ["", ""])
    if frames:
        r.heading("Flagged frames")
        for i, (caption, strip) in enumerate(frames):
            write_filmstrip([strip], out / f"frames_{i:02d}.png")
            r.image(f"frames_{i:02d}.png", caption)
    eps = sorted(result["episodes"], key=lambda e: (e["score"], e["episode"]))
    r.heading("Episodes (worst first)")
    flagged = [e for e in eps if e["reasons"]]
    r.paragraph(
        f"{len(flagged)} of {len(eps)} episodes named by a finding; score 1.0 minus 1.0 per error, 0.4 per "
        f"warning, 0.1 per note (at least 0). `actlab data curate PATH --out NEW --min-score S` drops "
        "those below S." + (f" The {EPISODE_ROWS} worst are listed." if len(eps) > EPISODE_ROWS else "")
    )
    r.table(
        [
            (e["episode"], e["length"], f"{e['score']:.2f}", ", ".join(e["reasons"]) or "-")
            for e in eps[:EPISODE_ROWS]
        ],
        ["episode", "frames", "score", "findings"],
    )
    return r.write(out)
