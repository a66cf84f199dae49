"""lerobot 0.6.1's own ACT training step, run in the user's lerobot environment for ``bench train``.

The child process runs ``lerobot_train_probe.py`` (lerobot's dataset, DataLoader, policy, processors,
optimizer preset, Accelerator and ``update_policy``) on the same dataset, with the ACT fields of the
actlab config mapped onto lerobot's ``ACTConfig`` (:func:`lerobot_act_fields`, a pure function). What
cannot be mapped is said in the notes, never silently changed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.utils import procs
from actlab.utils.io import scratch_dir

# lerobot-train's default DataLoader workers (lerobot 0.6.1 TrainPipelineConfig.num_workers).
LEROBOT_DEFAULT_WORKERS = 4

# actlab ACTConfig field -> lerobot ACTConfig field (same meaning, same defaults in both).
_SAME = ("chunk_size", "n_action_steps", "vision_backbone", "pre_norm", "dim_model", "n_heads",
         "dim_feedforward", "feedforward_activation", "n_encoder_layers", "n_decoder_layers", "use_vae",
         "latent_dim", "n_vae_encoder_layers", "kl_weight", "dropout", "temporal_ensemble_coeff")  # fmt: skip


def lerobot_act_fields(cfg: Any) -> tuple[dict[str, Any], list[str]]:
    """(lerobot ``ACTConfig`` fields, notes on what differs) for an actlab training config ``cfg``."""
    policy = cfg.policy
    fields = {name: getattr(policy, name) for name in _SAME if hasattr(policy, name)}
    fields.update(
        optimizer_lr=cfg.optim.lr,
        optimizer_lr_backbone=cfg.optim.backbone_lr,
        optimizer_weight_decay=cfg.optim.weight_decay,
    )
    notes = []
    if fields.get("vision_backbone") not in ("resnet18", "resnet34"):
        notes.append(
            f"lerobot has no {fields.get('vision_backbone')} backbone: its step uses resnet18 (a different "
            "model; compare with a resnet preset such as so101_sim)"
        )
        fields["vision_backbone"] = "resnet18"
    if getattr(policy, "type", "act") != "act":
        notes.append(f"lerobot has no {policy.type}: its step is plain ACT with the shared fields")
    if getattr(policy, "freeze_backbone", False):
        notes.append("lerobot trains its backbone (actlab's freeze_backbone has no lerobot equivalent)")
    if cfg.data.image_size is not None:
        notes.append(
            f"actlab trains on {cfg.data.image_size} px frames (data.image_size); lerobot decodes the "
            "dataset's native size"
        )
    if getattr(policy, "cameras", ()):
        notes.append("lerobot uses every camera of the dataset (actlab: policy.cameras)")
    notes.append("both backbones start from random weights in the lerobot step (no download)")
    return fields, notes


def run_lerobot_step(
    python: str,
    dataset: str | Path,
    cfg: Any,
    *,
    device: str,
    amp: bool,
    workers: int = LEROBOT_DEFAULT_WORKERS,
    steps: int = 30,
    warmup: int = 5,
    threads: int = 0,
    timeout_s: float = 3600.0,
) -> dict[str, Any]:
    """Run lerobot's ACT training step in ``python`` (a lerobot 0.6.1 environment); returns its JSON
    plus ``notes``. The child gets its own process group, killed whole on timeout."""
    fields, notes = lerobot_act_fields(cfg)
    probe = Path(__file__).with_name("lerobot_train_probe.py")
    cmd = [python, str(probe), str(dataset), "--policy", json.dumps(fields),
           "--batch-size", str(cfg.batch_size), "--workers", str(workers), "--steps", str(steps),
           "--warmup", str(warmup), "--device", device, "--threads", str(threads)]  # fmt: skip
    cmd += ["--amp"] if amp else []
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # the child's output goes into a scratch directory of this process: removed when it ends, and by the
    # next run when this one was SIGKILLed (the child's own temporary directory stayed in /tmp then)
    with scratch_dir("actlab-lerobot-train") as tmp:
        cmd += ["--tmp", str(tmp)]
        # LeRobot reads the data files through Hugging Face datasets (Dataset.from_parquet), which writes an
        # Arrow copy of them under ~/.cache/huggingface/datasets/parquet/default-HASH; the synthetic dataset
        # of each run lies in a new directory, so every run added one that no later run used, for good
        # (12 in the 21st fault run's probes). Its cache goes into this scratch directory instead.
        env["HF_DATASETS_CACHE"] = str(tmp / "hf_datasets")
        try:
            code, out, err = procs.run_tree(
                cmd, timeout=timeout_s, env=env, field="--lerobot-python"
            )  # the DataLoader workers too
        except subprocess.TimeoutExpired:
            raise ActlabError(
                f"lerobot's training step did not finish in {timeout_s:.0f} s",
                field="--lerobot-python",
                found=python,
                fix="use fewer --lerobot-steps",
            ) from None
    lines = [ln for ln in out.strip().splitlines() if ln.startswith("{")]
    if code != 0 or not lines:
        raise ActlabError(
            "lerobot's training step failed",
            field="--lerobot-python",
            expected="the python of an environment with lerobot[dataset,training]==0.6.1",
            found=(err.strip().splitlines() or ["no output"])[-1],
            fix="python3.12 -m venv /work/lerobot-venv && /work/lerobot-venv/bin/pip install "
            '"lerobot[dataset,training]==0.6.1"',
        )
    result = json.loads(lines[-1])
    result["notes"] = notes
    return result
