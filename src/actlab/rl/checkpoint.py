"""RL checkpoints: the trainer's :class:`CheckpointManager` (atomic directories, ``last.json``, retention,
partial-write cleanup) holding what an SAC run needs to continue exactly.

``checkpoints/step_NNNNNNN/`` (NNNNNNN = env steps) holds::

    agent.safetensors                 actor, critics, target critics, temperature, CNN encoder
    rl_config.json                    the run's RLConfig
    training_state/state.json         counters (env steps, episodes, updates, owed updates), config hash
    training_state/optimizer.pt       the three Adam states (torch.save; read with weights_only=True)
    training_state/rng_rank0.pt       the run's torch generator state
    training_state/replay.pt          the online replay buffer (filled part); demos are re-read on resume

Checkpoints are written between collection rounds (every env at an episode boundary), so a resume
restarts exactly where the checkpoint was: nothing about a half-run episode has to be saved.
"""

from __future__ import annotations

import io
import os
import shutil
import time
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.training.checkpoint import CheckpointManager
from actlab.utils.io import atomic_write_bytes, atomic_write_json, fsync_dir, read_json

AGENT_FILE = "agent.safetensors"
CONFIG_FILE = "rl_config.json"


def _torch_bytes(obj: Any) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


class RLCheckpoints(CheckpointManager):
    """Save / load SAC checkpoints in ``run_dir/checkpoints`` (listing, pointers, pruning inherited)."""

    def __init__(self, run_dir: str | Path, keep_last: int) -> None:
        super().__init__(run_dir, keep_last=keep_last, keep_best=False)

    def save_rl(
        self,
        step: int,
        agent_state: dict[str, Any],
        optimizer: dict[str, Any],
        rng: dict[str, Any],
        replay: dict[str, Any],
        meta: dict[str, Any],
        config: dict[str, Any],
    ) -> Path:
        """Write checkpoint ``step`` under a temporary name and rename it into place when complete."""
        from safetensors.torch import save

        final = self.path(step)
        tmp = self.root / f".{final.name}.{os.getpid()}.tmp"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
            (tmp / "training_state").mkdir(parents=True)
            tensors = {k: v.detach().cpu().contiguous() for k, v in agent_state.items()}
            atomic_write_bytes(tmp / AGENT_FILE, save(tensors))
            atomic_write_json(tmp / CONFIG_FILE, config)
            state = tmp / "training_state"
            atomic_write_bytes(
                state / "optimizer.pt", _torch_bytes({"optimizer": optimizer, "scheduler": {}})
            )
            atomic_write_bytes(state / "rng_rank0.pt", _torch_bytes(rng))
            atomic_write_bytes(state / "replay.pt", _torch_bytes(replay))
            atomic_write_json(
                state / "state.json", {**meta, "step": step, "val_loss": None, "written_at": time.time()}
            )
            if final.exists():  # a resumed run re-reaching a step it wrote before being killed
                shutil.rmtree(final)
            os.replace(tmp, final)
            fsync_dir(self.root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # the previous checkpoints are untouched
            raise
        self._update_pointers(step, None)
        self.prune()
        return final

    def load_rl(self, step: int) -> dict[str, Any]:
        """Everything :meth:`save_rl` wrote, read without unpickling (weights_only=True)."""
        import torch
        from safetensors.torch import load_file

        path = self.path(step)
        state = path / "training_state"
        files = [path / AGENT_FILE, state / "optimizer.pt", state / "rng_rank0.pt", state / "replay.pt"]
        for f in files:
            if not f.is_file():
                raise ActlabError(
                    "RL checkpoint is incomplete",
                    file=f,
                    expected="a file written by actlab rl train",
                    found="missing",
                    fix="delete that checkpoint directory to resume from the one before, or start a new run",
                )

        def load(f: Path) -> Any:
            return torch.load(f, map_location="cpu", weights_only=True)

        return {
            "agent": load_file(str(files[0])),
            "optimizer": load(files[1])["optimizer"],
            "rng": load(files[2]),
            "replay": load(files[3]),
            "meta": read_json(state / "state.json", "checkpoint state"),
            "path": path,
        }
