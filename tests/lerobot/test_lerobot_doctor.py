"""`actlab policy doctor --lerobot-policy` against the fake child (fake_lerobot_child.py: the real
wire format and serving loop, a numpy policy that holds the state, lerobot's processor files read and
applied). Each deployment fault is planted in a policy directory laid out as lerobot-train saves one
(config.json, train_config.json, policy_pre/postprocessor.json with safetensors statistics) and must be
named by its finding and verdict; the same faults with real lerobot 0.6.1 are in test_lerobot_real.py.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import actlab.lerobot.child as child
from actlab.evaluation.doctor import DoctorConfig
from actlab.lerobot.doctor import doctor_lerobot, processor_stats, recorded_lerobot_split

FAKE = Path(__file__).with_name("fake_lerobot_child.py")
CAMERA = "observation.images.top"
IMAGENET = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


def write_policy_dir(
    out: Path,
    dataset: Path,
    *,
    stats_from: Path | None = None,
    image_std: float | None = None,
    camera: str = CAMERA,
    postprocessor: bool = True,
    image_mode: str = "MEAN_STD",
) -> Path:
    """A LeRobot pretrained_model directory for ``dataset`` (one camera, state and action), its processor
    statistics from ``stats_from``'s meta/stats.json (default: the dataset's own), images ImageNet's."""
    from safetensors.numpy import save_file

    info = json.loads((dataset / "meta/info.json").read_text())["features"]
    stats = json.loads(((stats_from or dataset) / "meta/stats.json").read_text())
    h, w, c = info[CAMERA]["shape"]
    features = {
        camera: {"type": "VISUAL", "shape": [c, h, w]},
        "observation.state": {"type": "STATE", "shape": info["observation.state"]["shape"]},
    }
    outputs = {"action": {"type": "ACTION", "shape": info["action"]["shape"]}}
    out.mkdir(parents=True)
    config = {"type": "fake", "input_features": features, "output_features": outputs}
    (out / "config.json").write_text(json.dumps({**config, "n_obs_steps": 1, "n_action_steps": 2}))
    (out / "train_config.json").write_text(json.dumps({"dataset": {"root": str(dataset), "episodes": None}}))
    tensors = {}
    for key in ("observation.state", "action"):
        for stat in ("mean", "std", "min", "max"):
            tensors[f"{key}.{stat}"] = np.asarray(stats[key][stat], np.float32)
    for stat, value in IMAGENET.items():
        tensors[f"{camera}.{stat}"] = np.asarray(value, np.float32).reshape(3, 1, 1)
    if image_std is not None:
        tensors[f"{camera}.std"] = np.full((3, 1, 1), image_std, np.float32)
    norm_map = {"VISUAL": image_mode, "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}
    for name, step, feats in (
        ("preprocessor", "normalizer_processor", {**features, **outputs}),
        ("postprocessor", "unnormalizer_processor", outputs),
    ):
        if name == "postprocessor" and not postprocessor:
            continue
        state_file = f"policy_{name}_step_0_{step}.safetensors"
        save_file({k: v for k, v in tensors.items() if k.rpartition(".")[0] in feats}, str(out / state_file))
        spec = {"registry_name": step, "config": {"features": feats, "norm_map": norm_map}}
        steps = [{**spec, "state_file": state_file}]
        (out / f"policy_{name}.json").write_text(json.dumps({"name": f"policy_{name}", "steps": steps}))
    return out


def _doctor(policy_dir: Path, dataset: Path, mode: str = "ok", log: Path | None = None, **kw):
    log = log or policy_dir.parent / f"{policy_dir.name}-{mode}.json"
    return doctor_lerobot(
        policy_dir,
        sys.executable,
        dataset,
        DoctorConfig(progress=False, max_episodes=2),
        child_script=FAKE,
        child_args=[child.__file__, str(log), mode],
        **kw,
    )


def _finding(result, check, name):
    return next(f for f in result.findings if f.check == check and f.name == name)


def _errors(result) -> set[tuple[str, str]]:
    return {(f.check, f.name) for f in result.findings if f.severity == "error"}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("lerobot_doctor")


@pytest.fixture(scope="module")
def data(work, make_dataset):
    return make_dataset(work, episodes=3, length=20, cameras={"top": (16, 16)}, state_dim=2, action_dim=2)


def test_a_clean_policy_directory_has_no_input_stats_or_deployment_error(work, data):
    """The fake holds the state, so the replay says did_not_learn; nothing else is wrong."""
    policy = write_policy_dir(work / "clean", data)
    assert set(processor_stats(policy)) == {CAMERA, "observation.state", "action"}
    r = _doctor(policy, data)
    assert _errors(r) <= {("replay", "replay.train")}, r.findings
    assert r.verdict.name == "did_not_learn"
    assert _finding(r, "deployment", "postprocessor").severity == "ok"
    assert _finding(r, "deployment", "reset").severity == "ok"
    assert _finding(r, "normalization", CAMERA).severity == "ok"  # ImageNet statistics: not compared
    assert _finding(r, "split", "episodes").numbers["train"] == [0, 1, 2]  # train_config: every episode


def test_image_std_of_0002_is_a_stats_mismatch(work, data):
    r = _doctor(write_policy_dir(work / "img_std", data, image_std=0.002), data)
    f = _finding(r, "normalization", CAMERA)
    assert f.severity == "error" and "500" in f.message  # a pixel becomes a value of up to ~500
    assert r.verdict.name == "stats_mismatch" and r.exit_code == 1


def test_image_stats_of_an_identity_image_normalization_are_not_applied(work, data):
    """SmolVLA's and Pi0's norm_map leaves images alone (IDENTITY): their statistics are unused."""
    policy = write_policy_dir(work / "vla_like", data, image_std=0.002, image_mode="IDENTITY")
    assert set(processor_stats(policy)) == {"observation.state", "action"}
    r = _doctor(policy, data)
    assert not [e for e in _errors(r) if e[0] == "normalization"]


def test_a_missing_postprocessor_is_a_deployment_fault_naming_the_file(work, data):
    policy = write_policy_dir(work / "no_post", data, postprocessor=False)
    r = _doctor(policy, data)
    f = _finding(r, "deployment", "policy_postprocessor.json")
    assert f.severity == "error" and f.numbers["file"] == str(policy / "policy_postprocessor.json")
    assert r.verdict.name == "deployment_fault" and r.exit_code == 1
    # what such a deployment does: normalized actions reach the robot
    assert _finding(r, "actions", "range").severity == "error"


def test_an_identity_postprocessor_is_named(work, data):
    policy = write_policy_dir(work / "identity_post", data)
    spec = json.loads((policy / "policy_postprocessor.json").read_text())
    spec["steps"] = []  # a postprocessor that does nothing
    (policy / "policy_postprocessor.json").write_text(json.dumps(spec))
    r = _doctor(policy, data)
    f = _finding(r, "deployment", "postprocessor")
    assert f.severity == "error" and "identity" in f.message
    assert r.verdict.name == "deployment_fault"


def test_stats_from_another_dataset_are_a_stats_mismatch(work, data, make_dataset):
    other = make_dataset(work, episodes=2, length=20, cameras={"top": (16, 16)}, state_dim=2, action_dim=2,
                         seed=5)  # fmt: skip
    stats = json.loads((other / "meta/stats.json").read_text())
    for key in ("observation.state", "action"):  # the other recording in degrees
        stats[key] = {k: (np.rad2deg(v) if k != "count" else v) for k, v in map(_arr, stats[key].items())}
    (other / "meta/stats.json").write_text(json.dumps(stats, default=lambda a: a.tolist()))
    r = _doctor(write_policy_dir(work / "other_stats", data, stats_from=other), data)
    assert ("normalization", "action") in _errors(r) and ("normalization", "observation.state") in _errors(r)
    assert _finding(r, "normalization", "action").numbers["std_ratio"] > 10  # ~57 (degrees / radians)
    assert r.verdict.name == "stats_mismatch" and r.exit_code == 1
    # both processor files carry the same (wrong) stats: the round trip itself is consistent
    assert _finding(r, "deployment", "postprocessor").severity == "ok"


def _arr(item):
    return item[0], np.asarray(item[1], float)


def test_a_renamed_camera_is_an_input_mismatch_and_rename_fixes_it(work, data):
    policy = write_policy_dir(work / "front", data, camera="observation.images.front")
    r = _doctor(policy, data)
    f = _finding(r, "inputs", "observation.images.front")
    assert f.severity == "error" and CAMERA in str(f.numbers["found"])
    assert r.verdict.name == "input_mismatch" and r.exit_code == 1
    fixed = _doctor(policy, data, rename=[f"observation.images.front={CAMERA}"])
    assert not [e for e in _errors(fixed) if e[0] in ("inputs", "normalization", "deployment")]


def test_a_reset_that_keeps_the_queue_is_a_deployment_fault(work, data):
    r = _doctor(write_policy_dir(work / "sticky", data), data, mode="reset-keeps-queue")
    f = _finding(r, "deployment", "reset")
    assert f.severity == "error" and "does not clear the action queue" in f.message
    assert f.numbers["error_vs_previous"] < 1e-6 < f.numbers["error_vs_new"]
    assert r.verdict.name == "deployment_fault" and r.exit_code == 1


def test_the_cli_runs_the_lerobot_path_and_exits_1(work, data, capsys, monkeypatch):
    """The CLI wiring, with the fake child as the child script (the one thing that needs lerobot)."""
    from actlab.cli import main
    from actlab.lerobot import bridge

    policy = write_policy_dir(work / "cli", data, postprocessor=False)
    log = work / "cli.json"
    init = bridge.LeRobotBridgePolicy.__init__

    def fake_child(self, *args, **kwargs):
        kwargs["child_script"] = FAKE
        kwargs["child_args"] = [child.__file__, str(log), *kwargs.get("child_args", ())]
        init(self, *args, **kwargs)

    monkeypatch.setattr(bridge.LeRobotBridgePolicy, "__init__", fake_child)
    args = ["policy", "doctor", "--lerobot-policy", str(policy), "--lerobot-python", sys.executable]
    assert main([*args, "--dataset", str(data), "--json", "--max-episodes", "1"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"]["name"] == "deployment_fault" and out["policy"] == str(policy)


def test_the_cli_refuses_a_bundle_and_a_lerobot_policy_together(work, data, capsys):
    from actlab.cli import main

    assert main(["policy", "doctor", "x", "--lerobot-policy", "y", "--dataset", str(data)]) == 2
    assert "one of them" in capsys.readouterr().err


def test_the_split_comes_from_train_config(work, data):
    from actlab.datasets import open_dataset

    policy = write_policy_dir(work / "split", data)
    ds = open_dataset(data)
    cfg = json.loads((policy / "train_config.json").read_text())
    cfg["dataset"]["episodes"] = [0, 2]
    (policy / "train_config.json").write_text(json.dumps(cfg))
    split = recorded_lerobot_split(policy, ds)
    assert split["train_episodes"] == [0, 2] and split["val_episodes"] == [1]
    assert split["dataset"]["fingerprint"] == ds.fingerprint
    shutil.rmtree(policy)
