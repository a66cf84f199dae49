"""Pretrained ViT image encoders (CLIP, SigLIP, DINOv2) through Hugging Face transformers.

``transformers`` is an optional extra (``pip install 'actlab[vit]'``), imported only when a ViT backbone
is built. The models are transformers' own vision towers (``CLIPVisionModel``, ``SiglipVisionModel``,
``Dinov2Model``), built from their config objects; weights come from the hub (an id such as
``openai/clip-vit-base-patch32``) or a local ``save_pretrained`` directory, and a bundle carries them in
its ``model.safetensors`` (the resolved vision config is recorded in ``config.vit_config``, so
``load_policy`` rebuilds the architecture without the hub).

Like every backbone here, :class:`ViTBackbone` maps normalized ``(N, 3, S, S)`` images to ``(N, C, h, w)``:

- ``features="tokens"``: the last hidden state's patch tokens, the CLS token (CLIP, DINOv2) dropped
  (SigLIP has none), reshaped to the ``(S / patch) x (S / patch)`` grid, so ACT's 2-D sinusoidal
  positions apply unchanged. CLIP's tokens are its encoder output (its ``post_layernorm`` normalizes only
  the pooled CLS token, as in transformers); SigLIP's and DINOv2's last hidden states are already
  normalized by the model.
- ``features="pooled"``: the model's ``pooler_output`` as a ``1 x 1`` grid: CLIP ``post_layernorm(CLS)``,
  SigLIP its attention-pooling head, DINOv2 ``layernorm(CLS)``.

Parameters a mode never uses are frozen so that a fine-tuned backbone has no dead parameters: CLIP's
``post_layernorm`` and SigLIP's pooling head in ``tokens`` mode; DINOv2 is built without its
masked-image-modelling ``mask_token`` (``use_mask_token=False``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from actlab.errors import ActlabError


@dataclasses.dataclass(frozen=True)
class ViTFamily:
    """What differs between the supported ViT families."""

    # transformers config / model class names
    config_class: str
    model_class: str
    # image-processor normalization of [0, 1] RGB (per channel), what the pretrained weights expect
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    # tokens before the patch tokens in last_hidden_state (CLS)
    prefix_tokens: int
    # config fields over transformers' defaults for the family's default size (VIT_DEFAULT_WEIGHTS)
    default_size: dict[str, Any]
    # largest input side (pixels) when downscale_img_square is unset; None: the config's image_size
    max_input: int | None = None


FAMILIES: dict[str, ViTFamily] = {
    # CLIPImageProcessor defaults = transformers.image_utils OPENAI_CLIP_MEAN / OPENAI_CLIP_STD (the
    # statistics OpenAI's CLIP was trained with); CLIPVisionConfig() is ViT-B/32 at 224 px.
    "clip_vit": ViTFamily(
        config_class="CLIPVisionConfig",
        model_class="CLIPVisionModel",
        mean=(0.48145466, 0.4578275, 0.40821073),
        std=(0.26862954, 0.26130258, 0.27577711),
        prefix_tokens=1,
        default_size={},
    ),
    # SiglipImageProcessor defaults (IMAGENET_STANDARD_MEAN / _STD of transformers.image_utils): pixels
    # mapped to [-1, 1]; SiglipVisionConfig() is ViT-B/16 at 224 px. No CLS token.
    "siglip_vit": ViTFamily(
        config_class="SiglipVisionConfig",
        model_class="SiglipVisionModel",
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
        prefix_tokens=0,
        default_size={},
    ),
    # facebook/dinov2-* preprocessor_config.json: BitImageProcessor with ImageNet mean/std, resize 256 and
    # center crop 224. The checkpoints' config says image_size 518 (the size of the position table, which
    # the model interpolates to any input), so the input is at most 224 px like the processor's crop.
    # Default size: facebook/dinov2-small's config.json (ViT-S/14: hidden 384, 6 heads, 12 layers).
    "dinov2_vit": ViTFamily(
        config_class="Dinov2Config",
        model_class="Dinov2Model",
        mean=(0.485, 0.456, 0.406),
        std=(0.229, 0.224, 0.225),
        prefix_tokens=1,
        default_size={"hidden_size": 384, "num_attention_heads": 6, "image_size": 518},
        max_input=224,
    ),
}
# Config entries that describe the file, not the architecture (left out of the recorded vit_config).
_NOT_ARCHITECTURE = ("transformers_version", "model_type", "architectures", "_name_or_path", "dtype",
                     "torch_dtype", "stage_names", "out_features", "out_indices")  # fmt: skip


def load_transformers():
    """The transformers module, or an ActlabError saying how to install it."""
    try:
        import transformers
    except ImportError as e:
        raise ActlabError(
            "the ViT backbones need the transformers package, which is not installed",
            field="vision_backbone",
            expected="transformers >= 4.45 importable",
            found=f"{type(e).__name__}: {e}",
            fix="pip install 'actlab[vit]' (or 'transformers>=4.45'), or use resnet18 / cnn_small",
        ) from e
    return transformers


def _family(name: str) -> ViTFamily:
    if name not in FAMILIES:
        raise ActlabError(
            "unknown ViT backbone", field="vision_backbone", expected=", ".join(FAMILIES), found=name
        )
    return FAMILIES[name]


def vit_config(name: str, overrides: dict[str, Any] | None = None, weights: str | None = None) -> Any:
    """The transformers vision config: ``weights``' (hub id or local dir; downloads config.json once)
    when given, else the family's default size with ``overrides`` applied."""
    fam = _family(name)
    cls = getattr(load_transformers(), fam.config_class)
    if weights is not None:
        try:
            # A full CLIP / SigLIP checkpoint holds text and vision configs: the vision config class reads
            # its part (transformers' base_config_key).
            return cls.from_pretrained(weights)
        except Exception as e:  # offline, unknown id, missing file: all end the same way
            raise weights_error(name, weights, e) from e
    fields = {**fam.default_size, **(overrides or {})}
    if name == "dinov2_vit":
        fields.setdefault("use_mask_token", False)  # the MIM mask token is never used (a dead parameter)
    try:
        return cls(**fields)
    except Exception as e:  # transformers' own validation (e.g. hidden size vs heads), unknown fields
        raise ActlabError(
            f"invalid vit_config for {name}: {type(e).__name__}: {str(e).strip().splitlines()[-1]}",
            field="vit_config",
            expected=f"fields of transformers' {fam.config_class} that fit together",
            found=overrides,
        ) from e


