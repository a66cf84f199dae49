"""The doctor's checks, each returning :class:`Finding` objects: inputs, normalization, the episode split,
the replay's actions and the deployment (processor round trip, ``reset()``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actlab.errors import ActlabError
from actlab.evaluation.doctor.findings import (
    CONSTANT_STD,
    GRIPPER_MATCH_S,
    GRIPPER_MISSED_WARN,
    GRIPPER_STATE_MIN,
    IMAGE_STD_MIN,
    IMAGENET_STD,
    JUMP_RATIO_WARN,
    MEAN_SHIFT_ERROR,
    MEAN_SHIFT_WARN,
    RANGE_MARGIN,
    RANGE_OUT_ERROR,
    RANGE_OUT_WARN,
    RESET_SEPARATION_MIN,
    RESET_TOL,
    ROUNDTRIP_TOL,
    SKILL_LEARNED,
    STD_RATIO_ERROR,
    STD_RATIO_WARN,
    DoctorConfig,
    Finding,
)
from actlab.evaluation.policy_io import RESIZE_INFO, inputs_from_features
from actlab.evaluation.replay import (
    ACTION,
    EpisodeReplay,
    gripper_stats,
    jump_stats,
    range_stats,
    to_numpy,
)

# ------------------------------------------------------------------------------------------ inputs


def feature_names(feature: Mapping[str, Any] | None) -> list[str] | None:
    """A feature's per-dimension names (a list, or LeRobot's {"motors": [...]})."""
    names = (feature or {}).get("names")
    if isinstance(names, Mapping):
        names = next(iter(names.values()), None)
    return [str(n) for n in names] if isinstance(names, list) else None


def feature_shape(feature: Mapping[str, Any] | None) -> tuple[int, ...] | None:
    shape = (feature or {}).get("shape")
    return tuple(int(s) for s in shape) if isinstance(shape, (list, tuple)) else None


def _image_hw(feature: Mapping[str, Any]) -> tuple[int, int]:
    """(H, W) of a LeRobot camera feature (``[H, W, C]``, or ``[C, H, W]`` when named so)."""
    return next(iter(inputs_from_features({"observation.images.x": feature}).image_hw.values()))


def resize_info(feature: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """How the FrameStore resized a camera's training frames (its features record it), or None."""
    info = (feature.get("info") or {}).get(RESIZE_INFO)
    return info if isinstance(info, Mapping) else None


def check_inputs(
    policy_features: Mapping[str, Any], inputs: Any, ds_features: Mapping[str, Any]
) -> tuple[list[Finding], bool]:
    """Findings on state/action sizes, cameras and image sizes, and whether a replay is possible.

    ``inputs``: the policy's ``PolicyInputs`` (``actlab.evaluation.policy_io``), the keys it reads.
    """
    findings: list[Finding] = []
    replayable = True
    for key in (*inputs.state_keys, ACTION):
        found = _vector_finding(key, policy_features.get(key), ds_features.get(key))
        replayable &= found.severity != "error"
        findings.append(found)
    cameras = [k for k, f in ds_features.items() if f.get("dtype") in ("video", "image")]
    for key, hw in inputs.image_hw.items():
        if key not in ds_features:
            msg = (
                f"the policy reads camera {key!r}; the dataset has {cameras or 'no camera'}: rename the "
                "camera to the name the policy was trained with, or use the dataset it was trained on"
            )
            findings.append(Finding("inputs", key, "error", msg, {"expected": key, "found": cameras}))
            replayable = False
        else:
            findings.append(_camera_finding(key, hw, policy_features[key], ds_features[key]))
    return findings, replayable


