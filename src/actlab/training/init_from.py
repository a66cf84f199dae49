"""Start a run from the weights of an existing policy bundle (``actlab train --init-from BUNDLE``).

Fine-tuning keeps the bundle's model (the run's ``policy`` config must describe the same model: every
field that changes what the network computes is compared) and takes the normalization statistics of the
run's own dataset, as ``lerobot-train --policy.path`` does: the ``normalizer.*`` buffers are not copied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.training.config import policy_config_from_dict
from actlab.utils.io import read_json
from actlab.utils.kinds import describe

# Policy config fields that only shape training or acting, not the network: they may differ from the
# bundle's (e.g. more dropout or another n_action_steps for the fine-tune).
TRAINING_ONLY_FIELDS = frozenset(
    {
        "dropout",
        "kl_weight",
        "n_action_steps",
        "temporal_ensemble_coeff",
        "freeze_backbone",
        "pretrained_backbone_weights",
        "std_floor",
        "image_std_floor",
        "rtc_max_delay",
        "correction_only",
    }
)
# The correction head's fields: with correction_only the head is new (trained alone on the bundle's frozen
# policy), so the bundle may have none, or another one; its weights are not copied.
CORRECTION_FIELDS = frozenset({"correction_head", "correction_hidden_dim", "correction_images"})


def _correction_only(policy: Any) -> bool:
    return bool(getattr(policy, "correction_only", False))


def check_correction_only(cfg: Any) -> None:
    """ActlabError before any work when ``policy.correction_only`` has no trained policy to start from."""
    if _correction_only(cfg.policy) and not cfg.init_from:
        raise ActlabError(
            "policy.correction_only trains a correction head on a trained policy, and none was given",
            field="init_from",
            expected="the bundle of a trained policy (its weights are frozen; only the head trains)",
            found=None,
            fix="actlab train --init-from RUN/checkpoints/step_N --set policy.correction_only=true "
            "--set policy.correction_head=true [--set policy.correction_images=true] ...",
        )


def bundle_policy_config(bundle: str | Path) -> Any:
    """The policy config saved in a bundle's ``config.json`` (what ``--init-from`` trains)."""

    file = Path(bundle) / "config.json"
    kind = describe(bundle)
    if kind is not None and not kind.startswith("an actlab policy bundle"):
        raise ActlabError(  # a run was "unknown policy type 'None'", an export "unknown ... 'actlab_act'"
            "--init-from takes an actlab policy bundle",
            file=bundle,
            field="init_from",
            expected="an actlab policy bundle (RUN/checkpoints/step_N, or what `actlab policy import` wrote)",
            found=kind,
            fix="pass a bundle (see found); a LeRobot checkpoint: `actlab policy import DIR --out B` first",
        )
    if not file.is_file():
        raise ActlabError(
            "the --init-from bundle has no config.json",
            file=file,
            field="init_from",
            expected="an actlab policy bundle (RUN/checkpoints/step_N, or what `actlab policy import` wrote)",
            fix="check the path",
        )
    return policy_config_from_dict(read_json(file, "policy config"), where=str(file))


def check_same_model(run_policy: Any, bundle_policy: Any, bundle: str | Path) -> None:
    """ActlabError when the run's policy config builds another network than the bundle's."""
    import dataclasses

    if type(run_policy) is not type(bundle_policy):
        raise ActlabError(
            "the run's policy type differs from the --init-from bundle's",
            file=Path(bundle) / "config.json",
            field="policy.type",
            expected=bundle_policy.type,
            found=run_policy.type,
            fix="drop policy.type from --set (actlab train --init-from uses the bundle's policy config)",
        )
    skip = TRAINING_ONLY_FIELDS | (CORRECTION_FIELDS if _correction_only(run_policy) else frozenset())
    for f in dataclasses.fields(bundle_policy):
        if f.name in skip:
            continue
        mine, theirs = getattr(run_policy, f.name), getattr(bundle_policy, f.name)
        if mine != theirs:
            raise ActlabError(
                "the run's policy config describes another model than the --init-from bundle",
                file=Path(bundle) / "config.json",
                field=f"policy.{f.name}",
                expected=theirs,
                found=mine,
                fix=f"drop --set policy.{f.name} (only {', '.join(sorted(TRAINING_ONLY_FIELDS))} may change)",
            )


def load_initial_weights(policy: Any, bundle: str | Path) -> None:
    """Copy every weight of ``bundle`` except its normalization statistics into ``policy`` (in place).

    With ``correction_only`` the correction head is not copied (it is the run's new one); the run's
    statistics are then the bundle's own already (``training.build._stats``)."""
    import torch

    check_same_model(policy.config, bundle_policy_config(bundle), bundle)
    # lazy: bundle imports torch; training modules import without it
    from actlab.policies import load_policy

    source = load_policy(bundle, device="cpu")
    # the normalization stats are this run's; with correction_only the head is new (it starts at zero)
    skip = ("normalizer.", "correction_head.") if _correction_only(policy.config) else ("normalizer.",)
    theirs = {k: v for k, v in source.state_dict().items() if not k.startswith(skip)}
    mine = {k: v for k, v in policy.state_dict().items() if not k.startswith(skip)}
    bad = sorted(set(mine) ^ set(theirs)) + [
        k for k in mine if k in theirs and mine[k].shape != theirs[k].shape
    ]
    if bad:
        raise ActlabError(
            "the --init-from weights do not fit this run's policy",
            file=Path(bundle) / "model.safetensors",
            field=bad[0],
            expected=f"{len(mine)} tensors shaped as this dataset's features make them",
            found=f"{len(bad)} tensors missing, extra or of another shape (first: {bad[0]})",
            fix="fine-tune on a dataset with the bundle's state/action sizes and cameras "
            "(features.json of the bundle lists them)",
        )
    with torch.no_grad():
        for name, tensor in mine.items():
            tensor.copy_(theirs[name].to(tensor.device, tensor.dtype))
