"""The encoder watchdog: an encoder that stops making progress is an ActlabError naming its file, never a
hang, and the dataset being written is left as it was before.

The SVT-AV1 deadlock itself cannot be provoked on demand, so the fault is planted: the encoder blocks on
an event inside its per-frame call, as a deadlocked ``svt_av1_enc_send_picture`` blocks. The event is set
at the end so the planted thread finishes.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from actlab.datasets import DatasetWriter, VideoOptions, make_features, open_dataset
from actlab.datasets import video as video_mod
from actlab.datasets.synth import synth_episode
from actlab.errors import ActlabError

CAMS = {"top": (32, 32), "wrist": (24, 40)}


def _episodes(n, seed=0):
    rng = np.random.default_rng(seed)
    return [synth_episode(rng, 12, 5, 5, CAMS, 30) for _ in range(n)]


class _Stall:
    """Once armed, the next frame encoded for the wrist camera blocks until the test ends."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()


@pytest.fixture
def stall_once(monkeypatch, tmp_path):
    stall = _Stall()
    real = video_mod.VideoEncoder.encode

    def encode(self, frames):
        # Only this test's encoders: the thread that the previous test abandoned in its stall is released
        # at that test's end and encodes its remaining frames through this patch too. Were it allowed to,
        # it would take this stall and leave this test's encoder running freely ("DID NOT RAISE" for
        # threaded=False after threaded=True, now and then: a flaky failure seen before this check).
        mine = tmp_path in self.path.parents
        if mine and "wrist" in str(self.path) and stall.armed.is_set() and not stall.entered.is_set():
            stall.entered.set()
            # Stuck inside the encoder, as the SVT-AV1 deadlock is, until the test has ended: the error can
            # only come from the watchdog (were it missing, the test would hit its timeout).
            stall.release.wait()
        return real(self, frames)

    monkeypatch.setattr(video_mod.VideoEncoder, "encode", encode)
    yield stall
    stall.release.set()


@pytest.mark.parametrize("threaded", [True, False])
def test_stalled_encoder_is_an_error_naming_the_file_and_leaves_no_dataset(tmp_path, stall_once, threaded):
    video = VideoOptions(stall_s=0.5, threaded=threaded)
    stall_once.armed.set()
    with (
        pytest.raises(ActlabError, match="no progress for 0.5 s") as e,
        DatasetWriter(tmp_path / "ds", 30, make_features(5, 5, CAMS), video=video) as w,
    ):
        for ep in _episodes(3):
            w.add_episode(ep, task="x")
    assert stall_once.entered.is_set()
    assert "observation.images.wrist" in str(e.value.file) and str(e.value.file).endswith(".mp4")
    assert "run the command again" in e.value.fix
    assert not stall_once.release.is_set()  # raised while the encoder was still blocked: the watchdog's doing
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no dataset, no temp directory


def test_a_stall_while_replacing_keeps_the_old_dataset_and_a_rerun_succeeds(tmp_path, stall_once):
    root = tmp_path / "ds"
    feats = make_features(5, 5, CAMS)
    with DatasetWriter(root, 30, feats) as w:
        w.add_episode(_episodes(1, seed=5)[0], task="old")
    assert open_dataset(root).tasks == ["old"]
    stall_once.armed.set()
    with (
        pytest.raises(ActlabError, match="no progress"),
        DatasetWriter(root, 30, feats, video=VideoOptions(stall_s=0.5), overwrite=True) as w,
    ):
        for ep in _episodes(2):
            w.add_episode(ep, task="new")
    assert stall_once.entered.is_set()
    assert open_dataset(root).tasks == ["old"]  # left as it was before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]
    with DatasetWriter(root, 30, feats, video=VideoOptions(stall_s=0.5), overwrite=True) as w:
        for ep in _episodes(2):
            w.add_episode(ep, task="new")  # the re-run: the stall was a one-off, as the deadlock is
    assert open_dataset(root).tasks == ["new"] and len(open_dataset(root)) == 24


@pytest.mark.timeout(60)
def test_an_abort_stuck_in_the_encoder_is_abandoned_too(tmp_path, stall_once, monkeypatch):
    # As seen in a real SVT-AV1 deadlock (two cameras, gdb: every SVT thread waiting on a semaphore): the
    # wrist encoder blocks in its per-frame call, the watchdog fires, and the writer aborts both cameras;
    # the top camera's abort drains its encoder, which blocks too. That drain was not watched, so the
    # abort (and the recording) waited forever. Now the error arrives within about two stall periods.
    real_abort = video_mod.VideoEncoder.abort
    drain = threading.Event()

    def abort(self):
        if tmp_path in self.path.parents and "top" in str(self.path):
            drain.set()
            stall_once.release.wait()  # stuck in the drain until the test ends
        return real_abort(self)

    stalled_encode = video_mod.VideoEncoder.encode  # the fixture's (the wrist camera's stall)

    def encode(self, frames):
        if tmp_path in self.path.parents and "top" in str(self.path):
            time.sleep(0.05)  # the top camera runs behind, so it is inside an episode when the abort comes
        return stalled_encode(self, frames)

    monkeypatch.setattr(video_mod.VideoEncoder, "encode", encode)
    monkeypatch.setattr(video_mod.VideoEncoder, "abort", abort)
    stall_once.armed.set()
    with (
        pytest.raises(ActlabError, match="no progress for 0.5 s") as e,
        DatasetWriter(tmp_path / "ds", 30, make_features(5, 5, CAMS), video=VideoOptions(stall_s=0.5)) as w,
    ):
        # more episodes than the wrist queue holds (4): the recorder waits on the stalled wrist encoder,
        # and the watchdog's error comes while the top camera is still encoding
        for ep in _episodes(8):
            w.add_episode(ep, task="x")
    assert stall_once.entered.is_set() and drain.is_set()  # both encoders were stuck
    assert "observation.images.wrist" in str(e.value.file)
    assert not stall_once.release.is_set()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no dataset, no temp directory


