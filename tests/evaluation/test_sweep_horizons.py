"""`actlab eval --horizon 8,10`: a delay sweep that measures several execution horizons side by side, on
real MuJoCo envs with a real (tiny, untrained) act_relative bundle. At 267 ms an inference every 8 steps
beat every 10 for all four camera heads measured (docs/evaluation.md), and finding that took one run per
horizon and an `eval compare` per pair; the recommendation for the arm could not choose the horizon."""

from __future__ import annotations

import json

import pytest
from evalpolicies import tiny_rel_bundle

from actlab.cli import main
from actlab.evaluation.compare import cell_name
from actlab.evaluation.realtime import sweep_figure
from actlab.viz.eval import figure

pytest.importorskip("mujoco")


@pytest.fixture(scope="module")
def rel_bundle(tmp_path_factory):
    """An untrained act_relative bundle (chunk 12, 6 actions per chunk, rtc_max_delay 4)."""
    return tiny_rel_bundle(tmp_path_factory.mktemp("hz") / "bundle")


def _eval(bundle, *flags):
    base = ["eval", str(bundle), "--episodes", "2", "--max-steps", "12", "--workers", "1"]
    base += ["--batch-envs", "2"]
    return main([*base, *flags])


@pytest.mark.timeout(180)
def test_a_sweep_measures_each_horizon_names_its_cells_and_leaves_out_a_pair_that_cannot_run(
    rel_bundle, tmp_path, capsys
):
    out = tmp_path / "sweep"
    flags = ["--latency", "2,4", "--execution", "sync,async", "--horizon", "2,4,6"]
    flags += ["--json", "--out", str(out)]
    assert _eval(rel_bundle, *flags) == 0
    record = json.loads(capsys.readouterr().out)
    cells = record["cells"]
    assert [(c["mode"], c["latency_steps"], c["horizon"]) for c in cells] == [
        ("sync", 0, 6),
        ("async", 2, 2),
        ("async", 2, 4),
        ("async", 2, 6),
        ("async", 4, 4),
        ("async", 4, 6),
    ]
    # horizon 2 at delay 4: the next chunk would arrive after the current one ran out
    ((left,),) = [record["skipped"]]
    assert (left["mode"], left["latency_steps"], left["horizon"]) == ("async", 4, 2)
    assert left["reason"].startswith("the latency (4) is longer than the execution horizon (2)")
    md = (out / "sweep.md").read_text()
    assert "Left out (cells this policy cannot run)" in md and ": async@4 h2: the latency (4)" in md
    # cells are named with their horizon, and `eval compare` reads them by that name
    assert record["horizons"] == [2, 4, 6]
    assert [cell_name(c, cells, by_horizon=True) for c in cells] == [
        "sync@0",
        "async@2/h2",
        "async@2/h4",
        "async@2/h6",
        "async@4/h4",
        "async@4/h6",
    ]
    assert main(["eval", "compare", f"{out}#async@2/h2", f"{out}#async@2/h6"]) == 0
    assert "A: " in capsys.readouterr().out
    assert main(["eval", "compare", f"{out}#async@2", f"{out}#sync@0"]) == 2
    assert "async@2/h2, async@2/h4" in capsys.readouterr().err
    # the recommendation chooses the horizon with the mode: its flags run the best cell at delay 4
    (rec,) = record["recommendations"]
    at4 = [c for c in cells if c["latency_steps"] == 4]
    best = max(at4, key=lambda c: (c["successes"], -(c["boundary_jump"] or 0.0)))
    assert f"--policy.execution_horizon={best['horizon']}" in rec["flags"]
    assert f"horizon {best['horizon']}: the best of 4, 6 measured for async at delay 4" in rec["note"]
    # one line per mode and horizon in the figure
    fig = sweep_figure(cells, by_horizon=True)
    labels = {t.get_text() for t in fig.axes[0].get_legend().get_texts()}
    figure().close(fig)
    assert {"async h2", "async h4", "async h6", "sync (no delay)"} <= labels


@pytest.mark.timeout(60)
def test_a_horizon_list_that_cannot_run_is_refused_before_any_episode(rel_bundle, monkeypatch, capsys):
    import actlab.evaluation.harness as harness

    monkeypatch.setattr(harness, "run_item", lambda *a, **k: pytest.fail("an episode ran"))
    # horizon 2 fits no delay of the sweep: refused, not left out of every cell
    assert _eval(rel_bundle, "--latency", "4", "--execution", "async", "--horizon", "2,4") == 2
    err = capsys.readouterr().err
    assert "longer than the execution horizon (2)" in err and "fix:      pass --horizon 4" in err
    for value, said in (("8,08", "names one item twice"), ("4,", "an empty item")):
        assert _eval(rel_bundle, "--latency", "4", "--execution", "async", "--horizon", value) == 2
        err = capsys.readouterr().err
        assert said in err and "field:    --horizon" in err
    for value, said in (
        ("0,4", "expected a number >= 1, found 0"),
        ("4,x", "expected a whole number of actions (or a comma list of them), found 'x'"),
    ):
        with pytest.raises(SystemExit):  # each item as every count option: at parse time
            _eval(rel_bundle, "--latency", "4", "--execution", "async", "--horizon", value)
        assert f"argument --horizon: {said}" in capsys.readouterr().err
