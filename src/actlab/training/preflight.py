"""Disk preflight: refuse a run before step 1 when its checkpoints (and FrameStore) cannot fit.

Teams have lost overnight runs to a full disk at step 10,000. The need is estimated from what a checkpoint
holds (fp32 weights in safetensors + AdamW's two moment buffers per trainable parameter + a small allowance
for configs and RNG state) times the number of checkpoints alive at once (keep_last, the best one, and
the one being written before the oldest is deleted), plus the decoded FrameStore when it is not built yet
and lives on the same filesystem.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from actlab.utils.disk import require_free
from actlab.utils.units import human_bytes

# configs, stats, sampler/RNG state and the safetensors header per checkpoint
CHECKPOINT_OVERHEAD_BYTES = 1 << 20
# metrics.jsonl, config.json, plots: a generous allowance for the rest of a run directory
RUN_DIR_OVERHEAD_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class DiskPlan:
    """The disk need of a run, itemised so the refusal message can show where the bytes go."""

    # estimated bytes of one checkpoint directory
    checkpoint_bytes: int
    # checkpoints alive at the same time at the worst moment
    checkpoints_alive: int
    # FrameStore bytes still to be written on the same filesystem (0 when built or elsewhere)
    framestore_bytes: int
    # bytes already used by checkpoints of this run (resume), which count against the keep budget
    existing_checkpoint_bytes: int = 0

    @property
    def need_bytes(self) -> int:
        checkpoints = max(
            self.checkpoint_bytes,
            self.checkpoint_bytes * self.checkpoints_alive - self.existing_checkpoint_bytes,
        )
        return checkpoints + self.framestore_bytes + RUN_DIR_OVERHEAD_BYTES


def checkpoint_bytes(n_params: int, n_trainable: int, param_bytes: int = 4, optim_states: int = 2) -> int:
    """Bytes of one checkpoint: weights + ``optim_states`` fp32 buffers per trainable parameter."""
    return n_params * param_bytes + n_trainable * 4 * optim_states + CHECKPOINT_OVERHEAD_BYTES


def plan(
    n_params: int,
    n_trainable: int,
    keep_last: int,
    keep_best: bool,
    framestore_bytes: int = 0,
    existing_checkpoint_bytes: int = 0,
) -> DiskPlan:
    alive = keep_last + (1 if keep_best else 0) + 1  # +1: the new one is complete before the oldest goes
    return DiskPlan(
        checkpoint_bytes=checkpoint_bytes(n_params, n_trainable),
        checkpoints_alive=alive,
        framestore_bytes=framestore_bytes,
        existing_checkpoint_bytes=existing_checkpoint_bytes,
    )


def check(disk: DiskPlan, out_dir: str | Path, limit_bytes: int | None = None) -> int:
    """Raise ActlabError when ``disk.need_bytes`` exceeds the free space (or ``limit_bytes``, if smaller).

    Returns the number of bytes that were available.
    """
    return require_free(
        disk.need_bytes,
        out_dir,
        problem="not enough disk space for this run's checkpoints; refusing to start rather than fail later",
        field="checkpoint.keep_last" if disk.checkpoints_alive > 2 else "checkpoint.disk_limit_bytes",
        expected=f"{human_bytes(disk.need_bytes)} = {disk.checkpoints_alive} checkpoints alive x "
        f"{human_bytes(disk.checkpoint_bytes)} (weights + AdamW state)"
        + (
            f" - {human_bytes(disk.existing_checkpoint_bytes)} already written"
            if disk.existing_checkpoint_bytes
            else ""
        )
        + (f" + FrameStore {human_bytes(disk.framestore_bytes)}" if disk.framestore_bytes else "")
        + f" + {human_bytes(RUN_DIR_OVERHEAD_BYTES)} logs",
        fix="free disk space, choose an --out on a larger disk, lower checkpoint.keep_last "
        "or set checkpoint.keep_best=false, or put the FrameStore elsewhere with data.cache_dir",
        limit_bytes=limit_bytes,
        limit_name="the limit checkpoint.disk_limit_bytes",
    )
