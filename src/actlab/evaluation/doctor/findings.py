"""The doctor's findings and verdicts: the thresholds every check judges by, :class:`Finding`, the
verdicts in the order a person should fix things (:func:`decide`), the config and the result."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.evaluation.compare import check_checkpoint_entries, read_checkpoint_outcomes
from actlab.evaluation.replay import (
    EpisodeReplay,
)
from actlab.evaluation.results import best_index, recorded_weights
from actlab.utils.io import file_sha256
from actlab.utils.stats import paired_compare

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
# Where the demo writes its checkpoint sweep, relative to the demo directory (DIR/run is the run).
SWEEP_RESULTS = "eval/sweep/results.json"

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
    "finding: by success where a sweep measured it, else by validation loss): doctor or evaluate that one "
    "(`actlab eval RUN` sweeps them all) before suspecting the deployment setup",
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
    # results.json of a checkpoint sweep of the bundle's run (`actlab eval RUN --out DIR`), or DIR: the
    # checkpoint is compared with the run's best by success there (None: the demo's DIR/eval/sweep when
    # the bundle is DIR/run/checkpoints/step_N, else by validation loss)
    sweep: str | None = None

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


def compare_with_run_best(bundle: str | Path, sweep: str | Path | None = None) -> Finding | None:
    """How a run checkpoint (``RUN/checkpoints/step_N``) compares with its run's best one; None for a
    bundle outside a run, or when neither success nor validation losses were measured.

    The criterion is the demo's and the sweep's: success, where a checkpoint sweep measured it (``sweep``,
    a results.json of ``actlab eval RUN`` or its directory; else the demo's ``DIR/eval/sweep/results.json``
    beside ``DIR/run``). The best is the sweep's best (:func:`best_index`), and this checkpoint is behind it
    when McNemar's exact test on the same seeds says so (p < 0.05): from the demo's step 2000 (45/50) the
    validation loss pointed to step 3000 (31/50), the demo chose by success. Without a sweep: the
    validation loss the run recorded (``best.json``), which measures chunk error on held-out episodes, not
    success, and says so.
    """
    here = Path(bundle).resolve()
    measured = _sweep_comparison(here, sweep)
    if measured is not None:
        return measured
    try:
        best = json.loads((here.parent / "best.json").read_text())
        mine = json.loads((here / "actlab.json").read_text())["extra"]["train"]["val_loss"]
        best_loss, best_path = float(best["val_loss"]), str(best["path"])
        mine = float(mine)
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
    if not (math.isfinite(best_loss) and math.isfinite(mine)):  # "1.2241 is nanx the run's best" before
        bad, where = (best_loss, here.parent / "best.json")
        if math.isfinite(best_loss):
            bad, where = (mine, here / "actlab.json")
        msg = (
            f"not compared with the run's best checkpoint: {where} records a validation loss of {bad} "
            "(edited or damaged; actlab writes a finite number)"
        )
        return Finding("checkpoint", "checkpoint vs run best", "warning", msg, {"criterion": "val_loss"})
    numbers = {"criterion": "val_loss", "val_loss": mine, "best": best_path, "best_val_loss": best_loss}
    unmeasured = (
        f"success not measured: `actlab eval {here.parent.parent} --out DIR` sweeps the checkpoints, then "
        "--sweep DIR/results.json judges by success"
    )
    if best_path == here.name or best_loss <= 0 or mine < RUN_BEST_RATIO * best_loss:
        msg = f"validation loss {mine:.4f}; the run's best checkpoint ({best_path}) {best_loss:.4f}"
        msg += f" ({unmeasured})"
        return Finding("checkpoint", "checkpoint vs run best", "ok", msg, numbers)
    msg = (
        f"validation loss {mine:.4f} is {mine / best_loss:.1f}x the run's best checkpoint {best_path} "
        f"({best_loss:.4f}): this one is under-trained or overfit by comparison; doctor "
        f"{here.parent / best_path} ({unmeasured})"
    )
    return Finding("checkpoint", "checkpoint vs run best", "warning", msg, numbers)


def find_sweep(bundle: Path) -> Path | None:
    """The demo's sweep of the run ``bundle`` belongs to (``DIR/eval/sweep/results.json`` for
    ``DIR/run/checkpoints/step_N``), when it is there."""
    path = bundle.parent.parent.parent / SWEEP_RESULTS
    return path if path.is_file() else None


def _measured_other_weights(checkpoints: list, results: Path | str = "results.json") -> list[str]:
    """The swept checkpoints whose recorded weights (results.json's weights_sha256, from actlab eval) are not
    the ones their bundle holds now. A sweep written before the record is said and taken as it is; a
    record that is not a digest is refused: a number, null or a record removed from the file judged a run
    trained again by the old weights' success, "ok", without a word (26th fault run,
    ds_wsha_num_retrained)."""
    out, unrecorded = [], []
    for i, c in enumerate(checkpoints):
        if "weights_sha256" not in c:
            unrecorded.append(str(c.get("name")))
            continue
        was, path = c["weights_sha256"], c.get("path")
        if not (isinstance(was, str) and was):
            raise ActlabError(
                "the checkpoint sweep's record of the weights it measured is damaged",
                file=results,
                field=f"checkpoints[{i}].weights_sha256",
                expected="the sha256 of the checkpoint's model.safetensors, as actlab eval wrote it",
                found=repr(was)[:80],
                fix="sweep the run again (actlab eval RUN --out NEW_DIR) and pass that, or leave --sweep out",
            )
        now = _weights_now(path)
        if now is not None and now != was:
            out.append(f"{c.get('name')}: sha256 {was[:12]}... measured, {now[:12]}... now")
    if unrecorded:
        print(f"note: {results} predates the record of the weights it measured (no weights_sha256 for "
              f"{', '.join(unrecorded)}): its success rates are taken as those of the checkpoints there now "
              "(sweep the run again to have them compared)", file=sys.stderr)  # fmt: skip
    return out


def _weights_now(bundle: Any) -> str | None:
    """The sha256 of ``bundle``'s weights as its actlab.json records it, else the file's own; None when the
    checkpoint is not there. A checkpoint whose record was removed was skipped: a run trained again kept
    the old weights' success, "ok", exit 0 (27th fault run, ds_retrain_newsha_rm)."""
    if not isinstance(bundle, (str, Path)):
        return None
    if (found := recorded_weights(bundle)) is not None:
        return found
    try:
        return file_sha256(Path(bundle) / "model.safetensors")
    except OSError:
        return None


