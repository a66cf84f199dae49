"""ViT backbones (CLIP, SigLIP, DINOv2 through transformers), built offline from tiny configs."""

import pytest
import torch

from actlab.errors import ActlabError
from actlab.policies import ACTConfig, load_policy, make_policy, save_policy
from conftest import make_batch, make_features, make_stats, observation, tiny_kwargs
from tiny_vit import TINY_VIT

transformers = pytest.importorskip("transformers", reason="pip install -e '.[vit]'")

FAMILIES = ("clip_vit", "siglip_vit", "dinov2_vit")


def vit_cfg(backbone: str, **over) -> ACTConfig:
    vit = dict(TINY_VIT)
    if backbone == "dinov2_vit":
        vit.pop("intermediate_size")  # DINOv2 sizes its MLP with mlp_ratio
    kw = tiny_kwargs(vision_backbone=backbone, pretrained_backbone_weights=None, vit_config=vit)
    kw.update(over)
    return ACTConfig(**kw)


def build(cfg, cameras=("top", "wrist"), pretrained=True):
    torch.manual_seed(0)
    return make_policy(cfg, make_features(cameras=cameras), make_stats(horizon=cfg.chunk_size), pretrained)


@pytest.mark.parametrize("backbone", FAMILIES)
@pytest.mark.parametrize("features", ["tokens", "pooled"])
def test_each_encoder_builds_offline_from_a_config(backbone, features):
    policy = build(vit_cfg(backbone, vit_features=features))
    assert policy.config.freeze_backbone  # ViTs are frozen unless asked otherwise
    assert not any(p.requires_grad for p in policy.backbone.parameters())
    assert type(policy.backbone.model).__module__.startswith("transformers.models.")
    assert policy.backbone.model.config.hidden_size == 32
    frames = torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8)
    with torch.no_grad():
        f = policy.encode_images("observation.images.top", frames)
    grid = (4, 4) if features == "tokens" else (1, 1)  # 32 px / patch 8; CLS dropped
    assert tuple(f.shape) == (3, 32, *grid)
    assert policy.encoder_cam_pos.shape == (2 * grid[0] * grid[1], 32)
    # the recorded config rebuilds the same architecture without weights or hub
    assert policy.config.vit_config["hidden_size"] == 32
    chunk = policy.predict_action_chunk(observation(make_batch(policy), policy))
    assert chunk.shape == (4, 8, 6) and torch.isfinite(chunk).all()


@pytest.mark.parametrize("backbone", FAMILIES)
def test_pixel_normalization_is_the_image_processors(backbone):
    # The numbers of each family's transformers image processor (what the pretrained weights expect).
    from transformers.image_utils import (
        IMAGENET_DEFAULT_MEAN,
        IMAGENET_DEFAULT_STD,
        IMAGENET_STANDARD_MEAN,
        IMAGENET_STANDARD_STD,
        OPENAI_CLIP_MEAN,
        OPENAI_CLIP_STD,
    )

    expected = {
        "clip_vit": (OPENAI_CLIP_MEAN, OPENAI_CLIP_STD),
        "siglip_vit": (IMAGENET_STANDARD_MEAN, IMAGENET_STANDARD_STD),
        "dinov2_vit": (IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD),
    }[backbone]
    entry = build(vit_cfg(backbone)).normalizer.get("observation.images.top")
    torch.testing.assert_close(entry.mean.flatten(), torch.tensor(expected[0], dtype=torch.float32))
    torch.testing.assert_close(entry.std.flatten(), torch.tensor(expected[1], dtype=torch.float32))


@pytest.mark.parametrize("backbone", FAMILIES)
def test_local_weights_load_and_the_bundle_rebuilds_without_them(backbone, tmp_path):
    src = build(vit_cfg(backbone)).backbone.model
    with torch.no_grad():
        for p in src.parameters():
            p.add_(0.01)  # differ from any fresh random init
    src.save_pretrained(tmp_path / "weights")
    cfg = vit_cfg(backbone, pretrained_backbone_weights=str(tmp_path / "weights"), vit_config=None)
    policy = build(cfg)
    loaded = policy.backbone.model.state_dict()
    for name, value in src.state_dict().items():
        assert torch.equal(loaded[name], value), name
    obs = observation(make_batch(policy), policy)
    expected = policy.predict_action_chunk(obs)
    save_policy(policy, tmp_path / "bundle")
    (tmp_path / "weights").rename(tmp_path / "gone")  # load_policy must not need the weights' directory
    again = load_policy(tmp_path / "bundle")
    assert again.config.vit_config == policy.config.vit_config
    torch.testing.assert_close(again.predict_action_chunk(obs), expected, rtol=0, atol=0)


@pytest.mark.parametrize("backbone", FAMILIES)
@pytest.mark.parametrize("features", ["tokens", "pooled"])
def test_fine_tuned_vit_gives_every_trainable_parameter_a_gradient(backbone, features):
    policy = build(vit_cfg(backbone, vit_features=features, freeze_backbone=False))
    assert any(p.requires_grad for p in policy.backbone.parameters())
    policy.train()
    loss, _ = policy(make_batch(policy))
    loss.backward()
    dead = [
        n for n, p in policy.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.any())
    ]
    assert dead == []
    groups = {g["name"] for g in policy.param_groups(1e-3, 1e-5, 0.1)}
    assert "backbone" in groups


def test_cached_features_give_the_same_loss_and_actions_as_images():
    policy = build(vit_cfg("clip_vit"))
    batch = make_batch(policy)
    cached = {k: v for k, v in batch.items() if not k.startswith("observation.images.")}
    for key in policy.camera_keys:
        with torch.no_grad():
            cached[key + ".features"] = policy.encode_images(key, batch[key][:, -1])[:, None]
    policy.eval()
    torch.testing.assert_close(policy(cached)[0], policy(batch)[0], rtol=1e-6, atol=1e-6)


def test_vit_config_errors_are_actlab_errors():
    with pytest.raises(ActlabError, match="vit_config"):
        build(vit_cfg("clip_vit", vit_config={**TINY_VIT, "num_attention_heads": 3}))
    with pytest.raises(ActlabError, match="pretrained_backbone_weights"):
        build(vit_cfg("dinov2_vit", pretrained_backbone_weights="/nonexistent/dinov2"))
    with pytest.raises(ActlabError, match="multiple of 8"):
        build(vit_cfg("siglip_vit", downscale_img_square=36))


def test_missing_transformers_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)  # what `import transformers` sees uninstalled
    with pytest.raises(ActlabError, match=r"actlab\[vit\]"):
        build(vit_cfg("clip_vit"))
