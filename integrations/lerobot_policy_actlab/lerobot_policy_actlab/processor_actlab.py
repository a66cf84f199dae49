"""Pre/post-processors of actlab's types: LeRobot's ACT pipelines (rename -> batch -> device ->
normalizer, and unnormalizer -> device(cpu) after) whose (un)normalizer steps run in the config's
IDENTITY modes without statistics, so they pass everything through: actlab's policy normalizes and
unnormalizes inside with the statistics of its bundle.

The steps are there by name because LeRobot 0.6.1's ``lerobot-train`` overrides ``normalizer_processor``
and ``unnormalizer_processor`` in every pretrained pipeline it loads (``--resume=true``, a fine-tune
from ``--policy.path``) and stops with "Override keys ... do not match any step" without them.
``actlab policy export`` writes the same steps (actlab.lerobot.export.plugin_processor_configs)."""

from __future__ import annotations

from typing import Any

from lerobot.processor import (
    AddBatchDimensionProcessorStep,
    DeviceProcessorStep,
    NormalizerProcessorStep,
    RenameObservationsProcessorStep,
    UnnormalizerProcessorStep,
)
from lerobot.processor.factory import make_policy_processor_pipelines


def _pipelines(config: Any):
    # no stats, whatever the caller offers: a dataset's statistics in the state files would be unused
    # (IDENTITY) and would read as the ones this policy normalizes with
    modes = config.normalization_mapping
    return make_policy_processor_pipelines(
        input_steps=[
            RenameObservationsProcessorStep(rename_map={}),
            AddBatchDimensionProcessorStep(),
            DeviceProcessorStep(device=config.device or "cpu"),
            NormalizerProcessorStep(
                features={**config.input_features, **config.output_features}, norm_map=modes
            ),
        ],
        output_steps=[
            UnnormalizerProcessorStep(features=config.output_features, norm_map=modes),
            DeviceProcessorStep(device="cpu"),
        ],
    )


def make_actlab_act_pre_post_processors(config: Any, dataset_stats: Any = None):
    """Processors of ``actlab_act`` (``dataset_stats`` is unused: the policy holds its statistics)."""
    return _pipelines(config)


def make_actlab_act_relative_pre_post_processors(config: Any, dataset_stats: Any = None):
    """Processors of ``actlab_act_relative`` (as ``actlab_act``)."""
    return _pipelines(config)
