"""Shared fixtures. Tests build their own data; nothing downloads (no network in CI)."""

from __future__ import annotations

import os

# Headless rendering for MuJoCo; set before anything imports mujoco.
os.environ.setdefault("MUJOCO_GL", "egl")
# Two cores on CI: keep torch from oversubscribing when tests run subprocesses.
os.environ.setdefault("OMP_NUM_THREADS", "2")

import itertools
from pathlib import Path

import pytest

_dataset_counter = itertools.count()


def _make_dataset(
    tmp_path: Path,
    episodes: int = 3,
    length: int = 40,
    cameras: dict | None = None,
    state_dim: int = 6,
    action_dim: int = 6,
    fps: int = 30,
    seed: int = 0,
    **kwargs,
) -> Path:
    from actlab.datasets.synth import synth_dataset

    cameras = {"top": (32, 32)} if cameras is None else cameras
    out = Path(tmp_path) / f"dataset-{next(_dataset_counter)}"
    return synth_dataset(
        out,
        episodes=episodes,
        length=length,
        cameras=cameras,
        state_dim=state_dim,
        action_dim=action_dim,
        fps=fps,
        seed=seed,
        **kwargs,
    )


@pytest.fixture(scope="session", autouse=True)
def _actlab_cache(tmp_path_factory):
    """Keep FrameStores and cached stats of the test run out of ~/.cache (ACTLAB_CACHE -> a temp dir)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ACTLAB_CACHE", str(tmp_path_factory.mktemp("actlab-cache")))
        yield


@pytest.fixture(scope="session")
def make_dataset():
    """Factory: ``make_dataset(tmp_path, episodes=3, length=40, cameras={"top": (32, 32)}, state_dim=6,
    action_dim=6, fps=30, seed=0, lengths=None, video=None)`` -> Path of a real LeRobot v3 dataset written
    by ``DatasetWriter`` (AV1 video). Images show a square at state dims 0/1 and a bar sized by dim 2;
    actions lead the state by 3 frames (``actlab.datasets.synth``)."""
    return _make_dataset


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory) -> Path:
    """A session-wide dataset from ``make_dataset`` with its defaults (3 x 40 frames, top camera 32x32).

    Shared by many tests: do not modify it (copy it with shutil.copytree first)."""
    return _make_dataset(tmp_path_factory.mktemp("tiny"))