@pytest.mark.parametrize("threaded", [True, False])
def test_watchdog_does_not_fire_on_slow_progress(tmp_path, monkeypatch, threaded):
    # Progress is per frame: an episode that takes longer than stall_s in total is not a stall. The
    # watchdog's clock advances 1 s per frame encoded and stands still otherwise, so the episode takes
    # 25 "seconds" with a beat every second, whatever the machine's load. One camera: a second camera's
    # encoder thread would move the shared clock while the first one waits for the CPU.
    clock = {"t": 0.0}
    real = video_mod.VideoEncoder.encode

    def slow(self, frames):
        # Only this test's encoders: a thread abandoned by a stall test above may still be finishing.
        if tmp_path in self.path.parents:
            clock["t"] += 1.0
        return real(self, frames)

    monkeypatch.setattr(video_mod.VideoEncoder, "encode", slow)
    monkeypatch.setattr(video_mod.EncoderThread, "_clock", staticmethod(lambda: clock["t"]))
    rng = np.random.default_rng(0)
    video = VideoOptions(stall_s=1.5, threaded=threaded)
    cams = {"top": CAMS["top"]}
    with DatasetWriter(tmp_path / "ds", 30, make_features(5, 5, cams), video=video) as w:
        w.add_episode(synth_episode(rng, 25, 5, 5, cams, 30), task="x")  # 25 x 1 s > stall_s
    assert clock["t"] == 25  # one beat per frame
    assert len(open_dataset(tmp_path / "ds")) == 25


def test_stall_seconds_must_be_positive():
    with pytest.raises(ActlabError, match="stall_s"):
        VideoOptions(stall_s=0)


def _write_synth(tmp_path, out, codec):
    from actlab.datasets.synth import synth_dataset

    synth_dataset(out, episodes=2, length=12, cameras=CAMS, video=codec)


def _write_convert(tmp_path, out, codec):
    from actlab.datasets.npy_import import convert_npy

    src = tmp_path / "npy"
    if not src.exists():
        rng = np.random.default_rng(0)
        src.mkdir()
        np.save(
            src / "observations.npy",
            {
                "image_wrist": rng.integers(0, 255, (20, 16, 24, 3), np.uint8),
                "state": rng.normal(size=(20, 4)).astype(np.float32),
            },
            allow_pickle=True,
        )
        np.save(src / "actions.npy", rng.normal(size=(20, 4)).astype(np.float32))
        np.save(src / "rollout_length.npy", np.array([12, 8]))
    convert_npy(src, out, video=codec)


def _write_curate(tmp_path, out, codec):
    from actlab.datasets.curate import CurateSpec, curate
    from actlab.datasets.synth import synth_dataset

    src = tmp_path / "source"
    if not src.exists():
        synth_dataset(src, episodes=3, length=12, cameras=CAMS, video=VideoOptions(codec="libx264"))
    curate(src, out, CurateSpec(drop=(1,), video_samples=0), video=codec)


@pytest.mark.parametrize("write", [_write_synth, _write_convert, _write_curate], ids=lambda f: f.__name__)
def test_every_writing_command_writes_once_more_after_a_stall(
    tmp_path, stall_once, monkeypatch, capsys, write
):
    """data synth, convert and curate (sim record: tests/sim/test_record.py) run their whole atomic write
    again after a stalled encoder, in h264 for "auto", and give the dataset a clean run gives."""
    monkeypatch.setattr(video_mod, "STALL_S", 0.5)  # the watchdog: 0.5 s, not 120
    monkeypatch.setattr(video_mod, "load_1m", lambda: 0.0)  # a quiet machine: "auto" starts with AV1
    write(tmp_path, tmp_path / "clean", "h264")
    stall_once.armed.set()
    write(tmp_path, tmp_path / "retried", "auto")
    assert stall_once.entered.is_set()
    err = capsys.readouterr().err
    assert "made no progress for 0.5 s" in err and "again from the start with libx264 (attempt 2 of 2)" in err
    clean, again = open_dataset(tmp_path / "clean"), open_dataset(tmp_path / "retried")
    cams = [k for k, f in again.features.items() if f.get("dtype") == "video"]
    assert cams and {again.features[k]["info"]["video.codec"] for k in cams} == {"h264"}
    assert len(clean) == len(again)
    np.testing.assert_array_equal(clean.column("action"), again.column("action"))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary directory left


def test_the_cli_codec_choices_are_the_video_modules():
    import argparse

    from actlab.cli import add_codec_flag

    p = argparse.ArgumentParser()
    add_codec_flag(p)
    assert tuple(p._option_string_actions["--codec"].choices) == video_mod.CODEC_CHOICES
