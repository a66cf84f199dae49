"""The SO-101 task suite: every sim task by name, with its scene, expert, success and failure classes.

Each task is an env class over the pick-and-place arm, cameras and physics of :mod:`actlab.sim.env` (same
observation and action spaces: six joints in degrees, cameras ``top`` and ``wrist``), a config class with
a comment on every field, a scripted expert (the pick-and-place planner of :mod:`actlab.sim.expert`, or
:class:`PushExpert`) and its own failure classes. ``TASKS`` is the one registry that ``actlab sim``,
``actlab eval``, ``actlab demo --task``, ``actlab rl`` and the LeRobot plugin read.

How an episode fails: the env puts ``task_failure`` into ``info`` (a task's own class, latched or read off
the scene, "" when none applies); the evaluation's taxonomy reports it for a failed episode and falls
back to the pick-and-place classes (never_picked_up, dropped_during_transport, missed_goal, timeout)
when it is "". The tables in docs/sim.md list every class.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from actlab.errors import ActlabError
from actlab.sim.env import FPS, SUBSTEPS, PickPlaceConfig, PickPlaceEnv
from actlab.sim.expert import ExpertConfig, ScriptedExpert, min_jerk
from actlab.sim.ik import N_ARM, down_rotation
from actlab.sim.scene import GRIPPER_CLOSED, GRIPPER_OPEN, SceneConfig, build_model
from actlab.utils.config import from_dict, unknown_name_error

_DEG = 180.0 / math.pi
# Contact bits of scene.py's "object" class: collides with objects, arm links and fingers.
_OBJECT_GEOM = 'contype="1" conaffinity="7" group="1"'


def _far_enough(xy: np.ndarray, others: list[np.ndarray], clearance: float) -> bool:
    return all(np.linalg.norm(xy - o) >= clearance for o in others)


def _sample_away(
    rng: np.random.Generator, x_range, y_range, others: list[np.ndarray], clearance: float, what: str
) -> np.ndarray:
    """A uniform (x, y) in the ranges at least ``clearance`` from every point of ``others``."""
    for _ in range(200):
        xy = np.array([rng.uniform(*x_range), rng.uniform(*y_range)])
        if _far_enough(xy, others, clearance):
            return xy
    raise ActlabError(
        f"cannot place the {what} clear of the other objects",
        field=f"{what} ranges",
        expected=f"room for {clearance * 100:.1f} cm of clearance",
        found=(tuple(x_range), tuple(y_range)),
        fix="widen the ranges or lower the clearance",
    )


def _check_range(cfg: Any, name: str, low: float, high: float) -> None:
    lo, hi = getattr(cfg, name)
    if not low <= lo <= hi <= high:
        raise ActlabError(
            f"{name} out of range", field=name, expected=f"(low, high) within {low}..{high}", found=(lo, hi)
        )


# ================================================================================================ stack


@dataclasses.dataclass(frozen=True)
class StackConfig(PickPlaceConfig):
    """so101_stack: put the red cube on top of a larger green cube (no bowl)."""

    # Red cube's start area (m): the near-left part of the workspace.
    cube_y_range: tuple[float, float] = (-0.08, 0.0)
    # Edge of the green base cube (m); larger than the red one so a placement has some tolerance.
    base_size: float = 0.03
    # Base cube mass (kg): heavy enough that the red cube landing on it does not push it.
    base_mass: float = 0.06
    # Base cube centre's x and y ranges (m), sampled uniformly per episode.
    base_x_range: tuple[float, float] = (0.16, 0.24)
    base_y_range: tuple[float, float] = (0.06, 0.12)
    # Least distance between the two cubes' centres at the start (m).
    min_separation: float = 0.07
    # The red cube counts as stacked with its centre within this horizontal distance of the base's (m).
    stack_tolerance: float = 0.012
    # The base counts as knocked when it moved more than this horizontally from its start (m).
    knock_distance: float = 0.015

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.02 <= self.base_size <= 0.04:
            raise ActlabError(
                "base_size out of range", field="base_size", expected="0.02-0.04 m", found=self.base_size
            )
        _check_range(self, "base_x_range", 0.12, 0.28)
        _check_range(self, "base_y_range", -0.14, 0.14)
        for name in ("base_mass", "min_separation", "stack_tolerance", "knock_distance"):
            if getattr(self, name) <= 0:
                raise ActlabError(f"{name} must be positive", field=name, found=getattr(self, name))


class StackEnv(PickPlaceEnv):
    """Pick the red cube and leave it resting on the green cube.

    ``info`` adds ``base_pos`` ((3,) m) and ``knocked_base`` (latched); ``in_goal``: the red cube rests on
    the base (centres within ``stack_tolerance``, its bottom at the base's top); ``is_success``: in_goal,
    not grasped and the base not knocked. Failure classes: ``knocked_base`` and the pick-and-place ones.
    """

    task_text = "stack the red cube on the green cube"
    config: StackConfig

    def __init__(self, config: StackConfig | None = None, render_mode: str | None = "rgb_array") -> None:
        super().__init__(config or StackConfig(), render_mode)

    def _build_model(self):
        b = self.config.base_size / 2
        extra = f"""
    <body name="base_cube" pos="0.2 0.09 {b:.6g}">
      <freejoint name="base_cube"/>
      <geom name="base_cube" type="box" size="{b:.6g} {b:.6g} {b:.6g}" mass="{self.config.base_mass:.6g}"
            rgba="0.12 0.62 0.22 1" condim="4" friction="1 0.01 0.001" {_OBJECT_GEOM}/>
    </body>"""
        return build_model(self.config.scene, bowl=False, extra=extra, name="so101_stack")

    def _ids(self) -> None:
        super()._ids()
        mj, m = self._mj, self.model
        self._base_qpos = m.jnt_qposadr[mj.mj_name2id(m, mj.mjtObj.mjOBJ_JOINT, "base_cube")]
        self._base_start = np.zeros(2)
        self._knocked = False

    def _randomize_task(self, rng: np.random.Generator, options: dict) -> None:
        cfg = self.config
        cube = self.data.qpos[self._cube_qpos : self._cube_qpos + 2].copy()
        xy = _sample_away(rng, cfg.base_x_range, cfg.base_y_range, [cube], cfg.min_separation, "base cube")
        q = self._base_qpos
        self.data.qpos[q : q + 7] = [xy[0], xy[1], cfg.base_size / 2, 1, 0, 0, 0]
        self._base_start, self._knocked = xy, False

    def _task_state(self) -> tuple:
        return (self._base_start.copy(), self._knocked)

    def _set_task_state(self, state: tuple) -> None:
        self._base_start, self._knocked = state[0].copy(), state[1]

    def base_position(self) -> np.ndarray:
        """Centre (3,) m of the green base cube."""
        return self.data.qpos[self._base_qpos : self._base_qpos + 3].copy()

    def goal_position(self) -> np.ndarray:
        """The base cube's top centre (3,) m."""
        return self.base_position() + np.array([0.0, 0.0, self.config.base_size / 2])

    def place_target(self) -> tuple[np.ndarray, float | None]:
        """Above the base: open with the red cube's bottom 6 mm over the base's top."""
        cfg = self.config
        expert = ExpertConfig()
        height = cfg.base_size + 0.006 + cfg.scene.cube_size / 2 + expert.grasp_offset_z
        return self.base_position()[:2], height

    def _task_info(self, info: dict[str, Any]) -> dict[str, Any]:
        cfg = self.config
        base = self.base_position()
        q = self.data.qpos[self._base_qpos + 3 : self._base_qpos + 7]
        upright = abs(q[0]) ** 2 + abs(q[3]) ** 2 > 0.95  # tilt about x or y below ~13 degrees
        moved = np.linalg.norm(base[:2] - self._base_start) > cfg.knock_distance
        self._knocked |= bool(moved or not upright)
        cube = info["cube_pos"]
        offset = float(np.linalg.norm(cube[:2] - base[:2]))
        bottom = info["cube_height"]
        on_base = offset < cfg.stack_tolerance and cfg.base_size - 0.004 < bottom < cfg.base_size + 0.006
        info["in_goal"] = bool(on_base)
        info["near_goal"] = offset < cfg.base_size
        info["is_success"] = bool(on_base and not info["grasped"] and not self._knocked)
        info["knocked_base"] = self._knocked
        info["base_pos"] = base
        info["task_failure"] = "knocked_base" if self._knocked else ""
        return info


# ================================================================================================= push


@dataclasses.dataclass(frozen=True)
class PushConfig(PickPlaceConfig):
    """so101_push: slide the red cube into a blue target zone without lifting it (no bowl)."""

    # Cube start area (m).
    cube_x_range: tuple[float, float] = (0.17, 0.23)
    cube_y_range: tuple[float, float] = (-0.06, 0.0)
    # Target zone centre relative to the cube's start (m), x and y offsets sampled per episode: ahead of
    # the cube along +y within about 20 degrees, so the push meets a face of the (unrotated) cube squarely.
    zone_dx_range: tuple[float, float] = (-0.025, 0.025)
    zone_dy_range: tuple[float, float] = (0.07, 0.10)
    # Radius of the target zone (m): success is the cube centre inside it.
    zone_radius: float = 0.03
    # The cube counts as lifted (not a push) when its bottom rises this high (m).
    push_lift_limit: float = 0.015

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_range(self, "zone_dx_range", -0.05, 0.05)
        _check_range(self, "zone_dy_range", 0.04, 0.14)
        for name in ("zone_radius", "push_lift_limit"):
            if getattr(self, name) <= 0:
                raise ActlabError(f"{name} must be positive", field=name, found=getattr(self, name))


class PushEnv(PickPlaceEnv):
    """Push the red cube into the blue zone with the closed gripper; lifting it is a failure.

    ``info`` adds ``zone_pos`` ((3,) m); ``in_goal``: the cube centre within ``zone_radius`` of the zone
    centre and on the table; ``is_success``: in_goal and not grasped. Failure classes (``task_failure``):
    ``lifted_cube`` (it left the table: not a push), ``never_touched`` (moved < 5 mm), ``stopped_short``
    (moved towards the zone but ended before it), ``missed_zone`` (ended beside or past it).
    """

    task_text = "push the red cube into the blue zone"
    config: PushConfig

    def __init__(self, config: PushConfig | None = None, render_mode: str | None = "rgb_array") -> None:
        super().__init__(config or PushConfig(), render_mode)

    def _build_model(self):
        r = self.config.zone_radius
        extra = f"""
    <body name="zone" pos="0.2 0.08 0">
      <geom name="zone" type="cylinder" size="{r:.6g} 0.0005" pos="0 0 0.0005" rgba="0.10 0.35 0.85 1"
            contype="0" conaffinity="0" group="1"/>
    </body>"""
        return build_model(self.config.scene, bowl=False, extra=extra, name="so101_push")

    def _ids(self) -> None:
        super()._ids()
        mj = self._mj
        self._zone_body = mj.mj_name2id(self.model, mj.mjtObj.mjOBJ_BODY, "zone")
        self._cube_start = np.zeros(2)
        self._lifted_cube = False

    def _randomize_task(self, rng: np.random.Generator, options: dict) -> None:
        cfg = self.config
        cube = self.data.qpos[self._cube_qpos : self._cube_qpos + 2].copy()
        xy = cube + np.array([rng.uniform(*cfg.zone_dx_range), rng.uniform(*cfg.zone_dy_range)])
        self.model.body_pos[self._zone_body] = [xy[0], xy[1], 0.0]
        self._cube_start, self._lifted_cube = cube, False

    def _task_state(self) -> tuple:
        return (self.model.body_pos[self._zone_body].copy(), self._cube_start.copy(), self._lifted_cube)

    def _set_task_state(self, state: tuple) -> None:
        self.model.body_pos[self._zone_body] = state[0]
        self._cube_start, self._lifted_cube = state[1].copy(), state[2]
        self._mj.mj_forward(self.model, self.data)

    def goal_position(self) -> np.ndarray:
        """The target zone's centre on the table (3,) m."""
        return self.model.body_pos[self._zone_body].copy()

    def make_expert(self, config: ExpertConfig | None = None) -> PushExpert:
        return PushExpert(self, config)

    def _task_info(self, info: dict[str, Any]) -> dict[str, Any]:
        cfg = self.config
        cube, zone = info["cube_pos"][:2], self.goal_position()[:2]
        dist = float(np.linalg.norm(cube - zone))
        self._lifted_cube |= info["cube_height"] > cfg.push_lift_limit
        in_zone = dist < cfg.zone_radius and info["cube_height"] < 0.005
        info["in_goal"] = bool(in_zone)
        info["near_goal"] = dist < cfg.zone_radius + 0.02
        info["is_success"] = bool(in_zone and not info["grasped"])
        info["zone_pos"] = self.goal_position()
        start_dist = float(np.linalg.norm(self._cube_start - zone))
        if info["is_success"]:
            failure = ""
        elif self._lifted_cube:
            failure = "lifted_cube"
        elif np.linalg.norm(cube - self._cube_start) < 0.005:
            failure = "never_touched"
        else:
            # progress along the start->zone line: short of the zone, or beside / past it
            line = (zone - self._cube_start) / max(start_dist, 1e-9)
            moved = cube - self._cube_start
            along = float(np.dot(moved, line))
            across = abs(float(line[0] * moved[1] - line[1] * moved[0]))
            failure = (
                "stopped_short"
                if along < start_dist - cfg.zone_radius and across < cfg.zone_radius
                else "missed_zone"
            )
        info["task_failure"] = failure
        return info


class PushExpert:
    """Scripted push: the closed gripper comes down behind the cube and slides it to the zone centre.

    The fixed jaw's outer face (2.4 cm wide) leads: the closing direction points back along the push, so
    that face is square to it, 2.05 cm ahead of the grasp point. ``plan()`` returns (T, 6) degrees.
    """

    # Distance (m) from the grasp point to the fixed jaw's outer face along the closing direction.
    LEAD = 0.0205
    # Grasp point height while pushing (m): fingertips 4 mm above the table.
    PUSH_Z = 0.0185

    def __init__(self, env: PushEnv, config: ExpertConfig | None = None) -> None:
        self.env = env
        self.config = config or ExpertConfig()
        self.planner = ScriptedExpert(env, self.config)  # its IK and joint-space moves

    def plan(self, rng: np.random.Generator | None = None) -> np.ndarray:
        cfg = self.config
        noise = cfg.noise if rng is not None else 0.0
        rng = rng or np.random.default_rng(0)
        env = self.env
        cube, _ = env.cube_pose()
        zone = env.goal_position()
        half = env.config.scene.cube_size / 2
        d = zone[:2] - cube[:2]
        d /= np.linalg.norm(d)
        down = down_rotation(math.atan2(-d[1], -d[0]))  # closing direction against the push
        back = half + self.LEAD + 0.025
        z = self.PUSH_Z + (rng.uniform(-1, 1) * 0.002 * noise if noise else 0.0)
        start = np.append(cube[:2] - d * back, z)
        above = start + np.array([0.0, 0.0, 0.05])
        end = np.append(zone[:2] - d * (half + self.LEAD), z)
        retreat = end - np.append(d * 0.03, 0.0)
        lifted = retreat + np.array([0.0, 0.0, 0.06])

        arm = np.asarray(env.data.qpos[:N_ARM], dtype=float).copy()
        actions: list[np.ndarray] = []
        q_above = self.planner.solve_from_candidates(above, down, arm)
        for s in min_jerk(30):  # to above the start point, closing the jaws on the way
            actions.append(
                np.append(arm + s * (q_above - arm), GRIPPER_OPEN + s * (GRIPPER_CLOSED - GRIPPER_OPEN))
            )
        arm = q_above
        cart = self.planner.cartesian
        arm = cart(actions, arm, above, start, down, 18, GRIPPER_CLOSED)
        push_steps = max(20, round(np.linalg.norm(end - start) / 0.06 * FPS))  # ~6 cm/s
        arm = cart(actions, arm, start, end, down, push_steps, GRIPPER_CLOSED)
        for _ in range(6):
            actions.append(np.append(arm, GRIPPER_CLOSED))
        arm = cart(actions, arm, end, retreat, down, 12, GRIPPER_CLOSED)
        arm = cart(actions, arm, retreat, lifted, down, 15, GRIPPER_CLOSED)
        out = np.stack(actions) * _DEG
        if noise > 0:
            out[:, :N_ARM] += rng.normal(0.0, 0.3 * noise, (len(out), N_ARM))
        return np.clip(out, env.joint_low_deg, env.joint_high_deg).astype(np.float32)


# ========================================================================================= pick moving


@dataclasses.dataclass(frozen=True)
class PickMovingConfig(PickPlaceConfig):
    """so101_pick_moving: the cube rides a tray that slides across the table; pick it and place it in
    the bowl. The tray moves along -y (away from the bowl); in half the episodes it reverses once at a
    random time and comes back along +y, each leg at its own speed; it stops at either end of the belt.

    Why a reversal: a constant velocity is foreseeable from one frame, so a chunk executed late still
    matched the cube (the demo's ACT lost 8 points at 267 ms on a constant belt, within the noise). A
    reversal is not: from it on, a chunk planned before it drifts from the cube by the change of
    velocity (6-10 cm/s: both legs' speeds) times its lateness, 0.8-1.3 cm at 133 ms (4 steps at 30 Hz)
    and 1.6-2.7 cm at 267 ms (8 steps). The jaws close across the belt, so that error runs along the
    pads, 2.4 cm wide against the 2.5 cm cube: about 1.2 cm off and a pad misses the cube's face.
    Measured with the scripted expert itself cut into chunks (30 planned from the true state, 10
    executed, async delay D; seeds 200000..200099): 100 / 100 / 41 % at D = 0 / 4 / 8 (92 / 92 / 41 %
    where an episode ends as soon as the tray reaches an end of the belt, the test's count), the
    closed-loop expert 100 %; on a constant belt (no reversal) 100 % at every D. With the reversal at
    0.6-1.3 s it was 94 / 81 / 57 %: the turns after 1.1 s were mostly forgiven even 8 steps late and
    those at 1.0-1.1 s cost chunks on time too; faster belts (5-9 cm/s) lost more on time, not late.

    Why it turns in half the episodes only (``belt_reverse_chance``): trained policies timed a turn that
    always came at 0.7-1.0 s, and act_relative then lost nothing at 267 ms (sync 139, async 144 of 200);
    only turns at 0.7-0.9 s cost a late chunk and not an on-time one, so a wider window could not hide the
    time. With the coin, whether the belt turns shows in no frame until it has: a policy's late chunk
    holds one guess, its on-time chunk the outcome."""

    # Cube (and tray) start area (m).
    cube_x_range: tuple[float, float] = (0.17, 0.23)
    cube_y_range: tuple[float, float] = (0.0, 0.06)
    # Tray speed (m/s) of each leg, drawn uniformly for each: 3-5 cm/s.
    belt_speed_range: tuple[float, float] = (0.03, 0.05)
    # When the belt reverses (s after the start), uniform per episode: 0.7-1.0 s is steps 21-30, the last
    # third of the expert's approach (30 steps): a chunk on time is re-planned before the descent (18
    # more), one 8 steps late carries the first leg's forecast down to the cube.
    belt_reverse_range: tuple[float, float] = (0.7, 1.0)
    # The chance that the belt turns at all, drawn per episode after the turn time (so each seed's cube,
    # speeds and turn time are those of the belt that always turned). Why a coin: a turn that always came
    # in that window was timed by the policies from how far the episode had gone (a chunk planned at step
    # 10 already swung back at step ~20), so a late chunk still held it and act_relative lost nothing to a
    # 267 ms delay; whether the belt turns shows in no frame before it does.
    belt_reverse_chance: float = 0.5
    # The tray stops at these y (m): the -y end, and the +y end short of the bowl (the tray's 3 cm half
    # width stays clear of the bowl's wall at y ~ 0.115). A cube that gets to an end unpicked was carried
    # away (it can still be picked there: a success then counts).
    belt_end_y: float = -0.14
    belt_far_y: float = 0.075

    def __post_init__(self) -> None:
        super().__post_init__()
        lo, hi = self.belt_speed_range
        if not 0.0 <= lo <= hi <= 0.1:
            raise ActlabError(
                "belt_speed_range out of range",
                field="belt_speed_range",
                expected="(low, high) within 0-0.1 m/s",
                found=(lo, hi),
            )
        lo, hi = self.belt_reverse_range
        if not 0.0 <= lo <= hi:
            raise ActlabError(
                "belt_reverse_range out of range",
                field="belt_reverse_range",
                expected="(low, high) seconds with 0 <= low <= high",
                found=(lo, hi),
            )
        if not 0.0 <= self.belt_reverse_chance <= 1.0:  # (NaN fails it too)
            raise ActlabError(
                "belt_reverse_chance out of range",
                field="belt_reverse_chance",
                expected="a probability within 0-1",
                found=self.belt_reverse_chance,
            )
        if not -0.15 <= self.belt_end_y < self.cube_y_range[0]:
            raise ActlabError(
                "belt_end_y must lie in reach, before the cube's start area",
                field="belt_end_y",
                expected=f"-0.15 to {self.cube_y_range[0]}",
                found=self.belt_end_y,
            )
        if not self.cube_y_range[1] <= self.belt_far_y <= 0.08:
            raise ActlabError(
                "belt_far_y must lie past the cube's start area and short of the bowl",
                field="belt_far_y",
                expected=f"{self.cube_y_range[1]} to 0.08",
                found=self.belt_far_y,
            )


# Half extents of the tray (m): a thin plate under the cube.
_TRAY = (0.03, 0.03, 0.002)
# The tray's colour shows the belt's direction (a conveyor's direction lamp): dark grey on the way out
# (-y), yellow on the way back (+y; neither the red cube's nor the blue bowl's). Without it one frame
# cannot tell the direction, and the demo's ACT trained on the reversing belt stayed at 12-22 % (50
# held-out seeds per checkpoint) where it reached 64 % on the constant belt; the lamp tells the
# direction once the belt has turned, never when it will turn.
_TRAY_OUT_RGBA = (0.30, 0.30, 0.33, 1.0)
_TRAY_BACK_RGBA = (0.90, 0.80, 0.20, 1.0)


class PickMovingEnv(PickPlaceEnv):
    """Pick-and-place of a cube on a moving tray (the real-time task: a delay costs centimetres).

    ``info`` adds ``tray_pos`` ((3,) m), ``belt_speed`` (m/s, the current leg's) and ``belt_velocity``
    (m/s along y, signed: 0 at an end). Failure classes: ``carried_away`` (the tray reached an end of the
    belt with the cube never picked up) and the pick-and-place ones.
    """

    task_text = "pick the moving cube and place it in the bowl"
    cube_moves = True  # the scripted expert forecasts the cube's path, and re-plans when it turns
    config: PickMovingConfig

    def __init__(self, config: PickMovingConfig | None = None, render_mode: str | None = "rgb_array") -> None:
        super().__init__(config or PickMovingConfig(), render_mode)

    def _build_model(self):
        sx, sy, sz = _TRAY
        extra = f"""
    <!-- the tray's friction (priority: it wins over the cube's) is low: it carries a cube at its own
         speed but barely drags on one the jaws hold -->
    <body name="tray" pos="0.2 0 {sz + 0.0002:.6g}">
      <joint name="belt" type="slide" axis="0 1 0" range="-0.5 0.5"/>
      <inertial pos="0 0 0" mass="5" diaginertia="1e-3 1e-3 1e-3"/>
      <geom name="tray" type="box" size="{sx} {sy} {sz}" rgba="{" ".join(map(str, _TRAY_OUT_RGBA))}"
            {_OBJECT_GEOM}
            friction="0.3 0.01 0.001" priority="2"/>
    </body>"""
        return build_model(self.config.scene, extra=extra, name="so101_pick_moving")

    def _ids(self) -> None:
        super()._ids()
        mj, m = self._mj, self.model
        joint = mj.mj_name2id(m, mj.mjtObj.mjOBJ_JOINT, "belt")
        self._belt_qpos, self._belt_dof = m.jnt_qposadr[joint], m.jnt_dofadr[joint]
        self._tray_body = mj.mj_name2id(m, mj.mjtObj.mjOBJ_BODY, "tray")
        self._tray_geom = mj.mj_name2id(m, mj.mjtObj.mjOBJ_GEOM, "tray")
        self._speeds = (0.0, 0.0)  # (first leg along -y, second leg along +y), m/s
        self._reverse_at = 0.0  # sim time (s) of the reversal (inf: the belt does not turn)
        self._carried_away = False

    def _randomize_task(self, rng: np.random.Generator, options: dict) -> None:
        cfg, d = self.config, self.data
        out = float(options.get("belt_speed", rng.uniform(*cfg.belt_speed_range)))
        back = float(options.get("belt_return_speed", rng.uniform(*cfg.belt_speed_range)))
        self._speeds = (out, back)
        self._reverse_at = float(options.get("belt_reverse_s", rng.uniform(*cfg.belt_reverse_range)))
        # Whether it turns at all: drawn last (and only when it may not), so the draws above stay each seed's.
        may_not = "belt_reverse_s" not in options and cfg.belt_reverse_chance < 1.0
        if may_not and rng.uniform() >= cfg.belt_reverse_chance:
            self._reverse_at = math.inf  # this episode's belt never turns
        cube = d.qpos[self._cube_qpos : self._cube_qpos + 2].copy()
        self.model.body_pos[self._tray_body][:2] = [cube[0], 0.0]
        d.qpos[self._belt_qpos] = cube[1]
        d.qpos[self._cube_qpos + 2] += 2 * _TRAY[2] + 0.0002  # the cube sits on the tray
        d.qvel[self._belt_dof] = -out
        d.qvel[self._cube_dof + 1] = -out
        self._carried_away = False
        self._show_direction()

    def _show_direction(self) -> None:
        back = self.data.time >= self._reverse_at
        self.model.geom_rgba[self._tray_geom] = _TRAY_BACK_RGBA if back else _TRAY_OUT_RGBA

    def _task_state(self) -> tuple:
        tray = self.model.body_pos[self._tray_body].copy()
        return (tray, self._speeds, self._reverse_at, self._carried_away)

    def _set_task_state(self, state: tuple) -> None:
        self.model.body_pos[self._tray_body] = state[0]
        self._speeds, self._reverse_at, self._carried_away = state[1], state[2], state[3]
        self._show_direction()
        self._mj.mj_forward(self.model, self.data)

    def tray_y(self) -> float:
        return float(self.data.qpos[self._belt_qpos])

    def belt_velocity(self) -> float:
        """The tray's velocity along y (m/s) now: -speed before the reversal, +speed after, 0 at an end."""
        cfg = self.config
        if self.data.time < self._reverse_at:
            return -self._speeds[0] if self.tray_y() > cfg.belt_end_y else 0.0
        return self._speeds[1] if self.tray_y() < cfg.belt_far_y else 0.0

    def cube_velocity(self) -> np.ndarray:
        """The belt's velocity now while the cube rides it untouched (what the expert forecasts with:
        the reversal is not foreseen, the expert re-plans when the cube leaves the forecast path)."""
        if self._ever_grasped:
            return super().cube_velocity()
        return np.array([0.0, self.belt_velocity(), 0.0])

    def _apply(self, action_deg: np.ndarray) -> None:
        lo, hi = self.model.actuator_ctrlrange[:, 0], self.model.actuator_ctrlrange[:, 1]
        self.data.ctrl[:6] = np.clip(np.asarray(action_deg, dtype=np.float64) / _DEG, lo, hi)
        for _ in range(SUBSTEPS):
            # The belt drives the tray at its velocity: set before every substep (contacts then see the
            # tray move, so friction carries the cube); its sign flips at the reversal, zero at an end.
            self.data.qvel[self._belt_dof] = self.belt_velocity()
            self._mj.mj_step(self.model, self.data)
        self._show_direction()  # the frame after this step shows the direction the belt now runs

    def _task_info(self, info: dict[str, Any]) -> dict[str, Any]:
        cfg, y = self.config, self.tray_y()
        ended = y <= cfg.belt_end_y + 1e-6 or y >= cfg.belt_far_y - 1e-6
        on_tray = info["cube_height"] < 2 * _TRAY[2] + 0.004
        self._carried_away |= bool(ended and on_tray and not self._ever_lifted)
        info["near_goal"] = float(np.linalg.norm(info["cube_pos"][:2] - info["bowl_pos"][:2])) < 0.08
        info["tray_pos"] = self.data.xpos[self._tray_body].copy()
        reversed_ = self.data.time >= self._reverse_at
        info["belt_speed"] = self._speeds[1] if reversed_ else self._speeds[0]
        info["belt_velocity"] = self.belt_velocity()
        info["task_failure"] = "carried_away" if self._carried_away and not info["is_success"] else ""
        return info


# ============================================================================================= clutter

# Distractors: (name, geom type, half sizes (m), RGBA); none red (the cube) or blue (the bowl).
_DISTRACTORS = (
    ("yellow_cylinder", "cylinder", (0.014, 0.015), (0.95, 0.85, 0.15, 1.0)),
    ("green_block", "box", (0.011, 0.011, 0.011), (0.15, 0.65, 0.25, 1.0)),
    ("purple_slab", "box", (0.018, 0.012, 0.008), (0.55, 0.25, 0.70, 1.0)),
    ("white_cylinder", "cylinder", (0.012, 0.02), (0.92, 0.92, 0.90, 1.0)),
)


@dataclasses.dataclass(frozen=True)
class ClutterConfig(PickPlaceConfig):
    """so101_pick_clutter: pick-and-place of the red cube among distractor objects."""

    # Distractor objects placed per episode (0-4): a yellow cylinder, a green block, a purple slab, a
    # white cylinder, in that order.
    distractors: int = 3
    # Area the distractors are placed in (m).
    clutter_x_range: tuple[float, float] = (0.13, 0.27)
    clutter_y_range: tuple[float, float] = (-0.12, 0.10)
    # Least distance from a distractor to the cube (m): the open jaws need room around the cube.
    cube_clearance: float = 0.065
    # Least distance between distractors (m).
    distractor_clearance: float = 0.045
    # A distractor raised this much (m) counts as picked instead of the cube.
    distractor_lift: float = 0.015

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.distractors <= len(_DISTRACTORS):
            raise ActlabError(
                "distractors out of range",
                field="distractors",
                expected=f"0 to {len(_DISTRACTORS)}",
                found=self.distractors,
            )
        _check_range(self, "clutter_x_range", 0.1, 0.3)
        _check_range(self, "clutter_y_range", -0.15, 0.15)
        for name in ("cube_clearance", "distractor_clearance", "distractor_lift"):
            if getattr(self, name) <= 0:
                raise ActlabError(f"{name} must be positive", field=name, found=getattr(self, name))


# Where unused distractors wait (m): on the table behind the arm, out of the overhead camera's view.
_PARK_X = -0.3


def distractor_xml(names_used: int = len(_DISTRACTORS), park_x: float = _PARK_X) -> str:
    """MJCF of the distractor bodies (free objects, parked behind the arm until an episode places them)."""
    bodies = []
    for i, (name, kind, size, rgba) in enumerate(_DISTRACTORS[:names_used]):
        half_h = size[-1]
        bodies.append(f"""
    <body name="{name}" pos="{park_x} {0.1 * i:.3g} {half_h}">
      <freejoint name="{name}"/>
      <geom name="{name}" type="{kind}" size="{" ".join(f"{v:.6g}" for v in size)}" mass="0.03"
            rgba="{" ".join(f"{v:.3g}" for v in rgba)}" condim="4" friction="1 0.01 0.001" {_OBJECT_GEOM}/>
    </body>""")
    return "".join(bodies)


class ClutterEnv(PickPlaceEnv):
    """Pick-and-place of the red cube with distractors on the table.

    ``info`` adds ``distractors_pos`` ((n, 3) m). Failure classes: ``picked_distractor`` (a distractor was
    raised off the table) and the pick-and-place ones.
    """

    task_text = "pick the red cube among the other objects and place it in the bowl"
    config: ClutterConfig

    def __init__(self, config: ClutterConfig | None = None, render_mode: str | None = "rgb_array") -> None:
        super().__init__(config or ClutterConfig(), render_mode)

    def _build_model(self):
        return build_model(self.config.scene, extra=distractor_xml(), name="so101_pick_clutter")

    def _ids(self) -> None:
        super()._ids()
        mj, m = self._mj, self.model
        self._dq = [m.jnt_qposadr[mj.mj_name2id(m, mj.mjtObj.mjOBJ_JOINT, n)] for n, *_ in _DISTRACTORS]
        self._picked_distractor = False

    def _randomize_task(self, rng: np.random.Generator, options: dict) -> None:
        cfg, d = self.config, self.data
        cube = d.qpos[self._cube_qpos : self._cube_qpos + 2].copy()
        bowl = self.bowl_position()[:2]
        bowl_clear = cfg.scene.bowl_radius + 0.035
        placed: list[np.ndarray] = []
        for i, (_, _, size, _) in enumerate(_DISTRACTORS):
            q = self._dq[i]
            yaw = rng.uniform(-math.pi, math.pi)
            if i >= cfg.distractors:
                d.qpos[q : q + 7] = [_PARK_X, 0.1 * i, size[-1], 1, 0, 0, 0]
                continue
            for _ in range(200):
                xy = np.array([rng.uniform(*cfg.clutter_x_range), rng.uniform(*cfg.clutter_y_range)])
                if (
                    np.linalg.norm(xy - cube) >= cfg.cube_clearance
                    and np.linalg.norm(xy - bowl) >= bowl_clear
                    and _far_enough(xy, placed, cfg.distractor_clearance)
                ):
                    break
            else:
                raise ActlabError(
                    "cannot place the distractors",
                    field="clutter_x_range/clutter_y_range",
                    expected="room for every distractor",
                    found=cfg.distractors,
                )
            placed.append(xy)
            d.qpos[q : q + 7] = [xy[0], xy[1], size[-1], math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)]
        self._picked_distractor = False

    def _task_state(self) -> tuple:
        return (self._picked_distractor,)

    def _set_task_state(self, state: tuple) -> None:
        (self._picked_distractor,) = state

    def distractor_positions(self) -> np.ndarray:
        """Centres (n, 3) m of the distractors in use."""
        n = self.config.distractors
        return np.array([self.data.qpos[q : q + 3] for q in self._dq[:n]]).reshape(n, 3)

    def _task_info(self, info: dict[str, Any]) -> dict[str, Any]:
        pos = self.distractor_positions()
        rest = np.array([s[-1] for _, _, s, _ in _DISTRACTORS[: len(pos)]])
        if len(pos) and np.any(pos[:, 2] - rest > self.config.distractor_lift):
            self._picked_distractor = True
        info["near_goal"] = float(np.linalg.norm(info["cube_pos"][:2] - info["bowl_pos"][:2])) < 0.08
        info["distractors_pos"] = pos
        info["task_failure"] = (
            "picked_distractor" if self._picked_distractor and not info["is_success"] else ""
        )
        return info


