"""LeRobot 0.6.x ACT pretrained-policy directory -> actlab bundle (evaluate, fine-tune with --init-from).

Reads what lerobot itself saves (``config.json``, ``model.safetensors``, the pre/post-processor JSON and
their normalizer state files) with safetensors and JSON only: lerobot is not needed. The mapping is the
inverse of :mod:`actlab.lerobot.export`: ``"model." + name`` -> ``name``, the processors' statistics ->
actlab's normalizer, ``decoder_input="zeros"`` (LeRobot's ACT feeds zeros to its decoder).

Normalization: every LeRobot mode is an affine map per feature, so it becomes an actlab ``(mean, std)``
pair exactly: ``MEAN_STD`` -> ``(mean, std + 1e-8)`` for inputs (LeRobot divides by ``std + eps``) and
``(mean, std)`` for the action (LeRobot unnormalizes with ``std``); ``MIN_MAX`` / ``QUANTILES`` /
``QUANTILE10`` with bounds ``lo, hi`` -> ``(lo + d/2, d/2)``, ``d = hi - lo`` (``eps`` where 0);
``IDENTITY`` -> ``(0, 1)``. Camera statistics equal to ImageNet's become ``image_norm="imagenet"`` (what
``lerobot-train`` uses by default), others ``image_norm="dataset"``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from actlab.errors import ActlabError
from actlab.lerobot.export import (
    ACTION,
    NORM_EPS,
    PLUGIN_BUNDLE,
    PLUGIN_TYPES,
    POSTPROCESSOR,
    PREPROCESSOR,
    SHARED_FIELDS,
    STATE,
)
from actlab.policies import ACTConfig, load_policy, make_policy, save_policy
from actlab.policies.backbones import IMAGENET_MEAN, IMAGENET_STD
from actlab.policies.bundle import training_record
from actlab.utils.config import from_dict, from_file
from actlab.utils.io import check_out_dir, read_json, require_file
from actlab.utils.kinds import LEROBOT_CONFIG_FIX, describe

# LeRobot range modes: (low stat, high stat).
_RANGE_MODES = {"MIN_MAX": ("min", "max"), "QUANTILES": ("q01", "q99"), "QUANTILE10": ("q10", "q90")}
_MODES = ("MEAN_STD", "IDENTITY", *_RANGE_MODES)
_BRIDGE_FIX = "evaluate it through the bridge instead: actlab eval --lerobot-policy DIR --lerobot-python PY"


def _read_json(path: Path, what: str, fix: str | None = None) -> Any:

    require_file(
        path,
        f"the LeRobot policy directory has no {path.name} ({what})",
        expected="a directory saved by lerobot (config.json, model.safetensors, policy_*processor.json)",
        fix="pass a pretrained_model directory, e.g. outputs/train/RUN/checkpoints/last/pretrained_model",
    )
    return read_json(path, what, fix=fix)


def _tensors(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    require_file(
        path,
        "file not found",
        expected="a safetensors file",
        fix="the LeRobot policy directory is incomplete",
    )
    try:
        return load_file(str(path))
    except Exception as e:  # safetensors' own error types for a truncated or foreign file
        raise ActlabError(f"cannot read safetensors: {type(e).__name__}: {e}", file=path) from e


def _processor_stats(root: Path, pipeline: str, registry_name: str) -> tuple[dict[str, np.ndarray], dict]:
    """The state tensors and config of one (un)normalizer step of a saved processor pipeline."""
    file = root / f"{pipeline}.json"
    data = _read_json(file, "processor pipeline")
    for step in data.get("steps", []) if isinstance(data, dict) else []:
        if step.get("registry_name") == registry_name:
            state = step.get("state_file")
            return (_tensors(root / state) if state else {}), step.get("config") or {}
    raise ActlabError(
        f"the processor pipeline has no {registry_name} step",
        file=file,
        field="steps",
        expected=f"a step with registry_name {registry_name!r}",
        fix="the directory was not saved by lerobot >= 0.4 (processors); convert it with lerobot first",
    )


def _feature_stats(state: dict[str, np.ndarray], key: str) -> dict[str, np.ndarray]:
    prefix = key + "."
    return {k[len(prefix) :]: v.astype(np.float64) for k, v in state.items() if k.startswith(prefix)}


def affine_stats(
    stats: dict[str, np.ndarray], mode: str, shape: tuple[int, ...], is_input: bool, eps: float, file: Path
) -> tuple[np.ndarray, np.ndarray]:
    """LeRobot normalization of one feature as actlab's ``(x - mean) / std`` (see the module docstring)."""
    if mode == "IDENTITY" or not stats:
        return np.zeros(shape), np.ones(shape)
    if mode == "MEAN_STD":
        mean, std = stats.get("mean"), stats.get("std")
        if mean is None or std is None:
            raise ActlabError("MEAN_STD needs mean and std statistics", file=file, found=sorted(stats))
        return _shaped(mean, shape, file, "mean"), _shaped(std + eps if is_input else std, shape, file, "std")
    lo_name, hi_name = _RANGE_MODES[mode]
    lo, hi = stats.get(lo_name), stats.get(hi_name)
    if lo is None or hi is None:
        raise ActlabError(f"{mode} needs {lo_name} and {hi_name} statistics", file=file, found=sorted(stats))
    lo, hi = _shaped(lo, shape, file, lo_name), _shaped(hi, shape, file, hi_name)
    d = hi - lo
    d = np.where(d == 0, eps, d)
    return lo + d / 2, d / 2


