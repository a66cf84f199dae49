"""Fixtures shared by the fault tests of the command line."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A tiny untrained ACT bundle for the sim's two 16 px cameras (made in-process: no training)."""
    from actlab.policies import save_policy
    from actlab.policies.info import synthetic_features, unit_stats
    from actlab.policies.registry import make_policy
    from actlab.training import get_preset

    cfg = get_preset("tiny").policy
    feats = synthetic_features(6, 6, ("top", "wrist"), (16, 16))
    path = tmp_path_factory.mktemp("bundle") / "policy"
    save_policy(make_policy(cfg, feats, unit_stats(cfg, feats), pretrained=False), path)
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_dataset) -> Path:
    """A 2-step tiny training run on the tiny dataset (checkpoints at steps 1 and 2)."""
    out = tmp_path_factory.mktemp("run") / "run"
    args = ["--set", "steps=2", "--set", "checkpoint.every=1", "--set", "log.progress=false"]
    from actlab.cli import main

    assert main(["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(out), *args]) == 0
    return out


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """A one-episode 16 px pick-and-place recording (the fault runs' rl and reward-model probes)."""
    from actlab.cli import main

    out = tmp_path_factory.mktemp("rec") / "rec"
    args = ["sim", "record", "--episodes", "1", "--image-size", "16", "--workers", "0", "--out", str(out)]
    assert main(args) == 0
    return out


@pytest.fixture(scope="module")
def export(tmp_path_factory, bundle) -> Path:
    """The untrained 16 px bundle above exported for the LeRobot plugin (actlab_act)."""
    from actlab.cli import main

    out = tmp_path_factory.mktemp("export") / "export"
    assert main(["policy", "export", str(bundle), "--to", "lerobot", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def rec2(tmp_path_factory) -> Path:
    """A two-episode 16 px sim recording: one mp4 file per camera holds both episodes, and its info.json
    the recorder's actlab_sim block."""
    from actlab.cli import main

    out = tmp_path_factory.mktemp("rec2") / "rec"
    argv = ["sim", "record", "--episodes", "2", "--image-size", "16", "--workers", "0", "--out", str(out)]
    assert main(argv) == 0
    return out
