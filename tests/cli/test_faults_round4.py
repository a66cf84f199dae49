"""Faults of our fourth planted-fault run (docs/faults.md), planted for real: the real parser,
real files, real commands.

- two output options of one command naming one path, or an output inside an input, are refused before
  the command runs, naming both options and the path (walked over every command of the parser);
- an option that means nothing without another is refused without it (walked over every declared rule);
- a device on which nothing can be computed or timed (``meta``, a backend this torch lacks) is refused;
- ``data doctor --report DIR`` follows the output-marker rule (it wrote over a user's report.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import pytest

from actlab.cli import build_parser, main
from actlab.utils.io import read_output_marker
from procs import ctrl_c_when

# Options that name a path a command writes, and options or positionals that name a path it reads.
OUT_DESTS = {"out", "plot", "summary_json", "report", "cache_dir"}
IN_DESTS = {"path", "paths", "src", "bundle", "policy_dir", "run", "dataset", "init_from", "base", "demos"}
IN_DESTS |= {"lerobot_policy", "sweep"}
# Commands whose one output directory is claimed in their own code by the output-marker rule
# (actlab.utils.io.check_out_dir / claim_out_dir: it is, holds or lies inside an input -> refused),
# each covered by the test named.
OWN_CHECK = {
    "actlab data curate": "tests/datasets/test_doctor_recording.py",
    "actlab data convert": "tests/cli/test_faults_loss.py (check_out_dir)",
    "actlab data stats": "test_faults_round3.py::test_data_stats_out_never_writes_into_the_dataset",
    "actlab data view": "test_faults_round3.py::test_data_view_refuses_the_dataset_itself",
    "actlab eval": "test_faults_loss.py::test_overwrite_never_deletes_an_input_of_the_command",
    "actlab policy export": "same",
    "actlab policy import": "tests/lerobot (check_out_dir)",
    "actlab rl report": "tests/rl/test_rl_lifecycle.py",
    "actlab rl reward-model": "tests/rl/test_rl_lifecycle.py",
}


def _commands() -> list[tuple[str, argparse.ArgumentParser]]:
    out = []

    def walk(p: argparse.ArgumentParser, name: str) -> None:
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if subs:
            for n, sp in subs[0].choices.items():
                walk(sp, f"{name} {n}")
        else:
            out.append((name, p))

    walk(build_parser(), "actlab")
    return out


def _label(a: argparse.Action) -> str:
    return a.option_strings[-1] if a.option_strings else str(a.metavar or a.dest)


def _argv(p: argparse.ArgumentParser, given: dict[str, str]) -> list[str]:
    """argv for command ``p``: the ``given`` values by dest, and a parseable value for every other
    required option or positional (the rules are checked before the command runs, so nothing reads it)."""
    opts, pos = [], []
    for a in p._actions:
        value = given.get(a.dest)
        if a.nargs == argparse.REMAINDER:  # (monitor's command: the caller appends it)
            continue
        if value is None and not (a.required or (not a.option_strings and a.nargs not in ("?", "*"))):
            continue
        if value is None:
            value = a.choices[0] if a.choices else ("tiny" if a.dest == "preset" else "x")
        if a.option_strings:
            opts += [a.option_strings[-1], str(value)]
        else:
            pos.append(str(value))
    return [*pos, *opts]


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_every_command_with_several_paths_has_its_relations_checked():
    """The walk: a command with two outputs, or an output and an input, declares them (checked before it
    runs) or claims its one output directory by the output-marker rule in its own code."""
    missing = []
    for name, p in _commands():
        outs = [a.dest for a in p._actions if a.dest in OUT_DESTS]
        ins = [a.dest for a in p._actions if a.dest in IN_DESTS]
        if not outs or (len(outs) < 2 and not ins) or name in OWN_CHECK:
            continue
        declared = {d for o, i, _ in p.get_default("_paths") or [] for _, d in (*o, *i)}
        if not set(outs + ins) <= declared:
            missing.append(f"{name}: {sorted(set(outs + ins) - declared)}")
    assert not missing, missing


def _path_cases():
    for name, p in _commands():
        for outs, ins, _ in p.get_default("_paths") or []:
            for i, (la, da) in enumerate(outs):
                for lb, db in outs[i + 1 :]:
                    yield pytest.param(name, {da: "same", db: "same"}, (la, lb), id=f"{name}:{la}={lb}")
                for lb, db in ins:
                    yield pytest.param(name, {db: "in", da: "in/sub"}, (la, lb), id=f"{name}:{la}<{lb}")


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("command", "given", "labels"), list(_path_cases()))
def test_outputs_on_one_path_or_inside_an_input_are_refused_before_any_work(
    command, given, labels, tmp_path, monkeypatch, capsys
):
    """Before: `monitor --out x.png --plot x.png` wrote the CSV and then the plot over it (exit 0);
    `data cache DS --cache-dir DS/meta` decoded frames into the dataset (its meta/ hash changed);
    `train --out DS/run` trained into the dataset."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in").mkdir()
    before = _files(tmp_path)
    p = dict(_commands())[command]
    argv = [*command.split()[1:], *_argv(p, given)]
    if command == "actlab monitor":
        argv += ["--", sys.executable, "-c", "open('ran', 'w')"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert all(label in err for label in labels), err
    assert ("name the same path" in err) if "same" in given.values() else ("lies inside an input" in err)
    assert "nothing was run or written" in err
    assert _files(tmp_path) == before  # nothing written, the monitored command never ran


def _needs_cases():
    for name, p in _commands():
        for rule in p.get_default("_needs") or []:
            yield pytest.param(name, rule, id=f"{name}:{rule[0]}")


def _a_value(a: argparse.Action) -> list[str]:
    """The option given with a value other than its default."""
    if a.nargs == 0:
        return [a.option_strings[-1]]
    if a.choices:
        value = next(c for c in a.choices if c != a.default)
    elif a.dest.endswith("_python"):
        value = sys.executable
    elif a.dest.endswith("timeout"):
        value = "5"
    elif isinstance(a.default, int):
        value = str(a.default + 1)
    else:
        value = "a=b"
    return [a.option_strings[-1], value]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("command", "rule"), list(_needs_cases()))
