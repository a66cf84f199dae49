"""Export to / import from LeRobot's ACT format without lerobot: names, files, refusals, round trip.

The parity against lerobot 0.6.1 itself is in test_lerobot_real.py (slow)."""

from __future__ import annotations

import dataclasses
import json
from importlib.util import find_spec

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from actlab.errors import ActlabError
from actlab.lerobot.export import PRE_STATE, export_policy
from actlab.lerobot.import_ import affine_stats, import_lerobot_act
from actlab.policies import ACTConfig, ACTRelativeConfig, load_policy, make_policy, save_policy

CAMS = ("observation.images.wrist", "observation.images.top")  # not sorted: the order must survive
# a CLIP vision tower small enough to build in milliseconds (random weights, no download)
TINY_VIT = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64,
            "patch_size": 8, "image_size": 32}  # fmt: skip


def _features(size: int = 32) -> dict:
    feats = {k: {"dtype": "float32", "shape": [6], "names": None} for k in ("observation.state", "action")}
    for cam in CAMS:
        feats[cam] = {"dtype": "video", "shape": [size, size, 3], "names": ["height", "width", "channels"]}
    return feats


def _stats(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    stats = {
        k: {"mean": rng.normal(size=6), "std": rng.uniform(0.5, 2, 6)}
        for k in ("observation.state", "action")
    }
    stats["observation.state"]["std"][2] = 0.0  # a joint that never moved: actlab's std floor applies
    for cam in CAMS:
        stats[cam] = {"mean": rng.uniform(0.3, 0.6, (3, 1, 1)), "std": rng.uniform(0.1, 0.3, (3, 1, 1))}
    # act_relative's relative-action stats (chunk_size 6 x 6 joints), only for the refusal test
    stats["action.relative"] = {
        "mean": np.zeros(6),
        "std": np.ones(6),
        "mean_per_step": np.zeros((6, 6)),
        "std_per_step": np.ones((6, 6)),
    }
    return stats


def _tiny(**overrides) -> ACTConfig:
    fields = dict(
        decoder_input="zeros",
        pretrained_backbone_weights=None,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        chunk_size=6,
        n_action_steps=3,
        n_encoder_layers=2,
        n_vae_encoder_layers=1,
        latent_dim=8,
        cameras=CAMS,
    )
    return ACTConfig(**{**fields, **overrides})


def _policy(cfg: ACTConfig | None = None, seed: int = 0):
    torch.manual_seed(seed)
    with pytest.warns(UserWarning, match="std"):
        policy = make_policy(cfg or _tiny(), _features(), _stats(), pretrained=False)
    with torch.no_grad():  # move every weight off its initial value (biases start at 0)
        for p in policy.parameters():
            p.add_(0.01 * torch.randn_like(p))
    return policy.eval()


def _obs(n: int = 2, seed: int = 1) -> dict:
    g = torch.Generator().manual_seed(seed)
    obs = {"observation.state": torch.randn(n, 6, generator=g)}
    for cam in CAMS:
        obs[cam] = torch.randint(0, 256, (n, 3, 32, 32), generator=g, dtype=torch.uint8)
    return obs


def test_export_writes_lerobot_names_config_and_processor_stats(tmp_path):
    policy = _policy()
    summary = export_policy(policy, tmp_path / "out")
    out = tmp_path / "out"
    tensors = load_file(str(out / "model.safetensors"))
    mine = {k for k in policy.state_dict() if not k.startswith("normalizer.")}
    assert set(tensors) == {"model." + k for k in mine} | {"model.vae_encoder_pos_enc"}
    assert "model.backbone.layer4.1.bn2.running_var" in tensors and "model.decoder.norm.weight" in tensors
    assert tensors["model.vae_encoder_pos_enc"].shape == (1, 6 + 2, 32)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["type"] == "act" and cfg["pretrained_backbone_weights"] is None
    assert list(cfg["input_features"]) == ["observation.state", *CAMS]  # camera order kept
    assert cfg["input_features"][CAMS[0]] == {"type": "VISUAL", "shape": [3, 32, 32]}
    assert (cfg["chunk_size"], cfg["n_action_steps"], cfg["dim_model"], cfg["latent_dim"]) == (6, 3, 32, 8)
    pre = json.loads((out / "policy_preprocessor.json").read_text())
    assert [s["registry_name"] for s in pre["steps"]] == [
        "rename_observations_processor",
        "to_batch_processor",
        "device_processor",
        "normalizer_processor",
    ]
    stats = load_file(str(out / PRE_STATE))
    assert np.allclose(stats["observation.state.std"][2], 1.0)  # the floored std actlab really applies
    assert np.allclose(stats[f"{CAMS[1]}.mean"].ravel(), [0.485, 0.456, 0.406])  # ImageNet, as actlab
    assert stats[f"{CAMS[1]}.mean"].shape == (3, 1, 1)
    assert summary["n_tensors"] == len(tensors) and summary["notes"]


@pytest.mark.parametrize(
    ("cfg", "field", "match"),
    [
        (
            ACTRelativeConfig(**{**dataclasses.asdict(_tiny()), "type": "act_relative", "rtc_max_delay": 2}),
            "type",
            "no LeRobot counterpart",
        ),
        (_tiny(vision_backbone="cnn_small"), "vision_backbone", "no cnn_small backbone"),
        (_tiny(decoder_input="queries"), "decoder_input", "feeds zeros"),
        (_tiny(downscale_img_square=32), "downscale_img_square", "does not resize"),
        (_tiny(camera_fusion="mean"), "camera_fusion", "no camera fusion"),
        (_tiny(n_obs_steps=3), "n_obs_steps", "current observation only"),
        pytest.param(
            _tiny(vision_backbone="clip_vit", vit_config=TINY_VIT),
            "vision_backbone",
            "no clip_vit backbone",
            marks=pytest.mark.skipif(find_spec("transformers") is None, reason="pip install -e '.[vit]'"),
        ),
    ],
)
def test_plain_act_export_refuses_what_lerobot_cannot_run_and_says_why(tmp_path, cfg, field, match):
    with pytest.warns(UserWarning):
        policy = make_policy(cfg, _features(), _stats(), pretrained=False)
    with pytest.raises(ActlabError, match=match) as e:
        export_policy(policy, tmp_path / "out", source=str(tmp_path / "bundle"), lerobot_type="act")
    assert field in e.value.field.split(", ") and "actlab eval" in e.value.fix
    assert "--lerobot-type plugin" in e.value.fix
    # the plugin's install line; a ViT's adds the `vit` extra (transformers, not in lerobot's install)
    vit = cfg.vision_backbone == "clip_vit"
    assert (
        "pip install . './integrations/lerobot_policy_actlab[vit]'"
        if vit
        else "pip install . ./integrations/lerobot_policy_actlab"
    ) in e.value.fix
    assert not (tmp_path / "out").exists()
    # the default (auto) exports the same policy for actlab's plugin instead
    summary = export_policy(policy, tmp_path / "auto")
    assert summary["policy_type"] == f"actlab_{cfg.type}" and summary["needs"]
    assert ("[vit]" in summary["needs"]) == vit


def test_plain_act_refusal_lists_every_reason_at_once_and_its_printed_fix_runs(tmp_path, capsys):
    """The demo's kind of policy (small CNN, learned decoder queries): both reasons in one error, and the
    command the fix prints (BUNDLE / DIR filled in) exports it, without retraining."""
    from actlab.cli import main
    from actlab.lerobot.export import export_bundle

    policy = _policy(_tiny(vision_backbone="cnn_small", decoder_input="queries", camera_fusion="mean"))
    save_policy(policy, tmp_path / "bundle")
    assert main(["policy", "export", str(tmp_path / "bundle"), "--lerobot-type", "act",
                 "--out", str(tmp_path / "act")]) == 2  # fmt: skip
    assert "vision_backbone, camera_fusion, decoder_input" in capsys.readouterr().err
    with pytest.raises(ActlabError) as e:
        export_bundle(tmp_path / "bundle", tmp_path / "act", lerobot_type="act")
    assert e.value.field == "vision_backbone, camera_fusion, decoder_input"
    command = e.value.fix.split("instead (same weights, no retraining): ")[1].split(" (the robot")[0]
    argv = command.replace("BUNDLE", str(tmp_path / "bundle")).replace("DIR", str(tmp_path / "out")).split()
    assert argv[:3] == ["actlab", "policy", "export"]
    capsys.readouterr()
    assert main(argv[1:]) == 0
    printed = capsys.readouterr().out
    assert "type actlab_act" in printed and "pip install . ./integrations/lerobot_policy_actlab" in printed
    assert (tmp_path / "out" / "actlab_bundle" / "model.safetensors").is_file()


def test_plugin_export_round_trip_gives_the_same_actions_and_parameter_count(tmp_path):
    """Plugin export -> actlab policy import: the bundle inside is actlab's own (same actions, exactly);
    the parameter count printed is the policy's parameters (no buffers), equal on both sides."""
    policy = _policy(_tiny(vision_backbone="cnn_small", decoder_input="queries"))
    summary = export_policy(policy, tmp_path / "lerobot")
    cfg = json.loads((tmp_path / "lerobot" / "config.json").read_text())
    assert cfg["type"] == "actlab_act" and cfg["actlab_config"]["vision_backbone"] == "cnn_small"
    assert cfg["input_features"][CAMS[0]] == {"type": "VISUAL", "shape": [3, 32, 32]}
    pre = json.loads((tmp_path / "lerobot" / "policy_preprocessor.json").read_text())
    # LeRobot's step names (lerobot-train overrides them on a resume or a fine-tune), passing through:
    # IDENTITY for every feature type and no statistics (actlab's policy normalizes inside)
    post = json.loads((tmp_path / "lerobot" / "policy_postprocessor.json").read_text())
    steps = {s["registry_name"]: s for s in pre["steps"] + post["steps"]}
    assert [s["registry_name"] for s in pre["steps"]][-1] == "normalizer_processor"
    assert post["steps"][0]["registry_name"] == "unnormalizer_processor"
    for name in ("normalizer_processor", "unnormalizer_processor"):
        assert set(steps[name]["config"]["norm_map"].values()) == {"IDENTITY"}
        assert "state_file" not in steps[name]
    assert list(steps["normalizer_processor"]["config"]["features"]) == [*cfg["input_features"], "action"]
    back_summary = import_lerobot_act(tmp_path / "lerobot", tmp_path / "bundle")
    n = sum(p.numel() for p in policy.parameters())
    assert summary["n_parameters"] == back_summary["n_parameters"] == n
    back = load_policy(tmp_path / "bundle")
    obs = _obs()
    assert torch.equal(policy.predict_action_chunk(obs), back.predict_action_chunk(obs))


def test_plain_act_export_counts_parameters_not_the_vae_table(tmp_path):
    policy = _policy()
    summary = export_policy(policy, tmp_path / "out")
    assert summary["policy_type"] == "act" and summary["needs"] is None
    assert summary["n_parameters"] == sum(p.numel() for p in policy.parameters())


def test_decoder_input_zeros_changes_the_actions_and_is_validated():
    obs = _obs()
    zeros = _policy(_tiny())
    queries = _policy(_tiny(decoder_input="queries"))
    queries.load_state_dict(zeros.state_dict())
    assert not torch.allclose(zeros.predict_action_chunk(obs), queries.predict_action_chunk(obs))
    with pytest.raises(ActlabError, match="decoder_input"):
        _tiny(decoder_input="ones")


def test_export_then_import_gives_the_same_actions(tmp_path):
    policy = _policy()
    export_policy(policy, tmp_path / "lerobot")
    summary = import_lerobot_act(tmp_path / "lerobot", tmp_path / "bundle")
    back = load_policy(tmp_path / "bundle")
    assert back.config.decoder_input == "zeros" and back.camera_keys == list(CAMS)
    assert summary["image_norm"] == "imagenet"
    obs = _obs(3)
    # LeRobot divides by std + 1e-8 (the import reproduces it): equal up to that.
    torch.testing.assert_close(
        back.predict_action_chunk(obs), policy.predict_action_chunk(obs), atol=1e-5, rtol=1e-5
    )
    policy.reset()
    back.reset()
    for _ in range(4):  # the queue of n_action_steps behaves the same
        torch.testing.assert_close(back.select_action(obs), policy.select_action(obs), atol=1e-5, rtol=1e-5)


def test_import_refuses_other_policy_types_with_the_bridge_as_fix(tmp_path):
    d = tmp_path / "diffusion"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps({"type": "diffusion", "input_features": {}, "output_features": {}})
    )
    with pytest.raises(ActlabError, match="only LeRobot ACT") as e:
        import_lerobot_act(d, tmp_path / "bundle")
    assert "--lerobot-policy" in e.value.fix
    with pytest.raises(ActlabError, match="no config.json"):
        import_lerobot_act(tmp_path, tmp_path / "bundle")


