"""LeRobot policies wrapping actlab's own modules (``actlab.policies``): no second copy of model code.

An export (``actlab policy export BUNDLE --to lerobot``) holds LeRobot's ``config.json``, the processors'
JSON and the actlab bundle in ``actlab_bundle/``; ``from_pretrained`` loads that bundle with actlab's
``load_policy`` (safetensors + JSON, nothing unpickled) and ``save_pretrained`` writes one, so a
``lerobot-train`` checkpoint of these types is an actlab bundle too (``actlab policy import`` reads it).

Observations arrive as LeRobot makes them: images float ``[0, 1]`` ``(B, C, H, W)`` at the robot camera's
size, raw joint state; they are resized to the trained size (:func:`actlab.lerobot.runtime.camera_to_trained`)
and handed to actlab's policy, which normalizes inside and returns absolute actions.

``--policy.execution=MODE --policy.execution_latency=D [--policy.execution_horizon=S]`` runs actlab's
execution modes (async, ensemble, blend, rtc, correct) in ``select_action``, the sync engine's per-step call:
actlab's own chunk executor (:func:`actlab.lerobot.runtime.rollout_execution`), so the arm executes the
actions ``actlab eval --execution MODE --latency D`` measured.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import torch
from lerobot.policies.pretrained import PreTrainedPolicy
from torch import Tensor

from actlab.errors import ActlabError
from actlab.lerobot.export import PLUGIN_BUNDLE
from actlab.lerobot.runtime import (
    CHUNK_FIELDS,
    SIM_SIGNAL,
    camera_to_trained,
    check_export_config,
    check_export_features,
    check_export_processors,
    check_plugin_bundle,
    rollout_execution,
    rtc_prefix,
    trained_cameras,
)
from actlab.policies.execution import PLUGIN_FIELDS
from lerobot_policy_actlab.configuration_actlab import ActlabActConfig, ActlabActRelativeConfig

logger = logging.getLogger(__name__)
STATE = "observation.state"


def _build_from_dataset(config: Any, dataset_meta: Any, dataset_stats: Any) -> Any:
    """A new actlab policy for ``lerobot-train --policy.type=...``: features and statistics from the
    LeRobot dataset (act_relative's relative-action statistics are computed over its actions)."""
    # lazy: only lerobot-train builds fresh policies; loading an export never reads a dataset
    from actlab.lerobot.train_support import build_policy_for_dataset

    if dataset_meta is None:
        raise ActlabError(
            "an actlab policy is built from a dataset (features, normalization statistics)",
            field="dataset_meta",
            expected="lerobot-train --dataset.root=... (or --policy.path=EXPORT)",
            found=None,
        )
    return build_policy_for_dataset(config.actlab_fields(), dataset_meta.root, dataset_stats)


def _check_top_fields(config: Any) -> None:
    """Refuse ``--policy.chunk_size`` (n_action_steps, n_obs_steps) set to one value and
    ``--policy.actlab_config`` to another: actlab_config's would win without a word. A LeRobot field
    left at its default gives way to actlab_config's value."""
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    for key in CHUNK_FIELDS:
        top, inner = getattr(config, key), (config.actlab_config or {}).get(key)
        # a flag set to its default value is set all the same (--policy.chunk_size=30 gave way to
        # actlab_config's 10 without a word): the command line tells it from a default
        given = any(a == f"--policy.{key}" or a.startswith(f"--policy.{key}=") for a in sys.argv[1:])
        if inner is not None and top != inner and (top != defaults.get(key) or given):
            raise ActlabError(
                f"--policy.{key} and --policy.actlab_config disagree",
                field=key,
                expected="one value (set it in one place)",
                found=f"--policy.{key}={top}, actlab_config {key}={inner}",
                fix=f"drop --policy.{key} or the key from --policy.actlab_config",
            )


class _ActlabPolicy(PreTrainedPolicy):
    """actlab's policy behind LeRobot's ``PreTrainedPolicy`` interface."""

    config_class = ActlabActConfig
    name = "actlab_act"

    def __init__(
        self,
        config: Any,
        dataset_stats: Any = None,
        dataset_meta: Any = None,
        actlab_policy: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(config)
        if actlab_policy is None:
            _check_top_fields(config)
            actlab_policy = _build_from_dataset(config, dataset_meta, dataset_stats)
            config.actlab_config = _config_dict(actlab_policy)
            config.actlab_features = actlab_policy.features
            # the saved config.json states what the weights run: actlab_config's values win over the
            # LeRobot fields (actlab_fields), and from_pretrained refuses a config.json whose top-level
            # chunk_size / n_action_steps / n_obs_steps disagree with the bundle (an edit)
            for key in CHUNK_FIELDS:
                setattr(config, key, getattr(actlab_policy.config, key))
        self.model = actlab_policy
        self._cameras = trained_cameras(self.model.features, list(self.model.camera_keys))
        self._said: set[str] = set()
        self._sim_epoch = SIM_SIGNAL.epoch
        self._sim_held = SIM_SIGNAL.holding
        fields = {k: getattr(config, k, None) for k in PLUGIN_FIELDS.values()}
        # actlab's chunk executor behind select_action (None: sync, actlab's own select_action)
        # the export's config.json is named when a refused value came from it, not from the command line
        source = getattr(config, "pretrained_path", None)
        written = Path(source) / "config.json" if source else None
        written = written if written is not None and written.is_file() else None
        self._execution = rollout_execution(self.model, fields, config_file=written, argv=sys.argv[1:])

    def _follow_sim(self) -> bool:
        """With actlab_so101_sim in this process: reset at each of its episode starts (LeRobot does not)
        and again when its home-pose hold ends, so the first executed action is the first of a fresh
        chunk, as in ``actlab eval``; returns whether the sim arm is holding (its actions are not
        executed). False without the sim."""
        held, self._sim_held = self._sim_held, SIM_SIGNAL.holding
        if SIM_SIGNAL.epoch != self._sim_epoch or (held and not SIM_SIGNAL.holding):
            self._sim_epoch = SIM_SIGNAL.epoch
            self.reset()
        return SIM_SIGNAL.holding

    # ------------------------------------------------------------------------------ load / save
    @classmethod
    def from_pretrained(cls, pretrained_name_or_path: str | Path, *, config: Any = None, **kwargs: Any):
        """Load an export or a checkpoint of this type: its ``actlab_bundle/`` through actlab's loader."""
        from lerobot.configs.policies import PreTrainedConfig

        # lazy: torch-heavy loader, imported when a policy is loaded, not when LeRobot scans plugins
        from actlab.policies import load_policy

        root = Path(pretrained_name_or_path)
        if not root.is_dir():
            from huggingface_hub import snapshot_download

            root = Path(snapshot_download(str(pretrained_name_or_path), revision=kwargs.get("revision")))
        if config is None:
            config = PreTrainedConfig.from_pretrained(root)
        # LeRobot loads the processor files after the policy: an edited one normalized twice, or ended in
        # LeRobot's tracebacks (a step removed, a state file missing)
        check_export_processors(root)
        check_plugin_bundle(root, getattr(config, "type", None), "nothing to load")
        device = config.device or "cpu"
        model = load_policy(root / PLUGIN_BUNDLE, device=device)
        SIM_SIGNAL.policy_bundle = str(root / PLUGIN_BUNDLE)  # (the sim robot checks its task and units)
        # config.json's chunk_size / n_action_steps edited: the weights run their own values, refused
        top = {k: getattr(config, k) for k in ("type", *CHUNK_FIELDS) if hasattr(config, k)}
        written = root / "config.json"
        try:
            on_disk = json.loads(written.read_text())
        except (OSError, ValueError):
            on_disk = None  # unreadable: a disagreement is then said as an edit of the file
        check_export_config(
            {**top, "actlab_config": config.actlab_config},
            _config_dict(model),
            written,
            on_disk if isinstance(on_disk, dict) else None,
        )
        # input_features / output_features edited: the plugin resized to the trained size and sent the
        # trained number of actions, LeRobot believing the edited ones
        check_export_features(config.input_features, config.output_features, model, root / "config.json")
        policy = cls(config, actlab_policy=model)
        policy.to(device)
        policy.eval()
        return policy

    def _save_pretrained(self, save_directory: Path, state_dict: dict[str, Tensor] | None = None) -> None:
        # lazy: only a save writes a bundle
        from actlab.policies.bundle import write_bundle

        self.config.actlab_config = _config_dict(self.model)
        self.config.actlab_features = self.model.features
        self.config._save_pretrained(save_directory)
        (Path(save_directory) / PLUGIN_BUNDLE).mkdir(parents=True, exist_ok=True)
        write_bundle(self.model, Path(save_directory) / PLUGIN_BUNDLE, extra={"saved_by": "lerobot"})

    # ------------------------------------------------------------------------------ training
    def get_optim_params(self) -> Any:
        return [p for p in self.model.parameters() if p.requires_grad]

    def forward(self, batch: dict[str, Tensor]) -> tuple[Tensor, dict | None]:
        """actlab's loss on a LeRobot training batch (images float [0, 1], windows with ``*_is_pad``)."""
        loss, metrics = self.model(self._actlab_batch(batch))
        return loss, {k: float(v.detach()) if torch.is_tensor(v) else v for k, v in metrics.items()}

    def _actlab_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        # frames of another size than the trained one: a fine-tune of a 32 px export on 16 px recordings
        # was a RuntimeError traceback from the position embeddings (25th fault run, lt_base)
        resizes = getattr(self.model, "_img_size", None) is not None  # (a model that resizes them itself)
        for key, (h, w, _) in self._cameras.items():
            found = batch.get(key)
            if not resizes and torch.is_tensor(found) and tuple(found.shape[-2:]) != (h, w):
                raise ActlabError(
                    f"the training frames of {key} are not the size the policy was trained at",
                    field=key,
                    expected=f"{h}x{w} (H x W: the shipped weights' trained size)",
                    found=f"{found.shape[-2]}x{found.shape[-1]} (the dataset's frames)",
                    fix=f"fine-tune on a dataset recorded at {h}x{w} (actlab sim record --image-size {h}), "
                    "or train a new policy on this one (--policy.type=actlab_act, no --policy.path)",
                )
        return {k: v for k, v in batch.items() if torch.is_tensor(v)}

    # ------------------------------------------------------------------------------ inference
    def reset(self) -> None:
        """Clear actlab's action queue, ensembler and observation history, and the chunk executor's
        clock (LeRobot calls it per episode)."""
        if self._execution is not None:
            self._execution.reset()  # first: waits for an inference still running in its worker
        self.model.reset()

    def _obs(self, batch: dict[str, Any]) -> dict[str, Tensor]:
        """LeRobot observation -> actlab's: cameras resized to the trained size, uint8; state float."""
        obs: dict[str, Tensor] = {STATE: batch[STATE].float()}
        for key, trained in self._cameras.items():
            if key not in batch:
                raise ActlabError(
                    f"the observation has no camera {key!r}",
                    field=key,
                    expected=", ".join(self._cameras),
                    found=", ".join(k for k in batch if k.startswith("observation.images")),
                    fix="name the robot's cameras as the policy's (or lerobot's --rename_map)",
                )
            img = batch[key]
            obs[key] = camera_to_trained(img[:, -1] if img.ndim == 5 else img, key, trained)
        return obs

    def _say_once(self, note: str) -> None:
        if note not in self._said:
            self._said.add(note)
            logger.warning("actlab: %s", note)

    def supports_rtc(self) -> bool:
        """LeRobot asks this only for ``lerobot-rollout --inference.type=rtc``. A policy that cannot take
        a committed-action prefix is refused here, in actlab's words: it was LeRobot's ValueError traceback
        ("RTC inference is not supported by policy type 'actlab_act'"), which named neither actlab's own
        real-time execution nor the policy that runs under LeRobot's engine."""
        raise _no_rtc(self.name, "it takes no committed-action prefix (only actlab_act_relative does)")

    @torch.no_grad()
    def predict_action_chunk(self, batch: dict[str, Tensor], **kwargs: Any) -> Tensor:
        """Absolute action chunk (B, H, A)."""
        self._follow_sim()
        return self.model.predict_action_chunk(self._obs(batch))

    @torch.no_grad()
    def select_action(self, batch: dict[str, Tensor], **kwargs: Any) -> Tensor:
        """Next action (B, A): actlab's queue of ``n_action_steps`` (or temporal ensembling), or with
        ``--policy.execution`` the action actlab's chunk executor gives for this step."""
        self._follow_sim()
        if self._execution is not None:
            return self._execution.select_action(self._obs(batch))
        return self.model.select_action(self._obs(batch))


def _no_rtc(name: str, why: str) -> ActlabError:
    return ActlabError(
        f"{name} does not run under LeRobot's RTC engine: {why}",
        field="--inference.type",
        expected="sync (the default)",
        found="rtc",
        fix="drop --inference.type=rtc and run actlab's real-time execution in the sync engine: "
        "--policy.execution=async (blend, ensemble; correct with a correction head) "
        "--policy.execution_latency=D; LeRobot's RTC engine runs actlab_act_relative trained with "
        "policy.rtc_max_delay > 0",
    )


def _config_dict(actlab_policy: Any) -> dict[str, Any]:
    from actlab.utils import config as cfgutil  # lazy: kept with the one function that uses it

    return cfgutil.to_dict(actlab_policy.config)


class ActlabActPolicy(_ActlabPolicy):
    """actlab's ACT (``actlab_act``)."""

    config_class = ActlabActConfig
    name = "actlab_act"


class ActlabActRelativePolicy(_ActlabPolicy):
    """actlab's act_relative (``actlab_act_relative``), with LeRobot's RTC call shape.

    ``lerobot-rollout --inference.type=rtc`` calls ``predict_action_chunk(batch, inference_delay=d,
    prev_chunk_left_over=L)``: the first ``d`` rows of ``L`` (the previous chunk's actions the robot
    executes while this one is computed) become actlab's committed prefix, and the returned chunk starts
    with exactly them (LeRobot then skips its first ``d`` actions). ``d`` above the trained
    ``rtc_max_delay`` is clamped, LeRobot's zero padding is never used as a prefix
    (:func:`actlab.lerobot.runtime.rtc_prefix`).
    """

    config_class = ActlabActRelativeConfig
    name = "actlab_act_relative"
    # RTC calls between two latency lines in the log
    REPORT_EVERY = 30

    def supports_rtc(self) -> bool:
        if self._execution is not None:  # LeRobot asks this only for --inference.type=rtc
            raise ActlabError(
                "two real-time engines at once: LeRobot's RTC engine calls predict_action_chunk from its "
                f"own thread, and --policy.execution={self._execution.spec.mode} runs actlab's executor in "
                "select_action (the sync engine)",
                field="--inference.type",
                expected="sync (the default) with --policy.execution, or --policy.execution=sync with rtc",
                found="rtc",
                fix="drop --inference.type=rtc (actlab's rtc: --policy.execution=rtc "
                "--policy.execution_latency=D), or drop --policy.execution",
            )
        if self.model.config.rtc_max_delay <= 0:
            raise _no_rtc(self.name, "it was trained with rtc_max_delay = 0 (no committed-action prefix)")
        return True

    @torch.no_grad()
    def predict_action_chunk(
        self,
        batch: dict[str, Tensor],
        inference_delay: int | None = None,
        prev_chunk_left_over: Tensor | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """Absolute action chunk (B, H, A), conditioned on the committed prefix when RTC passes one."""
        if self._follow_sim():
            # the sim arm holds its pose and drops these actions: nothing is committed yet, so the
            # chunk is planned from the new scene alone (a prefix of dropped actions would run ahead)
            prev_chunk_left_over = None
        obs = self._obs(batch)
        if inference_delay is not None and self.model.config.obs_state_delta_frames is not None:
            raise ActlabError(
                "this act_relative reads a state delta s[t] - s[t-N], which needs the state of every "
                "control step; LeRobot's RTC engine calls the policy once per chunk",
                field="obs_state_delta_frames",
                expected="null for --inference.type=rtc",
                found=self.model.config.obs_state_delta_frames,
                fix="run it with lerobot-rollout's default (sync) inference, or train with "
                "policy.obs_state_delta_frames=null",
            )
        cfg = self.model.config
        prefix = rtc_prefix(prev_chunk_left_over, inference_delay, cfg.rtc_max_delay, cfg.chunk_size)
        if prefix.note:
            self._say_once(prefix.note)
        actions = prefix.actions
        if actions is not None:
            actions = actions.to(obs[STATE].device, torch.float32)
            if actions.shape[0] != obs[STATE].shape[0]:
                actions = actions.expand(obs[STATE].shape[0], -1, -1)
        t0 = time.perf_counter()
        chunk = self.model.predict_action_chunk(obs, prefix=actions)
        if inference_delay is not None:
            self._rtc_log(prefix, time.perf_counter() - t0)
        return chunk

    def _rtc_log(self, prefix: Any, compute_s: float) -> None:
        """Every REPORT_EVERY RTC calls: LeRobot's delay (from the latency its engine measured, its
        maximum so far) and the prefix used, next to this policy's own compute time."""
        stats = self.__dict__.setdefault("_rtc_stats", {"n": 0, "delays": [], "used": [], "compute": []})
        stats["n"] += 1
        stats["delays"].append(prefix.requested)
        stats["used"].append(prefix.used)
        stats["compute"].append(compute_s)
        if stats["n"] % self.REPORT_EVERY == 0:
            compute_ms = sorted(stats["compute"])
            logger.info(
                "actlab RTC: %d chunks; LeRobot inference_delay (its measured latency max, in steps) "
                "last %d, max %d; prefix used last %d; policy compute median %.1f ms, max %.1f ms",
                stats["n"],
                stats["delays"][-1],
                max(stats["delays"]),
                stats["used"][-1],
                1000 * compute_ms[len(compute_ms) // 2],
                1000 * compute_ms[-1],
            )
