"""Faults of our ninth planted-fault run (docs/faults.md "Ninth fault run"), planted for real: the real
parser, real files, real bundles and datasets.

- a claimed ``--out`` whose marker an older actlab wrote (no inputs recorded) was reused by ``data view``
  of another dataset, its pages written over (LOSS);
- ``policy export`` / ``policy import`` dropped the bundle's training record, so an so101_follower policy
  was evaluated in degrees and at its training seeds without a word;
- a directory where a run writes a file (summary.json, best.json) was named by its hidden temporary name;
- ``--set data.cache_dir=`` inside another dataset, bundle or command output wrote the frame cache there;
- ``--set augment.shift_pad`` as large as the frames trained on crops that could hold none of the image;
- a checkpoint stripped of its training state was skipped by a resume and later replaced without a word;
  one that lost its actlab.json said "check the path"; a missing metrics.jsonl went unsaid;
- the demo refused data.episodes (and a foreign cache) only after recording; `policy bench BUNDLE` blamed
  an "unknown policy type".
"""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from actlab.cli import main
from actlab.cli.data import VIEW_KIND
from actlab.errors import ActlabError
from actlab.lifecycle.checkpoints import Checkpoints
from actlab.lifecycle.metrics_log import MetricsLog
from actlab.lifecycle.rundir import resume_start
from actlab.training import get_preset, with_dataset
from actlab.training.config import config_to_dict
from actlab.training.loop import TRAINING_RUN
from actlab.utils.io import OUTPUT_MARKER, atomic_write_json, claim_out_dir

SIM = {"task": "so101_pick_place", "episode_seeds": [0, 1], "units": "so101_follower"}