def _vector_finding(key: str, pfeat: Mapping | None, dfeat: Mapping | None) -> Finding:
    want, have = feature_shape(pfeat), feature_shape(dfeat)
    numbers = {"expected": want, "found": have}
    if have is None:
        msg = f"the dataset has no {key!r}, which the policy reads: use a dataset of the same robot"
        return Finding("inputs", key, "error", msg, numbers)
    if want != have:
        msg = (
            f"{key!r} has shape {list(have)} in the dataset but {list(want or ())} in the policy: another "
            "robot or joint layout"
        )
        return Finding("inputs", key, "error", msg, numbers)
    p_names, d_names = feature_names(pfeat), feature_names(dfeat)
    if p_names and d_names and p_names != d_names:
        msg = f"{key!r} names its dimensions {d_names} here, {p_names} in the policy: check order and units"
        return Finding("inputs", key, "warning", msg, {**numbers, "policy": p_names, "dataset": d_names})
    return Finding("inputs", key, "ok", f"{key!r}: shape {list(have)} as trained", numbers)


def _camera_finding(key: str, hw: tuple[int, int], pfeat: Mapping, dfeat: Mapping) -> Finding:
    src = _image_hw(dfeat)
    numbers: dict[str, Any] = {"policy_hw": list(hw), "dataset_hw": list(src)}
    resize = resize_info(pfeat)
    if resize is None:  # trained on the native frames: the dataset must have that size
        if tuple(src) == tuple(hw):
            return Finding("inputs", key, "ok", f"{key!r}: {hw[0]}x{hw[1]} as trained", numbers)
        msg = (
            f"the policy was trained on {hw[0]}x{hw[1]} frames of {key!r}, the dataset has "
            f"{src[0]}x{src[1]}: resized, they show the scene at another scale than in training; use the "
            "training camera and resolution"
        )
        return Finding("inputs", key, "error", msg, numbers)
    trained = tuple(int(s) for s in list(resize.get("from_shape", (0, 0)))[:2])
    numbers["trained_from_hw"] = list(trained)
    if trained == tuple(src):
        msg = f"{key!r}: {src[0]}x{src[1]} frames fitted into {hw[0]}x{hw[1]}, as in training"
        return Finding("inputs", key, "ok", msg, numbers)
    if abs(src[0] * trained[1] - src[1] * trained[0]) <= max(src):  # same aspect ratio (to a pixel)
        msg = (
            f"{key!r} is {src[0]}x{src[1]} here, {trained[0]}x{trained[1]} in training (same aspect "
            f"ratio, both fitted into {hw[0]}x{hw[1]}): check that it is the same camera"
        )
        return Finding("inputs", key, "warning", msg, numbers)
    msg = (
        f"{key!r} is {src[0]}x{src[1]} here but {trained[0]}x{trained[1]} in training: another aspect "
        "ratio gives other padding and scale; use the camera and resolution the policy was trained with"
    )
    return Finding("inputs", key, "error", msg, numbers)


# ------------------------------------------------------------------------------------- normalization


def applied_stats(policy: Any) -> dict[str, dict[str, np.ndarray]]:
    """``{key: {"mean", "std"}}`` the policy normalizes with.

    The keys come from ``stats_for_bundle()`` (or a ``stats`` mapping): the dataset stats the policy was
    built from, so ImageNet image normalization is left out. The values are the normalizer buffers when
    the policy has them (what it really applies; they travel in the weights), else those stats.
    """
    source = (
        policy.stats_for_bundle() if hasattr(policy, "stats_for_bundle") else getattr(policy, "stats", None)
    )
    norm = getattr(policy, "normalizer", None)
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, entry in (source if isinstance(source, Mapping) else {}).items():
        if norm is not None and key in getattr(norm, "feature_keys", ()):
            e = norm.get(key)
            out[key] = {"mean": e.mean.detach().cpu().numpy(), "std": e.std.detach().cpu().numpy()}
        elif isinstance(entry, Mapping) and "mean" in entry and "std" in entry:
            out[key] = {"mean": np.asarray(entry["mean"], float), "std": np.asarray(entry["std"], float)}
    return out


