"""Faults of our tenth planted-fault run (docs/faults.md "Tenth fault run"), planted for real: the real
parser, real files, real bundles and datasets.

- a ``--set`` the resolved config ignores (``policy.kl_weight`` with ``policy.use_vae=false``,
  ``env.reward_model`` without the classifier reward, ``residual.*`` without a base, ...) was accepted
  without a word by ``train``, ``demo`` and ``rl train``; ``obs.cameras`` with ``obs.encoder=none`` ended in
  "evaluate on the task the policy was trained for";
- ``eval --perturb`` ran a perturbation named twice (or a level given twice) as panels of their own, and
  its record did not say how chunks were executed (``--execution async --latency 2``);
- ``eval compare`` said "found: neither" / "nothing there" for a results.json that is a FIFO, a device,
  a directory or a broken link;
- a frame's ``task_index`` naming no task (or another episode's) passed the doctor, curate and training;
- ``policy import`` of a plugin export without its ``actlab_bundle/`` said "check the path";
- ``rl reward-model`` with fewer episodes than its three splits need ended in a torch.cat traceback
  after every rollout; a demo dataset shorter than ``episodes`` / ``sac.demo_episodes`` was read whole
  without a word (and the reward model recorded the number asked).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from actlab.cli import main
from actlab.errors import ActlabError

TRAIN_INERT = [
    (["policy.use_vae=false", "policy.kl_weight=50"], "policy.kl_weight", "policy.use_vae=false"),
    (["policy.correction_hidden_dim=64"], "policy.correction_hidden_dim", "policy.correction_head=false"),
    (["overfit.loss_threshold=0.5"], "overfit.loss_threshold", "overfit.samples=0"),
    (
        ["schedule.kind=constant", "schedule.min_lr_ratio=0.5"],
        "schedule.min_lr_ratio",
        "schedule.kind=constant",
    ),
    (["log.wandb_project=foo"], "log.wandb_project", "log.wandb=false"),
]
RL_INERT = [
    (["env.reward_model=/nonexistent"], "env.reward_model", "env.reward=shaped"),
    (["sac.demo_episodes=5"], "sac.demo_episodes", "no demos"),
    (["residual.alpha=0.5"], "residual.alpha", "no base"),
    (["obs.frame_stack=4"], "obs.frame_stack", "obs.encoder=none"),
    (['obs.cameras=["top"]'], "obs.cameras", "obs.encoder=none"),
    (["obs.vision_backbone=clip_vit"], "obs.vision_backbone", "obs.encoder=none"),
]


def _sets(items: list[str]) -> list[str]:
    return [a for item in items for a in ("--set", item)]


# ------------------------------------------------------------------------------- settings without effect
@pytest.mark.timeout(60)
@pytest.mark.parametrize("items,key,state", TRAIN_INERT, ids=[k for _, k, _ in TRAIN_INERT])
def test_a_train_setting_that_has_no_effect_is_refused(tmp_path, tiny_dataset, capsys, items, key, state):
    """SILENT before: each trained, exit 0, the setting ignored (t01-t06 of the run)."""
    out = tmp_path / "run"
    args = [
        "train",
        "--preset",
        "tiny",
        "--dataset",
        str(tiny_dataset),
        "--out",
        str(out),
        "--set",
        "steps=1",
    ]
    assert main([*args, *_sets(items)]) == 2
    err = capsys.readouterr().err
    assert f"--set {key} has no effect with {state}" in err and "nothing was run" in err, err
    assert not out.exists()


@pytest.mark.timeout(60)
def test_a_setting_that_takes_effect_is_not_refused(tmp_path, tiny_dataset, capsys):
    """The same keys where they act: --overfit sets overfit.samples after --set (checked after it), a
    cosine schedule's floor, a VAE's weight; a preset's own inert value is not the user's doing."""
    args = ["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--print-config"]
    assert main([*args, "--overfit", "4", "--set", "overfit.loss_threshold=0.5"]) == 0
    assert main([*args, "--set", "schedule.kind=cosine", "--set", "schedule.min_lr_ratio=0.5"]) == 0
    assert main([*args, "--set", "policy.kl_weight=5"]) == 0
    assert main([*args, "--set", "policy.use_vae=false"]) == 0  # kl_weight keeps the preset's value
    rl = ["rl", "train", "--preset", "smoke", "--print-config"]
    assert (
        main([*rl, "--set", "obs.encoder=cnn", "--set", 'obs.cameras=["top"]', "--set", "obs.frame_stack=2"])
        == 0
    )
    capsys.readouterr()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("items,key,state", RL_INERT, ids=[k for _, k, _ in RL_INERT])
def test_an_rl_setting_that_has_no_effect_is_refused(tmp_path, capsys, items, key, state):
    """SILENT before: `rl train --preset smoke` trained, exit 0, with each of these ignored (l02, l04,
    l05, l10, l11); obs.cameras with obs.encoder=none was UNCLEAR ("evaluate on the task ...", l09)."""
    out = tmp_path / "rl"
    assert main(["rl", "train", "--preset", "smoke", "--out", str(out), *_sets(items)]) == 2
    err = capsys.readouterr().err
    assert f"--set {key} has no effect with {state}" in err and "nothing was run" in err, err
    assert not out.exists()


@pytest.mark.timeout(60)
def test_the_demo_refuses_a_setting_without_effect_before_recording(tmp_path, capsys):
    """SILENT before: `demo --set policy.use_vae=false --set policy.kl_weight=50` recorded, trained and
    evaluated (72 s), the weight ignored."""
    demo = [
        "demo",
        "--out",
        str(tmp_path / "demo"),
        "--episodes",
        "2",
        "--preset",
        "tiny",
        "--image-size",
        "16",
    ]
    assert main([*demo, "--set", "policy.use_vae=false", "--set", "policy.kl_weight=50"]) == 2
    assert "--set policy.kl_weight has no effect" in capsys.readouterr().err
    assert not (tmp_path / "demo" / "data").exists()


# ------------------------------------------------------------------------------------- eval --perturb
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "perturbs,said",
    [
        (["lighting", "lighting=0.5"], "--perturb lighting is given 2 times"),
        # (one rule for every comma list since the 25th run: "a comma list names one item twice")
        (["lighting=0.5,0.5"], "field:    --perturb lighting"),
    ],
)
def test_a_perturbation_named_twice_is_refused(tmp_path, bundle, capsys, perturbs, said):
    """SILENT before: `--perturb lighting --perturb lighting=0.5` evaluated lighting=0.5 twice, as a second
    panel of the table and figure (e17)."""
    args = ["eval", str(bundle), "--episodes", "1", "--max-steps", "2", "--workers", "1"]
    assert main([*args, *[a for p in perturbs for a in ("--perturb", p)], "--out", str(tmp_path / "p")]) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


@pytest.mark.timeout(90)
def test_a_perturb_sweep_records_how_its_chunks_were_executed(tmp_path, bundle, capsys):
    """SILENT before: `--perturb lighting=0.5 --execution async --latency 2` ran at delay 2, but
    perturb.json, perturb.md and the command's output read as a sync sweep (e18)."""
    out = tmp_path / "p"
    args = ["eval", str(bundle), "--episodes", "1", "--max-steps", "3", "--workers", "1", "--out", str(out)]
    assert main([*args, "--perturb", "lighting=0.5", "--execution", "async", "--latency", "2"]) == 0
    said = "execution async at delay 2 step(s)"
    assert said in capsys.readouterr().out
    record = json.loads((out / "perturb.json").read_text())
    assert record["execution"]["mode"] == "async" and record["execution"]["latency"] == 2
    assert said in (out / "perturb.md").read_text()


