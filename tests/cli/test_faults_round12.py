"""Faults of our twelfth planted-fault run (docs/faults.md "Twelfth fault run"), planted for real: the
real parser, real files, real bundles and datasets, real signals, real child processes.

Each test names the probe of docs/faults_round12_probes.md it plants again and what the command did
before its fix.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

from actlab.cli import main

TINY = ["--preset", "tiny", "--set", "log.progress=false"]
CORRECTION_ONLY = ["--set", "policy.correction_head=true", "--set", "policy.correction_only=true"]


# ------------------------------------------------------------------ --init-from and correction_only
@pytest.mark.timeout(60)
@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_damaged_base_bundle_is_named_as_the_bundle(tmp_path, recording, bundle, capsys, damage):
    """UNCLEAR before (c06, c07): a base without stats.json was "normalization stats not found, expected:
    a normalization stats, fix: check the path"; a truncated one "repair or regenerate the file"."""
    base = tmp_path / "base"
    shutil.copytree(bundle, base)
    if damage == "missing":
        (base / "stats.json").unlink()
    else:
        (base / "stats.json").write_text('{"observation.state": {"mean": [1')
    out = tmp_path / "run"
    args = ["train", *TINY, "--dataset", str(recording), "--out", str(out), "--set", "steps=1"]
    assert main([*args, "--init-from", str(base), *CORRECTION_ONLY]) == 2
    err = capsys.readouterr().err
    assert "frozen policy's bundle" in err and "use another checkpoint of its run" in err, err
    assert "check the path" not in err and "regenerate" not in err, err


