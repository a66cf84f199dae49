"""Measurements of the sim: the scripted expert's success rate, and render/physics speed side by side.

``expert_success`` backs ``actlab sim expert``; ``bench_sim`` backs ``actlab sim bench`` and returns the
result dict of :mod:`actlab.profiling.report`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import numpy as np

from actlab.errors import ActlabError
from actlab.sim.env import PickPlaceEnv
from actlab.sim.expert import ExpertConfig, ExpertPolicy
from actlab.sim.record import run_expert_episode
from actlab.sim.tasks import make_env, task_config


def expert_success(
    task: str = "so101_pick_place",
    episodes: int = 100,
    seed: int = 0,
    noise: float = 0.0,
    **env_overrides: Any,
) -> dict[str, Any]:
    """Run the scripted expert on seeds ``seed .. seed+episodes-1`` without rendering.

    Returns successes, failed seeds, the phase counts (grasped / lifted at some step) and timing.
    """
    _at_least(1, episodes=episodes)
    env = make_env(task, **{"cameras": (), **env_overrides, "terminate_on_success": False})
    policy = ExpertPolicy(env, ExpertConfig(noise=noise), seed=seed)
    failed, lengths, grasped, lifted = [], [], 0, 0
    start = time.perf_counter()
    try:
        for s in range(seed, seed + episodes):
            ep = run_expert_episode(env, policy, s, keep_frames=False)
            lengths.append(ep["length"])
            info = ep["info"]
            grasped += info["ever_grasped"]
            lifted += info["ever_lifted"]
            if not ep["success"]:
                failed.append(s)
    finally:
        env.close()
    seconds = time.perf_counter() - start
    return {
        "task": task,
        "episodes": episodes,
        "seeds": f"{seed}..{seed + episodes - 1}",
        "successes": episodes - len(failed),
        "success_rate": (episodes - len(failed)) / episodes,
        "failed_seeds": failed,
        "ever_grasped": grasped,
        "ever_lifted": lifted,
        "mean_steps": float(np.mean(lengths)),
        "seconds": seconds,
    }


def _at_least(low: int, **values: int) -> None:
    for name, value in values.items():
        if value < low:
            raise ActlabError(f"{name} must be at least {low}", field=f"--{name}", found=value)


def _render_fps(env, cameras: tuple[str, ...], frames: int) -> float:
    """Frames per second of rendering the env's cameras while the arm moves (one frame = one camera)."""
    env.reset(seed=0)
    home = env.joint_positions()
    start = time.perf_counter()
    n = 0
    for i in range(frames // len(cameras)):
        # Move the arm a little so every frame differs (no caching anywhere, but keep it honest).
        env.data.qpos[0] = np.deg2rad(home[0] + 10 * np.sin(i / 10))
        env._mj.mj_kinematics(env.model, env.data)
        for cam in cameras:
            env.render(cam)
            n += 1
    return n / (time.perf_counter() - start)


def bench_sim(image_size: int = 128, frames: int = 400, episodes: int = 3) -> dict[str, Any]:
    """Render speed of the fast settings vs MuJoCo's usual ones (shadows, 4x MSAA) measured in one run,
    plus physics and whole-episode speed."""
    _at_least(1, episodes=episodes)
    _at_least(2, frames=frames)  # one frame of each of the two cameras
    os.environ.setdefault("MUJOCO_GL", "egl")

    cams = ("top", "wrist")
    fast_cfg = task_config(image_size=image_size, cameras=cams, terminate_on_success=False)
    slow_cfg = dataclasses.replace(fast_cfg, scene=dataclasses.replace(fast_cfg.scene, fast_render=False))

    fast, slow = PickPlaceEnv(fast_cfg), PickPlaceEnv(slow_cfg)
    try:
        _render_fps(fast, cams, 20)  # warm-up: GL context and buffers
        _render_fps(slow, cams, 20)
        fast_fps = _render_fps(fast, cams, frames)
        slow_fps = _render_fps(slow, cams, frames)

        physics = make_env(cameras=(), terminate_on_success=False)
        physics.reset(seed=0)
        target = physics.joint_positions()
        start = time.perf_counter()
        n_steps = 3000
        for _ in range(n_steps):
            physics.step(target)
        steps_per_s = n_steps / (time.perf_counter() - start)
        physics.close()

        policy = ExpertPolicy(fast)
        start = time.perf_counter()
        total = 0
        for s in range(episodes):
            total += run_expert_episode(fast, policy, s)["length"]
        episode_s = (time.perf_counter() - start) / episodes
    finally:
        fast.close()
        slow.close()
    return {
        "benchmark": "sim",
        "device": "cpu",
        "config": {
            "image_size": image_size,
            "cameras": ",".join(cams),
            "frames": frames,
            "episodes": episodes,
        },
        "metrics": {
            "render_fps_fast": round(fast_fps, 1),
            "render_fps_default": round(slow_fps, 1),
            "physics_control_steps_per_s": round(steps_per_s, 1),
            "expert_episode_s_two_cameras": round(episode_s, 3),
            "expert_episode_steps": total // episodes,
        },
        "ratios": {"render_fast_vs_default": round(fast_fps / slow_fps, 2)},
        "notes": [
            "default = shadows, 4x multisampling, reflections and finer tessellation (MuJoCo's usual look)",
            "episode time is one process, observations rendered at every step; recording runs 2 processes",
        ],
    }
