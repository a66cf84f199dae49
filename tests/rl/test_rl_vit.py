"""obs.encoder=vit: a frozen pretrained ViT (actlab.policies.vit) as the RL encoder without a base bundle.

Tiny random ViTs (tests/tiny_vit.py) stand in for the pretrained weights: the code path is the same
(``make_vit`` + the family's normalization), only ``load_pretrained`` is skipped.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from actlab.errors import ActlabError
from actlab.policies.configs import VIT_BACKBONES
from actlab.policies.vit import FAMILIES, make_vit
from actlab.rl.config import RLConfig, replace_keys
from actlab.utils.config import apply_overrides
from tiny_vit import TINY_VIT

CAM = "observation.images.top"


def _cfg(**kw) -> RLConfig:
    """A tiny ViT run; keyword ``section__key`` sets ``section.key``."""
    base = {
        "env.task": "pick_place", "obs.encoder": "vit", "obs.cameras": ["top"], "obs.image_size": 32,
        "obs.vision_backbone": "dinov2_vit", "obs.pretrained_backbone_weights": None,
        "obs.vit_config": TINY_VIT,
        "env.num_envs": 2, "env.max_steps": 20, "total_env_steps": 80, "sac.random_steps": 40,
        "sac.learning_starts": 40, "sac.batch_size": 16, "sac.hidden": 16, "sac.buffer_size": 200,
        "eval.episodes": 1, "eval.every": 0, "checkpoint.every": 0, "obs.frame_stack": 2,
    }  # fmt: skip
    base.update({k.replace("__", "."): v for k, v in kw.items()})
    return replace_keys(RLConfig(), base)


@pytest.mark.parametrize("name", VIT_BACKBONES)
def test_vit_features_equal_a_direct_forward_of_the_same_backbone(name):
    from actlab.rl.networks import ViTFeatures

    cfg = _cfg(obs__vision_backbone=name, obs__downscale_img_square=32, seed=3)
    rng_before = torch.random.get_rng_state()
    enc = ViTFeatures(cfg, [CAM])
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # seeded apart from the global RNG
    torch.manual_seed(3)
    ref = make_vit(name, TINY_VIT, "pooled", 32).eval()  # the same seed: the same random weights
    for (k, p), (k2, q) in zip(enc.backbone.state_dict().items(), ref.state_dict().items()):
        assert k == k2 and torch.equal(p, q), k
    images = torch.randint(0, 256, (3, 3, 40, 40), dtype=torch.uint8)  # resized 40 -> 32 px
    x = F.interpolate(
        images.float() / 255, size=(32, 32), mode="bilinear", antialias=True, align_corners=False
    )
    fam = FAMILIES[name]
    x = (x - torch.tensor(fam.mean).view(1, 3, 1, 1)) / torch.tensor(fam.std).view(1, 3, 1, 1)
    with torch.no_grad():
        expected = ref.model(
            pixel_values=x, **({} if name == "dinov2_vit" else {"interpolate_pos_encoding": False})
        )
    got = enc({CAM: images})  # (B, hidden)
    assert got.shape == (3, TINY_VIT["hidden_size"]) and enc.out_dim == TINY_VIT["hidden_size"]
    torch.testing.assert_close(got, expected.pooler_output, rtol=0, atol=1e-6)


def test_sac_updates_leave_the_vit_untouched_and_never_run_it(tmp_path):
    from actlab.rl.agent import Agent
    from actlab.rl.sac import SAC

    cfg = _cfg()
    agent = Agent(cfg)
    agent.train()
    assert not agent.frozen.training  # stays in eval mode
    before = {k: v.clone() for k, v in agent.frozen.state_dict().items()}
    calls = []
    agent.frozen.register_forward_hook(lambda *_: calls.append(1))
    frames = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
    agent.reset()
    o = agent.observe({CAM: frames, "observation.state": torch.zeros(4, 6)})  # one ViT call, K=2 stacked
    assert len(calls) == 1 and o["vec"].shape == (4, 6 + 2 * TINY_VIT["hidden_size"])
    sac = SAC(agent)
    sac.generator = torch.Generator().manual_seed(0)
    opts = (sac.critic_opt, sac.actor_opt, sac.alpha_opt)
    opt_params = {id(p) for opt in opts for g in opt.param_groups for p in g["params"]}
    assert not opt_params & {id(p) for p in agent.frozen.parameters()}
    batch = {
        "vec": o["vec"], "next_vec": o["vec"].flip(0), "action": torch.rand(4, 6) * 2 - 1,
        "reward": torch.ones(4), "discount": torch.full((4,), 0.9),
        "priv": torch.zeros(4, 12), "next_priv": torch.zeros(4, 12),  # the asymmetric critic (no demos)
    }  # fmt: skip
    actor_before = agent.actor.trunk[0].weight.clone()
    for _ in range(3):
        sac.update(batch)
    assert len(calls) == 1  # updates read the stored features: the ViT never runs again
    assert not torch.equal(agent.actor.trunk[0].weight, actor_before)  # the updates did train the actor
    for k, v in agent.frozen.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(p.grad is None and not p.requires_grad for p in agent.frozen.parameters())


def test_a_vit_run_stores_features_and_resumes_exactly(tmp_path):
    """From scratch (no base): the replay buffer holds (N, 6 + K * hidden) feature vectors and no frames;
    a resume from the 80-step checkpoint ends bit for bit where the uninterrupted run does."""
    from safetensors.torch import load_file

    from actlab.rl.train import load_agent, train_rl

    ref = train_rl(_cfg(total_env_steps=120), tmp_path / "ref", progress=False)
    train_rl(_cfg(checkpoint__every=40), tmp_path / "run", progress=False)
    replay = torch.load(tmp_path / "run/checkpoints/step_0000080/training_state/replay.pt", weights_only=True)
    assert "img" not in replay and tuple(replay["vec"].shape) == (80, 6 + 2 * TINY_VIT["hidden_size"])
    agent = load_agent(tmp_path / "run")
    saved = load_file(str(tmp_path / "run/checkpoints/step_0000080/agent.safetensors"))
    assert not any(k.startswith("frozen.") for k in saved)  # the ViT is rebuilt, never saved
    obs = {CAM: torch.zeros(1, 3, 32, 32, dtype=torch.uint8), "observation.state": torch.zeros(1, 6)}
    action = agent.select_action(obs)
    assert action.shape == (1, 6)  # the checkpoint's agent rebuilds its ViT from the config alone
    resumed = train_rl(
        _cfg(total_env_steps=120, checkpoint__every=40), tmp_path / "run", resume=True, progress=False
    )
    assert resumed.env_steps == ref.env_steps == 120
    a = load_file(str(tmp_path / "ref/checkpoints/step_0000120/agent.safetensors"))
    b = load_file(str(tmp_path / "run/checkpoints/step_0000120/agent.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert json.loads((tmp_path / "run/config.json").read_text())["obs"]["encoder"] == "vit"


def test_vit_config_errors_and_overrides():
    cfg = apply_overrides(_cfg(), ['obs.vit_config={"hidden_size": 64, "num_attention_heads": 4}'])
    assert cfg.obs.vit_config == {"hidden_size": 64, "num_attention_heads": 4}
    cfg.check_runnable()  # no base needed
    with pytest.raises(ActlabError, match="cameras"):
        _cfg(obs__cameras=[])
    with pytest.raises(ActlabError, match="vision_backbone"):
        _cfg(obs__vision_backbone="dinov3_vit")
    with pytest.raises(ActlabError, match="patch"):
        from actlab.rl.agent import Agent

        Agent(_cfg(obs__downscale_img_square=36))  # not a multiple of patch 8


def test_vit_weights_from_a_local_save_pretrained_directory(tmp_path):
    """The pretrained path without the hub: weights saved by transformers load into the RL encoder; a
    missing directory is an ActlabError naming the field."""
    from actlab.rl.networks import ViTFeatures

    torch.manual_seed(7)
    src = make_vit("dinov2_vit", TINY_VIT, "pooled", 32).eval()
    src.model.save_pretrained(tmp_path / "dino")
    enc = ViTFeatures(_cfg(obs__pretrained_backbone_weights=str(tmp_path / "dino")), [CAM])
    for k, v in src.model.state_dict().items():
        assert torch.equal(enc.backbone.model.state_dict()[k], v), k
    with pytest.raises(ActlabError, match="pretrained_backbone_weights"):
        ViTFeatures(_cfg(obs__pretrained_backbone_weights=str(tmp_path / "missing")), [CAM])


def test_videomae_encodes_the_last_k_frames_once_per_step_and_a_run_stores_its_features(tmp_path):
    """obs.vision_backbone=videomae: the clip of the last K frames (the first frame repeated at reset) gives
    the features a direct VideoMAE forward gives; a short SAC run stores them (no frames); a rebuilt encoder
    (resume, load_agent) has the same weights; a frame_stack other than the model's num_frames is refused."""
    import transformers

    from actlab.rl.agent import Agent
    from actlab.rl.networks import VIDEOMAE_MEAN, VIDEOMAE_STD
    from actlab.rl.train import train_rl

    cfg = _cfg(obs__vision_backbone="videomae", seed=5)  # frame_stack 2 = num_frames, tubelet 2
    agent = Agent(cfg)
    torch.manual_seed(5)
    ref = transformers.VideoMAEModel(transformers.VideoMAEConfig(num_frames=2, **TINY_VIT)).eval()
    f0, f1 = (torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8) for _ in range(2))
    state = torch.zeros(2, 6)
    agent.reset()
    v0 = agent.observe({CAM: f0, "observation.state": state})["vec"]
    v1 = agent.observe({CAM: f1, "observation.state": state})["vec"]
    mean, std = (
        torch.tensor(VIDEOMAE_MEAN).view(1, 1, 3, 1, 1),
        torch.tensor(VIDEOMAE_STD).view(1, 1, 3, 1, 1),
    )
    with torch.no_grad():
        for vec, clip in ((v0, (f0, f0)), (v1, (f0, f1))):
            x = (torch.stack(clip, 1).float() / 255 - mean) / std  # (B, K, 3, 32, 32), oldest first
            expected = ref(pixel_values=x).last_hidden_state.mean(1)
            torch.testing.assert_close(vec[:, 6:], expected, rtol=0, atol=1e-5)
    before = {k: v.clone() for k, v in agent.frozen.state_dict().items()}
    train_rl(cfg, tmp_path / "run", progress=False)
    replay = torch.load(tmp_path / "run/checkpoints/step_0000080/training_state/replay.pt", weights_only=True)
    assert "img" not in replay and tuple(replay["vec"].shape) == (80, 6 + TINY_VIT["hidden_size"])
    with pytest.raises(ActlabError, match="frame_stack"):
        Agent(_cfg(obs__vision_backbone="videomae", obs__frame_stack=3))
    assert all(torch.equal(v, before[k]) for k, v in Agent(cfg).frozen.state_dict().items())


def test_vit_demo_transitions_carry_the_encoders_features(rl_demos):
    """RLPD demos with encoder=vit: the recorded frames go through the same frozen ViT (no base needed)."""
    from actlab.rl.agent import Agent
    from actlab.rl.demos import demo_buffer

    cfg = _cfg(demos=str(rl_demos), sac__demo_episodes=2, obs__privileged="off")
    buf = demo_buffer(cfg, Agent(cfg))
    # 2 episodes x 20 frames: 19 transitions each (the last frame is the final observation)
    assert len(buf) == 38 and tuple(buf.data["vec"].shape[1:]) == (6 + 2 * TINY_VIT["hidden_size"],)
    assert "img" not in buf.data
