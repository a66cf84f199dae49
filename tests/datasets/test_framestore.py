"""FrameStore: decode once, equal to the video decode, resize/pad, reuse, rebuild on change, atomic."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

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


_RACE_SCRIPT = """
import json, os, sys, time
from pathlib import Path
from actlab.datasets import FrameStore, open_dataset

root, cache, flags, me, other = sys.argv[1:6]

def flag(name, who):
    return Path(flags) / f"{name}-{who}"

def wait_for(name, who):  # no deadline: the test's timeout bounds it
    while not flag(name, who).exists():
        time.sleep(0.01)

fill = FrameStore._fill

def slow_fill(*args, **kwargs):
    # Both builders decode at the same time when nothing serializes them: announce, then wait a little
    # for the other one to start decoding too. It never does when the builds are serialized, so this
    # wait has a bound; both called build() at the same moment, so 2 s is ample when they are not.
    flag("decoding", me).touch()
    deadline = time.monotonic() + 2.0
    while not flag("decoding", other).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return fill(*args, **kwargs)

FrameStore._fill = staticmethod(slow_fill)
ds = open_dataset(root)
flag("ready", me).touch()
wait_for("ready", other)  # both start building together, however long each took to start
store = FrameStore.build(ds, cache_dir=cache)
inode = os.stat(store.root / "store.json").st_ino
flag("built", me).touch()
wait_for("built", other)  # still using the store when the other process finishes building
arr = store.frames["observation.images.top"]
print(json.dumps({"root": str(store.root), "inode": inode,
                  "sum": int(arr[:].sum()), "exists": store.root.is_dir()}))
