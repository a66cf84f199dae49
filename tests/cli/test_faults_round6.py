"""Faults of our sixth planted-fault run (docs/faults.md "Sixth fault run"), planted for real: the real
parser, real files, real commands and processes, a real read-only tmpfs.

- a MuJoCo rendering backend that cannot work (``MUJOCO_GL=bogus``, ``glfw`` without a display) is an
  ActlabError naming MUJOCO_GL (it was a traceback of eval, sim record and demo);
- a run directory's incomplete checkpoint is said by the sweep that skips it, and ``--whiskers`` with a
  real-time execution is refused (its episode ran in sync, without a word);
- ``demo --set`` of a key the demo sets itself (``data.path``: it trained on another dataset) is refused;
- a failed write outside a run's ``--out`` (a read-only frame cache) names that location, not the run;
- a float feature stored as integers is named by the doctor (it blamed a clipped leader arm);
- damaged ``metrics.jsonl`` rows are dropped with a note naming them, and a report refuses them readably;
- ``rl report`` and ``data view`` leave nothing they made after a refusal; threads above the CPU count
  are said; ``--latency``'s help names its default and ``--horizon`` its floor.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from actlab.cli import main
from actlab.errors import ActlabError
from actlab.evaluation.sweep import resolve_paths
from actlab.lerobot.bridge import lerobot_sources
from actlab.lifecycle.metrics_log import MetricsLog, read_metrics
from actlab.utils.threads import oversubscribed_note, usable_cpus
from procs import run_cli


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("gl", "when"), [("bogus", "import mujoco"), ("glfw", "creating the OpenGL context")]
)
def test_a_mujoco_gl_that_cannot_render_is_an_actlab_error(gl, when, tmp_path):
    """TRACEBACK before: MUJOCO_GL=bogus raised RuntimeError at `import mujoco` (a fresh process: mujoco
    reads MUJOCO_GL when it is imported), MUJOCO_GL=glfw without a display mujoco.FatalError at the first
    render. UNCLEAR before (found after the first fixes): `sim record --workers 2` said "a recording worker
    process died (killed, out of memory ...)" with a fix about memory."""
    env = {**os.environ, "MUJOCO_GL": gl, "DISPLAY": ""}
    out = tmp_path / "rec"
    r = run_cli("sim", "record", "--episodes", "2", "--workers", "2", "--image-size", "16", "--out", out,
                timeout=50, env=env)  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "worker process died" not in r.stderr
    assert f"MuJoCo's OpenGL rendering does not work here ({when} failed with MUJOCO_GL={gl})" in r.stderr
    assert "export MUJOCO_GL=egl" in r.stderr and not out.exists()


@pytest.mark.timeout(30)
def test_a_sweep_says_which_incomplete_checkpoint_it_leaves_out(bundle, tmp_path, capsys):
    """SILENT before: a run directory's step_N without model.safetensors (an interrupted copy) was left out
    of `eval RUN`'s sweep without a word."""
    run = tmp_path / "run"
    for step in (1, 2, 9):
        shutil.copytree(bundle, run / "checkpoints" / f"step_{step:07d}")
    (run / "checkpoints" / "step_0000009" / "model.safetensors").unlink()
    sources = resolve_paths([run])
    assert [s.step for s in sources] == [1, 2]
    err = capsys.readouterr().err
    assert "step_0000009 is left out of the sweep: not a complete checkpoint" in err
    assert "has no model.safetensors" in err


