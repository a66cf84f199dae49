"""The policies on a real LeRobot v3 dataset: stats from compute_stats, batches from DeviceData."""

import pytest
import torch

from actlab.datasets import DeviceData, FrameStore, compute_stats, open_dataset
from actlab.policies import load_policy, make_policy, save_policy
from conftest import tiny_act, tiny_relative


@pytest.mark.parametrize(
    "cfg",
    [tiny_act(dropout=0.1), tiny_relative(dropout=0.1, obs_state_delta_frames=2, rtc_max_delay=3)],
    ids=["act", "act_relative"],
)
def test_train_save_load_on_a_dataset(tiny_dataset, tmp_path, cfg):
    ds = open_dataset(tiny_dataset)
    stats = compute_stats(ds, **cfg.stats_request())
    torch.manual_seed(0)
    policy = make_policy(cfg, ds.features, stats)
    data = DeviceData(ds, FrameStore.build(ds), policy.delta_indices, "cpu")
    idx = torch.tensor([0, 1, 20, 39, 40, 79, 100, 119])  # episode starts and ends: padded windows
    batch = data.gather(idx)
    assert batch["action_is_pad"].any()
    opt = torch.optim.AdamW(policy.param_groups(3e-3, 3e-3, 1e-4))
    policy.train()
    first = None
    for _ in range(30):
        loss, metrics = policy(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = metrics["l1_loss"] if first is None else first
    assert metrics["l1_loss"] < 0.7 * first  # it fits the batch
    policy.eval()
    obs = {
        "observation.state": batch["observation.state"],
        "observation.images.top": batch["observation.images.top"],
    }
    ref = policy.predict_action_chunk(obs)
    loaded = load_policy(save_policy(policy, tmp_path / "bundle"), "cpu")
    assert torch.equal(loaded.predict_action_chunk(obs), ref)
    loaded.reset()
    single = {
        k: v[:1] if v.ndim == 4 or k != "observation.state" or v.ndim == 2 else v[:1, -1]
        for k, v in obs.items()
    }
    assert loaded.select_action(single).shape == (1, 6)
