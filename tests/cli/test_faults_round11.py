"""Faults of our eleventh planted-fault run (docs/faults.md "Eleventh fault run"), planted for real: the
real parser, real files, real bundles and datasets, real signals.

Rows the tenth run left open:

- ``rl train`` refused for lack of disk left config.json and metrics.jsonl in ``--out`` (the check ran
  after the first round);
- a SIGTERM to ``rl reward-model`` exited 143 without a word;
- ``eval compare`` of a directory holding both results.json and sweep.json read results.json silently;
- the task_index check mapped a frame's task_index to its task's position in tasks.parquet, wrong for
  indices with gaps (0, 2, 5).
"""

from __future__ import annotations

import json
import shutil

import pytest

from actlab.cli import main

SMOKE = ["--preset", "smoke", "--set", "total_env_steps=400", "--set", "eval.episodes=2"]


# --------------------------------------------------------------------------- rows left by the tenth run
@pytest.mark.timeout(60)
def test_an_rl_run_refused_for_the_disk_writes_nothing(small_fs, tmp_path, capsys):
    """Before: the refusal came after the first round, leaving config.json and metrics.jsonl (z15)."""
    disk = small_fs(2 << 20)
    out = disk / "rl"
    assert main(["rl", "train", *SMOKE, "--set", "total_env_steps=100000", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "not enough disk space for this RL run's checkpoints" in err and "sac.buffer_size" in err, err
    assert not out.exists(), sorted(out.rglob("*"))
    # a directory of the user's own beside the run's files: left as it was
    mine = disk / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert main(["rl", "train", *SMOKE, "--set", "total_env_steps=100000", "--out", str(mine)]) == 2
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    capsys.readouterr()


@pytest.mark.timeout(60)
def test_the_replay_row_is_known_before_any_episode():
    """The disk check's row size, computed from the agent before any episode, is the row the replay
    stores (152 bytes for the smoke preset's joint state; images with the CNN; privileged state)."""
    from actlab.rl.agent import Agent
    from actlab.rl.config import PRESETS, apply_rl_overrides

    cnn = ["env.task=pick_place", "obs.encoder=cnn", 'obs.cameras=["top"]', "obs.image_size=32"]
    for sets, row in [([], 152), ([*cnn, "obs.frame_stack=2"], 12464), (["obs.privileged=on"], 152)]:
        cfg = apply_rl_overrides(PRESETS.get("smoke"), sets)
        assert Agent(cfg).transition_bytes() == row, sets


_SIGTERM_IN_ROLLOUTS = """
import os, signal, sys
import actlab.rl.reward_model as rm
from actlab.cli import main

def rollouts(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # a real SIGTERM, while the rollouts run
    raise AssertionError("the SIGTERM did not stop the command")

rm._rollout_frames = rollouts
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timeout(90)
def test_a_sigterm_to_the_reward_model_says_what_was_not_written(tmp_path, recording, bundle):
    """Before: a SIGTERM while rolling out exited 143 without a word (x07 of the tenth run). In a process
    of its own: before the fix the signal killed that process."""
    import subprocess
    import sys

    out = tmp_path / "rm"
    args = ["rl", "reward-model", "--demos", str(recording), "--base", str(bundle), "--out", str(out)]
    args += ["--set", "episodes=1", "--set", "rollouts=2", "--set", "rollout_envs=1"]
    proc = subprocess.run(
        [sys.executable, "-c", _SIGTERM_IN_ROLLOUTS, *args], capture_output=True, text=True, timeout=80
    )
    assert proc.returncode == 143, proc.stderr
    assert "terminated (SIGTERM)" in proc.stderr and f"nothing was written to {out}" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


def _results(path, outcomes: dict[int, bool]) -> None:
    episodes = [{"seed": s, "success": ok} for s, ok in outcomes.items()]
    record = {"task": "pick_place", "checkpoints": [{"name": "step_2", "episodes": episodes}]}
    (path / "results.json").write_text(json.dumps(record))


def _sweep(path, outcomes: dict[int, bool]) -> None:
    by_seed = {str(s): "success" if ok else "timeout" for s, ok in outcomes.items()}
    cell = {"policy": "p", "mode": "async", "latency_steps": 4, "outcomes_by_seed": by_seed}
    (path / "sweep.json").write_text(json.dumps({"task": "pick_place", "cells": [cell]}))


@pytest.mark.timeout(30)
def test_a_directory_with_both_evaluation_records_is_not_read_silently(tmp_path, capsys):
    """SILENT before: results.json was read, the sweep.json beside it ignored (left by the tenth run)."""
    both, ref = tmp_path / "both", tmp_path / "ref"
    both.mkdir()
    ref.mkdir()
    seeds = range(100000, 100006)
    _results(both, {s: False for s in seeds})
    _sweep(both, {s: True for s in seeds})
    _results(ref, {s: False for s in seeds})
    assert main(["eval", "compare", str(ref), str(both)]) == 2
    err = capsys.readouterr().err
    assert "holds two evaluation records" in err and f"{both}#MODE@DELAY" in err, err
    # named: the cell of the sweep (all solved), or the checkpoint of results.json (none solved)
    assert main(["eval", "compare", str(ref), f"{both}#async@4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["b"]["successes"] == 6
    assert main(["eval", "compare", str(ref), f"{both}#step_2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["b"]["successes"] == 0
    assert main(["eval", "compare", str(ref), str(both / "sweep.json"), "--json"]) == 0
    capsys.readouterr()


def _tasks_with_gaps(dataset, frame_task: list[int]) -> None:
    """tasks.parquet with task_index 0, 2, 5 (the episode's own task at 5) and the frames' task_index."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (dataset / "meta" / "actlab_checksums.json").unlink()  # as another tool's dataset: no checksum record
    tasks = pq.read_table(dataset / "meta" / "tasks.parquet").to_pylist()
    own = tasks[0]["task"]
    rows = [{"task_index": 0, "task": "first"}, {"task_index": 2, "task": "second"}]
    pq.write_table(
        pa.Table.from_pylist([*rows, {"task_index": 5, "task": own}]), dataset / "meta" / "tasks.parquet"
    )
    info = json.loads((dataset / "meta" / "info.json").read_text())
    info["total_tasks"] = 3
    (dataset / "meta" / "info.json").write_text(json.dumps(info))
    data = next((dataset / "data").rglob("*.parquet"))
    table = pq.read_table(data)
    i = table.schema.get_field_index("task_index")
    values = frame_task + [5] * (table.num_rows - len(frame_task))
    pq.write_table(
        table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type)), data
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "frames,said",
    [
        ([], None),  # every frame names its task (index 5): a valid dataset
        ([2], "name another task"),  # task 2 exists, but is not the episode's (was read as the episode's)
        ([3], "no row of tasks.parquet"),  # a gap
    ],
    ids=["valid", "another task", "a gap"],
)
def test_task_indices_with_gaps_are_read_by_value(tmp_path, tiny_dataset, frames, said):
    """SILENT/wrong before: task_index 5 of a table holding 0, 2, 5 was "no row of tasks.parquet" (a valid
    dataset refused), and task_index 2 was taken for the episode's task (its position)."""
    from actlab.datasets import open_dataset
    from actlab.datasets.doctor import diagnose

    ds = tmp_path / "ds"
    shutil.copytree(tiny_dataset, ds)
    _tasks_with_gaps(ds, frames)
    problems = [p for p in diagnose(ds, video_samples=0) if p.check == "task_index"]
    if said is None:
        assert problems == [] and len(open_dataset(ds).column("action")) > 0
    else:
        assert len(problems) == 1 and said in problems[0].problem, problems
        assert "0, 2, 5" in problems[0].expected or "5 (" in problems[0].expected, problems[0].expected


# ----------------------------------------------------------------------------- the eleventh run's probes
@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "argv",
    [
        ["policy", "bench", "act", "--batch-size", "0"],  # b24: a torch reshape traceback
        ["policy", "bench", "act", "--steps", "0"],  # b25: "no median for empty data"
        ["bench", "threads", "--rounds", "0"],  # b36
        ["bench", "threads", "--batch-size", "0"],  # b37
        ["policy", "info", "act", "--state-dim", "0"],  # b20: a torch warning, then a count
    ],
    ids=["policy bench batch", "policy bench steps", "bench threads rounds", "bench threads batch", "info"],
)
def test_a_count_of_zero_is_refused_at_parse_time(capsys, argv):
    """TRACEBACK before (b24, b25, b36, b37), after seconds of work; now argparse's usage error."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "expected a number >= 1, found 0" in err and "Traceback" not in err, err


@pytest.mark.timeout(30)
def test_a_ceiling_says_its_own_reason(capsys):
    """UNCLEAR before: `--seed 4294967296` and `--margin 1.5` were "more than one machine can hold or
    finish" (b45, s03)."""
    with pytest.raises(SystemExit):
        main(["sim", "record", "--out", "x", "--seed", "4294967296"])
    assert "expected a number <= 4294967295 (seeds of numpy's" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["find-batch-size", "--preset", "tiny", "--dataset", "x", "--margin", "1.5"])
    assert "(a fraction of the memory limit)" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_policy_info_checks_its_shape_options(bundle, capsys):
    """SILENT before: `policy info BUNDLE --cameras top` ignored --cameras (b22); `--image-size 0 16`
    (b17) and `--cameras top top` (b18) were counted."""
    assert main(["policy", "info", str(bundle), "--cameras", "top"]) == 2
    err = capsys.readouterr().err
    assert "--cameras size a policy type's inputs, not a saved bundle's" in err, err
    assert main(["policy", "info", "act", "--image-size", "0", "16"]) == 2
    assert "camera image too small" in capsys.readouterr().err
    assert main(["policy", "info", "act", "--cameras", "top", "top"]) == 2
    assert "a camera is named twice" in capsys.readouterr().err
    assert main(["policy", "info", str(bundle), "--json"]) == 0  # the bundle alone: counted
    capsys.readouterr()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("key", ["batch_size", "steps"])
