"""The SO-101 pick-and-place scene, written as MJCF from the arm's kinematic facts.

Everything is primitive geometry (boxes, capsules, cylinders) so that software rendering on a CPU stays in
the hundreds of frames per second (measured on 2 CPU cores at 224x224: 7-40 frames/s with detailed meshes
and shadows, 380-560 with few triangles and no shadows or multisampling; image size matters little). The
kinematic chain (body offsets, joint axes and ranges) and the servo model (STS3215 position servos) follow
the SO-101's published description; the link shapes, the jaws and the cameras are designed here.

World frame: the arm's base sits at the origin on the table top (z = 0), +x points away from the arm
across the workspace, +z is up. Lengths are metres, angles radians (inside the simulator).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from actlab.errors import ActlabError
from actlab.sim.gl import mujoco_module

# LeRobot's SO-101 joint order; actuators and qpos[:6] use exactly this order.
JOINT_NAMES: tuple[str, ...] = (
    "shoulder_pan",
    "shoulder_lift",
    "elbow_flex",
    "wrist_flex",
    "wrist_roll",
    "gripper",
)

# Joint ranges (rad) of the SO-101, in JOINT_NAMES order.
JOINT_RANGES: tuple[tuple[float, float], ...] = (
    (-1.91986, 1.91986),
    (-1.7453293, 1.7453293),
    (-1.69, 1.69),
    (-1.658063, 1.658063),
    (-2.7438473, 2.7438473),
    (-0.174533, 1.7453292),
)

# STS3215 servo model (position actuator gains, torque limit N m) and joint dynamics.
SERVO_KP = 998.22
SERVO_KV = 2.731
SERVO_FORCE = 2.94
JOINT_DAMPING = 0.60
JOINT_FRICTIONLOSS = 0.052
JOINT_ARMATURE = 0.028

# Gripper joint angles (rad). The moving jaw's pad is shaped so that it is parallel to the fixed pad at
# GRIPPER_PARALLEL, which is the angle at which the jaws hold a cube of the default size.
GRIPPER_PARALLEL = 0.30
GRIPPER_OPEN = 0.80  # jaws about 5 cm apart at the tips: room for the cube plus margin
GRIPPER_CLOSED = -0.05  # commanded while holding: below contact, so the servo squeezes at its torque limit

# Collision groups (contype / conaffinity bits). Arm links touch only the cube and the bowl (never the table,
# which the base stands on); fingers touch the cube, the bowl and the table; the cube touches everything.
_BIT_OBJECT, _BIT_ARM, _BIT_FINGER = 1, 2, 4


@dataclasses.dataclass(frozen=True)
class SceneConfig:
    """Geometry and look of the pick-and-place scene (fixed at model build time)."""

    # Cube edge length (m). The jaws are shaped for this size; 0.02-0.03 m grasp reliably.
    cube_size: float = 0.025
    # Cube mass (kg).
    cube_mass: float = 0.02
    # Nominal bowl centre (x, y) on the table (m); env randomization may move it per episode.
    bowl_xy: tuple[float, float] = (0.16, 0.175)
    # Inner radius of the bowl wall (m).
    bowl_radius: float = 0.055
    # Height of the bowl wall above the table (m).
    bowl_height: float = 0.035
    # Cube colour (RGBA in [0, 1]); a strong red that stands out from the table in small images.
    cube_rgba: tuple[float, float, float, float] = (0.90, 0.08, 0.06, 1.0)
    # Bowl colour (RGBA).
    bowl_rgba: tuple[float, float, float, float] = (0.10, 0.35, 0.85, 1.0)
    # Table colour (RGBA); light and unsaturated so the cube and bowl contrast with it.
    table_rgba: tuple[float, float, float, float] = (0.78, 0.76, 0.72, 1.0)
    # Arm link colour (RGBA).
    arm_rgba: tuple[float, float, float, float] = (1.0, 0.72, 0.10, 1.0)
    # Overhead camera position (m). It sits above the far side of the workspace and looks back at it at a
    # slight angle, so the gripper hovering over the cube does not hide the cube from it.
    top_camera_pos: tuple[float, float, float] = (0.36, 0.072, 0.56)
    # Point the overhead camera looks at (m); the image's up direction is +x (away from the arm).
    top_camera_target: tuple[float, float, float] = (0.18, 0.072, 0.0)
    # Vertical field of view of the overhead camera (degrees); frames the cube area and the bowl.
    top_camera_fovy: float = 34.0
    # Vertical field of view of the wrist camera (degrees); wide, like the small USB cameras people mount.
    wrist_camera_fovy: float = 80.0
    # Largest image side any renderer of this model may use (pixels); sets the offscreen buffer.
    max_render_size: int = 1024
    # Render for speed: no shadows, no multisampling, coarse curved surfaces. False gives MuJoCo's usual
    # look (shadows, 4x multisampling, finer tessellation); `actlab sim bench` compares the two.
    fast_render: bool = True

    def __post_init__(self) -> None:
        if not 0.015 <= self.cube_size <= 0.035:
            raise ActlabError(
                "cube_size is outside what the jaws can hold",
                field="cube_size",
                expected="0.015 to 0.035 m",
                found=self.cube_size,
            )
        if self.cube_mass <= 0:
            raise ActlabError("cube_mass must be positive", field="cube_mass", found=self.cube_mass)
        if not 0.03 <= self.bowl_radius <= 0.1:
            raise ActlabError(
                "bowl_radius out of range", field="bowl_radius", expected="0.03-0.1 m", found=self.bowl_radius
            )
        if not 0.01 <= self.bowl_height <= 0.08:
            raise ActlabError(
                "bowl_height out of range",
                field="bowl_height",
                expected="0.01-0.08 m",
                found=self.bowl_height,
            )
        for name in ("cube_rgba", "bowl_rgba", "table_rgba", "arm_rgba"):
            rgba = getattr(self, name)
            if len(rgba) != 4 or not all(0.0 <= c <= 1.0 for c in rgba):
                raise ActlabError(f"{name} must be four numbers in [0, 1]", field=name, found=rgba)
        if self.top_camera_pos[2] - self.top_camera_target[2] < 0.1:
            raise ActlabError(
                "the overhead camera must be above the point it looks at",
                field="top_camera_pos",
                expected="at least 0.1 m above top_camera_target",
                found=self.top_camera_pos,
            )
        for name in ("top_camera_fovy", "wrist_camera_fovy"):
            if not 10.0 <= getattr(self, name) <= 120.0:
                raise ActlabError(
                    f"{name} out of range", field=name, expected="10-120 degrees", found=getattr(self, name)
                )
        if not 64 <= self.max_render_size <= 4096:
            raise ActlabError(
                "max_render_size out of range",
                field="max_render_size",
                expected="64-4096 pixels",
                found=self.max_render_size,
            )


# ----------------------------------------------------------------------------------------------- helpers


def _f(values) -> str:
    """Format numbers for MJCF attributes."""
    return " ".join(f"{float(v):.10g}" for v in np.atleast_1d(values))


def _quat_from_mat(mat: np.ndarray) -> np.ndarray:
    """Rotation matrix (3, 3) -> unit quaternion (w, x, y, z)."""
    m = mat
    tr = m[0, 0] + m[1, 1] + m[2, 2]
    if tr > 0:
        s = math.sqrt(tr + 1.0) * 2
        q = [0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s]
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = math.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2]) * 2
        q = [(m[2, 1] - m[1, 2]) / s, 0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s]
    elif m[1, 1] > m[2, 2]:
        s = math.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2]) * 2
        q = [(m[0, 2] - m[2, 0]) / s, (m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s]
    else:
        s = math.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1]) * 2
        q = [(m[1, 0] - m[0, 1]) / s, (m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s]
    q = np.asarray(q)
    return q / np.linalg.norm(q)


def _mat_from_quat(q) -> np.ndarray:
    w, x, y, z = np.asarray(q, dtype=float) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def look_at_xyaxes(pos, target, up=(1.0, 0.0, 0.0)) -> np.ndarray:
    """Camera x and y axes (6,) for a camera at ``pos`` looking at ``target`` with image-up near ``up``."""
    fwd = np.asarray(target, float) - np.asarray(pos, float)
    fwd /= np.linalg.norm(fwd)
    y = np.asarray(up, float) - np.dot(up, fwd) * fwd  # image up: ``up`` made perpendicular to the view
    y /= np.linalg.norm(y)
    x = np.cross(fwd, y)  # MuJoCo cameras look along -z, so x = y x z with z = -fwd
    return np.concatenate([x, y])


def _rot_z(angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


# Moving-jaw body frame relative to the gripper (wrist-roll) body, from the SO-101 chain.
_JAW_POS = np.array([0.0202, 0.0188, -0.0234])
_JAW_QUAT = np.array([1.0, 1.0, 0.0, 0.0]) / math.sqrt(2.0)

# Jaw layout in the gripper frame (the gripper's -z runs from the wrist towards the fingertips, +x is the
# closing direction from the fixed towards the moving jaw). The fixed pad's inner face is at x = -0.010.
_FIXED_FACE_X = -0.010
_PAD_HALF_THICK = 0.004
_PAD_HALF_WIDTH = 0.012  # along the gripper's y
_FINGER_TOP_Z = -0.030
_FINGER_TIP_Z = -0.105
# Grasp point: where the centre of a held cube sits, a little above the fingertips.
GRASP_SITE_Z = -0.0905


def _moving_jaw_local(pos_g: np.ndarray, mat_g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pose in the gripper frame at gripper angle GRIPPER_PARALLEL -> pose in the moving-jaw body frame."""
    r0 = _mat_from_quat(_JAW_QUAT)
    # At angle q the jaw frame is R0 @ Rz(q); invert it for q = GRIPPER_PARALLEL.
    r_inv = _rot_z(-GRIPPER_PARALLEL) @ r0.T
    return r_inv @ (pos_g - _JAW_POS), r_inv @ mat_g


