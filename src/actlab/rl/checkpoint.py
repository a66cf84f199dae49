"""RL checkpoints on the run lifecycle's :class:`actlab.lifecycle.checkpoints.Checkpoints` (atomic
directories, sha256 digests checked at load, ``last.json``, retention, partial-write cleanup), holding
what an SAC run needs to continue exactly.

``checkpoints/step_NNNNNNN/`` (NNNNNNN = env steps) holds::

    agent.safetensors                 actor, critics, target critics, temperature, CNN encoder
    rl_config.json                    the run's RLConfig
    training_state/state.json         counters (env steps, episodes, updates, owed updates), config hash,
                                      the sha256 of agent.safetensors and of every .pt file
    training_state/optimizer.pt       the three Adam states (torch.save; read with weights_only=True)
    training_state/rng_rank0.pt       the run's torch generator state
    training_state/replay.pt          the online replay buffer (filled part); demos are re-read on resume
    training_state/guard.pt           residual runs: the last good actor the guard rolls back to
                                      (the guard's decisions are in state.json, "guard")

Checkpoints are written between collection rounds (every env at an episode boundary), so a resume
restarts exactly where the checkpoint was: nothing about a half-run episode has to be saved. Checkpoints
of runs from before the digests were recorded load unchecked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.lifecycle.checkpoints import STATE_DIR, Checkpoints
from actlab.utils.config import is_number, is_whole
from actlab.utils.io import atomic_write_bytes, atomic_write_json, read_json

AGENT_FILE = "agent.safetensors"
CONFIG_FILE = "rl_config.json"
STATE_FILES = ("optimizer", "rng_rank0", "replay")


class RLCheckpoints(Checkpoints):
    """Save / load SAC checkpoints in ``run_dir/checkpoints`` (listing, pointers, pruning inherited)."""

    def __init__(self, run_dir: str | Path, keep_last: int) -> None:
        # keep_best: the checkpoint best.json names (a residual run's handed-back policy) is never pruned
        super().__init__(run_dir, keep_last=keep_last, keep_best=True, command="actlab rl train")

    def save_rl(
        self,
        step: int,
        agent_state: dict[str, Any],
        optimizer: dict[str, Any],
        rng: dict[str, Any],
        replay: dict[str, Any],
        meta: dict[str, Any],
        config: dict[str, Any],
        guard: dict[str, Any] | None = None,
    ) -> Path:
        """Write checkpoint ``step`` under a temporary name and rename it into place when complete."""
        from safetensors.torch import save  # lazy: safetensors.torch imports torch

        def write_files(tmp: Path) -> None:
            tensors = {k: v.detach().cpu().contiguous() for k, v in agent_state.items()}
            atomic_write_bytes(tmp / AGENT_FILE, save(tensors))
            atomic_write_json(tmp / CONFIG_FILE, config)

        state = {"optimizer": {"optimizer": optimizer, "scheduler": {}}, "rng_rank0": rng, "replay": replay}
        if guard is not None:
            state["guard"] = guard  # a residual run's last good actor (tensors)
        return self.write(step, write_files, state, meta, None, protect=[AGENT_FILE])

    def load_rl(self, step: int) -> dict[str, Any]:
        """Everything :meth:`save_rl` wrote, digests checked, read without unpickling (weights_only)."""
        path = self.path(step)
        self.require(
            step,
            [path / AGENT_FILE, *(path / STATE_DIR / f"{n}.pt" for n in STATE_FILES)],
            "actlab rl train",
        )
        meta = check_rl_meta(self.meta(step), self, step)
        recorded = meta.get("sha256") or {}
        return {
            "agent": read_tensors(self.verify(step, AGENT_FILE, meta), self),
            "optimizer": self.load_state(step, "optimizer", meta)["optimizer"],
            "rng": self.load_state(step, "rng_rank0", meta),
            "replay": self.load_state(step, "replay", meta),
            # written by residual runs since the guard; absent from older checkpoints
            "guard": self.load_state(step, "guard", meta) if "guard.pt" in recorded else None,
            "meta": meta,
            "path": path,
        }


def _is_count(value: Any) -> bool:
    return is_whole(value) and value >= 0


def _is_owed(value: Any) -> bool:
    return is_number(value) and 0.0 <= value < 1.0  # (NaN fails the comparison)


def _is_evals(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(e, dict) and _is_count(e.get("env_steps")) for e in value
    )


def _is_bound(value: Any) -> bool:
    return value is None or (is_number(value) and 0.0 < value <= 1.0)


def _is_object(value: Any) -> bool:
    return isinstance(value, dict)


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


# Each field of an RL checkpoint's state.json a resume or a report reads, with what it must hold. A count
# "x" or null was int()'s traceback, owed NaN or -1e300 resumed with no update ever again (exit 0), an
# episodes count 1.7 was truncated to 1, a policy_bound NaN became "the action contains NaN".
_META_FIELDS: dict[str, tuple[Any, str]] = {
    "env_steps": (_is_count, "a whole number >= 0"),
    "episodes": (_is_count, "a whole number >= 0"),
    "rounds": (_is_count, "a whole number >= 0"),
    "updates": (_is_count, "a whole number >= 0"),
    "owed": (_is_owed, "the fraction of an update owed: a number from 0 to below 1"),
    "evals": (_is_evals, "a list of evaluations, each with its env_steps"),
    "policy_bound": (_is_bound, "null or a number above 0 and at most 1"),
    "guard": (lambda v: v is None or _is_object(v), "null or the guard's state (an object)"),
    "sha256": (_is_object, "an object of file digests"),
    "sha256_files": (_is_object, "an object of file digests"),
    "base_sha256": (_is_digest, "the sha256 of the base bundle (64 hex digits)"),
}


def check_rl_meta(meta: dict[str, Any], ckpts: Checkpoints, step: int) -> dict[str, Any]:
    """``meta`` (a checkpoint's state.json), refused as damaged when a field a resume or a report reads
    holds a value no run writes (the fix: the previous checkpoint)."""
    file = ckpts.path(step) / STATE_DIR / "state.json"
    required = ("env_steps", "episodes", "updates", "owed")
    for name, (ok, words) in _META_FIELDS.items():
        if name not in meta and name not in required:
            continue
        value = meta.get(name)
        if not ok(value):
            raise _damaged_field(ckpts, step, file, name, words, value)
    if meta.get("guard") is not None:
        from actlab.rl.guard import GuardState  # lazy: the guard module imports the statistics

        try:
            GuardState.from_dict(meta["guard"])
        except (TypeError, ValueError) as e:
            raise _damaged_field(
                ckpts, step, file, "guard", "the guard's state as the run wrote it", e
            ) from e
    return meta


def _damaged_field(
    ckpts: Checkpoints, step: int, file: Path, name: str, words: str, found: Any
) -> ActlabError:
    return ActlabError(
        f"checkpoint step {step} is damaged: its state.json holds a value no run writes (edited?)",
        file=file,
        field=name,
        expected=words,
        found=repr(found)[:200],
        fix=ckpts.fallback_fix(step),
    )


def read_tensors(file: Path, ckpts: Checkpoints | None = None) -> dict[str, Any]:
    """The tensors of a safetensors file of an RL run (an agent, a reward model); a file safetensors cannot
    parse is an ActlabError (with ``ckpts``: one that offers the previous checkpoint)."""
    from safetensors.torch import load_file  # lazy: safetensors.torch imports torch

    try:
        return load_file(str(file))
    except Exception as e:  # truncated header, foreign bytes: safetensors raises its own error types
        problem = f"safetensors cannot read it ({type(e).__name__}: {str(e).splitlines()[0][:160]})"
        step_dir = file.parent
        if ckpts is not None:
            raise ckpts.damaged(int(step_dir.name.split("_")[1]), file, problem) from e
        raise ActlabError(
            f"the file is damaged: {problem}",
            file=file,
            expected="a safetensors file as actlab rl wrote it",
            fix="use another checkpoint of the run (checkpoints/step_*), or write the file again",
        ) from e


def read_rl_config(step_dir: Path) -> dict[str, Any]:
    """The RLConfig dict a checkpoint was written with."""
    return read_json(step_dir / CONFIG_FILE, "RL config")
