"""Comparing two training runs with a tolerance calibrated in the same test (graph vs eager parity).

Two eager runs of the same config on the same batches differ on a GPU when kernels are not deterministic
(cuDNN's convolution weight gradients sum with atomics in any order), and Adam's normalized update turns
a rounding difference into a visible weight difference. A fixed tolerance then either fails on that noise
or is so loose that it misses a real bug. So the test measures the noise first: eager vs eager on the
same device and batches, then requires graph vs eager to be within a multiple of it (with a floor for
machines where the two eager runs agree bitwise).

Distances are relative to how far training moved the weights: ``||a - b|| / ||a - start||`` over every
parameter together. A real divergence (a capture that trained, a learning rate that does not reach the
graph, a batch that is not copied in) moves the weights by a sizeable fraction of the update itself.
"""

from __future__ import annotations

import math

import torch

# A captured step may differ from its eager twin by this many times the eager-vs-eager noise ...
NOISE_FACTOR = 10.0
# ... or by this fraction of the distance the weights travelled, whichever is larger.
FLOOR = 1e-3


def snapshot(policy) -> dict[str, torch.Tensor]:
    """Every parameter, detached, in float32 on the CPU."""
    return {n: p.detach().float().cpu().clone() for n, p in policy.named_parameters()}


def train_on(run, batches) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Losses of ``run`` stepping on ``batches`` (each cloned: a step must not see another run's
    tensors) and its parameters afterwards."""
    losses = [run.step({k: v.clone() for k, v in b.items()})["loss"].float() for b in batches]
    return torch.stack(losses).cpu(), snapshot(run.policy)


def relative_distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], start: dict) -> float:
    """``||a - b|| / ||a - start||`` over all parameters together (0 when a == b)."""
    num = math.sqrt(sum(float((a[n] - b[n]).double().pow(2).sum()) for n in a))
    den = math.sqrt(sum(float((a[n] - start[n]).double().pow(2).sum()) for n in a))
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


def tolerance(noise: float) -> float:
    """The largest distance that still counts as agreement, given the eager-vs-eager ``noise``."""
    return max(NOISE_FACTOR * noise, FLOOR)


def per_parameter(a: dict, b: dict, start: dict) -> list[tuple[str, float]]:
    """Each parameter's relative distance, largest first (for the failure message)."""
    out = [(n, relative_distance({n: a[n]}, {n: b[n]}, {n: start[n]})) for n in a]
    return sorted(out, key=lambda t: -t[1])
