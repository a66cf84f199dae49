"""The policy doctor on real tiny bundles and datasets: each planted fault is named, a good policy passes.

The data (``make_dataset``): 30 episodes of 30 frames, 2 joints, one 16 px camera; actions lead the state
by 3 frames, so predicting a chunk needs the joint velocity. The policies, trained in this process by the
real trainer (a few seconds each on 2 cores):

- good: ``act_relative`` with the state-delta token (it sees the velocity), 300 steps on 22 episodes:
  skill ~0.3 on training and ~0.4 on held-out episodes (the threshold is 0.7);
- untrained: plain ``act`` after one step: skill 3-5 (an untrained ``act_relative`` sits at ~1.2: its
  near-zero relative actions are the hold-the-state baseline plus the mean offset);
- memorizer: plain ``act`` (no velocity: on a new episode it cannot know where the joints are heading)
  on 3 training episodes for 300 steps: ~0.25 on them, ~1.5 on its held-out episode;
- the good policy with its normalization replaced by the stats of a dataset recorded in other units;
- the good policy on datasets whose camera has another name or another aspect ratio.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from actlab.errors import ActlabError
from actlab.evaluation.doctor import (
    SKILL_LEARNED,
    DoctorConfig,
    Finding,
    choose_episodes,
    decide,
    doctor_bundle,
    spread,
    write_report,
)
from actlab.evaluation.replay import EpisodeReplay, chunk_errors, gripper_stats, replay_summary

pytestmark = pytest.mark.timeout(300)  # the module's trainings: ~15 s on 2 quiet cores, 2 min under load

# Small and fast: no VAE and no dropout (deterministic, fewer parameters), 16 px frames.
BASE = ["eval.every=0", "log.plot=false", "data.image_size=16", "policy.use_vae=false", "policy.dropout=0"]
RELATIVE = ["policy.type=act_relative", "policy.obs_state_delta_frames=3", "policy.rtc_max_delay=0",
            "policy.absolute_action_dims=[]"]  # fmt: skip
DATA = {"episodes": 30, "length": 30, "cameras": {"top": (16, 16)}, "state_dim": 2, "action_dim": 2}


def _train(dataset, out, steps: int, *overrides: str):
    from actlab.training import apply_train_overrides, get_preset, train, with_dataset

    sets = [f"steps={steps}", f"checkpoint.every={steps}", f"log.every={steps}", *BASE, *overrides]
    cfg = apply_train_overrides(with_dataset(get_preset("tiny"), str(dataset)), sets)
    train(cfg, out)
    return out / "checkpoints" / f"step_{steps:07d}"


def _doctor(bundle, dataset, **kw):
    return doctor_bundle(bundle, dataset, DoctorConfig(progress=False, **kw))


def _finding(result, check, name=None):
    return next(f for f in result.findings if f.check == check and (name is None or f.name == name))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("doctor")


@pytest.fixture(scope="module")
def data(work, make_dataset):
    return make_dataset(work, **DATA)


@pytest.fixture(scope="module")
def good(work, data):
    return _train(data, work / "good", 300, *RELATIVE)


def test_a_well_trained_policy_passes_on_its_own_data(good, data, work):
    r = _doctor(good, data)
    assert r.verdict.name == "reproduces_demonstrations" and r.exit_code == 0, r.findings
    assert not [f for f in r.findings if f.severity == "error"]
    split = _finding(r, "split").numbers
    assert split["source"] == "bundle" and (len(split["train"]), len(split["heldout"])) == (22, 8)
    assert r.replay["train"]["skill"] < 0.45 and r.replay["heldout"]["skill"] < 0.55  # threshold 0.7
    assert len(r.replay["train"]["episodes"]) == 10 and r.replay["heldout"]["frames"] == 8 * 30
    for f in (f for f in r.findings if f.check == "normalization"):
        assert f.severity == "ok" and f.numbers["mean_shift"] < 1e-3 and f.numbers["std_ratio"] < 1.001
    assert {f.name for f in r.findings if f.check == "normalization"} == {
        "observation.state", "action.relative", "observation.state.delta"}  # fmt: skip
    reset = _finding(r, "deployment", "reset")
    assert (
        reset.severity == "ok" and reset.numbers["error_vs_new"] == 0.0 and reset.numbers["separation"] > 0.05
    )

    out = write_report(r, work / "report")
    report = (out / "report.md").read_text()
    assert "reproduces_demonstrations" in report and "![predicted vs recorded actions](replay.png)" in report
    assert (out / "replay.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "doctor.json").read_text())["verdict"]["name"] == "reproduces_demonstrations"


def test_the_cli_prints_json_and_exits_0_for_a_good_policy(good, data, capsys):
    from actlab.cli import main

    assert main(["policy", "doctor", str(good), "--dataset", str(data), "--json", "--max-episodes", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"]["name"] == "reproduces_demonstrations" and out["exit_code"] == 0
    assert len(out["replay"]["train"]["episodes"]) == 2 and out["replay"]["heldout"]["skill"] < SKILL_LEARNED


def test_an_untrained_policy_did_not_learn(work, data, capsys):
    from actlab.cli import main

    bundle = _train(data, work / "untrained", 1)  # plain act: its chunks are noise around the mean
    assert main(["policy", "doctor", str(bundle), "--dataset", str(data)]) == 1
    text = capsys.readouterr().out
    assert "verdict: did_not_learn" in text
    r = _doctor(bundle, data)
    assert r.verdict.name == "did_not_learn" and r.exit_code == 1
    assert r.replay["train"]["skill"] > 2.0  # 3-5 measured; the threshold is 0.7
    assert _finding(r, "replay", "replay.train").severity == "error"
    # plain act de-normalizes "action" with its normalizer buffers: the round trip is exact
    post = _finding(r, "deployment", "postprocessor")
    assert post.severity == "ok" and post.numbers["roundtrip_error"] < 1e-5


def test_a_reset_that_keeps_the_queue_is_named_as_for_a_lerobot_policy(good, data):
    """The fault test_lerobot_doctor.py plants in a LeRobot policy, planted in an actlab one: the same
    finding and verdict."""
    import types

    from actlab.evaluation.doctor import diagnose
    from actlab.policies import load_policy

    policy = load_policy(good)
    assert policy.config.n_action_steps > 1  # a queue to keep
    policy.reset = types.MethodType(lambda self: self._state_history.clear(), policy)  # the queue stays
    r = diagnose(policy, data, DoctorConfig(progress=False, max_episodes=1), bundle=good)
    f = _finding(r, "deployment", "reset")
    assert f.severity == "error" and "does not clear the action queue" in f.message
    assert f.numbers["error_vs_previous"] < 1e-6 < f.numbers["error_vs_new"]
    assert r.verdict.name == "deployment_fault" and r.exit_code == 1


def test_a_memorizing_policy_is_told_from_one_that_did_not_learn(work, data):
    bundle = _train(data, work / "memorizer", 300, "data.episodes=[0,1,2,3]")
    r = _doctor(bundle, data)
    assert r.verdict.name == "memorized" and r.exit_code == 1
    assert r.replay["train"]["skill"] < 0.45  # good on its 3 training episodes...
    assert r.replay["heldout"]["skill"] > 1.0  # ...worse than holding the state on the held-out one
    assert r.replay["heldout"]["episodes"] == _finding(r, "split").numbers["heldout"]


def _other_units_dataset(root):
    """The same kind of demonstrations (no camera needed), recorded in degrees instead of radians."""
    from actlab.datasets import DatasetWriter, make_features
    from actlab.datasets.synth import synth_episode

    rng = np.random.default_rng(7)
    with DatasetWriter(root / "degrees", 30, make_features(2, 2, {})) as w:
        for _ in range(4):
            ep = synth_episode(rng, 30, 2, 2, {}, 30)
            w.add_episode({k: np.rad2deg(v).astype(np.float32) for k, v in ep.items()}, task="move")
    return root / "degrees"


def test_a_policy_with_another_datasets_stats_is_named(good, data, work):
    from actlab.datasets import compute_stats, open_dataset
    from actlab.policies import load_policy, make_policy, write_bundle

    policy = load_policy(good)
    other = compute_stats(open_dataset(_other_units_dataset(work)), **policy.config.stats_request())
    stats = {k: other.get(k, v) for k, v in policy.stats_for_bundle().items()}
    swapped = make_policy(policy.config, policy.features, stats, pretrained=False)
    weights = {k: v for k, v in policy.state_dict().items() if not k.startswith("normalizer.")}
    assert not swapped.load_state_dict(weights, strict=False).unexpected_keys
    bundle = work / "swapped"
    shutil.copytree(good, bundle)
    write_bundle(swapped, bundle, extra=json.loads((good / "actlab.json").read_text())["extra"])

    r = _doctor(bundle, data, max_episodes=2)
    assert r.verdict.name == "stats_mismatch" and r.exit_code == 1
    state = _finding(r, "normalization", "observation.state")
    assert state.severity == "error" and state.numbers["std_ratio"] > 20  # 57 (degrees vs radians)
    assert "other data or other stats" in state.message
    assert _finding(r, "replay", "replay.train").severity == "error"  # and it shows in the replay


def test_a_camera_with_another_name_or_shape_is_named(good, work, make_dataset):
    renamed = make_dataset(work, **{**DATA, "episodes": 2, "cameras": {"front": (16, 16)}})
    r = _doctor(good, renamed)
    assert r.verdict.name == "input_mismatch" and r.exit_code == 1
    cam = _finding(r, "inputs", "observation.images.top")
    assert cam.severity == "error" and cam.numbers["found"] == ["observation.images.front"]
    assert not r.replay  # nothing to feed the policy with
    # this dataset is not the one the policy was trained on: said, and all its episodes are held-out
    assert _finding(r, "split").severity == "warning"

    wide = make_dataset(work, **{**DATA, "episodes": 2, "cameras": {"top": (16, 24)}})
    r = _doctor(good, wide)
    assert r.verdict.name == "input_mismatch"
    cam = _finding(r, "inputs", "observation.images.top")
    assert cam.severity == "error" and "aspect ratio" in cam.message
    assert cam.numbers["dataset_hw"] == [16, 24] and cam.numbers["trained_from_hw"] == [16, 16]
    assert r.replay["heldout"]["frames"] == 60  # replayed all the same, fitted into 16x16 as trained


def test_bad_episode_flags_exit_2(good, data, capsys):
    from actlab.cli import main

    assert main(["policy", "doctor", str(good), "--dataset", str(data), "--train-episodes", "0-99"]) == 2
    assert "--train-episodes" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- pure parts


def _rep(target, pred, state=None):
    t = np.asarray(target, np.float32)[:, None, None]  # (T, 1, 1)
    p = np.asarray(pred, np.float32)[:, None, None]
    s = np.zeros((len(t), 1), np.float32) if state is None else np.asarray(state, np.float32)[:, None]
    return EpisodeReplay(0, np.arange(len(t)), p, t, np.ones((len(t), 1), bool), s)


def test_errors_and_baselines_on_known_arrays():
    pred = np.array([[[1.0], [2.0], [9.0]]])  # (1, 3, 1)
    target = np.array([[[1.0], [3.0], [5.0]]])
    valid = np.array([[True, True, False]])  # the third step is past the episode end
    first, chunk = chunk_errors(pred, target, valid, np.array([2.0]))
    assert first.tolist() == [[0.0]] and chunk.tolist() == [[0.25]]  # (0 + 1) / 2 steps / std 2

    rep = _rep([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0], state=[0.5, 1.5, 2.5, 3.5])
    s = replay_summary([rep], np.array([2.5]), np.array([1.0]), hold=True)
    assert (
        s["policy"]["chunk_mean"] == 0.0 and s["hold"]["chunk_mean"] == 0.5 and s["mean"]["chunk_mean"] == 1.0
    )
    assert s["baseline"] == "hold" and s["skill"] == 0.0


def test_a_gripper_that_never_closes_is_an_error():
    from actlab.evaluation.doctor import check_actions

    closes = [0.0] * 5 + [1.0] * 5 + [0.0] * 5
    stats = {"q01": [0.0], "q99": [1.0], "std": [0.5], "mean": [0.3]}
    never = check_actions([_rep(closes, [0.0] * 15)], stats, ["gripper.pos"], 1, 1, 30)
    grip = next(f for f in never if f.name == "gripper gripper.pos")
    assert grip.severity == "error" and "never closes" in grip.message
    late = check_actions([_rep(closes, [0.0] * 7 + [1.0] * 5 + [0.0] * 3)], stats, ["gripper.pos"], 1, 1, 30)
    grip = next(f for f in late if f.name == "gripper gripper.pos")
    assert grip.severity == "ok" and grip.numbers["switches"] == 2 and grip.numbers["missed"] == 0
    assert grip.numbers["mean_lag_s"] == pytest.approx(2 / 30)
    assert gripper_stats([_rep(closes, closes)], 0, 0.5, 3)["lags"] == [0, 0]


def test_verdict_order_and_episode_choice(tmp_path, tiny_dataset):
    from actlab.datasets import open_dataset

    def f(check, name, severity="error"):
        return Finding(check, name, severity, "")

    replayed = {"train": {}, "heldout": {}}
    assert decide([f("inputs", "x"), f("normalization", "y")], replayed).name == "input_mismatch"
    assert decide([f("normalization", "y"), f("replay", "replay.train")], replayed).name == "stats_mismatch"
    assert (
        decide([f("deployment", "reset"), f("replay", "replay.train")], replayed).name == "deployment_fault"
    )
    assert decide([f("normalization", "y"), f("deployment", "reset")], replayed).name == "stats_mismatch"
    assert (
        decide([f("replay", "replay.train"), f("replay", "replay.heldout")], replayed).name == "did_not_learn"
    )
    assert decide([f("replay", "replay.heldout")], replayed).name == "memorized"
    assert decide([f("replay", "replay.heldout")], {"heldout": {}}).name == "does_not_generalize"
    assert decide([f("actions", "range")], replayed).name == "unsafe_actions"
    assert decide([f("actions", "range", "warning")], replayed).name == "reproduces_demonstrations"
    assert decide([], {}).name == "not_replayed"

    ds = open_dataset(tiny_dataset)  # 3 episodes
    train, held, note = choose_episodes(ds, DoctorConfig(), None)
    assert (train, held, note.severity) == ([], [0, 1, 2], "warning")  # nothing recorded: all held-out
    train, held, note = choose_episodes(ds, DoctorConfig(train_episodes=(0, 1), heldout_episodes=(2,)), None)
    assert (train, held, note.numbers["source"]) == ([0, 1], [2], "flags")
    assert spread(list(range(10)), 3) == [0, 4, 9] and spread([1, 2], 5) == [1, 2]


def test_normalization_bounds_on_known_stats():
    from actlab.evaluation.doctor import check_normalization

    ds = {"observation.state": {"mean": [0.0, 0.0], "std": [1.0, 1e-3]},
          "observation.images.top": {"mean": [[[0.5]]] * 3, "std": [[[0.2]]] * 3}}  # fmt: skip
    same = {"observation.state": {"mean": np.zeros(2), "std": np.array([1.0, 1.0])}}  # dim 1 never moved
    shifted = {"observation.state": {"mean": np.array([0.5, 0.0]), "std": np.array([1.0, 1.0])}}
    wrong = {"observation.state": {"mean": np.array([0.0, 0.0]), "std": np.array([57.3, 1.0])}}
    flat = {"observation.images.top": {"mean": np.full((3, 1, 1), 0.5), "std": np.full((3, 1, 1), 0.002)}}
    assert [f.severity for f in check_normalization(same, ds)] == ["ok"]
    assert [f.severity for f in check_normalization(shifted, ds)] == ["warning"]  # 0.5 std: 0.25 < x < 1
    [f] = check_normalization(wrong, ds)
    assert f.severity == "error" and f.numbers["std_ratio"] == pytest.approx(57.3)
    [f] = check_normalization(flat, ds)
    assert f.severity == "error" and "500" in f.message  # a pixel becomes a value of up to about 500


def test_an_imprecise_or_behind_checkpoint_is_not_sent_to_the_deployment_setup(tmp_path):
    # The demo's step 1000 (38% in the sweep, skill 0.18) got the best checkpoint's verdict and "look at
    # the deployment setup".
    from actlab.evaluation.doctor import SKILL_PRECISE, compare_with_run_best

    precise = decide([], {"train": {"skill": 0.08}, "heldout": {"skill": 0.09}})
    assert precise.name == "reproduces_demonstrations" and "deployment setup" in precise.message
    rough = decide([], {"train": {"skill": 0.18}, "heldout": {"skill": 0.19}})
    assert rough.name == "reproduces_demonstrations" and rough.message.startswith(
        "reproduces the demonstrations open-loop, but not precisely (skill 0.19"
    )
    assert "train longer or compare checkpoints first" in rough.message and 0.08 < SKILL_PRECISE < 0.18

    ckpts = tmp_path / "run" / "checkpoints"
    for step, loss in ((1000, 0.106), (5000, 0.05)):
        (ckpts / f"step_{step:07d}").mkdir(parents=True)
        meta = {"extra": {"train": {"step": step, "val_loss": loss}}}
        (ckpts / f"step_{step:07d}" / "actlab.json").write_text(json.dumps(meta))
    (ckpts / "best.json").write_text(json.dumps({"step": 5000, "path": "step_0005000", "val_loss": 0.05}))
    behind = compare_with_run_best(ckpts / "step_0001000")
    assert behind.severity == "warning" and "2.1x the run's best checkpoint step_0005000" in behind.message
    assert compare_with_run_best(ckpts / "step_0005000").severity == "ok"
    assert compare_with_run_best(tmp_path) is None  # not a run checkpoint: nothing to compare with
    verdict = decide([behind], {"train": {"skill": 0.08}})
    assert verdict.name == "behind_run_best" and "deployment" not in verdict.message.split("before")[0]


def _sweep_results(path, run, successes: dict[int, int], n: int = 50) -> None:
    """A results.json as `actlab eval RUN --out DIR` writes it (the keys the doctor reads): per checkpoint,
    per seed, success; the first k seeds of each checkpoint succeed."""
    checkpoints = [
        {
            "name": f"step_{step:07d}",
            "path": str(run / "checkpoints" / f"step_{step:07d}"),
            "step": step,
            "summary": {"successes": k, "episodes": n, "success_rate": k / n},
            "episodes": [{"index": i, "seed": 100_000 + i, "success": i < k} for i in range(n)],
        }
        for step, k in successes.items()
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"seed": 100_000, "episodes": n, "checkpoints": checkpoints}))


def test_the_doctor_judges_a_checkpoint_by_success_where_a_sweep_measured_it(tmp_path):
    # A demo run: from step 2000 (45/50 on the sweep) the validation loss pointed to step 3000 (31/50), while
    # the demo chooses by success. The demo's layout: DIR/run/checkpoints/step_N and DIR/eval/sweep.
    from actlab.evaluation.doctor import compare_with_run_best

    run = tmp_path / "demo" / "run"
    ckpts = run / "checkpoints"
    for step, loss in ((2000, 0.080), (3000, 0.050), (5000, 0.070)):
        (ckpts / f"step_{step:07d}").mkdir(parents=True)
        meta = {"extra": {"train": {"step": step, "val_loss": loss}}}
        (ckpts / f"step_{step:07d}" / "actlab.json").write_text(json.dumps(meta))
    (ckpts / "best.json").write_text(json.dumps({"step": 3000, "path": "step_0003000", "val_loss": 0.05}))
    # Without a sweep: validation loss, and it says that success was not measured.
    by_loss = compare_with_run_best(ckpts / "step_0002000")
    assert by_loss.numbers["criterion"] == "val_loss" and "success not measured" in by_loss.message

    _sweep_results(tmp_path / "demo" / "eval" / "sweep" / "results.json", run, {2000: 45, 3000: 31, 5000: 40})
    best = compare_with_run_best(ckpts / "step_0002000")
    assert (
        best.severity == "ok"
        and best.numbers["criterion"] == "success"
        and best.numbers["best"] == "step_0002000"
    )
    behind = compare_with_run_best(ckpts / "step_0003000")
    assert behind.severity == "warning" and behind.numbers["best"] == "step_0002000"
    assert (
        "31/50 success on the sweep's seeds, behind the run's best checkpoint step_0002000 (45/50"
        in behind.message
    )
    assert decide([behind], {"train": {"skill": 0.08}}).name == "behind_run_best"
    # 40/50 vs 45/50 on the same seeds: 5 discordant seeds, McNemar p = 0.0625, not clearly behind.
    close = compare_with_run_best(ckpts / "step_0005000")
    assert (
        close.severity == "ok"
        and close.numbers["p"] == pytest.approx(0.0625)
        and "not clearly" in close.message
    )

    # A sweep given by hand (anywhere, a directory or its results.json) is used the same way...
    elsewhere = tmp_path / "sweeps" / "a"
    _sweep_results(elsewhere / "results.json", run, {2000: 20, 3000: 48})
    assert compare_with_run_best(ckpts / "step_0002000", elsewhere).numbers["best"] == "step_0003000"
    # ...and one that does not hold the checkpoint, or is not a sweep's results, is refused by name.
    with pytest.raises(ActlabError, match="does not hold this checkpoint") as e:
        compare_with_run_best(ckpts / "step_0005000", elsewhere / "results.json")
    assert e.value.field == "--sweep"
    (tmp_path / "not.json").write_text("{")
    with pytest.raises(ActlabError, match="cannot read the checkpoint sweep"):
        compare_with_run_best(ckpts / "step_0005000", tmp_path / "not.json")
