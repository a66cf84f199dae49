"""actlab ``act`` bundle -> LeRobot 0.6.x pretrained-policy directory (``ACTPolicy.from_pretrained``,
``make_pre_post_processors``, ``lerobot-rollout --policy.path=DIR``).

What LeRobot 0.6.1 reads from such a directory (learned from its source, written here without it)::

    config.json                       {"type": "act", input/output features, normalization_mapping, ...}
    model.safetensors                 ACTPolicy.state_dict(): "model." + the module names below
    policy_preprocessor.json          rename -> to_batch -> device -> normalizer (state file below)
    policy_preprocessor_step_3_normalizer_processor.safetensors     "<feature>.mean" / "<feature>.std"
    policy_postprocessor.json         unnormalizer (state file below) -> device(cpu)
    policy_postprocessor_step_0_unnormalizer_processor.safetensors  the same statistics

Parameter names: actlab's ACT uses LeRobot's module names (``encoder.layers.0.self_attn.in_proj_weight``,
``backbone.layer1.0.conv1.weight`` with torchvision's ResNet names, ...), so a LeRobot name is
``"model." + the actlab name``. Normalization moves from the policy (actlab's ``normalizer.*`` buffers,
std already floored) into the processors' statistics; the camera statistics are what actlab really used
(ImageNet's, or the floored dataset ones), so LeRobot's ``MEAN_STD`` on every feature type reproduces it.
LeRobot divides by ``std + 1e-8``: a relative change below 1e-5 for actlab's stds (>= 1e-3).

Numbers that must agree and why they do (checked by the slow parity test in tests/lerobot):
- post-norm / pre-norm layers, DETR positions added to queries and keys only, the final encoder norm
  only with pre-norm, a decoder norm always: same structure;
- the 1-D tokens ``[latent, state]`` with learned positions, then every camera's ``(h w)`` tokens in
  camera order with the same 2-D sinusoidal table (``config.json`` keeps actlab's camera order);
- the latent is 0 at inference in both; the VAE's fixed 1-D table is a (persistent) buffer in LeRobot
  and is written from actlab's identical table;
- the decoder's input content: LeRobot feeds zeros, so only bundles trained with
  ``decoder_input="zeros"`` can be exported (actlab's default feeds the learned queries);
- ``n_action_steps`` queueing and temporal ensembling are the same algorithm in both;
- images: LeRobot's ACT does not resize, so ``downscale_img_square`` cannot be exported;
- LeRobot's ACT has torchvision ResNets only, concatenates every camera's tokens and reads one
  observation (``n_obs_steps`` 1): ViT backbones, ``camera_fusion`` other than ``tokens`` and
  ``n_obs_steps > 1`` are refused.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.policies import load_policy
from actlab.policies.bundle import CHECKSUMMED, training_record, write_bundle
from actlab.policies.configs import VIT_BACKBONES
from actlab.utils import config as cfgutil
from actlab.utils.io import (
    atomic_dir,
    atomic_write_bytes,
    atomic_write_json,
    check_out_dir,
    file_sha256,
    read_json,
    read_output_marker,
)
from actlab.utils.kinds import EXPORT_BUNDLE, recorded_digests

# The LeRobot release whose format this writes (and whose source the tests run against).
LEROBOT_VERSION = "0.6.1"
PREPROCESSOR = "policy_preprocessor"
POSTPROCESSOR = "policy_postprocessor"
# Step files are named after the pipeline, the step's index and its registry name.
PRE_STATE = f"{PREPROCESSOR}_step_3_normalizer_processor.safetensors"
POST_STATE = f"{POSTPROCESSOR}_step_0_unnormalizer_processor.safetensors"
# LeRobot's NormalizerProcessorStep default epsilon (added to std when normalizing).
NORM_EPS = 1e-8
STATE = "observation.state"
ACTION = "action"
# LeRobot's optimizer fields for ACT (its defaults; only used if the export is fine-tuned in LeRobot).
_LEROBOT_OPTIM = {"optimizer_lr": 1e-5, "optimizer_weight_decay": 1e-4, "optimizer_lr_backbone": 1e-5}
# actlab ACTConfig fields that LeRobot's ACTConfig has under the same name and meaning.
SHARED_FIELDS = (
    "chunk_size", "n_action_steps", "vision_backbone", "pre_norm", "dim_model", "n_heads",
    "dim_feedforward", "feedforward_activation", "n_encoder_layers", "n_decoder_layers", "use_vae",
    "latent_dim", "n_vae_encoder_layers", "temporal_ensemble_coeff", "dropout", "kl_weight",
)  # fmt: skip
# The LeRobot plugin shipped by this repository (integrations/lerobot_policy_actlab): the distribution,
# the line that installs it with actlab (its dependency) into a lerobot venv (run from the repository
# root; docs/lerobot.md shows it), the LeRobot policy type of each actlab policy type, and the export's
# actlab bundle folder.
PLUGIN_DIST = "lerobot_policy_actlab"
PLUGIN_PIP = "pip install . ./integrations/lerobot_policy_actlab"
# ViT backbones are transformers' models, which lerobot 0.6.1 does not install: the plugin's `vit` extra
PLUGIN_PIP_VIT = "pip install . './integrations/lerobot_policy_actlab[vit]'"
PLUGIN_TYPES = {"act": "actlab_act", "act_relative": "actlab_act_relative"}
PLUGIN_BUNDLE = EXPORT_BUNDLE
# --lerobot-type choices: auto = LeRobot's own `act` where exactly equivalent, else the plugin's type.
LEROBOT_TYPES = ("auto", "act", "plugin")
# Where an export-refusing setting is explained once.
_EVAL_IN_ACTLAB = "evaluate it in actlab instead (actlab eval BUNDLE: same harness, taxonomy and videos)"


@dataclass(frozen=True)
class Blocker:
    """One reason a policy has no exact counterpart in LeRobot's own ACT."""

    field: str  # the actlab config field (or "cameras")
    expected: Any  # what LeRobot's ACT has
    found: Any  # what this policy has
    why: str  # one sentence


