"""Datasets by Hub repo id from LeRobot's local cache (lerobot 0.6.1's two layouts), no download."""

from __future__ import annotations

import shutil

from actlab.cli import main
from actlab.datasets import open_dataset
from actlab.datasets.hub import find_hub_dataset, is_repo_id, lerobot_home


def test_repo_ids_open_from_lerobots_local_cache(tiny_dataset, tmp_path, monkeypatch, capsys):
    home = tmp_path / "lerobot_home"
    monkeypatch.setenv("HF_LEROBOT_HOME", str(home))
    monkeypatch.chdir(tmp_path)  # no me/pick directory here: the repo id is looked up
    # A local dataset: HF_LEROBOT_HOME/<repo_id> (LeRobotDataset.create, older downloads).
    shutil.copytree(tiny_dataset, home / "me" / "pick")
    assert open_dataset("me/pick").root == (home / "me" / "pick").resolve()
    # A Hub download since lerobot 0.6: a huggingface_hub snapshot cache under HF_LEROBOT_HOME/hub.
    repo = home / "hub" / "datasets--me--snap"
    shutil.copytree(tiny_dataset, repo / "snapshots" / "0123abc")
    (repo / "snapshots" / "old").mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "v3.0").write_text("0123abc")
    assert find_hub_dataset("me/snap") == repo / "snapshots" / "0123abc"
    assert main(["data", "info", "me/snap"]) == 0 and "episodes 3" in capsys.readouterr().out
    # Missing: the error says where it looked and how to fill the cache.
    assert main(["data", "info", "me/missing"]) == 2
    err = capsys.readouterr().err
    assert "dataset directory not found" in err and str(home / "hub" / "datasets--me--missing") in err


def test_what_counts_as_a_repo_id_and_where_lerobot_home_is(monkeypatch, tmp_path):
    assert is_repo_id("lerobot/pusht") and is_repo_id("me/so101_pick.v2")
    assert not is_repo_id("runs/demo/data") and not is_repo_id("./x/y") and not is_repo_id("/x/y")
    monkeypatch.delenv("HF_LEROBOT_HOME", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert lerobot_home() == tmp_path / "hf" / "lerobot"  # lerobot 0.6.1: Path(HF_HOME) / "lerobot"


def test_a_lerobot_policy_by_repo_id_comes_from_huggingface_hubs_cache(tmp_path, monkeypatch):
    # `actlab eval --lerobot-policy owner/name` with the policy downloaded by lerobot (from_pretrained).
    import json
    import sys

    from actlab.lerobot.bridge import lerobot_sources

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)
    repo = tmp_path / "hub" / "models--me--act_pick"
    snap = repo / "snapshots" / "f00d"
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("f00d")
    cfg = {
        "type": "act",
        "input_features": {"observation.state": {"type": "STATE", "shape": [6]}},
        "output_features": {"action": {"type": "ACTION", "shape": [6]}},
    }
    (snap / "config.json").write_text(json.dumps(cfg))
    (source,), _ = lerobot_sources(["me/act_pick"], sys.executable)
    assert source.name == "me/act_pick" and source.obj.policy_dir == snap and source.obj.type == "act"
