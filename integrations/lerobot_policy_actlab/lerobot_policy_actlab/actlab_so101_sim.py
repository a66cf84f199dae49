"""actlab's MuJoCo SO-101 pick-and-place behind LeRobot's ``Robot`` interface.

Observations use the real ``so101_follower``'s names (``shoulder_pan.pos`` ... ``gripper.pos``) and, by
default, the units actlab's sim datasets record: degrees for every joint. ``--robot.units=so101_follower``
gives the real follower's units instead (the gripper 0-100), for a policy trained on its recordings.
``--robot.task`` picks another task of the sim's suite. Cameras are LeRobot camera features
``(H, W, 3)`` named ``top`` and ``wrist``. ``send_action`` clips the targets to the joint ranges (and to
``max_relative_target`` when set), paces to ``fps`` in real time and steps the physics. Episodes restart
from a new seed on success or at the time limit; each outcome and actlab failure class is said on stderr
in a line starting ``>>> actlab_so101_sim:`` (LeRobot's FPS warnings do not bury it) and appended to
``OUTPUT_DIR/episodes.jsonl`` and ``episodes.log`` (:class:`actlab.lerobot.runtime.SimEpisodes`), so a long
rollout is a measurement.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from lerobot.robots.robot import Robot

from actlab.lerobot.runtime import (
    EPISODE_PREFIX,
    JOINT_KEYS,
    SIM_SIGNAL,
    EpisodeResult,
    SimEpisodes,
    default_output_dir,
    pace,
)
from lerobot_policy_actlab.config_actlab_so101_sim import ActlabSO101SimConfig

logger = logging.getLogger(__name__)


class ActlabSO101Sim(Robot):
    """The simulated SO-101 (``--robot.type=actlab_so101_sim``)."""

    config_class = ActlabSO101SimConfig
    name = "actlab_so101_sim"

    def __init__(self, config: ActlabSO101SimConfig) -> None:
        super().__init__(config)
        self.config = config
        self.sim: SimEpisodes | None = None
        self._next_tick = 0.0
        self._last_target: np.ndarray | None = None

    @property
    def observation_features(self) -> dict[str, Any]:
        size = self.config.image_size
        cams = {name: (size, size, 3) for name in self.config.camera_names}
        return {**dict.fromkeys(JOINT_KEYS, float), **cams}

    @property
    def action_features(self) -> dict[str, Any]:
        return dict.fromkeys(JOINT_KEYS, float)

    @property
    def is_connected(self) -> bool:
        return self.sim is not None

    def connect(self, calibrate: bool = True) -> None:
        from actlab.sim import make_env  # noqa: F401  (fail here, not mid-rollout, without mujoco)

        out = Path(self.config.output_dir) if self.config.output_dir else default_output_dir()
        self.sim = SimEpisodes(
            image_size=self.config.image_size,
            max_steps=self.config.max_steps,
            seed=self.config.seed,
            hold_steps=round(self.config.hold_s * self.config.fps),
            log_file=self.config.log_file,
            on_episode=self._report,
            cameras=tuple(self.config.camera_names),
            signal=SIM_SIGNAL,
            task=self.config.task,
            units=self.config.units,
            out_dir=out,
            stream=sys.stderr,
        )
        print(f"{EPISODE_PREFIX} episode logs -> {out}", file=sys.stderr, flush=True)
        self._next_tick = time.perf_counter()
        logger.info(
            "actlab_so101_sim connected: %dx%d cameras %s, %d Hz, episodes of at most %d steps from seed %d",
            self.config.image_size,
            self.config.image_size,
            ",".join(self.config.camera_names),
            self.config.fps,
            self.config.max_steps,
            self.config.seed,
        )

    def _report(self, result: EpisodeResult) -> None:
        # (the line with the running count went to stderr and OUTPUT_DIR/episodes.log already)
        logger.info(result.line())

    @property
    def is_calibrated(self) -> bool:
        return True

    def calibrate(self) -> None:
        """Nothing to calibrate in simulation."""

    def configure(self) -> None:
        """Nothing to configure in simulation."""

    def get_observation(self) -> dict[str, Any]:
        obs = self.sim.observe()
        state = obs["observation.state"]
        out: dict[str, Any] = {k: float(v) for k, v in zip(JOINT_KEYS, state)}
        for name in self.config.camera_names:
            out[name] = obs[f"observation.images.{name}"]  # (H, W, 3) uint8
        return out

    def send_action(self, action: dict[str, Any]) -> dict[str, Any]:
        target = np.array([float(action[k]) for k in JOINT_KEYS], dtype=np.float64)
        limit = self.config.max_relative_target
        if limit is not None:
            present = self.sim.observe()["observation.state"].astype(np.float64)
            target = present + np.clip(target - present, -limit, limit)
        if self.config.realtime:
            self._next_tick = pace(self._next_tick, self.config.fps)
        applied = self.sim.act(target)
        return {k: float(v) for k, v in zip(JOINT_KEYS, applied)}

    def disconnect(self) -> None:
        if self.sim is not None:
            logger.info("actlab_so101_sim: %s", self.sim.summary())
            print(f"actlab_so101_sim: {self.sim.summary()}", flush=True)
            self.sim.say(f"{EPISODE_PREFIX} done: {self.sim.summary()}")
            self.sim.close()
            self.sim = None
