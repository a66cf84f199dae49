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
- :func:`rollout_execution`: the plugin's ``execution`` fields (``--policy.execution=blend
  --policy.execution_latency=D ...``) -> actlab's :class:`~actlab.policies.execution.ChunkExecutor` behind
  LeRobot's per-step ``select_action`` (:class:`RolloutExecution`): the action sequence ``actlab eval
  --execution MODE --latency D`` executes, each inference in a worker thread while the arm moves.
- :class:`SimEpisodes`: actlab's MuJoCo pick-and-place behind a continuous robot stream: clipped joint
  targets, episodes restarted from new seeds on success or time limit, each episode's outcome and
  failure class appended to a JSONL file and a text log under the rollout's output directory
  (:func:`default_output_dir` when none is given), and said on stderr in one line with a prefix of its
  own (:data:`EPISODE_PREFIX`) that LeRobot's per-step warnings do not share.
"""

from __future__ import annotations

import datetime
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from actlab.errors import ActlabError
from actlab.sim.units import check_units
from actlab.utils.config import is_number, unknown_name_error

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
# The sim robot's per-episode line on stderr starts with this: under load LeRobot's rollout loop warns
# "slower than the target FPS" every few steps (1,359 warnings in 200 s were measured), and the episodes'
# own log lines were lost among them; `grep '^>>> actlab_so101_sim'` finds them all.
EPISODE_PREFIX = ">>> actlab_so101_sim:"
# Files of a sim robot's output directory: one JSON line per episode, and the same lines as stderr's.
EPISODE_LOG = "episodes.jsonl"
EPISODE_TEXT_LOG = "episodes.log"
# What every line of the simulated robot's episode log holds (an earlier log it may append to)
ROBOT_LOG_KEYS = ("episode", "seed", "outcome", "steps")


def default_output_dir(now: datetime.datetime | None = None) -> Path:
    """Where a sim robot writes when no output directory is given: ``outputs/rollout/DATE/TIME_
    actlab_so101_sim``, dated like lerobot-eval's ``outputs/eval/DATE/TIME_...`` (``outputs/`` is
    LeRobot's output root and ignored by git in LeRobot's and actlab's repositories; the log used to land
    in the current directory, the repository root)."""
    now = now or datetime.datetime.now()
    return Path(
        "outputs", "rollout", now.strftime("%Y-%m-%d"), now.strftime("%H-%M-%S") + "_actlab_so101_sim"
    )


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


def plugin_flag(text: str) -> str:
    """actlab eval's real-time flags in ``text`` as the plugin's: ``--latency 4`` -> ``--policy.
    execution_latency=4`` (actlab's checks name eval's flags; the plugin's errors name lerobot-rollout's)."""
    from actlab.policies.execution import EVAL_FLAGS, PLUGIN_FIELDS  # lazy: loads with a policy

    fields = {EVAL_FLAGS[k]: PLUGIN_FIELDS[k] for k in EVAL_FLAGS}
    # a value is a number, a placeholder (N) or a mode: "leave --horizon out" was "--policy.
    # execution_horizon=out", a value the flag refuses
    value = r"( (\d+|[A-Z]|sync|async|ensemble|blend|rtc|correct)\b)?"
    pattern = "(" + "|".join(map(re.escape, fields)) + r")\b" + value
    return re.sub(
        pattern, lambda m: f"--policy.{fields[m.group(1)]}" + (f"={m.group(3)}" if m.group(3) else ""), text
    )


def rollout_execution(
    policy: Any,
    fields: Mapping[str, Any],
    background: bool = True,
    config_file: str | Path | None = None,
    argv: Sequence[str] = (),
) -> RolloutExecution | None:
    """The executor the plugin runs in ``select_action`` for its config ``fields`` (keys: the values of
    ``PLUGIN_FIELDS``, ``execution``, ``execution_latency``, ``execution_horizon``), checked against
    ``policy`` as ``actlab eval --execution/--latency/--horizon`` checks it; None for sync (actlab's own
    ``select_action``). A setting the policy cannot run is actlab's error with the plugin's flag names.

    ``config_file``: the export's config.json the fields were read from, ``argv``: the command line. A
    refused value that the command line does not give came from that file: the error names it (an
    export's config.json holding `"execution": "warp"` was refused as if `--policy.execution` had been
    typed, a flag the command line did not have; 22nd fault run)."""
    # lazy: the plugin imports this module at LeRobot start; the execution model loads with a policy
    from actlab.policies.execution import PLUGIN_FIELDS, ChunkLimits, ExecutionSpec, check_execution

    # Only a field left out (None) takes its default: `--policy.execution=` (an empty value, a script's
    # `--policy.execution=$MODE` with MODE unset) ran sync without a word (22nd fault run)
    mode, latency = fields.get(PLUGIN_FIELDS["mode"]), fields.get(PLUGIN_FIELDS["latency"])
    try:
        spec = ExecutionSpec(
            mode="sync" if mode is None else mode,
            latency=0 if latency is None else latency,
            horizon=fields.get(PLUGIN_FIELDS["horizon"]),
        )
        if spec.mode == "sync":
            return None
        check_execution(spec, ChunkLimits.from_config(policy.config))
    except ActlabError as e:
        # ExecutionSpec names its field "execution" / "latency" / "horizon", check_execution eval's flag
        setting = {"execution": "mode"}.get(str(e.field).lstrip("-"), str(e.field).lstrip("-"))
        field = f"--policy.{PLUGIN_FIELDS[setting]}" if setting in PLUGIN_FIELDS else e.field
        if config_file is not None and setting in PLUGIN_FIELDS and not _on_command_line(field, argv):
            raise ActlabError(
                "invalid execution setting in the export's config.json"
                + ("" if e.problem == "invalid execution setting" else f": {plugin_flag(e.problem)}"),
                file=config_file,
                field=f"{PLUGIN_FIELDS[setting]} (the command line has no {field})",
                expected=plugin_flag(str(e.expected)) if e.expected is not None else None,
                found="'' (an empty value)" if e.found == "" else e.found,
                fix=f"give {field}=VALUE on the command line (it overrides the file), or restore "
                f"{PLUGIN_FIELDS[setting]} in {config_file} (an export writes execution: sync, "
                "execution_latency: 0, execution_horizon: null)",
            ) from e
        raise ActlabError(
            # the plugin's setting, not a command's: the same check runs in lerobot-train, lerobot-eval and
            # lerobot-rollout (a train or eval refusal named lerobot-rollout)
            "invalid --policy.execution setting"
            + ("" if e.problem == "invalid execution setting" else f": {plugin_flag(e.problem)}"),
            field=field,
            expected=plugin_flag(str(e.expected)) if e.expected is not None else None,
            found="'' (an empty value)" if e.found == "" else e.found,
            fix=plugin_flag(e.fix) if e.fix else None,
        ) from e
    return RolloutExecution(policy, spec, background=background)


def _on_command_line(flag: str, argv: Sequence[str]) -> bool:
    """Whether ``argv`` gives ``flag`` (``--policy.x=V`` or ``--policy.x V``)."""
    return any(a == flag or a.startswith(flag + "=") for a in argv)


class RolloutExecution:
    """actlab's chunk executor behind LeRobot's per-step ``select_action``.

    lerobot-rollout's sync engine calls ``select_action`` once per control step with that step's
    observation; this answers with the action :class:`~actlab.policies.execution.ChunkExecutor` gives
    for the step, so a run executes the actions ``actlab eval --execution MODE --latency D --horizon S``
    executes on the same observations: the first chunk before the clock starts, an inference every S
    steps from that step's observation, its chunk used from D steps later (blended, ensembled or
    prefixed as the mode says). With ``background`` the inference runs in a worker thread while the
    robot executes the previous chunk; its chunk is waited for at its arrival step only. One robot is a
    batch of 1; ``lerobot-eval --eval.batch_size=B`` steps B envs together, each row with its own clock
    (the executor is made for the batch size it first sees, and again when that changes).
    """

    def __init__(self, policy: Any, spec: Any, background: bool = True) -> None:
        # lazy: loads with a policy (see rollout_execution)
        from actlab.policies.execution import ChunkLimits

        self.policy, self.spec, self.background = policy, spec, background
        self.limits = ChunkLimits.from_config(policy.config)
        self.executor: Any = None  # ChunkExecutor for self.batch rows, made at the first step
        self.batch = 0

    def reset(self) -> None:
        """A new episode: the next step computes a first chunk (an inference in flight is waited for)."""
        if self.executor is not None:
            self.executor.restart()

    def select_action(self, obs: Mapping[str, Any]) -> Any:
        """The action (B, A) of this control step for the batched observation ``obs``."""
        batch = int(next(iter(obs.values())).shape[0])
        if self.executor is None or batch != self.batch:
            from actlab.policies.execution import ChunkExecutor  # lazy: as in __init__

            self.close()
            self.executor = ChunkExecutor(
                self.policy, self.spec, self.limits, batch, background=self.background
            )
            self.batch = batch
        return self.executor.step(lambda: obs)

    def close(self) -> None:
        """End the executor's worker thread (after an inference in flight)."""
        if self.executor is not None:
            self.executor.close()


