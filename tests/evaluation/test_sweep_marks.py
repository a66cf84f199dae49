"""Delay sweeps mark the cells that differ from sync by McNemar's exact test: sweep.json's ``vs_sync``,
sweep.md's "vs sync" column and circles in sweep.png; ``actlab eval compare`` reads a sweep's cells."""

from __future__ import annotations

import json

import numpy as np
import pytest

from actlab.evaluation.compare import compare, load_outcomes
from actlab.evaluation.realtime import Cell, mark_vs_sync, write_sweep
from actlab.evaluation.results import EpisodeResult, summarize

SEED = 100_000


def _cell(mode, delay, successes):
    eps = [
        EpisodeResult(i, SEED + i, "success" if s else "timeout", bool(s), 100, None, None, None, None, 0.0)
        for i, s in enumerate(successes)
    ]
    return Cell("act", mode, delay, 10, summarize(eps), 1.0, outcomes={e.seed: e.outcome for e in eps})


def _sweep():
    sync = _cell("sync", 0, [1] * 20)
    async4 = _cell("async", 4, [1] * 10 + [0] * 10)  # 10 lost, 0 gained: p = 2 / 2^10
    blend4 = _cell("blend", 4, [1] * 18 + [0] * 2)  # 2 lost: p = 2 / 4 = 0.5
    return [sync, async4, blend4]


@pytest.mark.timeout(60)
def test_cells_that_differ_from_sync_are_marked_in_json_markdown_and_figure(tmp_path):
    cells = _sweep()
    mark_vs_sync(cells)
    sync, async4, blend4 = cells
    assert sync.vs_sync is None
    assert async4.vs_sync == {"gained": 0, "lost": 10, "p": pytest.approx(2 / 1024), "verdict": "worse"}
    assert blend4.vs_sync == {"gained": 0, "lost": 2, "p": 0.5, "verdict": "no evidence"}
    record = {"cells": [c.to_dict(30) for c in cells]}
    write_sweep(tmp_path / "s", cells, 30, record, "sweep", "title", overwrite=False, inputs=[])
    md = (tmp_path / "s" / "sweep.md").read_text()
    assert "| worse* (p=0.002, +0/-10) |" in md and "| same (p=0.5, +0/-2) |" in md
    assert "McNemar's exact test of the cell against its policy's sync cell" in md
    on_disk = json.loads((tmp_path / "s" / "sweep.json").read_text())["cells"]
    assert (
        on_disk[1]["vs_sync"]["verdict"] == "worse" and on_disk[1]["outcomes_by_seed"][str(SEED)] == "success"
    )

    # the circle is drawn: the figure with the marked cell differs from the one without it, in red pixels
    from PIL import Image

    unmarked = [dict(r, vs_sync=None) for r in record["cells"]]
    plain = tmp_path / "plain"
    write_sweep(plain, cells, 30, {"cells": unmarked}, "sweep", "title", overwrite=False, inputs=[])
    marked_png = np.asarray(Image.open(tmp_path / "s" / "sweep.png").convert("RGB")).astype(int)
    plain_png = np.asarray(Image.open(plain / "sweep.png").convert("RGB")).astype(int)

    def red(img):  # tab:red is (214, 39, 40)
        return int(((abs(img[..., 0] - 214) < 20) & (img[..., 1] < 70) & (img[..., 2] < 70)).sum())

    assert red(marked_png) > red(plain_png) + 50

    # compare reads a sweep's cells by name, and agrees with the mark
    r = compare(load_outcomes(f"{tmp_path / 's'}#sync@0"), load_outcomes(f"{tmp_path / 's'}#async@4"))
    assert (r["only_a"], r["only_b"], r["verdict"]) == (10, 0, "worse")
    assert r["p"] == pytest.approx(async4.vs_sync["p"])


@pytest.mark.timeout(30)
def test_a_sweep_without_sync_marks_nothing():
    cells = _sweep()[1:]
    mark_vs_sync(cells)
    assert all(c.vs_sync is None for c in cells)


@pytest.mark.timeout(60)
def test_the_figure_keeps_delay_zero_on_both_axes_when_a_cell_is_circled():
    """The legend entries of the circles are empty plots, which autoscaled the success axis to the delayed
    cells: delay 0 (the sync line's) fell off it while the jump axis still showed it."""
    from actlab.evaluation.realtime import sweep_figure
    from actlab.viz.eval import figure

    cells = _sweep()
    mark_vs_sync(cells)  # async at 4 is circled (worse than sync)
    fig = sweep_figure([c.to_dict(30) for c in cells], "t")
    try:
        for ax in fig.axes[:2]:
            low, high = ax.get_xlim()
            assert low < 0 < 4 < high, (low, high)
    finally:
        figure().close(fig)
