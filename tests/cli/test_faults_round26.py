"""Faults of our twenty-sixth planted-fault run (docs/faults.md "Twenty-sixth fault run"), planted for real:
real commands, real files. Each test names the probes of docs/faults_round26_probes.md it plants again and
what happened before its fix.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

TINY = ["--preset", "tiny", "--set", "log.progress=false", "--set", "checkpoint.every=1"]


def _swapped_export(export: Path, tmp_path: Path) -> Path:
    """A copy of ``export`` whose actlab_bundle/ is another export's of the same shapes (other weights;
    self-consistent: its own digests pass, and so do config.json's shapes)."""
    import torch

    from actlab.cli import main
    from actlab.policies import save_policy
    from actlab.policies.info import synthetic_features, unit_stats
    from actlab.policies.registry import make_policy
    from actlab.training import get_preset

    cfg = get_preset("tiny").policy
    feats = synthetic_features(6, 6, ("top", "wrist"), (16, 16))
    torch.manual_seed(1)
    save_policy(make_policy(cfg, feats, unit_stats(cfg, feats), pretrained=False), tmp_path / "b2")
    other = tmp_path / "other"
    assert main(["policy", "export", str(tmp_path / "b2"), "--to", "lerobot", "--out", str(other)]) == 0
    swapped = shutil.copytree(export, tmp_path / "swapped")
    shutil.rmtree(swapped / "actlab_bundle")
    shutil.copytree(other / "actlab_bundle", swapped / "actlab_bundle")
    return swapped


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if value is _DROP:
            data.pop(key)
        else:
            data[key] = value
    path.write_text(json.dumps(data))


_DROP = object()


# ------------------------------------------------------------------ the export's record of its bundle
@pytest.mark.parametrize("damage", ["string", "null", "empty_file", "list_file"])
def test_an_export_whose_bundle_record_is_damaged_is_refused(damage, export, tmp_path, capsys):
    """SILENT before (imp_swap_rec_str, imp_swap_rec_null, imp_swap_exportjson_empty,
    imp_swap_exportjson_list, ev_swap_rec_str): actlab_export.json's bundle_sha256 not an object, or the
    file not JSON / not an object, was taken as "no record": a swapped bundle was imported, evaluated and
    run under the export's name, exit 0. Now refused, naming actlab_export.json."""
    from actlab.cli import main

    swapped = _swapped_export(export, tmp_path)
    record = swapped / "actlab_export.json"
    if damage == "string":
        _edit_json(record, bundle_sha256="abc")
    elif damage == "null":
        _edit_json(record, bundle_sha256=None)
    elif damage == "empty_file":
        record.write_text("")
    else:
        record.write_text("[1]")
    capsys.readouterr()
    assert main(["policy", "import", str(swapped), "--out", str(tmp_path / "imp")]) == 2
    err = capsys.readouterr().err
    assert "actlab_export.json" in err and "error:" in err, err
    assert not (tmp_path / "imp").exists()


@pytest.mark.parametrize("removed", ["record", "file"])
def test_an_export_without_the_record_of_its_bundle_says_so(removed, export, tmp_path, capsys):
    """SILENT before (imp_swap_rec_removed, imp_swap_exportjson_rm, imp_swap_export_marker_gone,
    lr_swap_rec_removed, ev_swap_rec_removed2): an export without bundle_sha256 (written before the record)
    or without actlab_export.json (its output marker still says `actlab policy export`) was taken as it
    is without a word, a swapped bundle imported and run. It cannot be compared; now it is said (and
    imported, as the 25th run decided for an export that lost actlab_export.json)."""
    from actlab.cli import main

    swapped = _swapped_export(export, tmp_path)
    if removed == "record":
        _edit_json(swapped / "actlab_export.json", bundle_sha256=_DROP)
    else:
        (swapped / "actlab_export.json").unlink()
    capsys.readouterr()
    assert main(["policy", "import", str(swapped), "--out", str(tmp_path / "imp")]) == 0
    err = capsys.readouterr().err
    words = "predates the record of its bundle" if removed == "record" else "without its actlab_export.json"
    assert words in err and "compared" in err, err
    # eval --lerobot-policy says it too: the bridge checks the export where its notes reach the user (the
    # child's stderr is read only when it fails)
    from actlab.lerobot.bridge import LeRobotBridgePolicy

    LeRobotBridgePolicy(swapped, sys.executable)  # (no child started)
    assert words in capsys.readouterr().err


def test_a_bundles_damaged_record_of_its_digests_is_refused(export, tmp_path, capsys):
    """TRACEBACK before (imp_bundle_actlabjson_sha_str): actlab_bundle/actlab.json's sha256 edited to a
    string was "AttributeError: 'str' object has no attribute 'get'" in the export's check (and a bundle
    loaded alone skipped verification). Now refused, naming actlab.json's field sha256."""
    from actlab.cli import main

    edited = shutil.copytree(export, tmp_path / "edited")
    _edit_json(edited / "actlab_bundle" / "actlab.json", sha256="x")
    capsys.readouterr()
    assert main(["policy", "import", str(edited), "--out", str(tmp_path / "imp")]) == 2
    err = capsys.readouterr().err
    assert "the bundle's record of its files' sha256 is damaged" in err and "field:    sha256" in err, err


