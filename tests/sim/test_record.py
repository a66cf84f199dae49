import time

import numpy as np
import pytest

from actlab.errors import ActlabError
from actlab.sim import ExpertPolicy, make_env
from actlab.sim.record import RecordConfig, record_dataset, run_expert_episode


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim") / "demo"
    cfg = RecordConfig(episodes=2, seed=10, image_size=32, workers=0)
    summary = record_dataset(out, cfg, progress=False)
    return out, cfg, summary


def test_recorded_dataset_loads_through_the_dataset_layer(recorded):
    from actlab.datasets import open_dataset

    out, _, summary = recorded
    ds = open_dataset(out)
    assert ds.fps == 30 and len(ds.episodes) == 2 and len(ds) == summary.frames
    assert sorted(ds.camera_keys) == ["observation.images.top", "observation.images.wrist"]
    assert ds.features["observation.state"]["names"][0] == "shoulder_pan.pos"
    assert ds.features["observation.images.top"]["shape"] == [32, 32, 3]
    assert summary.episodes == 2 and summary.successes == summary.attempts == 2
    item = ds.get_item(0, deltas={"action": list(range(10))})
    assert item["observation.images.top"].shape == (3, 32, 32)
    assert item["action"].shape == (10, 6) and not item["action_is_pad"].any()