@pytest.mark.parametrize("mode", ["MIN_MAX", "QUANTILES", "MEAN_STD", "IDENTITY"])
def test_lerobot_normalization_modes_become_exact_mean_std(mode, tmp_path):
    rng = np.random.default_rng(0)
    lo, hi = rng.normal(size=4), rng.normal(size=4) + 3
    lo[1] = hi[1]  # a constant dimension: LeRobot divides by eps there
    stats = {"min": lo, "max": hi, "q01": lo, "q99": hi, "mean": (lo + hi) / 2, "std": hi - lo}
    x = rng.normal(size=(5, 4))
    eps = 1e-8
    if mode == "MEAN_STD":
        expected = (x - stats["mean"]) / (stats["std"] + eps)
    elif mode == "IDENTITY":
        expected = x
    else:  # LeRobot: 2 * (x - lo) / d - 1 with d = hi - lo, eps where 0
        d = np.where(hi - lo == 0, eps, hi - lo)
        expected = 2 * (x - lo) / d - 1
    mean, std = affine_stats(stats, mode, (4,), True, eps, tmp_path)
    assert np.allclose((x - mean) / std, expected, rtol=1e-9, atol=1e-6)


def test_init_from_copies_weights_not_normalization_and_checks_the_model(tmp_path):
    from actlab.training.init_from import load_initial_weights

    source = _policy()
    save_policy(source, tmp_path / "bundle")
    with pytest.warns(UserWarning):
        target = make_policy(_tiny(dropout=0.3), _features(), _stats(seed=7), pretrained=False)
    load_initial_weights(target, tmp_path / "bundle")
    for name, t in target.state_dict().items():
        same = torch.equal(t, source.state_dict()[name])
        dataset_stats = name.startswith(("normalizer.entries.observation_state", "normalizer.entries.action"))
        assert same != dataset_stats, name  # weights copied, the new dataset's stats kept
    with pytest.warns(UserWarning):
        other = make_policy(_tiny(dim_feedforward=48), _features(), _stats(), pretrained=False)
    with pytest.raises(ActlabError, match="another model") as e:
        load_initial_weights(other, tmp_path / "bundle")
    assert e.value.field == "policy.dim_feedforward"


