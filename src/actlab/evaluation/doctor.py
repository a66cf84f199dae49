"""Policy doctor: tell "the policy did not learn" from "the evaluation is wrong", offline, on a dataset.

``diagnose(policy, dataset)`` runs five checks and ends with one verdict a person can act on:

- **inputs**: the cameras, image sizes and state/action sizes the policy reads vs what the dataset has;
- **normalization**: the statistics the policy normalizes with vs the dataset's (mean shift in dataset
  std units, std ratio, degenerate image std);
- **replay**: open-loop replay of training and held-out episodes against two baselines on the same
  frames (``actlab.evaluation.replay``);
- **actions**: predicted range vs the dataset's q01..q99, a gripper that never closes or misses its
  timing, jumps at chunk boundaries;
- **deployment**: what goes wrong between a good checkpoint and the robot: the action de-normalization
  (the postprocessor: present, not an identity, undoing the preprocessor's normalization of the dataset's
  actions) and ``reset()`` clearing the action queue (after a reset, the first action for a new
  observation comes from that observation's chunk, not from the previous one's).

Every check returns :class:`Finding` objects (check, name, severity, numbers, message with the fix), so
the ``--json`` output and the markdown report come from the same data. The policy is used through the
narrow inference interface only: ``reset()``, ``predict_action_chunk(obs) -> (B, H, A)``,
``select_action(obs)`` (the reset check), a ``features`` dict (LeRobot style) and its normalization
statistics (the normalizer buffers of an actlab policy, else ``stats_for_bundle()`` or a ``stats``
mapping), ``processors(action)`` where it has one (a LeRobot policy's processor round trip);
``observation_delta_indices`` and ``config.chunk_size`` / ``n_action_steps`` / ``stats_request()`` are
used when present. Observations are built as training built
them: frames from the FrameStore at the size the policy's features record (``actlab.resize``), gathered
by ``DeviceData`` at the policy's own observation offsets.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actlab.datasets import FrameStore, compute_stats, open_dataset
from actlab.datasets.device import DeviceData
from actlab.errors import ActlabError
from actlab.evaluation.policy_io import RESIZE_INFO, inputs_from_features, policy_inputs
from actlab.evaluation.replay import (
    ACTION,
    STATE,
    EpisodeReplay,
    gripper_stats,
    jump_stats,
    range_stats,
    replay_episodes,
    replay_summary,
    to_numpy,
)
from actlab.policies import load_policy
from actlab.utils.io import atomic_dir, atomic_write_json, atomic_write_text
from actlab.utils.table import table
from actlab.viz.doctor import plot_replay

SEVERITIES = ("ok", "warning", "error")

# Normalization. The trainer computes the stats on the whole dataset it trains on, so a policy doctored on
# its own dataset shows shift 0 and ratio 1. A mean off by one dataset std puts the policy's inputs (or the
# actions it unnormalizes) outside what it was trained on; a quarter std is the size of the difference
# between two recording sessions of one task: worth a look, not an error.
MEAN_SHIFT_WARN = 0.25  # |mean_policy - mean_dataset| / std_dataset, worst dimension
MEAN_SHIFT_ERROR = 1.0
# std ratio max(a/b, b/a), worst dimension: 2x squeezes or stretches every normalized value by half.
STD_RATIO_WARN = 1.25
STD_RATIO_ERROR = 2.0
# Image std (in [0, 1] units) below this turns ordinary pixels into values of hundreds (the datasets
# doctor flags the same bound in a dataset's stats.json).
IMAGE_STD_MIN = 0.01
# ImageNet's per-channel std: image normalization chosen for a pretrained backbone, not computed from data
# (LeRobot's default, dataset.use_imagenet_stats), so it is not compared with the dataset's.
IMAGENET_STD = (0.229, 0.224, 0.225)
# A dataset std at or below this (compute_stats' absolute floor, 1e-3) is a joint that never moved; the
# policy's normalizer uses std 1 there on purpose, so the ratio is not compared.
CONSTANT_STD = 1.01e-3

# Replay. Skill = the policy's whole-chunk error / the better baseline's on the same frames. Measured on
# the test suite's tiny policies: untrained 3-5, trained 0.1-0.4 on training episodes; a policy that
# generalizes stays well under 1 on held-out episodes (0.4), one that memorized is above 1 there (1.5).
SKILL_LEARNED = 0.7  # below: the policy beats the baselines
# Above this a policy that learned is still imprecise: on the demo's run (2026-11-24) step 1000 replayed at
# skill 0.18 and succeeded in 38% of the sweep, step 5000 at 0.08 and 100%. Its advice then points at
# training (more steps, another checkpoint) before the deployment setup.
SKILL_PRECISE = 0.15
# A checkpoint whose validation loss is this many times its run's best checkpoint's is behind it (the
# demo's step 1000 vs its best; windows of one run differ by a few percent).
RUN_BEST_RATIO = 1.25

# Actions. Predictions beyond q01..q99 widened by RANGE_MARGIN of the span are out of range.
RANGE_MARGIN = 0.1
RANGE_OUT_WARN = 0.02  # fraction of predicted actions (every chunk step) out of range, worst joint
RANGE_OUT_ERROR = 0.10
# A state the demonstrations spend this fraction of frames in (e.g. gripper closed) must be predicted
# at least once.
GRIPPER_STATE_MIN = 0.05
# A recorded gripper switch with no predicted switch of the same direction within this many seconds is
# missed; more than GRIPPER_MISSED_WARN of them missed is a warning.
GRIPPER_MATCH_S = 1.0
GRIPPER_MISSED_WARN = 0.25
# Chunk boundaries: the jump where execution switches to the next chunk over the step between
# consecutive actions inside a chunk. A policy whose consecutive chunks agree sits near 1-3 (its
# prediction error); a switch that makes the arm lurch is many times that.
JUMP_RATIO_WARN = 10.0

# Deployment. The round trip postprocess(normalize(a)) of the dataset's actions must give a back, to this
# fraction of the dataset's action std (float32 arithmetic is ~1e-6).
ROUNDTRIP_TOL = 1e-3
# Reset: after reset(), select_action(B) must equal the first action of B's own chunk (same seed) to this
# many dataset stds; a policy that computes differently each call (sampling) is judged by which chunk it
# is closer to.
RESET_TOL = 1e-3
# The frames A and B of the reset check must ask for actions this far apart (dataset stds), else the
# check cannot tell the two chunks apart.
RESET_SEPARATION_MIN = 0.05


@dataclasses.dataclass(frozen=True)
class Finding:
    """One result of one check; ``message`` says what it means and what to do."""

    # which check: "inputs", "normalization", "split", "replay", "actions", "deployment"
    check: str
    # what was checked, e.g. "observation.images.top", "replay.train", "gripper"
    name: str
    # "ok", "warning" or "error" (an error makes the doctor exit 1)
    severity: str
    # the problem and the fix (or what it means when ok)
    message: str
    # the figures behind it (JSON-ready)
    numbers: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")


# The verdicts, in the order a person should fix things: a policy that cannot read its inputs or
# normalizes with the wrong stats says nothing about what it learned.
VERDICTS = {
    "input_mismatch": "the policy does not get the inputs it was trained on: fix the camera names and "
    "sizes or the state/action layout before judging the policy",
    "stats_mismatch": "this policy was trained on other data or other stats: its normalization does not "
    "match this dataset (doctor it on its training data; check units; retrain with this dataset's stats)",
    "deployment_fault": "the policy is run wrong: its actions are not de-normalized as in training, or "
    "reset() leaves the previous episode's actions queued (see the deployment findings); fix the "
    "deployment before judging what it learned",
    "did_not_learn": "the policy did not learn: on its own training episodes it is no better than holding "
    "the current state or outputting the mean action (train longer; check the loss curve, the learning "
    "rate, and that the dataset's actions are what you mean them to be)",
    "memorized": "memorized, does not generalize: it reproduces its training episodes but is at baseline "
    "level on held-out ones (more demonstrations or augmentation, an earlier checkpoint, a smaller model)",
    "does_not_generalize": "no better than the baselines on held-out episodes; the training episodes are "
    "unknown, so 'did not learn' and 'memorized' cannot be told apart (pass --train-episodes)",
    "unsafe_actions": "it reproduces the demonstrations on average, but its actions leave the dataset's "
    "range or never move the gripper (see the action findings)",
    "behind_run_best": "it learned, but its run has a clearly better checkpoint (see the checkpoint "
    "finding): doctor or evaluate that one (`actlab eval RUN` sweeps them all) before suspecting the "
    "deployment setup",
    "reproduces_demonstrations": "reproduces the demonstrations open-loop: if it fails on the robot or in "
    "the sim, look at the deployment setup (policy.reset() before each episode, the same stats, camera "
    "names and sizes, action units)",
    "not_replayed": "no episode was replayed, so learning was not measured (see the findings)",
}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The doctor's conclusion: a stable name (a key of VERDICTS) and the sentence to act on."""

    name: str
    message: str