def test_find_batch_size_refuses_a_set_of_what_it_searches(tiny_dataset, capsys, key):
    """SILENT before: `find-batch-size --set batch_size=4` ran the search, the setting overridden (b50)."""
    argv = ["find-batch-size", "--preset", "tiny", "--dataset", str(tiny_dataset), "--memory-limit", "4GiB"]
    assert main([*argv, "--set", f"{key}=4"]) == 2
    err = capsys.readouterr().err
    assert f"--set {key} has no effect here" in err and "nothing was run" in err, err


@pytest.mark.timeout(30)
def test_a_single_file_output_never_replaces_a_file_of_a_dataset_or_a_run(
    tmp_path, tiny_dataset, run_dir, capsys
):
    """LOSS before: `monitor --summary-json DS/meta/info.json` replaced the dataset's info.json (m06),
    `data stats A --out B/meta/stats.json` B's stats (m11), `sim view --out RUN/training.png` and
    `monitor --plot RUN/training.png` the run's curves (m12, m13). A new file there is still written."""
    ds = tmp_path / "ds"
    shutil.copytree(tiny_dataset, ds)
    before = {p: p.read_bytes() for p in (ds / "meta" / "info.json", ds / "meta" / "stats.json")}
    png = run_dir / "training.png"
    png_before = png.read_bytes()
    for argv in (
        ["monitor", "--summary-json", str(ds / "meta" / "info.json"), "--", "true"],
        ["data", "stats", str(tiny_dataset), "--out", str(ds / "meta" / "stats.json")],
        ["sim", "view", "--out", str(png), "--image-size", "16", "--frames", "2"],
        ["monitor", "--plot", str(png), "--", "true"],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "writing it would replace that file" in err and "nothing was run or written" in err, err
    assert {p: p.read_bytes() for p in before} == before and png.read_bytes() == png_before
    assert main(["data", "stats", str(tiny_dataset), "--out", str(ds / "stats_copy.json"), "--json"]) == 0
    capsys.readouterr()


@pytest.mark.timeout(30)
def test_absolute_dims_without_relative_stats_are_refused(tiny_dataset, capsys):
    """SILENT before: `data stats DS --absolute-dims 9` printed the stats, the option ignored (d02, d05)."""
    assert main(["data", "stats", str(tiny_dataset), "--absolute-dims", "9"]) == 2
    assert "--absolute-dims has no effect without --relative-horizon" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_chunk_longer_than_every_episode_is_said(tmp_path, tiny_dataset, capsys):
    """SILENT before: policy.chunk_size=1000 on 40-frame episodes trained without a word (t05)."""
    out = tmp_path / "run"
    args = ["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(out)]
    assert (
        main([*args, "--set", "steps=1", "--set", "policy.chunk_size=100", "--set", "log.progress=false"])
        == 0
    )
    err = capsys.readouterr().err
    assert "note: policy.chunk_size=100 is longer than the longest training episode" in err, err


@pytest.mark.timeout(30)
def test_an_unknown_sim_task_is_refused_before_the_policy_is_loaded(bundle, tmp_path, capsys):
    """UNCLEAR before: `eval --task nosuch` loaded the policy, warned "trained on so101_pick_place and
    evaluated on nosuch", then refused (e02)."""
    out = tmp_path / "ev"
    assert main(["eval", str(bundle), "--episodes", "1", "--task", "nosuch", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "unknown sim task 'nosuch'" in err and "evaluated on nosuch" not in err, err


@pytest.mark.timeout(30)
def test_rl_report_of_a_supervised_policy_names_what_it_is(bundle, tmp_path, capsys):
    """UNCLEAR before: `rl report RUN` (of actlab train) or a bundle: "not an RL checkpoint", fix "pass a
    run directory" (r01, r02)."""
    assert main(["rl", "report", str(bundle), "--episodes", "1", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "found:    an actlab policy bundle" in err and "actlab eval PATH" in err, err