def test_an_option_that_means_nothing_without_another_is_refused(command, rule, tmp_path, capsys):
    """Before: `eval B --whiskers-episode 3` (no --whiskers), `--video-pick failures` (no --videos),
    `--overwrite` (no --out), `--rename`/`--instruction`/`--lerobot-timeout` without --lerobot-policy:
    accepted, evaluated, and the option did nothing."""
    label, dest = rule[0], rule[1]
    p = dict(_commands())[command]
    action = next(a for a in p._actions if a.dest == dest)
    argv = [*command.split()[1:], *_argv(p, {"paths": str(tmp_path / "b"), "bundle": str(tmp_path / "b")})]
    assert main([*argv, *_a_value(action)]) == 2
    err = capsys.readouterr().err
    assert f"{label} has no effect without" in err and "nothing was run" in err
    assert not any(tmp_path.iterdir())


@pytest.mark.timeout(60)
@pytest.mark.parametrize("device", ["meta", "xla", "banana"])
def test_a_device_nothing_can_run_on_is_refused_before_any_work(bundle, tmp_path, device, capsys):
    """Before: `eval B --latency measured --execution async --device meta` ended in a traceback
    ("Cannot copy out of meta tensor"); `train --device meta` and `--device xla` too."""
    args = ["--episodes", "1", "--workers", "1", "--max-steps", "5", "--out", str(tmp_path / "e")]
    argv = ["eval", str(bundle), *args, "--latency", "measured", "--execution", "async", "--device", device]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--device" in err and device in err and ("meta device holds no data" in err) == (device == "meta")
    assert not (tmp_path / "e").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("latency", ["measured", "0,4"])
def test_a_latency_with_sync_execution_alone_is_refused(bundle, tmp_path, latency, capsys):
    """Before: `--latency measured` (sync, the default) timed the policy, then ran sync at delay 0 and
    reported it; `--latency 0,4` ran the same sync cell once, the 4 never used."""
    out = tmp_path / "e"
    argv = ["eval", str(bundle), "--episodes", "1", "--workers", "1", "--out", str(out)]
    assert main([*argv, "--latency", latency]) == 2
    err = capsys.readouterr().err
    assert "--latency has no effect with --execution sync" in err and "--execution sync,async" in err
    assert not out.exists()


