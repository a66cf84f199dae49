"""A run directory's start: a new run or a resume, and what a resume may change.

Each trainer describes its runs with a :class:`RunKind` (its command, how to recognize its directory,
which flattened config keys may change on a resume); these functions make the decisions the same way for
all of them:

- :func:`check_fresh`: a new run refuses a directory that holds checkpoints or files it did not write; a
  run of its kind that died before its first checkpoint is started over.
- :func:`resume_start`: the step a resume continues from (0: a run without a checkpoint starts over).
- :func:`resume_diff` / :func:`refuse_changes`: the keys of the flattened configs that differ and may not
  (named in the refusal with both values); :func:`config_hash` hashes the keys that may not.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.lifecycle.checkpoints import Checkpoints
from actlab.lifecycle.metrics_log import METRICS_FILE
from actlab.utils.io import read_json
from actlab.utils.kinds import describe
from actlab.utils.lock import LOCK_FILE

# What to do when a run directory is locked by another process (DirLock's ``fix``; {pid}: the holder).
LOCKED_FIX = (
    "wait for that run to finish, or stop it (kill -TERM {pid} writes a checkpoint first) and then continue "
    "it with --resume; to train something else, choose another --out"
)


@dataclasses.dataclass(frozen=True)
class RunKind:
    """What the lifecycle needs to know about one trainer's runs."""

    # what a run is called in messages: "training run", "RL run"
    name: str
    # the command that starts and resumes one: "actlab train"
    command: str
    # the options that start a new run, shown when there is nothing to resume
    start_hint: str
    # whether a directory holds (the start of) a run of this kind
    is_run_dir: Callable[[Path], bool]
    # flattened config keys that may change on a resume; "a." covers every key under section a
    resumable: tuple[str, ...]
    # the article of ``name`` ("an RL run")
    article: str = "a"


def holds_run(out: Path, config_file: str, config_keys: Iterable[str], markers: Iterable[str] = ()) -> bool:
    """Whether ``out`` holds (the start of) a run whose saved config (``config_file``) has ``config_keys``;
    without one (a run stopped before writing it), ``checkpoints/`` or another of the run's ``markers``
    directories. Metrics alone are no run (a run writes its config first): a directory holding only a
    metrics.jsonl of the user's was taken for a run that stopped early and its lines rewritten, and a run
    of the other trainer was "already" one of this kind. A RunKind's ``is_run_dir``."""
    dirs = ("checkpoints", *markers)
    if (out / config_file).exists():
        try:
            saved = read_json(out / config_file, "run config")
        except ActlabError:  # damaged: a resume names it; what else is there decides
            return any((out / d).is_dir() for d in dirs) or (out / METRICS_FILE).is_file()
        return isinstance(saved, dict) and set(config_keys) <= saved.keys()
    return any((out / d).is_dir() for d in dirs)


def check_run_path(out: Path) -> Path:
    """``out`` as a run directory path: refused when a file (not a directory) is there, or a directory of
    another kind (a bundle: ``--resume --out RUN/checkpoints/step_N`` was "unknown config key 'type'"; an
    export; a dataset)."""
    if out.exists() and not out.is_dir():
        raise ActlabError(
            "the output path is a file, not a run directory",
            file=out,
            expected="a new or existing run directory",
            fix="choose another --out",
        )
    kind = describe(out)
    if kind is not None and not kind.startswith(("an actlab training run", "the output of")):
        raise ActlabError(
            "the output path is not a run directory",
            file=out,
            expected="a new or existing run directory (the directory that holds checkpoints/)",
            found=kind,
            fix="pass the run directory itself (see found), or choose another --out",
        )
    return out


def is_resumable(key: str, resumable: Iterable[str]) -> bool:
    """Whether flattened key ``key`` may change on a resume (``"log."`` covers ``"log.every"``)."""
    return any(key == r or (r.endswith(".") and key.startswith(r)) for r in resumable)


def config_hash(flat: Mapping[str, Any], resumable: Iterable[str]) -> str:
    """Hash of a flattened config's keys that must match for a bitwise resume."""
    resumable = tuple(resumable)
    kept = {k: v for k, v in flat.items() if not is_resumable(k, resumable)}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def resume_diff(
    saved: Mapping[str, Any], current: Mapping[str, Any], resumable: Iterable[str]
) -> dict[str, tuple[Any, Any]]:
    """Keys of two flattened configs that differ and may not change on resume: ``{key: (saved, now)}``."""
    resumable = tuple(resumable)
    keys = sorted(set(saved) | set(current))
    return {
        k: (saved.get(k), current.get(k))
        for k in keys
        if saved.get(k) != current.get(k) and not is_resumable(k, resumable)
    }


