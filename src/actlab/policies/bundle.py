"""Checkpoint bundle: a self-contained policy directory (safetensors + JSON only, never pickle).

```
<bundle>/model.safetensors   weights and buffers, normalizer statistics included
<bundle>/config.json         {"type": ..., every config field}
<bundle>/stats.json          the dataset stats the policy was built from (human-readable copy)
<bundle>/features.json       the dataset feature spec (keys, dtypes, shapes, names)
<bundle>/actlab.json         format version, actlab version, creation time, extra (e.g. training step),
                             sha256 of the four files above
```
``load_policy(path, device)`` needs nothing else: no dataset, no network (ImageNet weights are in the
weights file). It checks each file against the sha256 recorded at save, so a weights file damaged on
disk or in a copy is refused instead of evaluated as if intact (bundles saved before the checksums load
without the check).
"""

from __future__ import annotations

import datetime as _dt
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actlab import __version__
from actlab.errors import ActlabError
from actlab.policies.registry import get_config_class, make_policy
from actlab.utils import config as cfgutil
from actlab.utils.io import (
    atomic_dir,
    atomic_write_bytes,
    atomic_write_json,
    file_sha256,
    read_json,
    require_file,
)
from actlab.utils.kinds import BUNDLE_DAMAGED_FIX, describe

FORMAT = "actlab.policy"
FORMAT_VERSION = 1
FILES = ("model.safetensors", "config.json", "stats.json", "features.json", "actlab.json")
# How the FrameStore records a resize in a camera feature's "info" (datasets.framestore.RESIZE_INFO).
RESIZE_INFO = "actlab.resize"

# The files whose sha256 actlab.json records (actlab.json itself is written last, holding them).
CHECKSUMMED = FILES[:4]

# How a bundle file that cannot be read is repaired: no command regenerates one file of a bundle.
DAMAGED_FIX = BUNDLE_DAMAGED_FIX


def _jsonable_stats(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: {f: np.asarray(v).tolist() for f, v in entry.items()} for k, entry in stats.items()}


def write_bundle(policy: Any, directory: str | Path, extra: dict[str, Any] | None = None) -> None:
    """Write the bundle files into an existing directory (each file atomically)."""
    from safetensors.torch import save

    directory = Path(directory)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in policy.state_dict().items()}
    atomic_write_bytes(directory / "model.safetensors", save(tensors, metadata={"type": policy.config.type}))
    atomic_write_json(directory / "config.json", cfgutil.to_dict(policy.config))
    atomic_write_json(directory / "stats.json", _jsonable_stats(policy.stats_for_bundle()))
    atomic_write_json(directory / "features.json", policy.features)
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "actlab_version": __version__,
        "type": policy.config.type,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "n_parameters": sum(p.numel() for p in policy.parameters()),
        "extra": extra or {},
        # hashed from the files as written (read back), so the record is of what reached the disk
        "sha256": {name: file_sha256(directory / name) for name in CHECKSUMMED},
    }
    atomic_write_json(directory / "actlab.json", meta)


def training_record(path: str | Path | None) -> dict[str, Any]:
    """``{"train": ...}`` of the bundle at ``path`` (its actlab.json ``extra``: the task, joint units and
    episode seeds of its training data), or ``{}`` where there is none. Copied into the bundles made from
    it (a LeRobot export's ``actlab_bundle/``, an import of that export): an exported and imported
    so101_follower policy was evaluated in degrees, and at its training seeds, without a word."""
    file = Path(path) / "actlab.json" if path is not None else None
    if file is None or not file.is_file():
        return {}
    try:
        extra = read_json(file, "bundle metadata").get("extra")
    except (ActlabError, AttributeError):
        return {}  # the bundle was loaded (and so checked) before; an unreadable record carries nothing
    train = extra.get("train") if isinstance(extra, dict) else None
    return {"train": train} if isinstance(train, dict) else {}


