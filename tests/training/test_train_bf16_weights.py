"""bf16 working weights: the bf16-autocast step without per-use weight casts computes the same step."""

import dataclasses

import pytest
import torch

from actlab.profiling.kernels import profile_step
from actlab.training import apply_train_overrides, get_preset, with_dataset
from actlab.training.build import build_run

# one torch thread in every test here (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _run(dataset, *overrides):
    cfg = apply_train_overrides(with_dataset(get_preset("tiny"), dataset), ["amp=bf16", *overrides])
    return build_run(dataclasses.replace(cfg, num_threads=0))


@pytest.mark.parametrize(
    "policy",
    [[], ["policy.type=act_relative", "policy.rtc_max_delay=3", "policy.obs_state_delta_frames=2"]],
    ids=["act_vae_dropout", "act_relative_rtc"],
)
def test_working_weights_train_bitwise_like_autocast_with_fewer_casts(tiny_dataset, policy):
    out = {}
    for ww in ("false", "true"):  # one after the other: each build seeds the global dropout/latent RNG
        run = _run(tiny_dataset, *policy, f"bf16_weights={ww}")
        try:
            assert (run.weights is not None) == (ww == "true")
            batches = [run.next_batch() for _ in range(3)]
            losses = torch.stack([run.step(b)["loss"] for b in batches])
            params = {n: p.detach().clone() for n, p in run.policy.named_parameters()}
            assert all(p.dtype == torch.float32 for p in run.policy.parameters())  # the module stays fp32
            prof = profile_step(lambda run=run, b=batches[0]: run.step(b), run.device, 1)
            out[ww] = (losses, params, prof["dtype_casts_per_step"])
        finally:
            run.close()
    assert torch.equal(out["false"][0], out["true"][0])  # same rounding: the same casts, done once
    for n, p in out["false"][1].items():
        assert torch.equal(p, out["true"][1][n]), n
    assert out["true"][2] < out["false"][2] / 2, (out["true"][2], out["false"][2])  # the weight casts gone


def test_working_weights_only_with_bf16_autocast_in_one_process(tiny_dataset):
    run = _run(tiny_dataset, "amp=off")  # the CPU default: nothing changes
    try:
        assert run.weights is None
    finally:
        run.close()