# The fields a plugin config.json holds twice, as LeRobot's own and inside actlab_config: both must state
# what the shipped weights were trained with.
CHUNK_FIELDS = ("chunk_size", "n_action_steps", "n_obs_steps")


def check_export_config(
    top: Mapping[str, Any],
    model: Mapping[str, Any],
    file: str | Path,
    written: Mapping[str, Any] | None = None,
) -> None:
    """Refuse a LeRobot export whose ``config.json`` (``top``: its ``type``, ``chunk_size``,
    ``n_action_steps``, ``n_obs_steps`` and the ``actlab_config`` it carries) disagrees with the config
    of the model it ships (``model``: the actlab bundle's, whose weights and digests decide what runs). An
    edited ``chunk_size`` / ``n_action_steps`` loaded and ran with the model executing its own values, LeRobot
    believing the edited ones.

    ``written``: the content of ``file`` itself, where ``top`` is the config LeRobot parsed (the file plus
    the command line's ``--policy.*``, or a resumed run's train_config.json). A value the file does not
    hold came from there: it is named as such (it was refused with "restore config.json", an edit that was
    never made)."""
    model = json.loads(json.dumps(dict(model), default=str))  # tuples as the lists config.json holds
    declared = top.get("type")
    if declared is not None:
        from actlab.lerobot.export import PLUGIN_TYPES  # lazy: export imports the policies

        shipped = PLUGIN_TYPES.get(str(model.get("type")), model.get("type"))
        if declared != shipped:  # an act_relative export of act weights loaded and imported without a word
            raise ActlabError(
                "the export's config.json declares another policy type than the model it ships",
                file=file,
                field="type",
                expected=f"{shipped!r} (the shipped bundle's type {model.get('type')!r})",
                found=repr(declared),
                fix="restore config.json (or export again: actlab policy export BUNDLE --to lerobot)",
            )
    inner = top.get("actlab_config")
    if inner is not None and not isinstance(inner, dict):  # a list was dict()'s TypeError traceback (23rd)
        raise ActlabError(
            "the export's actlab_config is not an object of config keys",
            file=file,
            field="actlab_config",
            expected="an object: the shipped weights' config, key by key",
            found=f"{type(inner).__name__}: {json.dumps(inner, default=str)[:80]}",
            fix="restore config.json (or export again: actlab policy export BUNDLE --to lerobot)",
        )
    wanted = json.loads(json.dumps(dict(inner or {}), default=str))
    for key in CHUNK_FIELDS:
        if key in top and top[key] != model.get(key, top[key]):
            wanted[key] = top[key]  # an edit of the top-level key, wherever actlab_config agrees
    # a key the shipped config does not have (a typo'd edit, `chunk_sise: 20`) was dropped without a word
    # at load and import, exit 0 (22nd fault run): only a key of the shipped config can have been written
    unknown = sorted(k for k in wanted if k not in model and k != "type")
    if unknown:
        raise unknown_name_error(
            "actlab_config key",
            unknown[0],
            [k for k in model if k != "type"],
            fix=f"remove {', '.join(unknown)} from actlab_config in {file} (restore config.json, or export "
            "again: actlab policy export BUNDLE --to lerobot); the shipped weights' config has no such key",
        )
    changed = {k: (v, model[k]) for k, v in wanted.items() if k in model and k != "type" and v != model[k]}
    if changed and written is not None:
        on_disk = dict(written.get("actlab_config") or {})
        on_disk.update({k: written[k] for k in CHUNK_FIELDS if k in written})
        given = {k: v for k, (v, _) in changed.items() if on_disk.get(k, model.get(k)) != v}

        def flag(key: str) -> str:
            top_level = key in CHUNK_FIELDS
            return f"--policy.{key}" if top_level else f"--policy.actlab_config {key}"

        if given and len(given) == len(changed):
            raise ActlabError(
                "a trained policy's "
                + ", ".join(given)
                + " cannot be changed when it is loaded: its weights were trained with its own values",
                file=file,
                field=", ".join(flag(k) for k in given),
                expected="the values of the shipped weights (config.json holds them): "
                + ", ".join(f"{k}={model[k]!r}" for k in given),
                found=", ".join(f"{k}={v!r}" for k, v in given.items())
                + " (from the command line, or the policy section of a resumed run's train_config.json)",
                fix="drop "
                + " and ".join(flag(k) for k in given)
                + " (or restore train_config.json); to run other values, set them in actlab, train and "
                "export that bundle",
            )
    if changed and _bundle_config_edited(Path(file).parent):
        # the bundle's own config.json is what changed (its recorded sha256 differs): the words blamed the
        # export's config.json and named the edited value as the weights' (25th fault run)
        inner_file = Path(file).parent / "actlab_bundle" / "config.json"
        raise ActlabError(
            "the export's actlab_bundle/config.json was edited after the export was written: it disagrees "
            "with the export's config.json",
            file=inner_file,
            field=", ".join(changed),
            expected="the exported values (the export's config.json holds them): "
            + ", ".join(f"{k}={v!r}" for k, (v, _) in changed.items()),
            found=", ".join(f"{k}={m!r}" for k, (_, m) in changed.items()),
            fix=f"restore {inner_file} from a copy of the export, or export again (actlab policy export "
            "BUNDLE --to lerobot); to run other values, set them in actlab and export that bundle",
        )
    if changed:
        raise ActlabError(
            "the export's config.json disagrees with the model it ships",
            file=file,
            field=", ".join(changed),
            expected="the values of the shipped weights: "
            + ", ".join(f"{k}={m!r}" for k, (_, m) in changed.items()),
            found=", ".join(f"{k}={v!r}" for k, (v, _) in changed.items()),
            fix="restore config.json (or export again: actlab policy export BUNDLE --to lerobot); the "
            "weights cannot follow an edit: to run other values, set them in actlab and export that bundle",
        )


