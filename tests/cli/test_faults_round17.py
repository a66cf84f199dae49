"""Faults of our seventeenth planted-fault run (docs/faults.md "Seventeenth fault run"), planted for real:
the real parser and commands, real datasets with their parquet files and videos edited, real evaluation
records, a real demo directory, real bundles with their files edited, a real residual RL run.

Each test names the probes of docs/faults_round17_probes.md it plants again and what happened before its
fix.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from actlab.cli import main

DATA = "data/chunk-000/file-000.parquet"


def _edit_json(path: Path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def _copy_dataset(src: Path, dst: Path) -> Path:
    """A copy without actlab's checksums (as LeRobot writes a dataset): the edits are found by what they
    are, not by a digest."""
    shutil.copytree(src, dst)
    (dst / "meta/actlab_checksums.json").unlink(missing_ok=True)
    return dst


def _edit_rows(root: Path, fn) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(root / DATA)
    cols = {name: table.column(name) for name in table.column_names}
    ep = cols["episode_index"].to_numpy()
    table = fn(table, ep, pa)
    pq.write_table(table, root / DATA)


def _set(table, name, values, pa, type_=None):
    i = table.schema.get_field_index(name)
    return table.set_column(i, name, pa.array(values, type_ or table.schema.field(name).type))


def _reverse_episode_0(table, ep, pa):
    idx = np.r_[np.flatnonzero(ep == 0)[::-1], np.flatnonzero(ep != 0)]
    out = table.take(pa.array(idx))
    return _set(out, "index", table.column("index").to_numpy(), pa)


def _swap_timestamps(table, ep, pa):
    ts = table.column("timestamp").to_numpy().copy()
    ts[[3, 4]] = ts[[4, 3]]
    return _set(table, "timestamp", ts, pa)


def _extra_column(table, ep, pa):
    return table.append_column("foo", pa.array(np.zeros(len(table))))


def _no_timestamp(table, ep, pa):
    return table.drop(["timestamp"])


# ------------------------------------------------------------------ data curate
@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("probe", "edit", "check"),
    [
        ("dp34", _reverse_episode_0, "frame_index"),
        ("dp05", _swap_timestamps, "timestamps"),
        ("dp22", _extra_column, "unlisted_column"),
        ("dp01", _no_timestamp, "missing_column"),
    ],
)
def test_curate_refuses_an_error_of_an_episode_it_keeps(tmp_path, tiny_dataset, capsys, probe, edit, check):
    """SILENT before (dp01, dp05-dp07, dp22, dp24, dp25, dp27, dp28, dp34: an input with an error in an
    episode curate keeps, or in the dataset as a whole): exit 0, the writer renumbered frames and rewrote
    the timestamps, and the copy's doctor said "0 error(s)"; dp34's episode 0, its rows in reverse order,
    was written backwards against its video. Now refused, naming the check and the episode to drop (and an
    error only in a dropped episode still curates: the point of dropping it)."""
    src = _copy_dataset(tiny_dataset, tmp_path / "in")
    _edit_rows(src, edit)
    out = tmp_path / "out"
    assert main(["data", "curate", str(src), "--out", str(out), "--drop-episodes", "1"]) == 2
    err = capsys.readouterr().err
    assert f"the input has an error the curated copy would hide (`{check}`)" in err and not out.exists()
    if check in ("frame_index", "timestamps"):
        assert "--drop-episodes 0" in err
        assert main(["data", "curate", str(src), "--out", str(out), "--drop-episodes", "0"]) == 0


@pytest.mark.timeout(90)
def test_curate_names_the_episode_a_short_video_cuts(tmp_path, tiny_dataset, capsys):
    """UNCLEAR before (dp32: a camera's mp4 cut to fewer frames than its episodes claim): curate said
    "video frame not found ..." without the episode, with "run `actlab data doctor`" for a fix. Now the
    episode is named, with --drop-episodes for it."""
    import av

    src = _copy_dataset(tiny_dataset, tmp_path / "in")
    video = next((src / "videos").rglob("*.mp4"))
    with av.open(str(video)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)][:100]  # of 120 (3 x 40)
    with av.open(str(video), "w") as c:
        stream = c.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
        for a in frames:
            c.mux(stream.encode(av.VideoFrame.from_ndarray(a, format="rgb24")))
        c.mux(stream.encode())
    assert main(["data", "curate", str(src), "--out", str(tmp_path / "out"), "--drop-episodes", "0"]) == 2
    err = capsys.readouterr().err
    assert "episode 2 cannot be written" in err and "--drop-episodes 2" in err and str(video) in err


@pytest.mark.timeout(60)
def test_millisecond_timestamps_are_not_fixed_by_an_fps_of_zero(tmp_path, tiny_dataset, capsys):
    """UNCLEAR before (dp24: timestamps written in milliseconds): "if the recording ran at 0.03 fps, set
    fps to 0 in info.json", a rate no dataset can have."""
    src = _copy_dataset(tiny_dataset, tmp_path / "in")
    _edit_rows(src, lambda t, ep, pa: _set(t, "timestamp", t.column("timestamp").to_numpy() * 1000, pa))
    assert main(["data", "view", str(src), "--out", str(tmp_path / "view")]) == 2
    err = capsys.readouterr().err
    assert "set fps to 0" not in err and "no recording runs below 1 fps" in err and "milliseconds" in err


# ------------------------------------------------------------------ the recorder's block of a dataset
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("probe", "field", "value"),
    [
        ("dp38", "episode_seeds", ["x", 1, 2]),
        ("dp39", "episode_seeds", "0..2"),
        ("dp40", "units", "radians"),
    ],
)
def test_a_damaged_sim_record_of_a_dataset_is_refused(tmp_path, tiny_dataset, capsys, probe, field, value):
    """TRACEBACK before (dp38: info.json's actlab_sim.episode_seeds ["x", ...]: int()'s ValueError when
    training saved its first checkpoint); SILENT before (dp39: seeds "0..2": trained, the bundle without
    its training scenes, so no evaluation could refuse them; dp40: units "radians": trained, recorded in
    the bundle, and every evaluation then said "--units radians", no such units). The doctor said 0
    errors. Now every open of the dataset refuses it, naming the field; the doctor lists it."""
    src = _copy_dataset(tiny_dataset, tmp_path / "in")
    block = {"task": "so101_pick_place", "episode_seeds": [0, 1, 2], field: value}
    _edit_json(src / "meta/info.json", lambda d: d.update(actlab_sim=block))
    out = tmp_path / "run"
    assert (
        main(["train", "--preset", "tiny", "--dataset", str(src), "--out", str(out), "--set", "steps=1"]) == 2
    )
    err = capsys.readouterr().err
    assert f"actlab_sim.{field}" in err and "damaged" in err and "Traceback" not in err
    assert main(["data", "doctor", str(src)]) == 1
    assert "sim_record" in capsys.readouterr().out