def verify_bundle(path: Path, meta: dict[str, Any]) -> None:
    """Check the bundle's files against the sha256 recorded in ``actlab.json`` at save.

    The weights are binary and never edited by hand: a mismatch is an ActlabError (a damaged file would
    otherwise be evaluated as if intact). The JSON files are human-readable and may be edited on purpose;
    their content is validated when read, so a mismatch there is a warning. A bundle without checksums
    (saved before they were recorded) is loaded with a warning: its files cannot be verified (a removed
    record let damaged weights train on, unsaid: 26th fault run, lt_resume_actlabjson_sha_rm). A record
    that is not an object of digests is refused (a string was a traceback of the export's check).
    """
    recorded = meta.get("sha256")
    if recorded is None:
        warnings.warn(
            f"{path} records no sha256 of its files (saved by an actlab older than the record, or the record "
            "was removed from actlab.json): they are not verified",
            stacklevel=3,
        )
        return
    if not (isinstance(recorded, dict) and all(isinstance(v, str) for v in recorded.values())):
        raise ActlabError(
            "the bundle's record of its files' sha256 is damaged",
            file=path / "actlab.json",
            field="sha256",
            expected="an object of file name: hex sha256, as actlab wrote it",
            found=repr(recorded)[:120],
            fix="restore actlab.json from a copy of the bundle, or use another checkpoint of the run",
        )
    if unrecorded := [name for name in CHECKSUMMED if name not in recorded]:
        # every actlab records all four: an entry removed (or the record emptied) left that file unverified,
        # unsaid: damaged weights were evaluated, trained on and exported, exit 0 (27th fault run)
        warnings.warn(
            f"{path / 'actlab.json'} records no sha256 of {', '.join(unrecorded)} (the record was edited?): "
            f"{'it is' if len(unrecorded) == 1 else 'they are'} not verified",
            stacklevel=3,
        )
    for name in CHECKSUMMED:
        want = recorded.get(name)
        if not isinstance(want, str):
            continue
        found = file_sha256(path / name)
        if found == want:
            continue
        if name != "model.safetensors":
            warnings.warn(f"{path / name} changed since the bundle was saved (edited?)", stacklevel=3)
            continue
        raise ActlabError(
            f"{name} is damaged: its content differs from what was saved",
            file=path / name,
            field=f"actlab.json sha256.{name}",
            expected=want,
            found=found,
            fix="the file changed after the bundle was written (a bad disk, an interrupted copy): use "
            "another checkpoint of the run or copy the bundle again from its source",
        )


def save_policy(
    policy: Any,
    path: str | Path,
    extra: dict[str, Any] | None = None,
    overwrite: bool = False,
    *,
    kind: str = "save_policy",
    inputs: Sequence[str | Path] = (),
) -> Path:
    """Save ``policy`` as a bundle directory at ``path``, atomically (temp dir + rename).

    ``overwrite`` replaces only a bundle saved with the same ``kind`` (the command's name), never a
    directory that is, holds or lies inside one of ``inputs`` (see :func:`actlab.utils.io.atomic_dir`);
    a training checkpoint is never such a bundle."""
    path = Path(path)
    with atomic_dir(path, overwrite=overwrite, kind=kind, inputs=inputs) as tmp:
        write_bundle(policy, tmp, extra)
    return path


def _in_file(e: ActlabError, file: Path) -> ActlabError:
    """The same error, naming the bundle file it came from."""
    return ActlabError(
        e.problem,
        file=e.file or file,
        field=e.field,
        expected=e.expected,
        found=e.found,
        fix=e.fix or "the bundle was edited or written by another actlab version",
    )


def _read_config(path: Path) -> Any:
    data = read_json(path / "config.json", "policy config", fix=DAMAGED_FIX)
    if not isinstance(data, dict) or "type" not in data:
        raise ActlabError(
            "the policy config has no 'type'",
            file=path / "config.json",
            field="type",
            expected='{"type": "act" | "act_relative", ...}',
            found=str(data)[:120],
        )
    try:
        return cfgutil.from_dict(get_config_class(data["type"]), data)
    except ActlabError as e:
        raise _in_file(e, path / "config.json") from e
    except (ValueError, TypeError) as e:
        raise ActlabError(
            f"invalid policy config: {e}",
            file=path / "config.json",
            fix="re-save the bundle with save_policy",
        ) from e


