"""Training opens its dataset through the doctor's cheap checks, and trains at any image size."""

import shutil

import numpy as np
import pyarrow.parquet as pq
import torch

from actlab.cli import main

DATA = "data/chunk-000/file-000.parquet"


def test_rows_out_of_order_are_refused_before_training(tiny_dataset, tmp_path, capsys):
    # Rows of episode 1 reversed: actions would be paired with the wrong frames' windows.
    ds = shutil.copytree(tiny_dataset, tmp_path / "ds")
    table = pq.read_table(ds / DATA)
    order = np.arange(table.num_rows)
    order[40:80] = order[40:80][::-1]
    pq.write_table(table.take(order), ds / DATA)
    out = tmp_path / "run"
    args = ["train", "--preset", "tiny", "--dataset", str(ds), "--out", str(out), "--set", "steps=2"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"dataset {ds.resolve()} fails the check `frame_index`" in err
    assert "episode 1" in err and f"actlab data doctor {ds.resolve()}" in err
    assert not (out / "checkpoints").exists()


def test_tiny_trains_on_a_larger_non_square_dataset_and_evaluation_resizes_the_same_way(
    make_dataset, tmp_path
):
    import json

    from actlab.datasets import FrameStore, open_dataset
    from actlab.evaluation.policy_io import ObsAdapter, bundle_inputs
    from actlab.policies import load_policy

    # tiny resizes to 32 px; the camera records 48x64 (the policy used to be built for 48x64 and failed
    # at the first step with "The size of tensor a (18) must match the size of tensor b (66)")
    ds_path = make_dataset(tmp_path, episodes=2, length=20, cameras={"top": (48, 64)})
    out = tmp_path / "run"
    args = ["train", "--preset", "tiny", "--dataset", str(ds_path), "--out", str(out), "--set", "steps=2"]
    assert main(args) == 0
    bundle = out / "checkpoints" / json.loads((out / "checkpoints/last.json").read_text())["path"]
    top = json.loads((bundle / "features.json").read_text())["observation.images.top"]
    assert top["shape"] == [32, 32, 3]
    assert top["info"]["actlab.resize"] == {"mode": "fit_pad", "from_shape": [48, 64, 3], "image_size": 32}
    policy = load_policy(bundle)
    assert policy.image_shapes["observation.images.top"] == (3, 32, 32)

    # evaluation resizes a native 48x64 observation as the FrameStore resized the training frames:
    # 24x32 content between black bars of 4 rows (not stretched to 32x32)
    ds = open_dataset(ds_path)
    stored = FrameStore.build(ds, image_size=32, progress=False).frames["observation.images.top"][5]
    native = ds.read_frames("observation.images.top", [5])[0]  # (48, 64, 3)
    adapter = ObsAdapter(bundle_inputs(bundle))
    seen = adapter([{"observation.images.top": native, "observation.state": np.zeros(6)}])
    img = seen["observation.images.top"][0]  # (3, 32, 32) uint8
    assert img.shape == (3, 32, 32)
    assert img[:, :4].max() == 0 and img[:, 28:].max() == 0 and stored[:, :4].max() == 0
    diff = (img[:, 4:28].float() - torch.from_numpy(np.array(stored[:, 4:28])).float()).abs().mean()
    assert diff < 6, diff  # the same picture (bilinear here, swscale's area filter in the store)
    with torch.no_grad():
        assert policy.select_action(seen).shape == (1, 6)


def test_so101_sim_cpu_trains_on_a_32px_recording(make_dataset, tmp_path):
    import dataclasses

    from actlab.training import apply_train_overrides, get_preset, with_dataset
    from actlab.training.build import build_run

    # so101_sim_cpu stores frames at 80 px; this recording is 32 px, with the preset's two cameras
    cams = {"top": (32, 32), "wrist": (32, 32)}
    ds_path = make_dataset(tmp_path, episodes=2, length=12, cameras=cams)
    cfg = apply_train_overrides(with_dataset(get_preset("so101_sim_cpu"), ds_path), ["batch_size=4"])
    run = build_run(dataclasses.replace(cfg, num_threads=0))
    try:
        batch = run.next_batch()
        for key in ("observation.images.top", "observation.images.wrist"):
            assert tuple(batch[key].shape) == (4, 3, 80, 80)
            assert run.policy.features[key]["shape"] == [80, 80, 3]
        metrics = run.step(batch)
        assert torch.isfinite(metrics["loss"])
    finally:
        run.close()


def test_a_damaged_frame_store_is_rebuilt_not_trained_on(tiny_dataset, tmp_path, capsys, monkeypatch):
    from actlab.datasets import FrameStore, open_dataset

    monkeypatch.setenv("ACTLAB_CACHE", str(tmp_path / "cache"))  # no other test's stores of this dataset
    ds = open_dataset(tiny_dataset)
    # A good store of the same dataset elsewhere (an explicit cache_dir is remembered): the damaged default
    # store was passed over for it without a word, and stayed damaged (found when another test's store of
    # this session's dataset came first).
    store = FrameStore.build(ds, image_size=32, progress=False)  # the store tiny trains from
    FrameStore.build(ds, image_size=32, progress=False, cache_dir=tmp_path / "elsewhere")
    good = np.array(store.frames["observation.images.top"])
    frames = np.load(store.root / "cam0.npy", mmap_mode="r+")
    frames[:] = 0  # every frame black, the file's size unchanged
    frames.flush()
    del frames
    out = tmp_path / "run"
    assert (
        main(["train", "--preset", "tiny", "--dataset", str(ds.root), "--out", str(out), "--set", "steps=1"])
        == 0
    )
    assert "rebuilding" in capsys.readouterr().err
    again = FrameStore.open(FrameStore.path_for(ds, 32))
    assert np.array_equal(again.frames["observation.images.top"], good)
