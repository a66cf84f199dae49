"""Faults of our twentieth planted-fault run (docs/faults.md "Twentieth fault run"), planted for real:
real commands killed with SIGKILL in sessions of their own (the whole process group, as a cgroup or a
terminal job is killed), real worker pools, real files.

Each test names the probes of docs/faults_round20_probes.md it plants again and what happened before its
fix.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import pytest

from actlab.cli import main
from procs import finish, started

SHM = Path("/dev/shm")


def _semaphore_inodes(pid: int) -> set[int]:
    """The inodes of the named semaphores process ``pid`` has open (glibc maps each /dev/shm/sem.* file;
    the mapping shows the name it was made under, so the inode is what ties it to the file now)."""
    found = set()
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/dev/shm/sem."):
            found.add(int(parts[4]))
    return found


def _shm_inodes() -> dict[int, str]:
    out = {}
    for entry in os.scandir(SHM):
        if entry.name.startswith("sem."):
            with contextlib.suppress(OSError):
                out[entry.inode()] = entry.name
    return out


# ------------------------------------------------------------------ semaphores in /dev/shm
@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not SHM.is_dir(), reason="POSIX semaphores in /dev/shm"
)
@pytest.mark.timeout(120)
def test_a_killed_worker_pool_leaves_no_semaphore_in_dev_shm_for_good(tmp_path):
    """LOSS before (sr_kill_*, ev_kill_*, evs_kill, ...: every command with a spawned worker pool): SIGKILL
    to the command's process group (its resource tracker with it) left the pool's named semaphores in
    /dev/shm as sem.mp-XXXXXXXX, 5 a kill, and nothing ever removed them (75 had piled up on this machine).
    Now they are named sem.mp-actlab-HOST-PID-RANDOM and the next worker pool removes those of a dead pid."""
    out = tmp_path / "rec"
    args = ["sim", "record", "--episodes", "40", "--image-size", "16", "--workers", "2", "--out", str(out)]
    with started([sys.executable, "-m", "actlab.cli", *args]) as proc:
        held: set[int] = set()
        end = time.monotonic() + 90
        while time.monotonic() < end and proc.poll() is None:
            held = _semaphore_inodes(proc.pid)
            if len(held) >= 3 and list(tmp_path.glob(".rec.*")):
                break
            time.sleep(0.05)
        assert proc.poll() is None and held, "the recording ended before its pool could be killed"
        time.sleep(0.5)
        held = _semaphore_inodes(proc.pid) or held
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    left = {i: n for i, n in _shm_inodes().items() if i in held}
    assert left, "the kill left no semaphore: nothing to reclaim"
    args = ["sim", "record", "--episodes", "1", "--image-size", "16", "--workers", "1", "--out", str(out)]
    with started([sys.executable, "-m", "actlab.cli", *args]) as proc:
        finish(proc, 90)
    assert proc.returncode == 0
    still = {i: n for i, n in _shm_inodes().items() if i in left}
    assert not still, f"the killed command's semaphores are still in /dev/shm: {sorted(still.values())}"


# ------------------------------------------------------------------ the write probe of every --out
def _dead_pid() -> int:
    """A pid no process has now (a child that has exited and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    return proc.pid


def test_a_write_probe_a_killed_command_left_is_removed_by_the_next_command(tmp_path, capsys):
    """LOSS before (found by reading, beside the sixteen SIGKILL rows: `utils.io.check_writable`, which
    every command's --out runs before its work): the probe file was mkstemp's `.actlab-probe-XXXXXXXX`,
    naming no owner, so a SIGKILL between its making and its removal left it beside the output for good.
    Now it is `.actlab-probe.actlab-HOST-PID-RANDOM.tmp` and the next probe of that directory removes a
    dead process's; a live process's, another host's and an older name are left alone."""
    host = f"{zlib.crc32(socket.gethostname().encode()):08x}"
    dead = tmp_path / f".actlab-probe.actlab-{host}-{_dead_pid()}-00000000.tmp"
    live = tmp_path / f".actlab-probe.actlab-{host}-{os.getpid()}-00000000.tmp"
    other_host = tmp_path / f".actlab-probe.actlab-00000000-{_dead_pid()}-00000000.tmp"
    older = tmp_path / ".actlab-probe-k2j4x9_a"
    for p in (dead, live, other_host, older):
        p.write_bytes(b"")
    out = tmp_path / "samples.csv"
    assert main(["monitor", "--interval", "0.1", "--out", str(out), "--", sys.executable, "-c", "pass"]) == 0
    capsys.readouterr()
    assert out.is_file() and not dead.exists()
    assert live.exists() and other_host.exists() and older.exists()
    assert not [
        p for p in tmp_path.iterdir() if p.name.startswith(".actlab-probe.") and p not in (live, other_host)
    ]


# ------------------------------------------------------------------ multiprocessing's temporary directory
@pytest.fixture
def short_tmp():
    """A directory of a short path (a socket's path in it must fit AF_UNIX's 107 bytes), removed after."""
    path = Path(tempfile.mkdtemp(prefix="f20-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.timeout(150)
def test_a_killed_batch_size_search_leaves_no_directory_in_tmp_for_good(short_tmp):
    """LOSS before (fb_kill2): SIGKILL to `find-batch-size` while its fork server ran left multiprocessing's
    /tmp/pymp-XXXXXXXX (the server's listening socket) for good: mkdtemp's name tells no owner, so no run
    removed it. Now it is pymp-actlab-HOST-PID-RANDOM and the next run removes a dead pid's (where
    $TMPDIR is short enough for that name in a socket's path: pytest's tmp_path is not)."""
    tmp_path = short_tmp
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    ds = tmp_path / "rec"
    rec = ["sim", "record", "--episodes", "2", "--image-size", "16", "--workers", "0", "--out", str(ds)]
    assert main(rec) == 0
    args = ["find-batch-size", "--preset", "tiny", "--dataset", str(ds), "--memory-limit", "2GiB",
            "--steps", "1"]  # fmt: skip
    with started([sys.executable, "-m", "actlab.cli", *args], env=env) as proc:
        end = time.monotonic() + 100
        while not list(tmp_path.glob("pymp-*")) and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, "the search ended before its fork server could be killed"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert list(tmp_path.glob("pymp-*")), "the kill left no directory: nothing to reclaim"
    with started([sys.executable, "-m", "actlab.cli", *args, "--max", "1"], env=env) as proc:
        _, err = finish(proc, 100)
    assert proc.returncode == 0, err[-2000:]
    assert not list(tmp_path.glob("pymp-*"))


# ------------------------------------------------------------------ datasets edited
@pytest.fixture(scope="module")
def rec3(tmp_path_factory) -> Path:
    """A three-episode 16 px sim recording."""
    out = tmp_path_factory.mktemp("rec3") / "rec"
    argv = ["sim", "record", "--episodes", "3", "--image-size", "16", "--workers", "0", "--out", str(out)]
    assert main(argv) == 0
    return out


def _edited_copy(rec: Path, dst: Path, rel: str, edit) -> Path:
    import pyarrow.parquet as pq

    shutil.copytree(rec, dst)
    (dst / "meta" / "actlab_checksums.json").unlink()  # as a dataset another tool wrote or edited
    pq.write_table(edit(pq.read_table(dst / rel)), dst / rel)
    return dst


EPISODES = "meta/episodes/chunk-000/file-000.parquet"
DATA = "data/chunk-000/file-000.parquet"


def test_episode_rows_out_of_order_are_refused(rec3, tmp_path, capsys):
    """SILENT before (ds_doc_x_ep_order, ds_tr_x_ep_order): meta/episodes with its rows in the order 1, 0, 2
    passed `data doctor` with 0 errors and trained, every check sorted the rows first; LeRobot reads row i
    as episode i (dataset_reader.py: meta.episodes[ep_idx]), so it read episode 1's frame range and video
    times for episode 0. Now the doctor and every open refuse it, naming the row and the fix."""
    ds = _edited_copy(rec3, tmp_path / "ds", EPISODES, lambda t: t.take([1, 0, 2]))
    capsys.readouterr()
    assert main(["data", "doctor", str(ds)]) == 1
    out = capsys.readouterr().out
    assert "rows out of episode order (row 0 is episode 1)" in out and "sort_by('episode_index')" in out
    assert main(["data", "info", str(ds)]) == 2
    assert "rows out of episode order" in capsys.readouterr().err
    assert main(["data", "doctor", str(rec3)]) == 0


@pytest.mark.parametrize(
    "probe, edit, words",
    [
        (
            "ds_info_x_cutrows",
            lambda t: t.slice(0, t.num_rows - 20),
            "data files hold a different number of frames",
        ),
        (
            "ds_info_x_noaction",
            lambda t: t.drop_columns(["action"]),
            "feature 'action' missing from the data files",
        ),
        (
            "ds_info_x_extra",
            lambda t: t.append_column("foo", pa_array(t.num_rows)),
            "a column 'foo' that info.json",
        ),
    ],
)
def test_data_info_refuses_data_files_every_other_command_refuses(rec3, tmp_path, capsys, probe, edit, words):
    """SILENT before (ds_info_x_cutrows, x_noaction, x_noindex, x_noframeidx, x_extra ...): `data info`
    summed the dataset up from its metadata alone: "frames 489" of a data file cut to 469 rows, "action
    float32 6" of no such column, exit 0, where the doctor, train and eval refuse the same files. Now it
    checks the data files' footers (columns, row counts; no row is read) as those readers do."""
    ds = _edited_copy(rec3, tmp_path / probe, DATA, edit)
    capsys.readouterr()
    assert main(["data", "info", str(ds)]) == 2
    err = capsys.readouterr().err
    assert words in err and "fix:" in err


def pa_array(n: int):
    import pyarrow as pa

    return pa.array([1.0] * n)


# ------------------------------------------------------------------ --image-size 0
@pytest.mark.parametrize(
    "argv", [["sim", "view", "--out", "X.png"], ["sim", "bench"], ["eval", "BUNDLE", "--out", "X"]]
)
def test_an_image_size_below_the_sims_is_refused_by_its_option(tmp_path, capsys, argv):
    """UNCLEAR before (sv_size0, and eval / sim bench found while fixing it): `--image-size 0` was
    "image_size out of range, field: image_size" (sim view, sim bench) or "image size too small, field:
    image_size, expected >= 8" (eval), a config field, no option, no fix. Now the parser refuses it,
    naming --image-size and the sim's floor, before any work."""
    argv = [a.replace("X", str(tmp_path / "x")).replace("BUNDLE", str(tmp_path)) for a in argv]
    with pytest.raises(SystemExit) as e:
        main([*argv, "--image-size", "0"])
    assert e.value.code == 2
    assert "argument --image-size: expected a number >= 16, found 0" in capsys.readouterr().err


# ------------------------------------------------------------------ a command on another's unfinished output
def test_a_dataset_still_being_written_is_named_as_such(rec3, tmp_path, capsys):
    """UNCLEAR before (cc_train_on_partial): `train --dataset` of the temporary directory a running `sim
    record` writes in (.NAME.actlab-HOST-PID-RANDOM.tmp, before its meta/info.json) was "not a dataset,
    found: the output of actlab sim record, fix: pass the dataset directory itself": it is that
    command's unfinished output. Now found says so, whether its writer still runs, and the directory it
    becomes."""
    host = f"{zlib.crc32(socket.gethostname().encode()):08x}"
    # (a dead writer's: "pid N, which died ... it never becomes DIR" since the 21st fault run)
    for pid, who in ((os.getpid(), " is still writing it"), (_dead_pid(), ", which died")):
        tmp = tmp_path / f".rec.actlab-{host}-{pid}-0a1b2c3d.tmp"
        tmp.mkdir()
        shutil.copy(rec3 / ".actlab-output.json", tmp / ".actlab-output.json")
        capsys.readouterr()
        argv = ["train", "--dataset", str(tmp), "--preset", "tiny", "--out", str(tmp_path / f"run{pid}")]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "the unfinished output of actlab sim record" in err, err
        assert f"pid {pid}{who}" in err and str(tmp_path / "rec") in err


# ------------------------------------------------------------------ policy doctor --stride
def test_policy_doctor_refuses_a_stride_that_leaves_one_frame_per_episode(bundle, rec3, capsys):
    """SILENT before (pdo_stride_huge): `policy doctor --stride 100000` replayed the first frame of each
    episode (n frames 3 and 1) and gave its verdict from them, exit 1 "did_not_learn", without a word.
    Now a stride at or past the longest episode is refused, naming --stride, the episode length and the fix;
    a stride below it still runs."""
    argv = ["policy", "doctor", str(bundle), "--dataset", str(rec3), "--heldout-episodes", "2",
            "--train-episodes", "0-1"]  # fmt: skip
    capsys.readouterr()
    assert main([*argv, "--stride", "100000"]) == 2
    err = capsys.readouterr().err
    assert "--stride leaves one frame of each episode" in err and "pass --stride 1" in err
    assert main([*argv, "--stride", "20"]) in (0, 1)
    assert "verdict" in capsys.readouterr().out


# ------------------------------------------------------------------ rl reward-model's split
def test_reward_model_fractions_that_leave_no_training_episode_are_refused_with_a_fix():
    """UNCLEAR before (rm_frac_sum): `rl reward-model --set val_fraction=0.6 --set test_fraction=0.6` was
    refused with found "(0.6, 0.6)" (a Python tuple), field "val_fraction/test_fraction", no expected and
    no fix. Now both values are named, with their sum, what is expected and the fix."""
    from actlab.errors import ActlabError
    from actlab.rl.reward_model import RewardModelConfig

    with pytest.raises(ActlabError) as e:
        RewardModelConfig(val_fraction=0.6, test_fraction=0.6)
    text = str(e.value)
    assert "val_fraction=0.6, test_fraction=0.6 (sum 1.2)" in text and "(0.6, 0.6)" not in text
    assert "sum below 1" in text and "val_fraction + test_fraction < 1" in text
