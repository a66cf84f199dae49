"""The doctor's findings and verdicts: the thresholds every check judges by, :class:`Finding`, the
verdicts in the order a person should fix things (:func:`decide`), the config and the result."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.evaluation.replay import (
    EpisodeReplay,
)

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
