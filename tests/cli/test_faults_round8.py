"""Faults of our eighth planted-fault run (docs/faults.md "Eighth fault run"), planted for real: the real
parser, real files, real signals, real locks.

- ``data view``, ``data doctor --report`` and ``rl report`` add to an ``--out`` they claimed: two at once
  both exited 0 with one's page over the other's, and a second run for another input wrote over the
  first's page or report (LOSS); a SIGTERM left the claimed ``--out`` behind;
- ``eval compare`` read damaged records as values ("false" solved, 100000.7 as seed 100000) or ended in
  tracebacks (no checkpoint, a cell without its mode), compared an evaluation with itself, and paired the
  seeds of two tasks;
- the commands printed for the arm after an so101_push evaluation ran pick-and-place;
- ``rl train --base RUN`` was refused naming the run's own copy, which then stayed; a base or demos of
  another sim task trained pick-and-place without a word; a reward model that is none was found late;
- ``data curate`` dropped a ``--trim`` with its episode, ``data convert`` dropped imaginary parts.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time

import numpy as np
import pytest

from actlab.cli import main
from actlab.cli.data import VIEW_KIND
from actlab.errors import Terminated
from actlab.utils.io import claimed_out_dir

SEED = 100_000


# ------------------------------------------------------------------------ claimed output directories
@pytest.mark.timeout(60)
def test_a_second_data_view_of_another_dataset_never_writes_over_the_first(tmp_path, tiny_dataset, capsys):
    """LOSS before: `data view A --out V` then `data view B --out V` wrote B's episode_000.html over A's."""
    other = tmp_path / "other"
    shutil.copytree(tiny_dataset, other)
    out = tmp_path / "view"
    assert main(["data", "view", str(tiny_dataset), "--out", str(out)]) == 0
    page = (out / "episode_000.html").read_bytes()
    capsys.readouterr()
    assert main(["data", "view", str(other), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "not this command's to write into" in err and f"for {tiny_dataset.resolve()}, not for" in err
    assert (out / "episode_000.html").read_bytes() == page
    # the same dataset adds its pages as before
    assert main(["data", "view", str(tiny_dataset), "--out", str(out), "--episode", "1"]) == 0
    assert (out / "episode_001.html").is_file() and (out / "episode_000.html").read_bytes() == page


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["view", "doctor"])
def test_a_claimed_out_that_another_command_is_writing_is_refused(tmp_path, tiny_dataset, capsys, command):
    """LOSS before: two `data view`s (or `data doctor --report`s) into one --out at once both exited 0, one's
    page over the other's. The writer holding the directory is planted as a real flock (DirLock refuses a
    second holder in the same process as in another)."""
    out = tmp_path / "out"
    kind = VIEW_KIND if command == "view" else "actlab data doctor"
    flag = "--out" if command == "view" else "--report"
    with claimed_out_dir(out, kind, inputs=(tiny_dataset,), option=flag):
        (out / "mine.html").write_text("the other writer's page")
        assert main(["data", command, str(tiny_dataset), flag, str(out)]) == 2
        assert "in use by another actlab process" in capsys.readouterr().err
        assert (out / "mine.html").read_text() == "the other writer's page"
    assert sorted(p.name for p in out.iterdir()) == [".actlab-output.json", "mine.html"]


@pytest.mark.timeout(30)
def test_a_sigterm_ends_a_claimed_out_as_an_error_does(tmp_path, tiny_dataset):
    """Before: a SIGTERMed `rl report` (any claimed --out) died at once and left its marked --out behind
    (Ctrl-C removed it). A real SIGTERM to this process inside the block: Terminated, the directory the
    block made removed."""
    out = tmp_path / "report"
    with pytest.raises(Terminated), claimed_out_dir(out, "actlab rl report", inputs=(tiny_dataset,)):
        (out / "report.md").write_text("half")
        # never send it without the block's handler: the default action would end the test run
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert not out.exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


# ------------------------------------------------------------------------------------- eval compare
def _results(path, outcomes, task="so101_pick_place", max_steps=300):
    """A results.json as actlab eval writes it (the fields compare reads)."""
    episodes = [
        {"index": i, "seed": SEED + i, "outcome": "success" if s else "timeout", "success": bool(s)}
        for i, s in enumerate(outcomes)
    ]
    path.mkdir(parents=True, exist_ok=True)
    record = {"task": task, "env": {"task": task, "max_steps": max_steps}}
    (path / "results.json").write_text(
        json.dumps({**record, "checkpoints": [{"name": "B", "episodes": episodes}]})
    )
    return path


def _sweep(path, edit=None):
    cells = [
        {
            "policy": "B",
            "mode": m,
            "latency_steps": d,
            "outcomes_by_seed": {str(SEED + i): "timeout" for i in range(3)},
        }
        for m, d in (("sync", 0), ("async", 2))
    ]
    record = {"task": "so101_pick_place", "cells": cells}
    if edit:
        edit(record)
    path.mkdir(parents=True, exist_ok=True)
    (path / "sweep.json").write_text(json.dumps(record))
    return path


def _edit_episodes(edit):
    def apply(record):
        edit(record["checkpoints"][0]["episodes"])

    return apply


_DAMAGE = {
    # results.json: before, the first two were tracebacks, the rest read as values
    "no checkpoint": (lambda r: r.update(checkpoints=[]), "checkpoints"),
    "a checkpoint that is no object": (lambda r: r["checkpoints"].__setitem__(0, "B"), "checkpoints[0]"),
    "success 'false'": (_edit_episodes(lambda e: e[0].update(success="false")), "episodes[0].success"),
    "success null": (_edit_episodes(lambda e: e[0].update(success=None)), "episodes[0].success"),
    "seed 100000.7": (_edit_episodes(lambda e: e[0].update(seed=SEED + 0.7)), "episodes[0].seed"),
    "seed true": (_edit_episodes(lambda e: e[0].update(seed=True)), "episodes[0].seed"),
    "a seed twice": (_edit_episodes(lambda e: e[1].update(seed=SEED)), "episodes[1].seed"),
    "no episode": (_edit_episodes(lambda e: e.clear()), "checkpoints[0].episodes"),
    "success against outcome": (_edit_episodes(lambda e: e[0].update(success=True)), "episodes[0]"),
}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("damage", list(_DAMAGE))
def test_a_damaged_results_json_is_refused_naming_the_field(tmp_path, capsys, damage):
    edit, field = _DAMAGE[damage]
    a = _results(tmp_path / "a", [0, 1, 0])
    record = json.loads((a / "results.json").read_text())
    edit(record)
    (a / "results.json").write_text(json.dumps(record))
    b = _results(tmp_path / "b", [0, 1, 0])
    assert main(["eval", "compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "the evaluation record is damaged" in err and field in err, err


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "damage",
    [
        lambda r: r["cells"][0].pop("mode"),  # a KeyError traceback before
        lambda r: r.update(cells=[]),  # an IndexError traceback before
        lambda r: r["cells"][1].update(outcomes_by_seed={str(SEED): True}),  # read as a failure before
        lambda r: r["cells"][1].update(outcomes_by_seed={"abc": "success"}),  # a traceback before
    ],
    ids=["cell without mode", "no cell", "outcome true", "seed abc"],
)
def test_a_damaged_sweep_json_is_refused_naming_the_field(tmp_path, capsys, damage):
    a = _sweep(tmp_path / "a", damage)
    b = _results(tmp_path / "b", [0, 0, 0])
    assert main(["eval", "compare", f"{a}#async@2", str(b)]) == 2
    assert "the evaluation record is damaged" in capsys.readouterr().err


@pytest.mark.timeout(30)
def test_an_evaluation_is_not_compared_with_itself_nor_across_tasks(tmp_path, capsys):
    a = _results(tmp_path / "a", [0, 1, 0])
    assert main(["eval", "compare", str(a), str(a / "results.json")]) == 2
    assert "A and B are the same evaluation" in capsys.readouterr().err
    sweep = _sweep(tmp_path / "s")
    assert main(["eval", "compare", f"{sweep}#sync@0", f"{sweep}#async@2"]) == 0  # two cells of one sweep
    capsys.readouterr()
    push = _results(tmp_path / "push", [0, 1, 0], task="so101_push")
    assert main(["eval", "compare", str(a), str(push)]) == 2
    err = capsys.readouterr().err
    assert "ran different tasks" in err and "so101_pick_place" in err and "so101_push" in err
    perturb = tmp_path / "perturb"
    perturb.mkdir()
    (perturb / "perturb.json").write_text(json.dumps({"task": "so101_pick_place", "cells": []}))
    assert main(["eval", "compare", str(perturb), str(a)]) == 2  # "not an evaluation directory" before
    assert "a robustness sweep (actlab eval --perturb)" in capsys.readouterr().err
    short = _results(tmp_path / "short", [0, 1, 0], max_steps=100)
    assert main(["eval", "compare", str(a), str(short)]) == 0
    assert "note: A's episodes ran at most 300 steps, B's 100" in capsys.readouterr().out


# ------------------------------------------------------------------------- the task a policy learned
def _bundle_trained_on(bundle, where, task, units="degrees"):
    """A copy of the bundle whose actlab.json says it was trained on a recording of ``task`` in ``units``
    (as training records its dataset's sim block)."""
    from actlab.policies import load_policy, save_policy

    sim = {"task": task, "episode_seeds": [0, 1], "units": units}
    extra = {"train": {"dataset": {"path": "/data/rec", "sim": sim}}}
    return save_policy(load_policy(bundle), where, extra=extra)


@pytest.mark.timeout(60)
def test_the_commands_for_the_arm_run_the_task_that_was_evaluated(bundle, tmp_path):
    """SILENT before: after `eval --task so101_push` the printed lerobot-rollout ran the sim's pick-and-place
    (no --robot.task) told "pick the cube and place it in the bowl"; the units were dropped."""
    from actlab.demo.pipeline import DemoConfig, next_steps, resolve
    from actlab.evaluation import EnvSpec, resolve_paths
    from actlab.evaluation.recommend import Measured, recommend

    (src,) = resolve_paths([bundle])
    cell = Measured(src.name, "sync", 0, 8, 1, 2, None, {SEED: "success", SEED + 1: "timeout"})
    rec = recommend(src, [cell], env=EnvSpec("so101_push", env_kwargs={"units": "so101_follower"}))
    assert "--robot.task=so101_push --robot.units=so101_follower" in rec.rollout_sim
    for line in (rec.rollout_sim, rec.rollout_arm):
        assert "--task='push the red cube into the blue zone'" in line and "bowl" not in line
    default = recommend(src, [cell])
    assert "--robot.task" not in default.rollout_sim and "place it in the bowl" in default.rollout_sim
    assert recommend(src, [cell], env=EnvSpec("gym_pusht/PushT-v0")) is None  # not the SO-101

    cfg = DemoConfig(
        out=str(tmp_path / "demo"), device="cpu", task="so101_stack", episodes=4, eval_episodes=2
    )
    steps = next_steps(cfg, resolve(cfg), "step_0000020")
    (rollout,) = [argv for _why, argv in steps if argv[0] == "lerobot-rollout"]
    assert "--robot.task=so101_stack" in rollout and "--task=stack the red cube on the green cube" in rollout


@pytest.mark.timeout(60)
def test_a_bundle_evaluated_on_another_task_than_it_learned_is_said(bundle, tmp_path):
    """SILENT before: a policy trained on so101_push evaluated on the default so101_pick_place: no word."""
    from actlab.evaluation import resolve_paths
    from actlab.evaluation.seeds import other_task_warnings

    (src,) = resolve_paths([_bundle_trained_on(bundle, tmp_path / "push_policy", "so101_push")])
    (line,) = other_task_warnings([src], "so101_pick_place")
    assert "trained on so101_push" in line and "evaluated on so101_pick_place" in line
    assert other_task_warnings([src], "so101_push") == []
    assert other_task_warnings(resolve_paths([bundle]), "so101_push") == []  # no recorded task: nothing


@pytest.mark.timeout(120)
def test_a_real_time_sweep_says_each_warning_once(bundle, tmp_path, capsys):
    """UNCLEAR before: a real-time sweep evaluates each cell on its own, and each cell printed the warning
    about the task again (3 copies in a 2-mode x 2-delay sweep). Within a command a line is said once."""
    from actlab.utils.say import said_once, say

    push = _bundle_trained_on(bundle, tmp_path / "push_policy", "so101_push")
    args = ["eval", str(push), "--episodes", "1", "--max-steps", "2", "--workers", "1"]
    args += ["--execution", "sync,async", "--latency", "0,2", "--out", str(tmp_path / "rt")]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert err.count("was trained on so101_push") == 1, err
    # Outside a scope every line is said; a scope inside another shares the outer one's lines.
    say("x")
    say("x")
    with said_once():
        say("y")
        with said_once():
            say("y")
            say("z")
        say("z")
    assert capsys.readouterr().err == "x\nx\ny\nz\n"


@pytest.mark.timeout(60)
def test_a_bundle_is_never_run_in_other_joint_units_than_it_learned(bundle, tmp_path, capsys):
    """SILENT before: a policy trained on so101_follower recordings (gripper 0-100) was evaluated in the
    sim's degrees (the default --units) without a word, and its bundle did not even record the units."""
    from actlab.datasets.format import sim_seeds

    assert sim_seeds(
        {"actlab_sim": {"task": "so101_push", "episode_seeds": [0], "units": "so101_follower"}}
    ) == {
        "task": "so101_push",
        "episode_seeds": [0],
        "units": "so101_follower",
    }  # what training copies into the bundle
    follower = _bundle_trained_on(bundle, tmp_path / "follower", "so101_pick_place", units="so101_follower")
    args = ["eval", str(follower), "--episodes", "1", "--max-steps", "2", "--workers", "1"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "trained on joint units so101_follower and would run in degrees" in err
    assert "fix:      --units so101_follower" in err
    out = tmp_path / "rl"
    assert main(["rl", "train", "--preset", "residual", "--base", str(follower), "--out", str(out)]) == 2
    assert "would run in degrees" in capsys.readouterr().err and not out.exists()


@pytest.mark.timeout(90)
def test_rl_inputs_are_refused_before_the_run_directory_is_made(bundle, tmp_path, tiny_dataset, capsys):
    """UNCLEAR before: `rl train --base RUN` (or an export) was refused naming the run's own copy RUN2/base,
    which stayed and refused the next start; a reward model that is none was found after the base was
    copied and loaded. SILENT before: a base or demonstrations recorded on so101_push trained
    pick-and-place."""
    run = tmp_path / "trainrun"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    push_base = _bundle_trained_on(bundle, tmp_path / "push_base", "so101_push")
    push_demos = tmp_path / "push_demos"
    shutil.copytree(tiny_dataset, push_demos)
    info = json.loads((push_demos / "meta" / "info.json").read_text())
    info["actlab_sim"] = {"task": "so101_push", "episode_seeds": [0, 1, 2]}
    (push_demos / "meta" / "info.json").write_text(json.dumps(info))
    cases = [
        (["--base", str(run)], "an actlab training run", str(run)),
        (["--base", str(push_base)], "trained on so101_push", str(push_base)),
        (["--base", str(bundle), "--demos", str(push_demos)], "recorded on so101_push", str(push_demos)),
        (
            [
                "--base",
                str(bundle),
                "--set",
                "env.reward=classifier",
                "--set",
                f"env.reward_model={tiny_dataset}",
            ],
            "reward model metadata not found",
            str(tiny_dataset),
        ),
    ]
    for i, (args, said, named) in enumerate(cases):
        out = tmp_path / f"rl{i}"
        assert main(["rl", "train", "--preset", "residual", "--out", str(out), *args]) == 2
        err = capsys.readouterr().err
        assert said in err and f"file:     {named}" in err, err
        assert not out.exists()


# ------------------------------------------------------------------------------------ data commands
@pytest.mark.timeout(60)
def test_a_trim_of_an_episode_that_is_dropped_is_refused(tmp_path, tiny_dataset, capsys):
    """SILENT before: `--drop-episodes 0 --trim 0:1:5` wrote the dataset without episode 0, the trim gone."""
    out = tmp_path / "cur"
    args = ["data", "curate", str(tiny_dataset), "--out", str(out), "--drop-episodes", "0", "--trim", "0:1:5"]
    assert main(args) == 2
    assert "--trim 0:1:5 trims episode 0, which --drop-episodes drops" in capsys.readouterr().err
    assert not out.exists()


def _npy_source(path, state=None, actions=None, lengths=(10, 10)):
    path.mkdir()
    obs = {"state": np.random.rand(20, 6).astype(np.float32) if state is None else state}
    np.save(path / "observations.npy", np.array(obs, dtype=object), allow_pickle=True)
    np.save(path / "actions.npy", np.random.rand(20, 6).astype(np.float32) if actions is None else actions)
    np.save(path / "rollout_length.npy", np.array(lengths))
    return path


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "source, said",
    [
        ({"state": np.ones((20, 6), np.complex64) * (1 + 2j)}, "state is not real numbers"),
        ({"actions": np.full((20, 6), 1e40)}, "actions hold values float32 cannot represent"),
        ({"lengths": (10.5, 9.5)}, "rollout lengths are not whole numbers"),
    ],
    ids=["complex state", "1e40 actions", "fractional lengths"],
)
def test_data_convert_refuses_values_a_cast_would_change(tmp_path, capsys, source, said):
    """SILENT before: complex state lost its imaginary parts (exit 0); UNCLEAR: 1e40 was "non-finite",
    [10.5, 9.5] "sums to 19"."""
    src = _npy_source(tmp_path / "src", **source)
    out = tmp_path / "ds"
    assert main(["data", "convert", str(src), "--out", str(out), "--codec", "h264"]) == 2
    assert said in capsys.readouterr().err
    assert not out.exists()
