"""Against real lerobot 0.6.1 in its own venv (docs/lerobot.md): export parity, import parity and
fine-tuning, bridge evaluation of lerobot-trained ACT and Diffusion, `actlab monitor -- lerobot-train`.

All slow (`pytest -m slow tests/lerobot`); skipped when $ACTLAB_LEROBOT_PYTHON (default
/work/lerobot-venv/bin/python) does not exist. Every lerobot process runs with PYTHONPATH and VIRTUAL_ENV
removed, offline. Parity numbers are printed (run with -s to see them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from procs import cli, run, run_cli, skip_without_lerobot_extra

LEROBOT_PYTHON = os.environ.get("ACTLAB_LEROBOT_PYTHON", "/work/lerobot-venv/bin/python")
LEROBOT_TRAIN = str(Path(LEROBOT_PYTHON).with_name("lerobot-train"))
TOL = 1e-4  # |a_lerobot - a_actlab| in fp32 on CPU

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.exists(LEROBOT_PYTHON), reason="no lerobot 0.6.1 venv (docs/lerobot.md)"),
]


def lerobot_env(tmp: Path) -> dict[str, str]:
    """The environment for lerobot's processes: not actlab's python path or venv; offline; caches in tmp."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp / "hf"), WANDB_MODE="disabled")
    return env


# A tiny lerobot-train run on the sim data: small ACT, random backbone, no network, 2 steps.
def lerobot_train_cmd(data: Path, out: Path, policy: str) -> list[str]:
    cmd = [
        LEROBOT_TRAIN,
        f"--dataset.root={data}",
        "--dataset.repo_id=local/sim",
        "--dataset.video_backend=pyav",
    ]
    cmd += ["--policy.push_to_hub=false", "--policy.device=cpu", "--wandb.enable=false", "--steps=2"]
    cmd += ["--batch_size=2", "--num_workers=0", "--save_freq=2", "--log_freq=1", f"--output_dir={out}"]
    cmd += [f"--policy.type={policy}", "--policy.pretrained_backbone_weights=null"]
    if policy == "act":
        cmd += ["--policy.dim_model=64", "--policy.n_heads=2", "--policy.dim_feedforward=128"]
        cmd += ["--policy.chunk_size=10", "--policy.n_action_steps=5", "--policy.n_encoder_layers=2"]
        cmd += ["--policy.n_vae_encoder_layers=1", "--policy.latent_dim=8"]
    else:  # diffusion: a small U-Net, few denoising steps
        cmd += ["--policy.down_dims=[32,64]", "--policy.horizon=16", "--policy.n_action_steps=8"]
        cmd += ["--policy.num_inference_steps=4", "--policy.drop_n_last_frames=7"]
    return cmd


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lerobot")


