"""Scripted expert for SO-101 pick-and-place: Cartesian waypoints solved with inverse kinematics.

The expert plans a whole episode when it first acts: move above the cube, descend, close the jaws, lift,
carry over the bowl, lower, open, retreat to the start pose. Each segment is interpolated with a
minimum-jerk profile and every 30 Hz target is solved by damped-least-squares IK (MuJoCo Jacobians), so
the actions are smooth joint targets in the env's units (degrees, LeRobot order). It reads the cube pose
from the simulator (privileged information), which is why it is bound to an env. For a cube that moves
(so101_pick_moving) it is closed-loop: :class:`ExpertPolicy` checks the cube's velocity against the
plan's forecast at every step until the jaws close, and plans the rest again when the belt has turned.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from actlab.errors import ActlabError
from actlab.sim.env import FPS, HOME_QPOS, PickPlaceEnv
from actlab.sim.ik import N_ARM, ArmIK, down_rotation
from actlab.sim.scene import GRIPPER_CLOSED, GRIPPER_OPEN
from actlab.sim.units import to_units

_DEG = 180.0 / math.pi


@dataclasses.dataclass(frozen=True)
class ExpertConfig:
    """Waypoint heights, segment durations and optional noise of the scripted expert."""

    # Grasp point height above the cube's top face before descending (m).
    approach_clearance: float = 0.035
    # Grasp point height relative to the cube centre when closing (m); > 0 keeps fingertips off the table.
    grasp_offset_z: float = 0.003
    # Grasp point height while carrying (m above the table); clears the bowl rim with the cube held.
    carry_height: float = 0.085
    # Grasp point height when opening over the bowl (m above the table).
    release_height: float = 0.07
    # Segment durations in control steps (30 Hz): move above the cube, descend, close, settle, lift,
    # carry, lower, open, retreat.
    steps_approach: int = 30
    steps_descend: int = 18
    steps_close: int = 8
    steps_settle: int = 6
    steps_lift: int = 18
    steps_carry: int = 35
    steps_lower: int = 10
    steps_open: int = 8
    steps_retreat: int = 30
    # Scale of the random variation (0 = deterministic given the cube pose; 1 = up to 4 mm grasp offsets,
    # 1 cm height changes, +-15% segment durations and 0.3 degree action jitter).
    noise: float = 0.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name.startswith("steps_") and (not isinstance(value, int) or value < 1):
                raise ActlabError(f"{f.name} must be a positive integer", field=f.name, found=value)
        if not 0.0 <= self.noise <= 3.0:
            raise ActlabError("noise out of range", field="noise", expected="0 to 3", found=self.noise)
        if self.release_height > self.carry_height:
            raise ActlabError(
                "release_height must not exceed carry_height",
                field="release_height",
                expected=f"<= carry_height ({self.carry_height})",
                found=self.release_height,
            )

    @property
    def episode_steps(self) -> int:
        """Planned length of an episode without noise (control steps)."""
        return sum(getattr(self, f.name) for f in dataclasses.fields(self) if f.name.startswith("steps_"))


def min_jerk(n: int) -> np.ndarray:
    """n interpolation fractions in (0, 1] with zero velocity and acceleration at both ends."""
    s = np.arange(1, n + 1) / n
    return 10 * s**3 - 15 * s**4 + 6 * s**5


def _closing_yaw(cube_xy: np.ndarray, cube_yaw: float, across: float | None = None) -> float:
    """Jaw closing direction aligned with a pair of cube faces, chosen closest to tangential (pointing to
    -y for a cube straight ahead): the moving jaw then opens away from the bowl (which is at +y) and the
    wrist camera sits on the arm's side of the gripper, looking outwards over the work area.
    With ``across`` (a direction of motion, rad) the jaws close square to it instead."""
    tangential = math.atan2(cube_xy[1], cube_xy[0]) - math.pi / 2
    if across is not None:
        tangential = across + math.pi / 2
    options = [cube_yaw + k * math.pi / 2 for k in range(-4, 5)]
    return min(options, key=lambda a: abs(math.remainder(a - tangential, 2 * math.pi)) + 1e-9 * abs(a))


class ScriptedExpert:
    """Plans joint-target trajectories for a :class:`PickPlaceEnv` scene.

    ``plan(env)`` returns (T, 6) actions in degrees for the env's current cube and bowl poses, starting
    from the arm's current joint positions.
    """

    def __init__(self, env: PickPlaceEnv, config: ExpertConfig | None = None) -> None:
        self.env = env
        self.config = config or ExpertConfig()
        self.ik = ArmIK(env.model)

    def plan(
        self, rng: np.random.Generator | None = None, since: int = 0, before: np.ndarray | None = None
    ) -> np.ndarray:
        """Actions (T, 6) in degrees for the env's current scene; ``rng`` drives the optional noise.

        A revision (a moving cube left the forecast path, :meth:`revision_due`): ``since`` is the step
        now and ``before`` the plan being executed (degrees); its first ``since`` actions are kept and
        the rest is planned again from the cube's state now. Give a generator seeded as for the first
        plan: the same draws give the same grasp offsets, heights and segment durations."""
        cfg = self.config
        noise = cfg.noise if rng is not None else 0.0
        rng = rng or np.random.default_rng(0)

        def jitter(scale: float, n: int | None = None):
            return rng.uniform(-1, 1, n) * scale * noise if noise > 0 else (np.zeros(n) if n else 0.0)

        def dur(steps: int) -> int:
            return max(1, round(steps * (1 + jitter(0.15))))

        env = self.env
        revising = before is not None and since > 0
        kept = np.asarray(before, dtype=float)[:since] / _DEG if revising else np.zeros((0, 6))
        cube, cube_yaw = env.cube_pose()
        bowl, release_z = env.place_target()  # (x, y) of the goal; the height to open at (None: ours)
        half = env.config.scene.cube_size / 2
        # A cube on a belt (so101_pick_moving) moves at a constant velocity between turns: the grasp
        # point follows its forecast path from the approach until the grip has settled, and the jaws
        # close across the motion (a jaw that trails the cube by the servos' lag never lands on it). When
        # the belt turns, the cube leaves the forecast and the plan is revised from step ``since`` on.
        drift = env.cube_velocity()[:2] / FPS if getattr(env, "cube_moves", False) else None
        if revising:
            yaw = self._yaw  # the first plan's: a reversed belt must not turn the wrist half a turn
        elif drift is None or not np.any(drift):
            yaw = _closing_yaw(cube[:2], cube_yaw)
        else:
            yaw = _closing_yaw(cube[:2], cube_yaw, across=math.atan2(drift[1], drift[0]))
        self._yaw = yaw
        down = down_rotation(yaw)

        grasp = cube + np.array([0.0, 0.0, cfg.grasp_offset_z])
        grasp[:2] += jitter(0.004, 2)
        above = grasp + np.array([0.0, 0.0, half + cfg.approach_clearance + jitter(0.01)])
        carry_z = cfg.carry_height + jitter(0.01)
        own_release = release_z is not None
        release_z = cfg.release_height if release_z is None else release_z
        over_bowl = np.array([bowl[0], bowl[1], carry_z]) + np.append(jitter(0.004, 2), 0.0)
        release = np.array([over_bowl[0], over_bowl[1], min(release_z + jitter(0.005), carry_z)])

        q_now = np.asarray(env.data.qpos[:6], dtype=float).copy()
        arm = q_now[:N_ARM].copy()
        actions: list[np.ndarray] = []

        def emit(q_arm: np.ndarray, gripper: float) -> None:
            actions.append(np.append(q_arm, gripper))

        def at(point: np.ndarray, step: int) -> np.ndarray:
            # where a point riding with the cube (as it is now, at step ``since``) is at plan step ``step``
            return point if drift is None else point + np.append(drift * (step - since), 0.0)

        def keep() -> bool:
            # a revision keeps what was executed: the arm then continues from the kept action
            if len(actions) < len(kept):
                actions.append(kept[len(actions)])
                return True
            return False

        # 1. Joint-space move from the start pose to above the cube (the start pose is not pointing down).
        # A revision mid-move bends the rest of it from the last executed target to the new end.
        n = dur(cfg.steps_approach)
        fractions = min_jerk(n)
        start, s0 = arm, 0.0
        if revising and 0 < since < n:
            start, s0 = kept[since - 1][:N_ARM], fractions[since - 1]
        if since < n:
            q_above = self.solve_from_candidates(at(above, n), down, start)
        for s in fractions:
            if not keep():
                emit(start + (s - s0) / (1 - s0) * (q_above - start), GRIPPER_OPEN)
        arm = actions[-1][:N_ARM]
        # 2. Straight down to the grasp point.
        n, k0 = dur(cfg.steps_descend), len(actions)
        if drift is None:
            arm = self.cartesian(actions, arm, above, grasp, down, n, GRIPPER_OPEN)
        else:
            for i, s in enumerate(min_jerk(n)):
                if keep():
                    arm = actions[-1][:N_ARM]
                    continue
                arm, _ = self.ik.solve(at(above + s * (grasp - above), k0 + i + 1), down, arm, iters=30)
                emit(arm, GRIPPER_OPEN)
        self._track = (len(actions), drift)  # the forecast's velocity, checked up to here
        # 3. Close, then let the grip settle.
        for s in min_jerk(dur(cfg.steps_close)):
            if keep():
                arm = actions[-1][:N_ARM]
                continue
            if drift is not None:
                arm, _ = self.ik.solve(at(grasp, len(actions) + 1), down, arm, iters=30)
            emit(arm, GRIPPER_OPEN + s * (GRIPPER_CLOSED - GRIPPER_OPEN))
        for _ in range(dur(cfg.steps_settle)):
            if not keep():
                emit(arm, GRIPPER_CLOSED)
        grasp = at(grasp, len(actions))
        lifted = np.array([grasp[0], grasp[1], carry_z])
        # 4. Lift, 5. carry over the bowl, 6. lower a little.
        arm = self.cartesian(actions, arm, grasp, lifted, down, dur(cfg.steps_lift), GRIPPER_CLOSED)
        arm = self.cartesian(actions, arm, lifted, over_bowl, down, dur(cfg.steps_carry), GRIPPER_CLOSED)
        arm = self.cartesian(actions, arm, over_bowl, release, down, dur(cfg.steps_lower), GRIPPER_CLOSED)
        # 7. Open.
        for s in min_jerk(dur(cfg.steps_open)):
            emit(arm, GRIPPER_CLOSED + s * (GRIPPER_OPEN - GRIPPER_CLOSED))
        # 7b. Where the env names its own release height (a stack), rise straight up first: the joint-space
        # move home would sweep the open jaws through the cube just let go.
        if own_release:
            up = release + np.array([0.0, 0.0, 0.05])
            arm = self.cartesian(actions, arm, release, up, down, dur(cfg.steps_open + 4), GRIPPER_OPEN)
        # 8. Back to the start pose in joint space.
        home = np.asarray(HOME_QPOS[:N_ARM])
        for s in min_jerk(dur(cfg.steps_retreat)):
            emit(arm + s * (home - arm), GRIPPER_OPEN)

        out = np.stack(actions) * _DEG  # (T, 6) degrees
        if noise > 0:
            out[:, :N_ARM] += rng.normal(0.0, 0.3 * noise, (len(out), N_ARM))
        lo, hi = env.joint_low_deg, env.joint_high_deg
        out = np.clip(out, lo, hi).astype(np.float32)
        if revising:
            out[:since] = np.asarray(before, dtype=np.float32)[:since]  # exactly what was executed
        return out

    def revision_due(self, step: int) -> bool:
        """True when the plan's forecast of a moving cube no longer holds at ``step``: the cube's velocity
        (the belt's, while it rides the belt) differs from the forecast's by more than 0.5 cm/s (the belt
        turned or stopped), while the plan still tracks the cube (up to the jaws' closing). Never for a
        cube at rest. The velocity, not the position: the descending jaws nudge the cube by up to a
        centimetre before they close on it, and chasing that nudge made grasps fail (18 of 20 seeds)."""
        track = getattr(self, "_track", None)
        if track is None or track[1] is None or step >= track[0]:
            return False
        velocity = self.env.cube_velocity()[:2]
        return bool(np.linalg.norm(velocity - track[1] * FPS) > 0.005)

    def solve_from_candidates(self, pos: np.ndarray, rot: np.ndarray, q_start: np.ndarray) -> np.ndarray:
        """IK for a pose far from ``q_start`` (arm joints, rad) from a few starting guesses: the best."""
        # A pointing-down pose far from the start pose: try a few starting guesses, keep the best.
        best_q, best_err = None, np.inf
        starts = [q_start, np.array([0.0, -0.3, 0.9, 1.3, q_start[4]]), np.array([0.0, 0.0, 0.6, 1.2, 0.0])]
        for start in starts:
            q, err = self.ik.solve(pos, rot, start)
            if err < best_err:
                best_q, best_err = q, err
            if err < 1e-4:
                break
        return best_q

    def cartesian(self, actions, arm, start, end, rot, n, gripper) -> np.ndarray:
        """Straight-line grasp-point motion start -> end in n steps; appends actions, returns final joints."""
        for s in min_jerk(n):
            arm, _ = self.ik.solve(start + s * (end - start), rot, arm, iters=30)
            actions.append(np.append(arm, gripper))
        return arm


class ExpertPolicy:
    """The scripted expert wrapped like a policy, so evaluation can run it as a baseline.

    ``reset()`` before each episode (after or before ``env.reset``: the plan is made at the first
    ``select_action`` of the episode from the env's state, and revised from the true state where a
    moving cube leaves its forecast). ``select_action(obs)`` accepts the env's
    observation dict (numpy, returns (6,) float32) or a batched dict of torch tensors (returns a (1, 6)
    tensor of the state's dtype and device), in the env's ``config.units``. After the plan ends it keeps
    returning its last action.
    """

    def __init__(
        self, env: PickPlaceEnv, config: ExpertConfig | None = None, seed: int | None = None
    ) -> None:
        # a task env with a planner of its own (so101_push) makes it; the others share the pick-and-place one
        make = getattr(env, "make_expert", None)
        self.expert = make(config) if make is not None else ScriptedExpert(env, config)
        self._seed = seed
        self._episode = 0
        self._episode_seed: int | None = None
        self._plan: np.ndarray | None = None
        self._plan_deg: np.ndarray | None = None  # the plan in degrees (what a revision continues)
        self._rng_seed: tuple[int, ...] | None = None
        self._t = 0

    def reset(self, seed: int | None = None) -> None:
        """Forget the current plan; the next ``select_action`` plans for the env's new scene.

        ``seed`` (the episode's ``env.reset`` seed) fixes the noise of the next plan to the episode: it is
        then drawn from (policy seed, episode seed), whatever episodes this instance ran before, so a
        recording is the same in any number of worker processes. Without it the noise follows the
        instance's own episode count."""
        self._plan = None
        self._t = 0
        self._episode_seed = seed

    def _noise_seed(self) -> tuple[int, ...] | None:
        if self._episode_seed is not None:
            # A stream of its own (tag 1): not the numbers the env drew for the cube from the same seed.
            return (1, 0 if self._seed is None else self._seed, self._episode_seed)
        return None if self._seed is None else (self._seed, self._episode)

    def _rng(self) -> np.random.Generator | None:
        # the same draws for a plan and its revisions (the noise is fixed per episode)
        return None if self._rng_seed is None else np.random.default_rng(self._rng_seed)

    def revision_due(self) -> bool:
        """True when the current plan no longer holds (a moving cube left its forecast path): the next
        ``select_action`` plans the rest again from the true state."""
        return self._revision_due(self._t)

    def _revision_due(self, step: int) -> bool:
        due = getattr(self.expert, "revision_due", None)  # PushExpert plans once: its cube rests
        return self._plan is not None and due is not None and due(step)

    @property
    def plan(self) -> np.ndarray | None:
        """A copy of this episode's plan (T, 6) in the env's units, revisions included; None before the
        first ``select_action``."""
        return None if self._plan is None else self._plan.copy()

    @property
    def done(self) -> bool:
        """True once every planned action has been returned."""
        return self._plan is not None and self._t >= len(self._plan)

    def _update(self, step: int) -> None:
        """Plan at the episode's first action; later, revise the plan from ``step`` on when it is due."""
        env = self.expert.env
        if self._plan is None:
            self._rng_seed = None
            if self.expert.config.noise > 0:  # a seed kept for the revisions (drawn when none is given)
                self._rng_seed = self._noise_seed() or (int(np.random.SeedSequence().entropy),)
            self._plan_deg = self.expert.plan(self._rng())
            self._episode += 1
        elif step > 0 and self._revision_due(step):
            # Closed loop for a moving cube: the belt turned, the rest of the plan follows the cube again
            self._plan_deg = self.expert.plan(self._rng(), since=step, before=self._plan_deg)
        else:
            return
        self._plan = to_units(self._plan_deg, env.config.units).astype(np.float32)  # env's units

    def planned(self, step: int, n: int) -> np.ndarray:
        """The ``n`` actions (n, 6, env units) the expert plans for steps ``step``.. from the env's state
        now, the plan revised first where that is due; past the plan's end its last action repeats.

        The expert as a chunk policy (plan at step t, execute later): how much an inference delay costs
        a task even with a perfect planner. Call it with the episode's step count, never mixed with
        ``select_action`` in one episode."""
        self._update(step)
        return self._plan[np.minimum(np.arange(step, step + n), len(self._plan) - 1)].copy()

    def select_action(self, obs: dict | None = None):
        """Next action of the plan, in the form described in the class docstring."""
        self._update(self._t)
        action = self._plan[min(self._t, len(self._plan) - 1)]
        self._t += 1
        state = None if obs is None else obs.get("observation.state")
        if state is not None and hasattr(state, "detach"):
            import torch

            return torch.as_tensor(action, dtype=state.dtype, device=state.device).reshape(1, -1)
        return action.copy()