def _shaped(values: np.ndarray, shape: tuple[int, ...], file: Path, name: str) -> np.ndarray:
    """``values`` as ``shape``, or an ActlabError: statistics of another size belong to another policy
    (or a damaged file); reshaping them raised a bare ValueError."""
    if values.size != int(np.prod(shape)):
        raise ActlabError(
            f"normalization statistic {name!r} has the wrong size for the config's features",
            file=file,
            field=name,
            expected=f"{int(np.prod(shape))} values (shape {list(shape)})",
            found=f"{values.size} values (shape {list(values.shape)})",
            fix="the processor's statistics and config.json come from different policies (or the file is "
            "damaged): use the directory exactly as LeRobot saved it",
        )
    return values.reshape(shape)


def _check_config(cfg: dict, file: Path) -> None:
    if cfg.get("type") != "act":
        raise ActlabError(
            "only LeRobot ACT checkpoints can be imported into actlab",
            file=file,
            field="type",
            expected="act",
            found=cfg.get("type"),
            fix=_BRIDGE_FIX,
        )
    checks = [
        ("n_obs_steps", cfg.get("n_obs_steps", 1) == 1, 1),
        ("replace_final_stride_with_dilation", not cfg.get("replace_final_stride_with_dilation"), False),
        ("vision_backbone", cfg.get("vision_backbone") in ("resnet18", "resnet34"), "resnet18 or resnet34"),
        ("feedforward_activation", cfg.get("feedforward_activation") in ("relu", "gelu"), "relu or gelu"),
    ]
    for field, ok, expected in checks:
        if not ok:
            raise ActlabError(
                "actlab's ACT has no counterpart for this LeRobot ACT setting",
                file=file,
                field=field,
                expected=expected,
                found=cfg.get(field),
                fix=_BRIDGE_FIX,
            )
    inputs = cfg.get("input_features") or {}
    kinds = {k: (v or {}).get("type") for k, v in inputs.items()}
    extra = [k for k, t in kinds.items() if t not in ("STATE", "VISUAL") or (t == "STATE" and k != STATE)]
    if kinds.get(STATE) != "STATE" or not any(t == "VISUAL" for t in kinds.values()) or extra:
        raise ActlabError(
            "actlab's ACT needs exactly observation.state and one or more cameras as inputs",
            file=file,
            field="input_features",
            expected="observation.state (STATE) + observation.images.* (VISUAL)",
            found=", ".join(f"{k} ({t})" for k, t in kinds.items()),
            fix=_BRIDGE_FIX,
        )
    outputs = cfg.get("output_features") or {}
    if list(outputs) != [ACTION]:
        raise ActlabError(
            "the policy must output exactly 'action'", file=file, field="output_features", found=list(outputs)
        )
    modes = cfg.get("normalization_mapping") or {}
    for kind, mode in modes.items():
        if mode not in _MODES:
            raise ActlabError(
                "unknown LeRobot normalization mode",
                file=file,
                field=f"normalization_mapping.{kind}",
                expected=", ".join(_MODES),
                found=mode,
            )


def _is_imagenet(mean: np.ndarray, std: np.ndarray) -> bool:

    return bool(
        np.allclose(mean.ravel(), IMAGENET_MEAN, atol=1e-6)
        and np.allclose(std.ravel(), IMAGENET_STD, atol=1e-6)
    )