@pytest.fixture
def sim_bundle(tmp_path, bundle) -> Path:
    """A copy of the untrained 16 px bundle whose actlab.json says it was trained on sim recordings."""
    path = shutil.copytree(bundle, tmp_path / "policy")
    sim = {"task": "so101_pick_place", "episode_seeds": [0, 1, 2, 3], "units": "degrees"}
    _edit_json(
        path / "actlab.json", lambda d: d.update(extra={"train": {"dataset": {"path": "x", "sim": sim}}})
    )
    return path


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("probe", "field", "value"),
    [
        ("b06", "episode_seeds", "x"),
        ("b06b", "episode_seeds", ["x"]),
        ("b08", "task", 5),
        ("b09", "units", "radians"),
    ],
)
def test_a_damaged_sim_record_of_a_bundle_is_refused(tmp_path, sim_bundle, capsys, probe, field, value):
    """SILENT before (b06: the bundle's extra.train.dataset.sim.episode_seeds "x": the training-seed check
    off, exit 0); TRACEBACK before (b06b: ["x"], int()'s ValueError); UNCLEAR before (b08: task 5: "trained
    on 5 ... --task 5"; b09: units "radians": fix "--units radians", no such units)."""
    _edit_json(
        sim_bundle / "actlab.json", lambda d: d["extra"]["train"]["dataset"]["sim"].update({field: value})
    )
    argv = ["eval", str(sim_bundle), "--episodes", "1", "--max-steps", "2", "--workers", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"extra.train.dataset.sim.{field}" in err and "actlab.json" in err and "Traceback" not in err
    assert "copy the bundle again" in err


# ------------------------------------------------------------------ a bundle's files
def _refresh_digest(bundle: Path, name: str) -> None:
    digest = hashlib.sha256((bundle / name).read_bytes()).hexdigest()
    _edit_json(bundle / "actlab.json", lambda d: d["sha256"].update({name: digest}))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("probe", "edit", "want"),
    [
        ("b21r", lambda s: s["action"]["std"].__setitem__(2, float("nan")), "finite values"),
        ("b23r", lambda s: s["action"].pop("mean"), "have no 'mean'"),
        ("b25r", lambda s: s["action"]["mean"].__setitem__(1, "x"), "are not numbers"),
        ("b29r", lambda s: s["action"]["mean"].__setitem__(0, 1e300), "[1e+300,"),
    ],
)
def test_an_edited_bundle_stats_file_is_said_as_the_bundle(tmp_path, bundle, capsys, probe, edit, want):
    """UNCLEAR before (b21r, b23r, b25r: a bundle's stats.json edited, its digest refreshed): the fix was
    "compute stats with actlab.datasets.compute_stats(ds, **cfg.stats_request())" (an API call) or "check
    the dataset with actlab data doctor" (the dataset is fine); (b22r, b26r, b29r) found showed the
    normalizer built from the file (std -1 and 0 as 1.0, a mean 1e300 as inf), not what the file holds,
    under the field "action (dots written as _).mean"."""
    path = shutil.copytree(bundle, tmp_path / "policy")
    _edit_json(path / "stats.json", edit)
    _refresh_digest(path, "stats.json")
    assert main(["policy", "info", str(path)]) == 2
    err = capsys.readouterr().err
    assert want in err and "compute_stats" not in err and "data doctor" not in err
    assert "use the bundle's own stats.json" in err and "dots written" not in err


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("probe", "text"), [("b11", "[]"), ("b32", '{"format": ')])
def test_eval_of_a_bundle_with_damaged_metadata_names_the_bundle_fix(tmp_path, bundle, capsys, probe, text):
    """UNCLEAR before (b11, b32: a bundle's actlab.json `[]` or cut short, then `actlab eval`): "repair or
    regenerate the file" / "restore the file from a copy or regenerate it" (no command regenerates one
    file of a bundle; `policy info` said the bundle's own fix)."""
    path = shutil.copytree(bundle, tmp_path / "policy")
    (path / "actlab.json").write_text(text)
    assert main(["eval", str(path), "--episodes", "1", "--max-steps", "2", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "regenerate" not in err and "copy the bundle again from its source" in err


# ------------------------------------------------------------------ eval --perturb
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("probe", "value", "want"),
    [
        ("e10", "lighting=", "no levels given after '='"),
        ("e08", "obs_delay=2.5", "expected: whole numbers from 0 to 30"),
        ("e13", "distractors=1.5,2", "--perturb distractors=2,2"),
    ],
)
def test_perturb_levels_empty_or_fractional_are_said(bundle, capsys, probe, value, want):
    """SILENT before (e10: `--perturb lighting=`, an empty level list: the default levels ran without a
    word, while `lighting=,` was refused); UNCLEAR before (e08, e13: "obs_delay levels are whole numbers",
    found the Python tuple "(2.5,)", no range, no fix)."""
    assert main(["eval", str(bundle), "--episodes", "1", "--workers", "1", "--perturb", value]) == 2
    err = capsys.readouterr().err
    assert want in err and "(2.5,)" not in err


# ------------------------------------------------------------------ eval compare
@pytest.fixture(scope="module")
def records(tmp_path_factory, bundle) -> dict[str, Path]:
    """Two evaluations of the bundle on the same 3 seeds: a results.json and a delay sweep's sweep.json."""
    root = tmp_path_factory.mktemp("records")
    base = ["eval", str(bundle), "--episodes", "3", "--max-steps", "4", "--workers", "1"]
    assert main([*base, "--out", str(root / "a")]) == 0
    assert main([*base, "--execution", "sync,async", "--latency", "0,2", "--out", str(root / "s")]) == 0
    return {"a": root / "a", "s": root / "s"}


def _results(d):
    return d["checkpoints"][0]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("probe", "kind", "edit", "field"),
    [
        ("c20", "a", lambda d: d.update(episodes=7), "field:    episodes"),
        ("c16", "a", lambda d: d.update(episodes=float("nan")), "field:    episodes"),
        (
            "c17",
            "a",
            lambda d: _results(d)["summary"].update(success_rate=float("nan")),
            "summary.success_rate",
        ),
        ("c23", "a", lambda d: _results(d)["summary"].update(outcomes={"success": 3}), "summary.outcomes"),
        ("c14", "a", lambda d: _results(d)["episodes"][0].update(outcome=5), "episodes[0].outcome"),
        ("c28", "s", lambda d: d["cells"][2].update(success_rate=float("nan")), "cells[2].success_rate"),
    ],
)
def test_compare_refuses_an_edited_count_of_a_record(tmp_path, records, capsys, probe, kind, edit, field):
    """SILENT before (c14, c16, c17, c20, c23, c28: a record's top-level episodes 7 or NaN beside 3
    episodes, a success_rate NaN, a failure taxonomy of 3 successes, an outcome 5): compared without a
    word, while a checkpoint's edited episodes or successes count was refused as damaged."""
    rec = shutil.copytree(records[kind], tmp_path / "rec")
    name = "results.json" if kind == "a" else "sweep.json"
    _edit_json(rec / name, edit)
    b = str(rec) if kind == "a" else f"{rec}#async@2"
    assert main(["eval", "compare", str(records["a"]), b]) == 2
    err = capsys.readouterr().err
    assert "the evaluation record is damaged" in err and field in err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("probe", ["c27", "c21"])