def _bundle_config_edited(root: Path) -> bool:
    """Whether ``root/actlab_bundle/config.json`` differs from the sha256 its actlab.json records."""
    from actlab.datasets.checksums import sha256  # lazy: only a refusal reads it
    from actlab.utils.kinds import recorded_digests  # lazy: the plugin imports this module at LeRobot start

    bundle = root / "actlab_bundle"
    want = (recorded_digests(bundle) or {}).get("config.json")
    try:
        return isinstance(want, str) and sha256(bundle / "config.json") != want
    except OSError:
        return False


# The processor files of a plugin export or checkpoint, and the (un)normalizer step each must hold:
# LeRobot 0.6.1's lerobot-train overrides those steps by name on --resume and --policy.path.
PLUGIN_PROCESSORS = {
    "policy_preprocessor.json": "normalizer_processor",
    "policy_postprocessor.json": "unnormalizer_processor",
}


def check_export_processors(root: str | Path) -> None:
    """Refuse a plugin export (or lerobot-train checkpoint) whose processor files would not pass
    everything through to actlab's policy, which normalizes inside with its bundle's statistics.

    LeRobot loads these files itself, after the policy: an (un)normalizer step edited to MEAN_STD with a
    state file of statistics normalized the state (or unnormalized the actions) a second time in
    lerobot-eval and lerobot-rollout without a word; a step removed, a state file named that is not
    there, a file missing or not JSON ended in LeRobot's KeyError ("Override keys ... do not match any
    step"), FileNotFoundError or JSONDecodeError tracebacks."""
    from actlab.utils.io import read_json  # lazy: the plugin imports this module at LeRobot start

    root = Path(root)
    fix = (
        "restore the file from a copy, or export again (actlab policy export BUNDLE --to lerobot --out DIR): "
        "actlab's policy normalizes inside, so LeRobot's (un)normalizer steps pass everything through "
        "(IDENTITY, no statistics)"
    )
    for name, required in PLUGIN_PROCESSORS.items():
        file = root / name
        data = read_json(file, "LeRobot processor pipeline", fix=fix)
        steps = data.get("steps")
        if not isinstance(steps, list) or not all(isinstance(x, Mapping) for x in steps):
            raise ActlabError(
                "the processor file is damaged (edited?)",
                file=file,
                field="steps",
                expected="a list of steps {registry_name, config}",
                found=repr(steps)[:120],
                fix=fix,
            )
        names = [x.get("registry_name") for x in steps]
        if required not in names:
            # an export or lerobot-train checkpoint of actlab before 2026-11-29 has no such step (an edit
            # neither): its bundle exports again with them
            raise ActlabError(
                f"the processor file has no {required} step (written by an actlab before 2026-11-29, or "
                "edited)",
                file=file,
                field="steps",
                expected=f"{required} among the steps (lerobot-train replaces it by name on --resume and "
                "--policy.path)",
                found=", ".join(map(str, names)) or "no steps",
                fix=f"export again: actlab policy import {root} --out BUNDLE, then actlab policy export "
                "BUNDLE --to lerobot --out DIR (the same weights, with the steps)",
            )
        for i, step in enumerate(steps):
            config = step.get("config") if isinstance(step.get("config"), Mapping) else {}
            if step.get("registry_name") in PLUGIN_PROCESSORS.values():
                modes = config.get("norm_map") or {}
                other = (
                    {k: v for k, v in modes.items() if v != "IDENTITY"}
                    if isinstance(modes, Mapping)
                    else modes
                )
                if other:
                    raise ActlabError(
                        f"the processor file's {step.get('registry_name')} would normalize a second time",
                        file=file,
                        field=f"steps[{i}].config.norm_map",
                        expected="IDENTITY for every feature type (actlab's policy normalizes inside)",
                        found=repr(other)[:120],
                        fix=fix,
                    )
            state = step.get("state_file")
            if state is not None and not (isinstance(state, str) and (root / state).is_file()):
                raise ActlabError(
                    "the processor file names a state file that is not there",
                    file=file,
                    field=f"steps[{i}].state_file",
                    expected=f"a file beside {name}",
                    found=repr(state)[:120],
                    fix=fix,
                )


