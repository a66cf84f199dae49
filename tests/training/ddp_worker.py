"""Run by ``torchrun --nproc_per_node 2`` from test_ddp.py: the trainer's DDP path on CPU with gloo.

Part 1 builds the run as ``train`` does and takes three steps, recording which frames each rank drew
and the parameters afterwards. Part 2 runs ``train`` itself for a few steps (rank 0 writes the run
directory). Rank 0 writes what both ranks saw to ``result.json``.
"""

import dataclasses
import json
import sys
from pathlib import Path

import torch

from actlab.training import ddp, get_preset, train, with_dataset
from actlab.training.build import build_run


def main(dataset: str, out: str) -> None:
    info = ddp.dist_info_from_env()
    device = ddp.setup(info, "cpu")
    cfg = with_dataset(get_preset("tiny"), dataset)
    augment = dataclasses.replace(cfg.augment, brightness=0.2, contrast=0.2)  # every augmentation on
    cfg = dataclasses.replace(cfg, steps=4, batch_size=4, augment=augment)

    run = build_run(cfg, device, info)
    before = torch.cat([p.detach().flatten() for p in run.policy.parameters()]).clone()
    seen = []
    for _ in range(3):
        batch = run.next_batch()
        seen.append(batch["index"].tolist())
        run.step(batch)
    flat = torch.cat([p.detach().flatten() for p in run.policy.parameters()])
    gathered = ddp.all_gather_object({"seen": seen, "params": flat, "before": before}, info)
    run.close()

    summary = train(cfg, Path(out) / "run", dist=info)  # tears the process group down at the end
    if info.is_main:
        result = {
            "world_size": info.world_size,
            "seen": [g["seen"] for g in gathered],
            "max_param_diff": float((gathered[0]["params"] - gathered[1]["params"]).abs().max()),
            "max_init_diff": float((gathered[0]["before"] - gathered[1]["before"]).abs().max()),
            "max_update": float((gathered[0]["params"] - gathered[0]["before"]).abs().max()),
            "summary": summary.as_dict(),
        }
        (Path(out) / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
