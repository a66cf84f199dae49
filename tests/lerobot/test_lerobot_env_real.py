"""``--env.type=actlab_so101`` in real lerobot 0.6.1, and a policy in the real follower's units on the sim.

lerobot-eval runs an actlab export and a lerobot-trained ACT on the sim task and reports, per seed, the
same outcomes as ``actlab eval`` of the same policy on the same seeds; lerobot-train evaluates on the env
during training; the lerobot-trained ACT, trained on a recording in so101_follower units (gripper 0-100),
runs on ``--robot.type=actlab_so101_sim --robot.units=so101_follower`` in lerobot-rollout as it is.

All slow; skipped without the lerobot venv ($ACTLAB_LEROBOT_PYTHON) or without the plugin installed in it
(the same rule and environment as test_lerobot_plugin_real.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_lerobot_plugin_real import BIN, LEROBOT_PYTHON, lerobot_env

from procs import run, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("lerobot_plugin")]
SEED = 100_000
EPISODES = 2
STEPS = 40  # episode length: enough to show the outcomes agree, cheap on a CPU


def tiny_policy(data: Path):
    """A tiny actlab ACT with the dataset's statistics (untrained: the check is agreement, not skill)."""
    import torch

    from actlab.datasets import compute_stats, open_dataset
    from actlab.policies import ACTConfig, make_policy

    cfg = ACTConfig(
        vision_backbone="cnn_small", pretrained_backbone_weights=None, dim_model=32, n_heads=2,
        dim_feedforward=64, chunk_size=10, n_action_steps=4, n_encoder_layers=1, n_vae_encoder_layers=1,
        latent_dim=8, cameras=("observation.images.top", "observation.images.wrist"),
    )  # fmt: skip
    ds = open_dataset(data)
    torch.manual_seed(0)
    return make_policy(cfg, ds.features, compute_stats(ds, **cfg.stats_request(), use_cache=False)).eval()


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lerobot_env")


@pytest.fixture(scope="module")
def follower_data(work) -> Path:
    """2 expert episodes recorded in the real follower's units (gripper 0-100), 64 px."""
    out = work / "sim_follower"
    res = run_cli(
        "sim", "record", "--episodes", "2", "--image-size", "64", "--workers", "1",
        "--units", "so101_follower", "--out", out, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["actlab_sim"]["units"] == "so101_follower"
    return out


def _lerobot_eval(
    work: Path, policy: Path, name: str, units: str = "degrees"
) -> tuple[list[bool], list[dict]]:
    log = work / f"{name}_episodes.jsonl"
    out = work / f"{name}_eval"
    cmd = [
        str(BIN / "lerobot-eval"),
        f"--policy.path={policy}",
        "--policy.device=cpu",
        "--env.type=actlab_so101",
        "--env.task=so101_pick_place",
        "--env.image_size=64",
        f"--env.episode_length={STEPS}",
        f"--env.units={units}",
        f"--env.log_file={log}",
        f"--eval.n_episodes={EPISODES}",
        "--eval.batch_size=1",
        f"--seed={SEED}",
        f"--output_dir={out}",
    ]
    res = run(cmd, env=lerobot_env(work), timeout=900, cwd=work)
    assert res.returncode == 0, res.stderr[-3000:]
    info = json.loads((out / "eval_info.json").read_text())
    successes = [bool(x) for x in info["per_task"][0]["metrics"]["successes"]]  # LeRobot's, in seed order
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["seed"] for r in records] == list(range(SEED, SEED + EPISODES))
    assert [r["outcome"] == "success" for r in records] == successes
    return successes, records


def _actlab_eval(work: Path, args: list, name: str) -> list[dict]:
    res = run_cli(
        "eval", *args, "--episodes", EPISODES, "--seed", SEED, "--max-steps", STEPS, "--image-size", "64",
        "--workers", "1", "--batch-envs", "1", "--json", timeout=900,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)["checkpoints"][-1]["episodes"]


def test_lerobot_eval_of_an_actlab_export_agrees_with_actlab_eval(work, sim_data):
    from actlab.lerobot.export import export_policy
    from actlab.policies import save_policy

    policy = tiny_policy(sim_data)
    bundle, export = work / "bundle", work / "export"
    save_policy(policy, bundle)
    export_policy(policy, export, lerobot_type="plugin")
    theirs, records = _lerobot_eval(work, export, "export")
    ours = _actlab_eval(work, [bundle], "export")
    assert theirs == [e["success"] for e in ours]
    assert [r["outcome"] for r in records] == [e["outcome"] for e in ours]


@pytest.mark.timeout(2400)
def test_lerobot_train_on_follower_units_evaluates_on_the_env_and_runs_on_the_sim_robot(work, follower_data):
    out = work / "train_act"
    cmd = [
        str(BIN / "lerobot-train"),
        f"--dataset.root={follower_data}",
        "--dataset.repo_id=local/sim_follower",
        "--dataset.video_backend=pyav",
        "--policy.type=act",
        "--policy.dim_model=32", "--policy.n_heads=2", "--policy.dim_feedforward=64",
        "--policy.n_encoder_layers=1", "--policy.n_vae_encoder_layers=1", "--policy.latent_dim=8",
        "--policy.chunk_size=10", "--policy.n_action_steps=10", "--policy.pretrained_backbone_weights=null",
        "--policy.push_to_hub=false",
        "--policy.device=cpu",
        "--env.type=actlab_so101", "--env.image_size=64", "--env.units=so101_follower",
        "--env.episode_length=20",
        "--env_eval_freq=10", "--eval.n_episodes=1", "--eval.batch_size=1",
        "--wandb.enable=false",
        "--steps=10", "--batch_size=4", "--num_workers=0", "--save_freq=10", "--log_freq=5",
        f"--output_dir={out}",
    ]  # fmt: skip
    res = run(cmd, env=lerobot_env(work), timeout=1200, cwd=work)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "actlab_so101 so101_pick_place seed" in res.stderr  # the env's own line: it evaluated there
    ckpt = out / "checkpoints/000010/pretrained_model"

    # lerobot-eval and actlab eval (through the bridge) of the lerobot-trained ACT on the same seeds
    theirs, records = _lerobot_eval(work, ckpt, "act", units="so101_follower")
    ours = _actlab_eval(
        work,
        ["--lerobot-policy", ckpt, "--lerobot-python", LEROBOT_PYTHON, "--units", "so101_follower"],
        "act",
    )
    assert theirs == [e["success"] for e in ours]
    assert [r["outcome"] for r in records] == [e["outcome"] for e in ours]

    # the same policy directory on the simulated arm in the follower's units: no conversion step
    log = work / "follower_rollout.jsonl"
    cmd = [
        str(BIN / "lerobot-rollout"),
        "--strategy.type=base",
        f"--policy.path={ckpt}",
        "--robot.type=actlab_so101_sim",
        "--robot.units=so101_follower",
        "--robot.image_size=64",
        "--robot.max_steps=20",
        "--robot.hold_s=0",
        f"--robot.log_file={log}",
        "--duration=15",
        "--return_to_initial_position=false",
        "--task=pick the cube and place it in the bowl",
    ]
    res = run(cmd, env=lerobot_env(work), timeout=600, cwd=work)
    assert res.returncode == 0, res.stderr[-3000:]
    from actlab.lerobot.runtime import read_episode_log

    episodes = read_episode_log(log)
    assert episodes and all(e["outcome"] for e in episodes)