def _read_tensors(file: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(str(file), device="cpu")
    except Exception as e:  # safetensors raises its own error types for truncated / foreign files
        raise ActlabError(
            f"cannot read the weights: {type(e).__name__}: {e}",
            file=file,
            expected="a safetensors file written by save_policy",
            fix="the file is truncated or not a safetensors file; use another checkpoint",
        ) from e


def _read_mapping(file: Path, what: str, expected: str) -> dict[str, Any]:
    """A JSON object whose values are objects (features.json, stats.json), or an ActlabError."""
    data = read_json(file, what, fix=DAMAGED_FIX)
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        bad = {k: v for k, v in data.items() if not isinstance(v, dict)} if isinstance(data, dict) else data
        raise ActlabError(
            f"{file.name} ({what}) is not a mapping of objects",
            file=file,
            expected=expected,
            found=str(bad)[:120],
            fix="the bundle was edited by hand or is damaged; use another checkpoint or re-save it",
        )
    return data


def _format_version(meta: dict[str, Any], file: Path) -> int:
    try:
        return int(meta.get("format_version", 0))
    except (TypeError, ValueError) as e:
        raise ActlabError(
            "the bundle format version is not an integer",
            file=file,
            field="format_version",
            expected=f"an integer <= {FORMAT_VERSION}",
            found=meta.get("format_version"),
        ) from e


def _written(stats: dict[str, Any], safe_key: str, what: str) -> tuple[str, str | None]:
    """(the feature's key as stats.json names it, its ``what`` values as the file holds them): the found of
    a refusal showed the normalizer built from them (std -1 and 0 as 1.0, the std floor; 1e300 as inf)."""
    for key, entry in stats.items():
        if key.replace(".", "_") == safe_key and isinstance(entry, dict) and what in entry:
            return key, str(np.asarray(entry[what], dtype=object).ravel()[:6].tolist())
    return safe_key, None


def _check_stats_copy(
    built: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor], path: Path, stats: dict[str, Any]
) -> None:
    """stats.json is the human-readable copy of the normalizer stored with the weights, which the policy
    uses: a copy that disagrees (edited by hand, digests refreshed) would otherwise be ignored without a
    word. The normalizer built from stats.json (std floors applied, in ``built``: the state dict of the
    policy made from the bundle's files) must equal the stored one."""
    for name, ref in built.items():
        if not name.startswith("normalizer.entries."):
            continue
        stored = tensors[name].float()
        ref = ref.to(tensors[name].dtype).float()  # a bf16/fp16 save rounds the stats the same way
        if not torch.allclose(ref, stored, rtol=1e-5, atol=1e-6, equal_nan=True):
            safe, what = name[len("normalizer.entries.") :].rsplit(".", 1)
            key, written = _written(stats, safe, what)
            built_text = str([round(v, 6) for v in ref.flatten()[:6].tolist()])
            raise ActlabError(
                "stats.json disagrees with the normalizer in model.safetensors (which the policy uses)",
                file=path / "stats.json",
                field=f"{key}.{what}",
                expected=str([round(v, 6) for v in stored.flatten()[:6].tolist()]),
                found=built_text
                if written is None
                else f"{written} (as the policy would use them: {built_text})",
                fix="stats.json was edited or comes from another policy: use the bundle's own stats.json; "
                "to normalize with other stats, train or fine-tune with them (actlab train)",
            )


