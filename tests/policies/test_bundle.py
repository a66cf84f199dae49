import json

import pytest
import torch

from actlab.errors import ActlabError
from actlab.policies import load_policy, make_policy, save_policy
from conftest import make_batch, make_features, make_stats, observation, tiny_act, tiny_relative


def trained(cfg, cameras=("top", "wrist")):
    torch.manual_seed(0)
    policy = make_policy(
        cfg, make_features(cameras=cameras), make_stats(horizon=cfg.chunk_size, cameras=cameras)
    )
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    for step in range(2):  # move the weights away from their init
        loss, _ = policy(make_batch(policy, seed=step))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return policy.eval()


@pytest.mark.parametrize(
    "cfg",
    [tiny_act(), tiny_relative(), tiny_act(vision_backbone="resnet18", image_norm="dataset")],
    ids=["act", "act_relative", "act_resnet18"],
)
def test_save_load_gives_bit_identical_outputs(tmp_path, cfg):
    policy = trained(cfg)
    obs = observation(make_batch(policy, batch_size=3, seed=7), policy)
    ref = policy.predict_action_chunk(obs)
    path = save_policy(policy, tmp_path / "bundle", extra={"step": 2})
    assert sorted(p.name for p in path.iterdir()) == [
        ".actlab-output.json",  # what wrote it (actlab.utils.io.atomic_dir): what --overwrite may replace
        "actlab.json",
        "config.json",
        "features.json",
        "model.safetensors",
        "stats.json",
    ]
    loaded = load_policy(path, device="cpu")
    assert not loaded.training
    assert type(loaded) is type(policy) and loaded.config == policy.config
    assert torch.equal(loaded.predict_action_chunk(obs), ref)
    if cfg.type == "act_relative":
        prefix = torch.randn(3, 2, 6)
        assert torch.equal(loaded.predict_action_chunk(obs, prefix), policy.predict_action_chunk(obs, prefix))
    sd, sd2 = policy.state_dict(), loaded.state_dict()
    assert all(torch.equal(sd[k], sd2[k]) for k in sd)
    meta = json.loads((path / "actlab.json").read_text())
    assert meta["extra"] == {"step": 2} and meta["type"] == cfg.type
    assert json.loads((path / "config.json").read_text())["type"] == cfg.type
    stats = json.loads((path / "stats.json").read_text())
    assert set(stats) == set(policy.stats_keys())


def test_normalizer_and_frozen_bn_buffers_are_in_the_weights(tmp_path):
    from safetensors.torch import load_file

    policy = trained(tiny_act(vision_backbone="resnet18"), cameras=("top",))
    path = save_policy(policy, tmp_path / "b")
    names = set(load_file(str(path / "model.safetensors")))
    assert {"normalizer.entries.observation_state.mean", "normalizer.entries.action.std"} <= names
    assert "backbone.layer1.0.bn1.running_var" in names
    assert not any(n.endswith("encoder_cam_pos") for n in names)  # derived buffers are rebuilt, not stored


def test_save_refuses_to_overwrite_and_writes_nothing_partial(tmp_path):
    policy = trained(tiny_act(), cameras=())
    path = save_policy(policy, tmp_path / "b")
    with pytest.raises(ActlabError, match="already exists"):
        save_policy(policy, path)
    save_policy(policy, path, overwrite=True)

    class Broken(torch.nn.Module):
        config = policy.config

        def state_dict(self):
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        save_policy(Broken(), tmp_path / "c")
    assert not (tmp_path / "c").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["b"]


@pytest.fixture
def bundle(tmp_path):
    return save_policy(trained(tiny_act(), cameras=("top",)), tmp_path / "bundle")


def test_missing_file(bundle):
    (bundle / "stats.json").unlink()
    with pytest.raises(ActlabError, match="no stats.json") as e:
        load_policy(bundle)
    assert e.value.file.endswith("stats.json")


def test_not_a_directory(bundle):
    with pytest.raises(ActlabError, match="not found") as e:
        load_policy(bundle / "model.safetensors")
    assert "directory" in e.value.fix


def test_unknown_type_gets_did_you_mean(bundle):
    cfg = json.loads((bundle / "config.json").read_text())
    cfg["type"] = "act_relativ"
    (bundle / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ActlabError, match="did you mean 'act_relative'"):
        load_policy(bundle)


def test_unknown_config_key(bundle):
    cfg = json.loads((bundle / "config.json").read_text())
    cfg["chunk_sise"] = 4
    (bundle / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ActlabError, match="did you mean 'chunk_size'") as e:
        load_policy(bundle)
    assert e.value.file.endswith("config.json")