def test_a_bundle_without_the_record_of_its_digests_is_loaded_with_a_warning(bundle, tmp_path):
    """SILENT before (lt_resume_actlabjson_sha_rm): a bundle whose actlab.json lost its sha256 record was
    loaded without verification and without a word: lerobot-train --resume trained on weights edited in
    their middle, exit 0. Now loaded with a warning that its files are not verified."""
    from actlab.policies import load_policy

    copy = shutil.copytree(bundle, tmp_path / "b")
    _edit_json(copy / "actlab.json", sha256=_DROP)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_policy(copy, device="cpu")
    assert any("records no sha256 of its files" in str(w.message) for w in caught), [
        str(w.message) for w in caught
    ]


# ------------------------------------------------------------------ records of the videos and files
@pytest.mark.parametrize("entry", ["x", 5])
def test_a_resume_whose_videos_record_is_damaged_names_the_checkpoint(entry, tiny_dataset, tmp_path, capsys):
    """TRACEBACK before (rs_vid_entry_str, rs_vid_entry_num): a checkpoint whose record of a video is not
    an object was "'str' object has no attribute 'get'" in `train --resume`. Now refused, naming the
    checkpoint's actlab.json and the field."""
    from actlab.cli import main

    out = tmp_path / "run"
    argv = ["train", *TINY, "--dataset", str(tiny_dataset), "--out", str(out)]
    assert main([*argv, "--set", "steps=1"]) == 0
    meta_path = out / "checkpoints" / "step_0000001" / "actlab.json"
    meta = json.loads(meta_path.read_text())
    videos = meta["extra"]["train"]["dataset"]["videos"]
    videos[sorted(videos)[0]] = entry
    meta_path.write_text(json.dumps(meta))
    capsys.readouterr()
    assert main([*argv, "--set", "steps=2", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "record of the videos its run reads is damaged" in err and "extra.train.dataset.videos" in err, err


def test_a_demos_damaged_record_of_its_files_names_demo_state_json(tiny_dataset, tmp_path):
    """TRACEBACK before (dm_rec_sources_entry_str): demo_state.json's record of a dataset file edited to a
    string was the AttributeError traceback of the comparison. Now refused naming demo_state.json."""
    from actlab.demo.run_check import check_data_sources
    from actlab.errors import ActlabError

    data = shutil.copytree(tiny_dataset, tmp_path / "demo" / "data")
    with pytest.raises(ActlabError) as e:
        check_data_sources({"sources": {"data/chunk-000/file-000.parquet": "x"}}, data)
    assert e.value.problem == "the demo's record of its dataset's files is damaged"
    assert Path(e.value.file) == tmp_path / "demo" / "demo_state.json"


# ------------------------------------------------------------------ the doctor's sweep of other weights
@pytest.mark.parametrize("record", [5, None, _DROP])
def test_the_doctor_says_or_refuses_a_sweep_without_a_usable_record_of_its_weights(record, bundle, capsys):
    """SILENT before (ds_wsha_num_retrained, ds_wsha_null_retrained, ds_wsha_removed_retrained): a sweep
    whose weights_sha256 was a number, null or removed judged a run trained again by the old weights'
    success, "ok ... 0/2 success on the sweep's seeds", exit 0. A damaged record is refused; a sweep
    without one (written before the record) is said."""
    from actlab.errors import ActlabError
    from actlab.evaluation.doctor.findings import _measured_other_weights

    entry = {"name": "step_1", "path": str(bundle)}
    if record is not _DROP:
        entry["weights_sha256"] = record
        with pytest.raises(ActlabError) as e:
            _measured_other_weights([entry])
        assert e.value.field == "checkpoints[0].weights_sha256"
        return
    capsys.readouterr()
    assert _measured_other_weights([entry]) == []
    assert "predates the record of the weights it measured" in capsys.readouterr().err


# ------------------------------------------------------------------ the reward model's labels
def test_the_reward_model_refuses_success_frames_covering_a_whole_demonstration(
    recording, bundle, tmp_path, capsys
):
    """SILENT before (rm_success_frames_100000, rm_success_frames_200): success_frames past a demonstration's
    length labelled every frame of it a success, its first included: "held-out accuracy 1.000" on held-out
    frames that were all positives (balanced accuracy 0.5), exit 0. Now refused before anything runs."""
    from actlab.cli import main

    out = tmp_path / "rm"
    argv = ["rl", "reward-model", "--demos", str(recording), "--base", str(bundle), "--out", str(out)]
    capsys.readouterr()
    assert (
        main([*argv, "--set", "success_frames=100000", "--set", "rollouts=1", "--set", "rollout_envs=1"]) == 2
    )
    err = capsys.readouterr().err
    assert "success_frames labels every frame of a demonstration episode a success" in err, err
    assert not out.exists()


def test_a_whole_limit_is_written_whole(recording, bundle, tmp_path, capsys):
    """UNCLEAR before (rm_seed_2147483648): `--set seed=2147483648` was refused with "expected: 0 <= seed <=
    2.14748e+09", the very number given as %g prints it. A whole limit is written whole."""
    from actlab.cli import main

    argv = [
        "rl",
        "reward-model",
        "--demos",
        str(recording),
        "--base",
        str(bundle),
        "--out",
        str(tmp_path / "o"),
    ]
    capsys.readouterr()
    assert main([*argv, "--set", "seed=2147483648"]) == 2
    err = capsys.readouterr().err
    assert "seed <= 2147483647" in err and "e+09" not in err, err


# ------------------------------------------------------------------ a killed writer left as a zombie
def test_a_killed_writer_that_is_still_a_zombie_does_not_hold_its_output(tmp_path):
    """UNCLEAR before (kc_0_70_rerun, kc_0_95_rerun): `data curate` killed mid-write stayed a zombie for
    seconds under this container's init; its rerun was refused as "another actlab process (pid N) is
    writing this output directory now", fix "wait for pid N to finish (or stop it)": a process that had
    ended. A zombie writes nothing more: its temporary is removed and the output written."""
    from actlab.utils.io import check_out_dir

    out = tmp_path / "out"
    code = (
        "import sys, time\n"
        "from actlab.utils.io import atomic_dir\n"
        "with atomic_dir(sys.argv[1], kind='t') as tmp:\n"
        "    (tmp / 'f').write_text('1'); print('in', flush=True); time.sleep(60)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, env=env)
    try:
        assert child.stdout.readline().strip() == b"in"
        child.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # a zombie now: killed, not yet waited for
            with open(f"/proc/{child.pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    break
            time.sleep(0.05)
        check_out_dir(out, "t")  # refused before: the zombie counted as a live writer
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


# ------------------------------------------------------------------ data view's --out reused
@pytest.mark.parametrize("change", ["replaced", "video"])
def test_data_view_does_not_add_pages_to_an_out_of_the_dataset_as_it_was(
    change, tiny_dataset, rec2, tmp_path, capsys
):
    """SILENT before (view_reuse_after_replace, view_reuse_after_video_edit): `data view A --episode 0 --out
    V`, A replaced by another recording under its name (or a video of it overwritten), then `--episode 1`
    into V: V held pages of two datasets under one name, exit 0. The output marker now records the
    dataset's identity and its videos' sizes and times; another is refused."""
    from actlab.cli import main

    data, out = tmp_path / "data", tmp_path / "view"
    shutil.copytree(rec2, data)
    assert main(["data", "view", str(data), "--episode", "0", "--out", str(out)]) == 0
    assert main(["data", "view", str(data), "--episode", "1", "--out", str(out)]) == 0  # same data: added
    if change == "replaced":
        shutil.rmtree(data)
        shutil.copytree(tiny_dataset, data)
    else:
        videos = sorted((data / "videos").rglob("*.mp4"))
        shutil.copyfile(videos[1], videos[0])
    capsys.readouterr()
    assert main(["data", "view", str(data), "--episode", "0", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "as it was: it changed since" in err, err


# ------------------------------------------------------------------ the demo's stage outputs replaced
def test_a_demo_stage_whose_directory_another_command_wrote_again_runs_again(tmp_path, capsys):
    """SILENT before (dm_best_dir_overwritten_by_eval): `actlab eval --out DEMO/eval/best --overwrite` (the
    demo writes it as actlab eval's output) replaced the demo's confirmation; the next demo reused its
    evaluation stage, its report linking videos and whiskers no longer there, exit 0. Each stage now
    records its directories' output markers and runs again when one was written since."""
    from actlab.demo.pipeline import _finish_stage, _stage_current
    from actlab.utils.io import atomic_dir

    out = tmp_path / "demo"
    for rel in ("eval/sweep", "eval/best"):
        with atomic_dir(out / rel, kind="actlab eval") as tmp:
            (tmp / "results.json").write_text("{}")
    state: dict = {}
    settings = {"episodes": 2}
    outputs = [out / "eval" / "sweep" / "results.json", out / "eval" / "best" / "results.json"]
    _finish_stage(out, state, "eval", settings, {"best": "step_1"}, 1.0)
    assert _stage_current(state, "eval", settings, outputs, out)
    with atomic_dir(out / "eval" / "best", overwrite=True, kind="actlab eval") as tmp:  # another evaluation
        (tmp / "results.json").write_text("{}")
    capsys.readouterr()
    assert not _stage_current(state, "eval", settings, outputs, out)
    assert "eval/best: written again since the eval stage wrote it" in capsys.readouterr().err
    # a demo written before the record: said, taken as it is, and compared from then on
    state["eval"].pop("markers")
    assert _stage_current(state, "eval", settings, outputs, out)
    assert "predates the record of its directories (eval/sweep, eval/best)" in capsys.readouterr().err
    with atomic_dir(out / "eval" / "sweep", overwrite=True, kind="actlab eval") as tmp:
        (tmp / "results.json").write_text("{}")
    assert not _stage_current(state, "eval", settings, outputs, out)
