"""Packets that the encoder returns out of frame order are muxed in order (SVT-AV1 under contention
returned one 2-frame GOP early now and then; the muxer refused it with "returned 22")."""

from __future__ import annotations

import numpy as np
import pytest

from actlab.datasets import DatasetWriter, VideoOptions, make_features, open_dataset
from actlab.datasets import video as video_mod
from actlab.datasets.video import VideoEncoder, iter_decode
from actlab.errors import ActlabError


def _frames(n: int, size: int = 32) -> np.ndarray:
    """Frame i is a flat grey of level 8 * i: which frame a decoded picture is, is plain to see."""
    return np.stack([np.full((size, size, 3), 8 * i, np.uint8) for i in range(n)])


class _EarlyPacket:
    """Wraps an encoder stream: the packet of frame ``early`` is returned before ``before``'s (as SVT-AV1
    did: ... 15, 16, 42, 18 ...), every other packet as the encoder returns it."""

    def __init__(self, stream, early: int, before: int) -> None:
        self.stream, self.early, self.before, self.parked = stream, early, before, []

    def encode(self, frame=None):
        out = []
        for p in self.stream.encode(frame):
            if p.pts in range(self.before, self.early):
                self.parked.append(p)  # held back until frame `early` has been returned
            else:
                out.append(p)
                if p.pts == self.early:
                    out += self.parked
                    self.parked = []
        return out

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _decoded_levels(path) -> list[int]:
    return [round(float(img.mean()) / 8) for _, img in iter_decode(path)]


def test_an_early_packet_is_muxed_after_the_frames_before_it(tmp_path):
    path = tmp_path / "v.mp4"
    enc = VideoEncoder(path, 32, 32, 30, VideoOptions())  # LeRobot's AV1 settings (g=2)
    enc._stream = _EarlyPacket(enc._stream, early=8, before=5)
    frames = _frames(12)
    enc.encode(frames)
    enc.close()
    assert enc.reordered == 1  # frame 8's packet came while frame 5's was next
    assert _decoded_levels(path) == list(range(12))  # every frame, in order
    ts = [t for t, _ in iter_decode(path)]
    assert np.allclose(ts, np.arange(12) / 30)


def test_a_frame_the_encoder_never_returns_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "v.mp4"
    enc = VideoEncoder(path, 32, 32, 30, VideoOptions())
    enc._stream = _EarlyPacket(enc._stream, early=99, before=5)  # frames 5.. are never handed out
    enc.encode(_frames(8))
    with pytest.raises(ActlabError, match="no packet for a frame") as e:
        enc.close()
    assert str(e.value.file) == str(path) and "frame 5" in e.value.found


def test_the_writer_counts_reordered_packets(tmp_path, monkeypatch):
    real_init = VideoEncoder.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self._stream = _EarlyPacket(self._stream, early=6, before=3)

    monkeypatch.setattr(video_mod.VideoEncoder, "__init__", init)
    feats = make_features(2, 2, {"top": (32, 32)})
    rng = np.random.default_rng(0)
    ep = {
        "observation.state": rng.normal(size=(10, 2)).astype(np.float32),
        "action": rng.normal(size=(10, 2)).astype(np.float32),
        "observation.images.top": _frames(10),
    }
    with DatasetWriter(tmp_path / "ds", 30, feats) as w:
        w.add_episode(ep, task="x")
    assert w.reordered_packets == 1
    ds = open_dataset(tmp_path / "ds")
    got = ds.read_frames("observation.images.top", list(range(10)))
    assert [round(float(g.mean()) / 8) for g in got] == list(range(10))