def _dataset_pair(entry: Any, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray] | None:
    """(mean, std) of a dataset stats entry matching ``shape`` (per-chunk-step relative stats too)."""
    if not isinstance(entry, Mapping):
        return None
    for m, s in (("mean", "std"), ("mean_per_step", "std_per_step")):
        if m in entry and s in entry:
            mean, std = np.asarray(entry[m], float), np.asarray(entry[s], float)
            if mean.size == int(np.prod(shape)) and std.size == mean.size:
                return mean.reshape(shape), std.reshape(shape)
    return None


def check_normalization(
    applied: Mapping[str, Mapping[str, np.ndarray]], ds_stats: Mapping[str, Any]
) -> list[Finding]:
    """Per feature: degenerate image std, mean shift in dataset std units, std ratio."""
    findings = []
    for key, st in applied.items():
        mean, std = np.asarray(st["mean"], float), np.asarray(st["std"], float)
        if ".image" in key and float(std.min()) < IMAGE_STD_MIN:
            msg = (
                f"the policy normalizes {key!r} with std {std.ravel().round(4).tolist()}: a pixel becomes a "
                f"value of up to about {1 / max(float(std.min()), 1e-9):.0f}; recompute the image stats "
                "(actlab data stats) and retrain"
            )
            findings.append(Finding("normalization", key, "error", msg, {"std": std.ravel().tolist()}))
            continue
        if ".image" in key and std.size == 3 and np.allclose(std.ravel(), IMAGENET_STD, atol=1e-3):
            msg = f"{key!r}: ImageNet statistics (what a pretrained backbone expects), not the dataset's"
            findings.append(Finding("normalization", key, "ok", msg, {"std": std.ravel().tolist()}))
            continue
        pair = _dataset_pair(ds_stats.get(key), mean.shape)
        if pair is None:
            msg = f"the dataset has no stats for {key!r} of shape {list(mean.shape)}: not compared"
            findings.append(Finding("normalization", key, "warning", msg))
            continue
        findings.append(_compare_stats(key, mean, std, *pair))
    return findings


def _compare_stats(key: str, mean: np.ndarray, std: np.ndarray, d_mean: np.ndarray, d_std: np.ndarray):
    safe = np.maximum(d_std, 1e-9)
    shift = np.abs(mean - d_mean) / safe
    ratio = np.where(d_std > CONSTANT_STD, np.maximum(std / safe, safe / np.maximum(std, 1e-9)), 1.0)
    numbers = {
        "mean_shift": float(shift.max()),
        "mean_shift_dim": int(np.argmax(shift)),
        "std_ratio": float(ratio.max()),
        "std_ratio_dim": int(np.argmax(ratio)),
        "policy_mean": mean.ravel()[:16].round(4).tolist(),
        "dataset_mean": d_mean.ravel()[:16].round(4).tolist(),
        "policy_std": std.ravel()[:16].round(4).tolist(),
        "dataset_std": d_std.ravel()[:16].round(4).tolist(),
    }
    what = (
        f"{key!r}: mean off by {numbers['mean_shift']:.2f} dataset std (dim {numbers['mean_shift_dim']}), "
        f"std ratio {numbers['std_ratio']:.2f} (dim {numbers['std_ratio_dim']})"
    )
    if numbers["mean_shift"] > MEAN_SHIFT_ERROR or numbers["std_ratio"] > STD_RATIO_ERROR:
        msg = f"{what}: the policy was trained on other data or other stats (units? another robot?)"
        return Finding("normalization", key, "error", msg, numbers)
    if numbers["mean_shift"] > MEAN_SHIFT_WARN or numbers["std_ratio"] > STD_RATIO_WARN:
        msg = f"{what}: not quite the training stats (fine for a new session of the same task)"
        return Finding("normalization", key, "warning", msg, numbers)
    return Finding("normalization", key, "ok", f"{what}: match", numbers)


# ------------------------------------------------------------------------------------------ split


