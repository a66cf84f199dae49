"""What a resume checks of a run directory before it trains (split from training.loop): that the run's
config.json is the one its checkpoint was trained with, that the run's dataset is still there, and that it
is the same dataset."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from actlab.datasets import open_dataset
from actlab.datasets.sources import damaged_entry, sources_changed
from actlab.errors import ActlabError
from actlab.training.checkpoint import CheckpointManager
from actlab.training.config import TrainConfig, config_hash
from actlab.utils.io import read_json
from actlab.utils.kinds import BUNDLE_DAMAGED_FIX

CONFIG_FILE = "config.json"


def check_config_unedited(saved: TrainConfig, out: Path, ckpts: CheckpointManager, step: int) -> None:
    """Refuse a resume of a run whose config.json was edited after checkpoint ``step`` was written: the
    hash of its keys that change what is computed, recorded in the checkpoint, differs. An edited
    ``policy.dim_model`` was a traceback of torch's load_state_dict; an edited ``optim.lr`` resumed with
    it, exit 0, where ``--set optim.lr=`` is refused. The policy keys are named (the checkpoint keeps its
    policy's config.json); other keys only show in the hash."""
    written = ckpts.meta(step).get("config_hash")
    if written is None or written == config_hash(saved):
        return
    import json

    from actlab.utils import config as cfgutil  # lazy: only a refusal names the keys

    ckpt = ckpts.path(step)
    named = []
    try:
        own = json.loads((ckpt / "config.json").read_text())
        now = json.loads(json.dumps(cfgutil.to_dict(saved.policy), default=str))
        named = [
            f"policy.{k}: {own[k]!r} -> {now[k]!r}" for k in sorted(own) if k in now and own[k] != now[k]
        ]
    except (OSError, ValueError, TypeError):  # the checkpoint's own reader names a damaged file later
        pass
    raise ActlabError(
        f"the run's config.json was changed after checkpoint {ckpt.name} was written: the resume would "
        "continue that checkpoint under another config",
        file=out / CONFIG_FILE,
        field=", ".join(n.split(":")[0] for n in named) or "config.json",
        expected=f"the config {ckpt.name} was trained with (config_hash {written}, in its "
        "training_state/state.json)",
        found="; ".join(named) or f"config_hash {config_hash(saved)}: a key outside policy.* differs",
        fix=f"undo the edit of {out / CONFIG_FILE}; to train on under another config, start a new run from "
        f"the checkpoint's weights: actlab train --init-from {ckpt} --out NEW ... (nothing was trained)",
    )


def check_dataset_present(cfg: TrainConfig) -> None:
    """Refuse a resume whose dataset moved away, naming the fix: ``--dataset`` (a resume may change
    ``data.path``); it was "dataset directory not found, fix: check the path"."""
    path = Path(cfg.data.path)
    if path.is_absolute() and not path.exists():  # (a relative path or a Hub repo id: the reader's)
        raise ActlabError(
            "the run's dataset is not where it was",
            file=cfg.data.path,
            field="data.path",
            expected="the dataset the run was trained on",
            found="no directory there (moved or removed?)",
            fix="resume with --dataset PATH where the dataset (or a copy of it) is now",
        )


def _videos_changed(saved: dict[str, Any], ds: Any, ckpt: Path) -> str | None:
    """What changed in the videos the checkpoint recorded (None: nothing). The identity hashes meta/ and
    the rows, not the videos: a video replaced or edited in its middle with its size and mtime kept
    resumed on other frames, exit 0 (the frame store then rebuilt from it, with a word at best; 25th fault
    run). A file with the recorded inode and ctime costs a stat; any other (a copy) is hashed once. A
    checkpoint written before this record is said and resumed: its videos cannot be compared."""
    record = saved.get("videos")
    if not isinstance(record, dict):
        if ds.video_keys:
            print(f"{ckpt} predates the record of its videos: they are not compared (a frame store "
                  "rebuilds from a video that changed, and says so)", file=sys.stderr)  # fmt: skip
        return None
    # an entry that is not a file's record was a traceback of the comparison (`'str' object has no
    # attribute 'get'`, 26th fault run, rs_vid_entry_str): the checkpoint's record is named
    if (bad := damaged_entry(record)) is not None:
        raise ActlabError(
            f"{ckpt.name}'s record of the videos its run reads is damaged",
            file=ckpt / "actlab.json",
            field=f"extra.train.dataset.videos[{bad[0]!r}]",
            expected="the video's sha256, size, inode and ctime, as the training wrote them",
            found=repr(bad[1])[:120],
            fix=f"restore {ckpt / 'actlab.json'} from a copy, or resume from another checkpoint of the "
            "run (move this one away); the weights are not affected",
        )
    return sources_changed(ds, record, since=f"since {ckpt.name} was trained on it")


def check_same_dataset(
    cfg: TrainConfig, ckpt: Path, problem: str | None = None, fix: str | None = None
) -> None:
    """Refuse a resume whose dataset is not the one checkpoint ``ckpt`` was trained on, by identity
    (episode and frame counts and a hash of the metadata's contents: see LeRobotV3Dataset.identity), not
    by path: a directory replaced by another recording under the same name was decoded into a new frame
    cache and trained on, exit 0. A copy elsewhere (``--dataset COPY``) is the same dataset. A checkpoint
    written before identities were recorded is compared by its episode and frame counts, and says so.
    ``problem`` / ``fix``: the refusal's words for another caller (the demo reusing its run)."""
    meta = read_json(ckpt / "actlab.json", "checkpoint bundle metadata", fix=BUNDLE_DAMAGED_FIX)
    saved = ((meta.get("extra") or {}).get("train") or {}).get("dataset") or {}
    if not cfg.data.path:  # `--preset P --resume`: the preset's empty path was the current directory
        raise ActlabError(
            "no dataset given for the resume",
            field="data.path",
            expected=f"the dataset of {ckpt.name} (recorded as {saved.get('path', '?')})",
            found="--preset replaced the run's saved config, and a preset names no dataset",
            fix="leave --preset out (a resume takes the run's saved config, its dataset included), or pass "
            "--dataset PATH",
        )
    ds = open_dataset(cfg.data.path)
    try:
        now = ds.identity
        expected = saved.get("identity")
        if not isinstance(expected, dict):
            expected = {k: saved[k] for k in ("episodes", "frames") if k in saved}
            print(f"{ckpt} predates dataset identities: the dataset is compared by its episode and frame "
                  "counts only", file=sys.stderr)  # fmt: skip
        changed = [f"{k}: {expected[k]} -> {now.get(k)}" for k in expected if expected[k] != now.get(k)]
        if not changed and (changed_video := _videos_changed(saved, ds, ckpt)):
            changed = [changed_video]
    finally:
        ds.close()
    if changed:
        raise ActlabError(
            problem or "the dataset is not the one the run was trained on",
            file=cfg.data.path,
            field="data.path",
            expected=f"the dataset of {ckpt.name} (recorded as {saved.get('path', '?')})",
            found="; ".join(changed)
            + (" (meta_sha256: the contents of meta/ differ)" if "meta_sha256" in " ".join(changed) else "")
            + (
                " (data_sha256: the rows of the data files differ)"
                if "data_sha256" in " ".join(changed)
                else ""
            ),
            fix=fix
            or "resume with the original dataset (--dataset PATH; a copy of it is fine), or train on this "
            "one into a new --out: a resume would continue on other data",
        )