# ------------------------------------------------------------------------------------------ eval compare
@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["a FIFO", "a directory", "a symbolic link to nothing"])
def test_an_evaluation_record_that_is_no_file_is_named(tmp_path, capsys, kind):
    """UNCLEAR before: a results.json that is a FIFO, a directory (or a character device) was "not an
    evaluation directory ... found: neither"; given directly, "evaluation not found ... nothing there".
    A FIFO is never opened (reading it would wait for a writer)."""
    ev = tmp_path / "ev"
    ev.mkdir()
    record = ev / "results.json"
    if kind == "a FIFO":
        os.mkfifo(record)
    elif kind == "a directory":
        record.mkdir()
    else:
        record.symlink_to(tmp_path / "gone.json")
    for given in (ev, record):
        assert main(["eval", "compare", str(given), str(tmp_path / "other")]) == 2
        err = capsys.readouterr().err
        assert f"the evaluation record is {kind}, not a file" in err and str(record) in err, err


# --------------------------------------------------------------------------------------- dataset frames
def _edit_task_index(dataset, row: int, value: int, second_task: bool) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (dataset / "meta" / "actlab_checksums.json").unlink()  # as another tool's dataset: no checksum record
    data = next((dataset / "data").rglob("*.parquet"))
    table = pq.read_table(data)
    i = table.schema.get_field_index("task_index")
    values = table.column("task_index").to_pylist()
    values[row] = value
    pq.write_table(
        table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type)), data
    )
    if second_task:
        tasks = pq.read_table(dataset / "meta" / "tasks.parquet").to_pylist()
        tasks.append({"task_index": 1, "task": "another task"})
        pq.write_table(pa.Table.from_pylist(tasks), dataset / "meta" / "tasks.parquet")
        info = json.loads((dataset / "meta" / "info.json").read_text())
        info["total_tasks"] = 2
        (dataset / "meta" / "info.json").write_text(json.dumps(info))


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "value,second_task,said",
    [(7, False, "have a task_index that is no row of tasks.parquet"), (1, True, "name another task")],
)
def test_a_frame_whose_task_index_names_no_task_of_its_episode_is_found(
    tmp_path, tiny_dataset, capsys, value, second_task, said
):
    """SILENT before: task_index 7 in one frame (tasks.parquet holds 1 task): doctor 0 problems, curate and
    train exit 0 (d08, d16, d17). Lerobot looks the task up per frame and fails there."""
    from actlab.datasets import open_dataset
    from actlab.datasets.doctor import diagnose

    ds = tmp_path / "ds"
    shutil.copytree(tiny_dataset, ds)
    _edit_task_index(ds, 3, value, second_task)
    problems = [p for p in diagnose(ds, video_samples=0) if p.check == "task_index"]
    assert len(problems) == 1 and said in problems[0].problem and list(problems[0].episodes) == [0]
    with pytest.raises(ActlabError, match="task_index"):  # the reader of every training
        open_dataset(ds).column("action")
    assert main(["data", "doctor", str(tiny_dataset)]) == 0  # the unedited dataset passes
    capsys.readouterr()


