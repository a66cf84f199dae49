"""Captured inference: the decision on every device (CPU), and on a GPU the captured chunks themselves."""

import pytest
import torch

from actlab.policies import make_policy
from actlab.policies.configs import ACTConfig, ACTRelativeConfig
from actlab.policies.inference import _signature, chunk_latency_ms, plan_inference_graphs
from actlab.policies.info import synthetic_features, unit_stats


@pytest.mark.parametrize(
    ("mode", "device", "on", "says"),
    [("auto", "cuda", True, False), ("auto", "cpu", False, False), (True, "cuda", True, False),
     (True, "cpu", False, True), (False, "cuda", False, False)],
)  # fmt: skip
def test_the_inference_graph_decision(mode, device, on, says):
    enabled, why = plan_inference_graphs(mode, device)
    assert enabled is on and (why is not None) is says


def _policy(cfg, device="cpu"):
    features = synthetic_features(6, 6, ("top",), (32, 32))
    torch.manual_seed(0)
    return make_policy(cfg, features, unit_stats(cfg, features), pretrained=False).to(device).eval()


def _obs(batch=1, device="cpu"):
    g = torch.Generator().manual_seed(1)
    obs = {
        "observation.state": torch.randn(batch, 6, generator=g),
        "observation.images.top": torch.randint(0, 256, (batch, 3, 32, 32), generator=g, dtype=torch.uint8),
    }
    return {k: v.to(device) for k, v in obs.items()}


_SMALL = dict(vision_backbone="cnn_small", dim_model=32, n_heads=2, dim_feedforward=64, n_encoder_layers=1,
              n_decoder_layers=1, chunk_size=8, n_action_steps=4, latent_dim=8,
              n_vae_encoder_layers=1)  # fmt: skip


def test_on_cpu_inference_stays_eager_and_unchanged():
    policy = _policy(ACTConfig(**_SMALL))
    eager = policy.predict_action_chunk(_obs())
    assert policy.use_cuda_graphs("auto") is None and policy._graphed_inference is None
    assert "CUDA device" in policy.use_cuda_graphs(True)
    assert torch.equal(policy.predict_action_chunk(_obs()), eager)
    latency = chunk_latency_ms(policy, _obs(), iters=2, warmup=1)
    assert latency["eager_ms"] > 0 and latency["captured_ms"] is None


def test_signature_separates_shapes_and_prefix_lengths():
    a, b = _obs(1), _obs(2)
    assert _signature(a, None) != _signature(b, None)
    assert _signature(a, torch.zeros(1, 2, 6)) != _signature(a, torch.zeros(1, 3, 6))
    assert _signature({**a, "task": "pick"}, None) is None  # not a tensor: eager


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("relative", [False, True], ids=["act", "act_relative_rtc"])
def test_captured_chunks_match_eager_ones(relative):
    cfg = (
        ACTRelativeConfig(**_SMALL, rtc_max_delay=3, obs_state_delta_frames=2)
        if relative
        else ACTConfig(**_SMALL)
    )
    policy = _policy(cfg, "cuda")
    obs = _obs(1, "cuda")
    prefixes = [None, torch.randn(1, 2, 6, device="cuda")] if relative else [None]
    eager = [policy.predict_action_chunk(obs, prefix=p) for p in prefixes]
    assert policy.use_cuda_graphs("auto") is None
    for p, e in zip(prefixes, eager):
        for _ in range(2):  # capture, then replay
            torch.testing.assert_close(policy.predict_action_chunk(obs, prefix=p), e, rtol=1e-4, atol=1e-4)
    assert len(policy._graphed_inference.graphs) == len(prefixes)
    # weights loaded in place are used by the replay; moved weights force a new capture
    with torch.no_grad():
        for q in policy.parameters():
            q.mul_(0.5)
    policy.use_cuda_graphs(False)
    halved = policy.predict_action_chunk(obs)
    policy.use_cuda_graphs("auto")
    policy.predict_action_chunk(obs)
    with torch.no_grad():
        for q in policy.parameters():
            q.mul_(2.0)
    torch.testing.assert_close(policy.predict_action_chunk(obs), eager[0], rtol=1e-4, atol=1e-4)
    assert not torch.allclose(halved, eager[0])
    policy.to("cpu").to("cuda")  # new tensors: the old graphs must not be replayed
    torch.testing.assert_close(policy.predict_action_chunk(obs), eager[0], rtol=1e-4, atol=1e-4)
    latency = chunk_latency_ms(policy, obs, iters=5)
    assert latency["captured_ms"] > 0
