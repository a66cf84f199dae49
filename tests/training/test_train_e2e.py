"""End-to-end training on CPU: real datasets (AV1 video), real policies, real processes."""

import json
import os
import re
import signal

import pytest

from actlab.lifecycle.metrics_log import read_metrics
from actlab.training import preflight
from actlab.training.loop import KILL_AT_STEP_ENV
from procs import cli, finish, run_cli, signal_when, started

# Each `actlab train` below takes 3-12 s on 2 cores at a load average of 9, up to ~40 s at 12-16; the
# test's own limit is the suite's 300 s.
TRAIN_TIMEOUT_S = 200


def _train_args(dataset, out, *args):
    return ["train", "--dataset", dataset, "--out", out, *args]


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _build_framestore(dataset, image_size=32):
    from actlab.datasets import FrameStore, open_dataset

    FrameStore.build(open_dataset(dataset), image_size=image_size, progress=False)


def _losses(run_dir):
    rows = read_metrics(run_dir)
    return {r["step"]: r["loss"] for r in rows if "loss" in r}, {
        r["step"]: r["val_loss"] for r in rows if "val_loss" in r
    }


def test_killed_run_resumes_on_the_same_loss_curve_bitwise(tiny_dataset, tmp_path, capsys):
    from actlab.cli import main
    from actlab.utils.threads import torch_threads

    straight, killed = tmp_path / "straight", tmp_path / "killed"
    _build_framestore(tiny_dataset)  # decoded once here, not by the two concurrent runs below
    # Both runs at once (2 cores): one that SIGKILLs itself after step 10 (a process of its own: the kill
    # must take a whole process), and 20 steps straight in this process meanwhile (a process of its own
    # would only add its start, ~5 s of imports on 2 cores). One torch thread in each, as in the killed
    # process (OMP_NUM_THREADS=1), so both run the same kernels.
    # The killed run reads frames from the memory-mapped FrameStore through DeviceData's prefetch thread,
    # the straight one from a RAM copy (CPU "auto"): the same batches must come out of both.
    killed_cmd = cli(
        *_train_args(tiny_dataset, killed, "--preset", "tiny"), "--set", "data.frames_on_device=false"
    )
    with started(killed_cmd, env={**_env(), KILL_AT_STEP_ENV: "10"}) as b:
        with torch_threads(1):
            code_a = main(
                _train_args(str(tiny_dataset), str(straight), "--preset", "tiny", "--set", "log.plot=false")
            )
        _, err_b = finish(b, TRAIN_TIMEOUT_S)
    assert code_a == 0, capsys.readouterr().err
    assert b.returncode == -signal.SIGKILL, err_b
    ckpts = killed / "checkpoints"
    assert json.loads((ckpts / "last.json").read_text())["step"] == 10
    assert sorted(p.name for p in ckpts.iterdir() if p.is_dir()) == ["step_0000010"]
    assert max(_losses(killed)[0]) == 10

    # Resume from the run directory alone (its saved config), in this process: a fresh start from disk.
    capsys.readouterr()
    with torch_threads(1):
        code_c = main(["train", "--out", str(killed), "--resume", "--json"])
    captured = capsys.readouterr()
    assert code_c == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["step"] == 20 and summary["stopped"] == "completed"

    loss_a, val_a = _losses(straight)
    loss_b, val_b = _losses(killed)
    assert sorted(loss_a) == sorted(loss_b) == list(range(1, 21))
    assert loss_b[20] == loss_a[20]  # bitwise: the floats are equal, not close
    assert loss_b == loss_a and val_b == val_a
    assert val_a.keys() == {10, 20}
    # keep_last=2 and best: both checkpoints survive, pointers are consistent
    best = json.loads((ckpts / "best.json").read_text())
    assert best["val_loss"] == min(val_a.values())
    assert summary["best_val_loss"] == best["val_loss"]
    assert (killed / "training.png").stat().st_size > 10_000  # loss curves drawn at the end


