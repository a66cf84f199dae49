"""The mode to run on the arm: the best measured execution mode of a policy and the exact
``lerobot-rollout`` command that runs it through actlab's LeRobot plugin.

What the plugin can run (lerobot 0.6.1: ``lerobot-rollout`` has two inference engines, ``sync`` and
``rtc``, registered in ``lerobot/rollout/inference/factory.py``):

- ``sync``: every actlab policy; LeRobot calls ``select_action`` (actlab's queue of ``n_action_steps``, as
  ``actlab eval --execution sync``) and the arm waits for each chunk. No extra flags.
- ``rtc``: act_relative trained with ``rtc_max_delay > 0`` (the plugin's ``supports_rtc()``):
  ``--inference.type=rtc --inference.queue_threshold=H - s``, so that a chunk is computed every ``s``
  steps as in the measured cell (docs/lerobot.md: LeRobot computes a chunk when its queue holds at most
  the threshold). LeRobot measures the delay itself and replaces its queue after the committed prefix;
  actlab's rtc also blends the overlap, so the two are not yet the same schedule.
- ``async``, ``blend``, ``ensemble`` under a delay: no engine of ``lerobot-rollout`` runs them yet
  (:data:`NOT_IN_PLUGIN` says why, one line each); the recommendation then names the best mode that can
  run, with McNemar's test of it against the best measured cell on the same seeds.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from actlab.evaluation.sources import PolicySource, source_limits
from actlab.policies.execution import ChunkLimits
from actlab.sim.env import TASK_TEXT
from actlab.utils.stats import paired_compare

NOT_IN_PLUGIN = {
    "async": "lerobot-rollout's engines are sync and rtc; none switches to each new chunk as it arrives",
    "blend": "lerobot-rollout's engines never blend a new chunk's overlap with the old one (its rtc engine "
    "replaces the queue after the committed prefix, for act_relative with rtc_max_delay only)",
    "ensemble": "the plugin's temporal ensembling runs in select_action (the sync engine: an inference "
    "every step while the arm waits), not under a delay",
    "rtc": "the policy was not trained with rtc_max_delay > 0 (the plugin's supports_rtc() is false)",
}
# The arm's robot flags (docs/lerobot.md); the sim robot's line runs as written after the export.
ARM_FLAGS = (
    "--robot.type=so101_follower --robot.port=/dev/ttyACM0 "
    '--robot.cameras="{top: {type: opencv, index_or_path: 0, width: 640, height: 480, fps: 30}, '
    'wrist: {type: opencv, index_or_path: 2, width: 640, height: 480, fps: 30}}"'
)


@dataclass(frozen=True)
class Measured:
    """One measured (policy, mode, delay) cell, as the recommendation reads it."""

    policy: str
    mode: str
    latency: int
    horizon: int
    successes: int
    episodes: int
    boundary_jump: float | None
    outcomes: dict[int, str]  # seed -> outcome


@dataclass(frozen=True)
class Recommendation:
    """The mode for the arm and the commands that run it."""

    policy: str
    mode: str
    latency: int  # the delay the choice was made at (control steps)
    successes: int
    episodes: int
    export: str  # actlab policy export ... (a shell line)
    rollout_sim: str  # lerobot-rollout on the sim robot (a shell line)
    rollout_arm: str  # the same on the SO-101 follower
    flags: str  # the inference flags of the mode ("" for sync)
    best_measured: dict | None = None  # when the best cell cannot run through the plugin: it, why, the test
    note: str | None = None  # what else to know about this mode through the plugin

    def to_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        measured = f"{self.successes}/{self.episodes} solved" if self.episodes else "not measured"
        head = f"recommendation for the arm ({self.policy}, delay {self.latency}): {self.mode}, {measured}"
        lines = [head]
        if self.best_measured is not None:
            b = self.best_measured
            lines.append(
                f"  measured best: {b['mode']} ({b['successes']}/{b['episodes']}), which cannot run through "
                f"the plugin yet: {b['why']}. On the same seeds: {b['test']}"
            )
        if self.note:
            lines.append(f"  note: {self.note}")
        lines += [f"  {self.export}", f"  {self.rollout_sim}", f"  on the arm: {self.rollout_arm}"]
        return "\n".join(lines)


def runnable(mode: str, limits: ChunkLimits) -> str | None:
    """None when ``mode`` runs through the plugin for a policy with ``limits``; else why not."""
    if mode == "sync" or (mode == "rtc" and limits.rtc_max_delay > 0):
        return None
    return NOT_IN_PLUGIN[mode]


def _rank(c: Measured) -> tuple:
    jump = c.boundary_jump if c.boundary_jump is not None else float("inf")
    return (-c.successes / max(1, c.episodes), jump)


def _flags(c: Measured, limits: ChunkLimits) -> str:
    if c.mode == "rtc":
        return f"--inference.type=rtc --inference.queue_threshold={limits.chunk_size - c.horizon}"
    return ""


def recommend(
    src: PolicySource, cells: Sequence[Measured], delay: int | None = None
) -> Recommendation | None:
    """The mode to run ``src`` on the arm from its measured ``cells``; None for a policy the plugin does not
    serve (not an actlab bundle).

    At ``delay`` (default: the longest measured), among the modes measured at that delay, the cell with
    the most successes (ties: the smaller boundary jump) that the plugin can run. When none can, sync (the
    arm waits for each chunk), from its cell when the sweep measured one, saying that the sim's sync cell
    did not pay for the wait. At delay 0 every cell is a candidate."""
    limits = source_limits(src)
    if src.path is None or limits is None or not cells:
        return None
    delay = max(c.latency for c in cells) if delay is None else delay
    at = [c for c in cells if c.latency == delay and (delay == 0 or c.mode != "sync")]
    sync = next((c for c in cells if c.mode == "sync"), None)
    if not at:
        at = [sync] if sync is not None else list(cells)
    best = min(at, key=_rank)
    ok = [c for c in at if runnable(c.mode, limits) is None]
    if not ok and sync is None:  # only modes the plugin cannot run were measured, and no sync cell
        return _unmeasured(src, best, limits, delay)
    chosen = min(ok, key=_rank) if ok else sync
    best_measured = None
    if chosen is not best and (_rank(best) < _rank(chosen) or not ok):
        seeds = sorted(set(best.outcomes) & set(chosen.outcomes))
        pc = paired_compare(
            [best.outcomes[s] == "success" for s in seeds], [chosen.outcomes[s] == "success" for s in seeds]
        )
        best_measured = {
            "mode": best.mode,
            "successes": best.successes,
            "episodes": best.episodes,
            "why": runnable(best.mode, limits),
            "test": pc.sentence(chosen.mode, best.mode),
        }
    rec = _build(src, chosen, limits, best_measured, delay)
    if not ok:
        note = (
            f"no mode measured at delay {delay} runs through the plugin yet, so sync: the arm stops for each "
            "chunk's inference, a wait the sim's sync cell did not pay"
        )
        rec = Recommendation(**{**rec.to_dict(), "note": note})
    return rec


def _commands(src: PolicySource, flags: str) -> tuple[str, str, str]:
    name = Path(str(src.path)).name or "policy"
    export_dir = f"exports/{name}"
    export = f"actlab policy export {shlex.quote(str(src.path))} --to lerobot --out {export_dir}"
    base = f"lerobot-rollout --strategy.type=base --policy.path={export_dir}" + (f" {flags}" if flags else "")
    task = f"--task={shlex.quote(TASK_TEXT)}"
    sim = f"{base} --robot.type=actlab_so101_sim --duration=200 --return_to_initial_position=false {task}"
    arm = f"{base} {ARM_FLAGS} {task} --duration=60"
    return export, sim, arm


def _build(
    src: PolicySource, c: Measured, limits: ChunkLimits, best: dict | None, delay: int
) -> Recommendation:
    flags = _flags(c, limits)
    export, sim, arm = _commands(src, flags)
    note = None
    if c.mode == "rtc":
        note = (
            "LeRobot measures the delay itself (its maximum so far) and replaces its queue after the "
            "committed prefix; actlab's rtc also blends the overlap"
        )
    elif c.mode == "sync":
        note = "sync: the arm waits for each chunk (the sim waited too)"
    return Recommendation(
        policy=src.name,
        mode=c.mode,
        latency=delay,
        successes=c.successes,
        episodes=c.episodes,
        export=export,
        rollout_sim=sim,
        rollout_arm=arm,
        flags=flags,
        best_measured=best,
        note=note,
    )


def _unmeasured(src: PolicySource, best: Measured, limits: ChunkLimits, delay: int) -> Recommendation:
    """Only modes the plugin cannot run were measured: say so, and give sync's commands (unmeasured)."""
    sync = Measured(best.policy, "sync", 0, limits.n_action_steps, 0, 0, None, {})
    rec = _build(src, sync, limits, None, delay)
    why = runnable(best.mode, limits)
    extra = " or rtc" if limits.rtc_max_delay > 0 else ""
    return Recommendation(
        **{
            **rec.to_dict(),
            "note": f"measured only modes the plugin cannot run yet (best: {best.mode}, {best.successes}/"
            f"{best.episodes}: {why}); sync runs through it but was not measured here: measure sync{extra} "
            "(--execution sync,...) to choose from numbers",
        }
    )


def from_cells(cells: Sequence[Any]) -> dict[str, list[Measured]]:
    """Sweep cells (actlab.evaluation.realtime.Cell) grouped per policy."""
    out: dict[str, list[Measured]] = {}
    for c in cells:
        s = c.summary
        m = Measured(
            c.policy, c.mode, c.latency, c.horizon, s.successes, s.episodes, s.boundary_jump, c.outcomes
        )
        out.setdefault(c.policy, []).append(m)
    return out


def from_eval(ev: Any, execution: Any, limits: ChunkLimits | None) -> Measured:
    """One evaluation (results.CheckpointEval) run with ``execution`` (None: sync) as a measured cell."""
    mode = "sync" if execution is None else execution.mode
    latency = 0 if execution is None else execution.latency
    horizon = 1
    if limits is not None:
        horizon = limits.n_action_steps
        if execution is not None and mode != "sync":
            horizon = execution.resolved_horizon(limits.n_action_steps, limits.chunk_size)
    s = ev.summary
    outcomes = {e.seed: e.outcome for e in ev.episodes}
    return Measured(ev.name, mode, latency, horizon, s.successes, s.episodes, s.boundary_jump, outcomes)