def test_recorded_values_are_the_expert_episode(recorded):
    """State, action and both cameras in the files are what the env produced, camera keys not swapped."""
    from actlab.datasets import open_dataset

    out, cfg, _ = recorded
    ds = open_dataset(out)
    env = make_env(image_size=32, terminate_on_success=False)
    try:
        ep = run_expert_episode(env, ExpertPolicy(env), cfg.seed)
    finally:
        env.close()
    first = ds.episodes[0]
    assert first.length == ep["length"]
    rows = slice(first.start, first.stop)
    np.testing.assert_array_equal(ds.column("observation.state")[rows], ep["frames"]["observation.state"])
    np.testing.assert_array_equal(ds.column("action")[rows], ep["frames"]["action"])
    picks = np.array([0, first.length // 2, first.length - 1])
    for cam in ("top", "wrist"):
        key = f"observation.images.{cam}"
        decoded = ds.read_frames(key, first.start + picks).astype(float)
        raw = ep["frames"][key][picks].astype(float)
        other = ep["frames"][f"observation.images.{'wrist' if cam == 'top' else 'top'}"][picks].astype(float)
        err = np.abs(decoded - raw).mean()
        assert err < 12, (cam, err)  # AV1 at crf 30 on 32 px frames: lossy but close
        assert err < np.abs(decoded - other).mean()


def test_recorded_dataset_passes_doctor(recorded):
    from actlab.datasets.doctor import diagnose

    out, _, _ = recorded
    errors = [p for p in diagnose(out) if p.severity == "error"]
    assert not errors, [p.render() for p in errors]


def test_failed_expert_leaves_nothing_behind(tmp_path):
    # 40 steps are too few for the expert: every attempt fails, so the recording must fail cleanly.
    cfg = RecordConfig(episodes=1, image_size=16, workers=0, env_overrides={"max_steps": 40})
    with pytest.raises(ActlabError, match="failed too often"):
        record_dataset(tmp_path / "never", cfg, progress=False)
    assert not (tmp_path / "never").exists()
    kept = record_dataset(
        tmp_path / "kept", RecordConfig(**{**cfg.__dict__, "keep_failures": True}), progress=False
    )
    assert kept.episodes == 1 and kept.successes == 0 and kept.failed_seeds == (0,)


def test_record_config_validation():
    with pytest.raises(ActlabError, match="even"):
        RecordConfig(image_size=33)
    with pytest.raises(ActlabError):
        RecordConfig(episodes=0)


def test_workers_give_the_same_dataset_as_one_process(tmp_path, recorded):
    from actlab.datasets import open_dataset

    out, cfg, _ = recorded
    parallel = record_dataset(
        tmp_path / "par", RecordConfig(**{**cfg.__dict__, "workers": 2}), progress=False
    )
    a, b = open_dataset(out), open_dataset(parallel.path)
    np.testing.assert_array_equal(a.column("action"), b.column("action"))
    np.testing.assert_array_equal(a.column("episode_index"), b.column("episode_index"))


def test_noisy_expert_recording_is_the_same_for_any_number_of_workers(tmp_path):
    """The expert's noise is drawn per episode seed, not per worker's episode count: with two workers the
    episodes land on different processes, and the dataset must still be the one a single process writes."""
    from actlab.datasets import open_dataset

    # (one camera: the noise is in the actions and states compared, not in the frames)
    cfg = RecordConfig(episodes=3, seed=20, image_size=16, workers=0, expert_noise=1.0, cameras=("top",))
    one = record_dataset(tmp_path / "one", cfg, progress=False)
    two = record_dataset(tmp_path / "two", RecordConfig(**{**cfg.__dict__, "workers": 2}), progress=False)
    a, b = open_dataset(one.path), open_dataset(two.path)
    assert len(a) == len(b)
    np.testing.assert_array_equal(a.column("action"), b.column("action"))
    np.testing.assert_array_equal(a.column("observation.state"), b.column("observation.state"))


def _wait_dead(proc) -> None:
    """Dead, but not reaped: reaping is the pool's job (a psutil wait() would hide the death from it)."""
    import psutil

    try:
        while proc.status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.01)
    except psutil.NoSuchProcess:
        pass


def _pool_workers() -> list:
    """Spawned pool workers of this process by what they run (spawn_main), never the resource tracker; a
    process whose command line cannot be read at this moment (under load) is skipped, not guessed at."""
    import psutil

    found = []
    for p in psutil.Process().children():
        try:
            if "spawn_main" in " ".join(p.cmdline()):
                found.append(p)
        except psutil.Error:
            pass
    return found


def test_a_dead_worker_fails_the_recording_instead_of_hanging(tmp_path):
    # A dead worker used to leave multiprocessing.Pool waiting forever for its episode. The worker is
    # killed for real (SIGKILL, what the kernel's OOM killer does); the recording runs in this process,
    # which the kill does not touch (pytest-timeout bounds a hang).
    killed = []

    def kill_one_worker(episode) -> None:
        if not killed and (kids := _pool_workers()):  # (else at the next episode)
            kids[-1].kill()
            _wait_dead(kids[-1])
            killed.append(kids[-1].pid)

    out = tmp_path / "ds"
    cfg = RecordConfig(episodes=8, image_size=16, workers=2)
    with pytest.raises(ActlabError) as e:
        record_dataset(out, cfg, progress=False, on_episode=kill_one_worker)
    assert killed and "worker process died" in e.value.problem
    assert not out.exists()  # nothing partial written


def test_workers_that_cannot_start_fail_the_recording_instead_of_hanging(tmp_path):
    import os

    from procs import run_python

    # Every worker's initializer would fail (here: an invalid MUJOCO_GL, as a broken EGL would): a Pool used
    # to respawn them forever, and the pool then said "a worker process died". The rendering is now checked
    # in this process before any worker starts (actlab.sim.gl.check_rendering): an ActlabError naming the
    # cause, and nothing written. (A worker that dies: test_a_dead_worker_fails_the_recording_... above.)
    code = (
        "import sys\nfrom actlab.errors import ActlabError\n"
        "from actlab.sim.record import RecordConfig, record_dataset\n"
        "try:\n"
        "    cfg = RecordConfig(episodes=2, image_size=16, workers=2)\n"
        "    record_dataset(sys.argv[1], cfg, progress=False)\n"
        "except ActlabError as e:\n"
        "    print(e, file=sys.stderr)\n"
        "    sys.exit(3)\n"
    )
    env = {**os.environ, "MUJOCO_GL": "not-a-backend"}
    run = run_python(code, str(tmp_path / "ds"), env=env, timeout=240)
    assert run.returncode == 3, run.stderr[-2000:]
    assert "MUJOCO_GL 'not-a-backend'" in run.stderr  # the cause, from this process
    assert not (tmp_path / "ds").exists()


# ------------------------------------------------------------------------------------------ full disk
def test_a_recording_that_cannot_fit_is_refused_before_anything_is_simulated(small_fs):
    from actlab.sim.record import estimate_bytes

    disk = small_fs(1 << 20)
    cfg = RecordConfig(episodes=200, image_size=128, workers=0)
    assert estimate_bytes(cfg) > 40 << 20  # 200 x ~163 frames x 2 cameras of ~1 KB each
    with pytest.raises(ActlabError, match="not enough disk space for this recording") as e:
        record_dataset(disk / "big", cfg, progress=False)
    assert e.value.file == str(disk / "big") and "200 episodes" in e.value.expected
    assert "free space" in e.value.fix and "--episodes" in e.value.fix and "--out" in e.value.fix
    assert list(disk.iterdir()) == []


@pytest.mark.timeout(400)
def test_a_full_disk_while_recording_exits_2_leaves_nothing_and_can_be_run_again(small_fs, capsys):
    from actlab.cli import main
    from actlab.datasets import open_dataset
    from actlab.sim.record import estimate_bytes
    from actlab.utils.units import human_bytes

    # AV1 chosen (the estimate's codec): "auto" writes h264 on a busy CPU, whose files are another size.
    # One camera: half the frames to render and encode (its files came to 1.03x the estimate, two cameras'
    # to 1.15x, for 3 episodes).
    args = ["--image-size", "32", "--workers", "0", "--codec", "av1", "--cameras", "top"]
    need = estimate_bytes(RecordConfig(episodes=12, image_size=32, workers=0, cameras=("top",)))
    # Room for 70% of the estimate: the preflight lets it start (it refuses below half), the disk fills.
    disk = small_fs(int(0.7 * need))
    out = disk / "demo"
    # The command runs in this process (nothing here is killed: no interpreter start of its own).
    record = ["sim", "record", "--out", str(out), *args]
    assert main([*record, "--episodes", "12"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    full = "error: the disk is full: the dataset was not written (nothing of it is left on disk)"
    assert full in err, err[-3000:]
    assert f"file:     {out}\n" in err and "No space left on device after" in err
    assert "free now" in err and f"about {human_bytes(need)} needed" in err and "--out" in err
    assert list(disk.iterdir()) == []
    # Nothing in the way: the same --out records what fits.
    assert main([*record, "--episodes", "2"]) == 0, capsys.readouterr().err[-3000:]
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # An --overwrite that does not fit keeps the dataset it would have replaced.
    assert main([*record, "--episodes", "12", "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "disk" in err, err[-3000:]
    assert sorted(p.name for p in disk.iterdir()) == ["demo"]
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert len(open_dataset(out).episodes) == 2


def test_a_stalled_encoder_is_recorded_again_and_gives_the_same_dataset(
    recorded, tmp_path, monkeypatch, capsys
):
    import threading

    from actlab.datasets import open_dataset
    from actlab.datasets import video as video_mod
    from actlab.sim import record as record_mod

    clean, cfg, _ = recorded  # the same settings recorded without a stall (AV1)

    # The first encoder of the second recording blocks inside its per-frame call (as the SVT-AV1 deadlock
    # does) until the test ends; the watchdog (0.5 s here) turns that into EncoderStalled.
    release, taken = threading.Event(), threading.Event()
    real = video_mod.VideoEncoder.encode

    def encode(self, frames):
        if tmp_path in self.path.parents and ".retried." in str(self.path) and not taken.is_set():
            taken.set()
            release.wait()
        return real(self, frames)

    monkeypatch.setattr(video_mod.VideoEncoder, "encode", encode)
    monkeypatch.setattr(record_mod, "RECORD_STALL_S", 0.5)  # the recorder's watchdog: 0.5 s, not 30
    try:
        again = record_dataset(tmp_path / "retried", cfg, progress=False)
    finally:
        release.set()
    assert taken.is_set()
    # the user is told (with the recorder's watchdog period), and it was recorded again, in h264 (the
    # encoder that has never stalled)
    err = capsys.readouterr().err
    assert "made no progress for 0.5 s" in err and "recording again from the start with libx264" in err
    a, b = open_dataset(clean), open_dataset(again.path)
    assert a.features["observation.images.top"]["info"]["video.codec"] == "av1"
    assert b.features["observation.images.top"]["info"]["video.codec"] == "h264"
    np.testing.assert_array_equal(a.column("action"), b.column("action"))
    np.testing.assert_array_equal(a.column("observation.state"), b.column("observation.state"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["retried"]  # no temp dir left


def test_a_busy_cpu_records_h264_and_says_why(tmp_path, monkeypatch, capsys):
    from actlab.datasets import open_dataset
    from actlab.datasets import video as video_mod

    monkeypatch.setattr(video_mod, "load_1m", lambda: 64.0)  # the wiring is under test, not the machine
    ds = record_dataset(tmp_path / "ds", RecordConfig(episodes=1, image_size=16, workers=0), progress=False)
    assert open_dataset(ds.path).features["observation.images.top"]["info"]["video.codec"] == "h264"
    err = capsys.readouterr().err
    assert "the CPUs are busy (load average 64.0 on" in err and "the videos are h264 instead of AV1" in err


def test_a_chosen_codec_is_kept_whatever_the_load(tmp_path, monkeypatch, capsys):
    from actlab.datasets import open_dataset
    from actlab.datasets import video as video_mod

    monkeypatch.setattr(video_mod, "load_1m", lambda: 64.0)  # busy: "auto" would write h264
    cfg = RecordConfig(episodes=1, image_size=16, workers=0, codec="av1")
    ds = record_dataset(tmp_path / "ds", cfg, progress=False)
    assert open_dataset(ds.path).features["observation.images.top"]["info"]["video.codec"] == "av1"
    assert "h264 instead" not in capsys.readouterr().err
    with pytest.raises(ActlabError, match="unknown video codec"):
        RecordConfig(codec="vp9")


def test_a_second_stall_is_the_error(tmp_path, monkeypatch):
    import threading

    from actlab.datasets import video as video_mod
    from actlab.sim import record as record_mod

    release = threading.Event()
    real = video_mod.VideoEncoder.encode

    def encode(self, frames):
        if tmp_path in self.path.parents:
            release.wait()  # every encoder of this test stalls
        return real(self, frames)

    monkeypatch.setattr(video_mod.VideoEncoder, "encode", encode)
    monkeypatch.setattr(record_mod, "RECORD_STALL_S", 0.5)  # the recorder's watchdog: 0.5 s, not 30
    try:
        with pytest.raises(video_mod.EncoderStalled, match="no progress for 0.5 s"):
            record_dataset(
                tmp_path / "ds", RecordConfig(episodes=1, image_size=16, workers=0), progress=False
            )
    finally:
        release.set()
    assert list(tmp_path.iterdir()) == []


def test_auto_writes_av1_only_with_a_pyav_bundling_svt_av1_4():
    from actlab.datasets.video import AV1_MIN_AV, auto_video_options, av_version

    assert auto_video_options((15, 1, 0)).codec == "libx264"  # lerobot 0.6.1's av (SVT-AV1 3.0)
    assert auto_video_options((16, 1, 0)).codec == "libx264"  # SVT-AV1 3.1.2: hangs measured
    assert auto_video_options((17, 0, 0)).codec == "libsvtav1"
    assert auto_video_options((19, 0, 2)).codec == "libsvtav1"
    assert auto_video_options((19, 0, 2), busy=True).codec == "libx264"  # SVT-AV1 4.x stalled under load
    for version in ((15, 1, 0), (19, 0, 2)):
        assert auto_video_options(version, stall_s=30.0).stall_s == 30.0  # the watchdog either way
    assert av_version() >= AV1_MIN_AV  # actlab's own test environment resolves to the newest av


def test_a_recording_with_the_h264_fallback_reads_back_frame_for_frame(tmp_path, monkeypatch, capsys):
    """What `actlab sim record` writes in LeRobot's environment (av < 17): h264 holding the env's frames
    (within compression error, the right frame of the right camera), and a note saying why on stderr."""
    import json

    from actlab.datasets import open_dataset
    from actlab.datasets import video as video_mod

    monkeypatch.setattr(video_mod, "av_version", lambda: (15, 1, 0))
    cfg = RecordConfig(episodes=1, seed=10, image_size=32, workers=0)
    record_dataset(tmp_path / "h264", cfg, progress=False)
    assert "the videos are h264 instead of AV1" in capsys.readouterr().err
    info = json.loads((tmp_path / "h264" / "meta" / "info.json").read_text())
    assert info["features"]["observation.images.top"]["info"]["video.codec"] == "h264"
    ds = open_dataset(tmp_path / "h264")
    env = make_env(image_size=32, terminate_on_success=False)
    try:
        ep = run_expert_episode(env, ExpertPolicy(env), cfg.seed)
    finally:
        env.close()
    assert len(ds) == ep["length"]
    picks = np.array([0, 1, len(ds) // 2, len(ds) - 1])
    for cam, other in (("top", "wrist"), ("wrist", "top")):
        decoded = ds.read_frames(f"observation.images.{cam}", picks).astype(float)
        raw = ep["frames"][f"observation.images.{cam}"][picks].astype(float)
        err = np.abs(decoded - raw).mean()
        assert err < 12, (cam, err)  # h264 at crf 30 on 32 px frames, as close as AV1 (test above)
        assert err < np.abs(decoded - ep["frames"][f"observation.images.{other}"][picks]).mean()
