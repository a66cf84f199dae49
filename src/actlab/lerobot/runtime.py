"""What the LeRobot plugin (``integrations/lerobot_policy_actlab``) runs on actlab's side, without lerobot.

The plugin's classes are thin LeRobot adapters; the logic they need lives here so that it is tested in
actlab's default suite (no lerobot installed) and exists once:

- :func:`camera_to_trained`: a LeRobot camera batch (float ``[0, 1]`` or uint8, any size) -> uint8 at the
  size the policy was trained on, resized as ``actlab eval`` resizes (same aspect ratio, or the
  FrameStore's fit-and-pad for cameras it fitted into a square); another aspect ratio is an error naming
  both sizes.
- :func:`rtc_prefix`: LeRobot's RTC call (``inference_delay``, ``prev_chunk_left_over``) -> actlab's
  committed-action prefix for ``act_relative``: the first ``d`` left-over actions, never a zero row that
  LeRobot padded in, ``d`` clamped to ``rtc_max_delay``.
- :class:`SimEpisodes`: actlab's MuJoCo pick-and-place behind a continuous robot stream: clipped joint
  targets, episodes restarted from new seeds on success or time limit, each episode's outcome and
  failure class logged and appended to a JSONL file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from actlab.errors import ActlabError

# LeRobot's robot feature names for the SO-101 follower's joints, in actlab's (= LeRobot's) order.
JOINT_KEYS = (
    "shoulder_pan.pos",
    "shoulder_lift.pos",
    "elbow_flex.pos",
    "wrist_flex.pos",
    "wrist_roll.pos",
    "gripper.pos",
)
# How the FrameStore records a resize in a camera feature's "info" (mode fit_pad: longer side to the
# trained size, black centred padding to a square); actlab.evaluation.policy_io reads the same key.
RESIZE_INFO = "actlab.resize"


def trained_cameras(features: Mapping[str, Any], camera_keys: list[str]) -> dict[str, tuple[int, int, bool]]:
    """``{camera key: (H, W, fit_pad)}`` of a policy from its features (``[H, W, C]``, LeRobot style)."""
    out = {}
    for key in camera_keys:
        feat = features[key]
        h, w = int(feat["shape"][0]), int(feat["shape"][1])
        resize = (feat.get("info") or {}).get(RESIZE_INFO)
        fit_pad = isinstance(resize, Mapping) and resize.get("mode") == "fit_pad"
        out[key] = (h, w, fit_pad)
    return out


def camera_to_trained(images: Any, key: str, trained: tuple[int, int, bool]) -> Any:
    """(B, C, H, W) float in ``[0, 1]`` or uint8 -> (B, C, h, w) uint8 at the trained ``(h, w)``.

    Float frames are LeRobot's (``uint8 / 255``), so rounding ``x * 255`` gives back the camera's bytes;
    the resize is actlab eval's (bilinear, antialiased, rounded to uint8), so a policy sees the same
    pixels in LeRobot's runtime as in actlab's harness.
    """
    import torch

    # lazy: the plugin imports this module at LeRobot start; the resize code loads with the first frame
    from actlab.evaluation.policy_io import resize_images

    h, w, fit_pad = trained
    if images.dtype != torch.uint8:
        images = (images.float() * 255.0).round().clamp(0, 255).to(torch.uint8)
    src_h, src_w = int(images.shape[-2]), int(images.shape[-1])
    if (src_h, src_w) == (h, w):
        return images
    same_aspect = src_h * w == src_w * h
    if not same_aspect and not (fit_pad and h == w):
        raise ActlabError(
            f"camera {key!r} delivers {src_h}x{src_w} (H x W) frames; the policy was trained on {h}x{w}, "
            "another aspect ratio",
            field=key,
            expected=f"{h}x{w} or any size with the same aspect ratio ({w}:{h} width:height)",
            found=f"{src_h}x{src_w}",
            fix="set the camera's width and height (--robot.cameras=...) to the trained aspect ratio",
        )
    return resize_images(images, (h, w), fit_pad=fit_pad)


@dataclass(frozen=True)
class RtcPrefix:
    """The committed prefix actlab conditions on, and why it is shorter than LeRobot asked (if it is)."""

    actions: Any  # (B, d, A) absolute committed actions, or None for no prefix (d = 0)
    requested: int  # LeRobot's inference_delay
    used: int  # d: the prefix length given to the policy
    note: str | None  # why used < requested (clamped to rtc_max_delay / fewer real left-over actions)


def rtc_prefix(
    prev_chunk_left_over: Any, inference_delay: int | None, max_delay: int, chunk_size: int | None = None
) -> RtcPrefix:
    """Map LeRobot's RTC arguments to actlab's committed-action prefix (docs/lerobot.md "RTC").

    LeRobot's engine passes the not-yet-executed actions of the previous chunk (``(T, A)`` or
    ``(B, T, A)``, zero-padded by LeRobot to its ``execution_horizon``) and the delay ``d`` in control
    steps it measured. During the inference the robot executes the first ``d`` of them: those are what
    actlab's ``act_relative`` was trained to condition on. Rules (ours, not LeRobot's):

    - trailing rows that are exactly zero are LeRobot's padding, never committed actions (a zero-padded
      prefix would tell the policy the arm is about to go to all-zero joint angles);
    - ``d`` above the trained ``rtc_max_delay`` is clamped to it (the rest of the chunk is predicted
      unconditioned, as in training for the positions after the prefix), with a note;
    - no left-over (the first chunk, or LeRobot's RTC disabled) means no prefix;
    - a delay of ``chunk_size`` steps or more is clamped like any other, with a note: LeRobot's ``d``
      is the largest latency it has ever seen, so one slow call (a load spike) keeps it there for the
      rest of the rollout, while what LeRobot drops from the returned chunk is the latency of that call
      alone. (Refusing it stopped a rollout after one 1.1 s spike: LeRobot gives up after 10 errors.)
    """
    requested = int(inference_delay or 0)
    if prev_chunk_left_over is None or requested <= 0 or max_delay <= 0:
        note = None
        if prev_chunk_left_over is not None and requested > 0 and max_delay <= 0:
            note = "this policy was trained without an RTC prefix (rtc_max_delay 0): no prefix used"
        return RtcPrefix(None, requested, 0, note)
    prev = prev_chunk_left_over
    if prev.ndim == 2:
        prev = prev[None]  # (1, T, A)
    if prev.ndim != 3:
        raise ActlabError(
            "prev_chunk_left_over has the wrong shape",
            field="prev_chunk_left_over",
            expected="(T, A) or (B, T, A) absolute actions",
            found=tuple(prev.shape),
        )
    nonzero = (prev != 0).any(dim=-1).any(dim=0)  # (T,) rows with a real action in some batch element
    real = int(nonzero.nonzero().max().item()) + 1 if bool(nonzero.any()) else 0
    used = min(requested, max_delay, real)
    note = None
    if used < requested:
        reasons = []
        if chunk_size is not None and requested >= chunk_size:
            reasons.append(
                f"it is a whole chunk ({chunk_size}) or more: LeRobot keeps the largest latency it has seen; "
                "if inference is really that slow, use the sync engine or a faster device"
            )
        if requested > max_delay:
            reasons.append(f"clamped to the trained rtc_max_delay {max_delay}")
        if real < min(requested, max_delay):
            reasons.append(f"only {real} real left-over actions (the rest is LeRobot's zero padding)")
        note = f"LeRobot asked for a delay of {requested} steps: " + "; ".join(reasons)
    return RtcPrefix(prev[:, :used] if used > 0 else None, requested, used, note)


# --------------------------------------------------------------------------------------- the sim robot
@dataclass
class SimSignal:
    """What the simulated robot tells a plugin policy in the same process (LeRobot's runtime gives a
    robot and a policy no other channel, and does not reset the policy between the sim's episodes).

    ``epoch`` counts episode starts: a policy that sees it change resets itself (actlab's action queue,
    observation history). ``holding`` is True while the arm holds its home pose after a restart: the
    actions LeRobot pops then are not executed, so an RTC policy must not condition on them as committed.
    """

    epoch: int = 0  # episode starts so far
    holding: bool = False  # the arm ignores actions (home-pose hold after a restart)


# The one signal of this process: actlab_so101_sim writes it, the plugin's policies read it.
SIM_SIGNAL = SimSignal()


@dataclass(frozen=True)
class EpisodeResult:
    """One finished episode of the simulated robot."""

    episode: int  # 0, 1, ... in the order they ran
    seed: int  # the scene's seed
    outcome: str  # "success" or actlab's failure class (never_picked_up, ..., timeout)
    steps: int  # control steps the policy acted in this episode
    max_lift_m: float | None  # highest cube lift above its start (m)
    wall_s: float  # seconds the episode took on the wall clock

    def line(self) -> str:
        lift = "-" if self.max_lift_m is None else f"{self.max_lift_m * 100:.1f} cm"
        return (
            f"actlab_so101_sim: episode {self.episode} seed {self.seed}: {self.outcome} after {self.steps} "
            f"steps ({self.wall_s:.1f} s, max lift {lift})"
        )


class SimEpisodes:
    """actlab's pick-and-place env as an endless robot: ``observe()`` / ``act(action)``.

    An episode ends on success (the cube rests in the bowl) or after ``max_steps``; its outcome is
    classified by actlab's taxonomy, reported through ``on_episode`` and appended to ``log_file`` (one
    JSON line each), and the next episode starts from seed ``seed + episode``. For ``hold_steps`` steps
    after a restart the arm holds its home pose and actions are ignored: a LeRobot runtime does not reset
    the policy between the sim's episodes, so the actions it had queued for the old scene drain while the
    arm waits (the policy sees the new scene's first observation meanwhile, as at an episode start).
    """

    def __init__(
        self,
        image_size: int = 96,
        max_steps: int = 300,
        seed: int = 100_000,
        hold_steps: int = 30,
        log_file: str | Path | None = None,
        on_episode: Callable[[EpisodeResult], None] | None = None,
        cameras: tuple[str, ...] = ("top", "wrist"),
        signal: SimSignal | None = None,
    ) -> None:
        from actlab.sim import make_env  # lazy: mujoco only when a simulated robot is built

        self.env = make_env(image_size=image_size, max_steps=max_steps, cameras=tuple(cameras))
        self.seed = int(seed)
        self.hold_steps = int(hold_steps)
        self.log_file = Path(log_file) if log_file else None
        self.on_episode = on_episode
        self.signal = signal
        self.results: list[EpisodeResult] = []
        lo, hi = self.env.model.actuator_ctrlrange[:6, 0], self.env.model.actuator_ctrlrange[:6, 1]
        self.low_deg, self.high_deg = np.degrees(lo), np.degrees(hi)  # (6,) joint target limits
        self._start_episode()

    def _start_episode(self) -> None:
        self._obs, _ = self.env.reset(seed=self.seed + len(self.results))
        self._infos: list[dict] = []
        self._hold = self.hold_steps
        self._t0 = time.perf_counter()
        if self.signal is not None:
            self.signal.epoch += 1
            self.signal.holding = self._hold > 0

    def observe(self) -> dict[str, np.ndarray]:
        """The latest observation: ``observation.state`` (6,) degrees, ``observation.images.<cam>`` HWC."""
        return self._obs

    def clip(self, action: np.ndarray) -> np.ndarray:
        """Joint targets clipped to the joints' ranges (degrees), as the follower's servos limit them."""
        return np.clip(np.asarray(action, dtype=np.float64), self.low_deg, self.high_deg)

    def act(self, action: np.ndarray) -> np.ndarray:
        """Apply one control step of six joint targets (degrees); returns what was applied (clipped)."""
        applied = self.clip(action)
        if self._hold > 0:
            self._hold -= 1
            if self.signal is not None:
                self.signal.holding = self._hold > 0
            return applied
        self._obs, _, terminated, truncated, info = self.env.step(applied)
        self._infos.append(info)
        if terminated or truncated:
            self._finish_episode()
        return applied

    def _finish_episode(self) -> None:
        # lazy: the plugin imports this module at LeRobot start; evaluation loads with the first episode
        from actlab.evaluation.taxonomy import PhaseRecord, classify

        verdict = classify(PhaseRecord.from_infos(self._infos))
        result = EpisodeResult(
            episode=len(self.results),
            seed=self.seed + len(self.results),
            outcome=verdict.outcome,
            steps=len(self._infos),
            max_lift_m=verdict.max_lift_m,
            wall_s=time.perf_counter() - self._t0,
        )
        self.results.append(result)
        if self.log_file is not None:
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(result.__dict__) + "\n")
        if self.on_episode is not None:
            self.on_episode(result)
        self._start_episode()

    def summary(self) -> str:
        """``"8/10 episodes succeeded (80%); failures: ..."`` over the finished episodes."""
        n = len(self.results)
        if n == 0:
            return "no episode finished"
        ok = sum(r.outcome == "success" for r in self.results)
        fails: dict[str, int] = {}
        for r in self.results:
            if r.outcome != "success":
                fails[r.outcome] = fails.get(r.outcome, 0) + 1
        tail = ", ".join(f"{k} {v}" for k, v in sorted(fails.items())) or "none"
        return f"{ok}/{n} episodes succeeded ({100 * ok / n:.0f}%); failures: {tail}"

    def close(self) -> None:
        self.env.close()


def read_episode_log(path: str | Path) -> list[dict]:
    """The episodes a sim robot appended to its JSONL log (an ActlabError for a line that is not JSON)."""
    out = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ActlabError("not a JSON line", file=path, field=f"line {i + 1}", found=line[:80]) from e
    return out


def pace(next_tick: float, fps: float) -> float:
    """Sleep until ``next_tick`` (perf_counter seconds) and return the tick after it (real-time pacing)."""
    now = time.perf_counter()
    if next_tick > now:
        time.sleep(next_tick - now)
    else:
        next_tick = now  # late: do not try to catch up by running fast
    return next_tick + 1.0 / fps


__all__ = [
    "JOINT_KEYS",
    "SIM_SIGNAL",
    "EpisodeResult",
    "RtcPrefix",
    "SimEpisodes",
    "SimSignal",
    "camera_to_trained",
    "pace",
    "read_episode_log",
    "rtc_prefix",
    "trained_cameras",
]
