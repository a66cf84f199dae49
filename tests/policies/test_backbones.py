import pytest
import torch

from actlab.errors import ActlabError
from actlab.policies import backbones, make_policy
from actlab.policies.backbones import FrozenBatchNorm2d, load_imagenet_weights, make_backbone
from conftest import make_features, make_stats, tiny_act

# torchvision's parameter counts including the 1000-class fc (512 * 1000 + 1000) and BatchNorm affines.
TORCHVISION_PARAMS = {"resnet18": 11_689_512, "resnet34": 21_797_672}


@pytest.mark.parametrize("name", ["resnet18", "resnet34"])
def test_resnet_matches_torchvision_layout(name):
    net = make_backbone(name)
    sd = net.state_dict()
    # Frozen BatchNorm keeps weight/bias as buffers: count them to compare with torchvision's parameters.
    bn_affine = sum(v.numel() for k, v in sd.items() if k.endswith((".weight", ".bias")) and "bn" in k)
    bn_affine += sum(
        v.numel() for k, v in sd.items() if "downsample.1." in k and k.endswith((".weight", ".bias"))
    )
    convs = sum(p.numel() for p in net.parameters())
    assert convs + bn_affine == TORCHVISION_PARAMS[name] - 513_000
    for key in [
        "conv1.weight",
        "bn1.running_mean",
        "layer1.0.conv1.weight",
        "layer2.0.downsample.0.weight",
        "layer2.0.downsample.1.running_var",
        "layer4.1.bn2.weight",
    ]:
        assert key in sd
    assert not any(k.startswith("fc.") for k in sd)


@pytest.mark.parametrize(
    "name, hw, grid",
    [
        ("resnet18", (480, 640), (15, 20)),
        ("resnet18", (96, 96), (3, 3)),
        ("resnet34", (224, 224), (7, 7)),
        ("cnn_small", (64, 64), (8, 8)),
        ("cnn_small", (80, 80), (8, 8)),
        ("cnn_small", (96, 96), (8, 8)),
        ("cnn_small", (32, 48), (4, 6)),
    ],
)
def test_feature_shape_matches_the_real_output(name, hw, grid):
    net = make_backbone(name).eval()
    assert net.feature_shape(*hw) == grid
    with torch.no_grad():
        out = net(torch.zeros(1, 3, *hw))
    assert tuple(out.shape) == (1, net.out_channels, *grid)


def test_frozen_batchnorm_equals_eval_batchnorm():
    bn = torch.nn.BatchNorm2d(8).eval()
    with torch.no_grad():
        for t in (bn.weight, bn.bias, bn.running_mean):
            t.normal_()
        bn.running_var.uniform_(0.5, 2)
    frozen = FrozenBatchNorm2d(8)
    frozen.load_state_dict(bn.state_dict())  # num_batches_tracked is dropped
    x = torch.randn(2, 8, 5, 5)
    torch.testing.assert_close(frozen(x), bn(x))


def _torchvision_style_checkpoint(name):
    """A state dict laid out as torchvision's (BatchNorm counters and the fc included)."""
    sd = {
        k: torch.randn_like(v) if v.is_floating_point() else v
        for k, v in make_backbone(name).state_dict().items()
    }
    for k in [k for k in sd if k.endswith("running_var")]:
        sd[k] = sd[k].abs() + 0.5
        sd[k.replace("running_var", "num_batches_tracked")] = torch.tensor(100)
    sd["fc.weight"], sd["fc.bias"] = torch.randn(1000, 512), torch.randn(1000)
    return sd


