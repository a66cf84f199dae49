"""Training checkpoints: a policy bundle plus the training state, on :class:`actlab.lifecycle.Checkpoints`.

Layout of a run directory::

    checkpoints/step_0001000/            a policy bundle (load_policy), loadable by evaluation alone
        training_state/state.json        step, config hash, world size, val loss, sampler + numpy/python RNG
        training_state/optimizer.pt      optimizer + scheduler state (torch.save; read with weights_only=True)
        training_state/rng_rank{r}.pt    torch CPU/CUDA RNG and augmentation generator state of rank r
    checkpoints/last.json                {"step", "path", "val_loss"} of the newest complete checkpoint
    checkpoints/best.json                the same for the lowest validation loss

Atomic writes, digests, pointers and retention are the run lifecycle's (:mod:`actlab.lifecycle.checkpoints`).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from actlab.lifecycle.checkpoints import STATE_DIR, Checkpoints

__all__ = ["CheckpointManager", "ResumeState", "jsonable"]


@dataclasses.dataclass
class ResumeState:
    """Everything a checkpoint holds besides the model weights, as loaded for a resume."""

    # the completed optimizer step the checkpoint was written after
    step: int
    # checkpoint directory it came from
    path: Path
    # contents of training_state/state.json
    meta: dict[str, Any]
    # optimizer and scheduler state dicts
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    # torch RNG tensors of this process's rank
    rng: dict[str, Any]


class CheckpointManager(Checkpoints):
    """The checkpoints of a training run directory (rank 0 writes only)."""

    def __init__(self, run_dir: str | Path, keep_last: int, keep_best: bool) -> None:
        super().__init__(run_dir, keep_last, keep_best, command="actlab train")

    def save(
        self,
        step: int,
        policy: Any,
        optimizer_state: dict[str, Any],
        scheduler_state: dict[str, Any],
        meta: dict[str, Any],
        rng_per_rank: list[dict[str, Any]],
        val_loss: float | None,
        bundle_extra: dict[str, Any] | None = None,
    ) -> Path:
        """Write checkpoint ``step`` atomically, update ``last.json``/``best.json``, prune old ones."""
        # lazy: bundle imports torch; training modules import without it
        from actlab.policies import write_bundle

        state = {"optimizer": {"optimizer": optimizer_state, "scheduler": scheduler_state}}
        state.update({f"rng_rank{rank}": rng for rank, rng in enumerate(rng_per_rank)})
        return self.write(
            step,
            lambda tmp: write_bundle(policy, tmp, extra=bundle_extra),  # the files of save_policy's bundle
            state,
            meta,
            val_loss,
        )

    def load(self, step: int, rank: int) -> ResumeState:
        """Read the training state of checkpoint ``step`` for process ``rank`` (weights are loaded apart)."""
        path = self.path(step)
        meta = self.meta(step)
        state_dir = path / STATE_DIR
        rng_file = f"rng_rank{rank}"
        self.require(step, [state_dir / "optimizer.pt", state_dir / f"{rng_file}.pt"], "actlab train")
        opt = self.load_state(step, "optimizer", meta)
        rng = self.load_state(step, rng_file, meta)
        return ResumeState(
            step=step, path=path, meta=meta, optimizer=opt["optimizer"], scheduler=opt["scheduler"], rng=rng
        )


def jsonable(obj: Any) -> Any:
    """numpy arrays and scalars inside sampler / RNG states -> plain JSON values."""
    return json.loads(json.dumps(obj, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))
