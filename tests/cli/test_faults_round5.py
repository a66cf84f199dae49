"""Faults of our fifth planted-fault run (docs/faults.md "Fifth fault run"), planted for real:
the real parser, real files, real commands and processes, a real tmpfs for the full disk.

- paths given through ``--set`` (``data.path``, ``data.cache_dir``, ``init_from``, ``base``) are held to
  the rule of the options: no output inside an input, and an empty cache path is not the current directory;
- ``rl train``: a device this torch cannot use is refused (it was a traceback), a disk too small for its
  checkpoints is refused after the first round (it failed at the end, every step lost), its checkpoints
  hold the replay's filled rows only, a Ctrl-C line names the checkpoint that exists;
- a checkpoint whose state.json records another step than its directory is refused (an RL resume went on
  at the edited step); ``rl report`` finds the newest checkpoint without ``last.json``;
- errors name the cause: a negative rollout length, ``--preset P --resume`` without a dataset, a
  checkpoint pruned by the trainer that holds the run.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from actlab.cli import main
from actlab.lifecycle.stop import stopped_line
from actlab.utils.lock import DirLock
from procs import ctrl_c_when

SMOKE = ["--preset", "smoke", "--set", "total_env_steps=400", "--set", "eval.episodes=2"]


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def rl_run(tmp_path_factory) -> Path:
    """A smoke RL run with two checkpoints (reach from joint state, a few seconds)."""
    out = tmp_path_factory.mktemp("rl") / "rl"
    assert main(["rl", "train", *SMOKE, "--set", "checkpoint.every=200", "--out", str(out), "--json"]) == 0
    assert len(list((out / "checkpoints").glob("step_*"))) >= 2
    return out


@pytest.mark.timeout(60)
def test_paths_given_through_set_are_held_to_the_rule_of_the_options(tiny_dataset, run_dir, tmp_path, capsys):
    """LOSS before: `--set data.cache_dir=DS/cache` (or DS/meta: the dataset's identity hash changed)
    decoded frames into the dataset, `--set data.path=DS --out DS/x` trained into it, a cache inside
    the `init_from` bundle wrote into the bundle; `rl train --set base=B --out B/x` was not checked.
    SILENT before: `--set data.cache_dir=` decoded the frames into the current directory."""
    ds = tmp_path / "ds"
    shutil.copytree(tiny_dataset, ds)
    before = _tree(ds)
    bundle = run_dir / "checkpoints" / "step_0000002"
    train = ["train", "--preset", "tiny", "--set", "steps=1", "--set", "log.progress=false"]
    cases = [
        (["--dataset", str(ds), "--out", str(tmp_path / "a"), "--set", f"data.cache_dir={ds}/meta"],
         "data.cache_dir lies inside an input of the command (data.path)"),
        (["--set", f"data.path={ds}", "--out", str(ds / "x")],
         "--out lies inside an input of the command (data.path)"),
        (["--dataset", str(ds), "--out", str(tmp_path / "b"), "--set", f"init_from={bundle}",
          "--set", f"data.cache_dir={bundle}/c"],
         "data.cache_dir lies inside an input of the command (init_from)"),
        (["--dataset", str(ds), "--out", str(tmp_path / "c"), "--set", "data.cache_dir="],
         "invalid training config value for data.cache_dir"),
    ]  # fmt: skip
    for argv, problem in cases:
        assert main([*train, *argv]) == 2, argv
        err = capsys.readouterr().err
        assert problem in err, (argv, err)
    assert _tree(ds) == before and not any((tmp_path / n).exists() for n in "abc")
    assert not (Path.cwd() / "stats").exists()
    base_before = _tree(bundle)
    argv = ["rl", "train", "--preset", "residual", "--set", f"base={bundle}", "--out", str(bundle / "x")]
    assert main(argv) == 2
    assert "--out lies inside an input of the command (base)" in capsys.readouterr().err
    assert _tree(bundle) == base_before


@pytest.mark.timeout(60)
@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device makes device=cuda valid")
@pytest.mark.parametrize("device", ["cuda", "meta"])
def test_rl_train_refuses_a_device_this_torch_cannot_use(tmp_path, device, capsys):
    """TRACEBACK before: `rl train --set device=cuda` on a CPU build of torch ended in torch.cuda's
    AssertionError "Torch not compiled with CUDA enabled"."""
    out = tmp_path / "rl"
    assert main(["rl", "train", *SMOKE, "--set", f"device={device}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "field:    device" in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.timeout(90)
def test_an_rl_run_whose_checkpoints_cannot_fit_stops_after_its_first_round(small_fs, capsys):
    """LOSS before: `rl train` on a 2 MB disk collected and trained to its end, then failed to write its
    only checkpoint ("the disk is full"): every step lost. Now it is refused after the first round,
    with the bytes it needs and the options that lower them."""
    disk = small_fs(2 << 20)
    t0 = time.monotonic()
    assert main(["rl", "train", *SMOKE, "--set", "total_env_steps=100000", "--out", str(disk / "rl")]) == 2
    err = capsys.readouterr().err
    assert "not enough disk space for this RL run's checkpoints" in err and "sac.buffer_size" in err
    assert time.monotonic() - t0 < 60  # not 100000 env steps
    assert not list((disk / "rl").glob("checkpoints/step_*"))


@pytest.mark.timeout(60)
def test_a_checkpoint_holds_only_the_replays_filled_rows(rl_run):
    """Before: torch.save of a slice wrote the whole preallocated ring: replay.pt was 15.2 MB for 3000
    transitions of 152 B (the capacity, 100000 rows), in every checkpoint."""
    from actlab.rl.replay import ReplayBuffer

    buf = ReplayBuffer(100_000)
    buf.add({"obs": torch.zeros(10, 30), "reward": torch.zeros(10)})
    data = io.BytesIO()
    torch.save(buf.state_dict(), data)
    assert len(data.getvalue()) < 20_000  # 10 rows of 124 B, not 100000
    for f in (rl_run / "checkpoints").glob("step_*/training_state/replay.pt"):
        assert f.stat().st_size < 1 << 20, f


@pytest.mark.timeout(60)
def test_a_state_json_that_records_another_step_than_its_directory_is_refused(
    rl_run, run_dir, tmp_path, capsys
):
    """SILENT before: `env_steps` edited in an RL checkpoint's state.json (3000 -> 99): the resume went on
    from step 99 and wrote its checkpoints under those numbers beside step_0003000, exit 0."""
    rl = tmp_path / "rl"
    shutil.copytree(rl_run, rl)
    last = sorted((rl / "checkpoints").glob("step_*"))[-1]
    state = last / "training_state" / "state.json"
    meta = json.loads(state.read_text())
    state.write_text(json.dumps({**meta, "env_steps": 99}))
    assert main(["rl", "train", "--out", str(rl), "--resume", "--set", "total_env_steps=800"]) == 2
    err = capsys.readouterr().err
    assert "env_steps 99, not the step of its directory" in err and f"mv {last}" in err
    assert sorted(p.name for p in (rl / "checkpoints").glob("step_*"))[-1] == last.name  # nothing new
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    state = run / "checkpoints" / "step_0000002" / "training_state" / "state.json"
    state.write_text(json.dumps({**json.loads(state.read_text()), "step": 7}))
    assert main(["train", "--out", str(run), "--resume", "--set", "steps=3"]) == 2
    err = capsys.readouterr().err
    assert "it records step 7, not the step of its directory" in err and "step_0000001" in err


@pytest.mark.timeout(90)
def test_rl_report_finds_the_newest_checkpoint_without_last_json(rl_run, tmp_path, capsys):
    """UNCLEAR before: a run without checkpoints/last.json (a kill, an edit) was "not an RL checkpoint
    ... pass a run directory" (it was one); a last.json naming no checkpoint the same; the fix of a
    damaged checkpoint named `actlab rl train --resume` to a report."""
    rl = tmp_path / "rl"
    shutil.copytree(rl_run, rl)
    (rl / "checkpoints" / "last.json").unlink()
    assert main(["rl", "report", str(rl), "--episodes", "1", "--out", str(tmp_path / "r1"), "--json"]) == 0
    newest = sorted((rl / "checkpoints").glob("step_*"))[-1]
    assert json.loads(capsys.readouterr().out)["residual_checkpoint"] == str(newest)
    (newest / "agent.safetensors").write_bytes(b"damaged")
    assert main(["rl", "report", str(rl), "--episodes", "1", "--out", str(tmp_path / "r2")]) == 2
    err = capsys.readouterr().err
    assert "run the same command again" in err and "the previous checkpoint" in err
    for p in (rl / "checkpoints").glob("step_*"):
        shutil.rmtree(p)
    (rl / "checkpoints" / "last.json").write_text(json.dumps({"step": 400, "path": "step_0000400"}))
    assert main(["rl", "report", str(rl), "--episodes", "1", "--out", str(tmp_path / "r3")]) == 2
    err = capsys.readouterr().err
    assert "the RL run has no complete checkpoint" in err and f"actlab rl train --out {rl} --resume" in err


@pytest.mark.timeout(90)
def test_a_ctrl_c_of_rl_train_names_the_checkpoint_that_exists(tmp_path, capsys):
    """UNCLEAR before: a Ctrl-C before the first checkpoint printed "writing a checkpoint" and then
    "stopped by SIGINT after checkpoint None; continue with ... --resume". The line now names a
    checkpoint that exists, or says that nothing was kept. A real SIGINT to the process running the
    command, which is this one (a Ctrl-C is caught, not a kill: no process of its own is needed)."""
    assert "None" not in stopped_line("sigint", None, "actlab rl train --out R --resume")
    assert "before the first checkpoint" in stopped_line("sigterm", None, "actlab train --out R --resume")
    out = tmp_path / "rl"
    argv = ["rl", "train", *SMOKE, "--set", "total_env_steps=1000000", "--out", str(out)]
    # config.json is written just before the envs are built
    with ctrl_c_when(lambda: (out / "config.json").is_file(), 60) as ctrl_c:
        code = main(argv)
    err = capsys.readouterr().err
    assert ctrl_c["sent"] and not ctrl_c["late"] and not ctrl_c["stray"], (ctrl_c, err[-2000:])
    assert code == 130, err[-2000:]
    assert "after checkpoint None" not in err
    kept = sorted((out / "checkpoints").glob("step_*"))
    if kept:
        assert f"after checkpoint {kept[-1]}" in err
    else:
        assert "before the first checkpoint: nothing was trained that could be kept" in err


@pytest.mark.timeout(60)
def test_a_negative_rollout_length_is_named_not_blamed_on_the_sum(tmp_path, capsys):
    """UNCLEAR before: rollout_length.npy [25, -5] for 20 frames was "rollout lengths do not add up to
    the number of frames" (they add up to 20)."""
    src = tmp_path / "src"
    src.mkdir()
    rng = np.random.default_rng(0)
    obs = {"image_left": rng.integers(0, 255, (20, 16, 16, 3), dtype=np.uint8), "state": np.zeros((20, 4))}
    np.save(src / "observations.npy", obs, allow_pickle=True)
    np.save(src / "actions.npy", np.zeros((20, 4), dtype=np.float32))
    np.save(src / "rollout_length.npy", np.array([25, -5]))
    assert main(["data", "convert", str(src), "--out", str(tmp_path / "ds")]) == 2
    err = capsys.readouterr().err
    assert "a rollout length is zero or negative" in err and "rollout 1: -5" in err
    assert "do not add up" not in err and not (tmp_path / "ds").exists()


@pytest.mark.timeout(60)
def test_a_preset_resume_without_a_dataset_names_the_cause(run_dir, tmp_path, capsys):
    """UNCLEAR before: `train --preset tiny --out RUN --resume` said "dataset info not found:
    CWD/meta/info.json" (the preset's empty dataset path, taken as the current directory)."""
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    assert main(["train", "--preset", "tiny", "--out", str(run), "--resume", "--set", "steps=3"]) == 2
    err = capsys.readouterr().err
    assert "no dataset given for the resume" in err and "leave --preset out" in err
    assert "info.json" not in err


@pytest.mark.timeout(60)
def test_a_checkpoint_pruned_by_the_trainer_that_holds_the_run_is_said_as_such(run_dir, tmp_path, capsys):
    """UNCLEAR before: `eval RUN` beside `train --out RUN --resume` failed with "config.json ... missing,
    check the path" of the checkpoint it had just chosen, which the trainer had pruned."""
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    gone = run / "checkpoints" / "step_0000001"
    shutil.rmtree(gone)  # what the trainer's pruning does
    with DirLock(run, "run directory"):  # a real flock, as the trainer holds it
        assert main(["eval", str(gone), "--episodes", "1"]) == 2
        err = capsys.readouterr().err
    assert "the run is being trained now" in err and f"pid {os.getpid()}" in err
    assert main(["eval", str(gone), "--episodes", "1"]) == 2  # nobody holds the run: the error as it was
    err = capsys.readouterr().err
    assert "being trained" not in err and "does not exist" in err


@pytest.mark.timeout(60)
def test_a_resume_of_an_rl_run_that_has_its_steps_says_nothing_is_trained(rl_run, tmp_path, capsys):
    """SILENT before: `rl train --out RUN --resume --set total_env_steps=100` on a run of 400+ steps
    printed its summary and exited 0 without a word that the budget asked for was already spent."""
    rl = tmp_path / "rl"
    shutil.copytree(rl_run, rl)
    before = sorted(p.name for p in (rl / "checkpoints").glob("step_*"))
    assert main(["rl", "train", "--out", str(rl), "--resume", "--set", "total_env_steps=100"]) == 0
    said = "".join(capsys.readouterr())
    assert "nothing to train; raise total_env_steps to continue it" in said
    assert sorted(p.name for p in (rl / "checkpoints").glob("step_*")) == before


@pytest.mark.timeout(60)
def test_a_lock_file_that_is_a_directory_is_named_as_actlabs_own(run_dir, tiny_dataset, tmp_path, capsys):
    """UNCLEAR before: a run's .actlab.lock (or a FrameStore's .KEY.lock) that is a directory was "pass
    the file, not its directory": the user passed neither."""
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    (run / ".actlab.lock").unlink(missing_ok=True)
    (run / ".actlab.lock").mkdir()
    assert main(["train", "--out", str(run), "--resume", "--set", "steps=3"]) == 2
    err = capsys.readouterr().err
    assert "the lock file of this run directory is a directory" in err and f"rmdir {run}" in err
    cache = tmp_path / "cache"
    assert main(["data", "cache", str(tiny_dataset), "--cache-dir", str(cache)]) == 0
    store = next(p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(("stats", ".")))
    shutil.rmtree(store)
    (cache / f".{store.name}.lock").mkdir()
    capsys.readouterr()
    assert main(["data", "cache", str(tiny_dataset), "--cache-dir", str(cache)]) == 2
    err = capsys.readouterr().err
    assert "if actlab makes this file itself (a .lock, a cache entry), move the directory away" in err


@pytest.mark.timeout(60)
def test_a_copy_of_a_finished_run_reports_its_own_paths(run_dir, tmp_path, capsys):
    """UNCLEAR before: `train --out COPY --resume` of a copied finished run said "already finished" and
    printed the original's run directory and checkpoints (summary.json is copied with the run)."""
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    assert main(["train", "--out", str(copy), "--resume"]) == 0
    out = capsys.readouterr().out
    assert f"run directory:   {copy}" in out and f"last checkpoint: {copy}/checkpoints/step_0000002" in out
    assert str(run_dir) not in out