def act_blockers(config: Any, camera_keys: list[str]) -> list[Blocker]:
    """Every reason ``config`` cannot become LeRobot's plain ``act`` (empty: it can, exactly)."""
    kind = getattr(config, "type", None)
    if kind == "act_relative":
        return [
            Blocker(
                "type",
                "act",
                kind,
                "LeRobot's ACT predicts absolute actions and has no state-delta or real-time-chunking "
                "prefix token (no LeRobot counterpart)",
            )
        ]
    if kind != "act":
        return [Blocker("type", "act", kind, "only actlab `act` bundles have a LeRobot ACT counterpart")]
    out = []
    if config.vision_backbone not in ("resnet18", "resnet34"):
        out.append(
            Blocker(
                "vision_backbone",
                "resnet18 or resnet34",
                config.vision_backbone,
                f"LeRobot's ACT has no {config.vision_backbone} backbone (torchvision ResNets only)",
            )
        )
    if config.camera_fusion != "tokens":
        out.append(
            Blocker(
                "camera_fusion",
                "tokens",
                config.camera_fusion,
                "LeRobot's ACT has no camera fusion: it always gives every camera's tokens to the encoder",
            )
        )
    if config.n_obs_steps != 1:
        out.append(
            Blocker(
                "n_obs_steps",
                1,
                config.n_obs_steps,
                "LeRobot's ACT reads the current observation only (its n_obs_steps must be 1)",
            )
        )
    if config.decoder_input != "zeros":
        out.append(
            Blocker(
                "decoder_input",
                "zeros",
                config.decoder_input,
                "this bundle feeds the learned queries into the decoder (actlab's default); LeRobot's ACT "
                "feeds zeros, so its actions would differ",
            )
        )
    if config.downscale_img_square is not None:
        out.append(
            Blocker(
                "downscale_img_square",
                "null",
                config.downscale_img_square,
                "LeRobot's ACT does not resize images; this policy resizes every camera inside the model",
            )
        )
    if getattr(config, "correction_head", False):
        out.append(
            Blocker(
                "correction_head",
                "false",
                True,
                "LeRobot's ACT has no correction head (--execution correct); actlab's plugin carries it",
            )
        )
    if not camera_keys:
        out.append(
            Blocker(
                "cameras",
                "one or more observation.images.* cameras",
                "none",
                "LeRobot's ACT needs at least one camera (or an environment state, which actlab has not)",
            )
        )
    return out


