"""Whether the demo's finished run is still the one its stages describe, before they are reused.

The demo reuses a stage when its settings are unchanged and its outputs are there. The run's dataset is
compared with the one its last checkpoint was trained on (22nd fault run); the run's checkpoints with the
ones the evaluation measured (23rd): a checkpoint whose weights were replaced, removed or added since (a
resume or copy outside the demo, `cp` of another run's weights) kept the evaluation, the delay sweep and
the report of weights no longer there, exit 0.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

from actlab.datasets import open_dataset
from actlab.datasets.checksums import sha256
from actlab.datasets.sources import damaged_entry, source_record, sources_changed
from actlab.errors import ActlabError
from actlab.training.checkpoint import CheckpointManager
from actlab.training.resume_checks import check_same_dataset
from actlab.utils.io import read_output_marker
from actlab.utils.kinds import recorded_digests

# the key of the evaluation stage's result that records the checkpoints it measured
CHECKPOINTS = "checkpoints"


def check_run_data(train_cfg: Any, run: Path) -> None:
    """Refuse to reuse the finished run when DIR/data is not the dataset it was trained on (a resume's
    identity): an edited row or another recording kept the run and its report, exit 0 (22nd fault run)."""
    ckpts = CheckpointManager(run, train_cfg.checkpoint.keep_last, train_cfg.checkpoint.keep_best)
    last, data = ckpts.last_step(), train_cfg.data.path
    if last is not None:
        problem = "the demo's dataset is not the one its run was trained on (edited or replaced since the "
        problem += "demo recorded it): the run, its evaluation and the report would describe other data"
        fix = f"keep your dataset: move {data} aside and run the demo again (it records and trains anew), "
        fix += f"or train on the dataset as it is now: actlab train --dataset {data} --out NEW_RUN"
        check_same_dataset(train_cfg, ckpts.path(last), problem=problem, fix=fix)


def run_checkpoints(run: Path) -> dict[str, str]:
    """Each checkpoint of ``run`` by name: the sha256 of its weights (missing weights: ""), followed by
    ``+edited:FILE=SHA`` for a config.json, stats.json or features.json that differs from the sha256 its
    actlab.json records, or that it records none of (``FILE=unrecorded:SHA``) (an n_action_steps or a
    stats edit changes what the checkpoint does: the evaluation of the unedited bundle was reused, exit 0;
    25th fault run, dm_ckpt_cfg_edit). An unedited bundle's entry is its weights' sha256 alone, as
    evaluations recorded before."""
    out = {}
    for ckpt in sorted((run / "checkpoints").glob("step_*")):
        weights = ckpt / "model.safetensors"
        out[ckpt.name] = (sha256(weights) if weights.is_file() else "") + _edited_files(ckpt)
    return out


def _edited_files(ckpt: Path) -> str:
    recorded = recorded_digests(ckpt) or {}  # (the bundle's loader names a damaged actlab.json)
    edited = []
    for name in ("config.json", "stats.json", "features.json"):
        want, path = recorded.get(name), ckpt / name
        if not path.is_file():
            continue
        # a file actlab.json records no digest of is entered by its own: its record removed and the file
        # edited, the unedited bundle's evaluation was reused (27th fault run, dm_ckpt_cfg_edit_sha_key_rm2)
        if not isinstance(want, str):
            edited.append(f"{name}=unrecorded:{sha256(path)[:16]}")
        elif (now := sha256(path)) != want:
            edited.append(f"{name}={now[:16]}")
    return "+edited:" + ",".join(edited) if edited else ""


def evaluation_outdated(entry: Any, run: Path, stream: TextIO = sys.stderr) -> bool:
    """True (said on ``stream``) when the run's checkpoints are not the ones the recorded evaluation
    measured; False when they are, or when the entry predates the record (it cannot be told)."""
    result = entry.get("result") if isinstance(entry, dict) else None
    recorded = result.get(CHECKPOINTS) if isinstance(result, dict) else None
    if not isinstance(recorded, dict):
        return False
    now = run_checkpoints(run)
    changed = [f"{n} removed" for n in recorded if n not in now]
    changed += [f"{n} added" for n in now if n not in recorded]
    changed += [
        f"{n}'s " + ("files were edited" if "+edited:" in now[n] else "weights differ")
        for n in now
        if n in recorded and now[n] != recorded[n]
    ]
    if changed and not now:
        raise ActlabError(
            "the demo's run has no checkpoint left to evaluate",
            file=run / "checkpoints",
            expected=f"the checkpoints it evaluated: {', '.join(recorded)}",
            found=", ".join(changed),
            fix="restore the checkpoints, or run the demo again with --fresh (every stage runs again)",
        )
    if changed:
        print(
            f"      the run's checkpoints changed since they were evaluated ({', '.join(changed)}): "
            "evaluating them again",
            file=stream,
            flush=True,
        )
    return bool(changed)


# what a demo directory holds besides its state file: its outputs, by which a directory whose state file
# was deleted is told from a directory the demo never made
DEMO_OUTPUTS = ("data", "run", "summary.json")


def check_is_demo_dir(out: Path, state_file: str, lock_file: str) -> None:
    """Refuse an --out that is not a directory, or a non-empty one without the demo's state file: a run
    replaces data/, run/ and eval/ in it and --fresh deletes it. A demo's directory whose state file is
    gone is refused too, named as such: "a directory that actlab demo did not create", fix "choose another
    --out", blamed the wrong cause for a directory it did create (24th fault run, demo_state_removed)."""
    if not out.is_dir():
        raise ActlabError("the demo's output path is not a directory", file=out, fix="choose another --out")
    # (the lock file alone: a demo killed between taking the lock and writing the state file)
    if any(p.name != lock_file for p in out.iterdir()) and not (out / state_file).is_file():
        if all((out / name).exists() for name in DEMO_OUTPUTS):
            raise ActlabError(
                f"the demo directory has lost its {state_file}: without it nothing tells which stages "
                "finished, and the demo does not replace or delete the directory (--fresh neither)",
                file=out / state_file,
                expected=f"the {state_file} the demo wrote beside {', '.join(DEMO_OUTPUTS)}",
                found="missing (deleted or moved?)",
                fix=f"restore {state_file} from a copy; or keep what you need of {out} and delete it "
                "yourself, then run the demo again (it starts over); or choose another --out",
            )
        raise ActlabError(
            "refusing to write into (or delete) a directory that actlab demo did not create",
            file=out,
            expected=f"a new or empty directory, or a demo output directory (with {state_file})",
            found="a non-empty directory without it",
            fix="choose another --out",
        )


