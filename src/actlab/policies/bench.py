"""Training-step benchmark of policy variants, measured side by side in one process (``actlab policy bench``).

Each variant is the base config with ``key=value`` overrides; the pseudo-override ``cached_features=true``
freezes the backbone and feeds precomputed ``<camera>.features`` (what the trainer does with a frozen
backbone: the backbone runs once per frame, not once per step). Steps of the variants are interleaved in
rounds, so background load affects them alike; the report gives the median step time of each and its
speed relative to the first variant.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any, TextIO

import torch

from actlab.errors import ActlabError
from actlab.policies.contract import FEATURES_SUFFIX, FUTURE_STATE, PAST_CHUNKS
from actlab.policies.info import synthetic_features, unit_stats
from actlab.policies.registry import apply_config_overrides, get_config_class, make_policy
from actlab.utils.config import comma_items, refuse_repeated
from actlab.utils.device import resolve_device
from actlab.utils.threads import load_1m, torch_threads, usable_cpus

PSEUDO = "cached_features"


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``"name:key=value,key=value"`` -> (name, overrides); ``"name:"`` is the base config."""
    name, _, rest = text.partition(":")
    items = comma_items(rest, "--variant", "NAME:dim_model=64,n_heads=4") if rest.strip() else []
    # a key given twice ran the later value under a header naming both, without a word (25th fault run)
    keys = [item.partition("=")[0].strip() for item in items]
    refuse_repeated(keys, items, "--variant", text, "NAME:dim_model=64,n_heads=4")
    return name.strip() or "base", items


def _batch(
    policy: Any, batch_size: int, gen: torch.Generator, device: torch.device
) -> dict[str, torch.Tensor]:
    batch: dict[str, torch.Tensor] = {}
    for key, offsets in policy.delta_indices.items():
        t = len(offsets)
        if key == "action":
            batch[key] = torch.randn(batch_size, t, policy.action_dim, generator=gen)
            batch["action_is_pad"] = torch.zeros(batch_size, t, dtype=torch.bool)
        elif key == "observation.state":
            shape = (batch_size, policy.state_dim) if t == 1 else (batch_size, t, policy.state_dim)
            batch[key] = torch.randn(*shape, generator=gen)
        elif key == FUTURE_STATE:  # a correction head's states over the chunk
            batch[key] = torch.randn(batch_size, t, policy.state_dim, generator=gen)
            batch[key + "_is_pad"] = torch.zeros(batch_size, t, dtype=torch.bool)
        elif key == PAST_CHUNKS:  # correction_only: the frozen policy's chunks of the frames before
            batch[key] = torch.randn(batch_size, t, t, policy.action_dim, generator=gen)
            batch[key + "_is_pad"] = torch.zeros(batch_size, t, dtype=torch.bool)
        else:  # a camera; with several observation offsets (aloha_clip's 3) one frame per offset: it was
            # one frame, refused with "fetch observations with policy.delta_indices" (bench threads)
            frames = (batch_size,) if t == 1 else (batch_size, t)
            batch[key] = torch.randint(
                0, 256, (*frames, *policy.image_shapes[key]), generator=gen, dtype=torch.uint8
            )
    return {k: v.to(device) for k, v in batch.items()}


def _setup(base: Any, overrides: list[str], features: dict, batch_size: int, device: torch.device, seed: int):
    cached = any(o.replace(" ", "") in (f"{PSEUDO}=true", f"{PSEUDO}=1") for o in overrides)
    cfg = apply_config_overrides(base, [o for o in overrides if not o.startswith(PSEUDO)])
    if cached:
        cfg = dataclasses.replace(cfg, freeze_backbone=True)
    torch.manual_seed(seed)
    policy = make_policy(cfg, features, unit_stats(cfg, features), pretrained=False).to(device).train()
    batch = _batch(policy, batch_size, torch.Generator().manual_seed(seed), device)
    if cached:
        with torch.no_grad():
            for key in policy.camera_keys:
                batch[key + FEATURES_SUFFIX] = policy.encode_images(key, batch.pop(key))
    opt = torch.optim.AdamW(policy.param_groups(1e-4, 1e-5, 1e-4))
    return policy, batch, opt


