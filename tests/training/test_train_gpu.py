"""GPU paths of the trainer (run with ``pytest -m gpu`` on a CUDA machine; skipped elsewhere)."""

import dataclasses

import pytest
import torch
from parity import per_parameter, relative_distance, snapshot, tolerance, train_on

from actlab.training import apply_train_overrides, get_preset, with_dataset
from actlab.training.build import build_run

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _run(dataset, *overrides):
    cfg = apply_train_overrides(with_dataset(get_preset("tiny"), dataset), ["device=cuda", *overrides])
    return build_run(dataclasses.replace(cfg, num_threads=0))


def _losses(run, steps=6):
    out = []
    for _ in range(steps):
        out.append(run.step(run.next_batch())["loss"])
    return torch.stack(out).float().cpu()


def test_device_cuda_without_an_index_trains(tiny_dataset):
    run = _run(tiny_dataset)  # "cuda" is resolved to cuda:0 (set_device needs the index)
    try:
        assert run.device.type == "cuda" and run.device.index is not None
        assert run.graphed is not None  # captured by default on CUDA
        assert torch.isfinite(_losses(run, 3)).all()
    finally:
        run.close()


def test_frames_on_the_gpu_bf16_channels_last(tiny_dataset):
    run = _run(tiny_dataset, "amp=bf16", "channels_last=true")
    try:
        assert run.device_data.frames_on_device  # the tiny store fits: gathered on the GPU
        batch = run.next_batch()
        assert all(v.device.type == "cuda" for v in batch.values())
        losses = _losses(run)
        assert torch.isfinite(losses).all()
    finally:
        run.close()


# dropout 0 and no random latent or RTC prefix: every run computes the same function of the same batches
_DETERMINISTIC = ["policy.dropout=0.0", "policy.use_vae=false", "augment.shift_pad=0"]


@pytest.mark.parametrize("amp", ["off", "bf16"])
@pytest.mark.parametrize(
    "policy",
    [[], ["policy.type=act_relative", "policy.rtc_max_delay=0", "policy.obs_state_delta_frames=2"]],
    ids=["act", "act_relative"],
)
def test_cuda_graph_step_matches_the_eager_step(tiny_dataset, amp, policy):
    """Graph vs eager within a tolerance calibrated by eager vs eager in the same test (see parity.py):
    cuDNN's nondeterministic kernels do not fail it, a real divergence does."""
    common = [*_DETERMINISTIC, *policy, f"amp={amp}"]
    a, b = _run(tiny_dataset, *common, "cuda_graphs=false"), _run(tiny_dataset, *common, "cuda_graphs=false")
    g = _run(tiny_dataset, *common, "cuda_graphs=true")
    try:
        start = snapshot(a.policy)
        assert relative_distance(start, snapshot(g.policy), start) == 0  # same seed: same initial weights
        batches = [a.next_batch() for _ in range(6)]
        loss_a, end_a = train_on(a, batches)
        loss_b, end_b = train_on(b, batches)
        loss_g, end_g = train_on(g, batches)
        assert g.graphed is not None and g.graphed.graph is not None  # really captured
        noise = relative_distance(end_a, end_b, start)
        dist = relative_distance(end_a, end_g, start)
        assert dist <= tolerance(noise), (dist, noise, per_parameter(end_a, end_g, start)[:5])
        loss_noise = float((loss_a - loss_b).abs().max() / loss_a.abs().max())
        loss_dist = float((loss_a - loss_g).abs().max() / loss_a.abs().max())
        assert loss_dist <= tolerance(loss_noise), (loss_a, loss_g, loss_b)
    finally:
        for run in (a, b, g):
            run.close()


def test_rtc_training_is_captured_and_learns(tiny_dataset):
    """act_relative with an RTC prefix drawn on the device every step (no host sync): captured, finite,
    and the loss on a fixed batch falls."""
    run = _run(tiny_dataset, "policy.type=act_relative", "policy.rtc_max_delay=3", "steps=40")
    try:
        batch = run.next_batch()
        losses = torch.stack([run.step(batch)["loss"].float() for _ in range(30)]).cpu()
        assert run.graphed is not None and run.graphed.graph is not None
        assert torch.isfinite(losses).all() and losses[-5:].mean() < losses[:5].mean()
    finally:
        run.close()
