"""Gymnasium environment: an SO-101 arm picks a cube and places it in a bowl.

Observations follow LeRobot's keys: ``observation.state`` is the six joint positions in LeRobot's SO-101
order, in **degrees** (the gripper too: its joint angle, larger = more open), and
``observation.images.<camera>`` are HWC uint8 frames. Actions are six target joint positions in the same
units and order, applied by the position servos for one 30 Hz control step (7 physics substeps).

``info`` carries the phase signals an evaluation needs for a failure taxonomy (see :class:`PickPlaceEnv`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import gymnasium as gym
import numpy as np

from actlab.errors import ActlabError
from actlab.sim.gl import make_renderer, mujoco_module
from actlab.sim.scene import (
    GRIPPER_OPEN,
    JOINT_NAMES,
    JOINT_RANGES,
    SceneConfig,
    build_model,
)
from actlab.sim.units import check_units, from_units, to_units

FPS = 30  # control rate (Hz)
SUBSTEPS = 7  # physics steps of 1/210 s per control step
CAMERAS = ("top", "wrist")
TASK_TEXT = "pick the cube and place it in the bowl"

# Start pose (rad): the gripper hovers behind the cube area, jaws open, and the wrist camera looks down at
# the whole area the cube can be placed in (so a policy sees the cube from the first frame).
HOME_QPOS = (0.0, -1.00, 0.70, 1.58, -math.pi / 2, GRIPPER_OPEN)

_DEG = 180.0 / math.pi


@dataclasses.dataclass(frozen=True)
class PickPlaceConfig:
    """Episode settings of the SO-101 pick-and-place task.

    The defaults: cube centre uniform over x 0.20 ± 0.04 m, y 0 ± 0.08 m, not rotated; bowl fixed; 30 Hz.
    """

    # Side of the square camera images in observations (pixels).
    image_size: int = 96
    # Cameras rendered into observations, any of "top" (overhead) and "wrist"; () renders nothing (fast).
    cameras: tuple[str, ...] = CAMERAS
    # Episode length limit in control steps (30 Hz); the scripted expert needs about 170.
    max_steps: int = 300
    # End the episode (terminated=True) as soon as the cube rests in the bowl.
    terminate_on_success: bool = True
    # Range of the cube centre's x (m, away from the arm), sampled uniformly per episode.
    cube_x_range: tuple[float, float] = (0.16, 0.24)
    # Range of the cube centre's y (m, sideways), sampled uniformly per episode.
    cube_y_range: tuple[float, float] = (-0.08, 0.08)
    # Cube rotation about the vertical, sampled uniformly in [-cube_yaw_range, cube_yaw_range] (rad).
    cube_yaw_range: float = 0.0
    # Bowl moved by up to this much (m) along x and y from the scene's nominal place; 0 keeps it fixed.
    bowl_jitter: float = 0.0
    # Random cube, bowl and table colours per episode (the cube stays a saturated colour).
    randomize_colors: bool = False
    # Random light direction and brightness per episode.
    randomize_lighting: bool = False
    # Random offset of the overhead camera per episode, up to this much (m) along each axis.
    camera_jitter: float = 0.0
    # Cube bottom higher than this above the table (m), while grasped, counts as "lifted".
    lift_threshold: float = 0.02
    # Cube centre within this horizontal distance (m) of the bowl centre ...
    goal_radius: float = 0.045
    # ... and its centre lower than this (m) counts as "in_goal" (defaults: within 4.5 cm and below 4 cm).
    goal_max_height: float = 0.04
    # Size of frames returned by render() (pixels); None uses image_size.
    render_size: int | None = None
    # Camera used by render() when none is named.
    render_camera: str = "top"
    # Scene geometry and look.
    scene: SceneConfig = dataclasses.field(default_factory=SceneConfig)
    # Units of observation.state and the action: "degrees" (the sim's own: the gripper's joint angle too)
    # or "so101_follower" (LeRobot's real follower: the gripper 0-100 over its range; actlab.sim.units).
    units: str = "degrees"

    def __post_init__(self) -> None:
        check_units(self.units)
        if not 16 <= self.image_size <= self.scene.max_render_size:
            raise ActlabError(
                "image_size out of range",
                field="image_size",
                expected=f"16 to {self.scene.max_render_size} pixels",
                found=self.image_size,
            )
        for cam in (*self.cameras, self.render_camera):
            if cam not in CAMERAS:
                raise ActlabError(
                    f"unknown camera {cam!r}", field="cameras", expected=f"any of {CAMERAS}", found=cam
                )
        if len(set(self.cameras)) != len(self.cameras):
            raise ActlabError("a camera is listed twice", field="cameras", found=self.cameras)
        if self.max_steps < 1:
            raise ActlabError("max_steps must be at least 1", field="max_steps", found=self.max_steps)
        for name in ("cube_x_range", "cube_y_range"):
            lo, hi = getattr(self, name)
            if lo > hi:
                raise ActlabError(f"{name} must be (low, high)", field=name, found=(lo, hi))
        if self.cube_x_range[0] < 0.1 or self.cube_x_range[1] > 0.3:
            raise ActlabError(
                "cube_x_range leaves the arm's reach",
                field="cube_x_range",
                expected="within 0.1-0.3 m",
                found=self.cube_x_range,
            )
        if abs(self.cube_y_range[0]) > 0.15 or abs(self.cube_y_range[1]) > 0.15:
            raise ActlabError(
                "cube_y_range leaves the arm's reach",
                field="cube_y_range",
                expected="within -0.15-0.15 m",
                found=self.cube_y_range,
            )
        for name, hi in (("cube_yaw_range", math.pi), ("bowl_jitter", 0.05), ("camera_jitter", 0.05)):
            value = getattr(self, name)
            if not 0.0 <= value <= hi:
                raise ActlabError(f"{name} out of range", field=name, expected=f"0 to {hi}", found=value)
        if self.render_size is not None and not 16 <= self.render_size <= self.scene.max_render_size:
            raise ActlabError(
                "render_size out of range",
                field="render_size",
                expected=f"16 to {self.scene.max_render_size} pixels",
                found=self.render_size,
            )
        for name in ("lift_threshold", "goal_radius", "goal_max_height"):
            if getattr(self, name) <= 0:
                raise ActlabError(f"{name} must be positive", field=name, found=getattr(self, name))


@dataclasses.dataclass(frozen=True)
class SimState:
    """Everything that determines how an episode continues: physics, randomized scene and bookkeeping."""

    physics: np.ndarray  # mj_getState(..., mjSTATE_INTEGRATION): time, qpos, qvel, act, ctrl, warmstart, ...
    bowl_pos: np.ndarray  # (3,) bowl body position (m)
    mat_rgba: np.ndarray  # (n_materials, 4) material colours
    light: np.ndarray  # (2, 3) key light direction and diffuse colour
    top_camera_pos: np.ndarray  # (3,) overhead camera position (m)
    top_camera_quat: np.ndarray  # (4,) overhead camera orientation
    steps: int  # control steps taken in this episode
    latches: tuple[bool, bool, float]  # (ever_grasped, ever_lifted, max_cube_height)
    task: tuple = ()  # a task env's own state beyond the physics (its latches, model changes)


def _to_radians(action_deg: np.ndarray) -> np.ndarray:
    return np.asarray(action_deg, dtype=np.float64) / _DEG


class PickPlaceEnv(gym.Env):
    """SO-101 pick-and-place with the gymnasium API (``reset(seed=)``, ``step``, ``render``, ``close``).

    ``info`` after every ``reset``/``step``:

    - ``grasped`` (bool): both jaw pads touch the cube now.
    - ``lifted`` (bool): grasped and the cube's bottom is above ``lift_threshold``.
    - ``released`` (bool): the cube was grasped earlier in this episode and is not grasped now.
    - ``in_goal`` (bool): cube centre within ``goal_radius`` of the bowl centre and below
      ``goal_max_height``.
    - ``is_success`` (bool): in_goal and not grasped (the cube was let go inside the bowl).
    - ``cube_height`` (float, m): height of the cube's bottom above the table.
    - ``max_cube_height`` (float, m), ``ever_grasped``, ``ever_lifted`` (bool): latched over the episode.
    - ``cube_pos``, ``bowl_pos``, ``grasp_pos`` ((3,) float, m, world frame), ``steps`` (int).

    Extra API used by evaluation and the expert: :meth:`get_state` / :meth:`set_state` (full state, to
    forward-simulate an action chunk and come back), :meth:`forecast_grasp_positions`,
    :meth:`grasp_position`, :meth:`project` (world points -> pixels of a camera image), :meth:`cube_pose`.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": FPS}

    def __init__(self, config: PickPlaceConfig | None = None, render_mode: str | None = "rgb_array") -> None:
        self._mj = mujoco_module()  # MUJOCO_GL=egl unless set; a backend that cannot load is an ActlabError
        self.config = config or PickPlaceConfig()
        if render_mode not in (None, "rgb_array"):
            raise ActlabError(
                "unsupported render_mode",
                field="render_mode",
                expected="'rgb_array' or None",
                found=render_mode,
            )
        self.render_mode = render_mode
        self.model = self._build_model()
        self.data = self._mj.MjData(self.model)
        self._ids()
        self._defaults = {
            "bowl_pos": self._bowl_body_pos(),
            "mat_rgba": self.model.mat_rgba.copy(),
            "light_dir": self.model.light_dir[self._light].copy(),
            "light_diffuse": self.model.light_diffuse[self._light].copy(),
            "cam_pos": self.model.cam_pos[self._top_cam].copy(),
            "cam_quat": self.model.cam_quat[self._top_cam].copy(),
            "headlight": (self.model.vis.headlight.ambient.copy(), self.model.vis.headlight.diffuse.copy()),
        }
        self._renderers: dict[tuple[int, int], Any] = {}
        self._rng = np.random.default_rng()
        self._steps = 0
        self._ever_grasped = False
        self._ever_lifted = False
        self._max_height = 0.0

        lo = np.array([r[0] for r in JOINT_RANGES], dtype=np.float32) * _DEG
        hi = np.array([r[1] for r in JOINT_RANGES], dtype=np.float32) * _DEG
        self.joint_low_deg, self.joint_high_deg = lo, hi
        units = self.config.units
        lo, hi = to_units(lo, units).astype(np.float32), to_units(hi, units).astype(np.float32)
        size = self.config.image_size
        # Joint limits are soft in MuJoCo: the state may pass them by a fraction of a degree.
        margin = np.float32(5.0)
        spaces = {"observation.state": gym.spaces.Box(lo - margin, hi + margin, dtype=np.float32)}
        for cam in self.config.cameras:
            spaces[f"observation.images.{cam}"] = gym.spaces.Box(0, 255, (size, size, 3), dtype=np.uint8)
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Box(lo, hi, dtype=np.float32)
        self._np_random = self._rng

    @property
    def max_steps(self) -> int:
        """Episode step limit (control steps)."""
        return self.config.max_steps

    @property
    def fps(self) -> int:
        """Control rate (Hz)."""
        return FPS

    @property
    def task(self) -> str:
        """The language instruction of this task (the dataset's task string)."""
        return self.task_text

    # The language instruction; a task env of actlab.sim.tasks sets its own.
    task_text: str = TASK_TEXT

    # ------------------------------------------------------------------------------------------ set-up

    def _bowl_body_pos(self) -> np.ndarray:
        """The bowl body's position in the model (3,) m; zeros in a scene without a bowl."""
        return self.model.body_pos[self._bowl_body].copy() if self._bowl_body >= 0 else np.zeros(3)

    def _build_model(self):
        """The MuJoCo model of this task's scene (a task env adds its objects here)."""
        return build_model(self.config.scene)

    def _ids(self) -> None:
        mj = self._mj
        m = self.model

        def gid(name: str) -> int:
            return mj.mj_name2id(m, mj.mjtObj.mjOBJ_GEOM, name)

        self._cube_geom = gid("cube")
        self._fixed_pad = gid("fixed_jaw")
        self._moving_pad = gid("moving_jaw")
        self._cube_body = mj.mj_name2id(m, mj.mjtObj.mjOBJ_BODY, "cube")
        self._bowl_body = mj.mj_name2id(m, mj.mjtObj.mjOBJ_BODY, "bowl")
        self._grasp_site = mj.mj_name2id(m, mj.mjtObj.mjOBJ_SITE, "grasp")
        self._top_cam = mj.mj_name2id(m, mj.mjtObj.mjOBJ_CAMERA, "top")
        self._light = mj.mj_name2id(m, mj.mjtObj.mjOBJ_LIGHT, "key")
        self._cube_qpos = m.jnt_qposadr[mj.mj_name2id(m, mj.mjtObj.mjOBJ_JOINT, "cube")]
        self._cube_dof = m.jnt_dofadr[mj.mj_name2id(m, mj.mjtObj.mjOBJ_JOINT, "cube")]
        self._mat = {n: mj.mj_name2id(m, mj.mjtObj.mjOBJ_MATERIAL, n) for n in ("cube", "bowl", "table")}

    # --------------------------------------------------------------------------------------- gym API

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Start an episode. The same ``seed`` always gives the same scene and observation.

        ``options`` may hold ``cube_xy`` ((x, y) m) and ``cube_yaw`` (rad) to place the cube by hand.
        """
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            self._np_random = self._rng
        options = options or {}
        mj = self._mj
        mj.mj_resetData(self.model, self.data)
        self._randomize_scene(options)
        self.data.qpos[:6] = HOME_QPOS
        self.data.ctrl[:6] = HOME_QPOS
        mj.mj_forward(self.model, self.data)
        self._steps = 0
        self._ever_grasped = self._ever_lifted = False
        self._max_height = 0.0
        return self._observation(), self._info()

    def step(self, action) -> tuple[dict, float, bool, bool, dict]:
        """Apply six target joint positions (LeRobot order, in ``config.units``) for one 30 Hz step."""
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        if action.shape != (6,):
            raise ActlabError(
                "an action must be six target joint positions",
                field="action",
                expected=f"shape (6,) in the order {JOINT_NAMES}, degrees",
                found=f"shape {tuple(np.shape(action))}",
            )
        if not np.all(np.isfinite(action)):
            # Said as seen: the sim cannot know why (it blamed "normalization stats with zero std" for
            # NaN actions that came from elsewhere); it names the joints and where the value came from.
            bad = [JOINT_NAMES[i] for i in np.flatnonzero(~np.isfinite(action))]
            raise ActlabError(
                f"the action contains NaN or infinity (joints {', '.join(bad)})",
                field="action",
                expected="finite joint targets in degrees",
                found=action.tolist(),
                fix="the value came from what produced the action (the policy, or the code calling step), "
                "not from the simulation: check that producer's output for these joints",
            )
        self._apply(from_units(action, self.config.units))
        info = self._info()
        self._steps += 1
        info["steps"] = self._steps
        success = bool(info["is_success"])
        terminated = success and self.config.terminate_on_success
        truncated = self._steps >= self.config.max_steps and not terminated
        return self._observation(), float(success), terminated, truncated, info

    def render(self, camera: str | None = None, size: int | None = None) -> np.ndarray:
        """One HWC uint8 frame from ``camera`` (default ``config.render_camera``) at ``size`` pixels."""
        camera = camera or self.config.render_camera
        if camera not in CAMERAS:
            raise ActlabError(f"unknown camera {camera!r}", field="camera", expected=CAMERAS, found=camera)
        size = size or self.config.render_size or self.config.image_size
        return self._render(camera, size, size)

    def close(self) -> None:
        """Free the renderers' OpenGL resources."""
        for r in self._renderers.values():
            r.close()
        self._renderers.clear()

    # -------------------------------------------------------------------------------- extra public API

    def get_state(self) -> SimState:
        """A snapshot of the full simulation state; ``set_state`` brings the episode back to it exactly."""
        mj = self._mj
        spec = mj.mjtState.mjSTATE_INTEGRATION
        physics = np.empty(mj.mj_stateSize(self.model, spec))
        mj.mj_getState(self.model, self.data, physics, spec)
        return SimState(
            physics=physics,
            bowl_pos=self._bowl_body_pos(),
            mat_rgba=self.model.mat_rgba.copy(),
            light=np.stack([self.model.light_dir[self._light], self.model.light_diffuse[self._light]]).copy(),
            top_camera_pos=self.model.cam_pos[self._top_cam].copy(),
            top_camera_quat=self.model.cam_quat[self._top_cam].copy(),
            steps=self._steps,
            latches=(self._ever_grasped, self._ever_lifted, self._max_height),
            task=self._task_state(),
        )

    def set_state(self, state: SimState) -> None:
        """Restore a snapshot from :meth:`get_state` (of this env or of another with the same config)."""
        mj = self._mj
        if self._bowl_body >= 0:
            self.model.body_pos[self._bowl_body] = state.bowl_pos
        self.model.mat_rgba[:] = state.mat_rgba
        self.model.light_dir[self._light] = state.light[0]
        self.model.light_diffuse[self._light] = state.light[1]
        self.model.cam_pos[self._top_cam] = state.top_camera_pos
        self.model.cam_quat[self._top_cam] = state.top_camera_quat
        mj.mj_setState(self.model, self.data, state.physics, mj.mjtState.mjSTATE_INTEGRATION)
        mj.mj_forward(self.model, self.data)
        self._steps = state.steps
        self._ever_grasped, self._ever_lifted, self._max_height = state.latches
        self._set_task_state(state.task)

    # Hooks of a task env (actlab.sim.tasks); the pick-and-place env has nothing of its own.
    def _task_state(self) -> tuple:
        """The task's own state beyond the physics (latches, model changes), for get_state."""
        return ()

    def _set_task_state(self, state: tuple) -> None:
        """Restore what :meth:`_task_state` returned."""

    def _randomize_task(self, rng: np.random.Generator, options: dict) -> None:
        """Place the task's own objects; called at reset after the cube, with the episode's generator."""

    def _task_info(self, info: dict[str, Any]) -> dict[str, Any]:
        """The task's success and failure signals on top of the pick-and-place ones (``info`` is those)."""
        return info

    def place_target(self) -> tuple[np.ndarray, float | None]:
        """Where the expert lets the cube go: the (x, y) m of the goal's centre and the grasp point's
        height (m above the table) to open at; None: the expert's own release height (the bowl)."""
        return self.bowl_position()[:2], None

    def cube_velocity(self) -> np.ndarray:
        """Linear velocity (3,) m/s of the cube (privileged: the expert forecasts a moving cube with it)."""
        return self.data.qvel[self._cube_dof : self._cube_dof + 3].copy()

    def forecast_grasp_positions(self, actions) -> np.ndarray:
        """Simulate ``actions`` ((H, 6) in config.units) from the current state without rendering; return the
        grasp point after each step, (H, 3) m; the episode is left exactly as it was (for "whiskers")."""
        actions = from_units(np.asarray(actions, dtype=np.float64).reshape(-1, 6), self.config.units)
        saved = self.get_state()
        out = np.empty((len(actions), 3))
        try:
            for i, a in enumerate(actions):
                self._apply(a)
                out[i] = self.data.site_xpos[self._grasp_site]
        finally:
            self.set_state(saved)
        return out

    def adjust_look(
        self,
        *,
        camera_offset=None,
        light_scale: float | None = None,
        rgb: dict[str, Any] | None = None,
    ) -> None:
        """Change how this episode looks, until the next reset: move the overhead camera by
        ``camera_offset`` ((3,) m, orientation kept), scale the key light and the headlight by
        ``light_scale``, set material colours ``rgb`` ({"cube" | "bowl" | "table": (3,) in [0, 1]}).
        Call :meth:`observe` for an observation of the new look."""
        m = self.model
        if camera_offset is not None:
            m.cam_pos[self._top_cam] += np.asarray(camera_offset, dtype=float)
        if light_scale is not None:
            m.light_diffuse[self._light] *= light_scale
            m.vis.headlight.ambient[:] *= light_scale
            m.vis.headlight.diffuse[:] *= light_scale
        for name, value in (rgb or {}).items():
            if name not in self._mat:
                raise ActlabError(
                    f"unknown material {name!r}", field="rgb", expected=sorted(self._mat), found=name
                )
            m.mat_rgba[self._mat[name], :3] = np.clip(np.asarray(value, dtype=float), 0.0, 1.0)
        self._mj.mj_forward(m, self.data)  # the camera's world pose follows its model position

    def material_rgb(self, name: str) -> np.ndarray:
        """The RGB (3,) of material ``name`` ("cube", "bowl", "table") in this episode."""
        return self.model.mat_rgba[self._mat[name], :3].copy()

    def observe(self) -> dict[str, np.ndarray]:
        """The observation of the current state, rendered now (after a change to the scene's look)."""
        return self._observation()

    def grasp_position(self) -> np.ndarray:
        """World position (3,) m of the grasp point between the jaw pads."""
        return self.data.site_xpos[self._grasp_site].copy()

    def cube_pose(self) -> tuple[np.ndarray, float]:
        """Cube centre (3,) m and rotation about the vertical (rad). Privileged: for the scripted expert."""
        q = self.data.qpos[self._cube_qpos + 3 : self._cube_qpos + 7]
        yaw = math.atan2(2 * (q[0] * q[3] + q[1] * q[2]), 1 - 2 * (q[2] ** 2 + q[3] ** 2))
        return self.data.qpos[self._cube_qpos : self._cube_qpos + 3].copy(), yaw

    def bowl_position(self) -> np.ndarray:
        """Bowl centre on the table (3,) m; the goal's centre in a task without a bowl."""
        if self._bowl_body < 0:
            return self.goal_position()
        return self.data.xpos[self._bowl_body].copy()

    def goal_position(self) -> np.ndarray:
        """Centre (3,) m of the place the cube must end in (the bowl's; a task env names its own)."""
        return self.data.xpos[self._bowl_body].copy()

    def joint_positions(self) -> np.ndarray:
        """Current joint positions (6,) in ``config.units``, LeRobot order (the same as observation.state)."""
        return to_units(self.data.qpos[:6] * _DEG, self.config.units).astype(np.float32)

    def project(self, points, camera: str = "top", size: int | None = None) -> np.ndarray:
        """Pixel coordinates (N, 2) as (column, row) of world points (N, 3) in ``camera``'s square image of
        ``size`` pixels (default: the observation size). Points behind the camera give NaN."""
        mj = self._mj
        size = size or self.config.image_size
        pts = np.asarray(points, dtype=np.float64).reshape(-1, 3)
        cam = mj.mj_name2id(self.model, mj.mjtObj.mjOBJ_CAMERA, camera)
        if cam < 0:
            raise ActlabError(f"unknown camera {camera!r}", field="camera", expected=CAMERAS, found=camera)
        pos = self.data.cam_xpos[cam]
        rot = self.data.cam_xmat[cam].reshape(3, 3)  # columns: camera x (right), y (up), z (backwards)
        local = (pts - pos) @ rot  # (N, 3) in camera coordinates
        depth = -local[:, 2]
        focal = 0.5 * size / math.tan(math.radians(self.model.cam_fovy[cam]) / 2)
        with np.errstate(divide="ignore", invalid="ignore"):
            u = 0.5 * size + focal * local[:, 0] / depth
            v = 0.5 * size - focal * local[:, 1] / depth
        out = np.stack([u, v], axis=1)
        out[depth <= 0] = np.nan
        return out

    # ------------------------------------------------------------------------------------- internals

    def _apply(self, action_deg: np.ndarray) -> None:
        lo, hi = self.model.actuator_ctrlrange[:, 0], self.model.actuator_ctrlrange[:, 1]
        self.data.ctrl[:6] = np.clip(_to_radians(action_deg), lo, hi)
        self._mj.mj_step(self.model, self.data, nstep=SUBSTEPS)

    def _randomize_scene(self, options: dict) -> None:
        cfg, rng, m, d = self.config, self._rng, self.model, self.data
        dflt = self._defaults
        # Draw every random number in a fixed order whatever the options, so a seed means the same scene.
        u = rng.random(16)
        bowl = dflt["bowl_pos"].copy()
        bowl[:2] += (u[0:2] * 2 - 1) * cfg.bowl_jitter
        if self._bowl_body >= 0:
            m.body_pos[self._bowl_body] = bowl
        if "cube_xy" in options:
            cube_xy = np.asarray(options["cube_xy"], dtype=float)
        else:
            cube_xy = self._sample_cube_xy(bowl, rng)
        yaw = float(options.get("cube_yaw", (u[2] * 2 - 1) * cfg.cube_yaw_range))
        half = cfg.scene.cube_size / 2
        d.qpos[self._cube_qpos : self._cube_qpos + 3] = [cube_xy[0], cube_xy[1], half]
        d.qpos[self._cube_qpos + 3 : self._cube_qpos + 7] = [math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)]

        m.mat_rgba[:] = dflt["mat_rgba"]
        if cfg.randomize_colors:
            m.mat_rgba[self._mat["cube"], :3] = _saturated_colour(u[3], u[4])
            m.mat_rgba[self._mat["bowl"], :3] = _saturated_colour(u[5], 0.3 + 0.4 * u[6]) * 0.9
            m.mat_rgba[self._mat["table"], :3] = 0.55 + 0.35 * u[7] + (u[8:11] - 0.5) * 0.08
        m.light_dir[self._light] = dflt["light_dir"]
        m.light_diffuse[self._light] = dflt["light_diffuse"]
        m.vis.headlight.ambient[:], m.vis.headlight.diffuse[:] = dflt["headlight"]
        if cfg.randomize_lighting:
            direction = dflt["light_dir"] + np.array([u[11] - 0.5, u[12] - 0.5, 0.0]) * 0.8
            m.light_dir[self._light] = direction / np.linalg.norm(direction)
            m.light_diffuse[self._light] = dflt["light_diffuse"] * (0.6 + 0.8 * u[13])
        m.cam_pos[self._top_cam] = dflt["cam_pos"]
        m.cam_quat[self._top_cam] = dflt["cam_quat"]
        if cfg.camera_jitter > 0:
            m.cam_pos[self._top_cam] = dflt["cam_pos"] + (rng.random(3) * 2 - 1) * cfg.camera_jitter
        self._randomize_task(rng, options)

    def _sample_cube_xy(self, bowl: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        cfg = self.config
        # Keep the cube off the bowl when the bowl moves: rejection sampling with a clearance.
        clearance = cfg.scene.bowl_radius + 0.006 + cfg.scene.cube_size * 0.75 + 0.005
        for _ in range(100):
            xy = np.array([rng.uniform(*cfg.cube_x_range), rng.uniform(*cfg.cube_y_range)])
            if np.linalg.norm(xy - bowl[:2]) > clearance:
                return xy
        raise ActlabError(
            "cannot place the cube away from the bowl",
            field="cube_x_range/cube_y_range/bowl_jitter",
            expected="a cube area that does not lie under the bowl",
            found=(cfg.cube_x_range, cfg.cube_y_range, tuple(bowl[:2])),
        )

    def _contacts(self) -> tuple[bool, bool]:
        d = self.data
        n = d.ncon
        if n == 0:
            return False, False
        pairs = d.contact.geom[:n]  # (n, 2)
        with_cube = (pairs == self._cube_geom).any(axis=1)
        others = pairs[with_cube].ravel()
        return bool((others == self._fixed_pad).any()), bool((others == self._moving_pad).any())

    def _info(self) -> dict[str, Any]:
        cfg = self.config
        cube_pos, _ = self.cube_pose()
        bowl = self.bowl_position()
        fixed, moving = self._contacts()
        grasped = fixed and moving
        height = float(cube_pos[2] - cfg.scene.cube_size / 2)
        lifted = grasped and height > cfg.lift_threshold
        self._ever_grasped |= grasped
        self._ever_lifted |= lifted
        self._max_height = max(self._max_height, height)
        in_goal = bool(
            np.linalg.norm(cube_pos[:2] - bowl[:2]) < cfg.goal_radius and cube_pos[2] < cfg.goal_max_height
        )
        info = {
            "grasped": grasped,
            "lifted": lifted,
            "released": self._ever_grasped and not grasped,
            "in_goal": in_goal,
            "is_success": in_goal and not grasped,
            "cube_height": height,
            "max_cube_height": self._max_height,
            "ever_grasped": self._ever_grasped,
            "ever_lifted": self._ever_lifted,
            "cube_pos": cube_pos,
            "bowl_pos": bowl,
            "grasp_pos": self.grasp_position(),
            "steps": self._steps,
        }
        return self._task_info(info)

    def _observation(self) -> dict[str, np.ndarray]:
        obs = {"observation.state": self.joint_positions()}
        size = self.config.image_size
        for cam in self.config.cameras:
            obs[f"observation.images.{cam}"] = self._render(cam, size, size)
        return obs

    def _render(self, camera: str, height: int, width: int) -> np.ndarray:
        renderer = self._renderers.get((height, width))
        if renderer is None:
            renderer = make_renderer(self.model, height, width)
            if self.config.scene.fast_render:
                # Speed: no shadows (they dominate CPU render time), reflections or skybox; no MSAA in model.
                flags = renderer.scene.flags
                flags[self._mj.mjtRndFlag.mjRND_SHADOW] = 0
                flags[self._mj.mjtRndFlag.mjRND_REFLECTION] = 0
                flags[self._mj.mjtRndFlag.mjRND_SKYBOX] = 0
            self._renderers[(height, width)] = renderer
        renderer.update_scene(self.data, camera=camera)
        return renderer.render()


def _saturated_colour(hue: float, value_jitter: float) -> np.ndarray:
    """A strongly saturated RGB colour of the given hue in [0, 1)."""
    import colorsys

    return np.array(colorsys.hsv_to_rgb(hue, 0.85, 0.75 + 0.2 * value_jitter))