@pytest.mark.timeout(30)
def test_a_damaged_bundle_file_says_how_to_repair_a_bundle(tmp_path, bundle):
    """UNCLEAR before (x09, x11): eval / policy export of a bundle whose stats.json was cut short said
    "repair or regenerate the file" (no command regenerates one file of a bundle)."""
    from actlab.errors import ActlabError
    from actlab.policies import load_policy

    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    with open(copy / "stats.json", "r+") as f:
        f.truncate(10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "changed since the bundle was saved"
        with pytest.raises(ActlabError) as e:
            load_policy(copy)
    assert "use another checkpoint of its run" in (e.value.fix or ""), e.value


@pytest.mark.timeout(60)
@pytest.mark.parametrize("correction", [True, False], ids=["correction_only", "fine-tune"])
def test_a_base_of_other_cameras_is_refused_before_training(
    tmp_path, tiny_dataset, bundle, capsys, correction
):
    """SILENT before (c09): a bundle of cameras top and wrist, --init-from on a dataset of top alone,
    trained and wrote checkpoints, exit 0 (ACT shares its backbone across cameras: no tensor differs)."""
    out = tmp_path / "run"
    args = ["train", *TINY, "--dataset", str(tiny_dataset), "--out", str(out), "--set", "steps=1"]
    assert main([*args, "--init-from", str(bundle), *(CORRECTION_ONLY if correction else [])]) == 2
    err = capsys.readouterr().err
    assert "other inputs or outputs than the --init-from bundle" in err, err
    assert "observation.images.wrist" in err and "nothing was trained" in err, err
    assert not (out / "checkpoints").exists()


def _bundle_with_other_stats(src, dst) -> None:
    """A bundle of the same model as ``src`` whose statistics differ (another recording's)."""
    from actlab.policies import load_policy, save_policy
    from actlab.policies.registry import make_policy

    policy = load_policy(src)
    stats = json.loads((src / "stats.json").read_text())
    stats["observation.state"]["mean"] = [m + 5.0 for m in stats["observation.state"]["mean"]]
    features = json.loads((src / "features.json").read_text())
    save_policy(make_policy(policy.config, features, stats, pretrained=False), dst)


@pytest.mark.timeout(90)
def test_a_resumed_correction_run_reads_its_own_checkpoint_not_the_base(tmp_path, recording, bundle, capsys):
    """LOSS before (c22): --resume after the --init-from bundle was replaced by another wrote checkpoints
    whose stats.json (the new base's) disagreed with their normalizer: refused at load, exit 0 on the
    resume. UNCLEAR (c23): with the base removed, the resume failed as "normalization stats not found"."""
    from actlab.policies import load_policy

    base, out = tmp_path / "base", tmp_path / "run"
    shutil.copytree(bundle, base)
    args = ["train", *TINY, "--dataset", str(recording), "--out", str(out), "--set", "checkpoint.every=1"]
    assert main([*args, "--set", "steps=1", "--init-from", str(base), *CORRECTION_ONLY]) == 0
    shutil.rmtree(base)
    _bundle_with_other_stats(bundle, base)  # replaced
    assert main(["train", "--out", str(out), "--resume", "--set", "steps=2"]) == 0
    load_policy(out / "checkpoints" / "step_0000002")  # its stats.json agrees with its normalizer
    shutil.rmtree(base)  # removed
    assert main(["train", "--out", str(out), "--resume", "--set", "steps=3"]) == 0
    first = json.loads((bundle / "stats.json").read_text())  # the base it was started from
    last = json.loads((out / "checkpoints" / "step_0000003" / "stats.json").read_text())
    assert first["observation.state"] == last["observation.state"]
    load_policy(out / "checkpoints" / "step_0000003")
    capsys.readouterr()


@pytest.mark.timeout(60)
def test_a_read_only_column_trains_without_a_torch_warning(tmp_path, tiny_dataset):
    """UNCLEAR before (fx5): training a correction head printed torch's "The given NumPy array is not
    writable ... undefined behavior" UserWarning (the state column, a memory map, given to torch)."""
    out = tmp_path / "run"
    args = ["train", *TINY, "--dataset", str(tiny_dataset), "--out", str(out), "--set", "steps=1"]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert main([*args, "--set", "policy.correction_head=true"]) == 0
    assert not [w for w in seen if "not writable" in str(w.message)], [str(w.message) for w in seen]


# ----------------------------------------------------------------------------- empty strings, --set
@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "argv",
    [
        ["data", "cache", "DS", "--cache-dir", ""],  # z05: the store was written into the current directory
        [
            "train",
            "--preset",
            "tiny",
            "--dataset",
            "DS",
            "--out",
            "R",
            "--init-from",
            "",
        ],  # c21: from scratch
        ["eval", "compare", "A", ""],  # k17: "not an evaluation directory" (the current one)
        ["eval", "B", "--out", ""],  # z03: "output directory already exists"
        ["sim", "record", "--out", ""],  # z04
        ["data", "stats", ""],  # z07
        ["monitor", "--out", "", "--", "true"],  # z11: "the output path is a directory"
    ],
    ids=["cache-dir", "init-from", "compare", "eval-out", "record-out", "stats", "monitor-out"],
)
def test_an_empty_path_is_refused_at_parse_time(tmp_path, monkeypatch, capsys, argv):
    """SILENT / UNCLEAR before: an empty path (an unset shell variable) was the current directory."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "found '' (an empty string" in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(30)
def test_an_empty_config_path_is_refused(tmp_path, capsys):
    """SILENT before: --set init_from= trained from scratch; rl train --set demos= named the current
    directory."""
    assert (
        main(["train", "--preset", "tiny", "--dataset", "DS", "--set", "init_from=", "--print-config"]) == 2
    )
    assert "init_from" in capsys.readouterr().err
    assert main(["rl", "train", "--preset", "smoke", "--set", "demos=", "--print-config"]) == 2
    assert "demos" in capsys.readouterr().err


@pytest.mark.timeout(30)
def test_a_key_set_twice_with_two_values_is_said(capsys):
    """SILENT before (s03): --set steps=2 --set steps=3 trained 3 steps, the 2 dropped without a word. The
    last value still wins (base options, then an override), and the dropped one is said."""
    argv = [
        "rl",
        "train",
        "--preset",
        "smoke",
        "--set",
        "sac.tau=0.1",
        "--set",
        "sac.tau=0.2",
        "--print-config",
    ]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["sac"]["tau"] == 0.2
    assert "note: --set sac.tau is given 2 times: the last, sac.tau=0.2, is used (sac.tau=0.1 not)" in err, (
        err
    )
    assert (
        main(["rl", "train", "--preset", "smoke", "--set", "seed=3", "--set", "seed=3", "--print-config"])
        == 0
    )
    assert "note:" not in capsys.readouterr().err  # the same value twice is no conflict


# ------------------------------------------------------------------------------------- eval, compare
@pytest.mark.timeout(60)
def test_the_recommendation_names_each_mode_once(tmp_path, bundle, capsys):
    """UNCLEAR before (e13): a sweep of async alone suggested `--execution sync,async,async`."""
    out = tmp_path / "ev"
    args = ["eval", str(bundle), "--episodes", "1", "--max-steps", "3", "--workers", "1", "--out", str(out)]
    assert main([*args, "--execution", "async", "--latency", "2"]) == 0
    text = capsys.readouterr().out
    assert "--execution sync,async --latency 2" in text and "async,async" not in text, text


@pytest.mark.timeout(30)
def test_compare_of_a_file_that_is_no_record_names_the_record(tmp_path, capsys):
    """UNCLEAR before (k18): `eval compare A A/results.md` was "not valid JSON, fix: re-run actlab eval"."""
    a = tmp_path / "a"
    a.mkdir()
    episodes = [{"seed": s, "success": False} for s in range(100000, 100004)]
    (a / "results.json").write_text(
        json.dumps({"task": "pick_place", "checkpoints": [{"name": "s", "episodes": episodes}]})
    )
    (a / "results.md").write_text("| checkpoint |\n")
    assert main(["eval", "compare", str(a), str(a / "results.md")]) == 2
    err = capsys.readouterr().err
    assert "results.md is not an evaluation record" in err and f"pass {a / 'results.json'}" in err, err


# ------------------------------------------------------------------------------ damaged files, disks
@pytest.mark.timeout(60)
def test_a_damaged_checkpoint_state_points_to_the_previous_checkpoint(tmp_path, run_dir, capsys):
    """UNCLEAR before (x06): a cut-short training_state/state.json was "checkpoint state is not valid
    JSON, fix: repair or regenerate the file"; the fix is the previous checkpoint."""
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    (run / "checkpoints" / "step_0000002" / "training_state" / "state.json").write_text("garbage")
    assert main(["train", "--out", str(run), "--resume", "--set", "steps=3"]) == 2
    err = capsys.readouterr().err
    assert "checkpoint step 2 is damaged" in err and "damaged-step_0000002" in err, err
    assert "step_0000001, the previous checkpoint" in err and "regenerate" not in err, err