"""


@pytest.mark.parametrize("start", ["empty", "damaged"])
def test_concurrent_builders_never_delete_a_finished_store(tiny_dataset, tmp_path, start):
    import json
    import sys

    from procs import finish, started

    cache, flags = tmp_path / "cache", tmp_path / "flags"
    flags.mkdir()
    if start == "damaged":  # both processes find it damaged; one rebuilds, the other opens the result
        old = FrameStore.build(open_dataset(tiny_dataset), cache_dir=cache, progress=False)
        (old.root / "cam0.npy").write_bytes(b"")
    cmds = [
        [sys.executable, "-c", _RACE_SCRIPT, tiny_dataset, cache, flags, me, other]
        for me, other in ("ab", "ba")
    ]
    with started(cmds[0]) as a, started(cmds[1]) as b:
        outs = [finish(a, timeout=240), finish(b, timeout=240)]
    procs = [a, b]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    res = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert res[0]["root"] == res[1]["root"] and res[0]["exists"] and res[1]["exists"]
    # One decode; the second process waited and opened the first one's store (same files, not replaced).
    assert res[0]["inode"] == res[1]["inode"] == os.stat(Path(res[0]["root"]) / "store.json").st_ino
    assert sum(err.count("FrameStore: decoding") for _, err in outs) == 1
    assert res[0]["sum"] == res[1]["sum"]
    assert [p.name for p in cache.iterdir()] == [Path(res[0]["root"]).name]  # no temp or lock files


def test_rebuild_replaces_the_store_in_place(tiny_dataset, tmp_path):
    ds = open_dataset(tiny_dataset)
    first = FrameStore.build(ds, cache_dir=tmp_path, progress=False)
    before = os.stat(first.root / "store.json").st_ino
    again = FrameStore.build(ds, cache_dir=tmp_path, progress=False, rebuild=True)
    assert again.root == first.root and os.stat(again.root / "store.json").st_ino != before
    key = "observation.images.top"
    assert np.array_equal(first.frames[key], again.frames[key])  # the old mapping still reads
    assert [p.name for p in tmp_path.iterdir()] == [first.root.name]  # nothing moved aside is left


# ---- integrity: cheap checks at every open, checksums at build / verify / after a file changed ------

TOP = "observation.images.top"


def _damage(store_root, frames, keep_mtime=False):
    """Zero frames of the camera file in place (its size unchanged), optionally restoring its mtime."""
    file = store_root / "cam0.npy"
    st = os.stat(file)
    arr = np.load(file, mmap_mode="r+")
    arr[frames] = 0
    arr.flush()
    del arr
    if keep_mtime:  # silent corruption: nothing in the file's stat says it changed
        os.utime(file, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_empty_frame_file_is_refused_by_open_and_rebuilt_by_build(tiny_dataset, tmp_path, capsys):
    ds = open_dataset(tiny_dataset)
    store = FrameStore.build(ds, cache_dir=tmp_path, progress=False)
    good = np.array(store.frames[TOP])
    (store.root / "cam0.npy").write_bytes(b"")  # used to be an EOFError traceback until --rebuild
    with pytest.raises(ActlabError, match="wrong size") as e:
        FrameStore.open(store.root)
    # the command names the store's --cache-dir: without it the rebuild went to the default place (24th)
    assert (
        e.value.found == "0 bytes"
        and f"actlab data cache {ds.root} --cache-dir {tmp_path} --rebuild" in e.value.fix
    )
    again = FrameStore.build(ds, cache_dir=tmp_path, progress=False)
    assert "rebuilding" in capsys.readouterr().err
    assert np.array_equal(again.frames[TOP], good)


def test_frames_zeroed_in_place_are_found_at_the_next_open_and_rebuilt(make_dataset, tmp_path, capsys):
    ds = open_dataset(make_dataset(tmp_path, episodes=4, length=100))
    store = FrameStore.build(ds, cache_dir=tmp_path / "c", progress=False)
    good = np.array(store.frames[TOP])
    _damage(store.root, slice(50, 350))  # 300 frames zeroed; the file's size is unchanged
    with pytest.raises(ActlabError, match="changed since the store was built") as e:
        FrameStore.open(store.root)
    assert e.value.file.endswith("cam0.npy") and TOP in e.value.field and "--rebuild" in e.value.fix
    again = FrameStore.build(ds, cache_dir=tmp_path / "c", progress=False)
    assert "rebuilding" in capsys.readouterr().err
    assert np.array_equal(again.frames[TOP], good)
    assert FrameStore.open(again.root).frames[TOP].shape == (400, 3, 32, 32)  # intact: opens


def test_silent_corruption_is_caught_by_the_sampled_check_at_open(tiny_dataset, tmp_path, monkeypatch):
    from actlab.datasets import framestore

    monkeypatch.setattr(framestore, "CHUNK_BYTES", 10 * 3 * 32 * 32)  # 10 frames a chunk: 12 chunks
    store = FrameStore.build(open_dataset(tiny_dataset), cache_dir=tmp_path, progress=False)
    assert len(store.meta["keys"][TOP]["checksums"]) == 12
    assert not FrameStore.open(store.root).fully_verified  # an intact, unchanged store: sampled only
    _damage(store.root, slice(5, None, 10), keep_mtime=True)  # one frame in every chunk, stat unchanged
    with pytest.raises(
        ActlabError, match=f"{framestore.SAMPLE_CHUNKS} of {framestore.SAMPLE_CHUNKS} checked"
    ):
        FrameStore.open(store.root)


def test_verify_finds_one_damaged_chunk_and_the_next_open_refuses_it(
    tiny_dataset, tmp_path, monkeypatch, capsys
):
    from actlab.cli import main
    from actlab.datasets import framestore

    monkeypatch.setattr(framestore, "CHUNK_BYTES", 10 * 3 * 32 * 32)
    cache = tmp_path / "cache"
    args = ["data", "cache", str(tiny_dataset), "--cache-dir", str(cache)]
    assert main([*args, "--verify"]) == 2  # nothing built yet
    assert "no frame store of this dataset" in capsys.readouterr().err
    assert main(args) == 0
    assert main([*args, "--verify"]) == 0
    assert " ok " in capsys.readouterr().out
    (root,) = [p for p in cache.iterdir() if p.is_dir()]
    _damage(root, slice(42, 43), keep_mtime=True)  # one frame, stat unchanged: only a full check sees it
    assert main([*args, "--verify"]) == 2
    err = capsys.readouterr().err
    assert "frames 40..49" in err and "--rebuild" in err
    with pytest.raises(ActlabError, match="changed since"):  # verify failed: the next open checks it all
        FrameStore.open(root)
    assert main([*args, "--rebuild"]) == 0
    assert main([*args, "--verify"]) == 0


def test_a_store_of_the_same_fingerprint_elsewhere_is_reused_not_decoded_again(
    make_dataset, tmp_path, capsys
):
    # `actlab bench data runs/demo/data` decoded a second 1.8 GB store into the user cache although the
    # demo's identical one was in runs/demo/cache.
    ds = open_dataset(make_dataset(tmp_path / "demo" / "data", episodes=1, length=6))
    demo = FrameStore.build(ds, image_size=16, cache_dir=tmp_path / "demo" / "cache", progress=False)
    default = FrameStore.path_for(ds, 16)
    again = FrameStore.build(ds, image_size=16)  # the default location: none there yet
    assert again.root == demo.root and not default.exists()
    assert f"FrameStore: reusing {demo.root}" in capsys.readouterr().err
    # Remembered wherever it was built (not only beside the dataset), and an explicit location is honoured.
    other = open_dataset(make_dataset(tmp_path / "other", episodes=1, length=6))
    elsewhere = FrameStore.build(other, cache_dir=tmp_path / "fast_disk", progress=False)
    assert FrameStore.build(other, progress=False).root == elsewhere.root
    mine = FrameStore.build(other, cache_dir=tmp_path / "mine", progress=False)
    assert mine.root.parent == tmp_path / "mine" and mine.root != elsewhere.root


def test_a_reused_store_lends_its_recorded_hashes_to_later_records(tiny_dataset, tmp_path, monkeypatch):
    """A training's checkpoints record the videos they read; on a reused store whose files are unchanged
    (same inode and ctime), that record takes the store's sha256 and reads no video again."""
    from actlab.datasets import checksums, sources

    ds = open_dataset(tiny_dataset)
    store = FrameStore.build(ds, cache_dir=tmp_path, progress=False)
    keys = list(ds.video_keys)
    sources._HASHED.clear()  # another process: nothing hashed yet
    read = []
    monkeypatch.setattr(checksums, "sha256", lambda p: read.append(p) or "x" * 64)
    assert sources.sources_changed(ds, store.meta["sources"]) is None
    record = sources.source_record(ds, keys)
    assert read == []
    assert {rel: e["sha256"] for rel, e in record.items()} == {
        rel: e["sha256"] for rel, e in store.meta["sources"].items() if rel in record
    }
    # a file whose ctime changed (touched, even with its bytes kept) is read again
    video = ds.root / next(iter(record))
    os.utime(video, ns=(video.stat().st_atime_ns, video.stat().st_mtime_ns))
    sources.source_record(ds, keys)
    assert read == [video]
