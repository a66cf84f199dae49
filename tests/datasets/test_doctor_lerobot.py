"""The data doctor on datasets written by lerobot 0.6.1's own writer: the clean recording passes the
warning gate, each recording fault planted before writing is named (exit 1), and `actlab data curate`'s
output loads in lerobot with the right episode and frame counts.

Slow (one lerobot process writes the 14 datasets; 7 min for 11 on 2 shared cores); skipped without
$ACTLAB_LEROBOT_PYTHON (default /work/lerobot-venv/bin/python).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import numpy as np
import pytest

from actlab.cli import main
from actlab.datasets import format as fmt
from actlab.datasets import open_dataset
from plant_faults import FAULTS, read_episodes
from procs import run

LEROBOT_PYTHON = os.environ.get("ACTLAB_LEROBOT_PYTHON", "/work/lerobot-venv/bin/python")
WRITER = Path(__file__).with_name("lerobot_writer.py")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(not os.path.exists(LEROBOT_PYTHON), reason="no lerobot 0.6.1 venv (docs/lerobot.md)"),
]


def lerobot_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp / "hf"), OMP_NUM_THREADS="1")
    return env


def _npz(ds, episodes, path: Path) -> Path:
    feats = {
        k: {kk: vv for kk, vv in f.items() if kk != "info"}
        for k, f in ds.features.items()
        if k not in fmt.DEFAULT_FEATURES
    }
    meta = {"fps": ds.fps, "robot_type": ds.info.get("robot_type"), "features": feats}
    meta["tasks"] = [task for _, task in episodes]
    arrays = {f"{i}/{k}": v for i, (ep, _) in enumerate(episodes) for k, v in ep.items()}
    np.savez(path, meta=json.dumps(meta), **arrays)
    return path


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str | None, Path]:
    """The sim recording (6 episodes, 32 px) written by lerobot: clean, and once per fault."""
    from actlab.sim import RecordConfig, record_dataset

    work = tmp_path_factory.mktemp("lerobot_written")
    record_dataset(work / "rec", RecordConfig(episodes=6, image_size=32, workers=0), progress=False)
    ds, episodes = read_episodes(work / "rec")
    jobs, out = [], {}
    for fault in [None, *FAULTS]:
        name = fault or "clean"
        edit = FAULTS[fault][2] if fault and FAULTS[fault][2] else (lambda e: e)
        npz = _npz(ds, edit(copy.deepcopy(episodes)), work / f"{name}.npz")
        out[fault] = work / name
        jobs.append([str(npz), str(out[fault]), "h264" if fault == "video_codec" else None])
    (work / "jobs.json").write_text(json.dumps(jobs))
    res = run([LEROBOT_PYTHON, str(WRITER), str(work / "jobs.json")], env=lerobot_env(work), timeout=1500)
    assert res.returncode == 0, res.stderr[-3000:]
    # the codec fault: h264 files under an info.json that still declares lerobot's default, av1
    info_path = out["video_codec"] / fmt.INFO_PATH
    info = json.loads(info_path.read_text())
    assert info["features"]["observation.images.top"]["info"]["video.codec"] == "h264"
    info["features"]["observation.images.top"]["info"]["video.codec"] = "av1"
    info_path.write_text(json.dumps(info, indent=4))
    return out


def test_lerobot_written_clean_passes(written, capsys):
    assert main(["data", "doctor", str(written[None]), "--fail-on", "warning", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["problems"] == []


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_lerobot_written_fault_is_named(written, fault, capsys):
    check, episode, _ = FAULTS[fault]
    assert main(["data", "doctor", str(written[fault]), "--fail-on", "warning", "--json"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert [p["check"] for p in problems if p["severity"] != "note"] == [check]
    if episode is not None:
        assert problems[0]["episodes"] == [episode]


def test_curated_lerobot_dataset_loads_in_lerobot(written, tmp_path, capsys):
    src = written["short_episode"]  # 7 episodes, episode 2 a false start
    lengths = [e.length for e in open_dataset(src).episodes]
    out = tmp_path / "curated"
    assert main(["data", "curate", str(src), "--out", str(out), "--drop-flagged", "--trim", "4:5:105"]) == 0
    assert main(["data", "doctor", str(out), "--fail-on", "warning"]) == 0
    capsys.readouterr()
    res = run([LEROBOT_PYTHON, str(WRITER), "--load", str(out)], env=lerobot_env(tmp_path), timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    loaded = json.loads(res.stdout.strip().splitlines()[-1])
    frames = sum(lengths) - lengths[2] - lengths[4] + 100
    assert loaded["episodes"] == 6 and loaded["frames"] == frames
    assert loaded["item"]["observation.images.top"] == [3, 32, 32]