# ------------------------------------------------------------------------------------------------- MJCF


def _arm_xml(cfg: SceneConfig) -> str:
    """The SO-101 body tree: base -> shoulder -> upper_arm -> lower_arm -> wrist -> gripper -> moving jaw."""
    cube_w = cfg.cube_size
    moving_face_x = _FIXED_FACE_X + cube_w  # inner face of the moving pad while holding the cube
    pad_mid_z = 0.5 * (_FINGER_TOP_Z + _FINGER_TIP_Z)
    pad_half_len = 0.5 * (_FINGER_TOP_Z - _FINGER_TIP_Z)
    fixed_pad_pos = np.array([_FIXED_FACE_X - _PAD_HALF_THICK, 0.0, pad_mid_z])
    grasp_x = _FIXED_FACE_X + 0.5 * cube_w

    # Moving finger: a pad parallel to the fixed one at GRIPPER_PARALLEL, plus a link back to the hinge.
    pad_g = np.array([moving_face_x + _PAD_HALF_THICK, 0.0, pad_mid_z])
    pad_l, pad_r = _moving_jaw_local(pad_g, np.eye(3))
    pad_q = _quat_from_mat(pad_r)
    link_g_a = np.array([_JAW_POS[0], 0.0, _JAW_POS[2]])
    link_g_b = np.array([moving_face_x + _PAD_HALF_THICK, 0.0, _FINGER_TOP_Z])
    link_a, _ = _moving_jaw_local(link_g_a, np.eye(3))
    link_b, _ = _moving_jaw_local(link_g_b, np.eye(3))

    return f"""
    <body name="base" childclass="so101">
      <geom class="visual" type="cylinder" size="0.048 0.026" pos="0.01 0 0.026" material="arm"/>
      <geom class="visual" type="box" size="0.022 0.016 0.02" pos="0.035 0 0.05" material="servo"/>
      <body name="shoulder" pos="0.0388353 0 0.0624" quat="0 0 -1 0">
        <joint name="shoulder_pan" range="{_f(JOINT_RANGES[0])}"/>
        <inertial pos="-0.03 0 -0.025" mass="0.10" diaginertia="8.4e-5 8.1e-5 2.4e-5"/>
        <geom class="link" type="box" size="0.028 0.024 0.02" pos="-0.028 0 -0.03"/>
        <geom class="visual" type="box" size="0.012 0.024 0.02" pos="-0.03 -0.012 -0.052" material="servo"/>
        <body name="upper_arm" pos="-0.0303992 -0.0182778 -0.0542" quat="0.5 -0.5 -0.5 -0.5">
          <joint name="shoulder_lift" range="{_f(JOINT_RANGES[1])}"/>
          <inertial pos="-0.09 -0.008 0.018" mass="0.103" diaginertia="4.1e-5 1.47e-4 1.42e-4"/>
          <geom class="link" type="capsule" size="0.017" fromto="-0.012 -0.004 0.018 -0.100 -0.024 0.018"/>
          <geom class="visual" type="box" size="0.012 0.02 0.016" pos="-0.11257 -0.02 0.018"
                material="servo"/>
          <body name="lower_arm" pos="-0.11257 -0.028 0" quat="0.7071068 0 0 0.7071068">
            <joint name="elbow_flex" range="{_f(JOINT_RANGES[2])}"/>
            <inertial pos="-0.098 0.003 0.018" mass="0.104" diaginertia="2.9e-5 1.6e-4 1.45e-4"/>
            <geom class="link" type="capsule" size="0.014" fromto="-0.015 0 0.018 -0.112 0.004 0.018"/>
            <geom class="visual" type="box" size="0.02 0.012 0.016" pos="-0.124 0.005 0.018"
                  material="servo"/>
            <body name="wrist" pos="-0.1349 0.0052 0" quat="0.7071068 0 0 -0.7071068">
              <joint name="wrist_flex" range="{_f(JOINT_RANGES[3])}"/>
              <inertial pos="0 -0.039 0.028" mass="0.079" diaginertia="3.7e-5 2.5e-5 2.1e-5"/>
              <geom class="link" type="box" size="0.016 0.024 0.02" pos="0 -0.036 0.022"/>
              <body name="gripper" pos="0 -0.0611 0.0181" quat="0.0172091 -0.0172091 0.706897 0.706897">
                <joint name="wrist_roll" range="{_f(JOINT_RANGES[4])}"/>
                <inertial pos="0 0 -0.03" mass="0.087" diaginertia="2.8e-5 4.3e-5 3.5e-5"/>
                <geom class="visual" type="box" size="0.02 0.018 0.014" pos="0.004 0 -0.014"
                      material="servo"/>
                <geom name="palm" class="link" type="box" size="0.016 {_PAD_HALF_WIDTH} 0.006"
                      pos="{_FIXED_FACE_X - 0.006} 0 {_FINGER_TOP_Z}"/>
                <geom name="fixed_jaw" class="finger" type="box"
                      size="{_PAD_HALF_THICK} {_PAD_HALF_WIDTH} {pad_half_len}" pos="{_f(fixed_pad_pos)}"/>
                <site name="grasp" pos="{grasp_x:.6g} 0 {GRASP_SITE_Z}" size="0.004" rgba="0 1 0 0"/>
                <geom class="visual" type="box" size="0.012 0.016 0.004" pos="0 -0.034 -0.03"
                      euler="0.5 0 0" material="servo"/>
                <camera name="wrist" pos="0 -0.040 -0.030" xyaxes="-1 0 0 0 -0.866 -0.5"
                        fovy="{cfg.wrist_camera_fovy:.6g}"/>
                <body name="moving_jaw" pos="{_f(_JAW_POS)}" quat="{_f(_JAW_QUAT)}">
                  <joint name="gripper" range="{_f(JOINT_RANGES[5])}"/>
                  <inertial pos="0 -0.03 0.019" mass="0.012" diaginertia="6.6e-6 1.9e-6 5.3e-6"/>
                  <geom name="moving_jaw" class="finger" type="box"
                        size="{_PAD_HALF_THICK} {_PAD_HALF_WIDTH} {pad_half_len}"
                        pos="{_f(pad_l)}" quat="{_f(pad_q)}"/>
                  <geom class="link" type="capsule" size="0.005" fromto="{_f(link_a)} {_f(link_b)}"/>
                </body>
              </body>
            </body>
          </body>
        </body>
      </body>
    </body>"""


