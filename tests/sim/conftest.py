"""Fixtures for the sim tests: small envs (tiny images) shared per module to keep the suite fast."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")


@pytest.fixture(scope="module")
def env32():
    """A pick-and-place env rendering both cameras at 32x32, episodes never cut short on success."""
    from actlab.sim import make_env

    env = make_env(image_size=32, terminate_on_success=False)
    yield env
    env.close()


@pytest.fixture(scope="module")
def blind_env():
    """An env without cameras (physics only: fast)."""
    from actlab.sim import make_env

    env = make_env(cameras=(), terminate_on_success=False)
    yield env
    env.close()
