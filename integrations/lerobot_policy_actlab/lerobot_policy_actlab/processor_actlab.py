"""Pre/post-processors of actlab's types: rename -> batch -> device, and device(cpu) after. No normalizer:
actlab's policy normalizes and unnormalizes inside with the statistics of its bundle."""

from __future__ import annotations

from typing import Any

from lerobot.processor import (
    AddBatchDimensionProcessorStep,
    DeviceProcessorStep,
    RenameObservationsProcessorStep,
)
from lerobot.processor.factory import make_policy_processor_pipelines


def _pipelines(config: Any):
    return make_policy_processor_pipelines(
        input_steps=[
            RenameObservationsProcessorStep(rename_map={}),
            AddBatchDimensionProcessorStep(),
            DeviceProcessorStep(device=config.device or "cpu"),
        ],
        output_steps=[DeviceProcessorStep(device="cpu")],
    )


def make_actlab_act_pre_post_processors(config: Any, dataset_stats: Any = None):
    """Processors of ``actlab_act`` (``dataset_stats`` is unused: the policy holds its statistics)."""
    return _pipelines(config)


def make_actlab_act_relative_pre_post_processors(config: Any, dataset_stats: Any = None):
    """Processors of ``actlab_act_relative`` (as ``actlab_act``)."""
    return _pipelines(config)