def _bowl_xml(cfg: SceneConfig, segments: int = 14) -> str:
    """A bowl of primitives: a thin disc and a ring of wall boxes (few triangles, exact collisions)."""
    r, h = cfg.bowl_radius, cfg.bowl_height
    wall_half_t = 0.003
    half_chord = (r + wall_half_t) * math.tan(math.pi / segments) + 0.001
    walls = []
    for i in range(segments):
        a = 2 * math.pi * i / segments
        x, y = (r + wall_half_t) * math.cos(a), (r + wall_half_t) * math.sin(a)
        walls.append(
            f'<geom class="object" type="box" size="{wall_half_t} {half_chord:.6g} {h / 2:.6g}" '
            f'pos="{x:.6g} {y:.6g} {h / 2:.6g}" euler="0 0 {a:.6g}" material="bowl"/>'
        )
    joined = "\n      ".join(walls)
    return f"""
    <body name="bowl" pos="{cfg.bowl_xy[0]:.6g} {cfg.bowl_xy[1]:.6g} 0">
      <geom name="bowl_floor" class="object" type="cylinder" size="{r + 2 * wall_half_t:.6g} 0.003"
            pos="0 0 0.003" material="bowl"/>
      {joined}
      <site name="bowl_centre" pos="0 0 0.006" size="0.004" rgba="0 1 0 0"/>
    </body>"""