@pytest.fixture(scope="module")
def lerobot_act(work, sim_data) -> dict:
    """lerobot-train ACT for 2 steps, run under `actlab monitor` (the monitor test reads its outputs)."""
    out, csv, summary = work / "train_act", work / "monitor.csv", work / "monitor.json"
    cmd = cli("monitor", "--interval", "0.5", "--out", csv, "--summary-json", summary, "--")
    res = run(
        [*cmd, *lerobot_train_cmd(sim_data, out, "act")],
        env={**lerobot_env(work), "PYTHONPATH": _src()},
        timeout=1200,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return {"dir": out / "checkpoints/000002/pretrained_model", "csv": csv, "summary": summary, "res": res}


@pytest.fixture(scope="module")
def lerobot_diffusion(work, sim_data) -> Path:
    # LeRobot's diffusion policy needs its `diffusion` extra (diffusers), which `lerobot[dataset,training]`
    # does not install: skipped, saying so, in a venv without it
    skip_without_lerobot_extra(LEROBOT_PYTHON, "diffusers", "diffusion", lerobot_env(work))
    out = work / "train_diffusion"
    res = run(lerobot_train_cmd(sim_data, out, "diffusion"), env=lerobot_env(work), timeout=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    return out / "checkpoints/000002/pretrained_model"


def _src() -> str:
    import actlab

    return str(Path(actlab.__file__).parents[1])


def observations(data: Path, policy, n: int = 20) -> list[dict[str, torch.Tensor]]:
    """``n`` single observations spread over the dataset, batch-first as the harness passes them."""
    from actlab.datasets import open_dataset

    ds = open_dataset(data)
    keys = ["observation.state", *policy.camera_keys]
    out = []
    for i in np.linspace(0, len(ds) - 1, n).astype(int):
        item = ds.get_item(int(i), deltas={k: [0] for k in keys})
        out.append({k: torch.as_tensor(np.asarray(item[k]))[None] for k in keys})
    return out


def compare(actlab_policy, lerobot_dir: Path, obs: list[dict], label: str, env: dict) -> dict:
    """Max |a_lerobot - a_actlab| over full chunks and a select_action sequence (queue included)."""
    from actlab.lerobot.bridge import LeRobotBridgePolicy

    chunk_diff, select_diff, scale = 0.0, 0.0, 0.0
    with LeRobotBridgePolicy(lerobot_dir, LEROBOT_PYTHON, env=env) as bridge:
        bridge.start()
        assert bridge.info["missing_weights"] == [] and bridge.info["unexpected_weights"] == []
        for o in obs:
            ours, theirs = actlab_policy.predict_action_chunk(o), bridge.predict_action_chunk(o)
            assert ours.shape == theirs.shape
            chunk_diff = max(chunk_diff, float((ours - theirs).abs().max()))
            scale = max(scale, float(ours.abs().max()))
        bridge.reset()
        actlab_policy.reset()
        for o in obs:
            select_diff = max(
                select_diff, float((actlab_policy.select_action(o) - bridge.select_action(o)).abs().max())
            )
    result = {
        "label": label,
        "observations": len(obs),
        "max_chunk_diff": chunk_diff,
        "max_select_diff": select_diff,
        "max_abs_action": scale,
    }
    print(f"\nPARITY {json.dumps(result)}")
    assert chunk_diff <= TOL and select_diff <= TOL, result
    return result


def test_export_parity_tiny_trained_act(work, sim_data):
    """actlab trains a small resnet18 ACT (decoder_input=zeros) for 3 steps; lerobot runs its export."""
    from actlab.policies import load_policy

    run_dir = work / "actlab_tiny"
    sets = [
        "policy.vision_backbone=resnet18",
        "policy.pretrained_backbone_weights=null",
        "policy.decoder_input=zeros",
    ]
    sets += [
        "data.image_size=null",
        "steps=3",
        "checkpoint.every=3",
        "policy.chunk_size=10",
        "policy.n_action_steps=4",
    ]
    args = ["train", "--preset", "tiny", "--dataset", sim_data, "--out", run_dir, "--device", "cpu"]
    res = run_cli(*args, *[x for s in sets for x in ("--set", s)], timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    bundle = run_dir / "checkpoints/step_0000003"
    res = run_cli("policy", "export", bundle, "--to", "lerobot", "--out", work / "export_tiny", timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    policy = load_policy(bundle)
    compare(
        policy,
        work / "export_tiny",
        observations(sim_data, policy),
        "export tiny-trained ACT",
        lerobot_env(work),
    )


def test_export_parity_default_size_act(work, sim_data):
    """LeRobot's default ACT size (d=512, 4+1 layers, chunk 100, resnet18), random weights: training it is
    too slow on CPU; the architecture is what parity is about."""
    import warnings

    from actlab.datasets import compute_stats, open_dataset
    from actlab.lerobot.export import export_policy
    from actlab.policies import ACTConfig, make_policy

    ds = open_dataset(sim_data)
    cfg = ACTConfig(pretrained_backbone_weights=None, decoder_input="zeros")
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        policy = make_policy(
            cfg, ds.features, compute_stats(ds, **cfg.stats_request()), pretrained=False
        ).eval()
    export_policy(policy, work / "export_default")
    compare(
        policy,
        work / "export_default",
        observations(sim_data, policy),
        "export default-size ACT",
        lerobot_env(work),
    )


def test_export_parity_variants(work, sim_data):
    """pre-norm, GELU, temporal ensembling (n_action_steps=1) and dataset image statistics, random weights."""
    import warnings

    from actlab.datasets import compute_stats, open_dataset
    from actlab.lerobot.export import export_policy
    from actlab.policies import ACTConfig, make_policy

    ds = open_dataset(sim_data)
    cfg = ACTConfig(
        pretrained_backbone_weights=None,
        decoder_input="zeros",
        dim_model=64,
        n_heads=4,
        dim_feedforward=128,
        chunk_size=12,
        n_action_steps=1,
        temporal_ensemble_coeff=0.01,
        pre_norm=True,
        feedforward_activation="gelu",
        image_norm="dataset",
        n_decoder_layers=2,
        cameras=("observation.images.wrist", "observation.images.top"),
    )
    torch.manual_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        policy = make_policy(
            cfg, ds.features, compute_stats(ds, **cfg.stats_request()), pretrained=False
        ).eval()
    with torch.no_grad():  # biases and norm gains off their initial values
        for p in policy.parameters():
            p.add_(0.02 * torch.randn_like(p))
    export_policy(policy, work / "export_variants")
    obs = observations(sim_data, policy)
    compare(
        policy,
        work / "export_variants",
        obs,
        "export pre-norm/gelu/ensembling/dataset-norm ACT",
        lerobot_env(work),
    )


def test_import_parity_and_finetune(work, sim_data, lerobot_act):
    from actlab.policies import load_policy

    bundle = work / "imported_act"
    res = run_cli("policy", "import", lerobot_act["dir"], "--out", bundle, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    policy = load_policy(bundle)
    compare(
        policy,
        lerobot_act["dir"],
        observations(sim_data, policy),
        "import lerobot-trained ACT",
        lerobot_env(work),
    )
    sets = ["steps=2", "checkpoint.every=2", "data.image_size=null", "policy.dropout=0.2"]
    args = [
        "train",
        "--preset",
        "tiny",
        "--dataset",
        sim_data,
        "--init-from",
        bundle,
        "--out",
        work / "finetune",
    ]
    res = run_cli(*args, "--device", "cpu", *[x for s in sets for x in ("--set", s)], timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    tuned = load_policy(work / "finetune/checkpoints/step_0000002")
    assert tuned.config.decoder_input == "zeros" and tuned.config.dim_model == 64


def _episodes(report: dict, name: str) -> list[dict]:
    (ev,) = [e for e in report["checkpoints"] if e["name"] == name]
    return ev["episodes"]


def test_bridge_eval_imported_act_agrees_with_in_process_episode_by_episode(work, lerobot_act):
    """One `actlab eval`: the imported bundle in actlab and the original through the bridge, same seeds."""
    bundle = work / "imported_act"
    if not bundle.exists():
        res = run_cli("policy", "import", lerobot_act["dir"], "--out", bundle, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
    out = work / "eval_act"
    args = ["eval", bundle, "--lerobot-policy", lerobot_act["dir"], "--lerobot-python", LEROBOT_PYTHON]
    args += ["--episodes", "3", "--max-steps", "80", "--workers", "1", "--batch-envs", "1", "--videos", "1"]
    res = run_cli(
        *args, "--out", out, "--json", timeout=1200, env={**lerobot_env(work), "PYTHONPATH": _src()}
    )
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((out / "results.json").read_text())
    ours, theirs = _episodes(report, "imported_act"), _episodes(report, "train_act_step_0000002")
    for a, b in zip(ours, theirs, strict=True):
        assert (a["seed"], a["outcome"], a["steps"]) == (b["seed"], b["outcome"], b["steps"])
        assert abs(a["max_lift_m"] - b["max_lift_m"]) < 1e-3 and abs(a["reward_sum"] - b["reward_sum"]) < 1e-3
    print(
        "\nAGREE",
        json.dumps(
            [
                (a["seed"], a["outcome"], a["steps"], a["max_lift_m"], b["max_lift_m"])
                for a, b in zip(ours, theirs)
            ]
        ),
    )
    assert (out / "videos/train_act_step_0000002/episode_000.mp4").stat().st_size > 0
    assert "never_picked_up" in (out / "results.md").read_text()  # the taxonomy table


def test_bridge_eval_diffusion_with_video(work, lerobot_diffusion):
    out = work / "eval_diffusion"
    args = ["eval", "--lerobot-policy", lerobot_diffusion, "--lerobot-python", LEROBOT_PYTHON]
    args += ["--episodes", "2", "--max-steps", "40", "--videos", "1", "--out", out]
    res = run_cli(*args, timeout=1200, env={**lerobot_env(work), "PYTHONPATH": _src()})
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((out / "results.json").read_text())
    (ev,) = report["checkpoints"]
    assert [e["seed"] for e in ev["episodes"]] == [100_000, 100_001]  # the default held-out seeds
    assert all(e["steps"] == 40 for e in ev["episodes"])
    assert sum(ev["summary"]["outcomes"].values()) == 2
    assert ev["name"] == "train_diffusion_step_0000002" and ev["step"] == 2  # the run and its step, named
    assert (out / "videos/train_diffusion_step_0000002/episode_000.mp4").stat().st_size > 0
    assert "success" in res.stdout  # the printed table


def test_monitor_wraps_lerobot_train(work, lerobot_act):
    """The CSV, the summary and the exit code of `actlab monitor -- lerobot-train ...` (the fixture's run)."""
    from actlab.profiling.monitor import read_monitor_csv

    columns, rows = read_monitor_csv(lerobot_act["csv"])
    assert rows and "proc_cpu_pct" in columns and "proc_rss_mib" in columns
    summary = json.loads(Path(lerobot_act["summary"]).read_text())
    assert summary["exit_code"] == 0
    # a lerobot-train that fails: its exit code comes back through the monitor
    cmd = cli("monitor", "--out", work / "bad.csv", "--", LEROBOT_TRAIN, "--policy.type=no_such_policy")
    res = run(cmd, env={**lerobot_env(work), "PYTHONPATH": _src()}, timeout=600)
    assert res.returncode not in (0, None)
    assert (work / "bad.csv").exists()
    print(f"\nMONITOR rows={len(rows)} bad_exit={res.returncode}")
