"""Vision backbones: ResNet-18/34 with torchvision's parameter names and frozen BatchNorm, and a small CNN.

The ResNets are written here (torchvision is not a dependency) with exactly torchvision's module names
(``conv1``, ``bn1``, ``layer1.0.conv1``, ``layer2.0.downsample.0`` ...), the classifier (``avgpool``,
``fc``) dropped, so torchvision's ImageNet state dicts load into them unchanged. BatchNorm is frozen
(running statistics and affine parameters are buffers), as in DETR and ACT.

``cnn_small`` is a fast trainable encoder for small images (64-96 px): three stride-2 3x3 convs and one
stride-1 conv with GroupNorm, giving a stride-8 feature map (8x8 tokens at 64 px) that is average-pooled
to at most ``max_grid`` x ``max_grid`` tokens (default 8), so a CPU run stays fast at 80-96 px.

Every backbone maps ``(N, 3, H, W)`` normalized float images to ``(N, out_channels, h, w)`` and reports
``feature_shape(H, W) -> (h, w)`` without running.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from actlab.errors import ActlabError

# torchvision's IMAGENET1K_V1 weights (plain state dicts; torch.hub caches them under $TORCH_HOME/hub).
IMAGENET_URLS = {
    "resnet18": "https://download.pytorch.org/models/resnet18-f37072fd.pth",
    "resnet34": "https://download.pytorch.org/models/resnet34-b627a593.pth",
}
# ImageNet per-channel mean/std of [0, 1] RGB images (what the pretrained ResNets expect).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_RESNET_BLOCKS = {"resnet18": (2, 2, 2, 2), "resnet34": (3, 4, 6, 3)}
_CNN_SMALL_MAX_GRID = 8
_CNN_SMALL_CHANNELS = (32, 64, 128, 128)


def _conv_out(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


class FrozenBatchNorm2d(nn.Module):
    """BatchNorm2d with fixed statistics and affine parameters (all buffers; torchvision's names)."""

    def __init__(self, num_features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.register_buffer("weight", torch.ones(num_features))
        self.register_buffer("bias", torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # torchvision checkpoints carry BatchNorm's step counter; a frozen norm has no use for it.
        state_dict.pop(prefix + "num_batches_tracked", None)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, C, H, W)
        # y = (x - mean) / sqrt(var + eps) * weight + bias as ONE inference-mode batch-norm kernel, not the
        # ~7 small kernels of the written-out formula (20 norms in ResNet-18: ~140 launches per forward).
        # Under bf16 autocast the output stays in the conv's dtype (the formula promoted it to fp32, and
        # the next conv cast it back: one more kernel per layer), as nn.BatchNorm2d does under autocast.
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, training=False, eps=self.eps
        )


class BasicBlock(nn.Module):
    """ResNet basic block (two 3x3 convs), torchvision layout."""

    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = FrozenBatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = FrozenBatchNorm2d(planes)
        self.downsample: nn.Module | None = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False), FrozenBatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        skip = x if self.downsample is None else self.downsample(x)
        return F.relu(out + skip)


