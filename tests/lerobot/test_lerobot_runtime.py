"""What the LeRobot plugin runs on actlab's side (no lerobot needed): RTC prefix mapping, camera frames to
the trained size, actlab's execution modes behind select_action, the simulated robot's episodes (real
MuJoCo). The plugin inside lerobot itself is tested
in test_lerobot_real.py (slow)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from actlab.errors import ActlabError
from actlab.lerobot.runtime import (
    JOINT_KEYS,
    SimEpisodes,
    SimSignal,
    camera_to_trained,
    read_episode_log,
    rollout_execution,
    rtc_prefix,
    trained_cameras,
)


def test_rtc_prefix_takes_the_first_delay_rows_and_never_lerobots_zero_padding():
    left = torch.arange(1, 25, dtype=torch.float32).view(4, 6)  # 4 real left-over actions
    padded = torch.cat([left, torch.zeros(6, 6)])  # LeRobot pads to its execution_horizon (10) with zeros
    p = rtc_prefix(padded, inference_delay=3, max_delay=5)
    assert p.used == 3 and p.note is None and torch.equal(p.actions, left[None, :3])
    p = rtc_prefix(padded, inference_delay=5, max_delay=8)  # more delay than real actions: no zero rows
    assert p.used == 4 and torch.equal(p.actions, left[None]) and "zero padding" in p.note
    p = rtc_prefix(padded, inference_delay=9, max_delay=2)  # above the trained maximum: clamped
    assert p.used == 2 and "clamped to the trained rtc_max_delay 2" in p.note


def test_rtc_prefix_is_empty_without_a_left_over_or_a_delay():
    assert rtc_prefix(None, 4, 5).actions is None  # the first chunk
    assert rtc_prefix(torch.ones(5, 6), 0, 5).actions is None  # no latency measured yet
    assert rtc_prefix(torch.zeros(10, 6), 3, 5).actions is None  # only padding
    p = rtc_prefix(torch.ones(5, 6), 3, 0)
    assert p.actions is None and "without an RTC prefix" in p.note
    with pytest.raises(ActlabError, match="prev_chunk_left_over"):
        rtc_prefix(torch.ones(6), 2, 5)


def test_rtc_delay_of_a_whole_chunk_is_clamped_not_refused_and_says_why():
    """LeRobot's d is its largest latency ever: one load spike must not stop the rollout."""
    p = rtc_prefix(torch.ones(10, 6), inference_delay=33, max_delay=8, chunk_size=30)
    assert p.used == 8 and "whole chunk (30)" in p.note and "clamped to the trained rtc_max_delay 8" in p.note
    assert rtc_prefix(torch.ones(10, 6), inference_delay=29, max_delay=8, chunk_size=30).used == 8


def _features(h: int, w: int, fit_pad: bool = False) -> dict:
    resize = {"mode": "fit_pad", "from_shape": [96, 128, 3], "image_size": h}
    info = {"actlab.resize": resize} if fit_pad else {}
    return {"observation.images.top": {"dtype": "video", "shape": [h, w, 3], "info": info}}


def test_camera_frames_become_the_trained_size_as_actlab_eval_resizes_them():
    from actlab.evaluation.policy_io import resize_images

    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (2, 3, 96, 96), generator=g, dtype=torch.uint8)
    trained = trained_cameras(_features(80, 80), ["observation.images.top"])["observation.images.top"]
    as_lerobot = frames.float() / 255  # what LeRobot's prepare_observation_for_inference makes
    out = camera_to_trained(as_lerobot, "observation.images.top", trained)
    assert out.dtype == torch.uint8 and torch.equal(out, resize_images(frames, (80, 80)))
    same = camera_to_trained(frames[..., :80, :80].float() / 255, "observation.images.top", trained)
    assert torch.equal(same, frames[..., :80, :80])  # float -> uint8 is exact at the trained size


