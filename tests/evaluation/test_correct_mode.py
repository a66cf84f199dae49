"""--execution correct on a real tiny run: sim demonstrations -> `actlab train --preset tiny --set
policy.correction_head=true` -> the saved bundle loads with its head, is evaluated with --execution correct
on sim episodes and exported with the head; a bundle without the head is refused before any episode."""

from __future__ import annotations

import json

import pytest
import torch

from actlab.cli import main
from actlab.policies import load_policy, make_policy, save_policy
from actlab.policies.configs import ACTConfig

pytest.importorskip("mujoco")


@pytest.fixture(scope="module")
def head_run(tmp_path_factory):
    """2 scripted demonstrations at 32 px, then 10 tiny training steps with the correction head."""
    from actlab.sim import RecordConfig, record_dataset

    root = tmp_path_factory.mktemp("correct-run")
    record_dataset(root / "data", RecordConfig(episodes=2, image_size=32, workers=0), progress=False)
    args = ["train", "--preset", "tiny", "--dataset", root / "data", "--out", root / "run"]
    args += ["--set", "steps=10", "--set", "checkpoint.every=10", "--set", "policy.correction_head=true"]
    # In this process (a process of its own adds only its start: ~7 s of imports on 2 cores).
    assert main([*map(str, args), "--set", "log.plot=false"]) == 0
    return root


@pytest.mark.timeout(300)
def test_a_trained_head_is_saved_loaded_and_evaluated_with_execution_correct(head_run, tmp_path, capsys):
    bundle = head_run / "run" / "checkpoints" / "step_0000010"
    logged = [json.loads(line) for line in (head_run / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("correction_l1" in row for row in logged)  # the head's loss is logged with the others
    policy = load_policy(bundle)
    assert policy.config.correction_head and any(
        k.startswith("correction_head.") for k in policy.state_dict()
    )
    out = tmp_path / "eval"
    args = [str(bundle), "--episodes", "2", "--max-steps", "12", "--workers", "1", "--out", str(out)]
    assert main(["eval", *args, "--execution", "correct", "--latency", "2"]) == 0
    text = capsys.readouterr().out
    assert "execution correct, latency 2 steps" in text and "--policy.execution=correct" in text
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["execution"]["mode"] == "correct"
    (row,) = results["checkpoints"]
    assert len(row["episodes"]) == 2 and all(e["steps"] == 12 for e in row["episodes"])


@pytest.mark.timeout(60)
def test_export_carries_the_head(head_run, tmp_path):
    from actlab.lerobot.export import act_blockers, export_bundle

    bundle = head_run / "run" / "checkpoints" / "step_0000010"
    export_bundle(bundle, tmp_path / "exp")
    top = json.loads((tmp_path / "exp" / "config.json").read_text())
    assert top["type"] == "actlab_act" and top["actlab_config"]["correction_head"] is True
    # LeRobot's own ACT has no head: a bundle that would otherwise be exact goes to the plugin's type
    lerobot_act = ACTConfig(decoder_input="zeros", correction_head=True)
    assert [b.field for b in act_blockers(lerobot_act, ["observation.images.top"])] == ["correction_head"]
    original, exported = load_policy(bundle), load_policy(tmp_path / "exp" / "actlab_bundle")
    obs = {"observation.state": torch.randn(3, 6) * 20}
    planned, steps = torch.randn(3, 6) * 20, torch.tensor([0, 3, 7])
    head = {k: v for k, v in original.state_dict().items() if k.startswith("correction_head.")}
    assert head and all(torch.equal(v, exported.state_dict()[k]) for k, v in head.items())
    assert torch.equal(
        exported.correct_actions(obs, planned, steps), original.correct_actions(obs, planned, steps)
    )
    assert not torch.equal(exported.correct_actions(obs, planned, steps), planned)  # 10 steps moved it


@pytest.mark.timeout(60)
def test_a_bundle_without_the_head_is_refused_before_any_episode(head_run, tmp_path, capsys):
    trained = load_policy(head_run / "run" / "checkpoints" / "step_0000010")
    cfg = trained.config.__class__(**{**vars(trained.config), "correction_head": False})
    plain = save_policy(make_policy(cfg, trained.features, trained.stats_for_bundle(), pretrained=False),
                        tmp_path / "plain")  # fmt: skip
    out = tmp_path / "eval"
    args = [str(plain), "--episodes", "2", "--max-steps", "12", "--out", str(out), "--execution", "correct"]
    assert main(["eval", *args, "--latency", "2"]) == 2  # the CLI prints actlab's error and exits 2
    err = capsys.readouterr().err
    assert "field:    --execution" in err and "fix:      train with --set policy.correction_head=true" in err
    assert not out.exists()


@pytest.mark.timeout(300)
def test_a_head_that_reads_the_cameras_trains_alone_on_the_frozen_policy(head_run, tmp_path, capsys):
    """A2C2's recipe: --init-from a trained bundle, correction_only + correction_images: only the new
    head moves (the chunk policy and its statistics are the bundle's), then it evaluates and exports."""
    from actlab.sim import RecordConfig, record_dataset

    base = head_run / "run" / "checkpoints" / "step_0000010"
    # other demonstrations than the base's (other statistics): the frozen policy keeps its own
    other = tmp_path / "other"
    record_dataset(other, RecordConfig(episodes=2, image_size=32, workers=0, seed=50), progress=False)
    args = ["train", "--preset", "tiny", "--dataset", other, "--init-from", base]
    head_only = ["--set", "policy.correction_only=true", "--set", "policy.correction_images=true"]
    steps = ["--set", "steps=6", "--set", "checkpoint.every=6", "--set", "log.plot=false"]
    # without a trained policy to start from: refused before anything is written
    alone = ["train", "--preset", "tiny", "--dataset", other, "--out", tmp_path / "x"]
    assert main([*map(str, alone), "--set", "policy.correction_head=true", *head_only[:2], *steps]) == 2
    assert "field:    init_from" in capsys.readouterr().err and not (tmp_path / "x").exists()
    assert main([*map(str, args), "--out", str(tmp_path / "run"), *head_only, *steps]) == 0
    assert "chunks of the frozen policy" in capsys.readouterr().err
    bundle = tmp_path / "run" / "checkpoints" / "step_0000006"
    before, after = load_policy(base).state_dict(), load_policy(bundle).state_dict()
    for name, tensor in after.items():
        if not name.startswith("correction_head."):
            assert torch.equal(tensor, before[name]), name  # frozen, statistics included
    assert any(n.startswith("correction_head.keypoint_convs.") for n in after)
    assert not torch.equal(
        after["correction_head.mlp.3.weight"], torch.zeros_like(after["correction_head.mlp.3.weight"])
    )
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("correction_zero_l1" in row and "l1_loss" not in row for row in logged)
    out = tmp_path / "eval"
    ev = [str(bundle), "--episodes", "2", "--max-steps", "12", "--workers", "1", "--out", str(out)]
    assert main(["eval", *ev, "--execution", "correct", "--latency", "2"]) == 0
    assert "--policy.execution=correct" in capsys.readouterr().out