def _check_tensors(expected: dict[str, torch.Tensor], tensors: dict[str, torch.Tensor], file: Path) -> None:
    """``tensors`` (read from ``file``) against ``expected``, the state dict of the policy built from the
    bundle's config, features and stats: the same names, shapes and kinds, and finite values."""
    missing = [k for k in expected if k not in tensors]
    unexpected = [k for k in tensors if k not in expected]
    if missing or unexpected:
        norm = "normalizer.entries."
        if all(k.startswith(norm) for k in missing + unexpected):
            # Normalizer entries are built one per feature of features.json: the two disagree on features.
            def keys(names: list[str]) -> list[str]:
                return sorted({k[len(norm) :].rsplit(".", 1)[0] for k in names})

            raise ActlabError(
                "features.json and the normalizer in model.safetensors disagree on the features",
                file=file.parent / "features.json",
                field=(missing or unexpected)[0],
                expected="the features the weights were trained on",
                found=f"in features.json only: {keys(missing)}; in the weights only: {keys(unexpected)}"
                " (dots written as _)",
                fix="features.json was edited or comes from another policy: use the bundle's own "
                "features.json (a camera cannot be added to or removed from trained weights)",
            )
        raise ActlabError(
            "the weights do not match the policy config",
            file=file,
            field=(missing or unexpected)[0],
            expected=f"{len(expected)} tensors named as the config builds them",
            found=f"missing {missing[:5]}, unexpected {unexpected[:5]}",
            fix="config.json and model.safetensors come from different policies; use an intact bundle",
        )
    for name, ref in expected.items():
        if tuple(tensors[name].shape) != tuple(ref.shape):
            raise ActlabError(
                f"tensor {name!r} has the wrong shape",
                file=file,
                field=name,
                expected=tuple(ref.shape),
                found=tuple(tensors[name].shape),
                fix="config.json, features.json and model.safetensors come from different policies",
            )
        t = tensors[name]
        if ref.is_floating_point() and not t.is_floating_point():
            raise ActlabError(
                f"tensor {name!r} has the wrong dtype",
                file=file,
                field=name,
                expected="a floating-point tensor",
                found=str(t.dtype),
                fix="the weights file is damaged or not written by save_policy; use another checkpoint",
            )
        # One pass over the weights at load: a diverged checkpoint would otherwise act with NaN actions.
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ActlabError(
                f"tensor {name!r} holds NaN or inf",
                file=file,
                field=name,
                expected="finite values",
                found=f"{int((~torch.isfinite(t)).sum())} of {t.numel()} values not finite",
                fix="training diverged before this checkpoint was written; use an earlier checkpoint",
            )


def _check_declared(meta: dict[str, Any], path: Path, features: dict[str, Any], declared: str) -> None:
    """What two files of the bundle both declare agrees: the policy type (actlab.json and ``declared``,
    config.json's: an edited one was ignored), and a resized camera's size (its shape and the
    ``actlab.resize`` record of the frame store: the sim rendered, and the policy got, frames of the
    edited size)."""
    if "type" in meta and meta["type"] != declared:
        raise ActlabError(
            "actlab.json and config.json name different policy types",
            file=path / "actlab.json",
            field="type",
            expected=f"{declared!r}, as config.json says (the weights were built from it)",
            found=meta["type"],
            fix="one of the two was edited: use the bundle's own files (another checkpoint of its run, or "
            "copy the bundle again from its source)",
        )
    for key, feat in features.items():
        resize = (feat.get("info") or {}).get(RESIZE_INFO) if isinstance(feat.get("info"), dict) else None
        if not isinstance(resize, dict) or "image_size" not in resize:
            continue
        shape, size = feat.get("shape"), resize["image_size"]
        if not (isinstance(shape, list) and len(shape) == 3 and shape[:2] == [size, size]):
            raise ActlabError(
                f"features.json declares two sizes for camera {key!r}",
                file=path / "features.json",
                field=f"{key}.shape",
                expected=f"[{size}, {size}, 3], the size info.{RESIZE_INFO}.image_size records (its "
                "frames were resized to one size in training)",
                found=shape,
                fix="features.json was edited (the shape or the resize record): use the bundle's own "
                "features.json; actlab eval renders the sim at the trained size by itself",
            )