def check_plugin_bundle(root: Path, kind: str | None, what: str) -> None:
    """Refuse a checkpoint of actlab's LeRobot plugin (an export, a lerobot-train run of its types) whose
    ``actlab_bundle/`` is missing: the plugin's weights live only there. "policy bundle directory not
    found, fix: check the path" named a directory the user never made and a fix that could not work (the
    import since the 19th run; LeRobot's load of the export, lerobot-eval / lerobot-rollout and the
    bridge, until the 22nd). ``what``: what the caller cannot do without it."""
    from actlab.lerobot.export import PLUGIN_BUNDLE, check_exported_bundle  # lazy: imports the policies

    if (root / PLUGIN_BUNDLE).is_dir():
        check_exported_bundle(root, PLUGIN_BUNDLE)
        return
    raise ActlabError(
        f"a checkpoint of actlab's LeRobot plugin ({kind}) keeps its weights in {PLUGIN_BUNDLE}/, which "
        f"is missing: {what}",
        file=root / PLUGIN_BUNDLE,
        expected=f"{PLUGIN_BUNDLE}/ beside config.json (what actlab policy export writes)",
        found="missing" if not (root / PLUGIN_BUNDLE).exists() else "not a directory",
        fix="export the actlab bundle again (actlab policy export BUNDLE --to lerobot --out NEW), or restore "
        "the directory from a copy",
    )


