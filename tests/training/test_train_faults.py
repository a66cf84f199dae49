"""Faults a run must survive without losing data or training on garbage (docs/training.md, "Faults").

Real processes, real datasets, real allocation failures; the full disk is injected at the file-write call
(the checkpoint writer's files go through ``os.fdopen``), everything else is the real thing.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from actlab.cli import main
from actlab.errors import ActlabError
from actlab.lifecycle.metrics_log import read_metrics
from actlab.training import apply_train_overrides, get_preset, with_dataset
from actlab.training.loop import KILL_AT_STEP_ENV, train
from actlab.utils.lock import LOCK_FILE, DirLock

QUIET = ["log.progress=false", "log.plot=false", "eval.every=0"]


def _cmd(*args):
    return [sys.executable, "-m", "actlab.cli", "train", *map(str, args)]


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _sets(*overrides):
    return [a for o in overrides for a in ("--set", o)]


def _popen(args, env=None, **kwargs):
    """A child in its own process group (killed whole on timeout); stdout and stderr captured as text."""
    return subprocess.Popen(args, env=env or _env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, **kwargs)  # fmt: skip


def _run(args, timeout=300, **kwargs):
    """A child process with a deadline; on timeout its whole process group is killed."""
    proc = _popen(args, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _cfg(dataset, *overrides):
    return apply_train_overrides(with_dataset(get_preset("tiny"), dataset), [*QUIET, *overrides])


def _checkpoints(out):
    return sorted(p.name for p in (out / "checkpoints").iterdir() if p.name.startswith("step_"))


def _assert_consistent(out):
    """last.json names a complete checkpoint that evaluation can load, and no partial directory is left."""
    from actlab.policies import load_policy

    ckpts = out / "checkpoints"
    last = json.loads((ckpts / "last.json").read_text())
    assert (ckpts / last["path"] / "training_state" / "state.json").is_file()
    assert not [p.name for p in ckpts.iterdir() if p.name.startswith(".")]
    load_policy(ckpts / last["path"])  # refuses NaN/inf weights
    return last["step"]


class _FailingFile:
    """A file whose every write fails with ``errno``, as write(2) does on a full disk (ENOSPC), a
    directory the user cannot write (EACCES), a read-only filesystem (EROFS) or a failing disk (EIO)."""

    def __init__(self, f, err: int):
        self.f, self.err = f, err

    def write(self, data):
        raise OSError(self.err, os.strerror(self.err))

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def _fail_writes(monkeypatch, err: int, marker: str) -> None:
    """Writes into files whose path contains ``marker`` fail with ``err`` (the checkpoint writer's files
    go through ``os.fdopen``)."""
    real_fdopen = os.fdopen

    def fdopen(fd, *args, **kwargs):
        f = real_fdopen(fd, *args, **kwargs)
        return _FailingFile(f, err) if marker in os.readlink(f"/proc/self/fd/{fd}") else f

    monkeypatch.setattr(os, "fdopen", fdopen)


# ------------------------------------------------------------------------------------------ run lock
def test_resume_while_the_run_trains_is_refused_and_deletes_nothing(tiny_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    sets = _sets("steps=100000", "checkpoint.every=2", "checkpoint.keep_last=3", *QUIET)
    proc = _popen(_cmd("--preset", "tiny", "--dataset", tiny_dataset, "--out", out, *sets))
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if (out / "checkpoints" / "last.json").is_file():
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()[1]
        # While it trains, a --resume (the repro: it pruned every checkpoint) and a new run into
        # the same directory fail at once, naming the directory and the pid, and touch nothing. They fail
        # before torch is imported, so they run in this process.
        for argv in (
            ["--out", out, "--resume"],
            ["--preset", "tiny", "--dataset", tiny_dataset, "--out", out],
        ):
            assert main(["train", *map(str, argv)]) == 2
            err = capsys.readouterr().err
            assert "in use by another actlab process" in err and f"pid {proc.pid}" in err and str(out) in err
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)  # the run writes a checkpoint and stops
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 143, err
    step = _assert_consistent(out)
    steps = [int(n.split("_")[1]) for n in _checkpoints(out)]
    assert steps[-1] == step >= 2 and len(steps) <= 3
    assert not (out / LOCK_FILE).exists()  # released when the run ended


def test_a_second_new_run_into_a_new_directory_a_run_just_took_is_refused(tiny_dataset, tmp_path, capsys):
    # Two runs started into one new directory both passed the "is it new?" check and both exited 0, the
    # checkpoints holding a mix of their weights. The lock is taken before that check: here the first run
    # is this process, right after it took the lock of the directory it just created.
    out = tmp_path / "new" / "run"
    with DirLock(out, "run directory"):
        assert main(["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"pid {os.getpid()}" in err and str(out) in err
        assert [p.name for p in out.iterdir()] == [LOCK_FILE]  # the refused run wrote nothing
    assert not (tmp_path / "new").exists()  # and the lock's own directories went with it


def test_a_directory_that_is_not_a_run_is_refused_and_left_untouched(tiny_dataset, tmp_path, capsys):
    # What `actlab demo` writes at its top level; `--help` says --out must be new.
    demo = tmp_path / "demo"
    demo.mkdir()
    (demo / "summary.json").write_text('{"success_rate": 0.9}')
    (demo / "report.md").write_text("# report")
    before = {p.name: p.read_text() for p in demo.iterdir()}
    assert main(["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(demo)]) == 2
    err = capsys.readouterr().err
    assert "not empty and is not an actlab training run" in err and "report.md, summary.json" in err
    assert {p.name: p.read_text() for p in demo.iterdir()} == before  # no lock file left either
    assert main(["train", "--preset", "tiny", "--out", str(demo), "--resume"]) == 2
    assert "not an actlab training run" in capsys.readouterr().err
    assert {p.name: p.read_text() for p in demo.iterdir()} == before


# ------------------------------------------------------------------------------------------ divergence
def test_a_non_finite_loss_stops_the_run_and_last_stays_the_last_finite_checkpoint(tiny_dataset, tmp_path):
    # lr 100 with a 100-step warmup: finite for two steps, NaN from step 3 on. A checkpoint every step and
    # a logging row every 5 steps: step 3 is caught by the check before its checkpoint, from the
    # device-side record of the steps since the last row (no host sync in the steps themselves).
    out = tmp_path / "run"
    cfg = _cfg(tiny_dataset, "optim.lr=100", "schedule.warmup_steps=100", "steps=6", "checkpoint.every=1",
               "log.every=5")  # fmt: skip
    with pytest.raises(ActlabError, match="training diverged: not finite from step 3 on") as e:
        train(cfg, out)
    assert e.value.field == "optim.lr" and "loss nan" in e.value.found and "learning rate" in e.value.found
    assert "lower optim.lr" in e.value.fix and "step_0000002" in e.value.problem
    assert _checkpoints(out) == ["step_0000001", "step_0000002"]  # no NaN checkpoint was written
    assert _assert_consistent(out) == 2  # and last.json names the last finite one, loadable
    assert not (out / "summary.json").exists()  # not reported as "completed"


def test_divergence_before_the_first_checkpoint_then_the_same_out_starts_over(tiny_dataset, tmp_path):
    # The repro: optim.lr=1e4 exited 0 as "completed" with loss nan and NaN checkpoints.
    out = tmp_path / "run"
    cfg = _cfg(tiny_dataset, "optim.lr=1e4", "steps=4", "log.every=1")
    with pytest.raises(ActlabError, match="not finite from step 2 on") as e:
        train(cfg, out)
    assert "no checkpoint had been written" in e.value.problem and "starts over" in e.value.fix
    assert not (out / "checkpoints").exists()
    assert [r["loss"] for r in read_metrics(out) if "loss" in r][1] == "nan"  # the row that stopped it
    # A run that died before its first checkpoint: --resume (with a saner lr: nothing was computed, so
    # any config may restart it) starts it over from step 0, as a new run into it would.
    summary = train(_cfg(tiny_dataset, "optim.lr=1e-3", "steps=4", "log.every=1"), out, resume=True)
    assert summary.step == 4 and summary.stopped == "completed"
    assert [r["step"] for r in read_metrics(out) if "loss" in r] == [1, 2, 3, 4]
    assert json.loads((out / "config.json").read_text())["optim"]["lr"] == 1e-3
    assert _assert_consistent(out) == 4


# ------------------------------------------------------------------------------------------ dead ends
def test_a_full_disk_at_a_checkpoint_stops_with_the_fix_and_keeps_the_previous_one(
    tiny_dataset, tmp_path, monkeypatch
):
    out = tmp_path / "run"
    cfg = _cfg(tiny_dataset, "steps=4", "checkpoint.every=2", "log.every=1")
    real_fdopen = os.fdopen
    _fail_writes(monkeypatch, errno.ENOSPC, ".step_0000004.")  # the disk fills up at checkpoint 4
    with pytest.raises(ActlabError, match="the disk is full") as e:
        train(cfg, out)
    assert e.value.file == str(out / "checkpoints" / "step_0000004")
    assert "No space left on device" in e.value.found
    assert "free space" in e.value.fix and f"--out {out} --resume" in e.value.fix
    assert "step_0000002 is intact" in e.value.problem
    assert _checkpoints(out) == ["step_0000002"] and _assert_consistent(out) == 2
    monkeypatch.setattr(os, "fdopen", real_fdopen)  # space freed: resume continues from step 2
    assert train(cfg, out, resume=True).step == 4
    assert _assert_consistent(out) == 4


@pytest.mark.parametrize(
    ("err", "problem", "advice"),
    [
        (errno.EACCES, "permission denied", "ownership and permissions"),
        (errno.EROFS, "the filesystem is read-only", "writable"),
        (errno.EIO, "I/O error: the disk is failing", "copy"),
    ],
)
def test_a_failed_checkpoint_write_names_its_cause_and_keeps_the_previous_checkpoint(
    tiny_dataset, tmp_path, monkeypatch, capsys, err, problem, advice
):
    out = tmp_path / "run"
    sets = _sets("steps=4", "checkpoint.every=2", "log.every=1", *QUIET)
    _fail_writes(monkeypatch, err, ".step_0000004.")  # checkpoint 4 cannot be written
    assert main(["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(out), *sets]) == 2
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr and f"error: {problem}" in stderr, stderr
    assert "step_0000002 is intact" in stderr and str(out / "checkpoints" / "step_0000004") in stderr
    assert f"[Errno {err}] {os.strerror(err)}" in stderr and advice in stderr
    assert _checkpoints(out) == ["step_0000002"] and _assert_consistent(out) == 2  # last.json: step 2
    assert not (out / LOCK_FILE).exists()
    monkeypatch.undo()  # repaired: resume continues from step 2
    assert main(["train", "--out", str(out), "--resume"]) == 0
    assert _assert_consistent(out) == 4


def test_an_out_on_a_read_only_filesystem_is_refused_with_the_fix(tiny_dataset, small_fs, capsys):
    ro = small_fs(1 << 20, read_only=True)  # a real read-only mount: the run lock cannot even be created
    out = ro / "run"
    assert main(["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "error: the filesystem is read-only: the run did not start" in err, err
    assert "[Errno 30]" in err and f"findmnt -T {ro}" in err and "choose an --out" in err
    assert list(ro.iterdir()) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS semantics")
def test_a_batch_too_large_for_memory_names_find_batch_size_then_the_same_out_restarts(
    tiny_dataset, tmp_path, capsys
):
    import resource

    out = tmp_path / "run"
    limit = 3 << 30  # address space of the child: 65536 (the ceiling) 32x32 frames as floats do not fit

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    args = ["--preset", "tiny", "--dataset", tiny_dataset, "--out", out, "--set", "log.plot=false",
            "--set", "log.progress=false", "--set", "steps=2"]  # fmt: skip
    r = _run(_cmd(*args, "--set", "batch_size=65536"), preexec_fn=cap)
    assert r.returncode == 2, r.stderr
    assert "out of memory at batch_size 65536" in r.stderr and "Traceback" not in r.stderr
    assert "actlab find-batch-size --preset tiny" in r.stderr and "--memory-limit" in r.stderr
    assert (out / "config.json").is_file() and not (out / "checkpoints").exists()
    # It died before its first checkpoint: the same command with a batch that fits starts it over.
    assert main(["train", *map(str, args), "--set", "batch_size=8", "--json"]) == 0
    captured = capsys.readouterr()
    assert "starting it over from step 0" in captured.err and json.loads(captured.out)["step"] == 2


def test_a_symlink_loop_as_the_dataset_path_is_an_error(tmp_path, capsys):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    assert main(["train", "--preset", "tiny", "--dataset", str(loop), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "symlink loop" in err and str(loop) in err
    assert not (tmp_path / "run").exists()


def test_a_kill_after_the_final_checkpoint_leaves_a_complete_summary(tiny_dataset, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["--preset", "tiny", "--dataset", tiny_dataset, "--out", out, "--set", "steps=3", "--set",
            "log.every=1", *_sets(*QUIET)]  # fmt: skip
    r = _run(_cmd(*args), env={**_env(), KILL_AT_STEP_ENV: "3"})
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert not (out / "summary.json").exists() and _checkpoints(out)[-1] == "step_0000003"
    # (both below run in this process: neither trains, nor imports torch)
    # steps below the last checkpoint cannot be "resumed"
    assert main(["train", "--out", str(out), "--resume", "--set", "steps=2"]) == 2
    assert "already past the requested number of steps" in capsys.readouterr().err
    # the completed run's summary is rebuilt from its final checkpoint, not left with nulls
    assert main(["train", "--out", str(out), "--resume", "--json"]) == 0
    captured = capsys.readouterr()
    assert "rebuilt" in captured.err
    summary = json.loads(captured.out)
    assert summary == json.loads((out / "summary.json").read_text())
    last_loss = [row["loss"] for row in read_metrics(out) if "loss" in row][-1]
    assert summary["final_loss"] == last_loss and summary["step"] == 3 and summary["stopped"] == "completed"
    assert summary["last_checkpoint"] == str(out / "checkpoints" / "step_0000003")
    assert summary["samples_per_s"] > 0 and summary["wall_s"] > 0  # the killed loop's own throughput