def recorded_config(hf_config: Any) -> dict[str, Any]:
    """The architecture fields of a transformers config, JSON-ready (what ``config.vit_config`` keeps)."""
    out = {k: v for k, v in hf_config.to_dict().items() if k not in _NOT_ARCHITECTURE}
    return {k: v for k, v in out.items() if isinstance(v, (int, float, str, bool, list, type(None)))}


def weights_error(name: str, weights: str, e: Exception) -> ActlabError:
    return ActlabError(
        f"cannot load the {name} weights {weights!r}: {type(e).__name__}: {str(e).strip()[:300]}",
        file=weights,
        field="pretrained_backbone_weights",
        expected="a Hugging Face hub id reachable from this machine (cached after one download), or a "
        "local directory written by save_pretrained",
        found=weights,
        fix="download once on a machine with internet (huggingface-cli download ID) and set HF_HOME, or "
        "point pretrained_backbone_weights at a local directory, or set it to null (random weights)",
    )


class ViTBackbone(nn.Module):
    """A transformers ViT as an ACT backbone: ``(N, 3, S, S)`` -> ``(N, hidden, S/patch, S/patch)`` patch
    tokens, or ``(N, hidden, 1, 1)`` pooled; ``input_size`` S is what images are resized to first."""

    def __init__(self, name: str, hf_config: Any, features: str, input_size: int | None) -> None:
        super().__init__()
        fam = _family(name)
        self.name = name
        self.features = features
        self.prefix_tokens = fam.prefix_tokens
        self.mean, self.std = fam.mean, fam.std
        self.model = getattr(load_transformers(), fam.model_class)(hf_config)
        self.patch_size = int(hf_config.patch_size)
        self.config_image_size = int(hf_config.image_size)
        size = input_size or self.config_image_size
        if input_size is None and fam.max_input is not None:
            size = min(size, fam.max_input)
        if size % self.patch_size:
            raise ActlabError(
                f"the {name} input size is not a multiple of its patch size",
                field="downscale_img_square",
                expected=f"a multiple of {self.patch_size}",
                found=size,
            )
        self.input_size = size
        self.out_channels = int(hf_config.hidden_size)
        if features == "tokens":
            inner = getattr(self.model, "vision_model", self.model)
            for unused in ("post_layernorm", "head"):  # CLIP / SigLIP: only the pooled output reads them
                if getattr(inner, unused, None) is not None:
                    getattr(inner, unused).requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, 3, S, S) normalized
        kwargs = {}
        if self.name != "dinov2_vit":  # DINOv2 always interpolates its position table
            kwargs["interpolate_pos_encoding"] = x.shape[-1] != self.config_image_size
        out = self.model(pixel_values=x, **kwargs)
        if self.features == "pooled":
            return out.pooler_output[:, :, None, None]  # (N, C, 1, 1)
        tokens = out.last_hidden_state[:, self.prefix_tokens :]  # (N, h*w, C), CLS dropped
        h, w = x.shape[-2] // self.patch_size, x.shape[-1] // self.patch_size
        return tokens.transpose(1, 2).reshape(x.shape[0], -1, h, w)  # (N, C, h, w), row-major patches

    def feature_shape(self, h: int, w: int) -> tuple[int, int]:
        """Token grid for the input size (images are resized to ``input_size`` first)."""
        if self.features == "pooled":
            return 1, 1
        return self.input_size // self.patch_size, self.input_size // self.patch_size

    def load_pretrained(self, weights: str) -> None:
        """Copy the weights of a hub id or local directory into this model (same config)."""
        fam = _family(self.name)
        cls = getattr(load_transformers(), fam.model_class)
        try:
            src = cls.from_pretrained(weights, config=self.model.config)
        except Exception as e:
            raise weights_error(self.name, weights, e) from e
        result = self.model.load_state_dict(src.state_dict(), strict=False)
        if result.missing_keys:
            raise ActlabError(
                f"the weights {weights!r} do not match the {self.name} backbone",
                file=weights,
                field="pretrained_backbone_weights",
                expected=f"a {fam.model_class} checkpoint",
                found=f"missing {result.missing_keys[:5]}",
            )


def make_vit(
    name: str,
    overrides: dict[str, Any] | None,
    features: str,
    input_size: int | None,
    weights: str | None = None,
) -> ViTBackbone:
    """A randomly initialized ViT backbone of the given config (``weights`` only reads its config)."""
    hf = vit_config(name, overrides if weights is None else None, weights)
    if weights is not None and name == "dinov2_vit":
        hf.use_mask_token = False
    return ViTBackbone(name, hf, features, input_size)
