"""Every command against hostile inputs and environments: no traceback, a message naming the file and the
fix (exit 2), and no input lost.

The commands come from the parser itself (a new subcommand is covered without touching this file):
every command's output goes into a closed pipe, and every numeric option refuses a negative value. The
hostile environments are real: a read-only or full filesystem is a real tmpfs (``small_fs``), a damaged
file is a real file with bytes overwritten or cut off, a closed stdout is a pipe whose reader is gone.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import actlab
from actlab.cli import EXIT_STDOUT_CLOSED, build_parser, main

SRC = str(Path(actlab.__file__).parents[1])


def _commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and command group of the parser, e.g. ("data",), ("data", "info"), ("train",)."""
    found = [prefix] if prefix else []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, (*prefix, name))
    return found


def _is_group(command: tuple[str, ...]) -> bool:
    return any(c[: len(command)] == command and len(c) > len(command) for c in COMMANDS)


COMMANDS = _commands(build_parser())


def _numeric_options() -> list[tuple[tuple[str, ...], str]]:
    out = []
    for command in COMMANDS:
        parser = build_parser()
        for name in command:
            sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            parser = sub.choices[name]
        for action in parser._actions:
            if action.option_strings and action.type is not None and action.type.__name__ in ("int", "float"):
                out.append((command, action.option_strings[-1]))
    return out


class _ClosedPipe(io.TextIOBase):
    """A stdout whose reader went away: every write raises what a write to a closed pipe raises."""

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:  # what a buffered stdout raises when it finally writes
        raise BrokenPipeError(32, "Broken pipe")


def _tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``: an input is lost or changed if this differs afterwards."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _run(args: list[str]) -> tuple[int, str]:
    """``actlab ARGS`` in this process: (exit code, stdout + stderr). An exception leaving main() fails
    the test with its traceback, which is the point."""
    import torch

    threads = torch.get_num_threads()
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(args)
    except SystemExit as e:  # argparse: --help, usage errors
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    finally:
        torch.set_num_threads(threads)
    return code, out.getvalue()


def _refused(args: list[str], *words: str) -> str:
    code, out = _run(args)
    assert code == 2, f"actlab {' '.join(args)}: exit {code}\n{out[-3000:]}"
    assert "Traceback" not in out and "error:" in out, out[-3000:]
    for w in words:
        assert w in out, f"{w!r} not in:\n{out[-3000:]}"
    return out


# ------------------------------------------------------------------------------------------ shared runs


@pytest.fixture(scope="module")
def world(tmp_path_factory, make_dataset):
    """A tiny dataset and a 2-step training run with checkpoints at steps 1 and 2 (module-wide; tests
    copy what they damage)."""
    root = tmp_path_factory.mktemp("hostile")
    ds = make_dataset(root, episodes=2, length=30)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")
        args = ["train", "--preset", "tiny", "--dataset", str(ds), "--out", str(root / "run")]
        args += ["--device", "cpu", "--set", "steps=2", "--set", "checkpoint.every=1"]
        args += ["--set", "log.plot=false"]  # (the plot is not under test here: it costs a savefig)
        code, out = _run([*args, "--set", f"data.cache_dir={root / 'cache'}"])
    assert code == 0, out[-3000:]
    return {"root": root, "data": ds, "run": root / "run", "bundle": root / "run/checkpoints/step_0000002"}


# ------------------------------------------------------------------------------------- closed stdout


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_every_command_s_output_into_a_closed_pipe_ends_quietly(command, monkeypatch, capsys):
    """``actlab CMD --help | head -0`` (and a bare group, which prints its help) for every command the
    parser has: exit 141, nothing on stderr. Before: BrokenPipeError tracebacks."""
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main([*command, "--help"]) == EXIT_STDOUT_CLOSED
    if _is_group(command):  # a bare group prints its help on stdout
        assert main(list(command)) == EXIT_STDOUT_CLOSED
    assert "Traceback" not in capsys.readouterr().err


