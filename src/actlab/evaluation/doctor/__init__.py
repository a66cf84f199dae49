"""Policy doctor: tell "the policy did not learn" from "the evaluation is wrong", offline, on a dataset.

``diagnose(policy, dataset)`` runs five checks and ends with one verdict a person can act on:

- **inputs**: the cameras, image sizes and state/action sizes the policy reads vs what the dataset has;
- **normalization**: the statistics the policy normalizes with vs the dataset's (mean shift in dataset
  std units, std ratio, degenerate image std);
- **replay**: open-loop replay of training and held-out episodes against two baselines on the same
  frames (``actlab.evaluation.replay``);
- **actions**: predicted range vs the dataset's q01..q99, a gripper that never closes or misses its
  timing, jumps at chunk boundaries;
- **deployment**: what goes wrong between a good checkpoint and the robot: the action de-normalization
  (the postprocessor: present, not an identity, undoing the preprocessor's normalization of the dataset's
  actions) and ``reset()`` clearing the action queue (after a reset, the first action for a new
  observation comes from that observation's chunk, not from the previous one's).

Every check returns :class:`Finding` objects (check, name, severity, numbers, message with the fix), so
the ``--json`` output and the markdown report come from the same data. The policy is used through the
narrow inference interface only: ``reset()``, ``predict_action_chunk(obs) -> (B, H, A)``,
``select_action(obs)`` (the reset check), a ``features`` dict (LeRobot style) and its normalization
statistics (the normalizer buffers of an actlab policy, else ``stats_for_bundle()`` or a ``stats``
mapping), ``processors(action)`` where it has one (a LeRobot policy's processor round trip);
``observation_delta_indices`` and ``config.chunk_size`` / ``n_action_steps`` / ``stats_request()`` are
used when present. Observations are built as training built
them: frames from the FrameStore at the size the policy's features record (``actlab.resize``), gathered
by ``DeviceData`` at the policy's own observation offsets.

The package, lowest first: ``findings`` (thresholds, :class:`Finding`, the verdicts and :func:`decide`,
the config and the result), ``checks`` (one function per check), ``run`` (:func:`diagnose`,
:func:`doctor_bundle`: the checks in order on a dataset) and ``report`` (text, figure, report directory).
Everything public is importable from ``actlab.evaluation.doctor``.
"""

from __future__ import annotations

from actlab.evaluation.doctor.checks import (
    applied_stats,
    check_actions,
    check_inputs,
    check_normalization,
    check_processors,
    check_reset,
    choose_episodes,
    feature_names,
    feature_shape,
    processor_roundtrip,
    recorded_split,
    replay_finding,
    resize_info,
    spread,
)
from actlab.evaluation.doctor.findings import (
    CONSTANT_STD,
    GRIPPER_MATCH_S,
    GRIPPER_MISSED_WARN,
    GRIPPER_STATE_MIN,
    IMAGE_STD_MIN,
    IMAGENET_STD,
    JUMP_RATIO_WARN,
    MEAN_SHIFT_ERROR,
    MEAN_SHIFT_WARN,
    RANGE_MARGIN,
    RANGE_OUT_ERROR,
    RANGE_OUT_WARN,
    RESET_SEPARATION_MIN,
    RESET_TOL,
    ROUNDTRIP_TOL,
    RUN_BEST_RATIO,
    SEVERITIES,
    SKILL_LEARNED,
    SKILL_PRECISE,
    STD_RATIO_ERROR,
    STD_RATIO_WARN,
    VERDICTS,
    DoctorConfig,
    DoctorResult,
    Finding,
    Verdict,
    compare_with_run_best,
    decide,
)
from actlab.evaluation.doctor.report import (
    DOCTOR_KIND,
    figure_episodes,
    render,
    write_report,
)
from actlab.evaluation.doctor.run import (
    diagnose,
    doctor_bundle,
    run_cache_dir,
)

__all__ = [
    "CONSTANT_STD",
    "DOCTOR_KIND",
    "GRIPPER_MATCH_S",
    "GRIPPER_MISSED_WARN",
    "GRIPPER_STATE_MIN",
    "IMAGENET_STD",
    "IMAGE_STD_MIN",
    "JUMP_RATIO_WARN",
    "MEAN_SHIFT_ERROR",
    "MEAN_SHIFT_WARN",
    "RANGE_MARGIN",
    "RANGE_OUT_ERROR",
    "RANGE_OUT_WARN",
    "RESET_SEPARATION_MIN",
    "RESET_TOL",
    "ROUNDTRIP_TOL",
    "RUN_BEST_RATIO",
    "SEVERITIES",
    "SKILL_LEARNED",
    "SKILL_PRECISE",
    "STD_RATIO_ERROR",
    "STD_RATIO_WARN",
    "VERDICTS",
    "DoctorConfig",
    "DoctorResult",
    "Finding",
    "Verdict",
    "applied_stats",
    "check_actions",
    "check_inputs",
    "check_normalization",
    "check_processors",
    "check_reset",
    "choose_episodes",
    "compare_with_run_best",
    "decide",
    "diagnose",
    "doctor_bundle",
    "feature_names",
    "feature_shape",
    "figure_episodes",
    "processor_roundtrip",
    "recorded_split",
    "render",
    "replay_finding",
    "resize_info",
    "run_cache_dir",
    "spread",
    "write_report",
]
