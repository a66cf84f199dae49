"""DeviceData: the device-side gather equals LeRobot-semantics get_item, on every placement path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actlab.datasets import DeviceData, EpisodeSampler, FrameStore, open_dataset
from actlab.errors import ActlabError

DELTAS = {
    "observation.state": [-3, 0],
    "action": list(range(6)),
    "observation.images.top": [0],
}


@pytest.fixture(scope="module")
def data(tiny_dataset, tmp_path_factory):
    ds = open_dataset(tiny_dataset)
    store = FrameStore.build(ds, cache_dir=tmp_path_factory.mktemp("fs"), progress=False)
    return ds, store


@pytest.mark.parametrize("on_device", [True, False])
def test_gather_matches_get_item(data, on_device):
    ds, store = data
    dd = DeviceData(ds, store, DELTAS, device="cpu", frames_on_device=on_device)
    idx = np.array([0, 1, 39, 40, 41, 79, 117, 119, 60])  # both borders of every episode
    batch = dd.gather(torch.as_tensor(idx))
    assert batch["observation.images.top"].shape == (9, 3, 32, 32)
    assert batch["observation.images.top"].dtype == torch.uint8
    assert batch["action"].shape == (9, 6, 6) and batch["action_is_pad"].shape == (9, 6)
    assert "observation.images.top_is_pad" not in batch
    for b, i in enumerate(idx):
        item = ds.get_item(int(i), DELTAS)
        assert np.array_equal(batch["action"][b].numpy(), item["action"])
        assert np.array_equal(batch["action_is_pad"][b].numpy(), item["action_is_pad"])
        assert np.array_equal(batch["observation.state"][b].numpy(), item["observation.state"])
        assert np.array_equal(batch["observation.state_is_pad"][b].numpy(), item["observation.state_is_pad"])
        assert np.array_equal(batch["observation.images.top"][b].numpy(), item["observation.images.top"])


def test_windowed_images_are_fetched_only_at_requested_offsets(data):
    ds, store = data
    dd = DeviceData(ds, store, {"observation.images.top": [-1, 0], "action": [0, 1]}, frames_on_device=False)
    batch = dd.gather(np.array([40, 50]))
    assert batch["observation.images.top"].shape == (2, 2, 3, 32, 32)
    assert batch["observation.images.top_is_pad"].tolist() == [[True, False], [False, False]]
    assert torch.equal(
        batch["observation.images.top"][1, 0],
        torch.from_numpy(np.array(store.frames["observation.images.top"][49])),
    )


@pytest.mark.parametrize("on_device", [False, True], ids=["prefetch", "on_device"])
def test_prefetching_batches_resume_exactly(data, on_device):
    ds, store = data
    starts = [e.start for e in ds.episodes]
    stops = [e.stop for e in ds.episodes]
    dd = DeviceData(ds, store, DELTAS, frames_on_device=on_device)
    sampler = EpisodeSampler(starts, stops, seed=0)
    seen = []
    for k, (batch, sampler_state) in enumerate(dd.batches(sampler, 8, steps=10, prefetch=3)):
        seen.append(batch["index"].clone())
        if k == 4:
            state = dict(sampler_state)
    # The sampler ran ahead (prefetch), but the state yielded with batch 4 is the state after batch 4.
    resumed = EpisodeSampler(starts, stops, seed=0)
    resumed.load_state_dict(state)
    again = [dd.gather(resumed.next_batch(8))["index"] for _ in range(5)]
    assert all(torch.equal(a, b) for a, b in zip(again, seen[5:]))
    plain = EpisodeSampler(starts, stops, seed=0)
    direct = [dd.gather(plain.next_batch(8)) for _ in range(10)]
    assert all(torch.equal(a, b["index"]) for a, b in zip(seen, direct))


def test_feature_override_replaces_a_camera(data):
    ds, _ = data
    feats = torch.arange(len(ds) * 4, dtype=torch.float32).reshape(len(ds), 4)  # (N, F)
    dd = DeviceData(
        ds,
        None,
        {"observation.images.top": [0], "action": [0]},
        feature_override={"observation.images.top": feats},
    )
    batch = dd.gather(torch.tensor([3, 7]))
    assert torch.equal(batch["observation.images.top"], feats[[3, 7]])
    with pytest.raises(ActlabError, match="one row per dataset frame"):
        DeviceData(
            ds, None, {"observation.images.top": [0]}, feature_override={"observation.images.top": feats[:5]}
        )


def test_missing_store_and_unknown_key_are_clear_errors(data):
    ds, _ = data
    with pytest.raises(ActlabError, match="not in the frame store"):
        DeviceData(ds, None, {"observation.images.top": [0]})
    with pytest.raises(ActlabError, match="did you mean"):
        DeviceData(ds, None, {"actions": [0]})


@pytest.mark.gpu
def test_gather_on_cuda_matches_cpu(data):
    ds, store = data
    cpu = DeviceData(ds, store, DELTAS, device="cpu").gather(torch.arange(0, 120, 7))
    for placement in (True, False):
        gpu = DeviceData(ds, store, DELTAS, device="cuda", frames_on_device=placement)
        out = gpu.gather(torch.arange(0, 120, 7, device="cuda"))
        assert all(torch.equal(out[k].cpu(), cpu[k]) for k in cpu)


@pytest.mark.parametrize("on_device", [True, False])
def test_every_frame_and_key_matches_get_item(data, on_device):
    """All frames, windows reaching past both borders for every kind of key (images, vectors, scalars)."""
    ds, store = data
    deltas = {
        "observation.images.top": [-2, 0, 3],
        "observation.state": [-5, -1, 0],
        "action": list(range(-1, 45)),  # longer than an episode: padded at both ends
        "timestamp": [-1, 0, 1],
        "frame_index": [0],
    }
    dd = DeviceData(ds, store, deltas, device="cpu", frames_on_device=on_device)
    idx = np.arange(len(ds))
    batch = dd.gather(torch.as_tensor(idx))
    assert torch.equal(batch["index"], torch.as_tensor(idx))
    for i in idx:
        item = ds.get_item(int(i), deltas)
        for key in (*deltas, *(f"{k}_is_pad" for k, v in deltas.items() if v != [0])):
            got = batch[key][i].numpy()
            assert got.shape == item[key].shape and np.array_equal(got, item[key]), (int(i), key)
    pad = batch["action_is_pad"]
    lengths = (~pad).sum(1)  # (B,) real rows: frames left in the episode, +1 for offset -1 inside it
    assert pad[0, 0] and not pad[1, 0] and lengths[39] == 2 and lengths[40] == 40
