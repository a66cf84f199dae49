import pytest

from actlab.errors import ActlabError
from actlab.utils.io import atomic_dir, atomic_write_json, read_json, require_file


def test_atomic_dir_leaves_nothing_on_error(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(RuntimeError), atomic_dir(target) as tmp:
        (tmp / "partial.txt").write_text("x")
        raise RuntimeError("boom")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_atomic_dir_refuses_existing_without_overwrite(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(ActlabError, match="already exists"), atomic_dir(tmp_path / "out"):
        pass
    with atomic_dir(tmp_path / "out", overwrite=True) as tmp:
        (tmp / "a").write_text("1")
    assert (tmp_path / "out" / "a").read_text() == "1"


def test_json_round_trip_and_errors(tmp_path):
    atomic_write_json(tmp_path / "a.json", {"x": [1, 2]})
    assert read_json(tmp_path / "a.json") == {"x": [1, 2]}
    (tmp_path / "bad.json").write_text("{oops")
    with pytest.raises(ActlabError, match="line 1"):
        read_json(tmp_path / "bad.json")


def test_outputs_get_umask_permissions(tmp_path):
    import os

    mask = os.umask(0o022)
    try:
        atomic_write_json(tmp_path / "p.json", {})
        with atomic_dir(tmp_path / "d"):
            pass
    finally:
        os.umask(mask)
    assert (tmp_path / "p.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o755


def test_a_required_file_is_named_with_what_belongs_there_and_the_fix(tmp_path):
    (tmp_path / "ok.bin").write_bytes(b"x")
    assert require_file(tmp_path / "ok.bin", "unused", expected="x", fix="y") == tmp_path / "ok.bin"
    with pytest.raises(ActlabError) as e:
        require_file(tmp_path / "gone.bin", "weights missing", expected="a safetensors file", fix="re-save")
    err = e.value
    assert (err.problem, err.found, err.expected, err.fix) == (
        "weights missing",
        "missing",
        "a safetensors file",
        "re-save",
    )
    assert str(tmp_path / "gone.bin") in str(err.file)
    (tmp_path / "adir").mkdir()  # a directory where the file belongs
    with pytest.raises(ActlabError) as e:
        require_file(tmp_path / "adir", "weights missing", expected="a file", fix="-")
    assert e.value.found == "a directory"


def test_an_oserror_whose_filename_is_read_only_is_still_named_and_keeps_its_errno(tmp_path):
    """PyAV's av.error.OSError makes ``filename`` read-only: a full disk while muxing a video inside an
    atomic directory was an AttributeError traceback (seen in a `sim record` onto a full disk), not "the
    disk is full"."""
    import errno

    import av

    from actlab.utils.io import atomic_dir

    out = tmp_path / "ds"
    with pytest.raises(OSError) as e, atomic_dir(out, overwrite=False, kind="test") as tmp:
        raise av.error.OSError(errno.ENOSPC, "No space left on device", str(tmp / "videos" / "file-000.mp4"))
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(out / "videos" / "file-000.mp4")
    assert isinstance(e.value.__cause__, av.error.OSError)  # the original is chained
    assert list(tmp_path.iterdir()) == []  # the temporary directory went with it


def test_a_file_write_killed_mid_way_leaves_a_temporary_file_the_next_write_removes(tmp_path):
    """A SIGKILL between atomic_file's temporary file and its rename cannot clean up: the file was
    mkstemp's ``.NAME.XXXXXXXX.tmp``, named no owner, and stayed beside the output for good. It is now
    ``.NAME.actlab-HOST-PID-RANDOM.tmp`` and the next write of NAME removes a dead process's; a live
    writer's and files of any other shape stay."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from actlab.utils.procs import host_tag

    target = tmp_path / "summary.json"
    code = (
        "import sys, time\n"
        "from actlab.utils.io import atomic_file\n"
        "with atomic_file(sys.argv[1], 'w') as f:\n"
        "    f.write('{\"half\": '); f.flush(); print('open', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "open"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".summary.json.actlab-") and left[0].endswith(".tmp"), left
    live = tmp_path / f".summary.json.actlab-{host_tag()}-{os.getpid()}-00000000.tmp"  # this process: live
    foreign = tmp_path / ".summary.json.k3j2h1g0.tmp"  # not our shape: never ours to remove
    other_host = tmp_path / ".summary.json.actlab-00000000-999999999-aa.tmp"
    for p in (live, foreign, other_host):
        p.write_text("x")
    time.sleep(0.01)
    atomic_write_json(target, {"ok": True})
    assert read_json(target) == {"ok": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["summary.json", live.name, foreign.name, other_host.name]
    )