def load_policy(path: str | Path, device: str | torch.device = "cpu") -> Any:
    """Load a bundle written by :func:`save_policy`; returns the policy in eval mode on ``device``."""
    path = Path(path)
    if not path.is_dir():
        hint = "pass the bundle directory, not a file inside it" if path.is_file() else "check the path"
        raise ActlabError("policy bundle directory not found", file=path, fix=hint)
    kind = describe(path)
    if kind is not None and not kind.startswith("an actlab policy bundle"):
        raise ActlabError(  # a run, an export, a dataset: "has no model.safetensors" said nothing of it
            "not an actlab policy bundle",
            file=path,
            expected="a policy bundle directory (RUN/checkpoints/step_N)",
            found=kind,
            fix="pass a bundle (see found)",
        )
    for name in FILES:
        require_file(
            path / name,
            f"the policy bundle has no {name}",
            expected="model.safetensors, config.json, stats.json, features.json, actlab.json",
            fix="the bundle is incomplete; use another checkpoint or re-save it",
        )
    meta = read_json(path / "actlab.json", "bundle metadata", fix=DAMAGED_FIX)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ActlabError(
            "not an actlab policy bundle",
            file=path / "actlab.json",
            field="format",
            expected=FORMAT,
            found=meta.get("format") if isinstance(meta, dict) else meta,
        )
    if _format_version(meta, path / "actlab.json") > FORMAT_VERSION:
        raise ActlabError(
            "the bundle was written by a newer actlab",
            file=path / "actlab.json",
            field="format_version",
            expected=f"<= {FORMAT_VERSION}",
            found=meta.get("format_version"),
            fix="upgrade actlab",
        )
    verify_bundle(path, meta)
    cfg = _read_config(path)
    features = _read_mapping(
        path / "features.json", "feature spec", '{"observation.state": {"shape": [...], ...}, ...}'
    )
    stats = _read_mapping(path / "stats.json", "normalization stats", '{"observation.state": {"mean": ...}}')
    _check_declared(meta, path, features, cfg.type)
    with warnings.catch_warnings():
        # Std floors were reported when the policy was first built; the weights carry the floored values.
        warnings.simplefilter("ignore")
        try:
            policy = make_policy(cfg, features, stats, pretrained=False)
        except ActlabError as e:
            culprit = "stats.json" if e.problem.startswith("normalization stats") else "features.json"
            if e.problem.startswith("normalization stats") and "wrong shape" in e.problem:
                # The expected shape comes from features.json: either file may be the edited one.
                e = ActlabError(
                    e.problem + " (the shape features.json gives)",
                    field=e.field,
                    expected=e.expected,
                    found=e.found,
                    fix="stats.json and features.json disagree on this feature's shape: one of them was "
                    "edited or comes from another policy; use the bundle's own files",
                )
            elif e.problem.startswith("normalization stats"):
                # (the fix was an API call to compute stats, or "check the dataset with actlab data
                # doctor": the dataset is fine, the bundle's stats.json is not as it was written)
                e = ActlabError(
                    e.problem,
                    field=e.field,
                    expected=e.expected,
                    found=e.found,
                    fix="stats.json was edited or is damaged: use the bundle's own stats.json (another "
                    "checkpoint of its run, or the bundle copied again from its source)",
                )
            if e.field == "cameras":  # config.json's cameras name keys that features.json must have
                e = ActlabError(
                    e.problem,
                    field="cameras",
                    expected=e.expected,
                    found=e.found,
                    fix="config.json's cameras and features.json come from different policies (or one was "
                    "edited): use the bundle's own files; cameras are full keys such as "
                    "observation.images.top, or [] for every camera",
                )
                culprit = "config.json"
            raise _in_file(e, path / culprit) from e
    tensors = _read_tensors(path / "model.safetensors")
    built = policy.state_dict()  # what the bundle's config, features and stats make
    _check_tensors(built, tensors, path / "model.safetensors")
    _check_stats_copy(built, tensors, path, stats)
    policy.load_state_dict(tensors, strict=True)
    return policy.to(device).eval()