def recorded_split(bundle: str | Path | None) -> dict[str, Any] | None:
    """``extra.train`` of a bundle's actlab.json when it records the training episodes, else None."""
    if bundle is None:
        return None
    try:
        meta = json.loads((Path(bundle) / "actlab.json").read_text())
        train = meta["extra"]["train"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        return None
    return train if isinstance(train, dict) and "train_episodes" in train else None


def choose_episodes(
    ds: Any, cfg: DoctorConfig, recorded: Mapping[str, Any] | None
) -> tuple[list[int], list[int], Finding]:
    """(training episodes, held-out episodes, a finding saying where they come from): the flags, else
    the split recorded in the bundle, else every episode as held-out."""
    have = sorted(int(e.index) for e in ds.episodes)
    if cfg.train_episodes is not None or cfg.heldout_episodes is not None:
        train = _known(ds, have, cfg.train_episodes or (), "--train-episodes")
        held = _known(ds, have, cfg.heldout_episodes or (), "--heldout-episodes")
        both = sorted(set(train) & set(held))
        if both:  # the "held-out" replay of a training episode judged generalization on it, exit 1 or 0
            raise ActlabError(
                "--train-episodes and --heldout-episodes name the same episodes",
                file=ds.root,
                field="--train-episodes, --heldout-episodes",
                expected="two lists without an episode in common (a held-out episode is one the policy "
                "was not trained on)",
                found=f"episode(s) {both[:10]} in both",
                fix="name each episode in one list only (nothing was replayed)",
            )
        numbers = {"train": train, "heldout": held, "source": "flags"}
        msg = f"episodes from the flags: {len(train)} training, {_count(len(held), 'held-out')}"
        return train, held, Finding("split", "episodes", "ok", msg, numbers)
    if recorded is None:
        msg = (
            "the bundle does not record which episodes trained it: every episode is replayed as held-out, "
            "so 'did not learn' cannot be told from 'memorized'; pass --train-episodes/--heldout-episodes"
        )
        return [], have, Finding("split", "episodes", "warning", msg, {"source": "none"})
    trained_on = recorded.get("dataset") or {}
    train = [int(e) for e in recorded.get("train_episodes", []) if int(e) in have]
    held = [int(e) for e in recorded.get("val_episodes", []) if int(e) in have]
    numbers = {"train": train, "heldout": held, "source": "bundle", "trained_on": trained_on.get("path")}
    # The fingerprint changes when the files are copied (mtimes); a copy keeps the episode and frame counts.
    same = trained_on.get("fingerprint") == ds.fingerprint or (
        trained_on.get("episodes") == len(ds.episodes) and trained_on.get("frames") == len(ds)
    )
    if not same:
        msg = (
            f"this is not the dataset the policy was trained on ({trained_on.get('path')}): every episode "
            "is replayed as held-out (pass --train-episodes/--heldout-episodes to say otherwise)"
        )
        return [], have, Finding("split", "episodes", "warning", msg, numbers)
    if not held:
        msg = (
            "the training run held out no episode (actlab: data.val_fraction=0; lerobot-train: no "
            "dataset.episodes): generalization is not measured"
        )
        return train, held, Finding("split", "episodes", "warning", msg, numbers)
    msg = f"the split recorded in the bundle: {len(train)} training, {_count(len(held), 'held-out')}"
    return train, held, Finding("split", "episodes", "ok", msg, numbers)


def _known(ds: Any, have: list[int], episodes: Sequence[int], flag: str) -> list[int]:
    bad = [e for e in episodes if e not in set(have)]
    if bad:
        raise ActlabError(
            f"{flag} names episodes the dataset does not have",
            file=ds.root,
            field=flag,
            expected=f"indices among {have[0]}..{have[-1]}" if have else "episodes",
            found=bad[:10],
        )
    return list(episodes)


def spread(episodes: Sequence[int], n: int) -> list[int]:
    """At most ``n`` of ``episodes``, evenly spread (all when ``n`` is 0 or they are fewer)."""
    eps = list(episodes)
    if n <= 0 or len(eps) <= n:
        return eps
    return [eps[i] for i in np.linspace(0, len(eps) - 1, n).round().astype(int)]


# ------------------------------------------------------------------------------ replay + actions


def _count(n: int, kind: str) -> str:
    return f"{n} {kind} episode{'' if n == 1 else 's'}"


def replay_finding(split: str, summary: Mapping[str, Any]) -> Finding:
    """ok when the policy beats the better baseline clearly (skill < SKILL_LEARNED), else an error."""
    best = summary["baseline"]
    numbers = {
        "skill": round(summary["skill"], 4),
        "skill_first": round(summary["skill_first"], 4),
        "policy_chunk": round(summary["policy"]["chunk_mean"], 4),
        "baseline": best,
        "baseline_chunk": round(summary[best]["chunk_mean"], 4),
        "episodes": len(summary["episodes"]),
        "frames": summary["frames"],
    }
    what = (
        f"{_count(len(summary['episodes']), 'training' if split == 'train' else 'held-out')}: chunk error "
        f"{numbers['policy_chunk']:.3f} std vs {numbers['baseline_chunk']:.3f} for the best baseline "
        f"({best}), skill {numbers['skill']:.2f} (1 = baseline level, 0 = exact)"
    )
    if summary["skill"] < SKILL_LEARNED:
        return Finding("replay", f"replay.{split}", "ok", f"{what}: better than the baselines", numbers)
    why = "did not learn the demonstrations" if split == "train" else "does not generalize to new episodes"
    return Finding("replay", f"replay.{split}", "error", f"{what}: the policy {why}", numbers)


def check_actions(
    reps: Sequence[EpisodeReplay],
    action_stats: Mapping[str, Any],
    names: Sequence[str],
    n_exec: int,
    stride: int,
    fps: float,
) -> list[Finding]:
    """Predicted range vs q01..q99, each joint named like a gripper, chunk-boundary jumps."""
    findings = [
        _range_finding(range_stats(reps, action_stats["q01"], action_stats["q99"], RANGE_MARGIN), names)
    ]
    for j, name in enumerate(names):
        if "gripper" in name.lower():
            threshold = (float(action_stats["q01"][j]) + float(action_stats["q99"][j])) / 2
            window = max(1, round(GRIPPER_MATCH_S * fps / stride))
            stats = gripper_stats(reps, j, threshold, window)
            findings.append(_gripper_finding(name, stats, stride / fps))
    scale = np.maximum(np.asarray(action_stats["std"], float), 1e-6)
    jumps = jump_stats(reps, n_exec, stride, scale)
    if jumps is not None:
        findings.append(_jump_finding(jumps, n_exec))
    return findings


def _range_finding(stats: dict[str, Any], names: Sequence[str]) -> Finding:
    j = stats["worst"]
    out = stats["out_of_range"][j]
    what = (
        f"{100 * out:.1f}% of the predicted {names[j]!r} outside the dataset's q01..q99 (+{RANGE_MARGIN:.0%})"
    )
    numbers = {**stats, "worst": names[j]}
    if out > RANGE_OUT_ERROR:
        msg = f"{what}: the policy commands positions the demonstrations never reach; check action units"
        return Finding("actions", "range", "error", msg, numbers)
    return Finding("actions", "range", "warning" if out > RANGE_OUT_WARN else "ok", what, numbers)


def _gripper_finding(name: str, stats: dict[str, Any], seconds_per_frame: float) -> Finding:
    numbers = {k: v for k, v in stats.items() if k != "lags"}
    numbers["mean_lag_s"] = float(np.mean(stats["lags"]) * seconds_per_frame) if stats["lags"] else None
    for high, word in ((True, "above"), (False, "below")):
        rec = stats["recorded_high"] if high else 1 - stats["recorded_high"]
        pred = stats["predicted_high"] if high else 1 - stats["predicted_high"]
        if rec >= GRIPPER_STATE_MIN and pred == 0:
            msg = (
                f"the predicted {name!r} never goes {word} {stats['threshold']:.3g} although the "
                f"demonstrations are there in {100 * rec:.0f}% of the frames: the gripper never closes "
                "(or never opens)"
            )
            return Finding("actions", f"gripper {name}", "error", msg, numbers)
    total, missed = stats["switches"], stats["missed"]
    if total == 0:
        msg = f"{name!r}: the replayed demonstrations never open or close it"
        return Finding("actions", f"gripper {name}", "ok", msg, numbers)
    lag = f" (mean lag {numbers['mean_lag_s']:.2f} s)" if numbers["mean_lag_s"] is not None else ""
    within = f"within {GRIPPER_MATCH_S:g} s{lag}"
    msg = f"{name!r}: {total - missed} of {total} recorded open/close switches predicted {within}"
    severity = "warning" if missed / total > GRIPPER_MISSED_WARN else "ok"
    return Finding("actions", f"gripper {name}", severity, msg, numbers)


def _jump_finding(stats: dict[str, Any], n_exec: int) -> Finding:
    numbers = {k: round(v, 5) for k, v in stats.items()} | {"n_action_steps": n_exec}
    what = (
        f"at chunk switches (every {n_exec} steps) the action jumps {stats['boundary_jump']:.3f} std, "
        f"{stats['ratio']:.1f}x the step between consecutive actions of a chunk"
    )
    if stats["ratio"] > JUMP_RATIO_WARN:
        msg = f"{what}: the arm lurches at every new chunk (fewer n_action_steps or temporal ensembling)"
        return Finding("actions", "chunk switches", "warning", msg, numbers)
    return Finding("actions", "chunk switches", "ok", what, numbers)


# ------------------------------------------------------------------------------------------ deployment


def processor_roundtrip(policy: Any, action: np.ndarray) -> dict[str, Any] | None:
    """The policy's action (de-)normalization applied to dataset actions ``(N, A)``: ``normalized`` (what
    training fit the model to), ``roundtrip`` (that de-normalized again, as deployed actions are),
    ``where`` (what does the de-normalizing) and ``missing`` (processor files that are not there).

    A policy with ``processors(action)`` (a LeRobot policy: its saved pre/post-processors) answers
    itself; an actlab policy's normalizer buffers are used for ``action``; None when neither applies
    (e.g. relative actions, normalized relative to the state).
    """
    if hasattr(policy, "processors"):
        out = policy.processors(action)
        return {
            "normalized": np.asarray(out["normalized"], float),
            "roundtrip": np.asarray(out["roundtrip"], float),
            "where": getattr(policy, "postprocessor_file", "the postprocessor"),
            "missing": list(getattr(policy, "missing_processors", ())),
        }
    norm = getattr(policy, "normalizer", None)
    if norm is None or ACTION not in getattr(norm, "feature_keys", ()):
        return None
    import torch

    entry = norm.get(ACTION)
    a = torch.as_tensor(action, dtype=torch.float32, device=entry.mean.device)  # (N, A)
    with torch.no_grad():
        z = norm.normalize(ACTION, a)
        back = norm.unnormalize(ACTION, z)
    return {
        "normalized": z.cpu().numpy().astype(float),
        "roundtrip": back.cpu().numpy().astype(float),
        "where": "the bundle's normalizer (model.safetensors)",
        "missing": [],
    }


def check_processors(found: Mapping[str, Any], probe: np.ndarray, scale: np.ndarray) -> list[Finding]:
    """Missing processor files, an identity postprocessor, a postprocessor that does not undo the
    preprocessor's normalization (``found``: :func:`processor_roundtrip` of ``probe`` (N, A))."""
    where = found["where"]
    findings = []
    for file in found["missing"]:
        msg = (
            f"{file} is missing: lerobot refuses to load the policy without it, and a script that runs the "
            "policy without its processors sends normalized actions (or reads raw observations); copy it "
            "from the training run's checkpoint (checkpoints/N/pretrained_model)"
        )
        findings.append(Finding("deployment", Path(file).name, "error", msg, {"file": str(file)}))
    z, back = found["normalized"], found["roundtrip"]
    err = np.abs(back - probe) / scale  # (N, A)
    numbers = {
        "roundtrip_error": float(err.max()),
        "dataset": probe.round(5).tolist(),
        "normalized": z.round(5).tolist(),
        "deployed": back.round(5).tolist(),
    }
    if found["missing"]:
        return findings
    # "normalized" means moved by more than float32 rounding, in dataset std: identity processors (actlab's
    # plugin normalizes inside the policy) differed from the float64 probe by ~1e-6 and were called "an
    # identity de-normalization ... off by up to 0.00 std"
    moved = float((np.abs(z - probe) / scale).max()) > ROUNDTRIP_TOL
    if np.allclose(back, z, rtol=0, atol=1e-6) and moved:
        msg = (
            f"{where} returns the normalized action unchanged (an identity de-normalization): the robot "
            f"gets values around 0 +- 1 instead of the dataset's actions (off by up to {err.max():.2f} std); "
            "load the postprocessor saved with the policy (its unnormalizer has the training stats)"
        )
        return [Finding("deployment", "postprocessor", "error", msg, numbers)]
    if err.max() > ROUNDTRIP_TOL:
        msg = (
            f"the dataset's actions normalized and de-normalized again by {where} come back off by up to "
            f"{err.max():.3g} std: the postprocessor's statistics are not the preprocessor's (one of the two "
            "files replaced?); save both from the same training run"
        )
        return [Finding("deployment", "postprocessor", "error", msg, numbers)]
    msg = (
        f"the dataset's actions (q01, mean, q99) normalized as in training and de-normalized by {where} "
        f"land back where they were (error {err.max():.1e} std)"
    )
    return [Finding("deployment", "postprocessor", "ok", msg, numbers)]


def check_reset(policy: Any, frame_a: Mapping[str, Any], frame_b: Mapping[str, Any], scale: np.ndarray):
    """After ``reset()``, ``select_action`` on a new observation B must start from B's own chunk, not
    continue the chunk computed for the previous observation A (a queue that survives the reset).

    ``frame_a`` / ``frame_b``: single observations (batch 1, no time axis), as a robot loop passes them.
    The torch seed is the same before every reset, so a sampling policy draws the same noise.
    """
    import torch

    def fresh() -> None:
        torch.manual_seed(0)
        policy.reset()

    fresh()
    ref_b = to_numpy(policy.predict_action_chunk(dict(frame_b)))  # (1, H, A)
    fresh()
    ref_a = to_numpy(policy.predict_action_chunk(dict(frame_a)))  # (1, H, A)
    fresh()
    policy.select_action(dict(frame_a))
    fresh()
    got = to_numpy(policy.select_action(dict(frame_b))).reshape(ref_b[:, 0].shape)  # (1, A)
    fresh()
    new = float(np.max(np.abs(got - ref_b[:, 0]) / scale))
    previous = ref_a[:, 1] if ref_a.shape[1] > 1 else ref_a[:, 0]  # what a stale queue pops next
    old = float(np.max(np.abs(got - previous) / scale))
    separation = float(np.max(np.abs(previous - ref_b[:, 0]) / scale))
    numbers = {"error_vs_new": new, "error_vs_previous": old, "separation": separation}
    if new <= RESET_TOL:
        msg = (
            "after reset(), the first action for a new observation comes from its own chunk (the queue "
            "was cleared)"
        )
        return Finding("deployment", "reset", "ok", msg, numbers)
    if separation < RESET_SEPARATION_MIN:
        msg = "the two test observations ask for nearly the same actions: reset() not checked"
        return Finding("deployment", "reset", "warning", msg, numbers)
    if old < new:
        msg = (
            "reset() does not clear the action queue: after reset(), the action for a new observation is "
            f"the previous observation's next queued action (off by {old:.3g} std from it, {new:.3g} from "
            "its own chunk), so every episode starts with the last episode's leftover actions; call "
            "policy.reset() before each episode and make sure it empties the queue"
        )
        return Finding("deployment", "reset", "error", msg, numbers)
    msg = (
        f"after reset(), select_action differs from predict_action_chunk by {new:.3g} std (a sampling "
        "policy?) but is not the previous chunk's action"
    )
    return Finding("deployment", "reset", "warning", msg, numbers)
