"""What a directory is, told by the files that mark it, for errors that refuse a directory of the wrong
kind: ``actlab eval EXPORT`` said "no checkpoint found", ``policy import BUNDLE`` "actlab's ACT has no
counterpart for this LeRobot ACT setting", ``train --resume --out BUNDLE`` "unknown config key 'type'",
``train --init-from RUN`` "unknown policy type 'None'"; each now names what the directory is and what
to pass instead. Only file names are read here (no parsing beyond the output marker), so any layer
may call it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from actlab.errors import ActlabError
from actlab.utils.procs import host_tag, writer_alive

# The marker files, by who writes them:
# actlab.policies.bundle.save_policy: actlab.json beside config.json and model.safetensors
_BUNDLE = "actlab.json"
# actlab.lerobot.export (actlab policy export): actlab_export.json, the source bundle in actlab_bundle/
_EXPORT = "actlab_export.json"
EXPORT_BUNDLE = "actlab_bundle"
# How a bundle file that cannot be read is repaired: no command regenerates one file of a bundle (every
# reader of a bundle's files says it; "repair or regenerate the file" was the fix of some).
BUNDLE_DAMAGED_FIX = (
    "the bundle is damaged or incomplete (an interrupted copy, a bad disk, an edit): use another checkpoint "
    "of its run, or copy the bundle again from its source"
)
# a LeRobot policy directory's config.json that cannot be read (cut short, emptied, edited): the generic
# "repair or regenerate the file" named no command that writes one (25th fault run, imp_cfg_empty)
LEROBOT_CONFIG_FIX = (
    "restore config.json from a copy of the directory; an actlab export is written again by actlab policy "
    "export BUNDLE --to lerobot --out DIR, a lerobot-train checkpoint by its run"
)
# a LeRobot v3 dataset (actlab.datasets.format.INFO_PATH)
_DATASET = "meta/info.json"
# actlab.utils.io.OUTPUT_MARKER: the command that wrote an output directory
_MARKER = ".actlab-output.json"


def describe(path: str | Path) -> str | None:
    """A phrase saying what the directory ``path`` is ("a LeRobot export written by actlab policy
    export; its actlab bundle is P/actlab_bundle"), with what to pass instead where there is one; None
    for a directory none of the markers describe (or not a directory)."""
    p = Path(path)
    if not p.is_dir():
        return None
    if (p / _EXPORT).is_file():
        inner = p / EXPORT_BUNDLE
        there = f"; its actlab bundle is {inner}" if (inner / _BUNDLE).is_file() else ""
        return f"a LeRobot export written by `actlab policy export` (for LeRobot, or --lerobot-policy){there}"
    if (p / _BUNDLE).is_file():
        return (
            f"an actlab policy bundle (a checkpoint; its run directory is {p.parent.parent})"
            if (p.parent.name == "checkpoints")
            else "an actlab policy bundle"
        )
    if (p / "checkpoints").is_dir() and (p / "config.json").is_file():
        return f"an actlab training run (its checkpoints are in {p / 'checkpoints'})"
    if (p / _DATASET).is_file():
        return "a LeRobot dataset"
    if (p / "config.json").is_file() and (p / "model.safetensors").is_file():
        return "a LeRobot pretrained_model directory (for --lerobot-policy, or `actlab policy import`)"
    try:
        kind = json.loads((p / _MARKER).read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        kind = None
    if not isinstance(kind, str):
        return None
    m = _BEING_WRITTEN.fullmatch(p.name)
    if m:  # atomic_dir's .NAME.actlab-HOST-PID-RANDOM.tmp: not an output yet (cc_train_on_partial)
        final = p.with_name(m["name"])
        if m["host"] != host_tag():  # another machine's (a shared disk): its pid means nothing here
            return (
                f"the unfinished output of {kind}, in a temporary directory of another machine (pid "
                f"{m['pid']} there; it becomes {final} when that command ends): pass that directory once "
                "it is there, or run the command again if it was stopped"
            )
        if writer_alive(int(m["pid"]), p):
            return (
                f"the unfinished output of {kind}, in its temporary directory (pid {m['pid']} is still "
                f"writing it; it becomes {final} when the command ends): pass that directory once it is there"
            )
        # a dead writer's: it never becomes the output; "pass that directory once it is there" sent the
        # user to wait for a directory no process would make (21st fault run, pi_sr_*)
        return (
            f"the unfinished output of {kind}, left in its temporary directory by pid {m['pid']}, which died "
            f"before it finished (killed?): it never becomes {final}; run that command again (its next run "
            "removes this leftover), then pass its output"
        )
    return f"the output of {kind}"


# utils.io.atomic_dir's temporary directory of an output NAME
_BEING_WRITTEN = re.compile(r"\.(?P<name>.+)\.actlab-(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]+\.tmp")


def enclosing_kind(path: str | Path, own: Path | None = None) -> tuple[Path, str] | None:
    """``(directory, what it is)`` for the nearest of ``path`` and its parents that :func:`describe` names
    (a dataset, a bundle, an export, a run, another command's output), stopping at ``own`` (the caller's
    own output directory, where its files belong); None when there is none."""
    p = Path(path).expanduser().resolve()
    stop = own.resolve() if own is not None else None
    for d in (p, *p.parents):
        if d == stop:
            return None
        kind = describe(d)
        if kind is not None:
            return d, kind
    return None


def refuse_cache_inside_output(cache_dir: str | Path | None, field: str, own: Path | None = None) -> None:
    """A frame cache is written only into a directory of its own or a run's. ``own``: the run directory
    of the command (train, the demo), where its cache belongs: `--set data.cache_dir=` another dataset, a
    checkpoint or a data view's --out wrote frames/ and stats/ into it, exit 0 (20th fault run). Without
    it (``data cache``, ``bench data``, ``policy doctor``, ``bench train``, ``find-batch-size``: no run
    of their own), a training run's directory is allowed too: ``--cache-dir`` a checkpoint, an export,
    another dataset or another command's output wrote a store into it, exit 0 (23rd)."""
    found = enclosing_kind(cache_dir, own=own) if cache_dir else None
    if found is None or (own is None and found[1].startswith("an actlab training run")):
        return
    expected, example = (
        ("a directory of its own, or one inside --out", "OUT/cache")
        if own is not None
        else (
            "a directory of its own (or a training run's, e.g. RUN/cache)",
            "a new directory beside the dataset",
        )
    )
    raise ActlabError(
        f"{field} lies inside a directory another command wrote",
        file=str(cache_dir),
        field=field,
        expected=expected,
        found=f"{found[0]}: {found[1]}",
        fix=f"choose another {field}, e.g. {example} (nothing was run or written)",
    )


def recorded_digests(bundle: str | Path) -> dict | None:
    """The sha256 of its files a bundle's actlab.json records (file name: hex digest), or None: no
    actlab.json, not JSON, or no such record (the bundle's loader names a damaged one). Read by the checks
    that compare a bundle with what was measured or exported from it: the doctor's sweep, the demo's
    evaluation record, an export's record and its config check."""
    try:
        found = json.loads((Path(bundle) / _BUNDLE).read_text()).get("sha256")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, dict) else None
