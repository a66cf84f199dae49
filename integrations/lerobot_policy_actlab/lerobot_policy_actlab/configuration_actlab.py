"""LeRobot configs of actlab's policies: the actlab policy config travels whole in ``actlab_config``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lerobot.configs.policies import PreTrainedConfig
from lerobot.configs.types import NormalizationMode
from lerobot.optim.optimizers import AdamWConfig

from actlab.errors import ActlabError


@dataclass
class _ActlabConfig(PreTrainedConfig):
    """Fields shared by the actlab types. ``actlab_config`` holds actlab's policy config (its JSON form:
    ``actlab train --help-config`` lists the fields); empty means actlab's defaults for the type."""

    # actlab's policy config fields (dict), e.g. {"vision_backbone": "cnn_small", "dim_model": 64}
    actlab_config: dict[str, Any] = field(default_factory=dict)
    # the dataset features the policy was built for (LeRobot info.json style); set by an export, or from
    # the dataset by lerobot-train
    actlab_features: dict[str, Any] = field(default_factory=dict)
    # actions predicted per call (actlab's chunk_size; copied into actlab_config when it has none)
    chunk_size: int = 30
    # actions executed per chunk by select_action (actlab's n_action_steps)
    n_action_steps: int = 10
    # how select_action executes chunks (lerobot-rollout's default sync engine calls it every step), as
    # `actlab eval --execution`: sync (actlab's queue of n_action_steps) / async / ensemble / blend / rtc /
    # correct (a policy trained with correction_head: each step's action corrected from the newest
    # observation) (the same actions as actlab eval on the same observations; each inference runs in a
    # worker thread while the arm executes the previous chunk). Set on the command line:
    # --policy.execution=blend
    execution: str = "sync"
    # control steps from an inference's start to its chunk's first use (actlab eval --latency)
    execution_latency: int = 0
    # control steps between inference starts (actlab eval --horizon); None: as actlab eval chooses
    execution_horizon: int | None = None
    # LeRobot's (un)normalizer steps pass everything through: actlab's policy normalizes inside (its
    # statistics travel in the bundle). IDENTITY only: any other mode would normalize twice when
    # lerobot-train hands a dataset's statistics to those steps (a fine-tune from --policy.path)
    normalization_mapping: dict[str, NormalizationMode] = field(
        default_factory=lambda: {
            "VISUAL": NormalizationMode.IDENTITY,
            "STATE": NormalizationMode.IDENTITY,
            "ACTION": NormalizationMode.IDENTITY,
        }
    )
    # AdamW for lerobot-train (actlab's so101_sim_cpu preset values)
    optimizer_lr: float = 1e-3
    optimizer_weight_decay: float = 1e-4

    ACTLAB_TYPE = "act"

    def __post_init__(self) -> None:
        super().__post_init__()
        modes = {str(k): getattr(v, "value", v) for k, v in (self.normalization_mapping or {}).items()}
        if any(mode != "IDENTITY" for mode in modes.values()):
            raise ActlabError(
                "invalid setting of an actlab policy: --policy.normalization_mapping",
                field="normalization_mapping",
                expected="IDENTITY for every feature type (actlab's policy normalizes inside with its "
                "bundle's statistics)",
                found=modes,
                fix="leave --policy.normalization_mapping out",
            )
        self._check_actlab_config()

    def _check_actlab_config(self) -> None:
        """``actlab_config``'s type must be this LeRobot type's (``type: act_relative`` under
        ``--policy.type=actlab_act`` trained an act without a word) and its chunk sizes whole numbers
        (``chunk_size: "x"`` was int()'s traceback in LeRobot's dataset set-up)."""
        inner = self.actlab_config or {}
        if "type" in inner and inner["type"] != self.ACTLAB_TYPE:
            raise ActlabError(
                "--policy.actlab_config names another policy type than --policy.type",
                field="actlab_config type",
                expected=f"{self.ACTLAB_TYPE!r} (--policy.type={self.type})",
                found=repr(inner["type"]),
                fix="drop type from --policy.actlab_config; --policy.type chooses it (actlab_act: act, "
                "actlab_act_relative: act_relative)",
            )
        for key in ("chunk_size", "n_action_steps", "n_obs_steps"):
            value = inner.get(key, getattr(self, key))
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                where = f"--policy.actlab_config {key}" if key in inner else f"--policy.{key}"
                raise ActlabError(
                    f"invalid setting of an actlab policy: {where}",
                    field=key,
                    expected="a whole number >= 1",
                    found=repr(value),
                    fix=f"set {key} to a whole number, e.g. {getattr(type(self), key, 1) or 1}",
                )

    def actlab_fields(self) -> dict[str, Any]:
        """actlab's config fields: ``actlab_config`` plus chunk_size / n_action_steps when it omits them."""
        fields = dict(self.actlab_config)
        fields.setdefault("chunk_size", self.chunk_size)
        fields.setdefault("n_action_steps", self.n_action_steps)
        fields.setdefault("n_obs_steps", self.n_obs_steps)
        fields["type"] = self.ACTLAB_TYPE
        return fields

    def get_optimizer_preset(self) -> AdamWConfig:
        return AdamWConfig(lr=self.optimizer_lr, weight_decay=self.optimizer_weight_decay)

    def get_scheduler_preset(self) -> None:
        return None

    def validate_features(self) -> None:
        if not self.image_features:
            raise ValueError("actlab's policies need at least one camera among the inputs")

    @property
    def observation_delta_indices(self) -> list | None:
        k = int(self.actlab_fields().get("n_obs_steps", 1))
        return list(range(1 - k, 1)) if k > 1 else None

    @property
    def action_delta_indices(self) -> list:
        return list(range(int(self.actlab_fields()["chunk_size"])))

    @property
    def reward_delta_indices(self) -> None:
        return None


@PreTrainedConfig.register_subclass("actlab_act")
@dataclass
class ActlabActConfig(_ActlabConfig):
    """actlab's ACT (any backbone, decoder input, camera fusion, n_obs_steps) in LeRobot."""

    ACTLAB_TYPE = "act"


@PreTrainedConfig.register_subclass("actlab_act_relative")
@dataclass
class ActlabActRelativeConfig(_ActlabConfig):
    """actlab's act_relative (relative actions, state deltas, RTC prefix) in LeRobot; supports
    ``lerobot-rollout --inference.type=rtc``."""

    ACTLAB_TYPE = "act_relative"