def plugin_pip(config: Any) -> str:
    """The line that installs the plugin for a policy of ``config`` (a ViT also needs transformers)."""
    return PLUGIN_PIP_VIT if config.vision_backbone in VIT_BACKBONES else PLUGIN_PIP


def check_exportable(config: Any, camera_keys: list[str], file: Path | None = None) -> None:
    """Raise one ActlabError listing every reason a policy config has no exact LeRobot ACT counterpart.

    The fix it gives works as written: export the same bundle as the plugin's type (no retraining).
    """
    found = act_blockers(config, camera_keys)
    if not found:
        return
    reasons = "; ".join(f"{b.field}: {b.why}" for b in found)
    raise ActlabError(
        f"LeRobot's own ACT cannot run this policy exactly ({len(found)} reason(s)): {reasons}",
        file=file,
        field=", ".join(b.field for b in found),
        expected=", ".join(f"{b.field}={b.expected}" for b in found),
        found=", ".join(f"{b.field}={b.found}" for b in found),
        fix="export it for actlab's LeRobot plugin instead (same weights, no retraining): actlab policy "
        "export BUNDLE --to lerobot --lerobot-type plugin --out DIR (the robot machine needs "
        f"`{plugin_pip(config)}`); or {_EVAL_IN_ACTLAB}",
    )


def lerobot_state_dict(policy: Any) -> dict[str, Any]:
    """The tensors of LeRobot's ``ACTPolicy.state_dict()`` for an actlab ACT policy (fp32, CPU)."""
    out = {}
    for name, tensor in policy.state_dict().items():
        if name.startswith("normalizer."):
            continue  # normalization lives in LeRobot's processors
        out["model." + name] = tensor.detach().float().cpu().contiguous()
    if policy.config.use_vae:
        # LeRobot registers the VAE encoder's fixed sinusoidal table as a persistent buffer (1, H+2, D).
        out["model.vae_encoder_pos_enc"] = policy.vae_encoder_pos_enc.detach().float().cpu().contiguous()
    return out


def _feature(kind: str, shape: list[int]) -> dict[str, Any]:
    return {"type": kind, "shape": list(shape)}