def test_compare_refuses_a_record_holding_a_name_twice(tmp_path, records, capsys, probe):
    """SILENT before (c27: a sweep.json's cell edited to a second async@2: `DIR#async@2` compared the
    first of the two); UNCLEAR before (c21: two checkpoints of one name: "name the one", with a fix,
    DIR#step_N, that then compared the first)."""
    if probe == "c27":
        rec = shutil.copytree(records["s"], tmp_path / "rec")
        _edit_json(rec / "sweep.json", lambda d: d["cells"][1].update(mode="async", latency_steps=2))
        b, field = f"{rec}#async@2", "cells["
    else:
        rec = shutil.copytree(records["a"], tmp_path / "rec")
        _edit_json(rec / "results.json", lambda d: d["checkpoints"].append(dict(d["checkpoints"][0])))
        b, field = f"{rec}#policy", "checkpoints[1]"
    assert main(["eval", "compare", str(records["a"]), b]) == 2
    err = capsys.readouterr().err
    assert "the evaluation record is damaged" in err and field in err and "again" in err


@pytest.mark.timeout(60)
def test_compare_of_a_directory_of_records_names_them(tmp_path, records, capsys):
    """UNCLEAR before (c31: `eval compare A runs/demo/eval`, the demo's eval directory, its records in
    sweep/ and best/): "not an evaluation directory", fix "pass the --out directory of an actlab eval
    run"."""
    shutil.copytree(records["a"], tmp_path / "eval" / "best")
    assert main(["eval", "compare", str(records["a"]), str(tmp_path / "eval")]) == 2
    err = capsys.readouterr().err
    assert "evaluations in its subdirectories: best" in err and str(tmp_path / "eval" / "best") in err