def read_lerobot_act(policy_dir: str | Path) -> tuple[Any, dict, dict, dict[str, np.ndarray], list[str]]:
    """(actlab ACTConfig, features, stats, actlab-named weights, notes) of a LeRobot ACT directory."""

    root = Path(policy_dir)
    if not root.is_dir():
        raise ActlabError("LeRobot policy directory not found", file=root, fix="check the path")
    cfg_file = root / "config.json"
    cfg = _read_json(cfg_file, "LeRobot policy config", fix=LEROBOT_CONFIG_FIX)
    if not isinstance(cfg, dict):
        raise ActlabError("config.json is not an object", file=cfg_file, found=str(cfg)[:80])
    _check_config(cfg, cfg_file)
    inputs = cfg["input_features"]
    cameras = [k for k, v in inputs.items() if v["type"] == "VISUAL"]  # LeRobot's camera order
    modes = cfg.get("normalization_mapping") or {}
    pre_state, pre_cfg = _processor_stats(root, PREPROCESSOR, "normalizer_processor")
    post_state, post_cfg = _processor_stats(root, POSTPROCESSOR, "unnormalizer_processor")
    pre_file, post_file = root / f"{PREPROCESSOR}.json", root / f"{POSTPROCESSOR}.json"
    notes: list[str] = []

    state_dim = int(inputs[STATE]["shape"][0])
    action_dim = int(cfg["output_features"][ACTION]["shape"][0])
    stats: dict[str, dict[str, Any]] = {}
    eps = float(pre_cfg.get("eps", NORM_EPS))
    mean, std = affine_stats(
        _feature_stats(pre_state, STATE), modes.get("STATE", "IDENTITY"), (state_dim,), True, eps, pre_file
    )
    stats[STATE] = {"mean": mean, "std": std}
    mean, std = affine_stats(
        _feature_stats(post_state, ACTION),
        modes.get("ACTION", "IDENTITY"),
        (action_dim,),
        False,
        float(post_cfg.get("eps", NORM_EPS)),
        post_file,
    )
    stats[ACTION] = {"mean": mean, "std": std}
    cam_stats = {}
    for key in cameras:
        raw = _feature_stats(pre_state, key)
        cam_stats[key] = affine_stats(raw, modes.get("VISUAL", "IDENTITY"), (3, 1, 1), True, eps, pre_file)
    imagenet = all(_is_imagenet(m, s - eps) or _is_imagenet(m, s) for m, s in cam_stats.values())
    for key, (m, s) in cam_stats.items():
        stats[key] = {"mean": m, "std": s}
    if not imagenet:
        notes.append(
            "camera normalization: this checkpoint's own statistics (image_norm=dataset); a fine-tune with "
            "--init-from normalizes with the new dataset's statistics, as lerobot-train does"
        )
    low = [k for k in (STATE, ACTION) if float(stats[k]["std"].min()) < 1e-3]
    if low:
        notes.append(
            f"{', '.join(low)}: some dimension has std < 1e-3 (it barely moved); kept exactly as LeRobot "
            "applies it (actlab would floor it when training from scratch)"
        )
    fields = {name: cfg[name] for name in SHARED_FIELDS if name in cfg}
    fields.update(
        cameras=list(cameras),
        pretrained_backbone_weights=None,
        decoder_input="zeros",
        image_norm="imagenet" if imagenet else "dataset",
    )
    # through the config reader: a value of the wrong type (dim_model "x") was ACTConfig's TypeError traceback
    act_cfg = from_file(
        lambda: from_dict(ACTConfig, fields), root / "config.json", "the LeRobot checkpoint's config.json",
        "restore config.json from the checkpoint lerobot-train wrote (the weights hold the trained values)",
    )  # fmt: skip
    features: dict[str, Any] = {
        STATE: {"dtype": "float32", "shape": [state_dim], "names": None},
        ACTION: {"dtype": "float32", "shape": [action_dim], "names": None},
    }
    for key in cameras:
        c, h, w = (int(x) for x in inputs[key]["shape"])
        features[key] = {"dtype": "video", "shape": [h, w, c], "names": ["height", "width", "channels"]}

    raw = _tensors(root / "model.safetensors")
    weights = {}
    for name, value in raw.items():
        if not name.startswith("model."):
            raise ActlabError(
                "unexpected tensor in a LeRobot ACT checkpoint",
                file=root / "model.safetensors",
                field=name,
                expected="names starting with 'model.'",
            )
        if name == "model.vae_encoder_pos_enc":
            continue  # a fixed table that actlab builds itself (identical values)
        weights[name[len("model.") :]] = value
    return act_cfg, features, stats, weights, notes


