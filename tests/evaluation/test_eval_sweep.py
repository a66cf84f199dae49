"""A sweep over the 3 checkpoints of a real tiny run (sim demonstrations -> actlab train -> actlab eval):
tables, JSON, the success-per-step plot, rollout videos and a whiskers video with its paths drawn."""

from __future__ import annotations

import json

import numpy as np
import pytest

from actlab.cli import main
from actlab.errors import ActlabError
from actlab.evaluation import EnvSpec, EvalConfig, evaluate, resolve_paths
from actlab.evaluation.harness import VIDEO_HOLD_S
from actlab.evaluation.seeds import DEFAULT_SEED
from actlab.evaluation.video import read_video

pytest.importorskip("mujoco")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """4 scripted demonstrations at 32 px, then `actlab train --preset tiny` for 30 steps with a
    checkpoint every 10 steps (all three kept)."""
    from actlab.sim import RecordConfig, record_dataset

    root = tmp_path_factory.mktemp("tiny-run")
    data = root / "data"
    record_dataset(data, RecordConfig(episodes=4, image_size=32, workers=0), progress=False)
    run = root / "run"
    args = ["train", "--preset", "tiny", "--dataset", data, "--out", run, "--set", "steps=30"]
    args += ["--set", "checkpoint.every=10", "--set", "checkpoint.keep_last=3", "--set", "log.plot=false"]
    # In this process (a process of its own adds only its start: ~7 s of imports on 2 cores).
    assert main([str(a) for a in args]) == 0
    return run


def test_sweep_writes_tables_plot_videos_and_whiskers(tiny_run, tmp_path, capsys):
    out = tmp_path / "eval"
    args = [str(tiny_run), "--episodes", "2", "--max-steps", "20", "--videos", "1", "--whiskers"]
    args += ["--workers", "1", "--threads", "1", "--out", str(out), "--json"]
    assert main(["eval", *args]) == 0
    report = json.loads(capsys.readouterr().out)

    ckpts = report["checkpoints"]
    assert [c["step"] for c in ckpts] == [10, 20, 30]
    assert [c["name"] for c in ckpts] == ["step_0000010", "step_0000020", "step_0000030"]
    for c in ckpts:  # identical seeded episodes for every checkpoint
        assert [e["seed"] for e in c["episodes"]] == [DEFAULT_SEED, DEFAULT_SEED + 1]
        s = c["summary"]
        assert s["episodes"] == 2 and 0.0 <= s["ci_low"] <= s["success_rate"] <= s["ci_high"] <= 1.0
        assert sum(s["outcomes"].values()) == 2
        assert c["episodes"][0]["video"] == f"videos/{c['name']}/episode_000.mp4"
        assert (out / c["episodes"][0]["video"]).is_file() and c["episodes"][1]["video"] is None

    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["checkpoints"] == ckpts
    md = (out / "results.md").read_text()
    assert md.count("| step_00000") == 3 and md.count("## step_00000") == 3  # summary rows, sections
    assert "dropped_during_transport" in md

    from PIL import Image

    plot = Image.open(out / report["files"]["plot"])
    assert plot.format == "PNG" and plot.size[0] > 400

    assert report["whiskers"]["path"] == report["files"]["whiskers"]
    assert (out / report["files"]["whiskers_still"]).is_file()
    frames = read_video(out / report["files"]["whiskers"])
    hold = round(VIDEO_HOLD_S * 30)  # the last frame, held with the outcome on it (the sim runs at 30 fps)
    assert report["whiskers"]["steps"] == 20 and len(frames) == 21 + hold
    last = frames[-1].astype(int)  # (H, W, 3): by the end both paths have been drawn
    r, g, b = last[..., 0], last[..., 1], last[..., 2]
    green = (g > 190) & (r < 140) & (b < 140)  # predicted path; nothing in the scene is green
    magenta = (r > 190) & (b > 190) & (g < 110)  # actual path; nothing in the scene is magenta
    assert green.sum() > 20 and magenta.sum() > 20
    first = frames[0].astype(int)
    assert ((first[..., 1] > 190) & (first[..., 0] < 140) & (first[..., 2] < 140)).sum() > 0
    rollout = read_video(out / ckpts[0]["episodes"][0]["video"])
    assert len(rollout) == ckpts[0]["episodes"][0]["steps"] + 1 + hold


def test_existing_output_is_refused_and_left_alone(tiny_run, tmp_path):
    out = tmp_path / "eval"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    bundle = tiny_run / "checkpoints" / "step_0000010"
    code = main(
        ["eval", str(bundle), "--episodes", "1", "--max-steps", "5", "--workers", "1", "--out", str(out)]
    )
    assert code == 2
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_resolve_paths(tiny_run, tmp_path):
    sources = resolve_paths([tiny_run])
    assert [s.step for s in sources] == [10, 20, 30]
    single = resolve_paths([tiny_run / "checkpoints" / "step_0000020"])
    assert [(s.name, s.step) for s in single] == [("step_0000020", 20)]
    with pytest.raises(ActlabError, match="no checkpoint found"):
        resolve_paths([tmp_path])
    with pytest.raises(ActlabError, match="does not exist"):
        resolve_paths([tmp_path / "nope"])