def refuse_changes(diff: Mapping[str, tuple[Any, Any]], file: Path, fix: str) -> None:
    """Raise the refusal of a resume whose config changed in ``diff`` (no-op when it is empty)."""
    if not diff:
        return
    lines = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in diff.items())
    raise ActlabError(
        "the config differs from the run being resumed in keys that change what is computed",
        file=file,
        field=", ".join(diff),
        expected="the saved values",
        found=lines,
        fix=fix,
    )


def check_fresh(out: Path, ckpts: Checkpoints, kind: RunKind) -> int:
    """0, the step a new run starts from; refuses a directory that holds a run or foreign files."""
    if ckpts.steps() and not kind.is_run_dir(out):
        raise ActlabError(
            f"the output directory holds checkpoints, but it is not {kind.article} {kind.name}",
            file=out,
            expected=f"a new or empty directory (or {kind.article} {kind.name}, with --resume)",
            found=f"{out / 'config.json'} is not the config of {kind.article} {kind.name} ({kind.command})",
            fix=f"choose a new --out directory: {kind.command} never writes into a directory it did not make",
        )
    if ckpts.steps():
        raise ActlabError(
            f"the output directory already holds {kind.article} {kind.name}",
            file=out,
            fix="pass --resume to continue it, or choose another --out",
        )
    if kind.is_run_dir(out):
        # Nothing of value is lost: the run stopped (crash, kill, out of memory) before its first checkpoint.
        print(f"{out} holds a run that stopped before its first checkpoint: starting it over from step 0",
              file=sys.stderr)  # fmt: skip
        return 0
    other = sorted(p.name for p in out.iterdir() if p.name != LOCK_FILE) if out.is_dir() else []
    if other:
        raise ActlabError(
            f"the output directory is not empty and is not an actlab {kind.name}",
            file=out,
            expected="a new or empty directory (or a run directory, with --resume)",
            found=", ".join(other[:5]) + (f" and {len(other) - 5} more" if len(other) > 5 else ""),
            fix=f"choose a new --out directory: {kind.command} never writes into a directory it did not make",
        )
    return 0


def resume_start(out: Path, ckpts: Checkpoints, kind: RunKind) -> int:
    """The step a resume continues from: the newest complete checkpoint, or 0 for a run of this kind
    that stopped before its first; refuses a directory that holds no such run."""
    step = ckpts.last_step()
    # a checkpoint past the resume point without its training state was skipped without a word, then
    # deleted and written again when the resumed run reached its step (other weights, off a CPU)
    stateless = ckpts.stateless_after(step or 0)
    if stateless:
        then = f"continues from {ckpts.path(step).name}" if step is not None else "starts the run over"
        also = (
            f"; or train on from its weights in a new run: actlab train --init-from {stateless[-1]} --out NEW"
            if kind.command == "actlab train"
            else ""
        )
        raise ActlabError(
            f"checkpoint {stateless[-1].name} has no training state: a resume would train past it again and "
            "replace it",
            file=stateless[-1] / "training_state" / "state.json",
            expected="training_state/ in every checkpoint past the one a resume continues from",
            found="missing in " + ", ".join(p.name for p in stateless),
            fix=f"move {'them' if len(stateless) > 1 else 'it'} out of {ckpts.root} (e.g. `mv "
            f"{stateless[-1]} {ckpts.root.parent / ('kept-' + stateless[-1].name)}`) and run the same "
            f"command again: it {then}{also}",
        )
    if step is not None:
        return step
    if not kind.is_run_dir(out):
        raise ActlabError(
            f"nothing to resume: the directory is not an actlab {kind.name}",
            file=out,
            fix=f"start without --resume ({kind.start_hint})",
        )
    # A run that died before its first checkpoint has computed nothing: it restarts from step 0. One whose
    # checkpoints were removed was said to have "stopped before its first".
    why = (
        "its checkpoints were removed"
        if any((out / "checkpoints").glob("*.json"))
        else "the run stopped before its first, or its checkpoints were removed"
    )
    print(f"{out} has no checkpoint ({why}): starting it over from step 0", file=sys.stderr)
    return 0