def data_sources(data: Path) -> dict[str, dict[str, Any]]:
    """Each file of the demo's dataset (its videos and data files), for the record stage's entry: sha256
    with inode and ctime, as a frame store records its sources (23rd fault run)."""
    ds = open_dataset(data)
    try:
        return source_record(ds, ds.video_keys, data=True)
    finally:
        ds.close()


def check_data_sources(entry: Any, data: Path) -> None:
    """Refuse to reuse the recording when a file of DIR/data changed since the demo recorded it: a video
    edited in its middle with its size and mtime kept (the run's dataset identity hashes the metadata and
    rows, not the videos) kept the recording, the run trained on the old frames, its evaluation and
    report, exit 0 (24th fault run, reuse_demo_video_mid). An entry without the record (an earlier
    actlab's) is taken as it is."""
    record = entry.get("sources") if isinstance(entry, dict) else None
    if not isinstance(record, dict):
        return
    if (
        bad := damaged_entry(record)
    ) is not None:  # (was.get's AttributeError traceback: 26th fault run, dm_rec_sources_entry_str)
        state_file = data.parent / "demo_state.json"
        raise ActlabError(
            "the demo's record of its dataset's files is damaged",
            file=state_file,
            field=f"record.sources[{bad[0]!r}]",
            expected="the file's sha256, size, inode and ctime, as the demo wrote them",
            found=repr(bad[1])[:120],
            fix=f"restore {state_file} from a copy, or run the demo again with --fresh (it records and "
            "trains anew)",
        )
    ds = open_dataset(data)
    try:
        changed = sources_changed(ds, record, since="since the demo recorded it")
    finally:
        ds.close()
    if changed:
        raise ActlabError(
            "the demo's dataset changed since the demo recorded it: its run was trained on the files as "
            "they were, and the run, its evaluation and the report would describe other data",
            file=data,
            found=changed,
            fix=f"keep your dataset: move {data} aside and run the demo again (it records and trains anew), "
            f"or train on the dataset as it is now: actlab train --dataset {data} --out NEW_RUN",
        )


# The directories each stage writes whole (each with its output marker): a stage is reused only while they
# hold what it wrote. `actlab eval --out DIR/eval/best --overwrite` replaced the demo's confirmation with
# another evaluation (eval's own kind), and the next demo reused the stage: its report linked videos and
# whiskers no longer there, its numbers of an evaluation gone, exit 0 (26th fault run,
# dm_best_dir_overwritten_by_eval).
STAGE_DIRS = {"eval": ("eval/sweep", "eval/best"), "realtime": ("eval/realtime",)}


def stage_markers(out: Path, stage: str) -> dict[str, Any]:
    """``{"markers": {dir: token}}``: the output markers' tokens of the directories ``stage`` wrote, for its
    demo_state.json entry; ``{}`` for a stage without such directories."""
    if stage not in STAGE_DIRS:
        return {}
    tokens = {}
    for rel in STAGE_DIRS[stage]:
        marker = read_output_marker(out / rel)
        if marker is not None:
            tokens[rel] = marker.get("token")
    return {"markers": tokens}


def stage_rewritten(entry: dict[str, Any], out: Path, stage: str) -> str | None:
    """The directories of ``stage`` another command wrote again since the stage recorded their markers
    (None: none). An entry written before the record is said and taken as it is, and records them from
    now on (saved with the state at the next finished stage)."""
    now = stage_markers(out, stage).get("markers")
    markers = entry.get("markers")
    if now is None:
        return None
    if markers is None:
        entry["markers"] = now
        if now:
            print(
                f"      the {stage} stage's entry predates the record of its directories ({', '.join(now)}): "
                "taken as they are (--fresh starts over)",
                file=sys.stderr,
                flush=True,
            )
        return None
    if not isinstance(markers, dict) or markers == now:
        return None if isinstance(markers, dict) else "demo_state.json's markers (damaged)"
    return ", ".join(sorted(k for k in set(markers) | set(now) if markers.get(k) != now.get(k)))
