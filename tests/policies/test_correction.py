"""The correction head (--execution correct): its config field, its training loss, its zero start, the
executor's arithmetic with it, and the refusal for a policy without it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from actlab.errors import ActlabError
from actlab.policies import make_policy
from actlab.policies.configs import ACTConfig
from actlab.policies.execution import ChunkExecutor, ChunkLimits, ExecutionSpec, check_execution
from actlab.training.config import policy_config_from_dict
from actlab.utils.config import apply_overrides, to_dict
from conftest import make_batch, make_features, make_stats, observation, tiny_act, tiny_relative

pytestmark = pytest.mark.timeout(60)


# ------------------------------------------------------------------------------------------ config
def test_config_field_is_validated_and_old_configs_load_without_it():
    assert ACTConfig().correction_head is False
    on = apply_overrides(tiny_act(), ["correction_head=true", "correction_hidden_dim=16"])
    assert on.correction_head is True and on.correction_hidden_dim == 16
    assert "observation.state.future" in on.delta_indices(["observation.images.top"])
    assert "observation.state.future" not in tiny_act().delta_indices(["observation.images.top"])
    with pytest.raises(ActlabError) as e:
        tiny_act(correction_head="yes")
    assert e.value.field == "correction_head"
    with pytest.raises(ActlabError) as e:
        tiny_act(correction_hidden_dim=0)
    assert e.value.field == "correction_hidden_dim"
    # a config.json written before the field existed
    old = {k: v for k, v in to_dict(tiny_relative()).items() if not k.startswith("correction_")}
    cfg = policy_config_from_dict(old)
    assert cfg.correction_head is False and cfg == tiny_relative()


# ------------------------------------------------------------------------------------------ training
@pytest.mark.parametrize("make", [tiny_act, tiny_relative], ids=["act", "act_relative"])
def test_the_heads_loss_trains_the_head_only_and_the_chunk_learns_as_without_it(make, features, stats):
    cfg = make(correction_head=True, dropout=0.0)
    torch.manual_seed(0)
    with_head = make_policy(cfg, features, stats, pretrained=False).train()
    without = make_policy(dataclasses.replace(cfg, correction_head=False), features, stats, pretrained=False)
    missing, unexpected = without.load_state_dict(with_head.state_dict(), strict=False)
    assert not missing and all(
        k.startswith(("correction_head.", "normalizer.entries.action")) for k in unexpected
    )
    without.train()
    torch.nn.init.normal_(with_head.correction_head.mlp[-1].weight)  # past the zero start
    batch = make_batch(with_head, seed=1)
    torch.manual_seed(5)
    loss, metrics = with_head(batch)
    loss.backward()
    torch.manual_seed(5)
    base_loss, _ = without({k: v for k, v in batch.items() if not k.startswith("observation.state.future")})
    base_loss.backward()
    assert {"correction_l1", "correction_zero_l1"} <= set(metrics)
    assert torch.allclose(loss, base_loss + metrics["correction_l1"])
    grads = dict(without.named_parameters())
    for name, p in with_head.named_parameters():
        if name.startswith("correction_head."):
            assert p.grad is not None and p.grad.abs().sum() > 0, name  # every head weight learns
        elif p.grad is not None:
            assert torch.allclose(p.grad, grads[name].grad, atol=1e-6), name  # the head's loss stops at it


def test_steps_outside_the_episode_add_no_correction_loss(features, stats):
    policy = make_policy(tiny_act(correction_head=True), features, stats, pretrained=False).train()
    batch = make_batch(policy, n_pad=0)
    batch["observation.state.future_is_pad"][:] = True
    batch["observation.state.future"][:] = float("nan")  # nothing of a padded step may reach the loss
    loss, metrics = policy(batch)
    assert metrics["correction_l1"] == 0 and metrics["correction_zero_l1"] == 0
    loss.backward()
    head = [p.grad for n, p in policy.named_parameters() if n.startswith("correction_head.")]
    assert all(g is None or torch.isfinite(g).all() for g in head)


def test_a_training_batch_without_the_future_states_is_refused(features, stats):
    policy = make_policy(tiny_act(correction_head=True), features, stats, pretrained=False)
    batch = make_batch(policy)
    del batch["observation.state.future"]
    with pytest.raises(ActlabError, match="observation.state.future"):
        policy(batch)


# ------------------------------------------------------------------------------------------ inference
@pytest.mark.parametrize("make", [tiny_act, tiny_relative], ids=["act", "act_relative"])
def test_an_untrained_head_executes_the_chunk_as_it_is_and_a_residual_is_in_action_units(
    make, features, stats
):
    policy = make_policy(make(correction_head=True), features, stats, pretrained=False).eval()
    obs = observation(make_batch(policy), policy)
    planned = torch.randn(4, 6) * 10
    steps = torch.tensor([0, 1, 5, 7])
    assert torch.equal(policy.correct_actions(obs, planned, steps), planned)  # zero-initialised
    torch.nn.init.constant_(policy.correction_head.mlp[-1].bias, 0.5)  # a residual of 0.5 std
    std = policy.normalizer.get("action").std
    assert torch.allclose(policy.correct_actions(obs, planned, steps), planned + 0.5 * std)


def test_a_policy_without_the_head_cannot_correct(features, stats):
    policy = make_policy(tiny_act(), features, stats, pretrained=False)
    with pytest.raises(ActlabError, match="correction_head=true"):
        policy.correct_actions({"observation.state": torch.zeros(1, 6)}, torch.zeros(1, 6), torch.zeros(1))


# ------------------------------------------------------------------------------------------ executor
def _chunks(obs, prefix):
    """A hand-made chunk: action k of a chunk from an observation with state s is s + k (all dims)."""
    s = obs["observation.state"]  # (B, 1)
    return s[:, None, :] + torch.arange(8.0)[None, :, None].expand(-1, -1, 3)  # (B, 8, 3)


@pytest.mark.parametrize("latency", [0, 2, 3])
def test_correct_executes_asyncs_actions_plus_the_heads_residual_at_the_steps_since_the_chunks_observation(
    latency,
):
    limits = ChunkLimits(chunk_size=8, n_action_steps=4, correction_head=True)
    seen = []

    def zero_head(obs, planned, steps):
        return planned

    def step_head(obs, planned, steps):  # residual = 1000 * steps + the newest state
        seen.append(steps.clone())
        return planned + 1000 * steps[:, None].float() + obs["observation.state"]

    runs = {}
    for name, head, mode in (
        ("async", None, "async"),
        ("zero", zero_head, "correct"),
        ("k", step_head, "correct"),
    ):
        ex = ChunkExecutor(
            None, ExecutionSpec(mode, latency=latency), limits, 2, chunk_fn=_chunks, correct_fn=head
        )
        out = []
        for t in range(13):
            state = torch.tensor([[float(t)], [10.0 * t]])  # (B=2, 1): each row's newest state
            out.append(ex.step(lambda state=state: {"observation.state": state}))
        runs[name] = torch.stack(out)  # (T, B, 3)
    assert torch.equal(runs["zero"], runs["async"])  # a zero residual changes nothing
    s = 4  # horizon: n_action_steps (4 + latency <= 8)
    for t in range(13):
        start = 0 if t < s + latency else (t - latency) // s * s  # the executing chunk's observation step
        k = t - start
        assert int(seen[t][0]) == k, (t, start)
        newest = torch.tensor([float(t), 10.0 * t])[:, None]
        assert torch.equal(runs["k"][t], runs["async"][t] + 1000 * k + newest)


def test_correct_is_refused_for_a_policy_without_the_head_naming_the_fix():
    spec = ExecutionSpec("correct", latency=2)
    with pytest.raises(ActlabError) as e:
        check_execution(spec, ChunkLimits(chunk_size=8, n_action_steps=4), where="step_0000020")
    assert e.value.field == "--execution" and "--set policy.correction_head=true" in e.value.fix
    assert check_execution(spec, ChunkLimits.from_config({"chunk_size": 8, "n_action_steps": 4,
                                                           "correction_head": True})) == 4  # fmt: skip


# ------------------------------------------------------------------------------- correction_only (A2C2)
def _image_head(make, features, stats):
    cfg = make(correction_head=True, correction_only=True, correction_images=True)
    torch.manual_seed(0)
    return make_policy(cfg, features, stats, pretrained=False)


def test_images_and_head_alone_are_validated_with_the_fix_named():
    with pytest.raises(ActlabError) as e:
        tiny_act(correction_images=True, correction_only=True)  # no head
    assert e.value.field == "correction_images" and "correction_head=true" in e.value.fix
    with pytest.raises(ActlabError) as e:
        tiny_act(correction_head=True, correction_images=True)  # images while the chunk still trains
    assert e.value.field == "correction_images" and "--init-from" in e.value.fix
    with pytest.raises(ActlabError) as e:
        tiny_act(correction_only=True)
    assert e.value.field == "correction_only"
    cfg = tiny_act(correction_head=True, correction_only=True)
    deltas = cfg.delta_indices(["observation.images.top"])
    assert deltas["action.past_chunks"] == list(range(1 - cfg.chunk_size, 1))
    assert "observation.state.future" not in deltas


@pytest.mark.parametrize("make", [tiny_act, tiny_relative], ids=["act", "act_relative"])
def test_head_alone_trains_only_the_head_on_the_chunk_planned_k_frames_earlier(make, features, stats):
    policy = _image_head(make, features, stats).train()
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith("correction_head.") for n in trainable)
    assert any(n.startswith("correction_head.keypoint_convs.") for n in trainable)
    assert {g["name"] for g in policy.param_groups(1e-3, 1e-3, 0.0)} <= {"head", "head_no_decay"}
    batch = make_batch(policy, n_pad=0)
    h = policy.config.chunk_size
    # The chunk planned k frames before the sample (row H-1-k) says `1` at its step k, every other
    # entry says 100: with a zero head the loss is |norm(a[t]) - norm(1)| whatever k was drawn.
    chunks = torch.full_like(batch["action.past_chunks"], 100.0)
    for k in range(h):
        chunks[:, h - 1 - k, k] = 1.0
    batch["action.past_chunks"] = chunks
    batch["action"][:, 0] = 0.0
    std = policy.normalizer.get("action").std
    expected = (1.0 / std).abs().mean()
    torch.manual_seed(3)
    loss, metrics = policy(batch)
    assert set(metrics) == {"correction_l1", "correction_zero_l1", "loss"}
    assert torch.allclose(metrics["correction_zero_l1"], expected, rtol=1e-4)
    assert torch.allclose(loss, metrics["correction_zero_l1"])  # the zero start
    loss.backward()
    assert all(p.grad is None for n, p in policy.named_parameters() if not n.startswith("correction_head."))
    # chunks planned before the episode began add nothing
    batch["action.past_chunks_is_pad"][:] = True
    _, metrics = policy(batch)
    assert metrics["correction_zero_l1"] == 0


def test_an_image_head_corrects_from_the_newest_frame(features, stats):
    policy = _image_head(tiny_act, features, stats).eval()
    obs = observation(make_batch(policy), policy)
    planned, steps = torch.randn(4, 6), torch.tensor([0, 3, 5, 7])
    assert torch.equal(policy.correct_actions(obs, planned, steps), planned)  # zero-initialised
    torch.nn.init.normal_(policy.correction_head.mlp[-1].weight)
    moved = dict(obs, **{k: torch.flip(obs[k], dims=[-1]) for k in policy.camera_keys})
    a, b = policy.correct_actions(obs, planned, steps), policy.correct_actions(moved, planned, steps)
    assert not torch.allclose(a, b)  # what the cameras show now changes the correction
    assert torch.equal(policy.correct_actions(obs, planned, steps), a)


@pytest.mark.parametrize("make", [tiny_act, tiny_relative], ids=["act", "act_relative"])
def test_an_image_head_reads_only_the_cameras_it_is_given(make):
    """policy.correction_cameras: act_relative's head held the moving task better without the wrist
    camera (docs/evaluation.md), ACT's needed it: the choice is the user's, and the head reads only those."""
    features, stats = make_features(cameras=("top", "wrist")), make_stats(cameras=("top", "wrist"))
    top, wrist = "observation.images.top", "observation.images.wrist"
    everyone = _image_head(make, features, stats)
    assert len(everyone.correction_head.keypoint_convs) == 2
    cfg = make(correction_head=True, correction_only=True, correction_images=True, correction_cameras=(top,))
    torch.manual_seed(0)
    policy = make_policy(cfg, features, stats, pretrained=False).eval()
    assert len(policy.correction_head.keypoint_convs) == 1
    torch.nn.init.normal_(policy.correction_head.mlp[-1].weight)
    obs = observation(make_batch(policy), policy)
    planned, steps = torch.randn(4, 6), torch.tensor([0, 3, 5, 7])
    a = policy.correct_actions(obs, planned, steps)
    other = dict(obs, **{wrist: torch.flip(obs[wrist], dims=[-1])})
    chosen = dict(obs, **{top: torch.flip(obs[top], dims=[-1])})
    assert torch.equal(policy.correct_actions(other, planned, steps), a)  # the camera it does not read
    assert not torch.allclose(policy.correct_actions(chosen, planned, steps), a)
    # a camera the policy does not read, and cameras without images: refused, the fix named
    bad = make(
        correction_head=True, correction_only=True, correction_images=True, correction_cameras=("wrist",)
    )
    with pytest.raises(ActlabError) as e:
        make_policy(bad, features, stats, pretrained=False)
    assert e.value.field == "correction_cameras" and top in e.value.expected
    with pytest.raises(ActlabError) as e:
        make(correction_head=True, correction_cameras=(top,))
    assert e.value.field == "correction_cameras" and "correction_images=true" in e.value.fix