@pytest.mark.timeout(60)
def test_an_immutable_checkpoint_directory_is_named_as_an_attribute(tmp_path, run_dir, capsys):
    """UNCLEAR before (p02): EPERM of `chattr +i RUN/checkpoints` (root has every permission) was
    "permission denied ... user root needs write access there"."""
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    ckpts = run / "checkpoints"
    if subprocess.run(["chattr", "+i", str(ckpts)], capture_output=True).returncode != 0:
        pytest.skip("this filesystem or user cannot set the immutable attribute")
    try:
        assert main(["train", "--out", str(run), "--resume", "--set", "steps=3"]) == 2
    finally:
        subprocess.run(["chattr", "-i", str(ckpts)], check=True)
    err = capsys.readouterr().err
    assert "operation not permitted" in err and f"lsattr -d {ckpts}" in err, err
    assert "needs write access" not in err, err


@pytest.mark.timeout(60)
def test_curate_on_a_full_disk_blames_the_disk_not_an_episode(tmp_path, tiny_dataset, monkeypatch, capsys):
    """UNCLEAR before (f05): "episode 1 cannot be written: the disk is full ... fix: drop it
    (--drop-episodes 1) or trim the bad frames". The disk fills while the second episode is written (the
    writer's own OSError path; a tmpfs of a fixed size fills at a different episode from run to run)."""
    import errno

    from actlab.datasets.writer import DatasetWriter

    original, calls = DatasetWriter._write_data, []

    def write_data(self, arrays, length):
        calls.append(length)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return original(self, arrays, length)

    monkeypatch.setattr(DatasetWriter, "_write_data", write_data)
    out = tmp_path / "cur"
    assert main(["data", "curate", str(tiny_dataset), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the disk is full" in err and "--drop-episodes" not in err, err
    assert not out.exists()


@pytest.mark.timeout(60)
def test_a_name_that_is_not_utf8_is_not_blamed_on_the_terminal(tmp_path, capsys):
    """UNCLEAR before (q04): `sim record --out $'d\\xff\\xfe'` was "text cannot be printed in this
    terminal's encoding, fix: PYTHONIOENCODING=utf-8" (the name, not the terminal)."""
    out = os.fsdecode(bytes(tmp_path) + b"/d\xff\xfe")
    assert (
        main(["sim", "record", "--episodes", "1", "--image-size", "16", "--workers", "0", "--out", out]) == 2
    )
    err = capsys.readouterr().err
    assert "bytes that are not UTF-8" in err and "PYTHONIOENCODING" not in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(60)
def test_a_damaged_rl_run_config_points_to_its_checkpoint_copy(tmp_path, capsys):
    """UNCLEAR before (r06): a cut-short config.json of an RL run was "repair or regenerate the file";
    every checkpoint keeps the run's config as rl_config.json."""
    out = tmp_path / "rl"
    smoke = ["--preset", "smoke", "--set", "total_env_steps=400", "--set", "eval.episodes=2"]
    assert main(["rl", "train", *smoke, "--out", str(out)]) == 0
    (out / "config.json").write_text("{")
    assert main(["rl", "train", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "restore it from a checkpoint's copy: cp " in err and "rl_config.json" in err, err


@pytest.mark.timeout(30)
def test_rl_with_a_base_on_another_task_says_the_fix(bundle, tmp_path, capsys):
    """UNCLEAR before (r01): `rl train --preset smoke --base B` said env.task expected pick_place, with
    no fix line."""
    assert (
        main(["rl", "train", "--preset", "smoke", "--base", str(bundle), "--out", str(tmp_path / "o")]) == 2
    )
    assert "fix:      add --set env.task=pick_place" in capsys.readouterr().err


# ----------------------------------------------------------------------------- signals and children
_DEMO_STOPPED = """
import sys
import actlab.demo.pipeline as pipeline
from actlab.cli import main

def train(cfg, run, resume=False):
    class Summary:
        stopped, step = "sigterm", 7
    return Summary()

pipeline.train = train
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timeout(90)
def test_a_demo_stopped_by_sigterm_exits_as_terminated(tmp_path):
    """UNCLEAR before (g18): a SIGTERM while the demo trained was "error: training stopped early
    (sigterm)", exit 2, after a warning that training.png could not be drawn."""
    out = tmp_path / "demo"
    args = ["demo", "--out", str(out), "--episodes", "2", "--image-size", "16"]
    proc = subprocess.run(
        [sys.executable, "-c", _DEMO_STOPPED, *args], capture_output=True, text=True, timeout=80
    )
    assert proc.returncode == 143, proc.stderr[-2000:]
    assert "terminated (SIGTERM)" in proc.stderr and "continues from that checkpoint" in proc.stderr
    assert "error:" not in proc.stderr


@pytest.mark.timeout(30)
def test_a_run_stopped_before_its_first_logged_step_draws_no_curve(tmp_path, capsys):
    """The warning of g18: "could not draw training.png: no training rows to plot ... found 1 rows"."""
    from actlab.training import get_preset
    from actlab.training.loop import _plot

    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "val_loss": 1.0}\n')
    _plot(tmp_path, get_preset("tiny"))
    assert "could not draw" not in capsys.readouterr().err
    assert not (tmp_path / "training.png").exists()


@pytest.mark.timeout(30)
def test_a_run_directory_named_in_bytes_that_are_not_utf8_gets_its_curve(tmp_path, capsys):
    """UNCLEAR (n24, found by the confirmation pass): `train --out $'t\xff'` trained, then warned "could
    not draw training.png: set_text(): incompatible function arguments" (the title held a surrogate)."""
    from actlab.training import get_preset
    from actlab.training.loop import _plot

    run = tmp_path / os.fsdecode(b"t\xff")
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.5}\n')
    _plot(run, get_preset("tiny"))
    assert "could not draw" not in capsys.readouterr().err
    assert (run / "training.png").is_file()


def _wait_for(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.timeout(60)
def test_a_killed_monitor_takes_its_command_along(tmp_path):
    """HANG before (g15): SIGKILL to `actlab monitor -- sleep 100` left the sleep running (init's child)."""
    import psutil

    proc = subprocess.Popen(
        [sys.executable, "-m", "actlab.cli", "monitor", "--interval", "0.2", "--", "sleep", "60"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        me = psutil.Process(proc.pid)
        assert _wait_for(lambda: any(c.name() == "sleep" for c in me.children(recursive=True)), 30)
        sleeper = next(c for c in me.children(recursive=True) if c.name() == "sleep")
        time.sleep(0.5)  # its guard started
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert _wait_for(lambda: not _alive(sleeper.pid), 10), "the monitored command outlived the monitor"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


_BRIDGE = """
import sys
from actlab.cli import main  # the CLI's SIGTERM handler, as a command has it
from actlab.lerobot.bridge import LeRobotBridgePolicy
from actlab.utils.procs import exit_on_sigterm

with exit_on_sigterm():
    with LeRobotBridgePolicy(sys.argv[1], sys.argv[2], timeout_s=60) as policy:
        policy.start()
"""


@pytest.mark.timeout(90)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_bridge_child_that_never_answers_is_ended_with_the_command(tmp_path, sig):
    """HANG before: SIGKILL of an evaluation waiting for a --lerobot-python wrapper left the wrapper's
    children running (l02); a SIGTERM waited 30 s for a goodbye from a child that never said hello (l03)."""
    import psutil

    wrapper = tmp_path / "python"
    marker = f"actlab-r12-{os.getpid()}-{sig.name}"
    sleep = f'"{sys.executable}" -c "import time; time.sleep(300)" {marker}'
    wrapper.write_text(f"#!/bin/sh\n{sleep} &\nexec {sleep}\n")
    wrapper.chmod(0o755)
    policy = tmp_path / "policy"  # what the bridge checks before it starts the child
    policy.mkdir()
    (policy / "config.json").write_text('{"type": "act", "input_features": {}, "output_features": {}}')
    for name in ("model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json"):
        (policy / name).write_text("{}")
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_BRIDGE), str(tmp_path / "policy"), str(wrapper)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )

    def sleepers() -> list:
        return [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]

    try:
        assert _wait_for(lambda: len(sleepers()) == 2, 30), "the wrapper did not start its children"
        time.sleep(0.5)
        t0 = time.monotonic()
        os.kill(proc.pid, sig)
        proc.wait(20)
        assert time.monotonic() - t0 < 10, "the command took its time to stop"
        assert _wait_for(lambda: not [p for p in sleepers() if _alive(p.pid)], 10), "children left behind"
    finally:
        for p in sleepers():
            p.kill()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
