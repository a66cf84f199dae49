"""Checkpoint directories: atomic writes, keep-last-K plus best, resume state.

Layout of a run directory::

    checkpoints/step_0001000/            a policy bundle (load_policy), loadable by evaluation alone
        training_state/state.json        step, config hash, world size, val loss, sampler + numpy/python RNG
        training_state/optimizer.pt      optimizer + scheduler state (torch.save; read with weights_only=True)
        training_state/rng_rank{r}.pt    torch CPU/CUDA RNG and augmentation generator state of rank r
    checkpoints/last.json                {"step", "path", "val_loss"} of the newest complete checkpoint
    checkpoints/best.json                the same for the lowest validation loss

A checkpoint is written under a hidden temporary name and renamed into place only when complete, so a
kill at any moment leaves either the previous set of checkpoints or the new one, never a half-written one.
Pointers are rewritten atomically after the rename; retention deletes old directories last.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.utils.io import atomic_write_bytes, atomic_write_json, fsync_dir, read_json

STEP_DIR = re.compile(r"^step_(\d{7,})$")


def step_dir_name(step: int) -> str:
    return f"step_{step:07d}"


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


class CheckpointManager:
    """Writes, lists, prunes and reads the checkpoints of one run directory (rank 0 writes only)."""

    def __init__(self, run_dir: str | Path, keep_last: int, keep_best: bool) -> None:
        self.root = Path(run_dir) / "checkpoints"
        self.keep_last = keep_last
        self.keep_best = keep_best

    # ----------------------------------------------------------------------------------------- listing
    def steps(self) -> list[int]:
        """Steps of every complete checkpoint directory, ascending."""
        if not self.root.is_dir():
            return []
        found = []
        for p in self.root.iterdir():
            m = STEP_DIR.match(p.name)
            if m and p.is_dir() and (p / "training_state" / "state.json").is_file():
                found.append(int(m.group(1)))
        return sorted(found)

    def path(self, step: int) -> Path:
        return self.root / step_dir_name(step)

    def pointer(self, which: str) -> dict[str, Any] | None:
        """Contents of ``last.json`` / ``best.json``, or None if absent."""
        p = self.root / f"{which}.json"
        return read_json(p, f"checkpoint pointer {which}.json") if p.is_file() else None

    def last_step(self) -> int | None:
        """The newest complete checkpoint. A directory only gets its ``step_`` name once complete, and
        ``last.json`` is rewritten after that rename, so the newest directory wins over the pointer."""
        steps = self.steps()
        return steps[-1] if steps else None

    def bytes_on_disk(self) -> int:
        total = 0
        if self.root.is_dir():
            for dirpath, _, files in os.walk(self.root):
                for f in files:
                    with contextlib.suppress(OSError):
                        total += os.path.getsize(os.path.join(dirpath, f))
        return total

    def clean_partial(self) -> None:
        """Delete temporary directories left by a run killed in the middle of a write or a deletion."""
        if self.root.is_dir():
            for p in self.root.iterdir():
                if p.name.startswith(".step_") and p.is_dir():
                    shutil.rmtree(p, ignore_errors=True)

    # ------------------------------------------------------------------------------------------ saving
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
        from actlab.policies.bundle import file_sha256

        final = self.path(step)
        tmp = self.root / f".{final.name}.{os.getpid()}.tmp"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            write_bundle(policy, tmp, extra=bundle_extra)  # the files of save_policy's bundle
            state_dir = tmp / "training_state"
            state_dir.mkdir()
            optim = {"optimizer": optimizer_state, "scheduler": scheduler_state}
            _save_torch(optim, state_dir / "optimizer.pt")
            for rank, rng in enumerate(rng_per_rank):
                _save_torch(rng, state_dir / f"rng_rank{rank}.pt")
            # the sha256 of each state file, checked at resume (a truncated or altered optimizer.pt)
            digests = {f.name: file_sha256(f) for f in sorted(state_dir.glob("*.pt"))}
            full_meta = {**meta, "step": step, "val_loss": val_loss, "written_at": time.time()}
            full_meta["sha256"] = digests
            atomic_write_json(state_dir / "state.json", full_meta)
            if final.exists():  # a resumed run re-reaching a step it had written before being killed
                shutil.rmtree(final)
            os.replace(tmp, final)
            fsync_dir(self.root)
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)  # the previous checkpoints are untouched
            if isinstance(e, OSError) and (e.filename is None or str(e.filename).startswith(str(tmp))):
                e.filename = str(final)  # a failed write() names no file, or a temporary one: the checkpoint
            raise
        try:
            self._update_pointers(step, val_loss)
            self.prune()
        except OSError as e:  # e.g. a full disk: the new checkpoint is complete, resume repairs the rest
            if e.filename is None:
                e.filename = str(self.root / "last.json")
            raise
        return final

    def _update_pointers(self, step: int, val_loss: float | None) -> None:
        entry = {"step": step, "path": step_dir_name(step), "val_loss": val_loss}
        atomic_write_json(self.root / "last.json", entry)
        if not self.keep_best or val_loss is None:
            return
        best = self.pointer("best")
        best_alive = best is not None and self.path(int(best["step"])).is_dir()
        if not best_alive or best.get("val_loss") is None or val_loss < float(best["val_loss"]):
            atomic_write_json(self.root / "best.json", entry)

    def prune(self) -> None:
        """Delete checkpoints that are neither among the newest ``keep_last`` nor the best.

        A ``best.json`` left pointing at a deleted directory (``keep_best`` turned off on a resume) is
        removed with it, so a pointer never names a checkpoint that is gone.
        """
        steps = self.steps()
        keep = set(steps[-self.keep_last :])
        best = self.pointer("best")
        if best is not None and self.keep_best:
            keep.add(int(best["step"]))
        last = self.pointer("last")
        if last is not None:  # never the checkpoint last.json names, whatever the listing says
            keep.add(int(last["step"]))
        for s in steps:
            if s not in keep:
                self._delete(s)
        if best is not None and not self.path(int(best["step"])).is_dir():
            (self.root / "best.json").unlink(missing_ok=True)

    def _delete(self, step: int) -> None:
        """Remove a checkpoint directory: renamed to a hidden temporary name first, so a kill in the middle
        of the deletion leaves a directory that :meth:`clean_partial` removes, never a ``step_`` directory
        with part of its files gone."""
        path = self.path(step)
        trash = self.root / f".{path.name}.{os.getpid()}.del"
        try:
            os.replace(path, trash)
        except OSError:
            trash = path
        shutil.rmtree(trash, ignore_errors=True)

    def repair_pointers(self, step: int) -> None:
        """On resume from ``step`` (the newest complete checkpoint): finish what a kill between the rename
        of that checkpoint and the end of :meth:`save` left undone: ``last.json`` names it, ``best.json``
        has seen its validation loss, retention has run."""
        meta = read_json(self.path(step) / "training_state" / "state.json", "checkpoint state")
        val = meta.get("val_loss")
        self._update_pointers(step, float(val) if val is not None else None)
        self.prune()

    def truncate_after(self, step: int) -> None:
        """On resume from ``step``: forget checkpoints a killed run wrote past it (they are recomputed)."""
        for s in self.steps():
            if s > step:
                self._delete(s)
        best = self.pointer("best")
        if best is not None and int(best["step"]) > step:
            (self.root / "best.json").unlink()

    # ----------------------------------------------------------------------------------------- loading
    def load(self, step: int, rank: int) -> ResumeState:
        """Read the training state of checkpoint ``step`` for process ``rank`` (weights are loaded apart)."""
        path = self.path(step)
        state_dir = path / "training_state"
        meta = read_json(state_dir / "state.json", "checkpoint state")
        rng_file = state_dir / f"rng_rank{rank}.pt"
        for f in (state_dir / "optimizer.pt", rng_file):
            if not f.is_file():
                raise ActlabError(
                    "checkpoint is incomplete",
                    file=f,
                    expected="a file written by actlab train",
                    found="missing",
                    fix="resume from another checkpoint or start a new run",
                )
        opt = self._load_torch(step, state_dir / "optimizer.pt", meta)
        rng = self._load_torch(step, rng_file, meta)
        return ResumeState(
            step=step, path=path, meta=meta, optimizer=opt["optimizer"], scheduler=opt["scheduler"], rng=rng
        )

    def _load_torch(self, step: int, file: Path, meta: dict[str, Any]) -> Any:
        """``torch.load`` of a training-state file, checked against the sha256 recorded in state.json at
        save (checkpoints written before it was recorded are not checked). A damaged file (truncated,
        overwritten, or holding pickled objects that weights_only refuses) is an ActlabError that offers
        the previous intact checkpoint, never torch's advice to load it with weights_only=False."""
        import torch

        from actlab.policies.bundle import file_sha256

        want = (meta.get("sha256") or {}).get(file.name) if isinstance(meta.get("sha256"), dict) else None
        problem = None
        if isinstance(want, str) and file_sha256(file) != want:
            problem = "its content differs from what was saved"
        else:
            try:
                # weights_only=True: a checkpoint is user input and must never be unpickled.
                return torch.load(file, map_location="cpu", weights_only=True)
            except Exception as e:  # truncated zip, foreign bytes, or pickled objects weights_only refuses
                problem = f"torch cannot read it safely ({type(e).__name__}: {str(e).splitlines()[0][:160]})"
        raise ActlabError(
            f"checkpoint step {step} is damaged: {problem}",
            file=file,
            expected="the training state actlab train wrote",
            fix=self._fallback_fix(step),
        )

    def _fallback_fix(self, step: int) -> str:
        """How to resume from the newest checkpoint before ``step`` (resume takes the newest one)."""
        earlier = [s for s in self.steps() if s < step]
        aside = f"mv {self.path(step)} {self.root / ('damaged-' + step_dir_name(step))}"
        if not earlier:
            return f"no earlier checkpoint in {self.root}: start a new run (or restore {self.path(step)})"
        return (
            f"move the damaged checkpoint out of the way (`{aside}`) and run the same `actlab train "
            f"--resume` again: it continues from {step_dir_name(earlier[-1])}, the previous checkpoint "
            "(never load the file with weights_only=False: that runs whatever code it holds)"
        )


def _save_torch(obj: Any, path: Path) -> None:
    """``torch.save`` into memory, then one plain file write. Why: torch's own file writer reports a
    failed write (a full disk) as a RuntimeError without errno ("unexpected pos ..."); a Python write
    raises OSError(ENOSPC) that the trainer can name. The buffer is the size of the file."""
    import io

    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getbuffer())


def jsonable(obj: Any) -> Any:
    """numpy arrays and scalars inside sampler / RNG states -> plain JSON values."""
    return json.loads(json.dumps(obj, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o)))
