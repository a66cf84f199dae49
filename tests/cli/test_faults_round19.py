"""Faults of our nineteenth planted-fault run (docs/faults.md "Nineteenth fault run"), planted for real:
real commands killed with SIGKILL in sessions of their own, real temporary directories, a real sim
recording with a video file replaced by a FIFO or removed, real .npy sources, a real evaluation record
edited.

Each test names the probes of docs/faults_round19_probes.md it plants again and what happened before its
fix.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from actlab.cli import main
from procs import finish, started


def _dead_pid() -> int:
    """A pid no process has now (a child that has exited and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    return proc.pid


def _host() -> str:
    return f"{zlib.crc32(socket.gethostname().encode()):08x}"


# ------------------------------------------------------------------ scratch directories in /tmp
@pytest.mark.timeout(90)
def test_a_killed_bench_encode_leaves_no_directory_in_tmp_for_good(tmp_path):
    """LOSS before (be_SIGKILL, also bt_SIGKILL for bench train): SIGKILL to `bench encode` left its
    TemporaryDirectory (/tmp/actlab-encode-XXXXXXXX) behind and no later run removed it: 37 of them had
    piled up on this machine. Now the directory is named with its pid (actlab-encode-HOST-PID-RAND) and the
    next run removes those of a dead pid; a live pid's and an older name (whose it is cannot be told) are
    left alone."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    args = ["bench", "encode", "--encodes", "400", "--workers", "1", "--burners", "0", "--cameras", "1",
            "--frames", "10", "--image-size", "16"]  # fmt: skip
    with started([sys.executable, "-m", "actlab.cli", *args], env=env) as proc:
        end = time.monotonic() + 60
        while not list(tmp_path.glob("actlab-encode-*")) and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, "the bench ended before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    left = list(tmp_path.glob("actlab-encode-*"))
    assert left, "the killed bench left no directory: nothing to reclaim"
    old = tmp_path / "actlab-encode-abcd1234"  # an actlab before this one: not told apart, kept
    old.mkdir()
    live = tmp_path / f"actlab-encode-{_host()}-{os.getpid()}-00000000"  # a live process's: kept
    live.mkdir()
    dead = tmp_path / f"actlab-encode-{_host()}-{_dead_pid()}-00000000"
    dead.mkdir()
    (dead / "x.mp4").write_bytes(b"x")
    args = ["bench", "encode", "--encodes", "1", "--workers", "1", "--burners", "0", "--cameras", "1",
            "--frames", "2", "--image-size", "16"]  # fmt: skip
    with started([sys.executable, "-m", "actlab.cli", *args], env=env) as proc:
        finish(proc, 60)
    assert proc.returncode == 0
    assert sorted(tmp_path.glob("actlab-encode-*")) == sorted([old, live])


# ------------------------------------------------------------------ frame store builds
def test_a_frame_store_build_killed_midway_is_removed_by_the_next_build(rec2, tmp_path, capsys):
    """LOSS before (dc_SIGKILL): SIGKILL to `data cache` while it decoded left `.STORE.XXXXXXXX.tmp` (the
    half-decoded frames, up to the store's size: 51.6 MiB for 6 episodes at 96 px) in the cache directory,
    and no later build removed it. Only a holder of the store's build lock makes such a directory, so the
    next build (which holds it) removes every one there; other stores' and user files are left alone."""
    cache = tmp_path / "cache"
    assert main(["data", "cache", str(rec2), "--cache-dir", str(cache)]) == 0
    (store,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    shutil.rmtree(store)
    dead = cache / f".{store.name}.k2j4x9_a.tmp"  # tempfile.mkdtemp's name, as a killed build left it
    (dead / "frames").mkdir(parents=True)
    (dead / "frames" / "top.npy").write_bytes(b"\0" * 1024)
    aside = cache / f".{store.name}.zz81ppq0.old"
    (aside / "store").mkdir(parents=True)
    other = cache / ".another-store.k2j4x9_a.tmp"
    other.mkdir()
    mine = cache / "notes.txt"
    mine.write_text("mine")
    capsys.readouterr()
    assert main(["data", "cache", str(rec2), "--cache-dir", str(cache)]) == 0
    assert store.is_dir() and not dead.exists() and not aside.exists()
    assert other.is_dir() and mine.read_text() == "mine"


# ------------------------------------------------------------------ eval --workers 0
def test_eval_workers_zero_is_refused_by_its_option(bundle, tmp_path, capsys):
    """UNCLEAR before (ex11, left by the eighteenth run): `eval --workers 0` was "workers must be an integer
    >= 1", field workers (a config field, no option, no fix). Now the parser refuses it naming --workers;
    `sim record --workers 0` (this process) is unchanged."""
    with pytest.raises(SystemExit) as e:
        main(["eval", str(bundle), "--workers", "0", "--out", str(tmp_path / "ev")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --workers: expected a number >= 1, found 0" in err
    assert not (tmp_path / "ev").exists()


# ------------------------------------------------------------------ eval compare
def test_compare_shows_an_edited_seed_as_written(rec2, bundle, tmp_path, capsys):
    """UNCLEAR before (c10): an episode's seed edited to the text "100000" was refused with found "seed
    100000; the episodes' seeds 100000, 100001": the very values expected. Now the seeds are shown as
    written ('100000')."""
    out = tmp_path / "ev"
    argv = ["eval", str(bundle), "--episodes", "2", "--max-steps", "5", "--workers", "1", "--videos", "0",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    edited = tmp_path / "edited"
    shutil.copytree(out, edited)
    data = json.loads((edited / "results.json").read_text())
    first = data["checkpoints"][0]["episodes"][0]
    first["seed"] = str(first["seed"])
    (edited / "results.json").write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["eval", "compare", str(out), str(edited)]) == 2
    err = capsys.readouterr().err
    assert f"the episodes' seeds '{first['seed']}', {int(first['seed']) + 1}" in err


# ------------------------------------------------------------------ data convert
def _source(root: Path, state=None, actions=None) -> Path:
    rng = np.random.default_rng(0)
    obs = {
        "image_left": rng.integers(0, 255, (8, 16, 16, 3), dtype=np.uint8),
        "state": rng.standard_normal((8, 6)).astype(np.float32) if state is None else state,
    }
    root.mkdir(parents=True)
    np.save(root / "observations.npy", np.array(obs, dtype=object), allow_pickle=True)
    acts = rng.standard_normal((8, 6)).astype(np.float32) if actions is None else actions
    np.save(root / "actions.npy", acts, allow_pickle=True)
    np.save(root / "rollout_length.npy", np.array([4, 4]))
    return root


def _objects(values) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


@pytest.mark.parametrize(
    "probe,state,actions,found",
    [
        ("cvo02", _objects([np.zeros(5 if i == 0 else 6, np.float32) for i in range(8)]), None,
         "frame 1 of shape [6], frame 0 of shape [5]"),
        ("cvo03", _objects(["x"] * 8), None, "text 'x' at index 0"),
        ("cvo06", _objects([None] * 8), None, "None at index 0"),
        ("cvo08", None, _objects([np.zeros(4 if i == 0 else 6) for i in range(8)]),
         "frame 1 of shape [6], frame 0 of shape [4]"),
    ],
)  # fmt: skip
def test_data_convert_says_what_in_an_object_array_is_no_number(
    tmp_path, capsys, probe, state, actions, found
):
    """UNCLEAR before (cvo02, cvo03, cvo08): frames of two shapes or text were "not real numbers, expected
    integers or floats, found object" with the fix for complex values ("np.real(x) if the imaginary parts
    are zero"); cvo06: None was cast to NaN and refused as "NaN/inf at frame 0". Now what is no number is
    named with its index, and the fix says how to save one numeric array."""
    src = _source(tmp_path / "src", state=state, actions=actions)
    assert main(["data", "convert", str(src), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert found in err and "np.asarray(frames, dtype=np.float32)" in err and "np.real" not in err
    assert not (tmp_path / "out").exists()


def test_data_convert_stacks_frames_saved_one_array_each(tmp_path, capsys):
    """UNCLEAR before (cvo07): actions saved as an object array of 8 arrays of one shape (a list of
    frames) were refused as "found object", fix np.real; the same values in one array converted. Now they
    are stacked and converted alike."""
    src = _source(tmp_path / "src", actions=_objects([np.full(6, i, np.float32) for i in range(8)]))
    assert main(["data", "convert", str(src), "--out", str(tmp_path / "out")]) == 0


# ------------------------------------------------------------------ a video file that is not a file
def _fifo_video(rec2: Path, tmp_path: Path, fifo: bool) -> Path:
    ds = tmp_path / "ds"
    shutil.copytree(rec2, ds)
    (mp4,) = (ds / "videos" / "observation.images.top").rglob("*.mp4")
    mp4.unlink()
    if fifo:
        os.mkfifo(mp4)
    return ds


@pytest.mark.timeout(60)
def test_the_doctor_says_a_fifo_video_is_a_fifo(rec2, tmp_path, capsys):
    """UNCLEAR before (ud5, ud8): a FIFO (or a directory) where a video file belongs was "video file
    missing", found "missing" in `data doctor`, while train said "a FIFO"."""
    ds = _fifo_video(rec2, tmp_path, fifo=True)
    assert main(["data", "doctor", str(ds)]) == 1
    out = capsys.readouterr()
    text = out.out + out.err
    assert "video file is a FIFO, not a file" in text and "found:    a FIFO" in text


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fifo", [True, False], ids=["ucur-fifo", "ucur2-missing"])
def test_curate_names_every_episode_of_a_video_file_it_cannot_read(rec2, tmp_path, capsys, fifo):
    """UNCLEAR before (ucur, ucur2): a video file missing or replaced by a FIFO was "episode 0 cannot be
    written", fix "drop it (--drop-episodes 0)": the file holds every episode, so the next run failed on
    episode 1. Now the file is named as the input's, with the episodes it holds and the fix to restore it."""
    ds = _fifo_video(rec2, tmp_path, fifo=fifo)
    assert main(["data", "curate", str(ds), "--out", str(tmp_path / "cur")]) == 2
    err = capsys.readouterr().err
    assert "a video file of the input cannot be read" in err
    assert "restore the file from a copy of the dataset (it holds episode(s) 0, 1)" in err
    assert "--drop-episodes 0)" not in err
    assert not (tmp_path / "cur").exists()


# ------------------------------------------------------------------ lerobot-rollout --inference.type=rtc
@pytest.mark.timeout(150)
def test_lerobot_rtc_of_a_policy_without_a_prefix_is_refused_in_actlabs_words(tmp_path, export):
    """TRACEBACK before (rr08, rr09, cx05): `lerobot-rollout --inference.type=rtc` of an actlab_act export
    (the correction head's too) ended in LeRobot's ValueError traceback "RTC inference is not supported by
    policy type 'actlab_act'". LeRobot asks the policy's supports_rtc() only for that engine: the plugin
    now refuses there, naming --inference.type and actlab's own real-time execution. Run in the lerobot
    venv on this checkout's source, through the function LeRobot's rollout calls."""
    from procs import lerobot_policy_call

    code = (
        "import sys\n"
        "from lerobot.rollout.inference.rtc import supports_rtc_inference\n"
        "from lerobot_policy_actlab.modeling_actlab import ActlabActPolicy\n"
        "supports_rtc_inference(ActlabActPolicy.from_pretrained(sys.argv[1]))\n"
    )
    rc, err = lerobot_policy_call(code, export, tmp_path)
    assert rc != 0, err[-2000:]
    assert "actlab_act does not run under LeRobot's RTC engine" in err and "--policy.execution=async" in err
    assert "Traceback" not in err.split("[end of libtorchcodec loading traceback]")[-1]