@pytest.mark.timeout(120)
def test_an_export_whose_config_json_was_edited_is_refused_against_its_weights(tmp_path):
    """SILENT before: config.json's chunk_size / n_action_steps edited, the plugin loaded the export and
    the model ran its own values while LeRobot believed the edited ones. check_export_config (called by
    the plugin's from_pretrained) compares them with the shipped bundle's config."""
    from actlab.errors import ActlabError
    from actlab.lerobot.runtime import check_export_config
    from actlab.utils.config import to_dict

    export_policy(_policy(_tiny(vision_backbone="cnn_small", decoder_input="queries")), tmp_path / "lerobot")
    file = tmp_path / "lerobot" / "config.json"
    model = to_dict(load_policy(tmp_path / "lerobot" / "actlab_bundle").config)
    top = json.loads(file.read_text())
    check_export_config(top, model, file)  # as exported: agrees (tuples and lists alike)
    for key, edit in (("n_action_steps", 1), ("chunk_size", model["chunk_size"] + 5)):
        with pytest.raises(ActlabError, match="disagrees with the model it ships") as e:
            check_export_config({**top, key: edit}, model, file)
        assert key in e.value.field and f"{key}={model[key]!r}" in e.value.expected
        nested = {**top, "actlab_config": {**top["actlab_config"], key: edit}}
        with pytest.raises(ActlabError, match=key):
            check_export_config(nested, model, file)