# ------------------------------------------------------------------------------------------- policy import
@pytest.mark.timeout(60)
def test_a_plugin_export_without_its_bundle_is_named(tmp_path, bundle, capsys):
    """UNCLEAR before: `policy import EXPORT` whose actlab_bundle/ is gone said "policy bundle directory
    not found", fix "check the path" (i02, i03, i05)."""
    export = tmp_path / "export"
    assert main(["policy", "export", str(bundle), "--to", "lerobot", "--out", str(export)]) == 0
    shutil.rmtree(export / "actlab_bundle")
    capsys.readouterr()
    assert main(["policy", "import", str(export), "--out", str(tmp_path / "imported")]) == 2
    err = capsys.readouterr().err
    assert "keeps its weights in actlab_bundle/, which is missing" in err and "policy export" in err
    assert not (tmp_path / "imported").exists()


# ---------------------------------------------------------------------------------------- rl demos
@pytest.mark.timeout(90)
def test_a_reward_model_with_too_few_episodes_is_refused_before_any_rollout(
    tmp_path, recording, bundle, capsys
):
    """TRACEBACK before: `rl reward-model --set episodes=1 --set rollouts=1` (or a 1-episode dataset) ran
    every rollout, then "ValueError: torch.cat(): expected a non-empty list of Tensors" (w01, w03, w08).
    The number of demonstrations is the number read (it recorded the number asked)."""
    from actlab.rl.reward_model import RewardModelConfig, _check_episode_count

    out = tmp_path / "rm"
    args = ["rl", "reward-model", "--demos", str(recording), "--base", str(bundle), "--out", str(out)]
    assert main([*args, "--set", "episodes=1", "--set", "rollouts=1", "--set", "rollout_envs=1"]) == 2
    err = capsys.readouterr().err
    assert "too few episodes for the reward model's training, validation and test splits" in err, err
    assert "found:    2: 1 demonstration(s)" in err and not out.exists()
    cfg = RewardModelConfig(episodes=5, rollouts=2, rollout_envs=2)
    assert _check_episode_count(cfg, recording) == 1


@pytest.mark.timeout(30)
def test_a_demo_dataset_shorter_than_asked_is_said(recording, capsys):
    """SILENT before: sac.demo_episodes=5 (and the reward model's episodes=5) on a 1-episode dataset read
    the one episode without a word (l15)."""
    from actlab.rl.demos import say_fewer_demos
    from actlab.utils.say import said_once

    with said_once():
        say_fewer_demos(recording, 1, 5, "sac.demo_episodes")
        say_fewer_demos(recording, 5, 5, "sac.demo_episodes")  # as many as asked: nothing to say
    assert (
        capsys.readouterr().err == f"note: {recording} holds 1 episode(s): sac.demo_episodes=5 reads all 1\n"
    )


@pytest.mark.timeout(60)
def test_a_whiskers_episode_the_evaluation_does_not_run_is_refused(tmp_path, bundle, capsys):
    """SILENT before (noticed in the tenth run, left then): `eval --whiskers --whiskers-episode 5
    --episodes 1` filmed seed 100005, an episode the evaluation never ran, whose seed nothing checked
    against the training seeds. Refused before any episode, nothing written; the last episode is filmed."""
    out = tmp_path / "ev"
    args = ["eval", str(bundle), "--episodes", "1", "--max-steps", "3", "--workers", "1", "--whiskers"]
    assert main([*args, "--whiskers-episode", "5", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the whiskers episode is not one of the evaluation's episodes" in err, err
    assert "an index among 0..0 (--episodes 1)" in err and not out.exists()
    assert main([*args, "--whiskers-episode", "0", "--out", str(out)]) == 0
    assert list((out / "whiskers").glob("*episode_000.mp4")), sorted(out.rglob("*"))