# ------------------------------------------------------------------ the demo's state file
DEMO = ["--episodes", "2", "--eval-episodes", "1", "--image-size", "16", "--set", "steps=2", "--workers", "1"]


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    """A 2-episode 16 px demo with 2 training steps, its delay sweep included (--realtime)."""
    out = tmp_path_factory.mktemp("demo") / "demo"
    assert main(["demo", "--out", str(out), *DEMO, "--realtime"]) == 0
    return out


@pytest.mark.timeout(180)
def test_the_demo_reuses_no_result_without_its_digest(tmp_path, demo_dir, capsys):
    """SILENT before (d08: demo_state.json's realtime entry without its digest, a cell's successes edited
    to 5: the report's table said "5/2"); TRACEBACK before (d01: every entry without a digest and the
    confirmation's counts edited: matplotlib's "'yerr' must not contain negative values"). An entry
    without a digest is run again, once (it writes its digest)."""
    out = shutil.copytree(demo_dir, tmp_path / "demo")

    def edit(d):
        d["realtime"].pop("digest")
        d["realtime"]["result"]["cells"][0]["successes"] = 5

    _edit_json(out / "demo_state.json", edit)
    assert main(["demo", "--out", str(out), *DEMO, "--realtime"]) == 0
    err = capsys.readouterr().err
    assert "the realtime stage's result has no digest" in err
    assert "| 5/1 " not in (out / "report.md").read_text()
    assert "digest" in json.loads((out / "demo_state.json").read_text())["realtime"]