# What an imported bundle says wrote it: --overwrite replaces only an earlier import.
IMPORT_KIND = "actlab policy import"


def _plugin_type(policy_dir: Path) -> str | None:
    """The LeRobot type of a directory written for actlab's LeRobot plugin (else None)."""
    file = policy_dir / "config.json"
    if not file.is_file():
        return None
    cfg = read_json(file, "LeRobot policy config", fix=LEROBOT_CONFIG_FIX)
    kind = cfg.get("type") if isinstance(cfg, dict) else None
    return kind if kind in PLUGIN_TYPES.values() else None


def import_plugin_policy(policy_dir: str | Path, out: str | Path, overwrite: bool = False) -> dict:
    """A checkpoint of actlab's LeRobot plugin (an export, or a ``lerobot-train`` run of its types) ->
    actlab bundle: the plugin keeps the actlab bundle itself in ``actlab_bundle/`` (safetensors + JSON)."""
    root = Path(policy_dir)
    kind = _plugin_type(root)
    from actlab.lerobot.runtime import check_plugin_bundle  # lazy: as below

    check_plugin_bundle(root, kind, "nothing to import")
    policy = load_policy(root / PLUGIN_BUNDLE, device="cpu")
    # config.json's chunk_size / n_action_steps edited: LeRobot's plugin refuses the export, the import
    # wrote the bundle's own values without a word (the edit dropped)
    from actlab.lerobot.runtime import check_export_config, check_export_features
    from actlab.utils import config as cfgutil

    top = read_json(root / "config.json", "LeRobot policy config", fix=LEROBOT_CONFIG_FIX)
    wanted = {k: top[k] for k in ("type", "chunk_size", "n_action_steps", "n_obs_steps") if k in top}
    wanted["actlab_config"] = top.get("actlab_config") or {}
    check_export_config(wanted, cfgutil.to_dict(policy.config), root / "config.json")
    # an edited input or output size was dropped without a word (the bundle's own written)
    check_export_features(top.get("input_features"), top.get("output_features"), policy, root / "config.json")
    notes = _execution_notes(top, out, policy)
    # the training record (task, joint units, seeds) travels with the weights, so eval still checks them
    extra = {
        "imported_from": str(policy_dir),
        "lerobot_type": kind,
        "notes": notes,
        **training_record(root / PLUGIN_BUNDLE),
    }
    save_policy(policy.eval(), out, extra=extra, overwrite=overwrite, kind=IMPORT_KIND, inputs=[policy_dir])
    return {
        "source": str(policy_dir),
        "out": str(out),
        "policy_type": policy.config.type,
        "cameras": list(policy.camera_keys),
        "image_norm": policy.config.image_norm,
        "n_parameters": int(sum(p.numel() for p in policy.parameters())),
        "notes": notes,
    }


def _execution_notes(top: dict, out: str | Path, policy: Any = None) -> list[str]:
    """A note when the plugin's config.json runs the policy with another execution than sync: a bundle
    holds no execution (``actlab eval --execution`` chooses it), and the import dropped it without a word
    (`"execution": "blend", "execution_latency": 2` in LeRobot, then `actlab eval BUNDLE` ran sync; 22nd
    fault run)."""
    from actlab.policies.execution import PLUGIN_FIELDS  # lazy: as the loaders above

    mode = top.get(PLUGIN_FIELDS["mode"])
    latency, horizon = top.get(PLUGIN_FIELDS["latency"]), top.get(PLUGIN_FIELDS["horizon"])
    if mode in (None, "sync") and not latency and horizon is None:
        return []
    refused = _execution_refused(policy, mode, latency, horizon) if policy is not None else None
    if refused:  # `"execution": "bogus"` was recommended as `actlab eval --execution bogus` (25th fault run)
        return [
            f"config.json's execution settings cannot run this policy ({refused}): LeRobot's plugin refuses "
            f"the export as it is; a bundle holds no execution: choose one with actlab eval {out} "
            "--execution MODES --latency D"
        ]
    flags = f"--execution {mode or 'sync'}" + (f" --latency {latency}" if latency else "")
    flags += f" --horizon {horizon}" if horizon is not None else ""
    given = ", ".join(
        f"{PLUGIN_FIELDS[k]}: {v!r}" for k, v in (("mode", mode), ("latency", latency), ("horizon", horizon))
    )
    return [
        f"config.json runs the policy in LeRobot with {given}; a bundle holds no execution: evaluate it the "
        f"same way with actlab eval {out} {flags}"
    ]