def check_export_features(
    inputs: Mapping[str, Any], outputs: Mapping[str, Any], model: Any, file: str | Path
) -> None:
    """Refuse a LeRobot export whose ``config.json`` declares ``input_features`` / ``output_features``
    (LeRobot's PolicyFeature objects, or their JSON ``{"type", "shape"}``) other than the model it ships
    takes and gives: an edited camera size or action size loaded and ran, the plugin resizing to the
    trained size and sending the trained number of actions, LeRobot believing the edited ones."""

    def shapes(features: Mapping[str, Any]) -> dict[str, list[int]]:
        out = {}
        for key, f in (features or {}).items():
            shape = f.get("shape") if isinstance(f, Mapping) else getattr(f, "shape", None)
            out[str(key)] = [int(x) for x in shape] if isinstance(shape, (list, tuple)) else shape
        return out

    shipped = {"observation.state": [int(model.state_dim)]}
    shipped.update({k: [int(x) for x in model.image_shapes[k]] for k in model.camera_keys})
    for what, declared, wanted in (
        ("input_features", shapes(inputs), shipped),
        ("output_features", shapes(outputs), {"action": [int(model.action_dim)]}),
    ):
        if declared != wanted:
            differ = sorted(k for k in set(declared) | set(wanted) if declared.get(k) != wanted.get(k))
            raise ActlabError(
                "the export's config.json declares other inputs or outputs than the model it ships",
                file=file,
                field=f"{what}: {', '.join(differ)}",
                expected=", ".join(f"{k} {wanted.get(k)}" for k in differ) + " (the shipped weights')",
                found=", ".join(f"{k} {declared.get(k)}" for k in differ),
                fix="restore config.json (or export again: actlab policy export BUNDLE --to lerobot); the "
                "weights cannot follow an edit"
                + (
                    "; the plugin resizes a camera's frames to the trained size itself"
                    if what[0] == "i"
                    else ""
                ),
            )


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
    # the actlab bundle the plugin loaded (set at its load, before LeRobot connects the robot): the sim
    # robot checks its --robot.task / --robot.units against what the bundle was trained on
    policy_bundle: str | None = None


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
    # mean |third difference| of the commanded joint targets (before clipping), actlab eval's "jerk" of
    # the same episode: equal when the same actions ran (None under 4 steps)
    jerk: float | None = None

    def line(self) -> str:
        lift = "-" if self.max_lift_m is None else f"{self.max_lift_m * 100:.1f} cm"
        return (
            f"actlab_so101_sim: episode {self.episode} seed {self.seed}: {self.outcome} after {self.steps} "
            f"steps ({self.wall_s:.1f} s, max lift {lift})"
        )