@pytest.mark.timeout(60)
def test_the_demo_delay_sweep_compares_with_its_confirmation(demo_dir, capsys):
    """UNCLEAR before (c32: `eval compare DEMO/eval/best DEMO/eval/realtime#sync@0`, the demo's own
    confirmation and its delay sweep's sync cell, the same episodes): refused as "does not record the task
    ... (removed from the record?)": the demo wrote its sweep.json without the task."""
    assert main(["eval", "compare", str(demo_dir / "eval/best"), f"{demo_dir}/eval/realtime#sync@0"]) == 0
    assert "same 1 seeds" in capsys.readouterr().out


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("probe", "text"), [("d03", '{"record": {"settings": '), ("d04", "[]")])
def test_a_damaged_demo_state_file_names_fresh(tmp_path, capsys, probe, text):
    """UNCLEAR before (d03, d04: demo_state.json cut short, or `[]`): "repair or regenerate the file",
    "restore the file from a copy or regenerate it": no command regenerates it (--fresh starts over)."""
    out = tmp_path / "demo"
    out.mkdir()
    (out / "demo_state.json").write_text(text)
    assert main(["demo", "--out", str(out), *DEMO]) == 2
    err = capsys.readouterr().err
    assert "--fresh" in err and "regenerate" not in err


# ------------------------------------------------------------------ a residual run's base
@pytest.fixture(scope="module")
def residual(tmp_path_factory, bundle, recording) -> tuple[Path, Path]:
    """(a residual RL run of 120 env steps on a copy of the bundle, that copy)."""
    root = tmp_path_factory.mktemp("residual")
    base = shutil.copytree(bundle, root / "base")
    sets = [
        "total_env_steps=100",
        "env.num_envs=2",
        "env.max_steps=20",
        "eval.every=100",
        "eval.episodes=1",
        "residual.confirm_episodes=1",
        "sac.learning_starts=20",
        "sac.actor_starts=40",
        "sac.batch_size=8",
    ]
    argv = ["rl", "train", "--preset", "residual", "--base", str(base), "--demos", str(recording)]
    assert main([*argv, "--out", str(root / "run"), *(x for s in sets for x in ("--set", s))]) == 0
    return root / "run", base


def _other_weights(bundle: Path, dst: Path) -> Path:
    """A bundle of the same config, features and stats as ``bundle``, with other weights."""
    import torch

    from actlab.policies import load_policy, save_policy

    policy = load_policy(bundle)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.01)
    save_policy(policy, dst)
    return dst


@pytest.mark.timeout(120)
@pytest.mark.parametrize("probe", ["rb01", "rb05", "rb08"])
def test_a_residual_run_refuses_a_base_of_other_weights(tmp_path, residual, capsys, probe):
    """SILENT before (rb01: the run's own copy of its base deleted, the bundle --base names replaced by
    one of the same shape with other weights: resumed on it, exit 0; rb05: the copy itself replaced and
    passed as --base: resumed; rb06, rb08: `rl report` evaluated the residual on that other base).
    UNCLEAR before (rb03: a base of another image size: "camera ... has the wrong shape, fix: convert HWC
    frames with .permute"). Each checkpoint now records its base's digest."""
    run = shutil.copytree(residual[0], tmp_path / "run")
    base = tmp_path / "base"
    _edit_json(run / "config.json", lambda d: d.update(base=str(base)))
    for f in (run / "checkpoints").glob("step_*/rl_config.json"):
        _edit_json(f, lambda d: d.update(base=str(base)))  # the run as if started from tmp_path/base
    shutil.rmtree(run / "base")
    if probe == "rb05":  # the copy replaced, and passed as --base
        _other_weights(residual[1], run / "base")
        argv = ["rl", "train", "--out", str(run), "--resume", "--set", f"base={run / 'base'}"]
    else:
        _other_weights(residual[1], base)
        argv = ["rl", "train", "--out", str(run), "--resume", "--set", "total_env_steps=200"]
        if probe == "rb08":
            argv = ["rl", "report", str(run), "--episodes", "1", "--out", str(tmp_path / "report")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the base policy is not the one this run's checkpoints were trained on" in err
