import json
import shlex

import torch

from actlab.cli import main
from actlab.policies import make_policy, save_policy
from conftest import make_features, make_stats, tiny_act


def test_policy_info_act_defaults_report_51_6m(capsys):
    assert main(["policy", "info", "act"]) == 0
    out = capsys.readouterr().out
    assert "51.6M parameters" in out
    for module in ("backbone", "vae_encoder", "encoder", "decoder", "action_head"):
        assert module in out


def test_policy_info_json_counts(capsys):
    args = [
        "policy",
        "info",
        "act",
        "--json",
        "--cameras",
        "top",
        "--image-size",
        "96",
        "96",
        "--set",
        "vision_backbone=cnn_small",
        "--set",
        "dim_model=64",
        "--set",
        "n_heads=2",
    ]
    assert main(args) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["type"] == "act"
    assert sum(r["params"] for r in info["rows"]) == info["total"] == info["trainable"]
    rows = {r["module"]: r for r in info["rows"]}
    assert rows["backbone"]["params"] < 300_000  # cnn_small


def test_policy_info_of_a_bundle(tmp_path, capsys):
    torch.manual_seed(0)
    policy = make_policy(tiny_act(freeze_backbone=True), make_features(), make_stats())
    save_policy(policy, tmp_path / "b")
    assert main(["policy", "info", str(tmp_path / "b"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["total"] == sum(p.numel() for p in policy.parameters())
    rows = {r["module"]: r for r in info["rows"]}
    assert rows["backbone"]["trainable"] == 0 < rows["backbone"]["params"]


def test_policy_info_unknown_name(capsys):
    assert main(["policy", "info", "act_relativ"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'act_relative'" in err


def test_policy_bench_side_by_side(capsys):
    args = shlex.split(
        "policy bench act_relative --json --batch-size 2 --cameras top --image-size 32 32 --steps 1"
        " --set vision_backbone=cnn_small --set dim_model=32 --set n_heads=2 --set chunk_size=8"
        " --set n_action_steps=8 --set rtc_max_delay=2 --set obs_state_delta_frames=2"
        " --variant base: --variant cached:cached_features=true"
    )
    assert main(args) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["benchmark"] == "policy" and result["command"] == "actlab policy bench"
    assert result["metrics"]["base.step_ms"] > 0 and result["metrics"]["cached.step_ms"] > 0
    assert result["metrics"]["cached.trainable_params"] < result["metrics"]["base.trainable_params"]
    assert "cached_vs_base" in result["ratios"]
    # Said while it runs (stderr), and the ratio explained in words: "frozen_vs_base 1" explained nothing.
    assert "building cached (cached_features=true)" in captured.err and "round 1/1: base" in captured.err
    assert any(n.startswith("cached_vs_base = ") and "above 1 cached is faster" in n for n in result["notes"])
    assert main([a for a in args if a != "--json"]) == 0
    assert capsys.readouterr().out.startswith("actlab policy bench  (device: cpu)")
