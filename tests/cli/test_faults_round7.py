"""Faults of our seventh planted-fault run (docs/faults.md "Seventh fault run"), planted for real: the real
parser, real files, real commands and processes.

- ``actlab monitor`` whose command ignores SIGTERM/SIGINT waited for it forever (a HANG, with a process
  left behind): the command's whole tree is now killed ``STOP_GRACE_S`` after the signal, and said;
- a bundle whose features.json lists a camera the weights do not have (or lacks one they have) was blamed
  on "config.json and model.safetensors", a config.json ``cameras`` of short names on features.json, and
  an edited stats.json (the copy of the normalizer stored with the weights) was ignored without a word;
- an output path that is a device or FIFO (``monitor --out /dev/null``) was replaced by a regular file
  (LOSS: as root, /dev/null itself); a dataset path that is a FIFO, a file or a dataset's meta/ folder
  was "dataset directory not found";
- ``--out '~/x'`` (a ``~`` the shell did not expand) made a directory named ``~`` in the working directory
  and failed; ``--cameras top,top`` made one camera without a word;
- an unreadable ``--set`` value was expected to be "<class 'int'>" with a Python error as its fix;
- a tasks.parquet that lost a task was blamed on info.json, with the fix "set total_tasks to 0".
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time

import pytest

from actlab.cli import main
from actlab.errors import ActlabError
from actlab.policies import load_policy
from actlab.utils.io import atomic_write_text
from procs import finish, started

_MONITOR_WITH_SHORT_GRACE = """
import sys
import actlab.profiling.monitor as monitor
from actlab.cli import main
monitor.STOP_GRACE_S = 1.0  # the default 10 s, shortened for the test
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.timeout(60)
def test_monitor_kills_a_command_that_ignores_its_stop_signal(tmp_path):
    """HANG before: `actlab monitor -- CMD` forwarded SIGTERM (and SIGINT) to a CMD that ignores it and
    waited for it forever (`timeout 60` did not end it in 10 minutes); CMD's child kept running. SIGINT
    and SIGTERM take the same path (the forwarder); SIGINT, a Ctrl-C from outside a terminal, is planted."""
    sig = signal.SIGINT
    ready = tmp_path / "ready"
    script = tmp_path / "ignores.sh"
    script.write_text(f"trap '' TERM INT\nsleep 1000 &\ntouch '{ready}'\nwait\n")
    cmd = [
        sys.executable,
        "-c",
        _MONITOR_WITH_SHORT_GRACE,
        "monitor",
        "--interval",
        "0.2",
        "--",
        "sh",
        script,
    ]
    with started(cmd) as proc:
        deadline = time.monotonic() + 40
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the command never started"
            time.sleep(0.1)
        sent = time.monotonic()
        proc.send_signal(sig)
        _out, err = finish(proc, timeout=15)  # fails if anything it started is left running
    assert time.monotonic() - sent < 12
    assert proc.returncode == 128 + signal.SIGKILL, err[-2000:]
    assert f"did not exit within 1 s of {sig.name}: killed it and 1 process(es) it started (SIGKILL)" in err


def _edit_json(path, edit):
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _add_side_camera(features):
    features["observation.images.side"] = features["observation.images.top"]


def _grow_state(features):
    features["observation.state"]["shape"] = [7]


def _shift_action_mean(stats):
    stats["action"]["mean"] = [5.0] * len(stats["action"]["mean"])


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("file", "edit", "problem", "found"),
    [
        ("features.json", _add_side_camera, "features.json and the normalizer", "observation_images_side"),
        ("features.json", lambda f: f.pop("observation.images.wrist"), "disagree on the features", "wrist"),
        ("config.json", lambda c: c.__setitem__("cameras", ["top"]), "camera 'top' is not", "top"),
        ("stats.json", _shift_action_mean, "stats.json disagrees with the normalizer", "5.0"),
        ("features.json", _grow_state, "(the shape features.json gives)", "(6,)"),
    ],
)
def test_a_bundle_file_edited_against_its_weights_is_named(file, edit, problem, found, bundle, tmp_path):
    """UNCLEAR before: features.json with a camera the weights lack (or without one they have) was "the
    weights do not match the policy config ... config.json and model.safetensors come from different
    policies"; config.json's cameras of short names was blamed on features.json, a features.json state
    shape edited was blamed on stats.json alone ("the stats were computed for other features"). SILENT
    before: an edited
    stats.json loaded (a digest warning at most) and the policy normalized with the weights' copy."""
    copy = tmp_path / "policy"
    shutil.copytree(bundle, copy)
    _edit_json(copy / file, edit)
    with (
        pytest.warns(UserWarning, match="changed since the bundle was saved"),
        pytest.raises(ActlabError) as e,
    ):
        load_policy(copy)
    assert problem in e.value.problem and found in str(e.value.found)
    # A shape features.json and stats.json disagree on is named in stats.json, with both in the fix.
    named = "stats.json" if edit is _grow_state else file
    assert e.value.file == str(copy / named) and (edit is not _grow_state or "features.json" in e.value.fix)