class SimEpisodes:
    """actlab's pick-and-place env as an endless robot: ``observe()`` / ``act(action)``.

    An episode ends on success (the cube rests in the bowl) or after ``max_steps``; its outcome is
    classified by actlab's taxonomy, reported through ``on_episode``, appended to ``log_file`` (one
    JSON line each; default ``out_dir/episodes.jsonl``, "" for none) and said in one line on ``stream``
    (with :data:`EPISODE_PREFIX` and the running success count; also appended to ``out_dir/episodes.log``),
    and the next episode starts from seed ``seed + episode``. For ``hold_steps`` steps
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
        task: str = "so101_pick_place",
        units: str = "degrees",
        out_dir: str | Path | None = None,
        stream: TextIO | None = None,
    ) -> None:
        from actlab.sim import make_env  # lazy: mujoco only when a simulated robot is built

        self.env = make_env(
            task, image_size=image_size, max_steps=max_steps, cameras=tuple(cameras), units=units
        )
        self.seed = int(seed)
        self.hold_steps = int(hold_steps)
        # lazy: the plugin imports this module at LeRobot start; the env module with the first robot
        from actlab.lerobot.sim_env import (
            appendable,
            check_log_file,
            check_policy_fits_robot,
            refuse_log_inside_output,
        )

        self.out_dir = Path(out_dir) if out_dir is not None else None
        if self.out_dir is not None:
            refuse_log_inside_output(self.out_dir, "--robot.output_dir")
        if log_file == "":
            self.log_file = None
        elif log_file is not None:
            self.log_file = Path(log_file)
        else:
            self.log_file = self.out_dir / EPISODE_LOG if self.out_dir is not None else None
        self.text_log = self.out_dir / EPISODE_TEXT_LOG if self.out_dir is not None else None
        # Every file an episode appends to is checked before the first one: a --robot.log_file that is a
        # directory or in a place no file can be written (/proc), or a --robot.output_dir that is a file,
        # was OSError's traceback at the first episode's end; a user's file (notes, a dataset's
        # info.json) given as --robot.log_file got JSON lines appended, exit 0 (22nd fault run: the env's
        # log_file had these checks, the robot's not)
        if self.log_file is not None:
            check_log_file(self.log_file, "--robot.log_file", keys=ROBOT_LOG_KEYS)
        if self.text_log is not None:
            appendable(self.text_log, "--robot.output_dir", "pass --robot.output_dir=<a new directory>")
        if self.log_file is not None:
            check_log_file(self.log_file, "--robot.log_file", keys=ROBOT_LOG_KEYS, create=True)
        self.stream = stream
        self.on_episode = on_episode
        self.signal = signal
        if signal is not None and signal.policy_bundle is not None:
            check_policy_fits_robot(signal.policy_bundle, task, units, stream)
        self.results: list[EpisodeResult] = []
        # (6,) joint target limits in the env's units (the gripper 0-100 in so101_follower units)
        self.low_deg = self.env.action_space.low.astype(np.float64)
        self.high_deg = self.env.action_space.high.astype(np.float64)
        self._start_episode()

    def _start_episode(self) -> None:
        self._obs, _ = self.env.reset(seed=self.seed + len(self.results))
        self._infos: list[dict] = []
        self._commanded: list[np.ndarray] = []  # (6,) per executed step, as the policy sent it
        self._hold = self.hold_steps
        self._t0 = time.perf_counter()
        if self.signal is not None:
            self.signal.epoch += 1
            self.signal.holding = self._hold > 0

    def observe(self) -> dict[str, np.ndarray]:
        """The latest observation: ``observation.state`` (6,) in the env's units, images HWC uint8."""
        return self._obs

    def clip(self, action: np.ndarray) -> np.ndarray:
        """Joint targets clipped to the joints' ranges (the env's units), as the follower's servos do."""
        return np.clip(np.asarray(action, dtype=np.float64), self.low_deg, self.high_deg)

    def act(self, action: np.ndarray) -> np.ndarray:
        """Apply one control step of six joint targets (the env's units); returns what was applied."""
        applied = self.clip(action)
        if self._hold > 0:
            self._hold -= 1
            if self.signal is not None:
                self.signal.holding = self._hold > 0
            return applied
        self._obs, _, terminated, truncated, info = self.env.step(applied)
        self._infos.append(info)
        self._commanded.append(np.asarray(action, dtype=np.float64))
        if terminated or truncated:
            self._finish_episode()
        return applied

    def _finish_episode(self) -> None:
        # lazy: the plugin imports this module at LeRobot start; evaluation loads with the first episode
        from actlab.evaluation.taxonomy import PhaseRecord, classify
        from actlab.policies.execution import chunk_metrics  # lazy: with the taxonomy, as above

        verdict = classify(PhaseRecord.from_infos(self._infos))
        jerk = chunk_metrics(np.stack(self._commanded), [])["jerk"] if self._commanded else None
        result = EpisodeResult(
            episode=len(self.results),
            seed=self.seed + len(self.results),
            outcome=verdict.outcome,
            steps=len(self._infos),
            max_lift_m=verdict.max_lift_m,
            wall_s=time.perf_counter() - self._t0,
            jerk=jerk,
        )
        self.results.append(result)
        if self.log_file is not None:
            from actlab.lerobot.sim_env import append_line  # lazy: as in __init__

            append_line(self.log_file, json.dumps(result.__dict__), "--robot.log_file")
        self.say(f"{EPISODE_PREFIX} {result.line().split(': ', 1)[1]} | so far {self.summary()}")
        if self.on_episode is not None:
            self.on_episode(result)
        self._start_episode()

    def say(self, line: str) -> None:
        """One line to the stream (flushed: stderr may be a pipe) and to the text log."""
        if self.stream is not None:
            print(line, file=self.stream, flush=True)
        if self.text_log is not None:
            from actlab.lerobot.sim_env import append_line  # lazy: as in __init__

            append_line(self.text_log, line, "--robot.output_dir")

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