def test_imagenet_weights_load_from_the_torch_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    sd = _torchvision_style_checkpoint("resnet18")
    (tmp_path / "hub" / "checkpoints").mkdir(parents=True)
    torch.save(sd, tmp_path / "hub" / "checkpoints" / "resnet18-f37072fd.pth")
    net = make_backbone("resnet18")
    load_imagenet_weights(net)
    loaded = net.state_dict()
    assert torch.equal(loaded["layer3.1.conv2.weight"], sd["layer3.1.conv2.weight"])
    assert torch.equal(loaded["bn1.running_var"], sd["bn1.running_var"])
    # Through the config: "imagenet" loads when building (and only then).
    policy = make_policy(
        tiny_act(vision_backbone="resnet18", pretrained_backbone_weights="imagenet"),
        make_features(),
        make_stats(),
    )
    assert torch.equal(policy.backbone.conv1.weight, sd["conv1.weight"])


def test_offline_imagenet_download_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    # Port 9 (discard) on localhost refuses at once: the same failure as a machine without internet.
    monkeypatch.setitem(backbones.IMAGENET_URLS, "resnet18", "http://127.0.0.1:9/resnet18-f37072fd.pth")
    with pytest.raises(ActlabError, match="cannot load ImageNet weights") as e:
        make_policy(
            tiny_act(vision_backbone="resnet18", pretrained_backbone_weights="imagenet"),
            make_features(),
            make_stats(),
        )
    assert "pretrained_backbone_weights=null" in e.value.fix
    assert e.value.file.endswith("resnet18-f37072fd.pth")


def test_cnn_small_channels_set_width_and_token_grid():
    net = make_backbone("cnn_small", max_grid=8, channels=(16, 32, 64, 64))
    out = net(torch.zeros(2, 3, 80, 80))
    assert out.shape == (2, 64, 8, 8)
    assert net.out_channels == 64 and net.feature_shape(80, 80) == (8, 8)

    def count(m):
        return sum(p.numel() for p in m.parameters())

    assert count(net) < count(make_backbone("cnn_small"))


def test_sinusoidal_tables_match_the_elementwise_formulas():
    import math

    from actlab.policies.layers import sinusoid_1d, sinusoid_2d

    dim = 16
    t1 = sinusoid_1d(7, dim)
    for p in range(7):
        for c in range(dim):
            angle = p / 10000 ** (2 * (c // 2) / dim)
            assert abs(t1[p, c] - (math.sin(angle) if c % 2 == 0 else math.cos(angle))) < 1e-6
    # DETR / ACT 2-D: first half of the channels encodes the row, second half the column; coordinates
    # (i + 1) / (n + 1e-6) * 2 pi; within a half, channel c uses frequency 10000^(2 (c // 2) / half).
    h, w, half = 3, 5, dim // 2
    t2 = sinusoid_2d(h, w, dim)
    assert t2.shape == (h * w, dim)
    for i in range(h):
        for j in range(w):
            for c in range(dim):
                coord, n = (i, h) if c < half else (j, w)
                k = c % half
                angle = (coord + 1) / (n + 1e-6) * 2 * math.pi / 10000 ** (2 * (k // 2) / half)
                expected = math.sin(angle) if k % 2 == 0 else math.cos(angle)
                assert abs(t2[i * w + j, c] - expected) < 1e-5, (i, j, c)


def test_frozen_batchnorm_is_one_fused_op_with_the_formula_s_result():
    """One inference batch-norm kernel instead of the written-out formula's ~7; same values in fp32, and
    under bf16 autocast the output stays bf16 (no fp32 activation for the next conv to cast back)."""
    from torch.profiler import ProfilerActivity, profile

    from actlab.policies.backbones import FrozenBatchNorm2d
    from actlab.profiling.kernels import does_work

    torch.manual_seed(0)
    bn = FrozenBatchNorm2d(8)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.normal_()
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 8, 6, 6)
    scale = bn.weight * (bn.running_var + bn.eps).rsqrt()
    formula = x * scale.view(1, -1, 1, 1) + (bn.bias - bn.running_mean * scale).view(1, -1, 1, 1)
    torch.testing.assert_close(bn(x), formula, rtol=1e-6, atol=1e-6)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        bn(x)
    computing = [e.name for e in prof.events() if does_work(e.name)]
    assert computing and all("batch_norm" in n for n in computing), computing
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert bn(x.bfloat16()).dtype == torch.bfloat16
