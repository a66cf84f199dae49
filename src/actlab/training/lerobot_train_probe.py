"""Run inside a lerobot 0.6.1 environment (NOT actlab's): time lerobot's own ACT training step.

    LEROBOT_PYTHON src/actlab/training/lerobot_train_probe.py DATASET_DIR \
        --policy '{"chunk_size": 100, ...}' --batch-size 8 --workers 4 --steps 30 --warmup 5 --device cuda:0

What runs is lerobot-train's loop body, with lerobot's own pieces: ``make_dataset`` (LeRobotDataset with
ACT's delta timestamps, video decoded per sample in DataLoader workers), ``make_policy``,
``make_pre_post_processors``, ``make_optimizer_and_scheduler`` (ACT's AdamW preset), an ``Accelerator``
with lerobot's mixed-precision choice, and ``lerobot.scripts.lerobot_train.update_policy`` (forward under
autocast, backward, clip, step, its ``.item()`` calls included). The loop converts uint8 images to float
and applies the preprocessor exactly as lerobot-train does.

Imports only the standard library, torch and lerobot; prints one JSON line on stdout. The timed window's
wall-clock start and end (``time.time()``) are in the output so that the caller can keep the GPU
utilization samples it took during exactly that window.

LEROBOT_PYTHON is the python of a separate environment with lerobot from PyPI, e.g.
``python3.12 -m venv lerobot-venv && lerobot-venv/bin/pip install "lerobot[dataset,training]==0.6.1"``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time


def _backend() -> str:
    """torchcodec when it loads (it needs FFmpeg shared libraries), else pyav: both are lerobot's."""
    try:
        import torchcodec.decoders  # noqa: F401
    except Exception:
        return "pyav"
    return "torchcodec"


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bench(root: str, policy_fields: dict, batch_size: int, workers: int, steps: int, warmup: int,
          device_name: str, amp: bool, tmp_parent: str | None = None) -> dict:  # fmt: skip
    import lerobot
    import torch
    from accelerate import Accelerator
    from lerobot.configs.default import DatasetConfig
    from lerobot.configs.train import TrainPipelineConfig
    from lerobot.datasets.factory import make_dataset
    from lerobot.optim.factory import make_optimizer_and_scheduler
    from lerobot.policies import make_policy, make_pre_post_processors
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.scripts.lerobot_train import _dataloader_worker_kwargs, update_policy
    from lerobot.utils.logging_utils import AverageMeter, MetricsTracker

    device = torch.device(device_name)
    # No network: the backbone starts from random weights (the step time does not depend on them).
    policy_cfg = ACTConfig(
        **policy_fields, device=device.type, use_amp=amp, push_to_hub=False, pretrained_backbone_weights=None
    )
    # tmp_parent: a scratch directory of the caller (actlab bench train --lerobot-python), which removes
    # it, also after this process was killed (a TemporaryDirectory of its own stayed in /tmp then)
    with tempfile.TemporaryDirectory(prefix="actlab-lerobot-train-", dir=tmp_parent) as tmp:
        cfg = TrainPipelineConfig(
            dataset=DatasetConfig(repo_id="actlab/local", root=root, video_backend=_backend()),
            policy=policy_cfg,
            output_dir=f"{tmp}/out",
            batch_size=batch_size,
            num_workers=workers,
            steps=warmup + steps,
        )
        cfg.optimizer = policy_cfg.get_optimizer_preset()  # what cfg.validate() does (it also reads argv)
        cfg.scheduler = policy_cfg.get_scheduler_preset()
        dataset = make_dataset(cfg)
        policy = make_policy(cfg=policy_cfg, ds_meta=dataset.meta)
        preprocessor, _ = make_pre_post_processors(policy_cfg=policy_cfg, dataset_stats=dataset.meta.stats)
        optimizer, lr_scheduler = make_optimizer_and_scheduler(cfg, policy)
        accelerator = Accelerator(
            step_scheduler_with_optimizer=False,
            mixed_precision="bf16" if amp else "no",
            cpu=device.type == "cpu",
        )
        loader = torch.utils.data.DataLoader(
            dataset,
            num_workers=workers,
            batch_size=batch_size,
            shuffle=True,
            pin_memory=device.type == "cuda",
            drop_last=False,
            **_dataloader_worker_kwargs(cfg),
        )
        policy, optimizer, loader, lr_scheduler = accelerator.prepare(policy, optimizer, loader, lr_scheduler)
        meters = {
            "loss": AverageMeter("loss", ":.3f"),
            "grad_norm": AverageMeter("grdn", ":.3f"),
            "lr": AverageMeter("lr", ":0.1e"),
            "update_s": AverageMeter("updt_s", ":.3f"),
            "dataloading_s": AverageMeter("data_s", ":.3f"),
        }
        tracker = MetricsTracker(
            batch_size, dataset.num_frames, dataset.num_episodes, meters, accelerator=accelerator
        )

        def batches():
            while True:
                yield from loader

        it = batches()
        data_s = 0.0

        def step() -> None:
            nonlocal data_s
            t0 = time.perf_counter()
            batch = next(it)
            for key in dataset.meta.camera_keys:  # as lerobot-train's loop does
                if key in batch and batch[key].dtype == torch.uint8:
                    batch[key] = batch[key].to(dtype=torch.float32) / 255.0
            batch = preprocessor(batch)
            data_s += time.perf_counter() - t0
            update_policy(tracker, policy, batch, optimizer, cfg.optimizer.grad_clip_norm,
                          accelerator=accelerator, lr_scheduler=lr_scheduler)  # fmt: skip

        for _ in range(warmup):
            step()
        _sync(device)
        data_s = 0.0
        start_wall, t0 = time.time(), time.perf_counter()
        for _ in range(steps):
            step()
        _sync(device)
        seconds = time.perf_counter() - t0
        end_wall = time.time()
    return {
        "samples_per_s": steps * batch_size / seconds,
        "step_ms": 1000 * seconds / steps,
        "data_ms": 1000 * data_s / steps,
        "steps": steps,
        "timed_start": start_wall,
        "timed_end": end_wall,
        "params": sum(p.numel() for p in accelerator.unwrap_model(policy).parameters()),
        "lerobot_version": getattr(lerobot, "__version__", "?"),
        "torch_version": torch.__version__,
        "device": str(device),
        "amp": "bf16" if amp else "off",
        "video_backend": _backend(),
        "workers": workers,
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--policy", default="{}", help="JSON: lerobot ACTConfig fields")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--amp", action="store_true", help="bf16 autocast through accelerate (use_amp)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--tmp", default=None, help="directory for the run's output (default: the system's)")
    a = p.parse_args()
    if a.threads:
        import torch

        torch.set_num_threads(a.threads)
    out = bench(
        a.root, json.loads(a.policy), a.batch_size, a.workers, a.steps, a.warmup, a.device, a.amp, a.tmp
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