# ------------------------------------------------------------------------ claimed output directories
@pytest.mark.timeout(60)
def test_a_claimed_out_an_older_actlab_made_is_not_reused_for_another_input(tmp_path, tiny_dataset, capsys):
    """LOSS before: a data view --out whose marker records no inputs (written before they were recorded)
    was reused by `data view B`, B's episode_000.html written over A's, exit 0."""
    out = tmp_path / "view"
    claim_out_dir(out, VIEW_KIND, inputs=(tiny_dataset,))
    marker = json.loads((out / OUTPUT_MARKER).read_text())
    del marker["inputs"]  # as an actlab before the eighth run wrote it
    (out / OUTPUT_MARKER).write_text(json.dumps(marker))
    (out / "episode_000.html").write_text("A's page")
    other = tmp_path / "other"
    shutil.copytree(tiny_dataset, other)
    assert main(["data", "view", str(other), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "did not record its input" in err and "choose another --out" in err
    assert (out / "episode_000.html").read_text() == "A's page"
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_MARKER, "episode_000.html"]


# ------------------------------------------------------------------------------- bundles' training record
@pytest.mark.timeout(90)
def test_export_and_import_keep_the_bundles_training_record(tmp_path, bundle, capsys):
    """SILENT before: `policy export` wrote actlab_bundle/ with extra {"exported_from"} only and `policy
    import` {"imported_from", ...}: the task, joint units and training seeds were gone, and eval ran an
    so101_follower policy in degrees (and at its training seeds) with exit 0."""
    trained = tmp_path / "trained"
    shutil.copytree(bundle, trained)
    meta = json.loads((trained / "actlab.json").read_text())
    meta["extra"] = {"train": {"step": 1, "dataset": {"path": str(tmp_path / "rec"), "sim": SIM}}}
    (trained / "actlab.json").write_text(json.dumps(meta))  # actlab.json carries no digest of itself
    export, imported = tmp_path / "export", tmp_path / "imported"
    assert main(["policy", "export", str(trained), "--to", "lerobot", "--out", str(export)]) == 0
    assert main(["policy", "import", str(export), "--out", str(imported)]) == 0
    for made in (export / "actlab_bundle", imported):
        extra = json.loads((made / "actlab.json").read_text())["extra"]
        assert extra["train"]["dataset"]["sim"] == SIM
        capsys.readouterr()
        args = ["eval", str(made), "--episodes", "1", "--max-steps", "2", "--workers", "1"]
        assert main([*args, "--out", str(tmp_path / f"eval-{made.name}")]) == 2
        err = capsys.readouterr().err
        assert "so101_follower" in err and "--units so101_follower" in err
        assert not (tmp_path / f"eval-{made.name}").exists()
    # The export run through the LeRobot bridge is the same policy: the record inside it is read there too
    # (SILENT before: --lerobot-policy EXPORT skipped every check of the training record). Refused before
    # any LeRobot process starts: this python has no lerobot.
    bridged = ["eval", "--lerobot-policy", str(export), "--lerobot-python", sys.executable, "--episodes", "1"]
    assert main([*bridged, "--out", str(tmp_path / "eval-bridged")]) == 2
    err = capsys.readouterr().err
    assert "trained on joint units so101_follower and would run in degrees" in err, err
    assert "--units so101_follower" in err and not (tmp_path / "eval-bridged").exists()


# ------------------------------------------------------------------------------------------- run files
@pytest.mark.timeout(30)
def test_a_directory_where_a_file_is_written_is_named_not_its_temporary_name(tmp_path):
    """UNCLEAR before: `train --resume` with summary.json (best.json, last.json) a directory ended in
    "[Errno 21] Is a directory: .summary.json.5oyrruk1.tmp", after the whole training."""
    target = tmp_path / "summary.json"
    (target / "kept").mkdir(parents=True)
    with pytest.raises(IsADirectoryError) as e:
        atomic_write_json(target, {"step": 3})
    assert e.value.filename == str(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]  # no temporary file left
    assert [p.name for p in target.iterdir()] == ["kept"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("complete", [True, False])
def test_a_checkpoint_without_its_training_state_is_not_skipped_by_a_resume(tmp_path, complete):
    """SILENT before: a step_N directory whose training_state/ was deleted (a bundle kept for its weights)
    was passed over: the resume continued from the checkpoint before it, then deleted step_N and wrote it
    again. Now refused naming it, with the `mv` that keeps it; an earlier complete checkpoint or none."""
    run = tmp_path / "run"
    (run / "checkpoints" / "step_0000002").mkdir(parents=True)
    (run / "config.json").write_text("{}")
    (run / "checkpoints" / "step_0000002" / "model.safetensors").write_bytes(b"weights")
    if complete:
        (run / "checkpoints" / "step_0000001" / "training_state").mkdir(parents=True)
        (run / "checkpoints" / "step_0000001" / "training_state" / "state.json").write_text('{"step": 1}')
    ckpts = Checkpoints(run, keep_last=2, keep_best=True)
    with pytest.raises(ActlabError) as e:
        resume_start(run, ckpts, TRAINING_RUN)
    text = str(e.value)
    assert "step_0000002 has no training state" in text and "mv " in text and "--init-from" in text
    assert ("continues from step_0000001" if complete else "starts the run over") in text
    assert (run / "checkpoints" / "step_0000002" / "model.safetensors").read_bytes() == b"weights"


# ------------------------------------------------------------------------------------ training settings
@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["bundle", "data view --out", "dataset"])
def test_a_frame_cache_inside_another_commands_output_is_refused(
    tmp_path, tiny_dataset, bundle, capsys, where
):
    """UNCLEAR before: --set data.cache_dir= a checkpoint, a data view's --out or another dataset wrote
    frames/ and stats/ into it, exit 0. Refused before anything is run or written."""
    if where == "bundle":
        owner = tmp_path / "b"
        shutil.copytree(bundle, owner)
    elif where == "dataset":
        owner = tmp_path / "ds2"
        shutil.copytree(tiny_dataset, owner)
    else:
        owner = claim_out_dir(tmp_path / "view", VIEW_KIND, inputs=(tiny_dataset,))
    before = sorted(p.name for p in owner.rglob("*"))
    args = ["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(tmp_path / "run")]
    assert main([*args, "--set", f"data.cache_dir={owner / 'cache'}", "--set", "steps=1"]) == 2
    err = capsys.readouterr().err
    assert "data.cache_dir lies inside a directory another command wrote" in err and str(owner) in err
    assert sorted(p.name for p in owner.rglob("*")) == before
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(60)
def test_a_shift_as_large_as_the_frames_is_refused(tmp_path, tiny_dataset, capsys):
    """SILENT before: --set augment.shift_pad=100 on 16 px frames trained (exit 0) on crops that could hold
    none of the image. The tiny dataset's frames are 32 px."""
    args = ["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(tmp_path / "run")]
    args += ["--set", "steps=1", "--set", f"data.cache_dir={tmp_path / 'cache'}"]
    assert main([*args, "--set", "augment.shift_pad=32"]) == 2
    err = capsys.readouterr().err
    assert "augment.shift_pad" in err and "< 32" in err
    assert not (tmp_path / "run" / "checkpoints").exists()


# ------------------------------------------------------------------------------- refused before any work
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "case",
    ["demo episodes", "demo cache", "bench of a bundle"],
)
def test_settings_are_refused_before_any_work_naming_what_they_are(
    tmp_path, tiny_dataset, bundle, capsys, case
):
    """UNCLEAR before: the demo refused `--set data.episodes=[0,1,2]` with --episodes 2 (and a
    data.cache_dir inside another dataset) only at its training stage, after recording; `policy bench
    BUNDLE` said "unknown policy type 'BUNDLE'", fix "actlab policy info lists them"."""
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
    if case == "demo episodes":
        assert main([*demo, "--set", "data.episodes=[0,1,2]"]) == 2
        assert "indices among 0..1 (--episodes 2)" in capsys.readouterr().err
    elif case == "demo cache":
        assert main([*demo, "--set", f"data.cache_dir={tiny_dataset / 'cache'}"]) == 2
        assert "a LeRobot dataset" in capsys.readouterr().err
        assert not (tiny_dataset / "cache").exists()
    else:
        assert main(["policy", "bench", str(bundle), "--steps", "1"]) == 2
        err = capsys.readouterr().err
        assert "not a saved policy" in err and "an actlab policy bundle" in err
    assert not (tmp_path / "demo" / "data").exists()


@pytest.mark.timeout(60)
def test_a_checkpoint_missing_a_bundle_file_offers_the_previous_one(tmp_path, tiny_dataset, bundle, capsys):
    """UNCLEAR before: `train --resume` of a run whose newest checkpoint lost its actlab.json said
    "checkpoint bundle metadata not found", fix "check the path"; now "checkpoint is incomplete" with the
    `mv` that makes the resume take the checkpoint before it, as for a damaged training state."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(
        json.dumps(config_to_dict(with_dataset(get_preset("tiny"), str(tiny_dataset))))
    )
    for step in (1, 2):
        ckpt = run / "checkpoints" / f"step_000000{step}"
        shutil.copytree(bundle, ckpt)
        (ckpt / "training_state").mkdir()
        (ckpt / "training_state" / "state.json").write_text(json.dumps({"step": step}))
    (run / "checkpoints" / "step_0000002" / "actlab.json").unlink()
    assert main(["train", "--out", str(run), "--resume", "--set", "steps=3"]) == 2
    err = capsys.readouterr().err
    assert "checkpoint is incomplete" in err and "step_0000002/actlab.json" in err
    assert "it takes step_0000001" in err and "check the path" not in err


@pytest.mark.timeout(30)
def test_a_resume_without_its_metrics_file_says_the_history_is_lost(tmp_path, capsys):
    """UNCLEAR before: `train --resume` of a run whose metrics.jsonl was deleted went on without a word;
    its curves then began at the resumed step as if the run had started there."""
    log = MetricsLog(tmp_path / "resumed", enabled=True, total_steps=3, start_step=2, progress=False)
    log.close()
    err = capsys.readouterr().err
    assert "metrics.jsonl is missing: the metrics of steps 1-2 are lost" in err
    MetricsLog(tmp_path / "new", enabled=True, total_steps=3, progress=False).close()  # a new run: no note
    assert capsys.readouterr().err == ""