# Slow (13 s; the killed run that resumes bitwise on the same curve stays): run with -m slow.
@pytest.mark.slow
def test_a_kill_in_the_middle_of_a_logging_window_resumes_with_the_same_rows(tiny_dataset, tmp_path):
    """Logging every 4 steps, a checkpoint at step 6: the killed run's steps 5-6 are in no row yet. The
    row at step 8 of the resumed run must average steps 5-8, as the uninterrupted run's does."""
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    _build_framestore(tiny_dataset)
    base = ["--preset", "tiny", "--set", "steps=8", "--set", "log.every=4", "--set", "checkpoint.every=6",
            "--set", "eval.every=0", "--set", "log.plot=false"]  # fmt: skip
    with started(cli(*_train_args(tiny_dataset, straight, *base)), env=_env()) as a:
        b = run_cli(*_train_args(tiny_dataset, killed, *base), env={**_env(), KILL_AT_STEP_ENV: "6"},
                    timeout=TRAIN_TIMEOUT_S)  # fmt: skip
        _, err_a = finish(a, TRAIN_TIMEOUT_S)
    assert a.returncode == 0, err_a
    assert b.returncode == -signal.SIGKILL, b.stderr
    c = run_cli("train", "--out", killed, "--resume", env=_env(), timeout=TRAIN_TIMEOUT_S)
    assert c.returncode == 0, c.stderr

    def rows(run):
        keys = ("loss", "l1_loss", "kld_loss", "grad_norm", "lr")
        return [{k: r[k] for k in ("step", *keys)} for r in read_metrics(run) if "loss" in r]

    assert [r["step"] for r in rows(straight)] == [4, 8]
    assert rows(killed) == rows(straight)  # bitwise, the window that straddles the kill included


