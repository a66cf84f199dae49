"""GPU paths of the trainer (run with ``pytest -m gpu`` on a CUDA machine; skipped elsewhere)."""

import dataclasses

import pytest
import torch

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


def test_cuda_graph_step_matches_the_eager_step(tiny_dataset):
    # dropout 0 and no VAE sampling noise: both runs compute the same function of the same batches
    common = ["policy.dropout=0.0", "policy.use_vae=false", "amp=off", "augment.shift_pad=0"]
    eager, graphed = _run(tiny_dataset, *common), _run(tiny_dataset, *common, "cuda_graphs=true")
    try:
        a, b = _losses(eager), _losses(graphed)
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)  # capture did not train; replays did
        for (n, p), q in zip(eager.policy.named_parameters(), graphed.policy.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=n)
    finally:
        eager.close()
        graphed.close()