def _execution_refused(policy: Any, mode: Any, latency: Any, horizon: Any) -> str | None:
    """What is wrong with config.json's execution settings for ``policy`` (the plugin's check), or None."""
    from actlab.policies.execution import ChunkLimits, ExecutionSpec, check_execution  # lazy: as above

    try:
        spec = ExecutionSpec(mode=mode or "sync", latency=latency or 0, horizon=horizon)
        if spec.mode != "sync":
            check_execution(spec, ChunkLimits.from_config(policy.config))
    except ActlabError as e:
        return f"{e.problem}: {e.found}" if e.found is not None else e.problem
    return None


def import_lerobot_act(policy_dir: str | Path, out: str | Path, overwrite: bool = False) -> dict:
    """Convert a LeRobot ACT directory (or a plugin checkpoint, :func:`import_plugin_policy`) into an
    actlab bundle at ``out`` (atomic); returns a summary."""
    import warnings

    import torch

    kind = describe(policy_dir)
    # an export that lost its actlab_export.json is still one (its output marker says "the output of
    # actlab policy export"): it was refused as "an actlab bundle needs no import" (25th fault run)
    exported = kind is not None and "actlab policy export" in kind
    if (
        kind is not None
        and kind.startswith(("an actlab", "a LeRobot dataset", "the output of"))
        and not exported
    ):
        raise ActlabError(  # a bundle was "actlab's ACT has no counterpart for this LeRobot ACT setting"
            "not a LeRobot policy directory: nothing to import",
            file=policy_dir,
            expected="a LeRobot pretrained_model directory (config.json, model.safetensors, processors)",
            found=kind,
            # (a dataset was told "an actlab bundle needs no import": 25th fault run, imp_src_dataset)
            fix="a dataset is not a policy: pass the pretrained_model directory lerobot-train saved (train "
            "on the dataset with actlab train --dataset DIR)"
            if kind.startswith("a LeRobot dataset")
            else "an actlab bundle needs no import: pass it to actlab eval / train --init-from as it is",
        )
    if Path(policy_dir).is_dir() and _plugin_type(Path(policy_dir)) is not None:
        return import_plugin_policy(policy_dir, out, overwrite=overwrite)
    act_cfg, features, stats, weights, notes = read_lerobot_act(policy_dir)
    check_out_dir(out, IMPORT_KIND, overwrite, [policy_dir])  # before the conversion
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # make_policy floors tiny stds; the exact ones are set below
        policy = make_policy(act_cfg, features, stats, pretrained=False)
    expected = {k: v for k, v in policy.state_dict().items() if not k.startswith("normalizer.")}
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    bad = [k for k in expected if k in weights and tuple(weights[k].shape) != tuple(expected[k].shape)]
    if missing or unexpected or bad:
        raise ActlabError(
            "the LeRobot weights do not match the ACT its config.json describes",
            file=Path(policy_dir) / "model.safetensors",
            field=(missing or unexpected or bad)[0],
            expected=f"{len(expected)} tensors named as LeRobot's ACT names them",
            found=f"missing {missing[:4]}, unexpected {unexpected[:4]}, wrong shape {bad[:4]}",
            fix="config.json and model.safetensors come from different checkpoints; " + _BRIDGE_FIX,
        )
    state = {k: torch.from_numpy(np.ascontiguousarray(v)).to(expected[k].dtype) for k, v in weights.items()}
    policy.load_state_dict(state, strict=False)
    with torch.no_grad():
        # LeRobot's normalization exactly (make_policy floored tiny stds; an std of 0 stays 0 here, as
        # LeRobot's unnormalize uses it). The buffers are what a bundle loads and applies.
        for key, entry in stats.items():
            buffers = policy.normalizer.get(key)
            buffers.mean.copy_(torch.from_numpy(np.asarray(entry["mean"])).view_as(buffers.mean))
            buffers.std.copy_(torch.from_numpy(np.asarray(entry["std"])).view_as(buffers.std))
    extra = {"imported_from": str(policy_dir), "lerobot_type": "act", "notes": notes}
    save_policy(policy.eval(), out, extra=extra, overwrite=overwrite, kind=IMPORT_KIND, inputs=[policy_dir])
    return {
        "source": str(policy_dir),
        "out": str(out),
        "policy_type": "act",
        "cameras": list(act_cfg.cameras),
        "image_norm": act_cfg.image_norm,
        "n_parameters": int(sum(p.numel() for p in policy.parameters())),
        "notes": notes,
    }