def test_camera_of_another_aspect_ratio_is_refused_naming_both_sizes():
    trained = trained_cameras(_features(60, 80), ["observation.images.top"])["observation.images.top"]
    ok = camera_to_trained(torch.zeros(1, 3, 480, 640), "observation.images.top", trained)
    assert tuple(ok.shape) == (1, 3, 60, 80)
    with pytest.raises(ActlabError, match="delivers 480x480") as e:
        camera_to_trained(torch.zeros(1, 3, 480, 480), "observation.images.top", trained)
    assert "60x80" in str(e.value.render()) and e.value.field == "observation.images.top"
    # a camera the FrameStore fitted into a padded square takes any aspect ratio, as in training
    key = "observation.images.top"
    square = trained_cameras(_features(80, 80, fit_pad=True), [key])[key]
    out = camera_to_trained(torch.ones(1, 3, 96, 128), key, square)
    assert tuple(out.shape) == (1, 3, 80, 80) and int(out[0, 0, 0, 0]) == 0 and int(out[0, 0, 40, 40]) == 255


def test_sim_robot_restarts_episodes_from_new_seeds_and_logs_each_outcome(tmp_path):
    seen = []
    signal = SimSignal()
    sim = SimEpisodes(image_size=32, max_steps=4, seed=7, hold_steps=2, log_file=tmp_path / "ep.jsonl",
                      on_episode=seen.append, signal=signal)  # fmt: skip
    try:
        assert (signal.epoch, signal.holding) == (1, True)  # a plugin policy resets and drops its prefix
        obs = sim.observe()
        assert obs["observation.state"].shape == (6,) and obs["observation.images.top"].shape == (32, 32, 3)
        home = obs["observation.state"].astype(np.float64)
        # clipped like the follower's servos: a target far outside a joint's range stops at the range
        applied = sim.act(home + 1000.0)
        assert np.allclose(applied, sim.high_deg) and len(sim._infos) == 0  # held: the action is ignored
        sim.act(home)
        assert not signal.holding  # the hold is over: actions are executed (and may be committed)
        for i in range(10):  # the rest of 2 episodes: 4 steps each, 2 held steps after the restart
            sim.act(home + 0.01 * i**3)  # a cubic: every third difference is 0.06 per joint
        assert [r.seed for r in sim.results] == [7, 8] and signal.epoch == 3
        assert all(r.outcome == "timeout" or r.outcome == "never_picked_up" for r in sim.results)
        assert seen == sim.results and sim.results[0].steps == 4
        # actlab eval's jerk of the 4 commanded targets: |(0.06, ..., 0.06)|
        assert sim.results[0].jerk == pytest.approx(0.06 * np.sqrt(6))
        logged = read_episode_log(tmp_path / "ep.jsonl")
        assert [e["seed"] for e in logged] == [7, 8] and logged[0]["outcome"] == sim.results[0].outcome
        assert sim.summary().startswith("0/2 episodes succeeded")
        assert "episode 0 seed 7" in sim.results[0].line()
    finally:
        sim.close()
    assert len(JOINT_KEYS) == 6 and JOINT_KEYS[-1] == "gripper.pos"


def test_bridged_lerobot_checkpoints_are_named_by_run_and_step_and_last_is_resolved(tmp_path):
    from actlab.lerobot.bridge import checkpoint_label

    for step in ("000002", "000004"):
        (tmp_path / "act_run/checkpoints" / step / "pretrained_model").mkdir(parents=True)
    (tmp_path / "act_run/checkpoints/last").symlink_to("000004")
    ckpts = tmp_path / "act_run/checkpoints"
    assert checkpoint_label(ckpts / "last/pretrained_model") == ("act_run_step_0000004", 4)
    assert checkpoint_label(ckpts / "000002/pretrained_model") == ("act_run_step_0000002", 2)
    (tmp_path / "mypolicy").mkdir()
    assert checkpoint_label(tmp_path / "mypolicy") == ("mypolicy", None)


