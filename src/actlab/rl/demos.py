"""Demonstration transitions from a LeRobot dataset, for RLPD's symmetric sampling.

Each of the first ``demo_episodes`` episodes becomes transitions in the agent's own terms:
- the actor inputs are rebuilt from the recorded frames and joint states exactly as online (the frozen
  encoder runs on the recorded frames);
- residual RL: the base policy is executed on the episode's observations with its own chunking (a new
  chunk every ``n_action_steps`` frames, ``select_action`` as online), and the demo's action becomes the
  residual ``(a_demo - a_base) / action_scale_deg``, clipped to [-1, 1] (a demo step further than the
  residual bound from the base is stored at the bound); from scratch the joint delta ``(a_demo - state)``
  is scaled the same way;
- reward: the recorder keeps successful episodes only, so the last step is a success (reward 1,
  terminated) and every other step 0; the same for every reward kind (the dataset has no phase signals);
- no privileged state: a LeRobot dataset has no cube pose, so with demos the critic is symmetric
  (``privileged=auto``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from actlab.datasets import open_dataset
from actlab.datasets.sources import source_record, sources_changed
from actlab.errors import ActlabError
from actlab.rl.replay import ReplayBuffer, nstep_transitions
from actlab.utils.say import say

STATE_KEY = "observation.state"


def demo_buffer(cfg: Any, agent: Any, progress: bool = False) -> ReplayBuffer:
    """A replay buffer holding the demonstration transitions of ``cfg.demos``. The base runs on every
    demo frame (its action is the residual's anchor) and frozen features are computed once per frame:
    minutes for 100 episodes on a 2-core CPU, so ``progress`` shows a bar per episode on stderr."""
    if cfg.critic_privileged:
        raise ActlabError(
            "demonstrations carry no privileged sim state",
            field="privileged",
            found=cfg.obs.privileged,
            fix="use privileged=auto or off with --demos",
        )
    if cfg.env.task != "pick_place":
        raise ActlabError("demonstrations are pick-and-place episodes", field="task", found=cfg.env.task)
    ds = open_dataset(cfg.demos)
    missing = [k for k in [STATE_KEY, "action", *agent.image_keys] if k not in ds.features]
    if missing:
        raise ActlabError(
            "the demonstration dataset lacks what the agent reads",
            file=cfg.demos,
            field="features",
            expected=", ".join([STATE_KEY, "action", *agent.image_keys]),
            found=", ".join(sorted(ds.features)),
        )
    check_demo_image_size(agent, ds, cfg.demos)
    states, actions = ds.column(STATE_KEY), ds.column("action")
    episodes = ds.episodes[: cfg.sac.demo_episodes]
    say_fewer_demos(cfg.demos, len(ds.episodes), cfg.sac.demo_episodes, "sac.demo_episodes")
    parts = []
    bar = tqdm(episodes, desc="demos -> transitions", unit="episode", disable=not progress, leave=False)
    for ep in bar:
        idx = np.arange(ep.start, ep.stop)
        parts.append(_episode(cfg, agent, ds, idx, states[idx], actions[idx]))
    buf = ReplayBuffer(sum(len(p["reward"]) for p in parts), cfg.device)
    for p in parts:
        buf.add(p)
    ds.close()
    return buf


def check_demo_image_size(agent: Any, ds: Any, demos: Any) -> None:
    """Refuse demonstrations whose frames are not the size the agent reads (the frozen base's trained size,
    or obs.image_size), before any is read: the base's own refusal, "convert HWC frames with
    .permute(0, 3, 1, 2) and resize them", was a programmer's fix for a user who recorded at another
    --image-size (24th fault run, rl_demos_size_mismatch, kill_rm)."""
    frozen = agent.cfg.obs.encoder == "frozen"
    resizes = frozen and getattr(agent.base, "_img_size", None) is not None
    want = agent.features
    for key in agent.image_keys:
        have, need = list(ds.features[key]["shape"][:2]), list(want[key]["shape"][:2])
        if have != need and not resizes:
            other = "pass a base trained on these frames" if frozen else f"--set obs.image_size={have[0]}"
            raise ActlabError(
                "the demonstrations' frames are not the size the agent reads",
                file=Path(demos) / "meta" / "info.json",
                field=f"features.{key}.shape",
                expected=f"{need[0]}x{need[1]} (H x W: "
                + ("the size the base was trained at)" if frozen else "obs.image_size)"),
                found=f"{have[0]}x{have[1]}",
                fix=f"record the demonstrations at that size (actlab sim record --image-size {need[0]}), "
                f"or {other} (nothing was trained)",
            )


def demos_record(path: Any, image_keys: list[str]) -> dict[str, Any]:
    """What a resume compares of the demonstrations: their identity (counts, meta/ and rows hashed) and
    the videos of the cameras the agent reads (sha256 with inode and ctime)."""
    ds = open_dataset(path)
    try:
        return {
            "identity": ds.identity,
            "videos": source_record(ds, [k for k in image_keys if k in ds.video_keys]),
        }
    finally:
        ds.close()


def check_demos_unchanged(path: Any, record: Any, ckpt: Path) -> None:
    """Refuse a resume whose demonstrations changed since checkpoint ``ckpt`` recorded them: they are read
    again at each resume, and a dataset edited, replaced or with a video edited in its middle (size and
    mtime kept) was read into the replay without a word (25th fault run). A checkpoint written before the
    record is said and resumed."""
    if not isinstance(record, dict):
        say(f"note: {ckpt} predates the record of its demonstrations: {path} is not compared with them")
        return
    ds = open_dataset(path)
    try:
        now = ds.identity
        was = record.get("identity") or {}
        changed = [f"{k}: {was[k]} -> {now.get(k)}" for k in was if was[k] != now.get(k)]
        if not changed and isinstance(record.get("videos"), dict):
            video = sources_changed(ds, record["videos"], since=f"since {ckpt.name} read it")
            changed = [video] if video else []
    finally:
        ds.close()
    if changed:
        raise ActlabError(
            "the demonstrations are not the ones the run was trained on (edited or replaced since)",
            file=path,
            field="demos",
            expected=f"the demonstrations {ckpt.name} recorded (its training_state/state.json)",
            found="; ".join(changed),
            fix="resume with the original demonstrations (--demos PATH; a copy of them is fine), or start a "
            "new --out on these (nothing was trained)",
        )


def say_fewer_demos(path: Any, held: int, asked: int, key: str) -> None:
    """The first ``asked`` episodes are read; a dataset that holds fewer is read whole, and said (it was
    a clamp without a word, and the reward model recorded the number asked as the number read)."""
    if held < asked:
        say(f"note: {path} holds {held} episode(s): {key}={asked} reads all {held}")


@torch.no_grad()
def _episode(cfg: Any, agent: Any, ds: Any, idx: np.ndarray, states: np.ndarray, actions: np.ndarray) -> dict:
    frames = {
        k: torch.from_numpy(ds.read_frames(k, idx)).permute(0, 3, 1, 2).contiguous() for k in agent.image_keys
    }
    state = torch.from_numpy(np.asarray(states, dtype=np.float32))  # (T, 6) deg
    agent.reset()
    steps = []
    resid = []
    for t in range(len(idx)):
        batch = {STATE_KEY: state[t : t + 1], **{k: v[t : t + 1] for k, v in frames.items()}}
        o = agent.observe(batch)  # the base's queue advances exactly as online
        step = {"vec": o["vec"][0]}
        if "img" in o:
            step["img"] = o["img"][0]
        steps.append(step)
        anchor = o["base"][0] if "base" in o else state[t]
        resid.append(
            (
                (torch.from_numpy(np.asarray(actions[t], dtype=np.float32)) - anchor)
                / cfg.env.action_scale_deg
            ).clamp(-1, 1)
        )
    T = len(steps) - 1  # the last frame is the final observation
    rewards = [0.0] * (T - 1) + [1.0]
    return nstep_transitions(steps[:T], steps[T], resid[:T], rewards, True, cfg.sac.gamma, cfg.sac.n_step)
