import dataclasses

import pytest

from actlab.errors import ActlabError
from actlab.policies import POLICY_TYPES, ACTConfig, ACTRelativeConfig, config_classes, get_config_class
from actlab.utils.config import apply_overrides, field_docs, from_dict, to_dict
from procs import run_python


def test_defaults_are_lerobot_act_defaults():
    c = ACTConfig()
    assert (c.chunk_size, c.n_action_steps, c.vision_backbone) == (100, 100, "resnet18")
    assert (c.dim_model, c.n_heads, c.dim_feedforward, c.feedforward_activation) == (512, 8, 3200, "relu")
    assert (c.n_encoder_layers, c.n_decoder_layers, c.n_vae_encoder_layers) == (4, 1, 4)
    assert (c.use_vae, c.latent_dim, c.kl_weight, c.dropout, c.pre_norm) == (True, 32, 10.0, 0.1, False)
    assert c.temporal_ensemble_coeff is None
    assert c.pretrained_backbone_weights == "imagenet"


def test_every_field_is_commented():
    for cls in (ACTConfig, ACTRelativeConfig):
        docs = {}
        for klass in reversed(cls.__mro__[:-1]):  # inherited fields are documented in the base class
            docs.update({k: v for k, v in field_docs(klass).items() if v})
        for f in dataclasses.fields(cls):
            assert docs.get(f.name), f"{cls.__name__}.{f.name} has no comment"


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"n_action_steps": 101}, "n_action_steps"),
        ({"temporal_ensemble_coeff": 0.01}, "n_action_steps"),  # needs n_action_steps == 1
        ({"vision_backbone": "resnet19"}, "vision_backbone"),
        ({"dim_model": 30, "n_heads": 3}, "dim_model"),
        ({"dim_model": 32, "n_heads": 3}, "n_heads"),
        ({"dropout": 1.0}, "dropout"),
        ({"n_decoder_layers": 0}, "n_decoder_layers"),
        ({"image_norm": "imagenett"}, "image_norm"),
        ({"type": "act_relative"}, "type"),
        ({"downscale_img_square": 16}, "downscale_img_square"),
    ],
)
def test_act_config_rejects_bad_values(kwargs, field):
    with pytest.raises(ActlabError) as e:
        ACTConfig(**kwargs)
    assert e.value.field == field


def test_unknown_backbone_gets_did_you_mean():
    with pytest.raises(ActlabError, match="did you mean 'resnet18'"):
        ACTConfig(vision_backbone="resnet1")


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"rtc_max_delay": 100}, "rtc_max_delay"),  # must be < chunk_size
        ({"rtc_max_delay": -1}, "rtc_max_delay"),
        ({"obs_state_delta_frames": 0}, "obs_state_delta_frames"),
        ({"absolute_action_dims": (5, 5)}, "absolute_action_dims"),
    ],
)
def test_relative_config_rejects_bad_values(kwargs, field):
    with pytest.raises(ActlabError) as e:
        ACTRelativeConfig(**kwargs)
    assert e.value.field == field


def test_temporal_ensembling_accepted_with_one_action_step():
    assert ACTConfig(n_action_steps=1, temporal_ensemble_coeff=0.01).temporal_ensemble_coeff == 0.01


def test_cnn_small_records_that_no_pretrained_weights_are_used():
    assert ACTConfig(vision_backbone="cnn_small").pretrained_backbone_weights is None


def test_delta_indices_fetch_only_used_frames():
    cams = ["observation.images.top", "observation.images.wrist"]
    d = ACTConfig(chunk_size=5, n_action_steps=5).delta_indices(cams)
    assert d == {
        "observation.state": [0],
        "observation.images.top": [0],
        "observation.images.wrist": [0],
        "action": [0, 1, 2, 3, 4],
    }
    r = ACTRelativeConfig(
        chunk_size=5, n_action_steps=5, rtc_max_delay=2, obs_state_delta_frames=3
    ).delta_indices(cams)
    assert r["observation.state"] == [-3, 0]
    assert r["observation.images.top"] == [0]  # only the current image frame
    assert ACTRelativeConfig(chunk_size=5, n_action_steps=5, rtc_max_delay=2).delta_indices(cams)[
        "observation.state"
    ] == [0]


def test_stats_request():
    assert ACTConfig().stats_request() == {"relative_action_horizon": None, "state_delta_frames": None}
    r = ACTRelativeConfig(
        chunk_size=50, n_action_steps=50, rtc_max_delay=5, obs_state_delta_frames=4
    ).stats_request()
    assert r == {"relative_action_horizon": 50, "absolute_action_dims": (5,), "state_delta_frames": 4}