@pytest.mark.timeout(120)
def test_data_doctor_report_never_writes_over_a_users_files(tiny_dataset, tmp_path, capsys):
    """LOSS before: `data doctor DS --report DIR` replaced the user's DIR/report.md (exit 0)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my notes")
    assert main(["data", "doctor", str(tiny_dataset), "--report", str(mine)]) == 2
    err = capsys.readouterr().err
    assert "report.md" in err and "choose another --report" in err
    assert [p.name for p in mine.iterdir()] == ["report.md"] and (
        mine / "report.md"
    ).read_text() == "my notes"
    # its own report directory is reused run after run
    ours = tmp_path / "ours"
    for _ in range(2):
        assert main(["data", "doctor", str(tiny_dataset), "--report", str(ours)]) == 0
    assert read_output_marker(ours)["kind"] == "actlab data doctor"
    assert (ours / "report.html").is_file()


# ------------------------------------------------------------------------------ planted-fault run 4


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.timeout(60)
def test_an_output_on_a_read_only_disk_is_refused_before_the_work(small_fs, bundle, tiny_dataset, capsys):
    """LOSS before: `monitor --plot RO/x.png -- CMD` ran the whole command and then failed to write the
    plot; `policy doctor --out RO/d` ran its whole diagnosis first; `data stats --out RO/s.json` its
    computation. Now every one is refused before the work."""
    ro = small_fs(1 << 20, read_only=True)
    ran = ro.parent / "ran"
    code = main(
        ["monitor", "--plot", str(ro / "x.png"), "--", sys.executable, "-c", f"open({str(ran)!r}, 'w')"]
    )
    assert code == 2 and not ran.exists()
    assert "read-only" in capsys.readouterr().err
    # the diagnosis never starts: a dataset that does not exist is not even looked at
    missing = ro.parent / "no-such-dataset"
    assert main(["policy", "doctor", str(bundle), "--dataset", str(missing), "--out", str(ro / "d")]) == 2
    err = capsys.readouterr().err
    assert "read-only" in err and "not found" not in err
    assert main(["data", "stats", str(tiny_dataset), "--out", str(ro / "s.json"), "--no-cache"]) == 2
    assert "read-only" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_file_in_the_way_of_a_directory_is_named(tmp_path, bundle, capsys):
    """UNCLEAR before: `--out FILE/x` said only "[Errno 17] File exists"; `eval FILE` "does not exist"."""
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    for argv in (
        ["data", "synth", "--out", str(f / "x"), "--episodes", "1", "--frames", "4", "--image-size", "16"],
        ["monitor", "--out", str(f / "x.csv"), "--", sys.executable, "-c", "pass"],
        ["data", "cache", str(bundle), "--cache-dir", str(f)],
    ):
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"a file is in the way: {f} is a file" in err or "not a dataset" in err, (argv, err)
    assert f.read_text() == "mine"
    assert main(["eval", str(bundle / "model.safetensors"), "--episodes", "1"]) == 2
    assert "a checkpoint is a directory, not a file" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_frame_below_the_encoders_minimum_is_named_not_blamed_on_a_damaged_file(tmp_path, capsys):
    """UNCLEAR before: `data synth --image-size 2` said "a video file cannot be read: it is damaged"."""
    out = tmp_path / "ds"
    assert (
        main(["data", "synth", "--out", str(out), "--episodes", "1", "--frames", "4", "--image-size", "2"])
        == 2
    )
    err = capsys.readouterr().err
    assert "cannot encode frames this small" in err and "at least 4 px" in err and "damaged" not in err
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("record", ["[1, 2]", '{"format": "actlab.checksums", "files": {"data/x": 5}}'])
def test_a_checksum_record_of_another_shape_is_said_not_silently_ignored(
    tiny_dataset, tmp_path, record, capsys
):
    """SILENT before: a record that parsed as JSON of another shape turned every checksum check off
    without a word (doctor 0 problems; one that was not JSON at all was a warning)."""
    ds = tmp_path / "ds"
    shutil.copytree(tiny_dataset, ds)
    (ds / "meta" / "actlab_checksums.json").write_text(record)
    assert main(["data", "doctor", str(ds), "--video-samples", "0", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)["problems"]
    assert [(p["check"], p["severity"]) for p in found] == [("checksum", "warning")]
    assert "unreadable" in found[0]["found"]


@pytest.mark.timeout(60)
def test_json_of_another_shape_is_refused_naming_the_file(run_dir, tmp_path, capsys):
    """TRACEBACK before: a bundle's config.json holding `[]` ('list' object has no attribute 'get' in
    eval), best.json `{}` (KeyError 'step' on resume), a metrics.jsonl line `[1, 2]` (on resume)."""
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    ckpt = run / "checkpoints" / "step_0000002"
    (ckpt / "config.json").write_text("[]")
    assert main(["eval", str(ckpt), "--episodes", "1", "--workers", "1", "--max-steps", "2"]) == 2
    err = capsys.readouterr().err
    assert "config.json is not a JSON object" in err and str(ckpt / "config.json") in err
    shutil.rmtree(run)
    shutil.copytree(run_dir, run)
    (run / "checkpoints" / "best.json").write_text("{}")
    assert main(["train", "--resume", "--out", str(run), "--set", "steps=3"]) == 2
    err = capsys.readouterr().err
    assert "checkpoint pointer best.json is damaged" in err and "delete" in err
    (run / "checkpoints" / "best.json").unlink()
    (run / "metrics.jsonl").write_text('{"step": 1}\n[1, 2]\n{"step": 2}\n')
    assert main(["train", "--resume", "--out", str(run), "--set", "steps=3"]) == 2
    assert "metrics.jsonl line 2 is not a row of metrics" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_a_directory_of_another_kind_is_named_for_what_it_is(run_dir, tiny_dataset, tmp_path, capsys):
    """UNCLEAR before: each of these ended in an error about something else ("no checkpoint found",
    "actlab's ACT has no counterpart for this LeRobot ACT setting", "unknown config key 'type'", "unknown
    policy type 'None'", "dataset info not found")."""
    ckpt = run_dir / "checkpoints" / "step_0000002"
    export = tmp_path / "export"
    assert main(["policy", "export", str(ckpt), "--to", "lerobot", "--out", str(export)]) == 0
    capsys.readouterr()
    cases = [
        (["eval", str(export), "--episodes", "1"], "LeRobot export", f"{export}/actlab_bundle"),
        (["eval", str(tiny_dataset), "--episodes", "1"], "no checkpoint found", "a LeRobot dataset"),
        (["policy", "info", str(run_dir)], "not an actlab policy bundle", "an actlab training run"),
        (["policy", "import", str(ckpt), "--out", str(tmp_path / "i")], "nothing to import", "actlab policy"),
        (["train", "--resume", "--out", str(ckpt)], "not a run directory", "an actlab policy bundle"),
        (
            [
                "train",
                "--preset",
                "tiny",
                "--dataset",
                str(tiny_dataset),
                "--out",
                str(tmp_path / "r"),
                "--init-from",
                str(run_dir),
            ],
            "--init-from takes an actlab policy bundle",
            "an actlab training run",
        ),
        (["data", "info", str(ckpt)], "not a dataset", "an actlab policy bundle"),
    ]
    for argv, problem, found in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert problem in err and found in err, (argv, err)
    assert not (tmp_path / "i").exists() and not (tmp_path / "r").exists()


@pytest.mark.timeout(60)
def test_a_one_step_chunk_is_refused_before_any_decoding(tiny_dataset, tmp_path, capsys):
    """UNCLEAR before: `--set policy.chunk_size=1` decoded every frame, then failed with "the training
    batch has no 'action_is_pad'"."""
    out = tmp_path / "run"
    sets = ["--set", "policy.chunk_size=1", "--set", "policy.n_action_steps=1"]
    assert main(["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(out), *sets]) == 2
    err = capsys.readouterr().err
    assert "policy.chunk_size" in err and ">= 2" in err
    assert not out.exists()


@pytest.mark.timeout(120)
def test_a_first_ctrl_c_of_train_checkpoints_and_stops_with_the_resume_line(tiny_dataset, tmp_path, capsys):
    """LOSS before: Ctrl-C ended `actlab train` at once with "interrupted": every step since the last
    checkpoint was lost and nothing said how to go on. Now a first Ctrl-C writes a checkpoint at the
    next step and exits 130 with the resume line (a SIGTERM already did so, exit 143). A real SIGINT to
    the process running the command; that process is this one (a Ctrl-C is caught, not a kill: no
    interpreter start and torch import of its own)."""
    out = tmp_path / "run"
    sets = ["steps=100000", "checkpoint.every=100000", "log.every=1", "eval.every=0", "log.progress=false"]
    argv = ["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(out)]
    metrics = out / "metrics.jsonl"
    with ctrl_c_when(lambda: metrics.is_file() and metrics.read_text().count("\n") >= 2, 90) as ctrl_c:
        code = main([*argv, *[arg for s in sets for arg in ("--set", s)]])
    err = capsys.readouterr().err
    assert ctrl_c["sent"] and not ctrl_c["late"] and not ctrl_c["stray"], (ctrl_c, err[-2000:])
    assert code == 130, err[-2000:]
    assert "stopped by SIGINT after checkpoint" in err and f"actlab train --out {out} --resume" in err
    steps = sorted(p.name for p in (out / "checkpoints").glob("step_*"))
    assert steps and steps[-1] >= "step_0000002", steps  # the steps it ran are kept (none was due)