# ============================================================================================ registry


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One sim task: what ``actlab sim tasks`` lists and every tool builds by name."""

    name: str  # registry name (so101_*)
    summary: str  # what the robot does
    success: str  # what counts as success
    failures: tuple[tuple[str, str], ...]  # the task's own failure classes: (name, meaning)
    config: type  # its config class (a PickPlaceConfig)
    env: type  # its env class (a PickPlaceEnv)

    @property
    def defaults(self) -> PickPlaceConfig:
        return self.config()


_PICK_FAILURES = (
    ("never_picked_up", "the cube was never grasped and lifted"),
    ("dropped_during_transport", "the cube left the grasp in the air away from the goal"),
    ("missed_goal", "the cube was let go near the goal, or put down elsewhere"),
    ("timeout", "still holding the cube, or it is in the goal without the success condition, at the end"),
)

TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        TaskSpec(
            "so101_pick_place",
            "pick the red cube and place it in the blue bowl",
            "the cube rests inside the bowl, let go",
            _PICK_FAILURES,
            PickPlaceConfig,
            PickPlaceEnv,
        ),
        TaskSpec(
            "so101_stack",
            "stack the red cube on a larger green cube",
            "the red cube rests on the green one (centres within 1.2 cm), let go, the green one not knocked",
            (("knocked_base", "the green cube was pushed more than 1.5 cm or tipped"), *_PICK_FAILURES),
            StackConfig,
            StackEnv,
        ),
        TaskSpec(
            "so101_push",
            "push the red cube into the blue zone with the closed gripper",
            "the cube's centre is inside the 3 cm zone, on the table",
            (
                ("lifted_cube", "the cube left the table (picked up instead of pushed)"),
                ("never_touched", "the cube moved less than 5 mm"),
                ("stopped_short", "the cube moved towards the zone but stopped before it"),
                ("missed_zone", "the cube ended beside or past the zone"),
            ),
            PushConfig,
            PushEnv,
        ),
        TaskSpec(
            "so101_pick_moving",
            "pick the cube off a tray sliding at 3-5 cm/s (back in half the episodes), place it in the bowl",
            "the cube rests inside the bowl, let go",
            (
                ("carried_away", "the tray reached the belt's end with the cube never picked up"),
                *_PICK_FAILURES,
            ),
            PickMovingConfig,
            PickMovingEnv,
        ),
        TaskSpec(
            "so101_pick_clutter",
            "pick the red cube among three distractor objects and place it in the bowl",
            "the cube rests inside the bowl, let go",
            (("picked_distractor", "a distractor was raised off the table"), *_PICK_FAILURES),
            ClutterConfig,
            ClutterEnv,
        ),
    )
}


def task_config(task: str = "so101_pick_place", **overrides: Any) -> PickPlaceConfig:
    """The config of a sim ``task`` with field ``overrides`` (``scene`` may be a dict or a SceneConfig)."""
    if task not in TASKS:
        raise unknown_name_error("sim task", task, TASKS, fix="actlab sim tasks lists them")
    cls = TASKS[task].config
    names = {f.name for f in dataclasses.fields(cls)}
    for key in overrides:
        if key not in names:
            raise unknown_name_error(f"{task} option", key, names)
    scene = overrides.pop("scene", None)
    if isinstance(scene, dict):
        scene = from_dict(SceneConfig, scene, where="scene")
    if "cameras" in overrides:
        overrides["cameras"] = tuple(overrides["cameras"])
    cfg = from_dict(cls, overrides)
    return dataclasses.replace(cfg, scene=scene) if scene is not None else cfg


def make_env(task: str = "so101_pick_place", render_mode: str | None = "rgb_array", **overrides: Any):
    """Build the gymnasium env of a sim ``task``; keyword arguments override :class:`PickPlaceConfig`
    fields (``image_size``, ``cameras``, ``max_steps``, ``terminate_on_success``, randomization, ...) or
    the task config's own."""
    config = task_config(task, **overrides)  # (an unknown task or option fails here, with a did-you-mean)
    return TASKS[task].env(config, render_mode=render_mode)