def _sweep_comparison(here: Path, sweep: str | Path | None) -> Finding | None:
    """The success-based finding when a sweep holds this checkpoint; None when there is no such sweep.
    A ``sweep`` given by the user that cannot be read, or that lacks the checkpoint, is an ActlabError."""
    given = sweep is not None
    path = Path(sweep) if given else find_sweep(here)
    if path is None:
        return None
    if path.is_dir():
        path = path / "results.json"
    try:
        results = json.loads(path.read_text())
        checkpoints = results["checkpoints"]
        check_checkpoint_entries(checkpoints, path)
        mine = next((i for i, c in enumerate(checkpoints) if _same_checkpoint(c["path"], here)), None)
        # each checkpoint's outcomes read as eval compare reads them: "false" was read as solved
        # (bool("false")), null as failed, an empty list as "0/0 success"
        outcomes = [_seed_outcomes(c, i, path) for i, c in enumerate(checkpoints)]
    except ActlabError:
        if not given:
            return None
        raise
    except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        if not given:
            return None
        raise ActlabError(
            "cannot read the checkpoint sweep's results",
            file=path,
            field="--sweep",
            expected="results.json written by actlab eval RUN --out DIR (or that directory)",
            found=f"{type(e).__name__}: {e}",
            fix="pass the results.json of a sweep of this checkpoint's run, or leave --sweep out",
        ) from e
    try:
        stale = _measured_other_weights(checkpoints, path)
    except ActlabError:
        if not given:  # (the demo's own sweep, damaged: judged by validation loss instead)
            return None
        raise
    if stale and mine is not None:
        if not given:  # (the demo's own sweep of a run changed since: judged by validation loss instead)
            return None
        # a run trained again under the same directory kept its sweep's success rates for new weights:
        # "ok ... 0/2 on the sweep's seeds", exit 0 (25th fault run, doctor_sweep_stale)
        raise ActlabError(
            "the checkpoint sweep measured other weights than the run's checkpoints now hold (trained "
            "again, or replaced, since the sweep)",
            file=path,
            field="--sweep",
            expected="weights_sha256 of each swept checkpoint as its actlab.json records it now",
            found=", ".join(stale),
            fix="sweep the run again (actlab eval RUN --out NEW_DIR) and pass that, or leave --sweep out",
        )
    if mine is None:
        if not given:
            return None
        raise ActlabError(
            "the checkpoint sweep does not hold this checkpoint",
            file=path,
            field="--sweep",
            expected=str(here),
            found=", ".join(str(c.get("name")) for c in checkpoints),
            fix="pass the sweep of this checkpoint's run (actlab eval RUN --out DIR), or leave --sweep out",
        )
    best = best_index([sum(o) / len(o) if o else 0.0 for o in outcomes])
    name, best_name = checkpoints[mine]["name"], checkpoints[best]["name"]
    paired = paired_compare(outcomes[best], outcomes[mine])
    n = len(outcomes[mine])
    k, k_best = sum(outcomes[mine]), sum(outcomes[best])
    numbers = {
        "criterion": "success",
        "sweep": str(path),
        "successes": k,
        "episodes": n,
        "best": best_name,
        "best_successes": k_best,
        "p": paired.p,
    }
    if best == mine or paired.verdict != "worse":
        rest = "" if best == mine else f"; not clearly behind ({paired.sentence(name, best_name)})"
        msg = f"{k}/{n} success on the sweep's seeds ({path}); the sweep's best is {best_name} ({k_best}/{n})"
        msg += rest
        return Finding("checkpoint", "checkpoint vs run best", "ok", msg, numbers)
    msg = (
        f"{k}/{n} success on the sweep's seeds, behind the run's best checkpoint {best_name} ({k_best}/{n}; "
        f"{paired.sentence(name, best_name)}; {path}): doctor {here.parent / best_name}"
    )
    return Finding("checkpoint", "checkpoint vs run best", "warning", msg, numbers)


def _seed_outcomes(checkpoint: dict, i: int, path: Path) -> list[bool]:
    """Checkpoint ``i``'s successes in seed order, refused as eval compare refuses a damaged record."""
    by_seed = read_checkpoint_outcomes(checkpoint, i, path)
    return [by_seed[s] for s in sorted(by_seed)]


def _same_checkpoint(recorded: str, here: Path) -> bool:
    """The sweep's checkpoint path is this bundle: the same directory, or (a run directory that was moved
    or copied since the sweep) the same step of a run of the same name."""
    rec = Path(recorded)
    if rec.resolve() == here:
        return True
    return (
        rec.name == here.name
        and rec.parent.name == here.parent.name
        and rec.parent.parent.name == here.parent.parent.name
    )