# The simulated robot's limits (--robot.<field> of --robot.type=actlab_so101_sim): the sim renders 16 to
# 1024 px (actlab.sim.scene's max_render_size), a rate above 1000 Hz cannot be paced by time.sleep, and
# seeds are 32-bit for numpy and MuJoCo (episode i uses seed + i, so the seed leaves room for 10**6).
SIM_ROBOT_LIMITS: dict[str, tuple[float, float]] = {
    "image_size": (16, 1024),
    "fps": (1, 1000),
    "max_steps": (1, 10**7),
    "seed": (0, 2**32 - 1 - 10**6),
    "hold_s": (0.0, 3600.0),
    "max_relative_target": (1e-6, 360.0),
}
SIM_ROBOT_CAMERAS = ("top", "wrist")  # actlab.sim.env.CAMERAS (not imported: it loads MuJoCo)


def check_sim_robot_config(values: Mapping[str, Any]) -> None:
    """Refuse a field of the simulated robot's config outside :data:`SIM_ROBOT_LIMITS` (NaN, infinite,
    negative, zero where a rate or size is meant, oversized) or a camera it does not have, naming
    ``--robot.<field>`` with the range, before anything is built: ``--robot.fps=0`` ended in a
    ZeroDivisionError traceback inside the control loop, a negative seed in numpy's."""
    for name, (lo, hi) in SIM_ROBOT_LIMITS.items():
        value = values.get(name)
        if value is None and name == "max_relative_target":
            continue  # None: no limit
        ok = is_number(value) and lo <= value <= hi
        if not ok:  # (NaN fails lo <= value)
            raise ActlabError(
                "invalid simulated robot setting",
                field=f"--robot.{name}",
                expected=f"a number from {lo} to {hi}"
                + (" (or null: no limit)" if name == "max_relative_target" else ""),
                found=value,
                fix=f"pass --robot.{name}=<value in range> (or leave it out for its default)",
            )
    if "units" in values:
        check_units(values["units"], field="--robot.units")
    if "task" in values:
        from actlab.sim.tasks import TASKS  # lazy: the task registry imports gymnasium and the envs

        if values["task"] not in TASKS:
            raise unknown_name_error("--robot.task", values["task"], TASKS, fix="actlab sim tasks lists them")
    cameras = list(values.get("camera_names") or [])
    bad = [c for c in cameras if c not in SIM_ROBOT_CAMERAS] if cameras else ["(none)"]
    if bad or len(set(cameras)) != len(cameras):
        raise ActlabError(
            "invalid simulated robot setting",
            field="--robot.camera_names",
            expected=f"one or both of {', '.join(SIM_ROBOT_CAMERAS)}, each once",
            found=cameras,
            fix="pass e.g. --robot.camera_names='[\"top\"]'",
        )


def pace(next_tick: float, fps: float) -> float:
    """Sleep until ``next_tick`` (perf_counter seconds) and return the tick after it (real-time pacing)."""
    now = time.perf_counter()
    if next_tick > now:
        time.sleep(next_tick - now)
    else:
        next_tick = now  # late: do not try to catch up by running fast
    return next_tick + 1.0 / fps


__all__ = [
    "EPISODE_LOG",
    "EPISODE_PREFIX",
    "EPISODE_TEXT_LOG",
    "JOINT_KEYS",
    "SIM_ROBOT_LIMITS",
    "SIM_SIGNAL",
    "EpisodeResult",
    "RolloutExecution",
    "RtcPrefix",
    "SimEpisodes",
    "SimSignal",
    "camera_to_trained",
    "check_export_config",
    "check_sim_robot_config",
    "default_output_dir",
    "pace",
    "plugin_flag",
    "read_episode_log",
    "rollout_execution",
    "rtc_prefix",
    "trained_cameras",
]
