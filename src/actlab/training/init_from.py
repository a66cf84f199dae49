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
from actlab.utils.config import from_file
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
CORRECTION_FIELDS = frozenset(
    {"correction_head", "correction_hidden_dim", "correction_images", "correction_cameras"}
)


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
    data = read_json(file, "policy config", fix=_damaged_fix())
    # a value of the wrong type (dim_model "x") was int()'s / a comparison's traceback
    return from_file(lambda: policy_config_from_dict(data, where=str(file)), file, "the bundle's config.json",
                     _damaged_fix())  # fmt: skip


def _damaged_fix() -> str:
    from actlab.policies.bundle import DAMAGED_FIX  # lazy: the bundle module imports torch

    return DAMAGED_FIX


def bundle_stats(bundle: str | Path) -> dict[str, Any]:
    """The normalization statistics a bundle was saved with (its stats.json): a correction head trained
    alone keeps its frozen policy's. A missing or damaged file is the bundle's fault, said as such (it
    was "normalization stats not found ... fix: check the path")."""
    return read_json(Path(bundle) / "stats.json", "normalization stats of the frozen policy's bundle",
                     fix=_damaged_fix())  # fmt: skip


def _inputs_and_outputs(features: dict[str, Any]) -> tuple[list[str], dict[str, list[int]]]:
    from actlab.datasets import format as fmt  # lazy: as the callers' dataset code

    cams = sorted(k for k, v in features.items() if isinstance(v, dict) and fmt.is_camera(v))
    dims = {k: list(features[k].get("shape") or []) for k in ("observation.state", "action") if k in features}
    return cams, dims


def check_same_features(features: dict[str, Any], bundle: str | Path) -> None:
    """ActlabError before any work when the run's dataset gives the policy other cameras, or another state
    or action size, than the bundle was trained with. Why: ACT shares its backbone across cameras, so a
    bundle of cameras top and wrist loads into a policy of top alone without a tensor of another shape;
    --init-from a two-camera bundle on a one-camera dataset trained (a correction head on a frozen
    policy that now saw one camera), exit 0."""
    file = Path(bundle) / "features.json"
    theirs = read_json(file, "feature spec", fix=_damaged_fix())
    (their_cams, their_dims), (my_cams, my_dims) = _inputs_and_outputs(theirs), _inputs_and_outputs(features)
    if their_cams != my_cams or their_dims != my_dims:

        def words(cams: list[str], dims: dict[str, list[int]]) -> str:
            sizes = ", ".join(f"{k} {v}" for k, v in dims.items())
            return f"cameras {', '.join(cams) or 'none'}; {sizes}"

        raise ActlabError(
            "the dataset gives the policy other inputs or outputs than the --init-from bundle was trained on",
            file=file,
            field="init_from",
            expected=words(their_cams, their_dims),
            found=f"{words(my_cams, my_dims)} (the dataset, with policy.cameras)",
            fix="train on a dataset with the bundle's cameras and state/action sizes (or name the bundle's "
            "cameras with --set policy.cameras=[...]); nothing was trained",
        )


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


def held_out_episodes(bundle: str | Path, dataset: Any) -> tuple[int, ...] | None:
    """The episodes ``bundle``'s own training held out for its validation loss, when ``dataset`` is the one
    it was trained on (by identity: a copy is the same dataset); None otherwise (another dataset, a
    bundle that records none, a record damaged or naming episodes ``dataset`` lacks).

    Why: a fine-tune drew its own validation episodes with its own seed, so a fine-tune of a policy on its
    own dataset validated on episodes the policy had trained on, and trained on episodes it never had:
    four correction heads trained on one frozen policy with seeds 0-3 held out four different sets of 15,
    three of them overlapping the frozen policy's training episodes."""
    meta = read_json(Path(bundle) / "actlab.json", "checkpoint bundle metadata", fix=_damaged_fix())
    train = (meta.get("extra") or {}).get("train") if isinstance(meta, dict) else None
    if not isinstance(train, dict) or not isinstance(train.get("dataset"), dict):
        return None
    held = train.get("val_episodes")
    if train["dataset"].get("identity") != dataset.identity or not isinstance(held, list) or not held:
        return None
    have = {int(e.index) for e in dataset.episodes}
    if not all(type(e) is int and e in have for e in held) or len(set(held)) != len(held):
        return None
    return tuple(held)
