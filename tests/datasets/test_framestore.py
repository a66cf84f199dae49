"""FrameStore: decode once, equal to the video decode, resize/pad, reuse, rebuild on change, atomic."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from actlab.datasets import FrameStore, open_dataset
from actlab.datasets.video import fit_size
from actlab.errors import ActlabError


def test_store_equals_decoded_frames(tiny_dataset, tmp_path):
    ds = open_dataset(tiny_dataset)
    store = FrameStore.build(ds, cache_dir=tmp_path, progress=False)
    key = "observation.images.top"
    frames = store.frames[key]
    assert frames.shape == (len(ds), 3, 32, 32) and frames.dtype == np.uint8
    idx = np.array([0, 39, 40, 119])
    assert np.array_equal(frames[idx], ds.read_frames(key, idx).transpose(0, 3, 1, 2))
    assert store.nbytes == FrameStore.estimate_bytes(ds) == len(ds) * 3 * 32 * 32
    assert frames.std() > 10  # moving shapes, not a constant image


def test_resize_and_square_pad(make_dataset, tmp_path):
    ds = open_dataset(make_dataset(tmp_path, episodes=1, length=6, cameras={"side": (24, 48)}))
    store = FrameStore.build(ds, image_size=16, cache_dir=tmp_path / "c", progress=False)
    frames = store.frames["observation.images.side"]
    assert frames.shape == (6, 3, 16, 16)
    assert FrameStore.estimate_bytes(ds, 16) == store.nbytes
    new_h, new_w, top, left = fit_size(24, 48, 16)
    assert (new_h, new_w, top, left) == (8, 16, 4, 0)
    assert frames[:, :, :top].max() == 0 and frames[:, :, top + new_h :].max() == 0  # black bars
    assert frames[:, :, top : top + new_h].mean() > 20


def test_store_is_reused_and_rebuilt_when_source_changes(make_dataset, tmp_path, capsys):
    src = make_dataset(tmp_path, episodes=2, length=10)
    cache = tmp_path / "cache"
    first = FrameStore.build(open_dataset(src), cache_dir=cache)
    assert "FrameStore: decoding 20 frames" in capsys.readouterr().err  # size estimate printed first
    again = FrameStore.build(open_dataset(src), cache_dir=cache)
    assert again.root == first.root and capsys.readouterr().err == ""  # no second decode
    # Replace the dataset with different content: a new fingerprint, a new store, the stale one removed.
    shutil.rmtree(src)
    make_dataset(tmp_path, episodes=2, length=10, seed=5).rename(src)
    changed = FrameStore.build(open_dataset(src), cache_dir=cache, progress=False)
    assert changed.root != first.root
    assert not first.root.exists()
    assert [p.name for p in cache.iterdir()] == [changed.root.name]


def test_failed_build_leaves_nothing(tiny_dataset, tmp_path):
    copy = shutil.copytree(tiny_dataset, tmp_path / "copy")
    video = next((copy / "videos").rglob("*.mp4"))
    video.write_bytes(video.read_bytes()[: video.stat().st_size // 2])  # truncated file
    cache = tmp_path / "cache"
    with pytest.raises(ActlabError):
        FrameStore.build(open_dataset(copy), cache_dir=cache, progress=False)
    assert list(cache.iterdir()) == []


def test_unknown_camera_is_refused(tiny_dataset, tmp_path):
    with pytest.raises(ActlabError, match="not a camera"):
        FrameStore.build(open_dataset(tiny_dataset), keys=["observation.state"], cache_dir=tmp_path)
