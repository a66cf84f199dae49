"""actlab's sim tasks as gymnasium envs in the shape LeRobot's ``lerobot-eval`` and ``lerobot-train`` read.

LeRobot's rollout (lerobot 0.6.1, envs/utils.py ``preprocess_observation``) turns an env observation
``{"agent_pos": (6,), "pixels": {"top": HWC, "wrist": HWC}}`` into ``observation.state`` and
``observation.images.<camera>``, reads ``is_success`` from the final info, the instruction from
``task_description``, and films ``render()``. :class:`LeRobotSimEnv` gives it exactly that over
``actlab.sim.make_env``; the plugin's ``--env.type=actlab_so101`` config registers one gymnasium id per
task (``actlab_so101/<task>``) that builds it. Every finished episode that LeRobot started with a seed
also gets actlab's outcome (success or the task's failure class) in its final info
(``actlab_outcome``), in the log and, with ``log_file``, as a JSON line. Joint units: ``degrees`` (the
sim's own) or ``so101_follower`` (LeRobot's real follower: the gripper 0-100; actlab.sim.units).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TextIO

import gymnasium as gym
import numpy as np

from actlab.errors import ActlabError
from actlab.evaluation.taxonomy import PhaseRecord, classify
from actlab.sim import FPS, TASKS, make_env
from actlab.utils.config import is_whole

logger = logging.getLogger(__name__)

# The gymnasium namespace of the tasks: ``actlab_so101/so101_pick_place`` and so on.
GYM_NAMESPACE = "actlab_so101"


# The episode log's keys (one JSON object a line, appended by every finished seeded episode).
LOG_KEYS = ("task", "seed", "outcome", "steps")


def check_policy_fits_robot(bundle: str, task: str, units: str, stream: TextIO | None) -> None:
    """The sim robot runs the plugin's policy as `actlab eval` would: a policy trained in other joint units
    is refused, one trained on another task is said. Both ran without a word, a degrees policy read in
    so101_follower units included (25th fault run, lr_robot_units_bad, lr_robot_task_other)."""
    from types import SimpleNamespace

    # lazy: the plugin imports this module at LeRobot start; the bundle's record only with a sim robot
    from actlab.evaluation.seeds import check_trained_units, other_task_warnings

    source = SimpleNamespace(name=Path(bundle).parent.name or bundle, path=bundle)
    try:
        check_trained_units([source], units, option="--robot.units")
    except ActlabError as e:
        raise ActlabError(
            e.problem, file=e.file, field="--robot.units", expected=e.expected, found=e.found,
            fix=f"--robot.units={e.expected} (the units the policy was trained in)",
        ) from None  # fmt: skip
    for line in other_task_warnings([source], task):
        print(
            f"note: {line.replace('(--task ', '(--robot.task=').replace(' evaluates', ' runs')}", file=stream
        )


def refuse_log_inside_output(directory: str | Path, field: str) -> None:
    """Refuse episode logs written into a directory another command wrote (a dataset, a policy export or
    bundle, an evaluation; a training run's directory is allowed): `--robot.output_dir=` the export it
    ran or the dataset it was trained on got episodes.jsonl and episodes.log added, exit 0 (25th fault
    run, lr_robot_outdir_px / _ds)."""
    from actlab.utils.kinds import enclosing_kind  # lazy: the plugin imports this module at LeRobot start

    found = enclosing_kind(directory)
    if found is not None and not found[1].startswith("an actlab training run"):  # (RUN/rollout: allowed)
        raise ActlabError(
            f"{field} lies inside a directory another command wrote: the episode logs would be added to it",
            file=str(directory),
            field=field,
            expected="a directory of its own (LeRobot's outputs/, or a new directory)",
            found=f"{found[0]}: {found[1]}",
            fix=f"choose another {field} (nothing was run or written)",
        )


def check_log_file(
    log_file: str | Path, field: str = "log_file", keys: tuple[str, ...] = LOG_KEYS, create: bool = False
) -> None:
    """Refuse a ``log_file`` the env cannot append its episode lines to without damaging something: a
    directory (IsADirectoryError's traceback at the end of the first episode), or a file that is not an
    episode log of this env (a dataset's meta/info.json got a JSON line appended, exit 0: the dataset
    unreadable). A new file, an empty one or an earlier log of the env is fine. ``keys``: what each line
    of an earlier log holds (the env's, or the simulated robot's). ``create``: also open it for appending
    now (its directories made), where the episodes are about to run: a place no file can be written to
    (/proc, a read-only disk) was FileNotFoundError's traceback at the first episode's end (22nd fault
    run); a config's check at parse time leaves this to the constructor."""
    path = Path(log_file)
    fix = f"pass {field}=<a new .jsonl file> (or an episode log this env wrote, to add to it)"
    refuse_log_inside_output(path.parent, field)
    if path.is_dir():
        raise ActlabError(
            "the episode log is a directory", file=path, field=field, expected="a JSONL file", fix=fix
        )
    if create:
        appendable(path, field, fix)
    if not path.exists():
        return
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ActlabError(
            "cannot read the episode log to append to it",
            file=path,
            field=field,
            found=f"{type(e).__name__}: {e}",
            fix=fix,
        ) from e
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if not isinstance(row, dict) or not set(keys) <= row.keys():
            raise ActlabError(
                "the episode log is a file this env did not write: appending to it would change it",
                file=path,
                field=field,
                expected=f"a JSONL file of episodes (each line an object with {', '.join(keys)})",
                found=f"line {i + 1}: {line[:80]}",
                fix=fix,
            )


def appendable(path: Path, field: str, fix: str) -> None:
    """Make ``path``'s directories and open it for appending (a new file is left empty), or refuse."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as e:
        raise log_write_error(path, field, e, fix) from None


def log_write_error(path: Path, field: str, e: OSError, fix: str) -> ActlabError:
    """An episode log (or its directory) that cannot be written, in actlab's words."""
    return ActlabError(
        "cannot write the episode log",
        file=path,
        field=field,
        expected="a file in a writable directory",
        found=f"{type(e).__name__}: {e.strerror or e}",
        fix=fix,
    )


def append_line(path: Path, line: str, field: str) -> None:
    """Append one line to an episode log; a write that fails (a full disk, the file removed with its
    directory made read-only) is actlab's error, not OSError's traceback."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    except OSError as e:
        raise log_write_error(
            path, field, e, f"free space at {path.parent}, or pass {field}=<a writable file>"
        ) from None


def check_env_settings(max_steps: object, fps: object, cameras: object, field_prefix: str = "") -> None:
    """Refuse settings of the env the sim cannot honour, named as the caller's fields (``--env.``): an
    episode_length 0 was the sim's "max_steps must be at least 1" (a field the user never set), an fps
    other than the sim's was ignored without a word (its rollout ran and LeRobot's videos were written at
    30 Hz), no camera was "the observation has no camera" with a fix about the robot."""
    checks = [
        (
            "episode_length",
            is_whole(max_steps) and 1 <= max_steps <= 10**7,
            "a whole number of control steps from 1 to 10000000",
            max_steps,
        ),
        ("fps", fps == FPS and not isinstance(fps, bool), f"{FPS}: the sim's control rate (fixed)", fps),
        (
            "camera_names",
            isinstance(cameras, (list, tuple))
            and len(cameras) > 0
            and all(c in ("top", "wrist") for c in cameras)
            and len(set(cameras)) == len(cameras),
            "one or both of top, wrist, each once",
            cameras,
        ),
    ]
    for name, ok, expected, found in checks:
        if not ok:
            raise ActlabError(
                f"invalid setting of the actlab sim env: {field_prefix}{name}",
                field=f"{field_prefix}{name}",
                expected=expected,
                found=found,
                fix=f"pass {field_prefix}{name}=<{expected.split(':')[0]}> (or leave it out for its default)",
            )


class LeRobotSimEnv(gym.Env):
    """One actlab sim task with LeRobot's observation keys (see the module docstring)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": FPS}

    def __init__(
        self,
        task: str = "so101_pick_place",
        image_size: int = 96,
        cameras: tuple[str, ...] | list[str] = ("top", "wrist"),
        max_steps: int = 300,
        units: str = "degrees",
        log_file: str = "",
        render_mode: str | None = "rgb_array",
    ) -> None:
        check_env_settings(max_steps, FPS, list(cameras), "")
        if log_file:
            check_log_file(log_file, create=True)
        self.env = make_env(
            task, image_size=image_size, cameras=tuple(cameras), max_steps=max_steps, units=units
        )
        self.task_name = task
        self.render_mode = render_mode
        inner = self.env.observation_space
        pixels = {cam: inner[f"observation.images.{cam}"] for cam in cameras}
        self.observation_space = gym.spaces.Dict(
            {"agent_pos": inner["observation.state"], "pixels": gym.spaces.Dict(pixels)}
        )
        self.action_space = self.env.action_space
        self.log_file = Path(log_file) if log_file else None
        self._infos: list[dict] = []
        self._seed: int | None = None
        self.episodes: list[dict] = []  # finished seeded episodes: seed, outcome, steps

    @property
    def task_description(self) -> str:
        """The task's instruction (LeRobot hands it to language-conditioned policies)."""
        return self.env.task

    @property
    def task(self) -> str:
        """The same instruction under LeRobot's other name: lerobot-eval asks every env for both, and in
        an AsyncVectorEnv (--eval.batch_size > 1) the missing one was an AttributeError that shut the
        workers down, a traceback (25th fault run, le_exec_async)."""
        return self.env.task

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        # LeRobot's own options (its new-rollout marker) are not the env's cube placement options
        obs, _ = self.env.reset(seed=seed)
        self._infos, self._seed = [], seed
        return self._obs(obs), {"is_success": False}

    def step(self, action) -> tuple[dict, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(np.asarray(action, dtype=np.float64))
        self._infos.append(info)
        out = {"is_success": bool(info["is_success"])}
        if terminated or truncated:
            out["actlab_outcome"] = self._finish()
        return self._obs(obs), reward, terminated, truncated, out

    def render(self) -> np.ndarray:
        """The overhead camera at the observation size (LeRobot's rollout videos)."""
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def _obs(self, obs: dict) -> dict:
        pixels = {k.rsplit(".", 1)[-1]: v for k, v in obs.items() if k.startswith("observation.images.")}
        return {"agent_pos": obs["observation.state"], "pixels": pixels}

    def _finish(self) -> str:
        outcome = classify(PhaseRecord.from_infos(self._infos)).outcome
        if self._seed is None:  # a vector env's automatic reset after a finished rollout: not an episode
            return outcome
        record = {
            "task": self.task_name,
            "seed": int(self._seed),
            "outcome": outcome,
            "steps": len(self._infos),
        }
        self.episodes.append(record)
        logger.info(
            "actlab_so101 %s seed %d: %s after %d steps",
            self.task_name,
            self._seed,
            outcome,
            len(self._infos),
        )
        if self.log_file is not None:
            append_line(self.log_file, json.dumps(record), "log_file")
        return outcome


def register_gym_ids() -> list[str]:
    """Register ``actlab_so101/<task>`` with gymnasium for every sim task (again: a no-op); the ids."""
    ids = []
    for name in TASKS:
        gym_id = f"{GYM_NAMESPACE}/{name}"
        if gym_id not in gym.registry:
            gym.register(id=gym_id, entry_point=LeRobotSimEnv, kwargs={"task": name})
        ids.append(gym_id)
    return ids


__all__ = ["GYM_NAMESPACE", "LeRobotSimEnv", "register_gym_ids"]
