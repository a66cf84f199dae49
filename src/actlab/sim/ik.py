"""Inverse kinematics for the SO-101 grasp site: damped least squares on MuJoCo's site Jacobians.

The solver works on its own ``MjData`` (kinematics only, no dynamics), so it never disturbs a running
simulation. It solves for the five arm joints (the gripper joint is commanded separately).
"""

from __future__ import annotations

import numpy as np

from actlab.sim.gl import mujoco_module
from actlab.sim.scene import JOINT_RANGES

N_ARM = 5  # shoulder_pan .. wrist_roll; the sixth actuator is the gripper


def _rotation_error(target: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Rotation vector (3,) that turns ``current`` into ``target`` (both (3, 3), world frame)."""
    mujoco = mujoco_module()

    r = target @ current.T
    quat = np.empty(4)
    mujoco.mju_mat2Quat(quat, r.reshape(-1))
    vel = np.empty(3)
    mujoco.mju_quat2Vel(vel, quat, 1.0)
    return vel


def down_rotation(closing_yaw: float) -> np.ndarray:
    """Grasp-site orientation (3, 3) with the fingers pointing straight down and the jaws closing along the
    horizontal direction ``closing_yaw`` (rad, about world z)."""
    c, s = np.cos(closing_yaw), np.sin(closing_yaw)
    x = np.array([c, s, 0.0])  # closing direction (the gripper's x axis)
    z = np.array([0.0, 0.0, 1.0])  # gripper z points from the fingertips back towards the wrist
    y = np.cross(z, x)
    return np.stack([x, y, z], axis=1)


class ArmIK:
    """Damped-least-squares IK for a site on the SO-101 arm.

    ``solve(pos, rot, q_start)`` returns five arm joint angles (rad) that put the site at ``pos`` (m, world)
    with orientation ``rot`` (3, 3), starting the iteration from ``q_start`` (warm start keeps successive
    solutions close, so a trajectory solved step by step is smooth).
    """

    def __init__(self, model, site: str = "grasp", rot_weight: float = 0.25, damping: float = 1e-4) -> None:
        mujoco = mujoco_module()

        self.model = model
        self.data = mujoco.MjData(model)
        self.site_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, site)
        if self.site_id < 0:
            raise ValueError(f"site {site!r} not in the model")
        self.rot_weight = rot_weight
        self.damping = damping
        self.lo = np.array([r[0] for r in JOINT_RANGES[:N_ARM]])
        self.hi = np.array([r[1] for r in JOINT_RANGES[:N_ARM]])
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))

    def forward(self, q_arm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Site position (3,) and orientation (3, 3) for arm joints ``q_arm`` (5,)."""
        mujoco = mujoco_module()

        self.data.qpos[:N_ARM] = q_arm
        # Kinematics + com positions are all mj_jacSite needs; no dynamics are computed here.
        mujoco.mj_kinematics(self.model, self.data)
        mujoco.mj_comPos(self.model, self.data)
        return self.data.site_xpos[self.site_id].copy(), self.data.site_xmat[self.site_id].reshape(
            3, 3
        ).copy()

    def solve(
        self,
        pos: np.ndarray,
        rot: np.ndarray | None,
        q_start: np.ndarray,
        iters: int = 100,
        tol: float = 1e-5,
    ) -> tuple[np.ndarray, float]:
        """Joint angles (5,) and the final weighted task-space error norm (m-equivalent)."""
        mujoco = mujoco_module()

        q = np.clip(np.asarray(q_start, dtype=float)[:N_ARM].copy(), self.lo, self.hi)
        err_norm = np.inf
        for _ in range(iters):
            cur_pos, cur_rot = self.forward(q)
            err_p = pos - cur_pos
            mujoco.mj_jacSite(self.model, self.data, self._jacp, self._jacr, self.site_id)
            if rot is None:
                jac, err = self._jacp[:, :N_ARM], err_p
            else:
                err_r = _rotation_error(rot, cur_rot) * self.rot_weight
                jac = np.vstack([self._jacp[:, :N_ARM], self.rot_weight * self._jacr[:, :N_ARM]])  # (6, 5)
                err = np.concatenate([err_p, err_r])  # (6,)
            err_norm = float(np.linalg.norm(err))
            if err_norm < tol:
                break
            # dq = J^T (J J^T + lambda I)^-1 e: damping keeps steps bounded near singular poses.
            jjt = jac @ jac.T + self.damping * np.eye(jac.shape[0])
            dq = jac.T @ np.linalg.solve(jjt, err)
            step = np.linalg.norm(dq)
            if step > 0.3:
                dq *= 0.3 / step
            q = np.clip(q + dq, self.lo, self.hi)
        return q, err_norm