def build_scene_xml(
    cfg: SceneConfig | None = None, *, bowl: bool = True, extra: str = "", name: str = ""
) -> str:
    """Return the MJCF text of the SO-101 scene: the arm, the table, the cube and (``bowl``) the bowl.

    ``extra`` is MJCF for more world bodies (a task's other objects, see :mod:`actlab.sim.tasks`), and
    ``name`` the model's name (default ``so101_pick_place``)."""
    cfg = cfg or SceneConfig()
    half = cfg.cube_size / 2
    top_axes = look_at_xyaxes(cfg.top_camera_pos, cfg.top_camera_target)
    if cfg.fast_render:
        quality = 'shadowsize="0" offsamples="0" numslices="12" numstacks="6" numquads="1"'
    else:
        quality = 'shadowsize="4096" offsamples="4" numslices="28" numstacks="16" numquads="4"'
    size = cfg.max_render_size
    return f"""<mujoco model="{name or "so101_pick_place"}">
  <compiler angle="radian" autolimits="true"/>
  <!-- 7 substeps of 1/210 s make one 30 Hz control step. -->
  <option timestep="{1.0 / 210.0:.9g}" integrator="implicitfast" cone="elliptic" impratio="10"/>
  <visual>
    <!-- fast_render: no shadows, no multisampling, coarse curved surfaces (render time on a CPU). -->
    <quality {quality}/>
    <global offwidth="{size}" offheight="{size}"/>
    <headlight ambient="0.3 0.3 0.3" diffuse="0.25 0.25 0.25" specular="0 0 0"/>
    <map znear="0.01" zfar="5"/>
  </visual>
  <default>
    <default class="so101">
      <joint axis="0 0 1" damping="{JOINT_DAMPING}" frictionloss="{JOINT_FRICTIONLOSS}"
             armature="{JOINT_ARMATURE}"/>
      <position kp="{SERVO_KP}" kv="{SERVO_KV}" forcerange="{-SERVO_FORCE} {SERVO_FORCE}"/>
      <default class="visual">
        <geom contype="0" conaffinity="0" group="1" mass="0"/>
      </default>
      <default class="link">
        <geom contype="{_BIT_ARM}" conaffinity="0" group="1" mass="0" material="arm"/>
      </default>
      <default class="finger">
        <geom contype="{_BIT_FINGER}" conaffinity="0" group="1" mass="0" material="jaw" condim="6"
              friction="1.5 0.02 0.002" solref="0.01 1" solimp="0.95 0.99 0.001" priority="1"/>
      </default>
    </default>
    <default class="object">
      <geom contype="{_BIT_OBJECT}" conaffinity="{_BIT_OBJECT | _BIT_ARM | _BIT_FINGER}" group="1"
            friction="1 0.01 0.001"/>
    </default>
  </default>
  <asset>
    <material name="arm" rgba="{_f(cfg.arm_rgba)}" specular="0.1"/>
    <material name="jaw" rgba="0.22 0.22 0.24 1" specular="0.1"/>
    <material name="servo" rgba="0.12 0.12 0.13 1" specular="0.1"/>
    <material name="cube" rgba="{_f(cfg.cube_rgba)}" specular="0.1"/>
    <material name="bowl" rgba="{_f(cfg.bowl_rgba)}" specular="0.1"/>
    <material name="table" rgba="{_f(cfg.table_rgba)}" specular="0"/>
  </asset>
  <worldbody>
    <light name="key" directional="true" pos="0.2 -0.3 1.2" dir="-0.1 0.25 -1" diffuse="0.45 0.45 0.45"
           specular="0 0 0" castshadow="{str(not cfg.fast_render).lower()}"/>
    <geom name="table" type="box" size="0.6 0.6 0.02" pos="0.2 0 -0.02" material="table"
          contype="{_BIT_OBJECT}" conaffinity="{_BIT_OBJECT | _BIT_FINGER}" group="1"/>
    <camera name="top" pos="{_f(cfg.top_camera_pos)}" xyaxes="{_f(top_axes)}"
            fovy="{cfg.top_camera_fovy:.6g}"/>
    {_arm_xml(cfg)}
    {_bowl_xml(cfg) if bowl else ""}
    {extra}
    <body name="cube" pos="0.2 0 {half:.6g}">
      <freejoint name="cube"/>
      <geom name="cube" class="object" type="box" size="{half:.6g} {half:.6g} {half:.6g}"
            mass="{cfg.cube_mass:.6g}" material="cube" condim="4"/>
    </body>
  </worldbody>
  <actuator>
    {
        "".join(
            f'<position class="so101" name="{n}" joint="{n}" ctrlrange="{_f(r)}"/>'
            for n, r in zip(JOINT_NAMES, JOINT_RANGES)
        )
    }
  </actuator>
</mujoco>
"""


def build_model(cfg: SceneConfig | None = None, **parts: Any):
    """Compile the scene into a ``mujoco.MjModel`` (``parts``: :func:`build_scene_xml`'s keywords)."""
    return mujoco_module().MjModel.from_xml_string(build_scene_xml(cfg, **parts))
