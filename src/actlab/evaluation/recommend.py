"""The mode to run on the arm: the best measured execution mode of a policy and the exact
``lerobot-rollout`` command that runs it through actlab's LeRobot plugin.

Every mode ``actlab eval --execution`` measures runs through the plugin with the same actions
(docs/lerobot.md, "actlab's execution modes"): ``sync`` is the plugin's ``select_action`` (actlab's queue
of ``n_action_steps``; no extra flags), and ``async`` / ``ensemble`` / ``blend`` / ``rtc`` are
``--policy.execution=MODE --policy.execution_latency=D --policy.execution_horizon=S``, actlab's own chunk
executor behind lerobot-rollout's default (sync) inference engine, which calls ``select_action`` every
control step: the first chunk before the clock starts, an inference every S steps from that step's
observation in a worker thread while the arm executes the previous chunk, its chunk used from D steps
after its start. So the recommendation is the best measured cell, whatever its mode.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from actlab.evaluation.envs import EnvSpec
from actlab.evaluation.sources import PolicySource, source_inputs, source_limits, spec_for_inputs
from actlab.policies.execution import PLUGIN_FIELDS, ChunkLimits
from actlab.sim.tasks import TASKS

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
    flags: str  # the plugin's execution flags of the mode ("" for sync)
    note: str | None = None  # what else to know about this mode on the arm

    def to_dict(self) -> dict:
        return asdict(self)

    def text(self) -> str:
        measured = f"{self.successes}/{self.episodes} solved" if self.episodes else "not measured"
        head = f"recommendation for the arm ({self.policy}, delay {self.latency}): {self.mode}, {measured}"
        lines = [head]
        if self.note:
            lines.append(f"  note: {self.note}")
        lines += [f"  {self.export}", f"  {self.rollout_sim}", f"  on the arm: {self.rollout_arm}"]
        return "\n".join(lines)


def _rank(c: Measured) -> tuple:
    jump = c.boundary_jump if c.boundary_jump is not None else float("inf")
    return (-c.successes / max(1, c.episodes), jump)


def plugin_flags(mode: str, latency: int, horizon: int) -> str:
    """The lerobot-rollout flags that run a measured (mode, delay, horizon) cell through the plugin: ""
    for sync (the plugin's select_action), else actlab's executor with the cell's delay and horizon."""
    if mode == "sync":
        return ""
    values = {"mode": mode, "latency": latency, "horizon": horizon}
    return " ".join(f"--policy.{PLUGIN_FIELDS[k]}={v}" for k, v in values.items())


def recommend(
    src: PolicySource, cells: Sequence[Measured], delay: int | None = None, env: EnvSpec | None = None
) -> Recommendation | None:
    """The mode to run ``src`` on the arm from its measured ``cells``; None for a policy the plugin does not
    serve (not an actlab bundle) or cells measured in a peer environment (not the SO-101). ``env``: what
    the cells ran (default: the pick-and-place task); the commands run that task, in the sim and on the
    arm, with its units.

    At ``delay`` (default: the longest measured), among the modes measured at that delay, the cell with
    the most successes (ties: the smaller boundary jump); at delay 0 every cell (sync included) is a
    candidate. With no cell at that delay: the sync cell, else the best of all."""
    env = env or EnvSpec()
    limits = source_limits(src)
    if src.path is None or limits is None or not cells or env.task not in TASKS:
        return None
    delay = max(c.latency for c in cells) if delay is None else delay
    at = [c for c in cells if c.latency == delay and (delay == 0 or c.mode != "sync")]
    sync = next((c for c in cells if c.mode == "sync"), None)
    if not at:
        at = [sync] if sync is not None else list(cells)
    best = min(at, key=_rank)
    rec = _build(src, best, limits, delay, env)
    said = []
    if delay > 0 and best.mode != "sync" and len({c.mode for c in at}) == 1:
        # Why: a sweep of one mode "recommends" it whatever it scored; the user must know nothing was
        # weighed against it (a head trained alone scored 107/200 at delay 8, plain async 132).
        said.append(
            f"{best.mode} is the only mode measured at delay {delay}: nothing was weighed against it "
            f"(measure it beside others: --execution {','.join(dict.fromkeys(['sync', 'async', best.mode]))} "
            f"--latency {delay})"
        )
    horizons = sorted({c.horizon for c in at if c.mode == best.mode})
    if len(horizons) > 1:  # --horizon 8,10: the horizon was chosen too, the same way
        listed = ", ".join(map(str, horizons))
        said.append(f"horizon {best.horizon}: the best of {listed} measured for {best.mode} at delay {delay}")
    if (
        sync is not None
        and best is not sync
        and sync.successes * max(1, best.episodes) > (best.successes * max(1, sync.episodes))
    ):
        said.append(f"sync solved more ({sync.successes}/{sync.episodes}): this delay still costs success")
    if said:
        rec = replace(rec, note="; ".join([*([rec.note] if rec.note else []), *said]))
    return rec


def _commands(src: PolicySource, flags: str, env: EnvSpec) -> tuple[str, str, str]:
    """The export and the two rollouts. The sim robot runs the task the cells ran (``--robot.task``, its
    units), and both rollouts say that task's instruction: a so101_push evaluation's commands ran the
    sim's pick-and-place and told the policy "pick the cube and place it in the bowl"."""
    name = Path(str(src.path)).name or "policy"
    export_dir = f"exports/{name}"
    export = f"actlab policy export {shlex.quote(str(src.path))} --to lerobot --out {export_dir}"
    base = f"lerobot-rollout --strategy.type=base --policy.path={export_dir}" + (f" {flags}" if flags else "")
    task = f"--task={shlex.quote(TASKS[env.task].env.task_text)}"
    robot = "--robot.type=actlab_so101_sim"
    if env.task != EnvSpec().task:
        robot += f" --robot.task={env.task}"
    units = env.env_kwargs.get("units")
    if units is not None and units != "degrees":
        robot += f" --robot.units={units}"
    # The sim robot renders at the policy's own camera size, as the measured cells did: at the robot's
    # default (96 px) the plugin resized a larger render to an 80 px policy, other pixels than measured.
    size = spec_for_inputs(env, source_inputs(src)).image_size
    if size is not None:
        robot += f" --robot.image_size={size}"
    sim = f"{base} {robot} --duration=200 --return_to_initial_position=false {task}"
    arm = f"{base} {ARM_FLAGS} {task} --duration=60"
    return export, sim, arm


def _build(src: PolicySource, c: Measured, limits: ChunkLimits, delay: int, env: EnvSpec) -> Recommendation:
    flags = plugin_flags(c.mode, c.latency, c.horizon)
    export, sim, arm = _commands(src, flags, env)
    if c.mode == "sync":
        note = "sync: the arm waits for each chunk (the sim waited too)"
    else:
        note = (
            f"the plugin runs actlab's executor in select_action: an inference every {c.horizon} steps in a "
            f"worker thread, its chunk used {c.latency} steps after it started, as measured; an inference "
            f"slower than {c.latency} steps at the robot's fps makes the arm wait for it (time it on the "
            "robot's computer: actlab eval --latency measured)"
        )
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
        note=note,
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
