"""Checkpoint directories of a run: atomic writes, digests verified at load, pointers, retention.

Layout under ``run_dir/checkpoints``::

    step_0001000/                        what the trainer writes (a policy bundle, an RL agent, ...)
        training_state/state.json        step, val loss, the trainer's meta, sha256 of the state files
        training_state/NAME.pt           torch state (optimizer, RNG, replay, ...); read with weights_only
    last.json                            {"step", "path", "val_loss"} of the newest complete checkpoint
    best.json                            the same for the lowest validation loss (``keep_best``)

A checkpoint is written under a hidden temporary name (``.step_N.PID.tmp``) and renamed into place only
when complete, so a kill at any moment leaves either the previous set of checkpoints or the new one, never
a half-written one. Pointers are rewritten atomically after the rename; retention deletes old directories
last. ``state.json["sha256"]`` holds the digest of every ``training_state/*.pt`` file and
``state.json["sha256_files"]`` that of the other files the trainer asks to protect (paths relative to the
checkpoint directory); both are checked before a file is read for a resume. Checkpoints written before a
digest was recorded are read unchecked.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.utils.config import is_whole
from actlab.utils.io import (
    atomic_write_bytes,
    atomic_write_json,
    file_sha256,
    fsync_dir,
    name_file,
    read_json,
    require_file,
)

STEP_DIR = re.compile(r"^step_(\d{7,})$")
STATE_DIR = "training_state"
STATE_FILE = "state.json"


def read_pointer(file: str | Path) -> dict[str, Any]:
    """``last.json`` / ``best.json``: an object whose ``step`` is a step and whose ``path`` names that
    step's directory beside it. Anything else is refused naming the file (``{}`` was a KeyError traceback
    of a resume, and a ``path`` of ``../..`` would have been evaluated by ``rl report``)."""
    file = Path(file)
    data = read_json(file, f"checkpoint pointer {file.name}")
    step, name = data.get("step"), data.get("path")
    is_step = is_whole(step) and step >= 0
    if not is_step or name != step_dir_name(step):
        raise ActlabError(
            f"checkpoint pointer {file.name} is damaged",
            file=file,
            expected='{"step": N, "path": "step_NNNNNNN", ...} naming a checkpoint beside it',
            found=f"step {step!r}, path {name!r}"[:200],
            fix=f"delete {file} (a resume writes it again from the checkpoints themselves)",
        )
    return data


def step_dir_name(step: int) -> str:
    return f"step_{step:07d}"


class Checkpoints:
    """Writes, lists, prunes and reads the checkpoints of one run directory (one writer process).

    ``command`` is the command that resumes a run (``actlab train``), named in the advice of errors."""

    def __init__(
        self, run_dir: str | Path, keep_last: int, keep_best: bool, command: str = "actlab train"
    ) -> None:
        self.root = Path(run_dir) / "checkpoints"
        self.keep_last = keep_last
        self.keep_best = keep_best
        self.command = command

    # ----------------------------------------------------------------------------------------- listing
    def steps(self) -> list[int]:
        """Steps of every complete checkpoint directory, ascending."""
        if not self.root.is_dir():
            return []
        found = []
        for p in self.root.iterdir():
            m = STEP_DIR.match(p.name)
            if m and p.is_dir() and (p / STATE_DIR / STATE_FILE).is_file():
                found.append(int(m.group(1)))
        return sorted(found)

    def stateless_after(self, step: int) -> list[Path]:
        """``step_N`` directories past ``step`` that hold no ``training_state/state.json``: a writer renames
        a checkpoint into place only complete, so these lost their state afterwards (a bundle kept for its
        weights, the training state deleted to save disk)."""
        if not self.root.is_dir():
            return []
        found = []
        for p in self.root.iterdir():
            m = STEP_DIR.match(p.name)
            if m and int(m.group(1)) > step and p.is_dir() and not (p / STATE_DIR / STATE_FILE).is_file():
                found.append((int(m.group(1)), p))
        return [p for _, p in sorted(found)]

    def path(self, step: int) -> Path:
        return self.root / step_dir_name(step)

    def pointer(self, which: str) -> dict[str, Any] | None:
        """Contents of ``last.json`` / ``best.json``, or None if absent."""
        p = self.root / f"{which}.json"
        return read_pointer(p) if p.is_file() else None

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

    def meta(self, step: int) -> dict[str, Any]:
        """``training_state/state.json`` of checkpoint ``step``; refused when the step it records is not
        the directory's (an edited ``env_steps`` resumed an RL run at step 99 from ``step_0003000`` and
        wrote its checkpoints under the wrong numbers, exit 0)."""
        file = self.path(step) / STATE_DIR / STATE_FILE
        try:
            meta = read_json(file, "checkpoint state")
        except ActlabError as e:  # cut short, overwritten, gone: the fix is the previous checkpoint, not
            raise self.damaged(step, file, e.problem) from e  # "repair or regenerate the file"
        counters = {k: meta[k] for k in ("step", "env_steps") if k in meta}  # env_steps: an RL run's step
        if any(v != step for v in counters.values()):
            found = ", ".join(f"{k} {v!r}" for k, v in counters.items())
            raise self.damaged(step, file, f"it records {found}, not the step of its directory")
        return meta

    # ------------------------------------------------------------------------------------------ saving
    def write(
        self,
        step: int,
        write_files: Callable[[Path], None],
        state: dict[str, Any],
        meta: dict[str, Any],
        val_loss: float | None,
        protect: Iterable[str] = (),
    ) -> Path:
        """Write checkpoint ``step`` atomically, update ``last.json``/``best.json``, prune old ones.

        ``write_files(tmp_dir)`` writes the trainer's own files into the checkpoint under construction;
        ``state`` maps names to objects saved as ``training_state/NAME.pt`` with ``torch.save``;
        ``protect`` names files written by ``write_files`` whose digest is recorded and checked at load."""
        final = self.path(step)
        tmp = self.root / f".{final.name}.{os.getpid()}.tmp"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            write_files(tmp)
            state_dir = tmp / STATE_DIR
            state_dir.mkdir()
            for name, obj in state.items():
                _save_torch(obj, state_dir / f"{name}.pt")
            # the sha256 of each state file, checked at resume (a truncated or altered optimizer.pt)
            digests = {f.name: file_sha256(f) for f in sorted(state_dir.glob("*.pt"))}
            full_meta = {**meta, "step": step, "val_loss": val_loss, "written_at": time.time()}
            full_meta["sha256"] = digests
            protect = list(protect)
            if protect:
                full_meta["sha256_files"] = {name: file_sha256(tmp / name) for name in protect}
            atomic_write_json(state_dir / STATE_FILE, full_meta)
            if final.exists():  # a resumed run re-reaching a step it had written before being killed
                shutil.rmtree(final)
            os.replace(tmp, final)
            fsync_dir(self.root)
        except BaseException as e:
            shutil.rmtree(tmp, ignore_errors=True)  # the previous checkpoints are untouched
            if isinstance(e, OSError) and (e.filename is None or str(e.filename).startswith(str(tmp))):
                name_file(e, str(final))  # a failed write() names no file, or a temporary one
            raise
        try:
            self._update_pointers(step, val_loss)
            self.prune()
        except OSError as e:  # e.g. a full disk: the new checkpoint is complete, resume repairs the rest
            if e.filename is None:
                name_file(e, str(self.root / "last.json"))
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
        of that checkpoint and the end of :meth:`write` left undone: ``last.json`` names it, ``best.json``
        has seen its validation loss, retention has run."""
        val = self.meta(step).get("val_loss")
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
    def require(self, step: int, files: Iterable[Path], what: str) -> None:
        """Refuse a checkpoint that lacks one of ``files`` (``what``: the command that writes them)."""
        for f in files:
            expected = f"a file written by {what}"
            require_file(f, "checkpoint is incomplete", expected=expected, fix=self.fallback_fix(step))

    def verify(self, step: int, name: str, meta: dict[str, Any]) -> Path:
        """Check file ``name`` (relative to the checkpoint directory) against the digest recorded in
        ``meta["sha256_files"]`` at save; returns its path. An unrecorded file is loaded with a warning."""
        file = self.path(step) / name
        want = _recorded_digest(meta, "sha256_files", name, file)
        if want is not None and file_sha256(file) != want:
            raise self.damaged(step, file, "its content differs from what was saved (sha256)")
        return file

    def load_state(self, step: int, name: str, meta: dict[str, Any]) -> Any:
        """``torch.load`` of ``training_state/NAME.pt``, checked against the sha256 recorded in state.json
        at save (one it does not record is loaded with a warning). A damaged file (truncated,
        overwritten, or holding pickled objects that weights_only refuses) is an ActlabError that offers
        the previous intact checkpoint, never torch's advice to load it with weights_only=False."""
        import torch  # lazy: listing and pruning checkpoints must not import torch

        file = self.path(step) / STATE_DIR / f"{name}.pt"
        want = _recorded_digest(meta, "sha256", file.name, file)
        if want is not None and file_sha256(file) != want:
            raise self.damaged(step, file, "its content differs from what was saved (sha256)")
        try:
            # weights_only=True: a checkpoint is user input and must never be unpickled.
            return torch.load(file, map_location="cpu", weights_only=True)
        except Exception as e:  # truncated zip, foreign bytes, or pickled objects weights_only refuses
            problem = f"torch cannot read it safely ({type(e).__name__}: {str(e).splitlines()[0][:160]})"
            raise self.damaged(step, file, problem) from e

    def damaged(self, step: int, file: Path, problem: str) -> ActlabError:
        """The error for a damaged file of checkpoint ``step``."""
        return ActlabError(
            f"checkpoint step {step} is damaged: {problem}",
            file=file,
            expected=f"the training state {self.command} wrote",
            fix=self.fallback_fix(step),
        )

    def fallback_fix(self, step: int) -> str:
        """How to resume from the newest checkpoint before ``step`` (resume takes the newest one)."""
        earlier = [s for s in self.steps() if s < step]
        aside = f"mv {self.path(step)} {self.root / ('damaged-' + step_dir_name(step))}"
        if not earlier:
            return f"no earlier checkpoint in {self.root}: start a new run (or restore {self.path(step)})"
        return (
            f"move the damaged checkpoint out of the way (`{aside}`) and run the same command again: it "
            f"takes {step_dir_name(earlier[-1])}, the previous checkpoint (`{self.command} --resume` "
            "continues from it; a report or an evaluation of the run directory reads it) (never load the "
            "file with weights_only=False: that runs whatever code it holds)"
        )


def _save_torch(obj: Any, path: Path) -> None:
    """``torch.save`` into memory, then one plain file write. Why: torch's own file writer reports a
    failed write (a full disk) as a RuntimeError without errno ("unexpected pos ..."); a Python write
    raises OSError(ENOSPC) that the trainer can name. The buffer is the size of the file."""
    import torch  # lazy: listing and pruning checkpoints must not import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getbuffer())


def _recorded_digest(meta: dict[str, Any], key: str, name: str, file: Path) -> str | None:
    """The sha256 ``meta[key]`` records for ``name``, or None, said: the file is loaded unverified. A
    record removed, emptied or edited let a zeroed optimizer state, rng state or agent load without a word,
    the resume going on from it, exit 0 (27th fault run, rs_opt_sha_rm_zero, rl_agent_sha_rm_zero2)."""
    recorded = meta.get(key)
    want = recorded.get(name) if isinstance(recorded, dict) else None
    if isinstance(want, str):
        return want
    warnings.warn(
        f"{file} is not verified: its checkpoint's record (training_state/state.json {key}) holds no "
        f"sha256 of it (written by an actlab older than the record, or the record was edited)",
        stacklevel=3,
    )
    return None
