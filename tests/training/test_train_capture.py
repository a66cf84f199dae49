"""CUDA graphs by default: what is chosen, what is said, and the fallback to eager steps (tested on CPU).

The captured step itself runs only on a GPU (tests/training/test_train_gpu.py); here: the decision for
every configuration, the message when a configuration cannot be captured, and that a failed capture
leaves the weights and the optimizer untouched and trains on eagerly.
"""

import dataclasses
import warnings

import pytest
import torch

from actlab.errors import ActlabError
from actlab.training import apply_train_overrides, get_preset, with_dataset
from actlab.training.build import build_run
from actlab.training.capture import CaptureFallbackWarning, plan_cuda_graphs
from actlab.training.step import GraphedStep


@pytest.mark.parametrize(
    ("setting", "device", "ddp", "compile", "enabled", "reason"),
    [
        ("auto", "cuda", False, False, True, None),  # the default on a GPU: captured
        ("auto", "cpu", False, False, False, None),  # the default on a CPU: eager, nothing said
        ("auto", "mps", False, False, False, None),
        ("auto", "cuda", True, False, False, "DDP"),  # said why
        ("auto", "cuda", False, True, False, "compile=true"),
        (True, "cuda", False, False, True, None),
        (False, "cuda", False, False, False, None),  # turned off: nothing said
        (False, "cpu", True, True, False, None),
    ],
)
def test_the_graph_decision(setting, device, ddp, compile, enabled, reason):
    plan = plan_cuda_graphs(setting, device_type=device, distributed=ddp, compile=compile)
    assert plan.enabled is enabled
    if reason is None:
        assert plan.reason is None
    else:
        assert reason in plan.reason and plan.reason.startswith("CUDA graphs off")


@pytest.mark.parametrize(
    ("device", "ddp", "compile", "field_found"),
    [("cpu", False, False, "cpu"), ("cuda", True, False, "DDP"), ("cuda", False, True, "compile=true")],
)
def test_an_explicit_true_that_cannot_be_honoured_is_an_error(device, ddp, compile, field_found):
    with pytest.raises(ActlabError) as e:
        plan_cuda_graphs(True, device_type=device, distributed=ddp, compile=compile)
    assert e.value.field == "cuda_graphs" and field_found in str(e.value.found)
    assert "cuda_graphs=auto" in e.value.fix


def test_the_config_default_is_auto_and_validated():
    cfg = get_preset("tiny")
    assert cfg.cuda_graphs == "auto"
    assert apply_train_overrides(cfg, ["cuda_graphs=false"]).cuda_graphs is False
    with pytest.raises(ActlabError, match="cuda_graphs"):
        apply_train_overrides(cfg, ["cuda_graphs=sometimes"])


def _cfg(dataset, *overrides):
    common = ["augment.shift_pad=0", "policy.dropout=0.0", "policy.use_vae=false"]
    cfg = apply_train_overrides(with_dataset(get_preset("tiny"), dataset), [*common, *overrides])
    return dataclasses.replace(cfg, num_threads=0)


def test_cpu_training_is_eager_and_silent_by_default(tiny_dataset):
    with warnings.catch_warnings():
        warnings.simplefilter("error", CaptureFallbackWarning)
        run = build_run(_cfg(tiny_dataset))
    try:
        assert run.graphed is None and run.graphs_off_reason is None
        assert all(not torch.is_tensor(g["lr"]) for g in run.optimizer.param_groups)  # plain AdamW
    finally:
        run.close()


def _force_graph(run):
    """Give a CPU run a real GraphedStep: its capture fails for real (CUDA streams need CUDA)."""
    run.graphed = GraphedStep(
        run.model, run.optimizer, run.params, grad_clip=run.cfg.optim.grad_clip, device=run.device,
        amp_dtype=run.amp_dtype, warmup=2,
    )  # fmt: skip


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a capture that fails (no CUDA)")
def test_a_failed_capture_warns_once_and_trains_exactly_like_eager_steps(tiny_dataset):
    eager, fallback = build_run(_cfg(tiny_dataset)), build_run(_cfg(tiny_dataset))
    try:
        _force_graph(fallback)
        with pytest.warns(CaptureFallbackWarning, match="capturing the step failed") as caught:
            losses_fb = [fallback.step(fallback.next_batch())["loss"] for _ in range(3)]
        assert len([w for w in caught if w.category is CaptureFallbackWarning]) == 1  # said once
        assert fallback.graphed is None and "capturing the step failed" in fallback.graphs_off_reason
        losses_eager = [eager.step(eager.next_batch())["loss"] for _ in range(3)]
        torch.testing.assert_close(torch.stack(losses_fb), torch.stack(losses_eager), rtol=0, atol=0)
        for (n, p), q in zip(eager.policy.named_parameters(), fallback.policy.parameters()):
            assert torch.equal(p, q), n
    finally:
        eager.close()
        fallback.close()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a capture that fails (no CUDA)")
def test_a_failed_capture_with_cuda_graphs_true_is_an_error(tiny_dataset):
    run = build_run(_cfg(tiny_dataset))
    try:
        _force_graph(run)
        run.cfg = dataclasses.replace(run.cfg, cuda_graphs=True)
        with pytest.raises(ActlabError, match="cannot be captured") as e:
            run.step(run.next_batch())
        assert e.value.field == "cuda_graphs"
    finally:
        run.close()


def test_learning_rates_follow_the_run_across_a_checkpoint(tiny_dataset):
    """A checkpoint of a captured run holds tensor learning rates; an eager resume needs floats (and a
    captured resume needs tensors on its device): the optimizer re-homes them on load."""
    run = build_run(_cfg(tiny_dataset))
    try:
        run.step(run.next_batch())
        state = run.optimizer.state_dict()
        for g in state["param_groups"]:  # as a captured run on another device would have saved it
            g["lr"] = torch.tensor(float(g["lr"]))
            g["initial_lr"] = torch.tensor(float(g["initial_lr"]))
        run.optimizer.load_state_dict(state)
        assert all(isinstance(g["lr"], float) for g in run.optimizer.param_groups)
        assert all(isinstance(g["initial_lr"], float) for g in run.optimizer.param_groups)
        run.step(run.next_batch())  # a non-capturable AdamW would refuse a tensor learning rate
    finally:
        run.close()


def test_a_resized_framestore_trains_a_policy_built_for_its_size(make_dataset, tmp_path):
    """data.image_size different from the recording: the policy is built for the stored size (its image
    tokens and positions), not the dataset's native one."""
    path = make_dataset(tmp_path, episodes=2, length=20, cameras={"top": (48, 64)})
    cfg = apply_train_overrides(_cfg(path), ["data.image_size=32", f"data.cache_dir={tmp_path / 'cache'}"])
    run = build_run(cfg)
    try:
        assert run.policy.image_shapes["observation.images.top"] == (3, 32, 32)
        assert torch.isfinite(run.step(run.next_batch())["loss"])
    finally:
        run.close()