def lerobot_features(policy: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """LeRobot ``input_features`` (state, then the cameras in actlab's order) and ``output_features``."""
    inputs = {STATE: _feature("STATE", [policy.state_dim])}
    for key in policy.camera_keys:
        inputs[key] = _feature("VISUAL", list(policy.image_shapes[key]))  # (C, H, W)
    return inputs, {ACTION: _feature("ACTION", [policy.action_dim])}


def _pretrained_config(kind: str, n_obs_steps: int, inputs: dict, outputs: dict) -> dict[str, Any]:
    """The fields every LeRobot 0.6 ``config.json`` of a policy has (``PreTrainedConfig``'s), for ``kind``."""
    return {
        "type": kind,
        "n_obs_steps": n_obs_steps,
        "input_features": inputs,
        "output_features": outputs,
        "device": "cpu",
        "use_amp": False,
        "use_peft": False,
        "push_to_hub": False,
        "repo_id": None,
        "private": None,
        "tags": None,
        "license": None,
        "pretrained_path": None,
        "pretrained_revision": None,
    }


def lerobot_config(policy: Any) -> dict[str, Any]:
    """LeRobot 0.6.1 ``config.json`` of the exported ACT."""
    cfg = policy.config
    inputs, outputs = lerobot_features(policy)
    data: dict[str, Any] = {
        **_pretrained_config("act", 1, inputs, outputs),
        "normalization_mapping": {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
        # The weights are in model.safetensors: LeRobot must not download ImageNet weights at build time.
        "pretrained_backbone_weights": None,
        "replace_final_stride_with_dilation": False,
    }
    for name in SHARED_FIELDS:
        data[name] = getattr(cfg, name)
    data.update(_LEROBOT_OPTIM)
    return data


def normalizer_stats(policy: Any) -> dict[str, Any]:
    """``{"<feature>.mean" | "<feature>.std": tensor}`` as LeRobot's (un)normalizer steps store them: the
    statistics actlab's normalizer really applies (floored stds, ImageNet or dataset image stats)."""
    out = {}
    for key in [STATE, *policy.camera_keys, ACTION]:
        entry = policy.normalizer.get(key)
        for stat in ("mean", "std"):
            out[f"{key}.{stat}"] = getattr(entry, stat).detach().float().cpu().contiguous()
    return out


def processor_configs(policy: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``policy_preprocessor.json`` and ``policy_postprocessor.json`` (LeRobot's default ACT pipelines:
    rename -> batch -> device -> normalizer, and unnormalizer -> device after), normalizing with the
    statistics of the state files."""
    inputs, outputs = lerobot_features(policy)
    return _pipelines(inputs, outputs, "MEAN_STD", state=True)


def _pipelines(inputs: dict, outputs: dict, mode: str, state: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two pipelines' JSON with LeRobot's (un)normalizer steps in ``mode`` for every feature type.

    Both types of export have the steps by name: LeRobot 0.6.1's ``lerobot-train`` overrides the steps
    named ``normalizer_processor`` / ``unnormalizer_processor`` of every pretrained processor it loads (a
    resume, a fine-tune from ``--policy.path``) and stops with "Override keys ... do not match any step"
    when a pipeline lacks them. ``state``: the steps read their statistics from the state files."""
    norm_map = dict.fromkeys(("VISUAL", "STATE", "ACTION"), mode)
    device = {"device": "cpu", "float_dtype": None}
    normalizer = {"eps": NORM_EPS, "features": {**inputs, **outputs}, "norm_map": norm_map}
    unnormalizer = {"eps": NORM_EPS, "features": outputs, "norm_map": norm_map}
    pre = {
        "name": PREPROCESSOR,
        "steps": [
            {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
            {"registry_name": "to_batch_processor", "config": {}},
            {"registry_name": "device_processor", "config": device},
            {"registry_name": "normalizer_processor", "config": normalizer},
        ],
    }
    post = {
        "name": POSTPROCESSOR,
        "steps": [
            {"registry_name": "unnormalizer_processor", "config": unnormalizer},
            {"registry_name": "device_processor", "config": device},
        ],
    }
    if state:
        pre["steps"][3]["state_file"] = PRE_STATE
        post["steps"][0]["state_file"] = POST_STATE
    return pre, post


def _notes(policy: Any) -> list[str]:
    """What the user must know to deploy the export (not errors)."""
    notes = []
    for key in policy.camera_keys:
        _, h, w = policy.image_shapes[key]
        info = (policy.features.get(key) or {}).get("info") or {}
        if "actlab.resize" in info:
            notes.append(
                f"{key}: trained on frames fitted into {h}x{w} (black padding) by actlab's FrameStore; "
                "LeRobot does not resize, so the robot must deliver frames prepared the same way"
            )
        else:
            notes.append(f"{key}: LeRobot feeds the camera frames as they come; they must be {h}x{w} (H x W)")
    if policy.config.freeze_backbone:
        notes.append("freeze_backbone has no LeRobot counterpart: a LeRobot fine-tune trains the backbone")
    return notes


# What an export directory says wrote it: --overwrite replaces only an earlier export.
EXPORT_KIND = "actlab policy export"


def n_parameters(policy: Any) -> int:
    """The policy's parameter count (what ``actlab policy info`` and LeRobot count: no buffers)."""
    return int(sum(p.numel() for p in policy.parameters()))


def export_policy(
    policy: Any,
    out_dir: str | Path,
    overwrite: bool = False,
    source: str | None = None,
    lerobot_type: str = "auto",
) -> dict:
    """Write ``policy`` as a LeRobot pretrained-policy directory, atomically.

    ``lerobot_type``: ``"act"`` writes LeRobot's own ACT (no plugin needed; an ActlabError listing every
    reason when that is not exact, see :func:`check_exportable`); ``"plugin"`` writes the type of actlab's
    LeRobot plugin (:func:`export_plugin_policy`); ``"auto"`` (default) the first where it is exact, else
    the second. Returns a summary (files, features, notes, ``needs`` = the pip line or None).
    """
    if lerobot_type not in LEROBOT_TYPES:
        raise ActlabError("unknown LeRobot export type", field="lerobot_type", expected=LEROBOT_TYPES)
    file = Path(source) / "config.json" if source else None
    if lerobot_type == "plugin" or (
        lerobot_type == "auto" and act_blockers(policy.config, list(policy.camera_keys))
    ):
        return export_plugin_policy(policy, out_dir, overwrite=overwrite, source=source)
    from safetensors.torch import save

    check_exportable(policy.config, list(policy.camera_keys), file)
    tensors = lerobot_state_dict(policy)
    stats = normalizer_stats(policy)
    pre, post = processor_configs(policy)
    config = lerobot_config(policy)
    summary = {
        "source": source,
        "lerobot_format": LEROBOT_VERSION,
        "policy_type": "act",
        "needs": None,
        "n_tensors": len(tensors),
        "n_parameters": n_parameters(policy),
        "input_features": config["input_features"],
        "output_features": config["output_features"],
        "notes": _notes(policy),
    }
    with atomic_dir(out_dir, overwrite, kind=EXPORT_KIND, inputs=[source] if source else ()) as tmp:
        atomic_write_json(tmp / "config.json", config, indent=4)
        atomic_write_bytes(tmp / "model.safetensors", save(tensors))
        atomic_write_json(tmp / f"{PREPROCESSOR}.json", pre)
        atomic_write_json(tmp / f"{POSTPROCESSOR}.json", post)
        atomic_write_bytes(tmp / PRE_STATE, save(stats))
        atomic_write_bytes(tmp / POST_STATE, save(stats))
        # Provenance for people (LeRobot ignores files it does not know).
        atomic_write_json(tmp / "actlab_export.json", summary)
    return {**summary, "out": str(out_dir)}


def plugin_config(policy: Any) -> dict[str, Any]:
    """LeRobot ``config.json`` of a plugin-type export (``actlab_act`` / ``actlab_act_relative``).

    The actlab policy config travels whole (``actlab_config``); the LeRobot fields are the features (the
    cameras at their trained size), ``chunk_size`` / ``n_action_steps`` and, for act_relative, the RTC
    limit LeRobot's engine must respect.
    """
    cfg = policy.config
    inputs, outputs = lerobot_features(policy)
    return {
        **_pretrained_config(PLUGIN_TYPES[cfg.type], cfg.n_obs_steps, inputs, outputs),
        "chunk_size": cfg.chunk_size,
        "n_action_steps": cfg.n_action_steps,
        "actlab_config": cfgutil.to_dict(cfg),
        "actlab_features": policy.features,
    }


def plugin_processor_configs(policy: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The plugin's pipelines: LeRobot's ACT pipelines with (un)normalizer steps of mode IDENTITY and no
    statistics, which pass everything through: actlab's policy normalizes inside with its bundle's
    statistics, so LeRobot's path runs actlab's math (the plugin's factory builds the same steps)."""
    inputs, outputs = lerobot_features(policy)
    return _pipelines(inputs, outputs, "IDENTITY", state=False)


def _plugin_notes(policy: Any) -> list[str]:
    notes = []
    for key in policy.camera_keys:
        _, h, w = policy.image_shapes[key]
        notes.append(
            f"{key}: trained at {h}x{w} (H x W); the plugin resizes the robot camera's frames to it "
            "(same aspect ratio required)"
        )
    if policy.config.type == "act_relative" and policy.config.rtc_max_delay > 0:
        notes.append(
            f"real-time chunking: lerobot-rollout --inference.type=rtc uses the committed-action prefix "
            f"(up to rtc_max_delay={policy.config.rtc_max_delay} steps; a longer LeRobot delay is clamped)"
        )
    return notes


def export_plugin_policy(
    policy: Any, out_dir: str | Path, overwrite: bool = False, source: str | None = None
) -> dict:
    """Write ``policy`` (any actlab policy) for actlab's LeRobot plugin, atomically.

    The directory holds LeRobot's ``config.json`` (type ``actlab_act`` / ``actlab_act_relative``), the
    processors' JSON and the actlab bundle itself in ``actlab_bundle/`` (safetensors + JSON): the plugin
    runs actlab's own policy code on it, so its actions are actlab's by construction.
    """
    kind = policy.config.type
    if kind not in PLUGIN_TYPES:
        raise ActlabError(
            "no LeRobot plugin type for this policy type",
            field="type",
            expected=", ".join(PLUGIN_TYPES),
            found=kind,
        )
    config = plugin_config(policy)
    pre, post = plugin_processor_configs(policy)
    summary = {
        "source": source,
        "lerobot_format": LEROBOT_VERSION,
        "policy_type": config["type"],
        "needs": plugin_pip(policy.config),
        "n_tensors": len(policy.state_dict()),
        "n_parameters": n_parameters(policy),
        "input_features": config["input_features"],
        "output_features": config["output_features"],
        "notes": _plugin_notes(policy),
    }
    with atomic_dir(out_dir, overwrite, kind=EXPORT_KIND, inputs=[source] if source else ()) as tmp:
        atomic_write_json(tmp / "config.json", config, indent=4)
        atomic_write_json(tmp / f"{PREPROCESSOR}.json", pre)
        atomic_write_json(tmp / f"{POSTPROCESSOR}.json", post)
        (tmp / PLUGIN_BUNDLE).mkdir()
        write_bundle(policy, tmp / PLUGIN_BUNDLE, extra={"exported_from": source, **training_record(source)})
        # the bundle's file digests: a load refuses an export whose bundle was replaced by another's
        summary["bundle_sha256"] = json.loads((tmp / PLUGIN_BUNDLE / "actlab.json").read_text())["sha256"]
        atomic_write_json(tmp / "actlab_export.json", summary)
    return {**summary, "out": str(out_dir)}


def export_bundle(
    bundle: str | Path, out_dir: str | Path, overwrite: bool = False, lerobot_type: str = "auto"
) -> dict:
    """Load an actlab bundle (``load_policy``) and export it with :func:`export_policy`."""

    check_out_dir(out_dir, EXPORT_KIND, overwrite, [bundle])  # a refused --out costs nothing
    policy = load_policy(bundle, device="cpu")
    return export_policy(policy, out_dir, overwrite=overwrite, source=str(bundle), lerobot_type=lerobot_type)


def check_exported_bundle(root: Path, bundle: str) -> None:
    """Refuse an export whose ``actlab_bundle/`` is not the bundle it exported: another export's whole
    bundle copied in (self-consistent, so its own digests pass) ran, was imported and fine-tuned under this
    export's name and record, exit 0 (25th fault run, lr_bundle_swap_px2). actlab_export.json records the
    bundle's file digests (its actlab.json ``sha256``). A lerobot-train checkpoint (no actlab_export.json
    and no export marker) is taken as it is. An export written before the record, or one that lost
    actlab_export.json, is said and taken as it is (its bundle cannot be compared); a record that is not
    the digests (actlab_export.json not JSON, not an object, ``bundle_sha256`` not an object of strings) is
    refused: each of those was taken as "no record", a swapped bundle ran and was imported without a word
    (26th fault run, imp_swap_rec_str, imp_swap_exportjson_empty)."""
    summary_file = root / "actlab_export.json"
    redo = (
        f"restore {summary_file.name} from a copy of the export, or export again (actlab policy export "
        "BUNDLE --to lerobot --out DIR)"
    )
    if not summary_file.exists():
        marker = read_output_marker(root)
        if marker is not None and marker.get("kind") == EXPORT_KIND:
            print(f"note: {root} is an export without its actlab_export.json: its {bundle}/ cannot be "
                  f"compared with the bundle it exported: {redo}", file=sys.stderr)  # fmt: skip
        return
    summary = read_json(summary_file, "the export's record (actlab_export.json)", fix=redo)
    if "bundle_sha256" not in summary:
        print(f"note: {root} predates the record of its bundle (actlab_export.json has no bundle_sha256): "
              f"its {bundle}/ is not compared with the bundle it exported (export again to get the record)",
              file=sys.stderr)  # fmt: skip
        return
    record = summary["bundle_sha256"]
    # every export records the four files: one emptied or without an entry compared nothing, and with the
    # bundle's own record emptied too the damaged weights ran in eval --lerobot-policy's child, unsaid
    # (27th fault run, evlp_sha_empty_wzero)
    if not (
        isinstance(record, dict)
        and all(isinstance(v, str) for v in record.values())
        and set(CHECKSUMMED) <= set(record)
    ):
        raise ActlabError(
            "the export's record of its bundle is damaged",
            file=summary_file,
            field="bundle_sha256",
            expected=f"the sha256 of each file of {bundle}/ as actlab policy export wrote them (an object "
            f"of file name: hex digest, for {', '.join(CHECKSUMMED)})",
            found=repr(record)[:120],
            fix=redo,
        )
    now = _bundle_digests(root / bundle, record)
    if record != now:
        differ = sorted(k for k in set(record) | set(now) if record.get(k) != now.get(k))
        raise ActlabError(
            f"the export's {bundle}/ is not the bundle it exported (replaced by another bundle?)",
            file=root / bundle,
            field="actlab_export.json bundle_sha256",
            expected=f"the files actlab_export.json records ({', '.join(differ)} differ)",
            found=f"other files in {bundle}/ (by its actlab.json's record, or their own sha256 where none)",
            fix=f"restore {bundle}/ from a copy of the export, or export again (actlab policy export BUNDLE "
            "--to lerobot --out DIR; actlab_export.json's source names the bundle)",
        )


def _bundle_digests(bundle: Path, record: dict[str, str]) -> dict[str, str]:
    """The digests of the files ``record`` names as ``bundle``'s actlab.json records them; a file it records
    no digest of (the record removed, emptied or damaged: its loader says so) by its own sha256. Compared
    by the records alone, a swapped bundle whose record was removed ran under the export's name: the
    loader's warning was in the bridge's child, whose stderr is read only when it fails (27th fault run,
    evlp_swap_bundle_sha_rm)."""
    recorded = recorded_digests(bundle) or {}
    now = {k: v for k, v in recorded.items() if isinstance(v, str)}
    for name in record:
        if name not in now:
            try:
                now[name] = file_sha256(bundle / name)
            except OSError as e:
                now[name] = f"unreadable ({e.strerror or type(e).__name__})"
    return now