def test_json_round_trip_and_overrides():
    c = ACTRelativeConfig(
        chunk_size=20, n_action_steps=20, rtc_max_delay=4, cameras=("observation.images.top",)
    )
    d = to_dict(c)
    assert d["type"] == "act_relative"
    assert from_dict(get_config_class(d["type"]), d) == c
    c2 = apply_overrides(c, ["rtc_max_delay=6", "absolute_action_dims=[4,5]"])
    assert (c2.rtc_max_delay, c2.absolute_action_dims) == (6, (4, 5))
    with pytest.raises(ActlabError):
        apply_overrides(c, ["rtc_max_delay=20"])  # validation runs on overrides too


def test_registry():
    assert set(POLICY_TYPES) == {"act", "act_relative"}
    assert config_classes() == {"act": ACTConfig, "act_relative": ACTRelativeConfig}
    with pytest.raises(ActlabError, match="did you mean 'act_relative'"):
        get_config_class("act_relativ")


def test_camera_keys_from_features():
    feats = {
        "observation.state": {"dtype": "float32", "shape": [6]},
        "observation.images.wrist": {"dtype": "video", "shape": [8, 8, 3]},
        "observation.images.top": {"dtype": "image", "shape": [8, 8, 3]},
    }
    assert ACTConfig().camera_keys(feats) == ["observation.images.top", "observation.images.wrist"]
    assert ACTConfig(cameras=("observation.images.wrist",)).camera_keys(feats) == ["observation.images.wrist"]
    with pytest.raises(ActlabError, match="did you mean 'observation.images.top'"):
        ACTConfig(cameras=("observation.images.tops",)).camera_keys(feats)


def test_configs_import_without_torch():
    code = "import sys, actlab.policies as p; p.ACTConfig(); assert 'torch' not in sys.modules"
    out = run_python(code, timeout=60)
    assert out.returncode == 0, out.stderr


def test_overrides_apply_in_any_order():
    from actlab.policies.registry import apply_config_overrides

    c = apply_config_overrides(ACTConfig(), ["chunk_size=50", "policy.n_action_steps=50"])
    assert (c.chunk_size, c.n_action_steps) == (50, 50)
    c = apply_config_overrides(ACTConfig(), ["temporal_ensemble_coeff=0.01", "n_action_steps=1"])
    assert c.temporal_ensemble_coeff == 0.01
    with pytest.raises(ActlabError) as e:
        apply_config_overrides(ACTConfig(), ["chunk_size=50"])  # never valid alone
    assert e.value.field == "n_action_steps" and "chunk_size (50)" in str(e.value)


def test_vit_backbones_resolve_weights_and_freezing_and_old_configs_still_load():
    from actlab.policies.configs import VIT_DEFAULT_WEIGHTS

    for name, hub_id in VIT_DEFAULT_WEIGHTS.items():
        cfg = ACTConfig(vision_backbone=name)  # "imagenet" (the default) means the family's checkpoint
        assert cfg.pretrained_backbone_weights == hub_id
        assert cfg.freeze_backbone is True  # frozen by default
        assert ACTConfig(vision_backbone=name, freeze_backbone=False).freeze_backbone is False
    assert (
        ACTConfig().freeze_backbone is False
        and ACTConfig(vision_backbone="cnn_small").freeze_backbone is False
    )
    local = ACTConfig(vision_backbone="dinov2_vit", pretrained_backbone_weights="/models/dinov2-small")
    assert local.pretrained_backbone_weights == "/models/dinov2-small"
    with pytest.raises(ActlabError, match="pretrained_backbone_weights"):
        ACTConfig(pretrained_backbone_weights="openai/clip-vit-base-patch32")  # a hub id for a ResNet
    with pytest.raises(ActlabError, match="vit_config"):
        ACTConfig(vit_config={"hidden_size": 32})  # only for a ViT
    with pytest.raises(ActlabError, match="vit_features"):
        ACTConfig(vision_backbone="clip_vit", vit_features="cls")
    # A config.json written before these fields existed loads with the old behaviour.
    old = {
        k: v
        for k, v in to_dict(ACTConfig()).items()
        if k not in ("vit_config", "vit_features", "camera_fusion", "n_obs_steps")
    }
    old["freeze_backbone"] = False
    assert from_dict(ACTConfig, old) == ACTConfig()
    assert to_dict(ACTConfig())["freeze_backbone"] is False
