"""``--env.type=actlab_so101``: actlab's sim tasks as a LeRobot environment (lerobot-eval, lerobot-train).

``lerobot-eval --env.type=actlab_so101 --env.task=so101_stack --policy.path=...`` evaluates any LeRobot
policy on an actlab sim task; ``lerobot-train --env.type=actlab_so101 ...`` evaluates during training.
LeRobot finds this class the way it finds third-party plugins (``register_third_party_plugins`` imports
the installed ``lerobot_policy_actlab``, whose import registers it with draccus), and builds its envs with
``gym.make(gym_id, **gym_kwargs)``: the gymnasium ids ``actlab_so101/<task>`` are registered when this
module is imported (``package_name`` points here, so LeRobot's import finds them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lerobot.configs import FeatureType, PolicyFeature
from lerobot.envs.configs import EnvConfig
from lerobot.utils.constants import ACTION, OBS_IMAGES, OBS_STATE

from actlab.lerobot.sim_env import GYM_NAMESPACE, check_env_settings, check_log_file, register_gym_ids
from actlab.sim import task_config

register_gym_ids()


@EnvConfig.register_subclass("actlab_so101")
@dataclass
class ActlabSO101EnvConfig(EnvConfig):
    """Every field has a default: ``--env.type=actlab_so101`` alone evaluates so101_pick_place."""

    # the sim task (`actlab sim tasks` lists them): so101_pick_place, so101_stack, so101_push, ...
    task: str | None = "so101_pick_place"
    # control rate (Hz) of the sim, of its datasets and of LeRobot's rollout videos
    fps: int = 30
    # episode time limit in control steps (actlab eval's default: 300 = 10 s)
    episode_length: int = 300
    # side of the square camera frames (pixels); the size the policy was trained at (actlab's CPU demo: 80)
    image_size: int = 96
    # cameras rendered, any of "top" (overhead) and "wrist"; LeRobot features observation.images.<name>
    camera_names: list[str] = field(default_factory=lambda: ["top", "wrist"])
    # joint units of observation.state and the action: "degrees" (the sim's) or "so101_follower" (the
    # gripper 0-100 like LeRobot's real so101_follower, for a policy trained on such data)
    units: str = "degrees"
    # JSONL file each finished episode's actlab outcome (success or failure class) is appended to; "" = off
    log_file: str = ""
    features: dict[str, PolicyFeature] = field(default_factory=dict)
    features_map: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # the fields the sim cannot honour, named as --env.<field> (an fps of 12 was ignored, exit 0)
        check_env_settings(self.episode_length, self.fps, self.camera_names, "--env.")
        if self.log_file:
            check_log_file(self.log_file, "--env.log_file")
        task_config(
            self.task or "", image_size=self.image_size, cameras=tuple(self.camera_names), units=self.units
        )
        self.features = {
            ACTION: PolicyFeature(type=FeatureType.ACTION, shape=(6,)),
            "agent_pos": PolicyFeature(type=FeatureType.STATE, shape=(6,)),
        }
        self.features_map = {ACTION: ACTION, "agent_pos": OBS_STATE}
        for cam in self.camera_names:
            size = (self.image_size, self.image_size, 3)
            self.features[f"pixels/{cam}"] = PolicyFeature(type=FeatureType.VISUAL, shape=size)
            self.features_map[f"pixels/{cam}"] = f"{OBS_IMAGES}.{cam}"

    @property
    def package_name(self) -> str:
        return "lerobot_policy_actlab.config_actlab_so101_env"

    @property
    def gym_id(self) -> str:
        return f"{GYM_NAMESPACE}/{self.task}"

    @property
    def gym_kwargs(self) -> dict:
        return {
            "image_size": self.image_size,
            "cameras": tuple(self.camera_names),
            "max_steps": self.episode_length,
            "units": self.units,
            "log_file": self.log_file,
            "max_episode_steps": self.episode_length,
        }