@dataclasses.dataclass(frozen=True)
class DoctorConfig:
    """Which episodes to replay and how."""

    # training episodes to replay (None: the split recorded in the bundle)
    train_episodes: tuple[int, ...] | None = None
    # held-out episodes to replay (None: the split recorded in the bundle)
    heldout_episodes: tuple[int, ...] | None = None
    # at most this many episodes of each set are replayed, evenly spread (0: all)
    max_episodes: int = 10
    # every stride-th frame is replayed (chunk-boundary jumps need stride | n_action_steps)
    stride: int = 1
    # frames per predict_action_chunk call
    batch_size: int = 64
    # where the policy runs and batches are gathered
    device: str = "cpu"
    # directory of FrameStores (None: the run's data.cache_dir for a run checkpoint, else $ACTLAB_CACHE)
    cache_dir: str | None = None
    # print the FrameStore's decode progress to stderr
    progress: bool = True

    def __post_init__(self) -> None:
        for name, low in (("max_episodes", 0), ("stride", 1), ("batch_size", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < low:
                flag = "--" + name.replace("_", "-")
                raise ActlabError(f"{flag} must be an integer >= {low}", field=flag, found=value)


@dataclasses.dataclass
class DoctorResult:
    """Everything the doctor found; ``as_dict()`` is the ``--json`` output."""

    policy: str  # what was diagnosed (the bundle path)
    dataset: str  # the dataset root
    findings: list[Finding]
    verdict: Verdict
    # per set ("train", "heldout"): replay_summary (errors per joint, baselines, skill)
    replay: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    # per set: the replayed arrays (for the figure; not in as_dict)
    episodes: dict[str, list[EpisodeReplay]] = dataclasses.field(default_factory=dict)
    joint_names: list[str] = dataclasses.field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """1 when any finding is an error, else 0."""
        return int(any(f.severity == "error" for f in self.findings))

    def as_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "dataset": self.dataset,
            "verdict": dataclasses.asdict(self.verdict),
            "exit_code": self.exit_code,
            "findings": [dataclasses.asdict(f) for f in self.findings],
            "replay": self.replay,
            "joint_names": self.joint_names,
        }


# ------------------------------------------------------------------------------------------ inputs


def _names(feature: Mapping[str, Any] | None) -> list[str] | None:
    """A feature's per-dimension names (a list, or LeRobot's {"motors": [...]})."""
    names = (feature or {}).get("names")
    if isinstance(names, Mapping):
        names = next(iter(names.values()), None)
    return [str(n) for n in names] if isinstance(names, list) else None


def _shape(feature: Mapping[str, Any] | None) -> tuple[int, ...] | None:
    shape = (feature or {}).get("shape")
    return tuple(int(s) for s in shape) if isinstance(shape, (list, tuple)) else None


def _image_hw(feature: Mapping[str, Any]) -> tuple[int, int]:
    """(H, W) of a LeRobot camera feature (``[H, W, C]``, or ``[C, H, W]`` when named so)."""
    return next(iter(inputs_from_features({"observation.images.x": feature}).image_hw.values()))


def _resize_info(feature: Mapping[str, Any]) -> Mapping[str, Any] | None:
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
    want, have = _shape(pfeat), _shape(dfeat)
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
    p_names, d_names = _names(pfeat), _names(dfeat)
    if p_names and d_names and p_names != d_names:
        msg = f"{key!r} names its dimensions {d_names} here, {p_names} in the policy: check order and units"
        return Finding("inputs", key, "warning", msg, {**numbers, "policy": p_names, "dataset": d_names})
    return Finding("inputs", key, "ok", f"{key!r}: shape {list(have)} as trained", numbers)


def _camera_finding(key: str, hw: tuple[int, int], pfeat: Mapping, dfeat: Mapping) -> Finding:
    src = _image_hw(dfeat)
    numbers: dict[str, Any] = {"policy_hw": list(hw), "dataset_hw": list(src)}
    resize = _resize_info(pfeat)
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
    if np.allclose(back, z, rtol=0, atol=1e-6) and not np.allclose(z, probe, rtol=0, atol=1e-6):
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


# ------------------------------------------------------------------------------------------ verdict


def decide(findings: Sequence[Finding], replay: Mapping[str, Any]) -> Verdict:
    """The first problem in the order a person should fix them; "reproduces" when there is none."""

    def error(check: str, name: str | None = None) -> bool:
        return any(f.check == check and f.severity == "error" and name in (None, f.name) for f in findings)

    if error("inputs"):
        name = "input_mismatch"
    elif error("normalization"):
        name = "stats_mismatch"
    elif error("deployment"):
        name = "deployment_fault"
    elif not replay:
        name = "not_replayed"
    elif error("replay", "replay.train"):
        name = "did_not_learn"
    elif error("replay", "replay.heldout"):
        name = "memorized" if "train" in replay else "does_not_generalize"
    elif error("actions"):
        name = "unsafe_actions"
    elif any(f.check == "checkpoint" and f.severity != "ok" for f in findings):
        name = "behind_run_best"
    else:
        name = "reproduces_demonstrations"
        skill = max((s["skill"] for s in replay.values() if "skill" in s), default=None)
        if skill is not None and skill > SKILL_PRECISE:  # learned, imprecisely: not the deployment first
            return Verdict(
                name,
                f"reproduces the demonstrations open-loop, but not precisely (skill {skill:.2f}; a "
                f"well-trained policy replays under {SKILL_PRECISE}): if it fails, train longer or compare "
                "checkpoints first (`actlab eval RUN` sweeps them all); look at the deployment setup once a "
                "checkpoint that replays precisely still fails",
            )
    return Verdict(name, VERDICTS[name])


def compare_with_run_best(bundle: str | Path) -> Finding | None:
    """How a run checkpoint (``RUN/checkpoints/step_N``) compares with its run's best one (lowest
    validation loss, ``best.json``); None for a bundle outside a run or without validation losses.

    Design choice: the validation loss the run recorded, not a replay of the best checkpoint: it measures
    the same thing (chunk error on held-out episodes, in action std) at no cost, where a second replay
    would double the doctor's time.
    """
    here = Path(bundle).resolve()
    try:
        best = json.loads((here.parent / "best.json").read_text())
        mine = json.loads((here / "actlab.json").read_text())["extra"]["train"]["val_loss"]
        best_loss, best_path = float(best["val_loss"]), str(best["path"])
        mine = float(mine)
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    numbers = {"val_loss": mine, "best": best_path, "best_val_loss": best_loss}
    if best_path == here.name or best_loss <= 0 or mine < RUN_BEST_RATIO * best_loss:
        msg = f"validation loss {mine:.4f}; the run's best checkpoint ({best_path}) {best_loss:.4f}"
        return Finding("checkpoint", "checkpoint vs run best", "ok", msg, numbers)
    msg = (
        f"validation loss {mine:.4f} is {mine / best_loss:.1f}x the run's best checkpoint {best_path} "
        f"({best_loss:.4f}): this one is under-trained or overfit by comparison; doctor "
        f"{here.parent / best_path}"
    )
    return Finding("checkpoint", "checkpoint vs run best", "warning", msg, numbers)


# ------------------------------------------------------------------------------------------ driver


def _read_keys(policy: Any) -> tuple[Any, dict[str, list[int]]]:
    """(PolicyInputs restricted to what the policy reads, the offsets it reads them at)."""
    inputs = policy_inputs(policy)
    if inputs is None:
        raise ActlabError(
            "the policy does not declare its inputs",
            field="features",
            expected="a `features` dict (LeRobot style: observation.* and action, with shapes)",
            found=type(policy).__name__,
            fix="load the policy with load_policy(bundle), or give the object a features dict",
        )
    declared = getattr(policy, "observation_delta_indices", None) or {k: [0] for k in inputs.keys}
    deltas = {k: [int(o) for o in v] for k, v in declared.items()}
    inputs = dataclasses.replace(
        inputs,
        state_keys=tuple(k for k in inputs.state_keys if k in deltas),
        image_hw={k: v for k, v in inputs.image_hw.items() if k in deltas},
    )
    return inputs, deltas


def _store_size(policy_features: Mapping[str, Any], cameras: Sequence[str]) -> int | None:
    """The FrameStore image size the policy was trained on (its features record it); None: native."""
    sizes = set()
    for key in cameras:
        info = _resize_info(policy_features[key])
        if info is not None and "image_size" in info:
            sizes.add(int(info["image_size"]))
    return sizes.pop() if len(sizes) == 1 else None


def diagnose(
    policy: Any,
    dataset: str | Path | Any,
    cfg: DoctorConfig | None = None,
    *,
    bundle: str | Path | None = None,
    name: str | None = None,
    split: Mapping[str, Any] | None = None,
) -> DoctorResult:
    """Every check of ``policy`` on ``dataset`` (a path or an opened dataset), and the verdict.

    ``policy``: any object with ``reset()``, ``predict_action_chunk(obs)`` and ``features`` (see the
    module docstring). ``bundle``: its bundle directory, where the training split is recorded; ``split``:
    the training split in that form when it comes from elsewhere (a LeRobot train_config.json).
    """
    cfg = cfg or DoctorConfig()
    ds = open_dataset(dataset) if isinstance(dataset, (str, Path)) else dataset
    inputs, deltas = _read_keys(policy)
    features = dict(policy.features)
    findings, replayable = check_inputs(features, inputs, ds.features)
    cameras = [k for k in inputs.image_hw if k in ds.camera_keys]
    store = None
    if cameras:  # the frames as training stored them: decoded once, resized as the policy's features say
        size = _store_size(features, cameras)
        store = FrameStore.build(
            ds, image_size=size, cache_dir=cfg.cache_dir, keys=cameras, progress=cfg.progress
        )
    request = getattr(getattr(policy, "config", None), "stats_request", None)
    stats_dir = Path(cfg.cache_dir) / "stats" if cfg.cache_dir else None
    try:  # the stats the policy's config asks for (relative actions, state deltas), as training computed them
        ds_stats = compute_stats(
            ds, **(request() if callable(request) else {}), store=store, cache_dir=stats_dir
        )
    except ActlabError as e:  # e.g. a dataset without the state the deltas are computed from
        findings.append(
            Finding("normalization", "dataset stats", "warning", f"only absolute stats: {e.problem}")
        )
        ds_stats = compute_stats(ds, store=store, cache_dir=stats_dir)
    findings += check_normalization(applied_stats(policy), ds_stats)
    action = ds_stats[ACTION]
    scale = np.maximum(np.asarray(action["std"], float), 1e-6)
    probe = np.stack([np.asarray(action[k], float) for k in ("q01", "mean", "q99")])  # (3, A)
    found = processor_roundtrip(policy, probe)
    if found is not None:
        findings += check_processors(found, probe, scale)
    train, held, where = choose_episodes(ds, cfg, split if split is not None else recorded_split(bundle))
    findings.append(where)
    n_actions = (_shape(ds.features.get(ACTION)) or (0,))[-1]
    result = DoctorResult(
        policy=name or type(policy).__name__,
        dataset=str(ds.root),
        findings=findings,
        verdict=Verdict("", ""),
        joint_names=_names(ds.features.get(ACTION)) or [f"action[{i}]" for i in range(n_actions)],
    )
    if replayable:
        _replay(policy, ds, store, inputs, deltas, ds_stats, {"train": train, "heldout": held}, cfg, result)
        if hasattr(policy, "select_action"):  # what a robot loop calls after reset()
            frame_a, frame_b = _reset_frames(ds, store, inputs, deltas, cfg, scale)
            result.findings.append(check_reset(policy, frame_a, frame_b, scale))
    else:
        msg = "not replayed: the policy cannot read this dataset's observations (see the input findings)"
        findings.append(Finding("replay", "replay", "warning", msg))
    result.verdict = decide(result.findings, result.replay)
    return result


def _replay(
    policy, ds, store, inputs, deltas, ds_stats, sets, cfg: DoctorConfig, result: DoctorResult
) -> None:
    config = getattr(policy, "config", None)
    horizon = getattr(config, "chunk_size", None) or _probe_horizon(policy, ds, store, deltas, cfg)
    n_exec = int(getattr(config, "n_action_steps", None) or horizon)
    # the memmap path: the replay reads each frame once, a copy of the whole store would cost more
    data = DeviceData(ds, store, {**deltas, ACTION: list(range(horizon))}, cfg.device, frames_on_device=False)
    resize = _resize_for(store, inputs) if store is not None else {}
    action = ds_stats[ACTION]
    scale = np.maximum(np.asarray(action["std"], float), 1e-6)
    # holding the state is an action only when the state and the action are the same joints
    hold = (_shape(ds.features.get(STATE)) or (0,))[-1] == len(scale)
    bounds = {int(e.index): (int(e.index), int(e.start), int(e.stop)) for e in ds.episodes}
    replayed = []
    for split, episodes in sets.items():
        chosen = [bounds[e] for e in spread(episodes, cfg.max_episodes)]
        if not chosen:
            continue
        reps = replay_episodes(policy, data, chosen, list(deltas), resize, cfg.batch_size, cfg.stride)
        summary = replay_summary(reps, np.asarray(action["mean"], float), scale, hold)
        result.replay[split] = summary
        result.episodes[split] = reps
        result.findings.append(replay_finding(split, summary))
        replayed += reps
    if replayed:
        result.findings += check_actions(replayed, action, result.joint_names, n_exec, cfg.stride, ds.fps)


def _resize_for(store: Any, inputs: Any) -> dict[str, tuple[tuple[int, int], bool]]:
    """Evaluation's resize, only where the dataset's camera is not the trained size."""
    resize = {}
    for key, hw in inputs.image_hw.items():
        if tuple(store.frames[key].shape[-2:]) != tuple(hw):
            resize[key] = (tuple(hw), key in inputs.fit_pad)
    return resize


def _reset_frames(ds, store, inputs, deltas, cfg: DoctorConfig, scale: np.ndarray) -> tuple[dict, dict]:
    """Two single observations (batch 1, no time axis) whose recorded actions are far apart: the first
    frame and, of up to 64 frames spread over the dataset, the one whose action differs most from it."""
    from actlab.evaluation.policy_io import resize_images

    single = {k: [0] for k in deltas}
    data = DeviceData(ds, store, {**single, ACTION: [0]}, cfg.device, frames_on_device=False)
    idx = np.unique(np.linspace(0, len(ds) - 1, min(64, len(ds))).round().astype(np.int64))
    batch = data.gather(idx)
    act = to_numpy(batch[ACTION]).reshape(len(idx), -1)  # (N, A)
    far = int(np.argmax((np.abs(act - act[0]) / scale.reshape(1, -1)).max(1)))
    resize = _resize_for(store, inputs) if store is not None else {}
    frames = []
    for i in (0, far):
        obs = {k: batch[k][i : i + 1] for k in single}
        for key, (hw, fit_pad) in resize.items():
            obs[key] = resize_images(obs[key], hw, fit_pad=fit_pad)
        frames.append(obs)
    return frames[0], frames[1]


def _probe_horizon(policy, ds, store, deltas, cfg: DoctorConfig) -> int:
    """The chunk length of a policy that does not declare it: one prediction on the first frame."""
    batch = DeviceData(ds, store, deltas, cfg.device, frames_on_device=False).gather(np.zeros(1, np.int64))
    policy.reset()
    return int(to_numpy(policy.predict_action_chunk({k: batch[k] for k in deltas})).shape[1])


def doctor_bundle(bundle: str | Path, dataset: str | Path, cfg: DoctorConfig | None = None) -> DoctorResult:
    """Load ``bundle`` with ``load_policy`` and :func:`diagnose` it on ``dataset``."""
    cfg = cfg or DoctorConfig()
    if cfg.cache_dir is None:
        cfg = dataclasses.replace(cfg, cache_dir=run_cache_dir(bundle))
    policy = load_policy(bundle, device=cfg.device)
    result = diagnose(policy, dataset, cfg, bundle=bundle, name=str(bundle))
    versus_best = compare_with_run_best(bundle)
    if versus_best is not None:
        result.findings.append(versus_best)
        result.verdict = decide(result.findings, result.replay)
    return result


def run_cache_dir(bundle: str | Path) -> str | None:
    """``data.cache_dir`` of the run a checkpoint bundle (``RUN/checkpoints/step_N``) belongs to, so the
    doctor reuses the FrameStore the run decoded; None when there is none."""
    try:
        cfg = json.loads((Path(bundle).resolve().parent.parent / "config.json").read_text())
        cache = cfg["data"]["cache_dir"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        return None
    return cache if isinstance(cache, str) and cache else None


# ------------------------------------------------------------------------------------------ report

_MARK = {"ok": "ok", "warning": "WARN", "error": "ERROR"}
_REPLAY_HEADERS = ["episodes", "n", "frames", "first action", "chunk", "hold chunk", "mean chunk", "skill"]
_JOINT_HEADERS = ["episodes", "joint", "first action", "chunk", "hold chunk", "mean chunk"]


def _replay_rows(result: DoctorResult) -> list[tuple[Any, ...]]:
    nan = {"chunk_mean": float("nan"), "chunk": [float("nan")] * len(result.joint_names)}
    rows = []
    for split, s in result.replay.items():
        p = s["policy"]
        hold = s.get("hold", nan)["chunk_mean"]
        rows.append(
            (
                split,
                len(s["episodes"]),
                s["frames"],
                p["first_mean"],
                p["chunk_mean"],
                hold,
                s["mean"]["chunk_mean"],
                s["skill"],
            )
        )
    return rows


def _joint_rows(result: DoctorResult) -> list[tuple[Any, ...]]:
    rows = []
    for split, s in result.replay.items():
        hold = s["hold"]["chunk"] if "hold" in s else [float("nan")] * len(result.joint_names)
        for j, joint in enumerate(result.joint_names):
            p = s["policy"]
            rows.append((split, joint, p["first"][j], p["chunk"][j], hold[j], s["mean"]["chunk"][j]))
    return rows


def render(result: DoctorResult, markdown: bool = False, figure: str | None = None) -> str:
    """The findings, the replay tables and the verdict, as plain text or as markdown (report.md);
    ``figure``: the replay PNG's file name to link from the markdown."""
    findings = table(
        [(_MARK[f.severity], f.check, f.name, f.message) for f in result.findings],
        ["", "check", "what", "finding"],
        markdown,
    )
    replay = table(_replay_rows(result), _REPLAY_HEADERS, markdown) if result.replay else ""
    if not markdown:
        out = [f"policy:  {result.policy}", f"dataset: {result.dataset}", "", findings]
        if replay:
            out += [
                "",
                "open-loop replay (mean absolute error in dataset action std; skill: chunk / best baseline):",
                replay,
            ]
        out += ["", f"verdict: {result.verdict.name}", f"  {result.verdict.message}"]
        return "\n".join(out) + "\n"
    out = [
        f"# Policy doctor: {result.verdict.name}",
        "",
        f"- policy: `{result.policy}`",
        f"- dataset: `{result.dataset}`",
        "",
        f"**Verdict: {result.verdict.name}**: {result.verdict.message}.",
        "",
        "## Findings",
        "",
        findings,
    ]
    if replay:
        out += [
            "",
            "## Open-loop replay",
            "",
            "Mean absolute error in units of the dataset's action std, of the first predicted action and of "
            "the whole chunk, for the policy and two baselines on the same frames (hold the current state; "
            "the dataset's mean action). Skill: the policy's chunk error over the better baseline's "
            "(1 = baseline level, 0 = exact).",
            "",
            replay,
            "",
            table(_joint_rows(result), _JOINT_HEADERS, True),
        ]
        if figure:
            out += ["", f"![predicted vs recorded actions]({figure})"]
    return "\n".join(out) + "\n"


def figure_episodes(result: DoctorResult, per_set: int = 2) -> list[dict[str, Any]]:
    """Plain arrays for ``actlab.viz.doctor.plot_replay``: the first ``per_set`` episodes of each set."""
    out = []
    for split, reps in result.episodes.items():
        for r in reps[:per_set]:
            n = r.pred.shape[2]
            out.append(
                {
                    "title": f"{'training' if split == 'train' else 'held-out'} episode {r.episode}",
                    "frames": r.frames - r.frames[0],
                    "recorded": r.target[:, 0],
                    "predicted": r.pred[:, 0],
                    "chunks": r.pred,
                    "hold": r.state[:, :n] if r.state.shape[1] >= n else None,
                }
            )
    return out


# What a doctor report directory says wrote it: --overwrite replaces only an earlier report.
DOCTOR_KIND = "actlab policy doctor"


def write_report(
    result: DoctorResult, out_dir: str | Path, per_set: int = 2, overwrite: bool = False
) -> Path:
    """Write ``out_dir`` atomically: report.md, doctor.json (``as_dict()``) and replay.png."""
    episodes = figure_episodes(result, per_set)
    with atomic_dir(out_dir, overwrite, kind=DOCTOR_KIND, inputs=(result.policy, result.dataset)) as tmp:
        atomic_write_json(tmp / "doctor.json", result.as_dict())
        if episodes:
            title = f"{result.policy}: {result.verdict.name}"
            plot_replay(episodes, result.joint_names, tmp / "replay.png", title=title)
        atomic_write_text(tmp / "report.md", render(result, True, "replay.png" if episodes else None))
    return Path(out_dir)
