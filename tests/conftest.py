"""Shared fixtures. Tests build their own data; nothing downloads (no network in CI)."""

from __future__ import annotations

import os

# Headless rendering for MuJoCo; set before anything imports mujoco.
os.environ.setdefault("MUJOCO_GL", "egl")
# Two cores on CI: keep torch from oversubscribing when tests run subprocesses.
os.environ.setdefault("OMP_NUM_THREADS", "2")
