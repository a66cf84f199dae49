"""The calibrated parity check used by the GPU graph-vs-eager test, exercised on the CPU.

On the CPU two eager runs agree bitwise, so the tolerance is its floor; the check must accept the twin
run and reject a run with the kind of bug a captured step could have (one extra update: a capture that
trained; a learning rate that never left warmup).
"""

import dataclasses
import math

import torch
from parity import FLOOR, NOISE_FACTOR, relative_distance, snapshot, tolerance, train_on

from actlab.training import apply_train_overrides, get_preset, with_dataset
from actlab.training.build import build_run


def _run(dataset, *overrides):
    common = ["policy.dropout=0.0", "policy.use_vae=false", "augment.shift_pad=0", "schedule.warmup_steps=2"]
    cfg = apply_train_overrides(with_dataset(get_preset("tiny"), dataset), [*common, *overrides])
    return build_run(dataclasses.replace(cfg, num_threads=0))


def test_tolerance_scales_with_the_measured_noise():
    assert tolerance(0.0) == FLOOR
    assert tolerance(1e-2) == NOISE_FACTOR * 1e-2
    a = {"w": torch.ones(3)}
    assert relative_distance(a, a, {"w": torch.zeros(3)}) == 0.0
    assert relative_distance(a, {"w": torch.zeros(3)}, a) == math.inf  # no update at all, yet different


def test_the_check_accepts_a_twin_and_rejects_real_divergences(tiny_dataset):
    a, b, extra, frozen_lr = (_run(tiny_dataset) for _ in range(4))
    try:
        start = snapshot(a.policy)
        batches = [a.next_batch() for _ in range(4)]
        _, end_a = train_on(a, batches)
        _, end_b = train_on(b, batches)
        train_on(extra, batches[:1])  # a capture that was not undone: one update too many
        _, end_extra = train_on(extra, batches)
        frozen_lr.scheduler.step = lambda: None  # a schedule whose updates never reach the step
        _, end_frozen = train_on(frozen_lr, batches)
        noise = relative_distance(end_a, end_b, start)
        assert noise == 0.0  # eager CPU kernels are deterministic
        assert relative_distance(end_a, end_extra, start) > 10 * tolerance(noise)
        assert relative_distance(end_a, end_frozen, start) > 10 * tolerance(noise)
    finally:
        for run in (a, b, extra, frozen_lr):
            run.close()
