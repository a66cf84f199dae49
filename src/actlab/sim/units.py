"""Joint units of the simulated SO-101: the sim's own degrees, or those of LeRobot's real follower.

LeRobot 0.6.1's ``so101_follower`` (robots/so_follower, ``use_degrees=True`` by default) reports the five
body joints in degrees (``MotorNormMode.DEGREES``) and the gripper in 0-100 over its calibrated range
(``MotorNormMode.RANGE_0_100``), under the feature names ``shoulder_pan.pos`` ... ``gripper.pos``.
The sim's ``degrees`` units report the gripper's joint angle in degrees too. ``so101_follower`` units map
the gripper joint's range linearly onto 0-100: 0 at its closed limit (-10 degrees), 100 at its open limit
(100 degrees), so a policy trained on data in either units drives the sim in the same units without a
conversion step. The body joints are degrees in both.
"""

from __future__ import annotations

import math

import numpy as np

from actlab.datasets.format import SIM_UNITS
from actlab.errors import ActlabError
from actlab.sim.scene import JOINT_RANGES

# The joint units an env, a recording and the LeRobot robot and env may use (one list with the dataset
# format's, which checks a recording's record of them).
UNITS: tuple[str, ...] = SIM_UNITS
# The gripper joint's range in degrees (closed limit, open limit): 0 and 100 in so101_follower units.
GRIPPER_RANGE_DEG: tuple[float, float] = (math.degrees(JOINT_RANGES[5][0]), math.degrees(JOINT_RANGES[5][1]))


def check_units(units: str, field: str = "units") -> str:
    if units not in UNITS:
        raise ActlabError(
            f"unknown joint units {units!r}",
            field=field,
            expected=" or ".join(UNITS),
            found=units,
            fix="so101_follower: the gripper 0-100 as LeRobot's real so101_follower; degrees: the sim's own",
        )
    return units


def to_units(joints_deg, units: str) -> np.ndarray:
    """Six joint values (..., 6) in the sim's degrees -> ``units`` (the gripper column changes)."""
    out = np.array(joints_deg, dtype=np.float64, copy=True)
    if units == "so101_follower":
        lo, hi = GRIPPER_RANGE_DEG
        out[..., 5] = (out[..., 5] - lo) / (hi - lo) * 100.0
    return out


def from_units(joints, units: str) -> np.ndarray:
    """Six joint values (..., 6) in ``units`` -> the sim's degrees."""
    out = np.array(joints, dtype=np.float64, copy=True)
    if units == "so101_follower":
        lo, hi = GRIPPER_RANGE_DEG
        out[..., 5] = lo + out[..., 5] / 100.0 * (hi - lo)
    return out
