"""SAC's networks: a tanh-Gaussian actor, a critic ensemble with LayerNorm, and the image encoders.

Encoders (``RLConfig.encoder``):
- ``cnn``: a small 2D CNN (DrQ-v2's shape: 4 conv layers, then a linear projection with LayerNorm) over
  uint8 frames; with ``frame_stack`` K > 1 the last K frames of every camera are stacked on the channel
  axis (a frame-stack CNN: motion is visible to the first layer). Trained by the critic's loss only; the
  actor reads its output detached (the DrQ recipe).
- ``frozen``: :class:`FrozenFeatures`, the base bundle's own pretrained backbone (whatever its config names:
  a ResNet or one of actlab's ViTs), frozen; per camera and channel the mean activation and the spatial
  soft-argmax (x, y) (where the channel fires: a global average alone loses where the cube is). Computed
  once per env step and stored in the replay buffer as vectors, so updates never run it.
- ``vit``: :class:`ViTFeatures`, one of actlab's ViT backbones (``actlab.policies.vit``: CLIP, SigLIP,
  DINOv2 through transformers) built from the RL config alone (no base bundle), frozen, its pooled output
  per camera. Like ``frozen``: computed once per env step, stored, never recomputed by an update.
  ``vision_backbone=videomae``: :class:`VideoFeatures`, a video transformer over the last K frames.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from actlab.errors import ActlabError
from actlab.policies.configs import VIT_DEFAULT_WEIGHTS
from actlab.policies.vit import load_transformers, make_vit, weights_error

LOG_STD_MIN, LOG_STD_MAX = -5.0, 1.0


def mlp(inp: int, hidden: int, out: int, layer_norm: bool) -> nn.Sequential:
    """Two hidden layers of ``hidden`` units (LayerNorm after each linear layer when asked), ReLU."""
    layers: list[nn.Module] = []
    width = inp
    for _ in range(2):
        layers.append(nn.Linear(width, hidden))
        if layer_norm:
            layers.append(nn.LayerNorm(hidden))
        layers.append(nn.ReLU())
        width = hidden
    layers.append(nn.Linear(width, out))
    return nn.Sequential(*layers)


class Actor(nn.Module):
    """Tanh-squashed Gaussian policy over actions in [-1, 1]^A.

    ``zero_init``: the mean layer starts at exactly zero (residual RL: the first residual is no change,
    so the run starts from the base policy's success rate); the log-std starts at ``init_log_std``.
    """

    def __init__(self, inp: int, act_dim: int, hidden: int, zero_init: bool, init_log_std: float = -1.0):
        super().__init__()
        self.trunk = mlp(inp, hidden, hidden, layer_norm=True)
        self.trunk.append(nn.ReLU())
        self.mean = nn.Linear(hidden, act_dim)
        self.log_std = nn.Linear(hidden, act_dim)
        if zero_init:
            for layer in (self.mean, self.log_std):
                nn.init.zeros_(layer.weight)
                nn.init.zeros_(layer.bias)
            nn.init.constant_(self.log_std.bias, init_log_std)

    def forward(
        self, x: torch.Tensor, generator: torch.Generator | None = None, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Action (B, A) in [-1, 1] and its log-probability (B,); the mean action when ``deterministic``."""
        h = self.trunk(x)  # (B, H)
        mean = self.mean(h)  # (B, A)
        if deterministic:
            return torch.tanh(mean), torch.zeros(x.shape[0], device=x.device)
        log_std = self.log_std(h).clamp(LOG_STD_MIN, LOG_STD_MAX)
        std = log_std.exp()
        noise = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
        pre = mean + std * noise  # (B, A) reparameterized sample
        action = torch.tanh(pre)
        # log N(pre; mean, std) - sum log(1 - tanh^2), written stably (softplus form)
        logp = (-0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - (2 * (math.log(2) - pre - nn.functional.softplus(-2 * pre))).sum(-1)
        return action, logp


class Critics(nn.Module):
    """An ensemble of Q networks (LayerNorm after every hidden layer, as RLPD found stabilizing)."""

    def __init__(self, inp: int, act_dim: int, hidden: int, n: int) -> None:
        super().__init__()
        self.qs = nn.ModuleList(mlp(inp + act_dim, hidden, 1, layer_norm=True) for _ in range(n))

    def forward(self, x: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q values (n, B)."""
        xa = torch.cat([x, action], dim=-1)
        return torch.stack([q(xa).squeeze(-1) for q in self.qs])


class CNNEncoder(nn.Module):
    """Small CNN over uint8 frames (B, C, H, W) -> (B, out) features (C = 3 * cameras * frame_stack)."""

    def __init__(self, channels: int, image_size: int, out: int = 64) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(channels, 32, 3, stride=2),
            nn.ReLU(),
            nn.Conv2d(32, 32, 3, stride=2),
            nn.ReLU(),
            nn.Conv2d(32, 32, 3, stride=1),
            nn.ReLU(),
            nn.Conv2d(32, 32, 3, stride=1),
            nn.ReLU(),
        )
        with torch.no_grad():
            n = self.conv(torch.zeros(1, channels, image_size, image_size)).numel()
        self.head = nn.Sequential(nn.Linear(n, out), nn.LayerNorm(out), nn.Tanh())
        self.out_dim = out

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.float() / 127.5 - 1.0  # (B, C, H, W) in [-1, 1]
        return self.head(self.conv(x).flatten(1))  # (B, out)


def spatial_features(fmap: torch.Tensor) -> torch.Tensor:
    """(B, C, h, w) feature maps -> (B, 3C): per channel the mean and the soft-argmax (x, y) in [-1, 1]."""
    b, c, h, w = fmap.shape
    prob = torch.softmax(fmap.flatten(2).float(), dim=-1).view(b, c, h, w)  # (B, C, h, w)
    ys = torch.linspace(-1, 1, h, device=fmap.device)
    xs = torch.linspace(-1, 1, w, device=fmap.device)
    x = (prob.sum(2) * xs).sum(-1)  # (B, C)
    y = (prob.sum(3) * ys).sum(-1)  # (B, C)
    return torch.cat([fmap.float().mean(dim=(-2, -1)), x, y], dim=-1)


class FrozenFeatures(nn.Module):
    """A policy bundle's image backbone, frozen: (B, 3, H, W) uint8 per camera -> (B, sum 3C')."""

    def __init__(self, policy: nn.Module, cameras: list[str]) -> None:
        super().__init__()
        self.policy = policy  # not a submodule of any optimizer: never updated
        self.cameras = cameras
        with torch.no_grad():
            shapes = policy.image_shapes
            probe = {k: torch.zeros(1, *shapes[k], dtype=torch.uint8) for k in cameras}
            self.out_dim = int(sum(3 * policy.encode_images(k, v).shape[1] for k, v in probe.items()))

    @torch.no_grad()
    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        feats = [spatial_features(self.policy.encode_images(k, batch[k])) for k in self.cameras]  # (B, 3C')
        return torch.cat(feats, dim=-1)  # (B, sum 3C')


class ViTFeatures(nn.Module):
    """A frozen pretrained ViT (``cfg.obs.vision_backbone``) over each camera: (B, 3, H, W) uint8 per camera
    ->
    (B, cameras * hidden) pooled features (CLIP: post-LayerNorm CLS, SigLIP: attention-pooling head,
    DINOv2: LayerNorm CLS; ``actlab.policies.vit``). Frames are scaled to [0, 1], resized to the ViT's
    input side (bilinear, antialiased, as ACT's ``_prep_images``) and normalized with the family's
    image-processor mean/std, what its pretrained weights expect.

    Random weights (``pretrained_backbone_weights=None``) are drawn from a generator seeded by
    ``cfg.seed`` (the global RNG is left as it was), so a resumed run or ``load_agent`` rebuilds the very
    encoder whose features the replay buffer holds; the weights are never in a checkpoint.
    """

    def __init__(self, cfg: Any, cameras: list[str]) -> None:
        super().__init__()
        weights = cfg.obs.pretrained_backbone_weights
        if weights == "imagenet":
            weights = VIT_DEFAULT_WEIGHTS[cfg.obs.vision_backbone]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            self.backbone = make_vit(
                cfg.obs.vision_backbone, cfg.obs.vit_config, "pooled", cfg.obs.downscale_img_square, weights
            )
        if weights is not None:
            self.backbone.load_pretrained(weights)
        self.backbone.requires_grad_(False)
        self.cameras = cameras
        self.register_buffer("mean", torch.tensor(self.backbone.mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(self.backbone.std).view(1, 3, 1, 1), persistent=False)
        self.out_dim = len(cameras) * self.backbone.out_channels
        super().train(False)

    def train(self, mode: bool = True) -> ViTFeatures:
        """Always in eval mode (no dropout, fixed statistics): the encoder is frozen."""
        return super().train(False)

    def prep(self, images: torch.Tensor) -> torch.Tensor:
        """(N, 3, H, W) uint8 -> (N, 3, S, S) float, resized to the ViT's input and normalized."""
        x = images.float() / 255.0
        s = self.backbone.input_size
        if tuple(x.shape[-2:]) != (s, s):
            x = nn.functional.interpolate(
                x, size=(s, s), mode="bilinear", antialias=True, align_corners=False
            )
        return (x - self.mean) / self.std

    @torch.no_grad()
    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        feats = [self.backbone(self.prep(batch[k])).flatten(1) for k in self.cameras]  # (B, hidden) each
        return torch.cat(feats, dim=-1)  # (B, cameras * hidden)


# ImageNet mean/std: what VideoMAE's pretraining code normalizes with (IMAGENET_DEFAULT_MEAN/STD);
# transformers' VideoMAEImageProcessor class defaults are 0.5/0.5 (the hub files were not checked offline)
VIDEOMAE_MEAN, VIDEOMAE_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
VIDEOMAE_DEFAULT_WEIGHTS = "MCG-NJU/videomae-base"  # 16 frames at 224 px, ViT-B, tubelets 2 x 16 x 16


class VideoFeatures(nn.Module):
    """A frozen VideoMAE over each camera's last K frames: (B, K*3*cams, H, W) uint8 (the agent's frame
    stack, oldest first) -> (B, cameras * hidden), the mean of the last hidden state's tokens (VideoMAE's
    own pooling, ``use_mean_pooling``). The whole clip runs once per env step (a new frame shifts every
    tubelet); features are stored, never recomputed. Random weights (``pretrained_backbone_weights=None``)
    of ``vit_config`` over transformers' defaults with ``num_frames=K``, seeded by ``cfg.seed``."""

    def __init__(self, cfg: Any, cameras: list[str]) -> None:
        super().__init__()
        T = load_transformers()
        weights = cfg.obs.pretrained_backbone_weights
        weights = VIDEOMAE_DEFAULT_WEIGHTS if weights == "imagenet" else weights
        try:
            if weights is not None:
                hf = T.VideoMAEConfig.from_pretrained(weights)
            else:
                fields = {"num_frames": cfg.obs.frame_stack, **(cfg.obs.vit_config or {})}
                if cfg.obs.downscale_img_square is not None:
                    fields["image_size"] = cfg.obs.downscale_img_square
                hf = T.VideoMAEConfig(**fields)
        except Exception as e:
            if weights is not None:
                raise weights_error("videomae", weights, e) from e
            raise ActlabError(
                f"invalid vit_config for videomae: {e}", field="vit_config", found=cfg.obs.vit_config
            ) from e
        if hf.num_frames != cfg.obs.frame_stack or hf.num_frames % hf.tubelet_size:
            raise ActlabError(
                "VideoMAE takes clips of its num_frames frames",
                field="frame_stack",
                expected=f"{hf.num_frames} (the model's num_frames; a multiple of tubelet {hf.tubelet_size})",
                found=cfg.obs.frame_stack,
                fix=f"--set frame_stack={hf.num_frames}",
            )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            self.model = T.VideoMAEModel(hf)
        if weights is not None:
            try:
                src = T.VideoMAEModel.from_pretrained(weights, config=hf)
            except Exception as e:
                raise weights_error("videomae", weights, e) from e
            self.model.load_state_dict(src.state_dict())
        self.model.requires_grad_(False)
        self.cameras, self.k, self.input_size = cameras, cfg.obs.frame_stack, int(hf.image_size)
        self.register_buffer("mean", torch.tensor(VIDEOMAE_MEAN).view(1, 1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(VIDEOMAE_STD).view(1, 1, 3, 1, 1), persistent=False)
        self.out_dim = len(cameras) * int(hf.hidden_size)
        super().train(False)

    def train(self, mode: bool = True) -> VideoFeatures:
        """Always in eval mode: the encoder is frozen."""
        return super().train(False)

    def prep(self, clip: torch.Tensor) -> torch.Tensor:
        """(B, K, 3, H, W) uint8 -> (B, K, 3, S, S) float, resized and normalized."""
        b, k = clip.shape[:2]
        x = clip.flatten(0, 1).float() / 255.0  # (B*K, 3, H, W)
        s = self.input_size
        if tuple(x.shape[-2:]) != (s, s):
            x = nn.functional.interpolate(
                x, size=(s, s), mode="bilinear", antialias=True, align_corners=False
            )
        return (x.view(b, k, 3, s, s) - self.mean) / self.std

    @torch.no_grad()
    def forward(self, stacked: torch.Tensor) -> torch.Tensor:
        b, _, h, w = stacked.shape
        clips = stacked.view(b, self.k, len(self.cameras), 3, h, w)  # frames oldest first, cameras in order
        feats = [
            self.model(pixel_values=self.prep(clips[:, :, c])).last_hidden_state.mean(1)  # (B, hidden)
            for c in range(len(self.cameras))
        ]
        return torch.cat(feats, dim=-1)  # (B, cameras * hidden)