def test_sim_robot_writes_its_logs_under_its_output_directory_and_says_each_episode_on_a_line_of_its_own(
    tmp_path, monkeypatch
):
    # Before: lerobot-rollout's sim robot wrote its episode log into the current directory (the
    # repository root), and its per-episode lines were buried under LeRobot's FPS warnings.
    import datetime
    import io

    from actlab.lerobot.runtime import EPISODE_PREFIX, default_output_dir

    monkeypatch.chdir(tmp_path)
    stream = io.StringIO()
    out = tmp_path / "rollout"
    sim = SimEpisodes(image_size=32, max_steps=3, seed=5, hold_steps=0, out_dir=out, stream=stream)
    try:
        home = sim.observe()["observation.state"].astype(np.float64)
        for _ in range(6):  # two episodes of 3 steps
            sim.act(home)
        sim.say(f"{EPISODE_PREFIX} done: {sim.summary()}")
    finally:
        sim.close()
    assert sorted(p.name for p in out.iterdir()) == ["episodes.jsonl", "episodes.log"]
    assert [e["seed"] for e in read_episode_log(out / "episodes.jsonl")] == [5, 6]
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3 and all(line.startswith(EPISODE_PREFIX) for line in lines)
    assert lines[0].startswith(f"{EPISODE_PREFIX} episode 0 seed 5: {sim.results[0].outcome} after 3 steps")
    assert "| so far 0/2 episodes succeeded (0%); failures: " in lines[1]
    assert "so far 0/1" in lines[0] and lines[2] == f"{EPISODE_PREFIX} done: {sim.summary()}"
    assert (out / "episodes.log").read_text().splitlines() == lines  # the same lines, in the log file
    assert list(tmp_path.iterdir()) == [out]  # nothing in the current directory

    # Without an output directory given, the plugin uses outputs/rollout/DATE/TIME_actlab_so101_sim (LeRobot's
    # output root, ignored by git), not the current directory itself.
    when = datetime.datetime(2026, 11, 27, 19, 5, 7)
    assert default_output_dir(when) == Path("outputs/rollout/2026-11-27/19-05-07_actlab_so101_sim")
    # An explicit log file still wins, and "" still disables the JSONL file.
    quiet = SimEpisodes(image_size=32, max_steps=3, hold_steps=0, out_dir=tmp_path / "q", log_file="")
    try:
        assert quiet.log_file is None and quiet.text_log == tmp_path / "q" / "episodes.log"
    finally:
        quiet.close()


def _tiny_act(tmp_path: Path, rtc_max_delay: int = 4, correction_head: bool = False):
    """An untrained act_relative (chunk 12, 6 actions per chunk) on 32 px top + wrist cameras."""
    from actlab.policies import ACTRelativeConfig, make_policy

    names = [f"j{i}" for i in range(6)]
    feats = {k: {"dtype": "float32", "shape": [6], "names": names} for k in ("observation.state", "action")}
    cams = ("observation.images.top", "observation.images.wrist")
    feats.update({c: {"dtype": "video", "shape": [32, 32, 3], "names": None} for c in cams})
    std = {"mean": np.zeros(6), "std": np.full(6, 30.0)}
    rel = {**std, "mean_per_step": np.zeros((12, 6)), "std_per_step": np.full((12, 6), 5.0)}
    stats = {"observation.state": std, "action": std, "action.relative": rel}
    cfg = ACTRelativeConfig(
        cameras=cams, chunk_size=12, n_action_steps=6, vision_backbone="cnn_small", dim_model=32, n_heads=2,
        dim_feedforward=64, n_encoder_layers=1, n_decoder_layers=1, latent_dim=8, n_vae_encoder_layers=1,
        rtc_max_delay=rtc_max_delay, correction_head=correction_head,
    )  # fmt: skip
    torch.manual_seed(0)
    return make_policy(cfg, feats, stats, pretrained=False).eval()


@pytest.mark.timeout(60)
def test_plugin_execution_runs_actlabs_executor_with_the_actions_of_actlab_eval(tmp_path):
    """--policy.execution=MODE: the action per step is actlab's ChunkExecutor's (what actlab eval runs),
    the inference in a worker thread; a new episode starts a new chunk clock."""
    from actlab.policies.execution import ChunkExecutor, ChunkLimits, ExecutionSpec

    policy = _tiny_act(tmp_path)
    assert rollout_execution(policy, {"execution": "sync"}) is None  # actlab's own select_action
    rng = np.random.default_rng(0)

    def image():
        return torch.as_tensor(rng.integers(0, 255, (1, 3, 32, 32)), dtype=torch.uint8)

    steps = [
        {
            "observation.state": torch.as_tensor(rng.normal(0, 20, (1, 6)), dtype=torch.float32),
            "observation.images.top": image(),
            "observation.images.wrist": image(),
        }
        for _ in range(20)
    ]
    for mode, latency in (("blend", 2), ("ensemble", 2), ("rtc", 3), ("async", 0)):
        fields = {"execution": mode, "execution_latency": latency, "execution_horizon": None}
        plugin = rollout_execution(policy, fields)
        spec = ExecutionSpec(mode, latency=latency)
        ref = ChunkExecutor(policy, spec, ChunkLimits.from_config(policy.config), 1)
        try:
            with torch.no_grad():
                for episode in range(2):
                    plugin.reset()
                    ref.restart()
                    for obs in steps[: 13 + episode]:
                        assert torch.equal(plugin.select_action(obs), ref.step(lambda obs=obs: obs)), mode
            assert plugin.executor.background == (latency > 0)
        finally:
            plugin.close()
    # lerobot-eval --eval.batch_size=2: two envs stepped together, each row with its own chunk clock
    plugin = rollout_execution(policy, {"execution": "blend", "execution_latency": 2})
    ref = ChunkExecutor(policy, ExecutionSpec("blend", latency=2), ChunkLimits.from_config(policy.config), 2)
    try:
        with torch.no_grad():
            for obs in steps[:9]:
                both = {k: torch.cat([v, -v if k.endswith("state") else 255 - v]) for k, v in obs.items()}
                assert torch.equal(plugin.select_action(both), ref.step(lambda both=both: both))
        assert plugin.batch == 2
    finally:
        plugin.close()