@pytest.mark.timeout(60)
def test_an_output_path_that_is_a_fifo_is_refused_not_replaced(tmp_path, capsys):
    """LOSS before: `monitor --out /dev/null` renamed its CSV over the device node (as root /dev/null
    became a regular file for every process on the machine); every atomic write did the same to a FIFO.
    A FIFO is planted here (never the real /dev/null)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ActlabError, match="the output path is a FIFO, not a file"):
        atomic_write_text(fifo, "x")
    for option in ("--out", "--summary-json"):
        assert main(["monitor", "--interval", "0.1", option, str(fifo), "--", sys.executable, "-c", ""]) == 2
        assert "the output path is a FIFO, not a file" in capsys.readouterr().err
    assert fifo.is_fifo() and os.listdir(tmp_path) == ["fifo"]


@pytest.mark.timeout(60)
def test_a_dataset_path_that_is_no_dataset_directory_says_what_it_is(tiny_dataset, tmp_path, capsys):
    """UNCLEAR before: a FIFO or a file given as the dataset was "dataset directory not found" (it
    exists), and a dataset's meta/ folder sent the user to meta/meta/info.json with "check the path"."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert main(["data", "info", str(fifo)]) == 2
    assert "the dataset path is not a directory" in capsys.readouterr().err
    assert main(["data", "stats", str(tiny_dataset / "meta")]) == 2
    err = capsys.readouterr().err
    assert "this is the meta/ folder of a dataset" in err and f"fix:      pass {tiny_dataset}" in err


@pytest.mark.timeout(60)
def test_a_leading_tilde_is_the_home_directory_for_every_option(tmp_path, monkeypatch):
    """UNCLEAR before: `data synth --out '~/ds'` checked the overlap of the expanded path, wrote its
    temporary copy under $HOME, then failed with "file or directory not found: ~/ds" and left an empty
    directory named `~` in the working directory."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    args = ["--episodes", "1", "--frames", "2", "--image-size", "16", "--codec", "h264"]
    assert main(["data", "synth", "--out=~/ds", *args]) == 0
    assert (home / "ds" / "meta" / "info.json").is_file() and os.listdir(work) == []


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", [["data", "synth", "--out", "x"], ["sim", "record", "--out", "x"]])
def test_a_camera_named_twice_is_refused(command, tmp_path, monkeypatch, capsys):
    """SILENT before: `data synth --cameras top,top` wrote a dataset with one camera, exit 0."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main([*command, "--cameras", "top,wrist,top"])
    assert e.value.code == 2 and "camera top is named twice" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


@pytest.mark.timeout(60)
def test_an_unreadable_set_value_says_the_type_in_words(bundle, tiny_dataset, tmp_path, capsys):
    """UNCLEAR before: `rl reward-model --set steps=nan` said expected "<class 'int'>", fix "invalid
    literal for int() with base 10: 'nan'"."""
    out = tmp_path / "rm"
    args = ["rl", "reward-model", "--demos", str(tiny_dataset), "--base", str(bundle), "--out", str(out)]
    assert main([*args, "--set", "steps=nan"]) == 2
    err = capsys.readouterr().err
    assert "cannot read the value of --set steps" in err and "expected: an integer, e.g. 100" in err
    assert "<class" not in err and "fix:      --set steps=VALUE with VALUE an integer" in err
    assert not out.exists()


@pytest.mark.timeout(60)
def test_a_tasks_file_that_lost_a_task_is_blamed_not_info_json(tiny_dataset, tmp_path, capsys):
    """UNCLEAR before: a tasks.parquet emptied of its task made `data info` say "info.json total_tasks
    disagrees with tasks.parquet", fix "set total_tasks to 0 in info.json" (agreeing with the damage)."""
    import pyarrow.parquet as pq

    copy = tmp_path / "ds"
    shutil.copytree(tiny_dataset, copy)
    tasks = copy / "meta" / "tasks.parquet"
    pq.write_table(pq.read_table(tasks).slice(0, 0), tasks)
    assert main(["data", "info", str(copy)]) == 2
    err = capsys.readouterr().err
    assert "names a task missing from tasks.parquet" in err and f"file:     {tasks}" in err
    assert "set total_tasks" not in err
