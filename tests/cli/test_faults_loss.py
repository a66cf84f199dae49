"""Faults that lost data or left processes behind (the second fault run; docs/faults.md), planted for real.

Real commands in processes of their own (a session each), real worker pools, real signals. Every
command's output directory carries the marker of what wrote it; ``--overwrite`` replaces only the same
command's output and never an input; two commands writing one ``--out`` never both succeed; SIGTERM and
SIGKILL leave no worker, no resource tracker and (after a re-run) no temporary directory behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import psutil
import pytest

from actlab.cli import main
from actlab.utils.io import OUTPUT_MARKER, check_out_dir, read_output_marker, reclaim_leftovers
from procs import cli, finish, started

pytest.importorskip("mujoco")

# Seconds a killed command's processes may take to disappear. The workers' parent-death signal is
# immediate once armed, but it is armed by the pool's initializer, which runs after a spawned worker has
# imported actlab and torch: at a load average of 10-15 on 2 cores that import took over 5 s, and a
# worker killed-parent before it ends its import exits at the initializer's parent check instead
# (the resource tracker follows when its pipe closes). A leak is forever; 60 s tells the two apart.
GONE_S = 60.0
# Seconds to wait for a command to have started its worker pool.
START_S = 120.0
# A recording long enough to be killed in the middle of (it never gets near the end). One worker: a pool
# of one is the same spawned worker and resource tracker to leave behind as a pool of two, and each
# worker costs its own interpreter start and imports.
RECORD = ["--episodes", "400", "--workers", "1", "--image-size", "16", "--cameras", "top"]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}


def _leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _spawned_workers(proc) -> list[psutil.Process]:
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for k in kids:
        try:
            if "multiprocessing.spawn" in " ".join(k.cmdline()):
                out.append(k)
        except psutil.Error:
            pass
    return out


def _kill_with_workers(cmd: list, sig: int, workers: int) -> tuple[int, str, list[psutil.Process]]:
    """Start ``cmd`` in a session of its own, send ``sig`` to its main process (only) once its worker
    pool is up, and return (exit code, stderr, the descendants it had) when every descendant is gone;
    the test fails if one survives GONE_S seconds."""
    with started(cmd, env=_env()) as proc:
        deadline = time.monotonic() + START_S
        while len(_spawned_workers(proc)) < workers:
            assert proc.poll() is None, proc.communicate(timeout=10)[1][-3000:]
            assert time.monotonic() < deadline, "the worker pool never started"
            time.sleep(0.1)
        time.sleep(0.5)  # the workers are at work (their initializer ran)
        family = psutil.Process(proc.pid).children(recursive=True)
        assert any("resource_tracker" in " ".join(p.cmdline()) for p in family), [p.cmdline() for p in family]
        os.kill(proc.pid, sig)
        code = proc.wait(timeout=30)
        _, alive = psutil.wait_procs(family, timeout=GONE_S)
        survivors = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
        assert not survivors, f"alive {GONE_S} s after {signal.Signals(sig).name}: {survivors}"
        err = proc.stderr.read()
    return code, err, family


# ------------------------------------------------------------------------------------------ data loss


def test_overwrite_never_deletes_an_input_of_the_command(bundle, tmp_path, capsys):
    # Before: `actlab eval RUN/checkpoints/step_N --out RUN --overwrite` deleted the whole run, the
    # checkpoint it had just evaluated included; `policy export B --out B --overwrite` replaced B.
    run = tmp_path / "run"
    ckpt = run / "checkpoints" / "step_0000010"
    shutil.copytree(bundle, ckpt)
    before = _tree(run)
    args = ["--episodes", "1", "--max-steps", "5", "--workers", "1", "--overwrite"]
    for out in (run, ckpt, ckpt / "inside"):  # holds the input, is it, lies inside it
        assert main(["eval", str(ckpt), "--out", str(out), *args]) == 2
        err = capsys.readouterr().err
        assert "is, holds or lies inside an input" in err
        assert f"neither is, holds nor lies inside {ckpt}" in err  # a fix that works for the parent too
    assert main(["policy", "export", str(ckpt), "--out", str(ckpt), "--overwrite"]) == 2
    assert "lies inside an input" in capsys.readouterr().err
    assert _tree(run) == before
    assert _leftovers(run) == [] and _leftovers(ckpt) == []


def test_overwrite_replaces_only_what_the_same_command_wrote(tmp_path, capsys):
    # Before: --overwrite replaced any directory: a user's files, a dataset of another command.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    synth = ["data", "synth", "--episodes", "1", "--frames", "5", "--image-size", "16"]
    assert main([*synth, "--out", str(mine), "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "not this command's to replace" in err and "did not write" in err
    assert "pass --overwrite" not in err  # the suggested fix is one that works
    assert (mine / "notes.txt").read_text() == "keep me"

    data = tmp_path / "data"
    assert main([*synth, "--out", str(data)]) == 0
    assert read_output_marker(data)["kind"] == "actlab data synth"
    before = _tree(data)
    record = ["sim", "record", "--episodes", "1", "--workers", "0", "--image-size", "16", "--cameras", "top"]
    assert main([*record, "--out", str(data), "--overwrite"]) == 2  # another kind of command
    err = capsys.readouterr().err
    assert "the output of actlab data synth, not of actlab sim record" in err
    assert _tree(data) == before
    assert main([*synth, "--out", str(data)]) == 2  # the same kind without --overwrite: says how
    assert "pass --overwrite to replace it" in capsys.readouterr().err
    assert main([*synth, "--out", str(data), "--overwrite", "--seed", "3"]) == 0  # ... and that works
    assert _tree(data) != before and _leftovers(data) == []


def test_a_target_that_appears_or_changes_while_the_command_runs_is_never_replaced(tmp_path):
    # Before: the target was checked only at the start and at the commit an existing one was renamed
    # aside and deleted, even without overwrite: two writers of one --out both "succeeded".
    from actlab.errors import ActlabError
    from actlab.utils.io import atomic_dir

    out = tmp_path / "out"
    with (
        pytest.raises(ActlabError, match="created or replaced by someone else"),
        atomic_dir(out, kind="t") as tmp,
    ):
        (tmp / "mine").write_text("lost")
        with atomic_dir(out, kind="t") as other:  # another writer finishes first
            (other / "theirs").write_text("kept")
    assert (out / "theirs").read_text() == "kept" and not (out / "mine").exists()
    # With overwrite: the output present at the start was replaced meanwhile by someone else's.
    with (
        pytest.raises(ActlabError, match="created or replaced by someone else"),
        atomic_dir(out, True, kind="t"),
        atomic_dir(out, True, kind="t") as other,
    ):
        (other / "newer").write_text("kept")
    assert (out / "newer").read_text() == "kept"
    assert _leftovers(out) == []


def test_two_recordings_into_one_out_at_once_never_both_succeed(tmp_path):
    # Before: both exited 0 and printed the same path; only the second recording survived.
    out = tmp_path / "data"
    cmd = cli("sim", "record", "--out", out, "--episodes", "3", "--workers", "0", "--image-size", "16")
    with started(cmd, env=_env()) as a, started(cmd, env=_env()) as b:
        results = [(p.returncode, err) for p in (a, b) for _, err in [finish(p, 240)]]
    codes = sorted(c for c, _ in results)
    assert codes == [0, 2], results
    loser = next(err for c, err in results if c == 2)
    assert "another actlab process" in loser or "created or replaced by someone else" in loser
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 3 and _leftovers(out) == []


# ------------------------------------------------------------------------------------------ orphans


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_killed_recording_leaves_no_process_and_a_rerun_reclaims_its_temp_dir(tmp_path, sig):
    # Before: both left the 2 spawned workers and the resource tracker running forever, and the hidden
    # .OUT.*.tmp directory was never removed, not even by a re-run.
    out = tmp_path / "data"
    code, err, _ = _kill_with_workers(cli("sim", "record", "--out", out, *RECORD), sig, workers=1)
    assert not out.exists()
    if sig == signal.SIGTERM:
        assert code == 143 and "terminated (SIGTERM)" in err, err[-2000:]
        assert _leftovers(out) == []  # removed by the command itself
        return
    assert code == -9 and len(_leftovers(out)) == 1  # SIGKILL: nothing of it could clean up
    # The re-run is not killed: it runs in this process (no interpreter start, no imports of its own).
    again = ["sim", "record", "--out", str(out), "--episodes", "1", "--workers", "0", "--image-size", "16"]
    assert main([*again, "--cameras", "top"]) == 0
    assert _leftovers(out) == [] and (out / OUTPUT_MARKER).is_file()


# SIGTERM slow (12-16 s at load 4): the SIGKILL case is the harder one (nothing of the command can clean up)
# and stays; SIGTERM's 143 and clean-up are the trainer's (tests/training/test_train_e2e.py) and the
# recorder's (above).
@pytest.mark.parametrize(
    "sig",
    [
        pytest.param(signal.SIGTERM, id="SIGTERM", marks=pytest.mark.slow),
        pytest.param(signal.SIGKILL, id="SIGKILL"),
    ],
)
def test_killed_evaluation_leaves_no_process_and_a_rerun_reclaims_its_temp_dir(bundle, tmp_path, sig):
    out = tmp_path / "eval"
    args = ["--episodes", "200", "--workers", "2", "--threads", "1", "--out", out]
    code, err, _ = _kill_with_workers(cli("eval", bundle, *args), sig, workers=2)  # (a pool from 2 up)
    assert not out.exists()
    if sig == signal.SIGTERM:
        assert code == 143 and "terminated (SIGTERM)" in err, err[-2000:]
        assert _leftovers(out) == []
        return
    assert code == -9 and len(_leftovers(out)) == 1
    # What a re-run does first (the recording test above re-runs the real command).
    assert check_out_dir(out, "actlab eval") is None and _leftovers(out) == []


# SIGTERM slow (12-16 s at load 4): the SIGKILL case is the harder one (nothing of the command can clean up)
# and stays; SIGTERM's 143 and clean-up are the trainer's (tests/training/test_train_e2e.py) and the
# recorder's (above).
@pytest.mark.parametrize(
    "sig",
    [
        pytest.param(signal.SIGTERM, id="SIGTERM", marks=pytest.mark.slow),
        pytest.param(signal.SIGKILL, id="SIGKILL"),
    ],
)
def test_killed_demo_leaves_no_process_behind(tmp_path, sig):
    out = tmp_path / "demo"
    # Two workers: the demo's --workers 1 records in its own process, with no pool to leave behind.
    args = ["--out", out, "--device", "cpu", "--episodes", "400", "--workers", "2", "--image-size", "16"]
    code, err, _ = _kill_with_workers(cli("demo", *args), sig, workers=2)
    assert code == (143 if sig == signal.SIGTERM else -9), err[-2000:]
    data = out / "data"
    assert not data.exists()
    if sig == signal.SIGTERM:
        assert _leftovers(data) == []
    else:  # what the next run does first when it records again
        assert len(_leftovers(data)) == 1
        assert reclaim_leftovers(data) == [] and _leftovers(data) == []
    assert (out / "demo_state.json").is_file()  # the next run resumes here


def test_a_temp_dir_of_a_live_process_or_not_ours_is_never_reclaimed(tmp_path, capsys):
    # The leftovers of a run that is still going are its work in progress; a name atomic_dir does not
    # make is not ours to delete.
    out = tmp_path / "data"
    synth = ["data", "synth", "--episodes", "1", "--frames", "5", "--image-size", "16", "--out", str(out)]
    with started(["sleep", "60"]) as sleeper:
        from actlab.utils.procs import host_tag

        live = tmp_path / f".data.actlab-{host_tag()}-{sleeper.pid}-abcd1234.tmp"
        dead = tmp_path / f".data.actlab-{host_tag()}-{2**22 + 7}-abcd1234.tmp"  # above pid_max: dead
        other_host = tmp_path / f".data.actlab-00000000-{2**22 + 7}-abcd1234.tmp"
        foreign = tmp_path / ".data.user-notes.tmp"
        for d in (live, dead, other_host, foreign):
            d.mkdir()
            (d / "f").write_text("x")
        assert main(synth) == 2
        err = capsys.readouterr().err
        assert f"another actlab process (pid {sleeper.pid}) is writing" in err
        assert live.is_dir() and not dead.exists() and other_host.is_dir() and foreign.is_dir()
    live.rename(tmp_path / "was-live")
    assert main(synth) == 0 and read_output_marker(out)["kind"] == "actlab data synth"
    assert other_host.is_dir() and foreign.is_dir()


def test_a_second_demo_in_the_same_directory_is_refused_at_once(tmp_path, capsys):
    # Before: two demos in one --out recorded, trained and evaluated into the same stage directories.
    from actlab.utils.lock import DirLock

    out = tmp_path / "demo"
    out.mkdir()
    (out / "demo_state.json").write_text("{}")
    with DirLock(out, "demo directory"):  # as a running demo holds it
        assert (
            main(["demo", "--out", str(out), "--device", "cpu", "--episodes", "2", "--image-size", "16"]) == 2
        )
    err = capsys.readouterr().err
    assert "demo directory is in use by another actlab process" in err
    assert sorted(p.name for p in out.iterdir()) == ["demo_state.json"]


def test_an_old_output_moved_aside_by_a_dead_run_is_put_back_not_deleted(tmp_path):
    # Where the filesystem cannot swap two directories in one step, the commit of an --overwrite moves
    # the old output aside first: a run killed between the two renames must not cost the old output.
    from actlab.utils.procs import host_tag

    out = tmp_path / "out"
    aside = tmp_path / f".out.actlab-{host_tag()}-{2**22 + 7}-abcd1234.old"
    aside.mkdir()
    (aside / "result.json").write_text("old")
    assert reclaim_leftovers(out) == []
    assert (out / "result.json").read_text() == "old" and not aside.exists()
    aside.mkdir()  # the new output did arrive: the aside copy is the stale one
    (aside / "result.json").write_text("stale")
    assert reclaim_leftovers(out) == [] and not aside.exists()
    assert (out / "result.json").read_text() == "old"


def test_a_sigterm_during_the_commit_waits_for_both_renames():
    # The commit's renames are not cut in half: the signal is raised once they are done.
    from procs import run_python

    code = """
import os, signal
from actlab.errors import Terminated
from actlab.utils.procs import exit_on_sigterm, sigterm_deferred
with exit_on_sigterm():
    try:
        with sigterm_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            print("block finished")
    except Terminated as e:
        print("then raised", e.code)
"""
    r = run_python(code, timeout=60)
    assert r.returncode == 0 and r.stdout.splitlines()[:2] == ["block finished", "then raised 143"], r