def test_resume_refuses_a_changed_config_with_a_diff(tiny_dataset, tmp_path, capsys):
    from actlab.cli import main

    # In this process: the runs and refusals here are the CLI's, and a process of their own would only
    # add its start (~7 s of imports on 2 cores); killed and resumed processes are the test above's.
    out = tmp_path / "run"
    base = ["--preset", "tiny", "--set", "steps=2", "--set", "checkpoint.every=1", "--set", "eval.every=0"]
    assert main(_train_args(str(tiny_dataset), str(out), *base, "--set", "log.plot=false")) == 0
    capsys.readouterr()
    # A fresh run into the same directory is refused:
    assert main(["train", "--dataset", str(tiny_dataset), "--out", str(out), *base]) == 2
    assert "--resume" in capsys.readouterr().err
    # a learning-rate change is not a resume of the same run: refused, naming the key and both values
    assert main(["train", "--out", str(out), *base, "--resume", "--set", "optim.lr=0.5"]) == 2
    err = capsys.readouterr().err
    assert "optim.lr" in err and "0.001 -> 0.5" in err
    # extending the run (more steps) is allowed, from the saved config alone
    assert main(["train", "--out", str(out), "--resume", "--set", "steps=3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 3
    rows = read_metrics(out)
    assert [row["step"] for row in rows if "loss" in row] == [1, 2, 3]
    assert [row["checkpoint"] for row in rows if "checkpoint" in row] == ["step_0000001", "step_0000002",
                                                                          "step_0000003"]  # fmt: skip
    assert not any("val_loss" in row for row in rows)  # eval.every=0 disables validation
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "last.json",
        "step_0000002",
        "step_0000003",
    ]
    # Resuming the finished run at the step it reached trains nothing and reports that run's summary
    # (loss, throughput), not a zero-step "run" with 0 samples/s; metrics and checkpoints are untouched.
    saved = json.loads((out / "summary.json").read_text())
    assert saved["step"] == 3 and saved["samples_per_s"] > 0 and saved["final_loss"] is not None
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--resume", "--set", "steps=3", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == saved and "already finished at step 3" in captured.err
    assert read_metrics(out) == rows

    # the checkpoint is a policy bundle that evaluation can load alone
    from actlab.policies import load_policy

    policy = load_policy(out / "checkpoints" / "step_0000003")
    assert policy.config.dim_model == 32


def test_preflight_refuses_checkpoints_that_cannot_fit(tiny_dataset, tmp_path, capsys):
    from actlab.cli import main

    out, cache = tmp_path / "run", tmp_path / "cache"
    # Nothing is faked: the real parameter count, the real FrameStore estimate, a real limit option.
    # ~4.3 MB per checkpoint x (100 kept + best + 1 being written) cannot fit in 200 MB.
    args = ["--preset", "tiny", "--set", f"data.cache_dir={cache}", "--disk-limit", "200MB"]
    # In this process: refused before step 1, it needs no process of its own.
    argv = _train_args(str(tiny_dataset), str(out), *args, "--set", "checkpoint.keep_last=100")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "not enough disk space" in err and "102 checkpoints alive" in err
    assert "disk_limit_bytes" in err and "keep_last" in err
    # refused before step 1 and before decoding the FrameStore: nothing in --out (not even the directory),
    # no decoded frames in the cache (stores live directly in data.cache_dir; stats/ is a small JSON cache)
    assert not out.exists()
    assert not [p.name for p in cache.iterdir() if p.name != "stats"] if cache.exists() else True
    # the tiny preset's own retention (2 kept + best + 1 being written) fits the same limit
    per_ckpt = float(re.search(r"checkpoints alive x ([0-9.]+) MiB", err).group(1)) * 2**20
    assert 4 * per_ckpt + preflight.RUN_DIR_OVERHEAD_BYTES < 200e6 < 102 * per_ckpt


def test_overfit_mode_reaches_its_threshold_on_8_samples(tiny_dataset, tmp_path, capsys):
    import torch

    from actlab.cli import main

    out = tmp_path / "overfit"
    args = _train_args(str(tiny_dataset), str(out), "--preset", "tiny", "--overfit", "8")
    # The run trains at the preset's num_threads (1); a caller's own count is back afterwards (a notebook,
    # this process): build_run sets the count for the whole process.
    caller = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        assert main([*args, "--set", "policy.dropout=0.0", "--set", "log.plot=false", "--json"]) == 0
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(caller)
    summary = json.loads(capsys.readouterr().out)
    assert summary["stopped"] == "overfit_reached"
    rows = [r for r in read_metrics(out) if "loss" in r]
    assert rows[-1]["step"] == summary["overfit_step"] and rows[-1]["loss"] < 0.1
    assert rows[0]["loss"] > 1.0  # it really had to learn
    assert summary["last_checkpoint"].endswith(f"step_{summary['overfit_step']:07d}")


# Slow (8 s; the overfit mode that reaches its threshold stays): run with -m slow.
@pytest.mark.slow
def test_overfit_mode_fails_loudly_when_the_threshold_is_not_reached(tiny_dataset, tmp_path):
    r = run_cli(
        *_train_args(tiny_dataset, tmp_path / "o", "--preset", "tiny", "--overfit", "8"),
        *["--set", "overfit.max_steps=3"],
        env=_env(),
        timeout=TRAIN_TIMEOUT_S,
    )
    assert r.returncode == 2
    assert "overfit check failed" in r.stderr and "in 3 steps" in r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--preset", "tiniest"], "did you mean 'tiny'"),
        (["--preset", "tiny", "--set", "optim.lrr=1"], "did you mean 'optim.lr'"),
        (["--preset", "tiny", "--set", "policy.dim_modl=8"], "did you mean 'policy.dim_model'"),
        (["--preset", "tiny", "--set", "batch_size=0"], "batch_size"),
        (["--preset", "tiny", "--set", "policy.type=act_relatve"], "did you mean 'act_relative'"),
        (["--resume"], "run config not found"),
        (["--preset", "tiny", "--dataset", "d", "--out-is-a-file"], "the output path is a file"),
    ],
)
def test_bad_presets_and_keys_fail_before_anything_runs(args, message, tmp_path, capsys):
    from actlab.cli import main

    out_is_a_file = "--out-is-a-file" in args
    if out_is_a_file:
        args = [a for a in args if a != "--out-is-a-file"]
        (tmp_path / "x").write_text("not a run directory")
    assert main(["train", "--out", str(tmp_path / "x"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    if out_is_a_file:
        assert (tmp_path / "x").read_text() == "not a run directory"
    else:
        assert not (tmp_path / "x").exists()


def test_sigterm_writes_a_checkpoint_and_stops(tiny_dataset, tmp_path, capsys):
    """A real SIGTERM to the process running the command; that process is this one (a SIGTERM is caught,
    not a kill: no interpreter start and torch import of its own). One torch thread, as the command had
    in a process of its own (OMP_NUM_THREADS=1)."""
    from actlab.cli import main
    from actlab.utils.threads import torch_threads

    out = tmp_path / "run"
    # (no plot: a stopped run draws one too, and nothing here looks at it)
    args = ["--preset", "tiny", "--set", "steps=100000", "--set", "checkpoint.every=0",
            "--set", "eval.every=0", "--set", "log.plot=false", "--json"]  # fmt: skip
    metrics = out / "metrics.jsonl"

    def three_logged_steps() -> bool:
        return metrics.is_file() and len(metrics.read_text().splitlines()) >= 3

    with signal_when(signal.SIGTERM, three_logged_steps, TRAIN_TIMEOUT_S) as term, torch_threads(1):
        code = main(_train_args(str(tiny_dataset), str(out), *args))
    stdout, stderr = capsys.readouterr()
    assert term["sent"] and not term["late"] and not term["stray"], (term, stderr[-2000:])
    assert code == 143, stderr[-2000:]
    assert "--resume" in stderr
    summary = json.loads(stdout)
    assert summary["stopped"] == "sigterm"
    last = json.loads((out / "checkpoints" / "last.json").read_text())
    steps = [r["step"] for r in read_metrics(out) if "loss" in r]
    assert last["step"] == summary["step"] == steps[-1] >= 3  # the step in flight finished and was saved
