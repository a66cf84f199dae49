import dataclasses
import json

import pytest

from actlab.errors import ActlabError
from actlab.training import apply_train_overrides, config_from_dict, config_to_dict, get_preset, list_presets
from actlab.training.config import config_hash, describe_config, resume_diff


@pytest.mark.parametrize("name", list(list_presets()))
def test_every_preset_is_valid_and_round_trips_through_json(name):
    cfg = get_preset(name)
    assert cfg.name == name and cfg.policy_type == ("act_relative" if name.endswith("_rtc") else "act")
    again = config_from_dict(json.loads(json.dumps(config_to_dict(cfg))))
    assert again == cfg and config_hash(again) == config_hash(cfg)
    docs = describe_config(cfg)
    undocumented = [k for k, _, doc in docs if not doc]
    assert not undocumented  # every key, policy keys included, has a comment
    assert {"optim.lr", "policy.dim_model", "data.frames_on_device", "checkpoint.keep_last"} <= {
        k for k, _, _ in docs
    }


def test_the_rtc_preset_is_the_demo_recipe_with_prefix_training():
    demo, rtc = get_preset("so101_sim_cpu"), get_preset("so101_sim_cpu_rtc")
    assert rtc.policy.rtc_max_delay == 8 < rtc.policy.chunk_size - rtc.policy.n_action_steps
    assert dataclasses.replace(rtc, name=demo.name, policy=demo.policy) == demo  # same data, budget, optim
    assert rtc.policy.dim_model == demo.policy.dim_model and rtc.policy.chunk_size == demo.policy.chunk_size


def test_presets_differ_where_they_should():
    tiny, cpu, gpu, aloha = (get_preset(n) for n in ("tiny", "so101_sim_cpu", "so101_sim", "aloha"))
    assert tiny.policy.dim_model == 32 and tiny.device == "cpu"
    assert cpu.policy.vision_backbone == "cnn_small" and 64 <= cpu.data.image_size <= 96
    assert cpu.policy.cameras == ("observation.images.top", "observation.images.wrist")
    assert gpu.policy.vision_backbone == aloha.policy.vision_backbone == "resnet18"
    assert gpu.policy.dim_model == aloha.policy.dim_model == 512 and gpu.amp == "auto"
    assert aloha.policy.cameras == ("observation.images.top",)


def test_overrides_are_typed_and_policy_type_switches_class():
    cfg = apply_train_overrides(get_preset("tiny"), [
        "policy.rtc_max_delay=2", "policy.type=act_relative", "optim.betas=[0.8, 0.9]", "data.episodes=[0,1]",
        "data.frames_on_device=true", "data.image_size=null"])  # fmt: skip
    assert cfg.policy_type == "act_relative" and cfg.policy.rtc_max_delay == 2
    assert cfg.policy.dim_model == 32  # shared fields kept
    assert cfg.optim.betas == (0.8, 0.9) and cfg.data.episodes == (0, 1)
    assert cfg.data.frames_on_device is True and cfg.data.image_size is None
    assert config_from_dict(config_to_dict(cfg)) == cfg
    # Spaces around the key and the value are the same override (one parser for every --set reader).
    spaced = apply_train_overrides(
        get_preset("tiny"), [" policy.type = act_relative ", "policy.rtc_max_delay= 2"]
    )
    assert spaced.policy_type == "act_relative" and spaced.policy.rtc_max_delay == 2


def test_a_policy_item_without_a_value_beside_a_type_switch_is_refused_not_a_traceback():
    # The type switch reads the policy items first; one without "=" used to be a ValueError there.
    with pytest.raises(ActlabError, match="key=value"):
        apply_train_overrides(
            get_preset("tiny"), ["policy.type=act_relative", "policy.rtc_max_delay=2", "policy.dim_model"]
        )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("optim.lrr=1", "did you mean 'optim.lr'"),
        ("chekpoint.every=1", "did you mean 'checkpoint'"),
        ("policy.type=diffusion", "unknown policy type"),
        ("optim.lr=-1", "optim.lr"),
        ("data.val_fraction=1.5", "data.val_fraction"),
        ("data.frames_on_device=maybe", "data.frames_on_device"),
        ("optim.betas=[0.9]", "optim.betas"),
        ("policy.n_heads=3", "n_heads"),
    ],
)
def test_bad_overrides_name_the_key(override, message):
    with pytest.raises(ActlabError, match=message):
        apply_train_overrides(get_preset("tiny"), [override])


