"""actlab's LeRobot plugin inside real lerobot 0.6.1 (docs/lerobot.md "The plugin"): action agreement of
LeRobot's loading path with actlab's for every exported type, the RTC call shape, lerobot-rollout on the
simulated SO-101 (sync and RTC), lerobot-train of actlab_act_relative and its import back.

All slow; skipped without the lerobot venv ($ACTLAB_LEROBOT_PYTHON) or without the plugin installed in it
(`pip install . ./integrations/lerobot_policy_actlab`, run from the repository root with that venv's pip:
the plugin depends on actlab). The ViT case is skipped, saying why, when that venv lacks transformers (the
plugin's `[vit]` extra). lerobot's processes run offline with this checkout's `src` and plugin folder first
on PYTHONPATH, so they test this code (the installed distribution makes lerobot find the plugin);
ACTLAB_LEROBOT_INSTALLED=1 runs them on what is installed in that venv instead (the check of an install).
Nothing is pickled: the observations and actions cross as safetensors files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from procs import lerobot_env, run, run_cli
from tiny_vit import TINY_VIT

LEROBOT_PYTHON = os.environ.get("ACTLAB_LEROBOT_PYTHON", "/work/lerobot-venv/bin/python")
BIN = Path(LEROBOT_PYTHON).parent
REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("plugin_probe.py")
TOL = 1e-4  # |a_lerobot - a_actlab| in fp32 on CPU


def _lerobot_has(distribution: str) -> bool:
    """Whether the lerobot venv has ``distribution`` installed (asked of its own python)."""
    if not os.path.exists(LEROBOT_PYTHON):
        return False
    code = f"import importlib.metadata as m; m.distribution({distribution!r})"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([LEROBOT_PYTHON, "-c", code], env=env, timeout=120).returncode == 0


def _plugin_installed() -> bool:
    return _lerobot_has("lerobot_policy_actlab")


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _needs_plugin() -> None:
    # a fixture, not a skipif: the check starts lerobot's python, which the default suite must not pay for
    if not _plugin_installed():
        pytest.skip("no lerobot venv with the plugin (pip install . ./integrations/lerobot_policy_actlab)")


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("plugin")


def _base(**overrides):
    from actlab.policies import ACTConfig

    fields = dict(
        vision_backbone="cnn_small",
        pretrained_backbone_weights=None,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        chunk_size=10,
        n_action_steps=4,
        n_encoder_layers=1,
        n_vae_encoder_layers=1,
        latent_dim=8,
        cameras=("observation.images.top", "observation.images.wrist"),
    )
    return ACTConfig(**{**fields, **overrides})


def _relative(**overrides):
    from actlab.policies import ACTRelativeConfig

    return ACTRelativeConfig(**{**dataclasses.asdict(_base()), "type": "act_relative", **overrides})


def _policy(cfg, data: Path):
    from actlab.datasets import compute_stats, open_dataset
    from actlab.policies import make_policy

    ds = open_dataset(data)
    torch.manual_seed(0)
    policy = make_policy(cfg, ds.features, compute_stats(ds, **cfg.stats_request(), use_cache=False))
    with torch.no_grad():  # move every weight off its initial value (biases start at 0)
        for p in policy.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return policy.eval()


def _observations(data: Path, policy, n: int = 12) -> list[dict[str, torch.Tensor]]:
    from actlab.datasets import open_dataset

    ds = open_dataset(data)
    keys = ["observation.state", *policy.camera_keys]
    out = []
    for i in np.linspace(0, len(ds) - 1, n).astype(int):
        item = ds.get_item(int(i), deltas={k: [0] for k in keys})
        out.append({k: torch.as_tensor(np.asarray(item[k])) for k in keys})  # unbatched
    return out


def _probe(export: Path, obs: list[dict], prefixes: list | None, work: Path, name: str) -> dict:
    tensors = {f"obs/{i}/{k}": v.contiguous() for i, o in enumerate(obs) for k, v in o.items()}
    for i, p in enumerate(prefixes or []):
        tensors[f"prefix/{i}"] = p.contiguous()
    save_file(tensors, str(work / f"{name}_obs.safetensors"))
    out = work / f"{name}_out.safetensors"
    cmd = [LEROBOT_PYTHON, str(PROBE), str(export), str(work / f"{name}_obs.safetensors"), str(out)]
    res = run(cmd, env=lerobot_env(work), timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return load_file(str(out))


# every exported type: the demo's kind (small CNN, learned queries, camera fusion `tokens`, the default
# of every case that names no other), zeros, ResNet-18 and a tiny random ViT (CLIP family, built offline
# from its config; transformers is not in lerobot 0.6.1's install, the plugin's `[vit]` extra adds it)
# with queries, the other fusion modes, 3 observation steps, temporal ensembling, act_relative with a
# prefix (through LeRobot's RTC call shape) and without (rtc_max_delay 0: no prefix tokens)
CASES = {
    "cnn_small_queries": lambda: _base(decoder_input="queries"),
    "cnn_small_zeros_prenorm": lambda: _base(decoder_input="zeros", pre_norm=True),
    "fusion_mean": lambda: _base(camera_fusion="mean"),
    "fusion_concat_mlp": lambda: _base(camera_fusion="concat_mlp"),
    "fusion_gated": lambda: _base(camera_fusion="gated"),
    "resnet18_queries": lambda: _base(vision_backbone="resnet18", decoder_input="queries"),
    "clip_vit_queries": lambda: _base(vision_backbone="clip_vit", vit_config=dict(TINY_VIT)),
    "n_obs_steps_3": lambda: _base(n_obs_steps=3),
    "ensembling": lambda: _base(temporal_ensemble_coeff=0.01, n_action_steps=1),
    "act_relative_rtc": lambda: _relative(rtc_max_delay=4),
    "act_relative_no_prefix": lambda: _relative(rtc_max_delay=0),
}
NEEDS = {"clip_vit_queries": "transformers"}  # what a case needs in the lerobot venv beyond the plugin


@pytest.mark.parametrize("case", sorted(CASES))
def test_lerobot_loading_path_gives_actlabs_actions(work, sim_data, case):
    from actlab.lerobot.export import export_policy

    need = NEEDS.get(case)
    if need and not _lerobot_has(need):
        pytest.skip(
            f"{case} needs {need} in the lerobot venv "
            "(pip install . './integrations/lerobot_policy_actlab[vit]' with that venv's pip)"
        )
    policy = _policy(CASES[case](), sim_data)
    export = work / f"export_{case}"
    summary = export_policy(policy, export, lerobot_type="plugin")
    obs = _observations(sim_data, policy)
    batched = [{k: v[None] for k, v in o.items()} for o in obs]
    prefixes = None
    if policy.config.type == "act_relative" and policy.config.rtc_max_delay > 0:
        prefixes = [policy.predict_action_chunk(b)[0, : 1 + i % 4] for i, b in enumerate(batched)]
    theirs = _probe(export, obs, prefixes, work, case)
    n_params = sum(p.numel() for p in policy.parameters())
    assert int(theirs["n_parameters"][0]) == summary["n_parameters"] == n_params
    diffs = {"chunk": 0.0, "select": 0.0, "rtc": 0.0}

    def diff(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).abs().max())

    for i, b in enumerate(batched):
        diffs["chunk"] = max(diffs["chunk"], diff(policy.predict_action_chunk(b)[0], theirs[f"chunk/{i}"]))
        if prefixes is not None:
            ours = policy.predict_action_chunk(b, prefix=prefixes[i][None])[0]
            diffs["rtc"] = max(diffs["rtc"], diff(ours, theirs[f"rtc/{i}"]))
            assert torch.allclose(theirs[f"rtc/{i}"][: len(prefixes[i])], prefixes[i], atol=TOL)
    policy.reset()
    for i, b in enumerate(batched):
        diffs["select"] = max(diffs["select"], diff(policy.select_action(b)[0], theirs[f"select/{i}"]))
    print(f"\nplugin parity {case}: " + ", ".join(f"max {k} diff {v:.2e}" for k, v in diffs.items()))
    assert max(diffs.values()) <= TOL, diffs


def _rollout(work: Path, export: Path, name: str, extra: list[str], duration: int = 40):
    out = work / f"{name}_sim"  # the sim robot's output directory (episodes.jsonl, episodes.log)
    cmd = [
        str(BIN / "lerobot-rollout"),
        "--strategy.type=base",
        f"--policy.path={export}",
        "--robot.type=actlab_so101_sim",
        "--robot.image_size=64",
        "--robot.max_steps=40",
        f"--robot.output_dir={out}",
        f"--duration={duration}",
        "--return_to_initial_position=false",
        "--task=pick the cube and place it in the bowl",
        *extra,
    ]
    res = run(cmd, env=lerobot_env(work), timeout=600, cwd=work)
    assert res.returncode == 0, res.stderr[-3000:]
    from actlab.lerobot.runtime import EPISODE_PREFIX, read_episode_log

    episodes = read_episode_log(out / "episodes.jsonl")
    assert episodes and all(e["outcome"] for e in episodes)
    # One line per episode on stderr with the sim robot's own prefix (LeRobot's FPS warnings buried the
    # logger's), the same lines in episodes.log, and no log in the current directory.
    # (the robot's first line, "episode logs -> DIR", starts with the same words: not an episode)
    said = [
        line
        for line in res.stderr.splitlines()
        if re.match(rf"{re.escape(EPISODE_PREFIX)} episode \d+ ", line)
    ]
    assert len(said) == len(episodes), res.stderr[-3000:]
    assert (out / "episodes.log").read_text().splitlines()[: len(said)] == said
    assert not list(work.glob("*.jsonl")) and not (work / "outputs").exists()
    assert "episodes succeeded" in res.stdout
    return episodes, res


def test_lerobot_rollout_runs_the_sim_robot_sync_and_rtc(work, sim_data):
    from actlab.lerobot.export import export_policy

    export = work / "rollout_rel"
    export_policy(_policy(_relative(rtc_max_delay=4), sim_data), export)
    episodes, _ = _rollout(work, export, "sync", [])
    assert [e["seed"] for e in episodes] == list(range(100_000, 100_000 + len(episodes)))
    # a chunk every n_action_steps (docs/lerobot.md: queue_threshold = chunk_size - n_action_steps)
    episodes, res = _rollout(work, export, "rtc", ["--inference.type=rtc", "--inference.queue_threshold=6"])
    assert "RTC inference thread started" in res.stderr
    assert "RTC inference error" not in res.stderr


def test_lerobot_train_actlab_act_relative_then_import_gives_the_same_actions(work, sim_data):
    out = work / "train_rel"
    actlab_config = json.dumps(
        {"vision_backbone": "cnn_small", "pretrained_backbone_weights": None, "dim_model": 32, "n_heads": 2,
         "dim_feedforward": 64, "chunk_size": 10, "n_action_steps": 4, "n_encoder_layers": 1,
         "n_vae_encoder_layers": 1, "latent_dim": 8, "rtc_max_delay": 4}
    )  # fmt: skip
    cmd = [
        str(BIN / "lerobot-train"),
        f"--dataset.root={sim_data}",
        "--dataset.repo_id=local/sim",
        "--dataset.video_backend=pyav",
        "--policy.type=actlab_act_relative",
        f"--policy.actlab_config={actlab_config}",
        "--policy.push_to_hub=false",
        "--policy.device=cpu",
        "--wandb.enable=false",
        "--steps=20",
        "--batch_size=4",
        "--num_workers=0",
        "--save_freq=20",
        "--log_freq=10",
        f"--output_dir={out}",
    ]
    res = run(cmd, env=lerobot_env(work), timeout=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    ckpt = out / "checkpoints/000020/pretrained_model"
    bundle = work / "train_rel_bundle"
    res = run_cli("policy", "import", ckpt, "--out", bundle, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    from actlab.policies import load_policy

    policy = load_policy(bundle)
    assert policy.config.type == "act_relative" and policy.config.dim_model == 32
    obs = _observations(sim_data, policy, n=4)
    theirs = _probe(ckpt, obs, None, work, "train_rel")
    ours = [policy.predict_action_chunk({k: v[None] for k, v in o.items()})[0] for o in obs]
    diff = max(float((a - theirs[f"chunk/{i}"]).abs().max()) for i, a in enumerate(ours))
    print(f"\nlerobot-train actlab_act_relative -> actlab policy import: max chunk diff {diff:.2e}")
    assert diff <= TOL


def test_lerobot_train_of_the_plugin_type_resumes_and_fine_tunes(work, sim_data):
    """lt1 (docs/faults.md, "Sixteenth fault run"): LeRobot 0.6.1's train script overrides the steps named
    normalizer_processor / unnormalizer_processor of every pretrained pipeline it loads, so
    `lerobot-train --resume=true` of a plugin-type run, and a fine-tune from a plugin export with
    `--policy.path`, ended in "KeyError: Override keys ['normalizer_processor'] do not match any step".
    The plugin's pipelines (and the export's) now have those steps, passing through (IDENTITY). And
    chunk_size set only in --policy.actlab_config left config.json's LeRobot fields at their defaults
    (30 / 10), which the plugin's loader refuses as an edit: they now state the trained values."""
    out = work / "train_resume"
    actlab_config = json.dumps(
        {"vision_backbone": "cnn_small", "pretrained_backbone_weights": None, "dim_model": 32, "n_heads": 2,
         "dim_feedforward": 64, "chunk_size": 10, "n_action_steps": 4, "n_encoder_layers": 1,
         "n_vae_encoder_layers": 1, "latent_dim": 8}
    )  # fmt: skip
    common = ["--policy.push_to_hub=false", "--policy.device=cpu", "--wandb.enable=false", "--batch_size=2"]
    common += ["--num_workers=0", "--log_freq=2"]
    data = [f"--dataset.root={sim_data}", "--dataset.repo_id=local/sim", "--dataset.video_backend=pyav"]
    first = [*data, "--policy.type=actlab_act", f"--policy.actlab_config={actlab_config}", *common]
    res = run([str(BIN / "lerobot-train"), *first, "--steps=4", "--save_freq=2", f"--output_dir={out}"],
              env=lerobot_env(work), timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    cfg = json.loads((out / "checkpoints/000004/pretrained_model/config.json").read_text())
    assert (
        (cfg["chunk_size"], cfg["n_action_steps"])
        == (10, 4)
        == tuple(cfg["actlab_config"][k] for k in ("chunk_size", "n_action_steps"))
    )
    train_config = out / "checkpoints/last/pretrained_model/train_config.json"
    resume = [f"--config_path={train_config}", "--resume=true", "--steps=6"]
    res = run([str(BIN / "lerobot-train"), *resume], env=lerobot_env(work), timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Override keys" not in res.stderr and (out / "checkpoints/000006/pretrained_model").is_dir()
    # a fine-tune from the plugin export of the resumed run
    bundle, export = work / "resumed_bundle", work / "resumed_export"
    res = run_cli(
        "policy", "import", out / "checkpoints/000006/pretrained_model", "--out", bundle, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    res = run_cli("policy", "export", bundle, "--to", "lerobot", "--out", export, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    tune = [*data, f"--policy.path={export}", *common, "--steps=2", "--save_freq=2"]
    res = run([str(BIN / "lerobot-train"), *tune, f"--output_dir={work / 'fine_tune'}"],
              env=lerobot_env(work), timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert (work / "fine_tune/checkpoints/000002/pretrained_model/actlab_bundle").is_dir()
    # the LeRobot field and actlab_config set to two values: refused, both named
    clash = [*first, "--policy.chunk_size=20", "--steps=2", f"--output_dir={work / 'clash'}"]
    res = run([str(BIN / "lerobot-train"), *clash], env=lerobot_env(work), timeout=600)
    assert res.returncode != 0 and "--policy.chunk_size and --policy.actlab_config disagree" in res.stderr
    assert "--policy.chunk_size=20, actlab_config chunk_size=10" in res.stderr
    # a normalization mode other than IDENTITY would normalize twice in a fine-tune: refused at parse time
    nm = [
        *first,
        '--policy.normalization_mapping={"VISUAL": "MEAN_STD"}',
        "--steps=2",
        f"--output_dir={work / 'nm'}",
    ]
    res = run([str(BIN / "lerobot-train"), *nm], env=lerobot_env(work), timeout=600)
    assert res.returncode != 0 and "--policy.normalization_mapping" in res.stderr and "IDENTITY" in res.stderr