@pytest.mark.parametrize(
    "fields, flag, match",
    [
        ({"execution": "rtc", "execution_latency": 3}, "--policy.execution_latency", "rtc_max_delay = 0"),
        ({"execution": "blend", "execution_latency": 12}, "--policy.execution_latency", "not shorter"),
        ({"execution": "blend", "execution_latency": 4, "execution_horizon": 10},
         "--policy.execution_horizon", "runs out"),
        ({"execution": "sync", "execution_horizon": 4}, "--policy.execution_horizon", "none with"),
        ({"execution": "naive"}, "--policy.execution", "renamed|invalid"),
    ],
)  # fmt: skip
def test_plugin_execution_a_policy_cannot_run_is_refused_with_lerobot_rollouts_flags(
    tmp_path, fields, flag, match
):
    policy = _tiny_act(tmp_path, rtc_max_delay=0)
    with pytest.raises(ActlabError, match=match) as e:
        rollout_execution(policy, fields)
    assert e.value.field == flag
    text = str(e.value)
    assert "--latency" not in text and "--horizon " not in text and "--execution " not in text, text


@pytest.mark.timeout(60)
def test_plugin_execution_correct_runs_actlabs_executor_with_the_policys_head(tmp_path):
    """--policy.execution=correct: the plugin's config value runs ChunkExecutor's correct mode (the head
    at every step, the inference in a worker thread), the same actions as actlab eval's executor; a
    policy without the head is refused with the fix and the plugin's flag."""
    from actlab.policies.execution import ChunkExecutor, ChunkLimits, ExecutionSpec

    policy = _tiny_act(tmp_path, correction_head=True)
    torch.nn.init.normal_(policy.correction_head.mlp[-1].weight, std=0.1)  # a residual that is not zero
    rng = np.random.default_rng(1)
    steps = [
        {
            "observation.state": torch.as_tensor(rng.normal(0, 20, (1, 6)), dtype=torch.float32),
            **{
                f"observation.images.{c}": torch.as_tensor(
                    rng.integers(0, 255, (1, 3, 32, 32)), dtype=torch.uint8
                )
                for c in ("top", "wrist")
            },
        }
        for _ in range(14)
    ]
    fields = {"execution": "correct", "execution_latency": 2, "execution_horizon": None}
    plugin = rollout_execution(policy, fields)
    ref = ChunkExecutor(
        policy, ExecutionSpec("correct", latency=2), ChunkLimits.from_config(policy.config), 1
    )
    plain = ChunkExecutor(
        policy, ExecutionSpec("async", latency=2), ChunkLimits.from_config(policy.config), 1
    )
    try:
        with torch.no_grad():
            for obs in steps:
                got = plugin.select_action(obs)
                assert torch.equal(got, ref.step(lambda obs=obs: obs))
                assert not torch.equal(got, plain.step(lambda obs=obs: obs))  # the head corrected it
        assert plugin.executor.background and plugin.executor.correct_fn is not None
    finally:
        plugin.close()
    with pytest.raises(ActlabError) as e:
        rollout_execution(_tiny_act(tmp_path), fields)
    assert e.value.field == "--policy.execution" and "--set policy.correction_head=true" in e.value.fix