def _step(policy: Any, batch: dict, opt: torch.optim.Optimizer, device: torch.device) -> float:
    t0 = time.perf_counter()
    loss, _ = policy(batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # timing boundary: the one sync per measured step
    return time.perf_counter() - t0


def bench_policy(
    type_name: str = "act",
    overrides: tuple[str, ...] = (),
    variants: tuple[str, ...] = ("base:",),
    batch_size: int = 8,
    cameras: tuple[str, ...] = ("top",),
    image_shape: tuple[int, int] = (480, 640),
    state_dim: int = 6,
    action_dim: int = 6,
    steps: int = 10,
    warmup: int = 2,
    device: str = "cpu",
    seed: int = 0,
    progress: TextIO | None = None,
) -> dict[str, Any]:
    """Median training-step time per variant and its speed-up over the first; a profiling.report dict.
    ``progress``: a text stream told what is built and each round's step times (None: silent)."""

    def say(text: str) -> None:
        if progress is not None:
            print(text, file=progress, flush=True)

    dev = resolve_device(device)
    base = apply_config_overrides(get_config_class(type_name)(), list(overrides))
    features = synthetic_features(state_dim, action_dim, cameras, image_shape)
    names = [parse_variant(text)[0] for text in variants]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:  # the second of two variants of one name replaced the first's times, without a word
        raise ActlabError(
            "two --variant share a name: one measurement would replace the other",
            field="--variant",
            expected="a distinct NAME per --variant NAME:K=V,...",
            found=", ".join(t for t in variants if parse_variant(t)[0] in twice),
            fix="give each variant a name of its own, e.g. --variant d16:dim_model=16 --variant "
            "d32:dim_model=32 (nothing was measured)",
        )
    runs = {}
    for text in variants:
        name, extra = parse_variant(text)
        say(f"building {name} ({', '.join(extra) or 'the base config'}), batch {batch_size} on {dev}")
        runs[name] = _setup(base, extra, features, batch_size, dev, seed)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(warmup + steps):
        took = {}
        for name, (policy, batch, opt) in runs.items():
            took[name] = dt = _step(policy, batch, opt, dev)
            if i >= warmup:
                times[name].append(dt)
        what = "warm-up" if i < warmup else f"round {i - warmup + 1}/{steps}"
        say(f"  {what}: " + ", ".join(f"{n} {1000 * t:,.0f} ms" for n, t in took.items()))
    med = {name: statistics.median(v) for name, v in times.items()}
    first = next(iter(med))
    metrics: dict[str, float] = {}
    for name, t in med.items():
        metrics[f"{name}.step_ms"] = round(t * 1000, 2)
        metrics[f"{name}.samples_per_s"] = round(batch_size / t, 1)
        metrics[f"{name}.trainable_params"] = sum(
            p.numel() for p in runs[name][0].parameters() if p.requires_grad
        )
    ratios = {f"{name}_vs_{first}": round(med[first] / t, 2) for name, t in med.items() if name != first}
    readable = [
        f"{name}_vs_{first} = {med[first] / t:.2f}: {name}'s step takes {1000 * t:,.1f} ms, {first}'s "
        f"{1000 * med[first]:,.1f} ms (median of {steps}); above 1 {name} is faster, below 1 slower"
        for name, t in med.items()
        if name != first
    ]
    return {
        "benchmark": "policy",
        "command": "actlab policy bench",
        "device": str(dev),
        "config": {
            "type": type_name,
            "overrides": list(overrides),
            "variants": list(variants),
            "batch_size": batch_size,
            "cameras": list(cameras),
            "image_shape": list(image_shape),
            "steps": steps,
            "threads": torch.get_num_threads(),
        },
        "metrics": metrics,
        "ratios": ratios,
        "notes": [
            *readable,
            "step = forward + backward + AdamW step on synthetic batches; variants interleaved per round",
            f"{PSEUDO}=true: frozen backbone with features precomputed once (the trainer's frozen path): "
            "it saves the backbone's share of the step (forward and backward), so the smaller the backbone "
            "is next to the transformer, the closer the ratio is to 1",
        ],
    }


def bench_threads(
    policy_cfg: Any,
    counts: tuple[int, ...],
    batch_size: int = 32,
    image_size: int = 80,
    rounds: int = 10,
    warmup: int = 2,
    seed: int = 0,
    progress: TextIO | None = None,
) -> dict[str, Any]:
    """Training-step time (CPU) of one policy at each torch thread count, interleaved round by round so
    that the load of the moment weighs on every count alike; the 1-minute load average before and after
    is part of the result (the ratio depends on it: the point of the benchmark). A profiling.report dict.
    """
    dev = torch.device("cpu")
    cams = tuple(c.rsplit(".", 1)[-1] for c in (policy_cfg.cameras or ("observation.images.top",)))
    features = synthetic_features(6, 6, cams, (image_size, image_size))
    load_before = load_1m()
    policy, batch, opt = _setup(policy_cfg, [], features, batch_size, dev, seed)
    times: dict[int, list[float]] = {n: [] for n in counts}
    for i in range(warmup + rounds):
        took = {}
        for n in counts:
            with torch_threads(n):
                took[n] = dt = _step(policy, batch, opt, dev)
            if i >= warmup:
                times[n].append(dt)
        if progress is not None:
            what = "warm-up" if i < warmup else f"round {i - warmup + 1}/{rounds}"
            line = ", ".join(f"{n} thread{'s' if n != 1 else ''} {1000 * t:,.0f} ms" for n, t in took.items())
            print(f"  {what}: {line}", file=progress, flush=True)
    load_after = load_1m()
    med = {n: statistics.median(v) for n, v in times.items()}
    first = counts[0]
    metrics: dict[str, float] = {f"threads{n}.step_ms": round(1000 * t, 2) for n, t in med.items()}
    metrics["load_1m_before"] = -1.0 if load_before is None else round(load_before, 2)
    metrics["load_1m_after"] = -1.0 if load_after is None else round(load_after, 2)
    metrics["cpus"] = usable_cpus()
    ratios = {f"threads{n}_vs_threads{first}": round(med[first] / t, 2) for n, t in med.items() if n != first}
    best = min(med, key=lambda n: (med[n], n))
    return {
        "benchmark": "threads",
        "command": "actlab bench threads",
        "device": "cpu",
        "config": {
            "type": policy_cfg.type,
            "batch_size": batch_size,
            "image_size": image_size,
            "cameras": list(cams),
            "counts": list(counts),
            "rounds": rounds,
        },
        "metrics": metrics,
        "ratios": ratios,
        "notes": [
            *(
                f"threads{n}_vs_threads{first} = {med[first] / t:.2f}: a step at {n} thread(s) takes "
                f"{1000 * t:,.1f} ms, at {first} {1000 * med[first]:,.1f} ms (median of {rounds}); above 1 "
                f"{n} is faster"
                for n, t in med.items()
                if n != first
            ),
            f"fastest now: {best} thread(s); 1-minute load average {_load(load_before)} before, "
            f"{_load(load_after)} after, on {usable_cpus()} CPUs",
            "step = forward + backward + AdamW step on a synthetic batch; counts interleaved per round",
        ],
    }


def _load(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.1f}"