@pytest.mark.timeout(30)
def test_whiskers_with_a_real_time_execution_are_refused_before_the_evaluation(bundle, tmp_path, capsys):
    """SILENT before: `--execution async --latency 2 --whiskers` filmed the whiskers episode in sync."""
    out = tmp_path / "ev"
    argv = ["eval", str(bundle), "--episodes", "1", "--max-steps", "2", "--workers", "1"]
    assert main([*argv, "--execution", "async", "--latency", "2", "--whiskers", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "whiskers film the episode in sync execution, not --execution async" in err
    assert "nothing was run" in err and not out.exists()


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("item", "fix"),
    [("data.path={ds}", "actlab train --dataset PATH"), ("device=cpu", "--device"),
     ("data.image_size=32", "--image-size")],
)  # fmt: skip
def test_demo_refuses_a_set_of_its_own_settings(item, fix, tiny_dataset, tmp_path, capsys):
    """UNCLEAR before: `demo --set data.path=DS` recorded its demonstrations, then trained on DS (refused
    only because DS's cameras differed, blamed on policy.cameras)."""
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--episodes", "2", "--set", item.format(ds=tiny_dataset)]) == 2
    err = capsys.readouterr().err
    assert f"--set {item.split('=')[0]} is the demo's own setting" in err and fix in err
    assert not out.exists()


@pytest.mark.timeout(60)
def test_a_read_only_frame_cache_is_named_not_the_run(tiny_dataset, small_fs, tmp_path, capsys):
    """UNCLEAR before: a read-only data.cache_dir stopped training with "copy RUN to another disk and
    continue there with --resume" (RUN was writable, and did not exist: no checkpoint yet)."""
    ro = small_fs(1 << 20, read_only=True)
    out = tmp_path / "run"
    argv = ["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(out)]
    assert main([*argv, "--set", "steps=1", "--set", f"data.cache_dir={ro}/c"]) == 2
    err = capsys.readouterr().err
    assert "the filesystem is read-only" in err and f"file:     {ro}/c" in err
    assert "--set data.cache_dir=DIR, or ACTLAB_CACHE=DIR" in err
    assert f"copy {out}" not in err and "--resume" not in err


@pytest.mark.timeout(60)
def test_a_float_feature_stored_as_integers_is_named_by_the_doctor(tiny_dataset, tmp_path, capsys):
    """UNCLEAR before: actions stored as int64 (every fraction cut off) where info.json says float32 were
    reported as "pinned_action: the leader's reading is clipped ... recalibrate the leader arm", and
    `train` went on with them (exit 0)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ds = tmp_path / "ds"
    shutil.copytree(tiny_dataset, ds)
    (ds / "meta" / "actlab_checksums.json").unlink(missing_ok=True)  # a foreign (LeRobot) dataset
    data = next((ds / "data").rglob("*.parquet"))
    t = pq.read_table(data)
    rows = t.column("action").to_pylist()
    ints = pa.array([[int(v) for v in row] for row in rows], type=pa.list_(pa.int64()))
    pq.write_table(t.set_column(t.schema.get_field_index("action"), "action", ints), data)
    assert main(["data", "doctor", str(ds)]) == 1
    out = capsys.readouterr().out
    assert "feature 'action' is stored as int64 where info.json says float32" in out
    assert "pinned_action" not in out and "re-export the column as float32" in out
    # TRACEBACK (found after the first fixes): `data curate` of a column the doctor refuses (integers
    # here, text or another shape before) was a KeyError of its writer
    assert main(["data", "curate", str(ds), "--out", str(tmp_path / "cur"), "--drop-episodes", "0"]) == 2
    err = capsys.readouterr().err
    assert "column 'action' of the data files cannot be read as info.json declares it" in err
    assert "stored as int64" in err and not (tmp_path / "cur").exists()
    assert main(["data", "stats", str(ds)]) == 2  # (stats cached from such a column: cache version 2)
    assert "stored as int64 where info.json says float32" in capsys.readouterr().err


@pytest.mark.timeout(30)
def test_damaged_metrics_rows_are_dropped_with_a_note_or_refused_readably(tmp_path, capsys):
    """UNCLEAR before: a metrics.jsonl line of NUL bytes before the last refused `rl train --resume` and
    `rl report` with the raw NUL bytes as "found" and no fix; a torn or NUL-filled last line was dropped
    by a resume without a word (the fifth run left it so)."""
    rows = [json.dumps({"step": s, "loss": 1.0 / s}) for s in (1, 2, 3, 4)]
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(("\n".join([rows[0], "\0" * 40, rows[2], rows[3][:7]]) + "\n" + "\0" * 64).encode())
    with pytest.raises(ActlabError) as e:  # a reader (rl report, the plots): refused, readably, with a fix
        read_metrics(path)
    text = str(e.value)
    assert "line 2 is not JSON" in text and "40 NUL bytes" in text and "\0" not in text
    assert f"sed -i '2d' {path}" in text
    log = MetricsLog(tmp_path, enabled=True, total_steps=10, start_step=3, progress=False)  # a resume
    log.close()
    err = capsys.readouterr().err
    assert "dropped 3 damaged line(s) (line 2: 40 NUL bytes" in err and "(cut short)" in err
    assert [r["step"] for r in read_metrics(path)] == [1, 3]
    assert "\0" not in path.read_text()


@pytest.mark.timeout(30)
def test_horizon_and_latency_say_their_floor_and_default(capsys):
    """UNCLEAR before: `--horizon -3` was refused as "expected a number >= 0" and `--horizon 0` then as
    "an integer >= 1"; `--latency`'s help read "(4)", the form of a default, where the default is 0."""
    for value in ("-3", "0"):
        with pytest.raises(SystemExit):
            main(["eval", "--expert", "--horizon", value])
        assert f"--horizon: expected a number >= 1, found {value}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    assert "inference delay in control steps, e.g. 4 (default 0:" in " ".join(capsys.readouterr().out.split())


@pytest.mark.timeout(60)
def test_a_refused_rl_report_or_data_view_leaves_nothing_it_made(tiny_dataset, small_fs, tmp_path, capsys):
    """Left by the fifth run, fixed here: `rl report` kept the --out it had claimed (its marker) after
    refusing the run, and `data view` the pages written before a full disk."""
    new, empty = tmp_path / "new", tmp_path / "empty"
    empty.mkdir()
    for out in (new, empty):
        assert main(["rl", "report", str(tiny_dataset), "--out", str(out), "--episodes", "1"]) == 2
        assert "not an RL checkpoint" in capsys.readouterr().err
    assert not new.exists() and list(empty.iterdir()) == []
    full = small_fs(48 << 10) / "view"
    assert main(["data", "view", str(tiny_dataset), "--episode", "0", "--out", str(full)]) == 2
    assert "the disk is full" in capsys.readouterr().err
    assert not full.exists()


@pytest.mark.timeout(60)
def test_more_torch_threads_than_cpus_are_said(tmp_path, capsys):
    """Left by the fifth run, said here: `rl train --set threads=1000` ran its first round 30x slower on 2
    CPUs without a word (also `train --set num_threads`, `eval --threads`)."""
    many = str(usable_cpus() + 1)  # (more would slow this test down as much)
    smoke = ["--preset", "smoke", "--set", "total_env_steps=1", "--set", "eval.episodes=1"]  # one round
    assert main(["rl", "train", *smoke, "--set", f"threads={many}", "--out", str(tmp_path / "rl")]) == 0
    assert f"note: threads {many} is more than the {usable_cpus()} CPU" in capsys.readouterr().err
    argv = ["eval", "--expert", "--episodes", "1", "--max-steps", "2", "--workers", "1", "--threads", many]
    assert main(argv) == 0
    assert f"note: --threads {many} is more than the" in capsys.readouterr().err
    assert oversubscribed_note(usable_cpus(), "threads") is None


@pytest.mark.timeout(30)
def test_a_lerobot_sweep_says_which_incomplete_checkpoint_it_leaves_out(tmp_path, capsys):
    """The same class in LeRobot's layout: a lerobot-train checkpoint without pretrained_model/config.json
    was left out of `eval --lerobot-policy RUN` without a word (no child is started to list them)."""
    config = {
        "type": "act",
        "input_features": {"observation.state": {"type": "STATE", "shape": [6]}},
        "output_features": {"action": {"type": "ACTION", "shape": [6]}},
    }
    run = tmp_path / "lerobot_run"
    (run / "checkpoints" / "000010" / "pretrained_model").mkdir(parents=True)
    (run / "checkpoints" / "000010" / "pretrained_model" / "config.json").write_text(json.dumps(config))
    (run / "checkpoints" / "000020" / "pretrained_model").mkdir(parents=True)  # an interrupted save
    sources, _ = lerobot_sources([str(run)], sys.executable)
    assert [s.step for s in sources] == [10]
    err = capsys.readouterr().err
    assert "note: 000020 is left out of the sweep: not a complete LeRobot checkpoint" in err


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("argv", "said"),
    [(["train", "--preset", "tiny", "--dataset", "A", "--set", "data.path=B"],
      "--dataset and --set data.path"),
     (["train", "--preset", "tiny", "--dataset", "A", "--device", "cpu", "--set", "device=meta"],
      "--device and --set device"),
     (["rl", "train", "--preset", "residual", "--base", "A", "--set", "base=B"], "--base and --set base"),
     (["find-batch-size", "--preset", "tiny", "--dataset", "A", "--set", "data.path=B"],
      "--dataset and --set data.path")],
)  # fmt: skip
def test_an_option_and_a_set_of_its_key_are_refused_together(argv, said, tmp_path, capsys):
    """SILENT before: `train --dataset A --set data.path=B` trained on B (the --set applied last), and
    `--device cpu --set device=X` ran on cpu (the option applied last): one of the two was ignored."""
    out = ["--out", str(tmp_path / "out")] if argv[0] != "find-batch-size" else []
    assert main([*argv, *out]) == 2
    assert f"{said} both set" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
