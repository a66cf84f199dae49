"""Every example in every ``--help`` runs as written after ``actlab demo --out runs/demo`` (``-m slow``;
the default suite parses every one of them).

A toy demo (4 recorded episodes, 20 training steps) is built once and laid out like ``runs/demo``; each
block of examples (the ``examples:`` part of a help page; pages sharing a block run it once) runs in a
directory of its own where ``runs/demo`` is that toy demo, in the order written, so an example may use
what an earlier one of its block created. The examples are read from the parsers at run time: a new
subcommand's examples are tested without touching this file.

The only changes made to an example are sizes (:data:`SIZES`, :data:`STEPS`, :data:`EPISODE_CAP`,
:data:`DEMO_TOY`, and the names of the demo's checkpoints, :data:`DEMO_CHECKPOINTS`), so that every example
runs in seconds; most of the file's time is the toy demo's build. Examples that need hardware or software
CI lacks are only parsed (:data:`PARSE_ONLY`, each with its reason); every other one runs in this process
through ``actlab.cli.main`` (each command restores what it changes in the process: signal handlers, torch
threads, which this file also restores) and must exit with :data:`EXIT_CODES`'s code (0 unless listed).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import actlab
from actlab.cli import build_parser, main

pytest.importorskip("mujoco")

# The toy demo every block sees as runs/demo: tests/demo's toy settings, with one evaluation episode
# instead of two. `actlab demo` examples get these flags put first (so that a flag an example gives
# itself still wins) and then reuse every stage of it.
DEMO_TOY = ["--episodes", "4", "--eval-episodes", "1", "--videos", "1", "--device", "cpu", "--workers", "1"]
DEMO_TOY += ["--set", "steps=20", "--set", "checkpoint.every=10", "--set", "eval.every=10"]
DEMO_TOY += ["--set", "log.every=5"]
# The CPU demo's checkpoints that examples name -> the toy demo's that stand in for them (by position in
# its sorted list: the first and the last; 20 steps instead of 5,000).
DEMO_CHECKPOINTS = {"step_0001000": 0, "step_0002000": -1}

# Sizes: the value of each of these flags, wherever an example gives it, is replaced by a tiny one.
SIZES = {
    "--episodes": "1",  # episodes evaluated, recorded, synthesized, timed
    "--videos": "1",  # rollout videos (at most --episodes)
    "--frames": "20",  # frames synthesized / rendered / encoded per episode
    "--encodes": "4",  # bench encode: episode encodes in all
    "--seconds": "0.3",  # bench data: seconds timed
    "--baseline-seconds": "0.5",
    "--steps": "1",  # bench / find-batch-size: timed or probed steps
    "--rounds": "1",
    "--max-steps": "10",  # bench eval: steps per episode
    "--batch-size": "4",
    "--max": "2",  # find-batch-size: the largest batch tried
    "--overfit": "1",  # samples to overfit (still ~150 steps of the tiny preset)
}
# `--set steps=N`: training steps, mapped so that a resumed run still asks for more than the first one.
# steps=20 stays: a checkpoint an example names (step_0000020) must exist.
STEPS = {"20": "20", "500": "2", "2000": "2", "3000": "4"}
# `actlab eval` episodes are cut to this many steps (an untrained policy runs the sim's 300-step limit).
EPISODE_CAP = ["--max-steps", "30"]

# Examples (matched by how they begin) that are only parsed, with the reason they cannot run here.
PARSE_ONLY = {
    "actlab train --preset so101_sim --dataset runs/demo/data --out runs/gpu --device cuda": "a CUDA GPU",
    "torchrun --nproc_per_node 2": "torchrun with 2 processes on CUDA GPUs",
    "actlab find-batch-size --preset so101_sim --dataset runs/demo/data --device cuda": "a CUDA GPU",
    "actlab monitor --out runs/lerobot.csv -- lerobot-train": "lerobot's own lerobot-train",
    "actlab bench data runs/bench224 --batch-size 8 --action-horizon 100 --lerobot-python": "a lerobot venv",
    "actlab bench train --preset so101_sim --dataset runs/demo/data --device cuda": "a CUDA GPU and a "
    "lerobot venv",
    "actlab eval --lerobot-policy": "a lerobot venv (and a LeRobot checkpoint of any policy type)",
    "actlab policy doctor --lerobot-policy": "a lerobot venv (and a LeRobot checkpoint of any policy type)",
    "actlab bench train --preset aloha_clip --device cuda": "a CUDA GPU (and CLIP's weights from the hub)",
}
# Exit codes expected where a command has more than one successful outcome (how an example begins ->
# code; any other example must exit 0).
EXIT_CODES = {
    "actlab data doctor runs/demo/data": 0,  # 1 when it finds problems: the demo's recording has none
    # 0 or 1: the doctor exits 1 when its verdict is a fault, and the toy demo's 20-step policy may well
    # have one (did_not_learn); the real demo's step 5000 exits 0 (docs/evaluation.md).
    "actlab policy doctor": (0, 1),
}


def _write_npy_episodes(root: Path) -> None:
    """Two short episodes in the .npy layout `actlab data convert` reads (observations as records)."""
    root.mkdir(parents=True)
    lengths, rng = (6, 4), np.random.default_rng(0)
    t = sum(lengths)
    obs = np.empty(t, dtype=object)
    for i in range(t):
        obs[i] = {"image_top": rng.integers(0, 255, (16, 16, 3), dtype=np.uint8), "state": np.zeros(6)}
    np.save(root / "observations.npy", obs, allow_pickle=True)
    np.save(root / "actions.npy", rng.normal(size=(t, 6)).astype(np.float32))
    np.save(root / "rollout_length.npy", np.array(lengths))


def _write_lerobot_checkpoint(root: Path) -> None:
    """What lerobot-train leaves in checkpoints/last/pretrained_model: a LeRobot ACT (ResNet-18, zeros into
    the decoder) trained 2 steps on the demo's data, written by `actlab policy export` (tests/lerobot
    loads such directories with lerobot 0.6.1 itself)."""
    run = root.parent / "act_so101_run"
    steps = ["--set", "steps=2", "--set", "checkpoint.every=2", "--set", "eval.every=2"]
    model = ["--set", "policy.vision_backbone=resnet18", "--set", "policy.pretrained_backbone_weights=null"]
    model += ["--set", "policy.decoder_input=zeros"]
    checkpoint = str(run / "checkpoints" / "step_0000002")
    for args in (
        ["train", "--preset", "tiny", "--dataset", "runs/demo/data", "--out", str(run), *steps, *model],
        ["policy", "export", checkpoint, "--to", "lerobot", "--out", str(root)],
    ):
        code, output = _run_in_process(args)
        assert code == 0, output[-4000:]


# Inputs that stand for the user's own files (no actlab command writes them): written into the block's
# directory (where runs/demo is the toy demo) before its examples run.
USER_INPUTS = {
    "my_npy_episodes": _write_npy_episodes,
    "outputs/train/act_so101/checkpoints/last/pretrained_model": _write_lerobot_checkpoint,
}


# ------------------------------------------------------------------------------------------- reading


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ("actlab",)):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, (*path, name))


def examples_in(help_text: str) -> list[str]:
    """The example command lines of a help page: the indented lines after ``examples:`` up to the first
    blank line, with backslash continuations joined and whole-line comments left out."""
    lines = help_text.splitlines()
    if "examples:" not in [line.strip() for line in lines]:
        return []
    start = [line.strip() for line in lines].index("examples:") + 1
    out, current = [], ""
    for line in lines[start:]:
        if not line.strip() or not line.startswith(" "):
            break
        text = line.strip()
        if text.startswith("#") and not current:
            continue
        current = f"{current} {text}" if current else text
        if current.endswith("\\"):
            current = current[:-1].rstrip()
            continue
        out.append(current)
        current = ""
    assert not current, f"an example ends with a line continuation: {current!r}"
    return out


def _blocks() -> dict[tuple[str, ...], list[str]]:
    """Each distinct block of examples -> the help pages that show it."""
    blocks: dict[tuple[str, ...], list[str]] = {}
    for path, parser in _parsers(build_parser()):
        block = tuple(examples_in(parser.format_help()))
        if block:
            blocks.setdefault(block, []).append(" ".join(path))
    return blocks


BLOCKS = _blocks()


def _command_args(example: str) -> list[str]:
    """The arguments of the actlab command line an example runs (torchrun's included)."""
    tokens = shlex.split(example, comments=True)
    if tokens[0] == "actlab":
        return tokens[1:]
    if tokens[0] == "torchrun" and "actlab.cli" in tokens:
        return tokens[tokens.index("actlab.cli") + 1 :]
    raise AssertionError(f"an example must run actlab (or torchrun -m actlab.cli): {example!r}")


def _parse(args: list[str]) -> None:
    """Parse an actlab command line as `actlab` would (a --help example prints and exits 0)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(args)
    except SystemExit as e:
        assert e.code == 0, f"actlab {shlex.join(args)} does not parse"


def _parse_only_reason(example: str) -> str | None:
    return next((why for start, why in PARSE_ONLY.items() if example.startswith(start)), None)


# ------------------------------------------------------------------------------------------- sizing


def sized(args: list[str], checkpoints: dict[str, str]) -> list[str]:
    """An example's arguments with the sizes of this file's tables (see the module docstring)."""
    if "--" in args:  # actlab monitor ... -- CMD: CMD is sized too (when it is actlab's)
        cut = args.index("--")
        rest = args[cut + 1 :]
        if rest[:1] == ["actlab"]:
            rest = ["actlab", *sized(rest[1:], checkpoints)]
        return [*sized(args[:cut], checkpoints), "--", *rest]
    if args[:1] == ["demo"]:
        return ["demo", *DEMO_TOY, *args[1:]]
    out = []
    for i, token in enumerate(args):
        if i and args[i - 1] in SIZES:
            token = SIZES[args[i - 1]]
        elif i and args[i - 1] == "--set" and token.startswith("steps="):
            token = "steps=" + STEPS.get(token.split("=", 1)[1], "2")
        for name, toy in checkpoints.items():
            token = token.replace(name, toy)
        out.append(token)
    if out[:1] == ["eval"] and "--max-steps" not in out and "--help" not in out:
        out[1:1] = EPISODE_CAP
    return out


# ------------------------------------------------------------------------------------------- running


def _run_in_process(args: list[str]) -> tuple[int, str]:
    """``actlab ARGS`` in this process: (exit code, its stdout + stderr). torch's thread count, which
    `actlab train` and `policy bench --threads` set for their process, is restored after."""
    import torch

    threads = torch.get_num_threads()
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = main(args)
    except SystemExit as e:  # --help, --version
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
    finally:
        torch.set_num_threads(threads)
    return code, out.getvalue()


@pytest.fixture(scope="module")
def toy_demo(tmp_path_factory) -> tuple[Path, str]:
    """A toy ``actlab demo`` (built once) and its last checkpoint's name; the environment lets commands
    that an example starts as a child (`actlab monitor -- actlab ...`) run this source tree's actlab."""
    import torch

    root = tmp_path_factory.mktemp("toy") / "demo"
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        src = str(Path(actlab.__file__).parents[1])
        mp.setenv("PYTHONPATH", os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
        # One torch thread here and in the processes the examples start (unless an example sets its own):
        # with two, on 2 cores shared with other work, the toy demo trained at 27 samples/s instead of
        # 170 (the threads wait for each other spinning) and took 3x as long.
        mp.setenv("OMP_NUM_THREADS", "1")
        torch.set_num_threads(1)
        try:
            code, output = _run_in_process(["demo", "--out", str(root), *DEMO_TOY])
            assert code == 0, output[-4000:]
            toy = sorted(p.name for p in (root / "run" / "checkpoints").glob("step_*"))
            yield root, {name: toy[i] for name, i in DEMO_CHECKPOINTS.items()}
        finally:
            torch.set_num_threads(threads)


def _block_id(block: tuple[str, ...]) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", BLOCKS[block][0].lower()).strip("-")


# Slow: the examples run for real (a toy demo built once, then every block) took 260 s on 2 quiet cores
# and 570 s at a load average of 4, 40 % of the whole suite; the default suite parses every example
# against the parser instead (test_every_example_parses_and_the_tables_are_current, below), and
# `pytest -m slow tests/cli/test_help_examples.py` runs them as written.
@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("block", list(BLOCKS), ids=[_block_id(b) for b in BLOCKS])
def test_help_examples_run(block, toy_demo, tmp_path, monkeypatch):
    root, checkpoints = toy_demo
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "demo").symlink_to(root, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    inputs = set()
    for name, write in USER_INPUTS.items():
        if any(name in shlex.split(example, comments=True) for example in block):
            write(tmp_path / name)
            inputs.add(Path(name).parts[0])
    for example in block:
        args = sized(_command_args(example), checkpoints)
        if _parse_only_reason(example):
            _parse(args)
            continue
        expected = next((c for start, c in EXIT_CODES.items() if example.startswith(start)), 0)
        t0 = time.perf_counter()
        code, output = _run_in_process(args)
        assert code in (expected if isinstance(expected, tuple) else (expected,)), (
            f"{example}\nran as: actlab {shlex.join(args)}\nin {tmp_path} (runs/demo: {root})\n"
            f"exit {code}, expected {expected}, after {time.perf_counter() - t0:.1f} s; output (end):\n"
            f"{output[-4000:]}"
        )
    # Outputs go under runs/ (git-ignored): example outputs showed up in `git status` of a clone.
    stray = sorted(p.name for p in tmp_path.iterdir() if p.name not in {"runs", *inputs})
    assert stray == [], f"these examples wrote outside runs/: {stray}\n" + "\n".join(block)


# ------------------------------------------------------------------------------------------- coverage


def test_every_command_and_group_has_examples():
    missing = [" ".join(path) for path, p in _parsers(build_parser()) if not examples_in(p.format_help())]
    assert missing == []


def test_every_example_parses_and_the_tables_are_current():
    examples = [e for block in BLOCKS for e in block]
    for example in examples:
        _parse(sized(_command_args(example), {n: "step_0000020" for n in DEMO_CHECKPOINTS}))
    stale = [start for start in [*PARSE_ONLY, *EXIT_CODES] if not any(e.startswith(start) for e in examples)]
    assert stale == [], "no example begins like this any more: update the table"
    used = {t for e in examples for t in _command_args(e)}
    assert [flag for flag in SIZES if flag not in used] == []
    assert {f"steps={n}" for n in STEPS} <= used
    assert all(any(name in e for e in examples) for name in DEMO_CHECKPOINTS)
    assert all(any(name in e for e in examples) for name in USER_INPUTS)