def _closed_stdout_run(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first write, as after `| head -1` has read its line
    try:
        return subprocess.run(
            [sys.executable, "-m", "actlab.cli", *args],
            stdout=w,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1", **(env or {})},
        )
    finally:
        os.close(w)


@pytest.mark.parametrize(
    "args",
    [
        ["train", "--help-config"],  # 3 of 3 tracebacks before
        ["data", "info", "{data}", "--json"],  # 1 in 4 before (the pipe raced the whole output)
        ["data", "doctor", "{data}"],
        ["policy", "info", "{bundle}"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_real_closed_pipe_gives_141_and_an_empty_stderr(world, args):
    """In a real process the interpreter flushes stdout once more at exit: that flush must not print
    "Exception ignored ... BrokenPipeError" either."""
    args = [a.format(**world) for a in args]
    p = _closed_stdout_run(args)
    assert p.returncode == EXIT_STDOUT_CLOSED, p.stderr[-3000:]
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr[-3000:]


# ------------------------------------------------------------------------------------ negative numbers


@pytest.mark.parametrize(
    "command, flag", _numeric_options(), ids=lambda x: x if isinstance(x, str) else " ".join(x)
)
def test_every_numeric_option_refuses_negative_and_nan(command, flag, capsys):
    """Counts, seeds, sizes and durations: -1 and nan are usage errors naming the flag (a negative --seed
    was a numpy traceback). An option whose own default is negative (a -1 sentinel) is the exception."""
    parser = build_parser()
    sub = parser
    for name in command:
        sub = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    default = next(a.default for a in sub._actions if flag in a.option_strings)
    if isinstance(default, (int, float)) and default < 0:
        pytest.skip(f"{flag} uses {default} as its 'automatic' value")
    for bad in ("-1", "nan"):
        if bad == "nan" and any(a.type.__name__ == "int" for a in sub._actions if flag in a.option_strings):
            continue
        with pytest.raises(SystemExit) as e:
            parser.parse_args([*command, f"{flag}={bad}"])
        assert e.value.code == 2
        assert flag in capsys.readouterr().err


def test_an_invalid_record_noise_is_refused_before_any_worker_starts(tmp_path):
    """It was raised inside the workers, which the pool reported as "a worker died ... free memory"."""
    out = _refused(
        ["sim", "record", "--out", str(tmp_path / "rec"), "--noise", "5", "--workers", "2"], "noise"
    )
    assert "worker" not in out and not (tmp_path / "rec").exists()


def test_lerobot_python_that_is_a_directory_is_refused_at_parse_time(world, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "data", str(world["data"]), "--lerobot-python", str(tmp_path)])
    assert e.value.code == 2 and "is a directory" in capsys.readouterr().err


# ------------------------------------------------------------------------- read-only and full outputs


def _ro_outputs(world, ro: Path) -> list[tuple[list[str], str]]:
    d, b = str(world["data"]), str(world["bundle"])
    eval_ = ["eval", b, "--episodes", "1", "--max-steps", "5", "--workers", "1", "--seed", "1000"]
    return [
        ([*eval_, "--out", f"{ro}/eval"], "eval --out"),
        (
            ["policy", "doctor", b, "--dataset", d, "--max-episodes", "1", "--out", f"{ro}/doc"],
            "doctor --out",
        ),
        (["data", "cache", d, "--cache-dir", f"{ro}/cache"], "data cache --cache-dir"),
        (["monitor", "--out", f"{ro}/m.csv", "--", sys.executable, "-c", "pass"], "monitor --out"),
        (
            [
                "data",
                "synth",
                "--out",
                f"{ro}/synth",
                "--episodes",
                "1",
                "--frames",
                "8",
                "--image-size",
                "16",
            ],
            "synth",
        ),
    ]


def test_read_only_outputs_are_refused_with_the_fix_and_leave_the_inputs(world, small_fs):
    ro = small_fs(1 << 20, read_only=True)
    before = _tree_digest(world["data"]), _tree_digest(world["bundle"])
    for args, what in _ro_outputs(world, ro):
        out = _refused(args, "read-only")
        assert str(ro) in out, (what, out[-2000:])
    assert (_tree_digest(world["data"]), _tree_digest(world["bundle"])) == before


def test_data_stats_write_meta_on_a_read_only_dataset(world, small_fs):
    disk = small_fs(4 << 20)
    ds = Path(shutil.copytree(world["data"], disk / "ds"))
    before = _tree_digest(ds)
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True, timeout=30)
    _refused(["data", "stats", str(ds), "--write-meta"], "read-only", "stats.json")
    assert _tree_digest(ds) == before


def test_full_outputs_name_the_file_and_leave_nothing(world, small_fs):
    full = small_fs(64 << 10)
    fd = os.open(full / "filler", os.O_WRONLY | os.O_CREAT)
    with contextlib.suppress(OSError):  # fill it to the last block
        while True:
            os.write(fd, b"\0" * 1024)
    os.close(fd)
    d, b = str(world["data"]), str(world["bundle"])
    eval_ = ["eval", b, "--episodes", "1", "--max-steps", "5", "--workers", "1", "--seed", "1000"]
    cases = [
        [*eval_, "--videos", "1", "--out", f"{full}/eval"],
        ["policy", "doctor", b, "--dataset", d, "--max-episodes", "1", "--out", f"{full}/doc"],
        ["monitor", "--out", f"{full}/m.csv", "--", sys.executable, "-c", "import time; time.sleep(1.5)"],
    ]
    for args in cases:
        out = _refused(args, "disk is full", str(full))
        assert "df -h" in out
    assert sorted(p.name for p in full.iterdir()) == ["filler"]  # no partial output, no temp leftovers


def test_a_disk_that_fills_while_the_frame_store_is_decoded_is_enospc_not_sigbus(
    world, small_fs, monkeypatch
):
    """The store's files are preallocated (posix_fallocate): a disk that fills after the preflight (another
    writer) fails with ENOSPC and the disk-full message, and the lock and the temporary store are gone.
    Before: a sparse memmap took SIGBUS (exit 135, no message) and left both behind. The preflight is
    told the disk is big enough (as it was, before the other writer), the fill itself is real."""
    from actlab.datasets import FrameStore, open_dataset
    from actlab.errors import ActlabError

    disk = small_fs(64 << 10)
    monkeypatch.setattr(FrameStore, "estimate_bytes", classmethod(lambda cls, *a, **k: 0))
    with pytest.raises(ActlabError, match="the disk is full") as e:
        FrameStore.build(open_dataset(world["data"]), cache_dir=disk, progress=False)
    assert "--image-size" in e.value.fix and "ACTLAB_CACHE" in e.value.fix
    assert list(disk.iterdir()) == []  # neither the lock nor the temporary store is left


# ---------------------------------------------------------------------------------- damaged inputs


def _overwrite(file: Path, at: int, data: bytes) -> None:
    raw = bytearray(file.read_bytes())
    raw[at : at + len(data)] = data
    file.write_bytes(bytes(raw))


def test_non_utf8_json_is_named_with_the_fix(world, tmp_path):
    ds = Path(shutil.copytree(world["data"], tmp_path / "ds"))
    _overwrite(ds / "meta/info.json", 5, b"\xff\xfe")
    for args in (
        ["data", "info", str(ds)],
        ["train", "--preset", "tiny", "--dataset", str(ds), "--out", str(tmp_path / "r")],
    ):
        _refused(args, "not UTF-8", "info.json")
    assert not (tmp_path / "r").exists()
    bundle = Path(shutil.copytree(world["bundle"], tmp_path / "bundle"))
    _overwrite(bundle / "config.json", 10, b"\xe9\xff")
    _refused(["policy", "info", str(bundle)], "not UTF-8", "config.json")
    _refused(
        ["eval", str(bundle), "--episodes", "1", "--out", str(tmp_path / "ev")], "not UTF-8", "config.json"
    )


def test_damaged_weights_are_refused_by_eval(world, tmp_path):
    bundle = Path(shutil.copytree(world["bundle"], tmp_path / "bundle"))
    size = (bundle / "model.safetensors").stat().st_size
    _overwrite(bundle / "model.safetensors", size - 100, b"\x00\x00\x80\x7f")  # well-formed, wrong numbers
    _refused(
        ["eval", str(bundle), "--episodes", "1", "--out", str(tmp_path / "ev")],
        "damaged",
        "model.safetensors",
    )
    assert not (tmp_path / "ev").exists()


@pytest.mark.parametrize("how", ["truncated", "pickle"])
def test_a_damaged_optimizer_state_on_resume_offers_the_previous_checkpoint(world, tmp_path, how):
    """Before: torch's traceback, which even invites weights_only=False. Now: the damage, and how to
    resume from the previous intact checkpoint; the fix is followed and works."""
    run = Path(shutil.copytree(world["run"], tmp_path / "run"))
    opt = run / "checkpoints/step_0000002/training_state/optimizer.pt"
    if how == "truncated":
        opt.write_bytes(opt.read_bytes()[:100])
    else:  # a pickle that runs code when unpickled; its checksum differs from the one recorded at save
        import pickle

        opt.write_bytes(pickle.dumps(os.system))
    args = [
        "train",
        "--out",
        str(run),
        "--resume",
        "--set",
        "steps=3",
        "--set",
        f"data.cache_dir={world['root'] / 'cache'}",
    ]
    out = _refused(args, "step 2 is damaged", "step_0000001", "optimizer.pt")
    assert "weights_only=False: that runs" in out
    aside = out.split("(`mv ")[1].split("`")[0].split()
    os.replace(aside[0], aside[1])
    code, out = _run(args)
    assert code == 0, out[-3000:]


def test_truncated_parquet_and_mp4_are_refused_with_the_file(world, tmp_path):
    ds = Path(shutil.copytree(world["data"], tmp_path / "ds"))
    data = ds / "data/chunk-000/file-000.parquet"
    data.write_bytes(data.read_bytes()[:-200])
    _refused(
        ["train", "--preset", "tiny", "--dataset", str(ds), "--out", str(tmp_path / "r")], "file-000.parquet"
    )
    assert not (tmp_path / "r").exists()
    ds2 = Path(shutil.copytree(world["data"], tmp_path / "ds2"))
    episodes = next((ds2 / "meta/episodes").rglob("*.parquet"))
    episodes.write_bytes(episodes.read_bytes()[:-50])
    _refused(["data", "info", str(ds2)], "episodes")
    ds3 = Path(shutil.copytree(world["data"], tmp_path / "ds3"))
    video = next((ds3 / "videos").rglob("*.mp4"))
    video.write_bytes(video.read_bytes()[: video.stat().st_size // 2])
    _refused(["data", "cache", str(ds3), "--cache-dir", str(tmp_path / "c")])


def test_an_import_whose_stats_have_the_wrong_size_is_refused(tmp_path):
    import numpy as np

    from actlab.errors import ActlabError
    from actlab.lerobot.import_ import affine_stats

    stats = {"mean": np.zeros(7), "std": np.ones(7)}  # 7 values for a 6-dim state
    with pytest.raises(ActlabError, match="wrong size") as e:
        affine_stats(stats, "MEAN_STD", (6,), True, 1e-8, tmp_path / "p.safetensors")
    assert e.value.expected.startswith("6 values") and e.value.found.startswith("7 values")
    with pytest.raises(ActlabError, match="wrong size"):
        affine_stats({"min": np.zeros(5), "max": np.ones(5)}, "MIN_MAX", (6,), True, 1e-8, tmp_path)


def _av_error(tmp_path):
    import av

    (tmp_path / "not-a-video.mp4").write_text("{}")
    try:
        av.open(str(tmp_path / "not-a-video.mp4"))
    except Exception as e:  # PyAV's InvalidDataError (a ValueError, not an OSError)
        return e
    raise AssertionError("PyAV opened a JSON file as a video")


def test_environment_failures_never_leave_main_as_a_traceback(monkeypatch, capsys, tmp_path):
    """The class, not the cases: whatever command meets an OSError, a UnicodeDecodeError or an EOFError
    prints the ActlabError format (file, found, fix) and exits 2; any other exception is a bug and
    keeps its traceback."""
    for exc, words in [
        (
            PermissionError(13, "Permission denied", "/srv/x/out.json"),
            ["permission denied", "/srv/x/out.json"],
        ),
        (OSError(28, "No space left on device"), ["the disk is full", "df -h"]),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), ["not UTF-8"]),
        (EOFError("Ran out of input"), ["truncated"]),
        (_av_error(tmp_path), ["video file cannot be read", "not-a-video.mp4"]),
    ]:

        def boom(args, exc=exc):
            raise exc

        monkeypatch.setattr("actlab.cli.build_parser", lambda boom=boom: _with_run(build_parser(), boom))
        assert main(["data", "info", "x"]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and all(w in err for w in words), err
    monkeypatch.setattr("actlab.cli.build_parser", lambda: _with_run(build_parser(), _bug))
    with pytest.raises(ZeroDivisionError):
        main(["data", "info", "x"])


def _bug(args):
    return 1 / 0


def _with_run(parser: argparse.ArgumentParser, run) -> argparse.ArgumentParser:
    data = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["data"]
    info = next(a for a in data._actions if isinstance(a, argparse._SubParsersAction)).choices["info"]
    info.set_defaults(_run=run)
    return parser


def test_bundles_and_training_state_record_their_checksums(world):
    """sha256 of the bundle's files in actlab.json and of the training state in state.json, checked at
    load and at resume."""
    meta = json.loads((world["bundle"] / "actlab.json").read_text())
    assert set(meta["sha256"]) == {"model.safetensors", "config.json", "stats.json", "features.json"}
    state = json.loads((world["bundle"] / "training_state/state.json").read_text())
    assert "optimizer.pt" in state["sha256"]


def test_a_closed_stdout_descriptor_discards_the_output_and_the_command_runs(world):
    """`actlab ... >&-`: Python starts with sys.stdout None, and the final flush was an AttributeError."""
    p = subprocess.run(
        [sys.executable, "-m", "actlab.cli", "data", "info", str(world["data"]), "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(1),  # in the child, before exec: fd 1 closed, not a pipe
        env={**os.environ, "PYTHONPATH": SRC},
    )
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-2000:]


def test_a_broken_pipe_to_a_child_is_an_error_not_a_quiet_141(monkeypatch, capfd):
    """Only a closed stdout ends quietly: a BrokenPipeError from a pipe to another process (the LeRobot
    bridge writes to its child) while stdout is fine is reported, exit 2."""

    def boom(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("actlab.cli.build_parser", lambda: _with_run(build_parser(), boom))
    assert main(["data", "info", "x"]) == 2
    assert "the process at the other end of a pipe exited" in capfd.readouterr().err
