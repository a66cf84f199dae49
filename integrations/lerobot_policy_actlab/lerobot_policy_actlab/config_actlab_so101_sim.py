"""``--robot.type=actlab_so101_sim``: actlab's simulated SO-101 pick-and-place as a LeRobot robot."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from lerobot.robots.config import RobotConfig

from actlab.lerobot.runtime import check_sim_robot_config


@RobotConfig.register_subclass("actlab_so101_sim")
@dataclass
class ActlabSO101SimConfig(RobotConfig):
    """Every field has a default: ``--robot.type=actlab_so101_sim`` alone runs."""

    # side of the square camera frames (pixels); actlab's sim records at 96 by default, the plugin's
    # policies resize to their trained size
    image_size: int = 96
    # cameras rendered, any of "top" (overhead) and "wrist"; LeRobot features observation.images.<name>
    camera_names: list[str] = field(default_factory=lambda: ["top", "wrist"])
    # control rate (Hz): the sim's and actlab's datasets' rate; send_action paces to it in real time
    fps: int = 30
    # real-time pacing (False: as fast as the caller steps)
    realtime: bool = True
    # episode time limit in control steps (actlab eval's default: 300 = 10 s)
    max_steps: int = 300
    # seed of the first episode; episode i uses seed + i (100000: far from actlab's recording seeds 0..N)
    seed: int = 100_000
    # seconds the arm holds its home pose after a restart, ignoring actions, while the actions LeRobot
    # queued for the previous scene drain (LeRobot does not reset the policy between the sim's episodes)
    hold_s: float = 1.0
    # directory of the rollout's sim logs (episodes.jsonl, episodes.log); "": outputs/rollout/DATE/
    # TIME_actlab_so101_sim, beside LeRobot's own outputs/ (lerobot-rollout has no output directory of its
    # own without a recording strategy)
    output_dir: str = ""
    # JSONL file each finished episode is appended to (outcome, failure class, steps, seed); None:
    # OUTPUT_DIR/episodes.jsonl; "" disables
    log_file: str | None = None
    # largest change of a joint target per step (degrees), like so101_follower's max_relative_target;
    # None: no limit (targets are still clipped to the joint ranges)
    max_relative_target: float | None = None
    # the sim task the robot works at (`actlab sim tasks`): so101_pick_place, so101_stack, ...
    task: str = "so101_pick_place"
    # joint units of observations and actions: "degrees" (actlab's sim datasets) or "so101_follower"
    # (LeRobot's real so101_follower: joints in degrees, the gripper 0-100), so that a policy trained on
    # the real follower's recordings drives the sim with no conversion step
    units: str = "degrees"

    def __post_init__(self) -> None:
        # Every field checked before the robot is built: --robot.fps=0 was a ZeroDivisionError traceback
        # in the control loop, a negative seed numpy's.
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        check_sim_robot_config(asdict(self))
