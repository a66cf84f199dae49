"""build_run: the pieces a step needs, wired from real data and a real policy."""

import dataclasses
import warnings

import pytest
import torch

from actlab.training import apply_train_overrides, get_preset, with_dataset
from actlab.training.augment import prepare_images
from actlab.training.build import build_run


def _cfg(dataset, *overrides):
    cfg = apply_train_overrides(with_dataset(get_preset("tiny"), dataset), list(overrides))
    return dataclasses.replace(cfg, num_threads=0)  # leave this test process's thread count alone


def test_frozen_backbone_trains_the_head_on_cached_features(tiny_dataset):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = build_run(_cfg(tiny_dataset, "policy.freeze_backbone=true"))
    assert any("freeze_backbone" in str(w.message) for w in caught)  # augmentation cannot apply: said so
    try:
        key = run.image_keys[0]
        batch = run.next_batch()
        assert key + ".features" in batch and key not in batch
        # the cached features give the same loss as the images they were computed from
        images = run.store.frames[key][batch["index"].numpy()]
        with_images = {k: v for k, v in batch.items() if k != key + ".features"}
        with_images[key] = torch.from_numpy(images)
        with_images = prepare_images(with_images, [key], None, None)
        run.policy.eval()
        with torch.no_grad():
            a, _ = run.policy(batch)
            b, _ = run.policy(with_images)
        run.policy.train()
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        # a step moves the head and leaves the frozen backbone exactly where it was
        backbone = {
            n: p.detach().clone() for n, p in run.policy.named_parameters() if n.startswith("backbone.")
        }
        head = {
            n: p.detach().clone() for n, p in run.policy.named_parameters() if not n.startswith("backbone.")
        }
        run.step(batch)
        assert all(torch.equal(p, backbone[n]) for n, p in run.policy.named_parameters() if n in backbone)
        assert any(not torch.equal(p, head[n]) for n, p in run.policy.named_parameters() if n in head)
    finally:
        run.close()


def test_step_returns_device_tensors_and_every_trainable_parameter_moves(tiny_dataset):
    run = build_run(_cfg(tiny_dataset, "augment.shift_pad=0"))
    try:
        before = {n: p.detach().clone() for n, p in run.policy.named_parameters()}
        metrics = run.step(run.next_batch())
        assert {"loss", "l1_loss", "kld_loss", "grad_norm"} <= set(metrics)
        assert all(
            isinstance(v, torch.Tensor) and v.ndim == 0 for v in metrics.values()
        )  # no .item() in a step
        assert torch.isfinite(metrics["grad_norm"]) and metrics["grad_norm"] > 0
        stuck = [n for n, p in run.policy.named_parameters() if p.requires_grad and torch.equal(p, before[n])]
        assert not stuck
        assert run.lrs()["lr"] == pytest.approx(1e-3 * 2 / 3)  # warmup (2 steps): the 2nd step's rate
    finally:
        run.close()


def test_camera_that_the_dataset_lacks_is_named(tiny_dataset):
    from actlab.errors import ActlabError

    with pytest.raises(ActlabError, match="did you mean 'observation.images.top'") as e:
        build_run(_cfg(tiny_dataset, 'policy.cameras=["observation.images.tpo"]'))
    assert "policy.cameras" in str(e.value)


def test_resume_on_another_device_type_reseeds_the_augmentation_stream_and_says_so(tiny_dataset):
    # A checkpoint written on a GPU holds a CUDA generator state (16 bytes: seed + offset) where a CPU
    # run's generator holds a Mersenne-Twister state: it cannot be loaded, and must not crash the resume.
    run = build_run(_cfg(tiny_dataset))
    try:
        run.step(run.next_batch())
        tensors, meta = run.rng_state()
        sampler_state = meta["sampler"]
        cuda_like = {
            **tensors,
            "augment": torch.zeros(16, dtype=torch.uint8),
            "torch_cuda": tensors["torch_cpu"],
        }
        with pytest.warns(UserWarning, match="not bit for bit"):
            run.load_rng_state(cuda_like, meta)
        assert run.batches.state()[0] == sampler_state  # the sampler position carried over
        state = run.aug_generator.get_state()
        with pytest.warns(UserWarning, match="not bit for bit"):
            run.load_rng_state(cuda_like, meta)  # deterministic: the same reseed every time
        assert torch.equal(run.aug_generator.get_state(), state)
        run.step(run.next_batch())
        # the same device type: restored exactly, no warning
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            run.load_rng_state(tensors, meta)
        assert torch.equal(run.aug_generator.get_state(), tensors["augment"])
    finally:
        run.close()


def test_validation_is_eval_mode_on_fixed_batches_and_leaves_every_training_stream_alone(tiny_dataset):
    # eval.every may change on resume, so validation must not shift what training draws next
    run = build_run(_cfg(tiny_dataset))  # tiny: dropout 0.1, CVAE, random shift: all draw random numbers
    try:
        assert run.split.val_ranges and not set(run.split.val_episodes) & set(run.split.train_episodes)
        run.step(run.next_batch())
        cpu, aug, pos = torch.get_rng_state(), run.aug_generator.get_state(), run.batches.state()[0]
        first = run.evaluate()
        assert torch.equal(torch.get_rng_state(), cpu) and torch.equal(run.aug_generator.get_state(), aug)
        assert run.batches.state()[0] == pos and run.policy.training
        assert run.evaluate() == first  # the same batches, no dropout, latent 0: the same number
        # eval mode: the loss is the L1 of what inference predicts (no KL term, no sampled latent)
        from actlab.training.build import VAL_SEED_OFFSET
        from actlab.training.data import make_sampler

        # recomputed from the sampler and DeviceData directly (not through validation_batches)
        sampler = make_sampler(run.split.val_ranges, run.cfg.seed + VAL_SEED_OFFSET)
        source = run.device_data.batches(sampler, run.cfg.batch_size, prefetch=1)
        run.policy.eval()
        with torch.no_grad():
            losses = []
            for _ in range(run.cfg.eval.batches):
                raw, _ = next(source)
                loss, metrics = run.policy(prepare_images(raw, run.image_keys, None, None))
                assert loss == metrics["l1_loss"]
                losses.append(loss)
        run.policy.train()
        source.close()
        assert sum(losses).item() / len(losses) == pytest.approx(first, rel=1e-6)
    finally:
        run.close()