class CallLog:
    """Wraps a policy and records the order of reset() and select_action() calls."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.features = policy.features
        self.camera_keys = policy.camera_keys
        self.image_shapes = policy.image_shapes
        self.calls: list[str] = []

    def reset(self) -> None:
        self.calls.append("reset")
        self.policy.reset()

    def select_action(self, obs):
        self.calls.append("act")
        return self.policy.select_action(obs)


def test_act_bundle_is_reset_before_every_episode_and_stale_queues_cannot_leak(tiny_run):
    from actlab.policies import load_policy

    bundle = tiny_run / "checkpoints" / "step_0000030"
    spec = EnvSpec("so101_pick_place", max_steps=13)  # 13 = 8 + 5: three actions left in the queue
    log = CallLog(load_policy(bundle))
    ev = evaluate(log, spec, EvalConfig(episodes=3, workers=1, batch_envs=1, threads_per_worker=1))
    assert log.calls == (["reset"] + ["act"] * 13) * 3
    assert all(e.steps == 13 for e in ev.episodes)
    # Episode 2 within a run of three equals episode 2 run alone: nothing leaked from episodes 0-1.
    alone = evaluate(
        load_policy(bundle),
        spec,
        EvalConfig(episodes=1, seed=DEFAULT_SEED + 2, workers=1, batch_envs=1, threads_per_worker=1),
    )
    assert alone.episodes[0].seed == ev.episodes[2].seed == DEFAULT_SEED + 2
    assert alone.episodes[0].max_lift_m == ev.episodes[2].max_lift_m
    # Batched lockstep: one reset per group, then one batched call per step.
    log = CallLog(load_policy(bundle))
    evaluate(log, spec, EvalConfig(episodes=4, workers=1, batch_envs=2, threads_per_worker=1))
    assert log.calls == (["reset"] + ["act"] * 13) * 2


def test_policy_images_follow_the_bundle(tiny_run):
    from actlab.evaluation.policy_io import bundle_inputs
    from actlab.evaluation.sources import spec_for_inputs

    inputs = bundle_inputs(tiny_run / "checkpoints" / "step_0000010")
    assert inputs.image_hw == {"observation.images.top": (32, 32), "observation.images.wrist": (32, 32)}
    spec = spec_for_inputs(EnvSpec("so101_pick_place"), inputs)
    assert spec.image_size == 32 and spec.cameras == ("top", "wrist")
    # A user-chosen render size different from the trained one is resized to what the policy expects.
    ev = evaluate(
        str(tiny_run / "checkpoints" / "step_0000010"),
        EnvSpec("so101_pick_place", image_size=48, max_steps=3),
        EvalConfig(episodes=1, workers=1),
    )
    assert ev.episodes[0].steps == 3
    assert np.isfinite(ev.summary.mean_reward)


def test_training_scenes_are_refused_and_only_evaluated_on_request(tiny_run, tmp_path, capsys):
    """The recorder writes its episodes' seeds, training copies them into every bundle, and evaluation
    refuses seeds that meet them: the demonstrations' own scenes are not a held-out measurement."""
    data_info = json.loads((tiny_run.parent / "data" / "meta" / "info.json").read_text())
    assert data_info["actlab_sim"] == {"task": "so101_pick_place", "episode_seeds": [0, 1, 2, 3]}
    bundle = tiny_run / "checkpoints" / "step_0000010"
    meta = json.loads((bundle / "actlab.json").read_text())
    assert meta["extra"]["train"]["dataset"]["sim"]["episode_seeds"] == [0, 1, 2, 3]

    base = ["eval", str(tiny_run), "--episodes", "2", "--max-steps", "3", "--workers", "1"]
    out = tmp_path / "eval"
    assert main([*base, "--seed", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "scenes the policy was trained on" in err and "--seed" in err and "2 of 2 are training" in err
    assert "--allow-training-seeds" in err and not out.exists()  # refused before any episode ran

    # On request it runs, says so on stderr, and every row and record counts the training scenes.
    assert main([*base, "--seed", "3", "--allow-training-seeds", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert [c["training_scene_episodes"] for c in report["checkpoints"]] == [1, 1, 1]  # seed 3 of 3..4
    assert captured.err.count("start from scenes it was trained on") == 3
    assert main([*base, "--seed", "3", "--allow-training-seeds", "--markdown"]) == 0
    assert capsys.readouterr().out.count("(1 training scenes)") == 3

    # A bundle from before seeds were recorded in it is checked against the dataset it names.
    old = tmp_path / "old_bundle"
    import shutil

    shutil.copytree(bundle, old)
    del meta["extra"]["train"]["dataset"]["sim"]
    (old / "actlab.json").write_text(json.dumps(meta))
    short = EnvSpec("so101_pick_place", max_steps=3)
    with pytest.raises(ActlabError, match="trained on"):
        evaluate(str(old), short, EvalConfig(episodes=1, seed=0, workers=1))
    # The defaults never meet the recorder's seeds.
    assert EvalConfig().seed == DEFAULT_SEED
    ev = evaluate(str(old), short, EvalConfig(episodes=1, workers=1))
    assert ev.training_scenes == 0 and ev.episodes[0].seed == DEFAULT_SEED