def test_shape_mismatch_names_the_tensor(bundle):
    cfg = json.loads((bundle / "config.json").read_text())
    cfg["dim_model"] = 64
    (bundle / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ActlabError, match="wrong shape") as e:
        load_policy(bundle)
    assert e.value.field and e.value.field in str(e.value)
    assert e.value.file.endswith("model.safetensors")


def _forget_checksums(bundle):
    """Make ``bundle`` look like one saved before actlab.json recorded the files' sha256."""
    _edit_json(bundle / "actlab.json", lambda m: {k: v for k, v in m.items() if k != "sha256"})


def test_corrupt_weights(bundle):
    data = (bundle / "model.safetensors").read_bytes()
    (bundle / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ActlabError, match="model.safetensors is damaged") as e:
        load_policy(bundle)
    assert e.value.file.endswith("model.safetensors") and "another checkpoint" in e.value.fix
    _forget_checksums(bundle)  # without a recorded checksum the truncation is still caught, by safetensors
    with pytest.raises(ActlabError, match="cannot read the weights"):
        load_policy(bundle)


def test_weights_overwritten_in_place_are_refused_by_their_checksum(bundle):
    """Bytes overwritten inside a tensor leave a well-formed file with wrong numbers: only the sha256
    recorded at save tells; before it, the bundle loaded and was evaluated as if intact."""
    file = bundle / "model.safetensors"
    data = bytearray(file.read_bytes())
    data[-64:-60] = b"\xff\x7f\x12\x34"  # inside the last tensor's data, past the header
    file.write_bytes(bytes(data))
    with pytest.raises(ActlabError, match="damaged") as e:
        load_policy(bundle)
    assert e.value.field == "actlab.json sha256.model.safetensors"
    _forget_checksums(bundle)  # an old bundle (no checksums) still loads: the check is only as old as it
    load_policy(bundle)


def test_bundle_holds_no_pickle(bundle):
    assert all(p.suffix in (".json", ".safetensors") for p in bundle.iterdir())


def _edit_json(path, fn):
    path.write_text(json.dumps(fn(json.loads(path.read_text()))))


@pytest.mark.parametrize(
    "name, edit, match",
    [
        ("features.json", lambda f: "x", "feature spec"),
        ("features.json", lambda f: {**f, "observation.state": {"shape": "abc"}}, "observation.state"),
        (
            "features.json",
            lambda f: {**f, "observation.images.top": {"dtype": "video", "shape": [32, 32, 4]}},
            "3 channels",
        ),
        ("stats.json", lambda s: [], "normalization stats"),
        ("stats.json", lambda s: {**s, "action": [1, 2]}, "action"),
        ("stats.json", lambda s: {**s, "action": {"mean": "x", "std": [1] * 6}}, "action.mean"),
        ("actlab.json", lambda m: {**m, "format_version": "abc"}, "format_version"),
    ],
)
def test_edited_json_files_are_clear_errors_naming_the_file(bundle, name, edit, match):
    _edit_json(bundle / name, edit)
    with pytest.raises(ActlabError, match=match) as e:
        load_policy(bundle)
    assert e.value.file.endswith(name)


def test_non_finite_or_non_float_weights_are_rejected(bundle):
    from safetensors.torch import load_file, save_file

    _forget_checksums(bundle)  # the weights are rewritten on purpose: test the checks behind the checksum
    file = bundle / "model.safetensors"
    good = load_file(str(file))
    bad = dict(good, **{"action_head.weight": torch.full_like(good["action_head.weight"], float("nan"))})
    save_file(bad, str(file))
    with pytest.raises(ActlabError, match="NaN or inf") as e:
        load_policy(bundle)
    assert e.value.field == "action_head.weight" and e.value.file.endswith("model.safetensors")
    bad = dict(good, **{"action_head.weight": good["action_head.weight"].to(torch.int32)})
    save_file(bad, str(file))
    with pytest.raises(ActlabError, match="dtype") as e:
        load_policy(bundle)
    assert e.value.field == "action_head.weight"
    save_file({k: v.to(torch.bfloat16) for k, v in good.items()}, str(file))  # a bf16 save still loads
    assert load_policy(bundle).action_head.weight.dtype == torch.float32


def test_the_bundle_reads_the_resize_record_under_the_key_the_frame_store_writes():
    # policies/bundle.py spells the key itself (importing it would tie the policies to the datasets): a
    # change on one side only would make every bundle's resize record unread.
    from actlab.datasets.framestore import RESIZE_INFO as written
    from actlab.policies.bundle import RESIZE_INFO as read

    assert read == written == "actlab.resize"