class ResNet(nn.Module):
    """ResNet-18/34 trunk up to ``layer4`` (stride 32, 512 channels), torchvision parameter names."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = FrozenBatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        inplanes = 64
        for i, (planes, n_blocks) in enumerate(zip((64, 128, 256, 512), _RESNET_BLOCKS[name])):
            stride = 1 if i == 0 else 2
            blocks = [BasicBlock(inplanes, planes, stride)]
            blocks += [BasicBlock(planes, planes, 1) for _ in range(n_blocks - 1)]
            self.add_module(f"layer{i + 1}", nn.Sequential(*blocks))
            inplanes = planes
        self.out_channels = 512
        for m in self.modules():
            if isinstance(m, nn.Conv2d):  # torchvision's init
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, 3, H, W) -> (N, 512, H/32, W/32)
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        return self.layer4(x)

    def feature_shape(self, h: int, w: int) -> tuple[int, int]:
        """Spatial size of the ``layer4`` map for an ``h x w`` input."""

        def trunk(s: int) -> int:
            s = _conv_out(_conv_out(s, 7, 2, 3), 3, 2, 1)  # conv1, maxpool
            for _ in range(3):  # first block of layer2..4 (3x3, stride 2, pad 1)
                s = _conv_out(s, 3, 2, 1)
            return s

        return trunk(h), trunk(w)


class SmallCNN(nn.Module):
    """Fast trainable encoder for 32-96 px images: stride-8 feature map, at most 8x8 tokens, 128 channels."""

    def __init__(
        self,
        channels: tuple[int, ...] = _CNN_SMALL_CHANNELS,
        strides: tuple[int, ...] = (2, 2, 2, 1),
        max_grid: int = _CNN_SMALL_MAX_GRID,
    ) -> None:
        super().__init__()
        self.strides = strides
        self.max_grid = max_grid
        layers: list[nn.Module] = []
        c_in = 3
        for c, s in zip(channels, strides):
            layers += [nn.Conv2d(c_in, c, 3, stride=s, padding=1), nn.GroupNorm(min(8, c // 4), c), nn.ReLU()]
            c_in = c
        self.net = nn.Sequential(*layers)
        self.out_channels = c_in

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, 3, H, W) -> (N, C, h, w)
        x = self.net(x)
        h, w = x.shape[-2:]
        if h > self.max_grid or w > self.max_grid:
            # Static shape check (no host sync): caps the token count so larger images cost no attention time.
            x = F.adaptive_avg_pool2d(x, (min(h, self.max_grid), min(w, self.max_grid)))
        return x

    def feature_shape(self, h: int, w: int) -> tuple[int, int]:
        for s in self.strides:
            h, w = _conv_out(h, 3, s, 1), _conv_out(w, 3, s, 1)
        return min(h, self.max_grid), min(w, self.max_grid)


def make_backbone(
    name: str, max_grid: int = _CNN_SMALL_MAX_GRID, channels: tuple[int, ...] = _CNN_SMALL_CHANNELS
) -> ResNet | SmallCNN:
    """Build a randomly initialized backbone by name (``resnet18``, ``resnet34``, ``cnn_small``).

    ``max_grid`` caps the cnn_small token grid per side and ``channels`` sets its conv widths (strides
    2, 2, 2 then 1); ResNets keep their full stride-32 map.
    """
    if name in _RESNET_BLOCKS:
        return ResNet(name)
    if name == "cnn_small":
        strides = tuple(2 if i < 3 else 1 for i in range(len(channels)))
        return SmallCNN(channels=tuple(channels), strides=strides, max_grid=max_grid)
    raise ActlabError(
        "unknown vision backbone",
        field="vision_backbone",
        expected="resnet18, resnet34, cnn_small",
        found=name,
    )


def load_imagenet_weights(backbone: ResNet) -> None:
    """Load torchvision's ImageNet weights into ``backbone`` through torch.hub (cached after one download).

    Raises ActlabError when the weights cannot be fetched (offline machine) or do not match the layout.
    """
    url = IMAGENET_URLS.get(backbone.name)
    if url is None:
        raise ActlabError(
            f"no ImageNet weights are known for {backbone.name}",
            field="pretrained_backbone_weights",
            expected="a ResNet backbone (resnet18, resnet34)",
            found=backbone.name,
            fix="set pretrained_backbone_weights=null",
        )
    filename = url.rsplit("/", 1)[1]
    try:
        state = torch.hub.load_state_dict_from_url(url, map_location="cpu", progress=False, weights_only=True)
    except Exception as e:  # URLError, HTTPError, timeouts, a corrupt cached file: all end the same way
        hub_dir = torch.hub.get_dir()
        raise ActlabError(
            f"cannot load ImageNet weights for {backbone.name}: {type(e).__name__}: {e}",
            file=f"{hub_dir}/checkpoints/{filename}",
            field="pretrained_backbone_weights",
            expected=f"a download from {url} or the file already in the torch hub cache",
            found="no network access or an unreadable cached file",
            fix=f"download {url} into {hub_dir}/checkpoints/ on a machine with internet, "
            "or set pretrained_backbone_weights=null to start from random weights",
        ) from e
    state = {
        k: v for k, v in state.items() if not k.startswith("fc.") and not k.endswith("num_batches_tracked")
    }
    result = backbone.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ActlabError(
            f"the ImageNet weights for {backbone.name} do not match the backbone",
            file=filename,
            expected="torchvision's ResNet parameter names",
            found=f"missing {result.missing_keys[:5]}, unexpected {result.unexpected_keys[:5]}",
            fix="delete the cached file so torch.hub downloads it again",
        )
