"""A frozen ViT with cached features, camera fusion and K frames of context, through build_run on real
data: cached features equal a direct transformers forward, and the sampler fetches only the frames used."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from actlab.datasets import DeviceData, FrameStore, open_dataset
from actlab.datasets.sampler import window_indices
from actlab.policies import ACTConfig
from actlab.training import apply_train_overrides, get_preset, with_dataset
from actlab.training.build import build_run
from tiny_vit import TINY_VIT


@pytest.fixture(scope="module")
def two_camera_dataset(tmp_path_factory, make_dataset):
    """2 episodes x 12 frames, top + wrist at 32 px (real AV1 video)."""
    return make_dataset(
        tmp_path_factory.mktemp("two-cams"),
        episodes=2,
        length=12,
        cameras={"top": (32, 32), "wrist": (32, 32)},
    )


def _cfg(dataset, *overrides):
    cfg = apply_train_overrides(
        with_dataset(get_preset("tiny"), dataset), ["augment.shift_pad=0", *overrides]
    )
    return dataclasses.replace(cfg, num_threads=0, batch_size=4)


def test_frozen_vit_cached_features_equal_a_direct_forward_and_train_with_context(two_camera_dataset):
    pytest.importorskip("transformers", reason="pip install -e '.[vit]'")
    cfg = _cfg(
        two_camera_dataset,
        "policy.vision_backbone=clip_vit",
        "policy.pretrained_backbone_weights=null",
        f"policy.vit_config={json.dumps(TINY_VIT)}",
        "policy.n_obs_steps=3",
        "policy.camera_fusion=gated",
        # the preset's config already resolved freeze_backbone (false for its cnn_small): say it again
        "policy.freeze_backbone=true",
    )
    run = build_run(cfg)
    try:
        batch = run.next_batch()
        model = run.policy.backbone.model  # transformers' CLIPVisionModel
        idx = batch["index"].numpy()
        ds = run.dataset
        rows, pad = window_indices(idx, [-2, -1, 0], ds.frame_episode_start[idx], ds.frame_episode_stop[idx])
        # CLIP image-processor normalization (transformers.image_utils OPENAI_CLIP_MEAN / _STD)
        mean = torch.tensor([0.48145466, 0.4578275, 0.40821073]).view(1, 3, 1, 1)
        std = torch.tensor([0.26862954, 0.26130258, 0.27577711]).view(1, 3, 1, 1)
        for key in run.image_keys:
            assert key not in batch  # the images are never gathered: their features are
            cached = batch[key + ".features"]  # (B, 3, C', h, w)
            assert tuple(cached.shape) == (4, 3, 32, 4, 4)
            assert torch.equal(batch[key + ".features_is_pad"], torch.from_numpy(pad))
            pixels = torch.from_numpy(run.store.frames[key][rows.reshape(-1)]).float() / 255
            with torch.no_grad():
                hidden = model(pixel_values=(pixels - mean) / std).last_hidden_state[:, 1:]  # CLS dropped
            direct = hidden.transpose(1, 2).reshape(4, 3, 32, 4, 4)
            torch.testing.assert_close(cached, direct, rtol=1e-5, atol=1e-6)
        frozen = {
            n: p.detach().clone() for n, p in run.policy.named_parameters() if n.startswith("backbone.")
        }
        for _ in range(3):
            metrics = run.step(run.next_batch())
            assert torch.isfinite(metrics["loss"])
        assert all(torch.equal(p, frozen[n]) for n, p in run.policy.named_parameters() if n in frozen)
    finally:
        run.close()


def test_context_sampler_fetches_only_the_frames_used(two_camera_dataset):
    ds = open_dataset(two_camera_dataset)
    store = FrameStore.build(ds, progress=False)
    cfg = ACTConfig(n_obs_steps=3, chunk_size=4, n_action_steps=4)
    deltas = cfg.delta_indices(ds.camera_keys)
    assert deltas == {
        "observation.state": [-2, -1, 0],
        "observation.images.top": [-2, -1, 0],
        "observation.images.wrist": [-2, -1, 0],
        "action": [0, 1, 2, 3],
    }
    data = DeviceData(ds, store, deltas, "cpu", frames_on_device=False)  # read from the memmap per batch
    ep1 = ds.episodes[1].start
    idx = np.array([0, 1, 5, ep1, ep1 + 2])
    batch = data.gather(idx)
    assert set(batch) == {"index", *deltas, *(k + "_is_pad" for k in deltas)}  # nothing else fetched
    state = ds.column("observation.state")
    # clamped to the episode's first frame at its start, as LeRobot pads; marked in *_is_pad
    expect_rows = np.array([[0, 0, 0], [0, 0, 1], [3, 4, 5], [ep1, ep1, ep1], [ep1, ep1 + 1, ep1 + 2]])
    expect_pad = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 0], [1, 1, 0], [0, 0, 0]], dtype=bool)
    assert np.array_equal(batch["observation.state"].numpy(), state[expect_rows])
    assert np.array_equal(batch["observation.state_is_pad"].numpy(), expect_pad)
    for key in ds.camera_keys:
        assert tuple(batch[key].shape) == (5, 3, 3, 32, 32)  # 3 frames per sample, no more
        assert np.array_equal(batch[key].numpy(), np.asarray(store.frames[key])[expect_rows])
        assert np.array_equal(batch[key + "_is_pad"].numpy(), expect_pad)