@pytest.mark.parametrize(
    "overrides",
    [["optim.lr=inf"], ["optim.lr=nan"], ["optim.backbone_lr=inf"], ["optim.weight_decay=inf"],
     ["optim.eps=inf"], ["optim.grad_clip=inf"], ["overfit.loss_threshold=inf"], ["policy.kl_weight=inf"],
     ["policy.std_floor=inf"], ["policy.n_action_steps=1", "policy.temporal_ensemble_coeff=inf"]],
)  # fmt: skip
def test_nan_and_inf_are_refused_in_every_float_field(overrides):
    # inf passed `lr > 0` and trained NaN checkpoints; every float field of every section is checked
    key = overrides[-1].split("=")[0]
    with pytest.raises(ActlabError, match="a finite number") as e:
        apply_train_overrides(get_preset("tiny"), overrides)
    # (a policy config names its own fields, as its other checks do: "kl_weight" for policy.kl_weight)
    assert e.value.field == key.removeprefix("policy.")


def test_unknown_preset_has_did_you_mean():
    with pytest.raises(ActlabError, match="did you mean 'so101_sim'"):
        get_preset("so101_sm")


def test_resume_diff_ignores_cadence_and_length_but_not_what_is_computed():
    base = get_preset("tiny")
    longer = apply_train_overrides(
        base, ["steps=50", "log.every=5", "checkpoint.keep_last=7", "eval.every=3"]
    )
    assert resume_diff(base, longer) == {} and config_hash(base) == config_hash(longer)
    changed = apply_train_overrides(base, ["optim.lr=0.5", "policy.chunk_size=4", "policy.n_action_steps=4"])
    diff = resume_diff(base, changed)
    assert set(diff) == {"optim.lr", "policy.chunk_size", "policy.n_action_steps"}
    assert diff["optim.lr"] == (0.001, 0.5)
    assert resume_diff(base, dataclasses.replace(base, seed=1)) == {"seed": (0, 1)}


def test_a_config_json_with_the_retired_kill_at_step_key_still_loads():
    """Earlier versions saved the test hook ``kill_at_step`` (now ACTLAB_TEST_KILL_AT_STEP) in config.json."""
    cfg = get_preset("tiny")
    saved = {**config_to_dict(cfg), "kill_at_step": None}
    assert config_from_dict(saved) == cfg
    assert config_from_dict({**saved, "kill_at_step": 10}) == cfg
    assert config_hash(config_from_dict(saved)) == config_hash(cfg)
    assert "kill_at_step" not in config_to_dict(cfg)
    with pytest.raises(ActlabError, match="unknown config key 'kill_at_step'"):
        apply_train_overrides(cfg, ["kill_at_step=3"])  # a test hook, not an override


def test_switching_between_cnn_and_vit_backbones_resolves_freezing_again():
    """A built config holds its resolved freeze_backbone (trained for CNNs); switching a preset to a ViT
    freezes the ViT unless the same overrides say otherwise, and switching back trains the CNN."""
    vit = ["policy.vision_backbone=clip_vit", "policy.pretrained_backbone_weights=null"]
    frozen = apply_train_overrides(get_preset("tiny"), vit)
    assert get_preset("tiny").policy.freeze_backbone is False
    assert frozen.policy.freeze_backbone is True
    assert apply_train_overrides(frozen, ["policy.vision_backbone=cnn_small"]).policy.freeze_backbone is False
    tuned = apply_train_overrides(get_preset("tiny"), [*vit, "policy.freeze_backbone=false"])
    assert tuned.policy.freeze_backbone is False
    # within one family an explicit choice stays: a frozen ResNet stays frozen on resnet34
    frozen_cnn = apply_train_overrides(get_preset("tiny"), ["policy.freeze_backbone=true"])
    assert apply_train_overrides(frozen_cnn, ["policy.vision_backbone=resnet34"]).policy.freeze_backbone


def test_switching_backbones_resolves_default_weights_again_and_keeps_chosen_ones():
    """aloha_clip holds CLIP's default checkpoint, resolved from "imagenet": another backbone gets its own
    default, not CLIP's weights; weights the user named, or none, stay as they are."""
    clip = get_preset("aloha_clip")
    assert clip.policy.pretrained_backbone_weights == "openai/clip-vit-base-patch32"
    siglip = apply_train_overrides(clip, ["policy.vision_backbone=siglip_vit"]).policy
    assert siglip.pretrained_backbone_weights == "google/siglip-base-patch16-224"
    resnet = apply_train_overrides(clip, ["policy.vision_backbone=resnet18"]).policy
    assert (resnet.pretrained_backbone_weights, resnet.freeze_backbone) == ("imagenet", False)
    mine = ["policy.vision_backbone=siglip_vit", "policy.pretrained_backbone_weights=/models/siglip"]
    assert apply_train_overrides(clip, mine).policy.pretrained_backbone_weights == "/models/siglip"
    # tiny's cnn_small has no weights (null): a switch to a ResNet does not start a download
    tiny = apply_train_overrides(get_preset("tiny"), ["policy.vision_backbone=resnet18"])
    assert tiny.policy.pretrained_backbone_weights is None
