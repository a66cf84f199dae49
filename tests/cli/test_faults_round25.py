"""Faults of our twenty-fifth planted-fault run (docs/faults.md "Twenty-fifth fault run"), planted for real:
real commands, real files.

The first tests cover what the 24th run left (its "Left as they are"); each later one names the probes of
docs/faults_round25_probes.md it plants again and what happened before its fix.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from plant_faults import edit_middle_keeping_size_and_mtime

TINY = ["--preset", "tiny", "--set", "log.progress=false", "--set", "checkpoint.every=1"]


def _train(main, data: Path, out: Path, steps: int, *extra: str) -> int:
    return main(
        ["train", *TINY, "--dataset", str(data), "--out", str(out), "--set", f"steps={steps}", *extra]
    )


def _videos(root: Path) -> list[Path]:
    return sorted(p for p in (root / "videos").rglob("*.mp4"))


# ------------------------------------------------------------------ 24th's leftovers: a resume's videos
def test_a_resume_refuses_a_video_edited_in_its_middle(tiny_dataset, tmp_path, capsys):
    """SILENT before (the 24th run's "Left as they are"): `train --resume` on a dataset whose video was
    edited in its middle with its size and mtime kept resumed on other frames, exit 0 (the run's dataset
    identity hashes meta/ and the rows, not the videos). Now each checkpoint records the videos the run
    reads (sha256 with inode and ctime: the frame store's record) and the resume refuses a changed one,
    naming it; the demo's train stage shares the check (check_same_dataset)."""
    from actlab.cli import main

    data, out = tmp_path / "data", tmp_path / "run"
    shutil.copytree(tiny_dataset, data)
    assert _train(main, data, out, 1) == 0
    (video,) = _videos(data)[:1]
    edit_middle_keeping_size_and_mtime(video, 64)
    capsys.readouterr()
    assert _train(main, data, out, 2, "--resume") == 2
    err = capsys.readouterr().err
    assert "the dataset is not the one the run was trained on" in err, err
    assert video.relative_to(data).as_posix() in err and "step_0000001 was trained on it" in err, err
    assert not (out / "checkpoints" / "step_0000002").exists()


def test_a_resume_of_a_checkpoint_without_the_videos_record_says_so_and_goes_on(
    tiny_dataset, tmp_path, capsys
):
    """The other side: a checkpoint written before the record cannot compare its videos: said, resumed."""
    from actlab.cli import main

    out = tmp_path / "run"
    assert _train(main, tiny_dataset, out, 1) == 0
    meta_path = out / "checkpoints" / "step_0000001" / "actlab.json"
    meta = json.loads(meta_path.read_text())
    assert isinstance(meta["extra"]["train"]["dataset"].pop("videos"), dict)
    meta_path.write_text(json.dumps(meta))
    capsys.readouterr()
    assert _train(main, tiny_dataset, out, 2, "--resume") == 0
    assert "predates the record of its videos" in capsys.readouterr().err


def test_rl_resume_refuses_demonstrations_changed_since_its_checkpoint(tiny_dataset, tmp_path, capsys):
    """The same for `rl train --resume --demos`: demonstrations are read again at each resume, and a
    dataset edited since (a video with its size and mtime kept, or its rows) was read without a word; the
    checkpoint now records them (rl.demos.demos_record) and the resume compares."""
    from actlab.errors import ActlabError
    from actlab.rl.demos import check_demos_unchanged, demos_record

    data = tmp_path / "demos"
    shutil.copytree(tiny_dataset, data)
    record = json.loads(json.dumps(demos_record(data, ["observation.images.top"])))
    check_demos_unchanged(data, record, tmp_path / "step_1")  # unchanged: passes
    (video,) = _videos(data)[:1]
    edit_middle_keeping_size_and_mtime(video, 64)
    with pytest.raises(ActlabError) as e:
        check_demos_unchanged(data, record, tmp_path / "step_1")
    assert "the demonstrations are not the ones the run was trained on" in e.value.problem
    assert video.relative_to(data).as_posix() in str(e.value.found)


# ------------------------------------------------------------------ 24th's leftovers: rl demos' size
def test_rl_train_refuses_demonstrations_of_another_size_before_its_run_directory(
    recording, bundle, tmp_path, capsys
):
    """UNCLEAR-then-leftover before (the 24th run's "Left as they are"): `rl train --demos` recorded at
    another --image-size than the base was trained at was refused after the run directory was made, RUN/base
    left behind (and taken by the next start). Now refused before anything is written."""
    from actlab.cli import main

    big = tmp_path / "big"
    argv = ["sim", "record", "--episodes", "1", "--image-size", "24", "--workers", "0", "--out", str(big)]
    assert main(argv) == 0
    out = tmp_path / "rl"
    capsys.readouterr()
    argv = [
        "rl",
        "train",
        "--preset",
        "residual",
        "--base",
        str(bundle),
        "--demos",
        str(big),
        "--out",
        str(out),
    ]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "the demonstrations' frames are not the size the agent reads" in err, err
    assert not out.exists(), sorted(p.name for p in out.iterdir())


# ------------------------------------------------------------------ 24th's leftovers: a list's item twice
@pytest.mark.parametrize(
    ("argv", "field", "found"),
    [
        (["bench", "threads", "--threads", "1,1", "--rounds", "1"], "--threads", "1 in '1,1'"),
        (["bench", "threads", "--threads", "1,01", "--rounds", "1"], "--threads", "1 and 01 (both 1)"),
        (["eval", "BUNDLE", "--execution", "sync,sync"], "--execution", "sync in 'sync,sync'"),
        (["eval", "BUNDLE", "--execution", "async", "--latency", "3,100ms"], "--latency", "3 and 100ms"),
        (["eval", "BUNDLE", "--execution", "async", "--latency", "2,2"], "--latency", "2 in '2,2'"),
        (
            ["data", "curate", "DATA", "--out", "OUT", "--drop-episodes", "0-1,1"],
            "--drop-episodes",
            "0-1 and 1",
        ),
        (
            ["data", "stats", "DATA", "--relative-horizon", "4", "--absolute-dims", "0,0"],
            "--absolute-dims",
            "0 in '0,0'",
        ),
        (
            ["policy", "doctor", "BUNDLE", "--dataset", "DATA", "--train-episodes", "0,0"],
            "--train-episodes",
            "0 in '0,0'",
        ),
    ],
)
def test_an_item_given_twice_in_a_comma_list_is_refused(
    argv, field, found, bundle, tiny_dataset, tmp_path, capsys
):
    """SILENT before (the 24th run's "Left as they are", bthreads_dup): `bench threads --threads 1,1`
    measured 1 twice and reported it once; `--execution sync,sync` and `--latency 3,100ms` (3 steps at 30
    fps) were merged without a word; `--drop-episodes 0-1,1` dropped 1 once. One rule for every comma list
    (utils.config.refuse_repeated): refused, naming the option and the item."""
    from actlab.cli import main

    subst = {"BUNDLE": str(bundle), "DATA": str(tiny_dataset), "OUT": str(tmp_path / "out")}
    capsys.readouterr()
    assert main([subst.get(a, a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "a comma list names one item twice" in err and field in err and found in err, err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ an export's bundle replaced by another's
def test_an_export_whose_bundle_was_replaced_by_another_is_refused(export, run_dir, tmp_path, capsys):
    """SILENT before (lr_bundle_swap_px2, imp_bundle_swap_px2, le_bundle_swap, lt_bundle_swap): an export
    whose actlab_bundle/ was replaced by another export's (self-consistent: its own digests pass) ran in
    lerobot-rollout / lerobot-eval, was fine-tuned by lerobot-train and imported, exit 0, under the
    export's name and record. actlab_export.json now records the bundle's file digests; the plugin's load
    and the import refuse another bundle (check_plugin_bundle -> check_exported_bundle)."""
    from actlab.cli import main
    from actlab.errors import ActlabError
    from actlab.lerobot.runtime import check_plugin_bundle

    other = tmp_path / "other"
    assert main(["policy", "export", str(run_dir / "checkpoints" / "step_0000002"), "--to", "lerobot",
                 "--out", str(other)]) == 0  # fmt: skip
    swapped = shutil.copytree(export, tmp_path / "swapped")
    shutil.rmtree(swapped / "actlab_bundle")
    shutil.copytree(other / "actlab_bundle", swapped / "actlab_bundle")
    capsys.readouterr()
    assert main(["policy", "import", str(swapped), "--out", str(tmp_path / "imp")]) == 2
    err = capsys.readouterr().err
    assert "is not the bundle it exported" in err and "actlab_export.json" in err, err
    assert not (tmp_path / "imp").exists()
    with pytest.raises(ActlabError, match="not the bundle it exported"):  # the plugin's load runs the same
        check_plugin_bundle(swapped, "actlab_act", "nothing to load")
    check_plugin_bundle(export, "actlab_act", "nothing to load")  # the export as written passes


# ------------------------------------------------------------------ rl residual's confirmation seeds
def test_residual_rl_refuses_confirmation_seeds_that_are_the_evaluation_seeds(bundle, tmp_path, capsys):
    """SILENT before (rr_residual_confirm_seed_100000): `--set residual.confirm_seed=100000` confirmed the
    residual on the very evaluation seeds it was picked on, said as "2 fresh seeds 100000..100001", exit 0.
    Now refused before anything runs, naming both ranges."""
    from actlab.cli import main

    out = tmp_path / "rl"
    argv = ["rl", "train", "--preset", "residual", "--base", str(bundle), "--out", str(out)]
    capsys.readouterr()
    assert main([*argv, "--set", "residual.confirm_seed=100010"]) == 2
    err = capsys.readouterr().err
    assert "the confirmation's seeds are not fresh: they overlap the evaluation seeds" in err, err
    assert "residual.confirm_seed" in err and not out.exists()


def test_rl_resume_whose_base_copy_changed_blames_the_copy(bundle, tmp_path):
    """UNCLEAR before (rr_base_mid_edit_resume): the run's own copy of the base edited in its middle (size
    and mtime kept), then `--resume --base ORIGINAL`: "the run directory's copy differs from --base", fix
    "to continue this run on the base it was trained on, pass --base RUN/base": the damaged copy. Now the
    copy is named as what changed (the checkpoints' recorded digest is --base's), fix remove it."""
    from types import SimpleNamespace

    from actlab.errors import ActlabError
    from actlab.rl.train import BASE_COPY, _load_base, bundle_digest

    run = tmp_path / "run"
    shutil.copytree(bundle, run / BASE_COPY)
    edit_middle_keeping_size_and_mtime(run / BASE_COPY / "model.safetensors")
    cfg = SimpleNamespace(base=str(bundle), device="cpu")
    with pytest.raises(ActlabError) as e:
        _load_base(cfg, run, recorded=bundle_digest(bundle))
    assert "copy of the base policy changed since its checkpoints were trained on it" in e.value.problem
    assert f"rm -r {run / BASE_COPY}" in e.value.fix and f"--base {bundle}" in e.value.fix


# ------------------------------------------------------------------ eval: a huge latency in ms, a PATH twice
def test_a_latency_in_milliseconds_past_any_number_of_steps_is_refused(bundle, capsys):
    """TRACEBACK before (ev_lat_ms_huge): `--latency 1e308ms` (finite milliseconds, infinite steps) was
    math.ceil's OverflowError traceback; now "bad latency", as `infms` was."""
    from actlab.cli import main

    argv = ["eval", str(bundle), "--episodes", "1", "--workers", "1", "--execution", "async"]
    capsys.readouterr()
    assert main([*argv, "--latency", "1e308ms"]) == 2
    err = capsys.readouterr().err
    assert "bad latency" in err and "Traceback" not in err and "OverflowError" not in err, err


@pytest.mark.parametrize("twice", ["link", "same"])
def test_eval_of_one_checkpoint_given_twice_is_refused_in_its_own_words(twice, bundle, tmp_path, capsys):
    """SILENT before (ev_bundle_and_link, ev_lrp_and_link): a bundle and a link to it (or a LeRobot policy
    and a link) were evaluated twice under two names, exit 0; UNCLEAR before (ev_two_same_bundle,
    ev_lrp_dup): the same PATH twice was told of a run directory it was not given, and the same
    --lerobot-policy twice "rename one". Now every source's directory is compared resolved."""
    from actlab.cli import main

    other = bundle
    if twice == "link":
        other = tmp_path / "link"
        other.symlink_to(bundle)
    capsys.readouterr()
    assert main(["eval", str(bundle), str(other), "--episodes", "1", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "a checkpoint is given twice" in err and "drop the repeated PATH" in err, err


# ------------------------------------------------------------------ import: config.json's words and notes
def test_importing_an_export_whose_config_json_is_empty_names_a_fix(export, tmp_path, capsys):
    """UNCLEAR before (imp_cfg_empty, imp_cfg_trunc): an emptied or cut-short config.json of a LeRobot
    directory was "not valid JSON", fix "repair or regenerate the file" (no command regenerates it)."""
    from actlab.cli import main

    path = shutil.copytree(export, tmp_path / "px")
    (path / "config.json").write_text("")
    capsys.readouterr()
    assert main(["policy", "import", str(path), "--out", str(tmp_path / "imp")]) == 2
    err = capsys.readouterr().err
    assert "regenerate" not in err and "actlab policy export BUNDLE --to lerobot" in err, err


@pytest.mark.parametrize(("execution", "latency"), [("bogus", 0), ("async", 99)])
def test_importing_an_export_with_execution_settings_it_cannot_run_recommends_none(
    execution, latency, export, tmp_path, capsys
):
    """UNCLEAR before (imp_cfg_exec_bogus, imp_cfg_exec_async_lat99): the import's note recommended
    `actlab eval OUT --execution bogus` (or `--latency 99` past an 8-action chunk): settings LeRobot's plugin
    refuses and eval would refuse. Now the note says they cannot run, and recommends no value."""
    from actlab.cli import main

    path = shutil.copytree(export, tmp_path / "px")
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(execution=execution, execution_latency=latency)
    (path / "config.json").write_text(json.dumps(cfg))
    capsys.readouterr()
    assert main(["policy", "import", str(path), "--out", str(tmp_path / "imp")]) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert "cannot run this policy" in text and f"--execution {execution}" not in text, text


def test_an_export_that_lost_its_actlab_export_json_is_still_imported(export, tmp_path, capsys):
    """UNCLEAR before (imp_exportjson_removed): an export without its actlab_export.json (LeRobot's loaders
    ran it: it is metadata) was refused by the import as "not a LeRobot policy directory", found "the output
    of actlab policy export", fix "an actlab bundle needs no import": it is the plugin's export."""
    from actlab.cli import main

    path = shutil.copytree(export, tmp_path / "px")
    (path / "actlab_export.json").unlink()
    assert main(["policy", "import", str(path), "--out", str(tmp_path / "imp")]) == 0
    assert (tmp_path / "imp" / "model.safetensors").is_file()


def test_a_variant_naming_one_key_twice_is_refused():
    """SILENT before (pb_variant_dup_key): `policy bench --variant a:dim_model=32,dim_model=64` measured
    dim_model=64 (15 M parameters) under a header naming both, exit 0; the comma lists' rule refuses it."""
    from actlab.errors import ActlabError
    from actlab.policies.bench import parse_variant

    assert parse_variant("a:dim_model=32,n_heads=2") == ("a", ["dim_model=32", "n_heads=2"])
    with pytest.raises(ActlabError, match="names one item twice") as e:
        parse_variant("a:dim_model=32, dim_model=64")
    assert e.value.field == "--variant" and "dim_model" in str(e.value.found)


def test_an_edit_of_the_exports_inner_bundle_config_is_blamed_on_that_file(export, tmp_path, capsys):
    """UNCLEAR before (lr_ac_cfg_nact_edit, imp_ac_cfg_nact_edit): actlab_bundle/config.json's
    n_action_steps edited (8 -> 4) was refused as "the export's config.json disagrees with the model it
    ships", expected "the shipped weights' n_action_steps=4" (the edit), fix "restore config.json" (the
    file that was right). Now the edited file is named, with the exported value expected."""
    from actlab.cli import main

    path = shutil.copytree(export, tmp_path / "px")
    inner = path / "actlab_bundle" / "config.json"
    cfg = json.loads(inner.read_text())
    cfg["n_action_steps"] = 2
    inner.write_text(json.dumps(cfg))
    capsys.readouterr()
    with pytest.warns(UserWarning, match="changed since the bundle was saved"):
        assert main(["policy", "import", str(path), "--out", str(tmp_path / "imp")]) == 2
    err = capsys.readouterr().err
    assert "actlab_bundle/config.json was edited after the export was written" in err, err
    assert f"restore {inner}" in err, err


def test_one_lerobot_policy_given_twice_is_refused(tmp_path):
    """SILENT / UNCLEAR before (ev_lrp_and_link, ev_lrp_dup): `--lerobot-policy PX --lerobot-policy LINK`
    evaluated one policy twice, exit 0; `--lerobot-policy PX` twice was "two policies have the same name",
    fix "rename one". The LeRobot sources' directories are compared resolved too."""
    from types import SimpleNamespace

    from actlab.errors import ActlabError
    from actlab.evaluation.harness import evaluate_many
    from actlab.evaluation.sources import PolicySource

    (tmp_path / "px").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "px")
    sources = [
        PolicySource(name="px", obj=SimpleNamespace(policy_dir=tmp_path / "px")),
        PolicySource(name="link", obj=SimpleNamespace(policy_dir=tmp_path / "link")),
    ]
    with pytest.raises(ActlabError, match="a checkpoint is given twice") as e:
        evaluate_many(sources, None, None)  # (refused before the spec or the config is read)
    assert e.value.field == "--lerobot-policy"


def test_importing_a_dataset_says_it_is_not_a_policy(tiny_dataset, tmp_path, capsys):
    """UNCLEAR before (imp_src_dataset): `policy import DATASET` was refused with the fix "an actlab bundle
    needs no import: pass it to actlab eval / train --init-from as it is"."""
    from actlab.cli import main

    capsys.readouterr()
    assert main(["policy", "import", str(tiny_dataset), "--out", str(tmp_path / "imp")]) == 2
    err = capsys.readouterr().err
    assert "a dataset is not a policy" in err and "needs no import" not in err, err


@pytest.mark.parametrize("edit", ["config", "stats"])
def test_a_demo_does_not_reuse_the_evaluation_of_a_checkpoint_whose_files_were_edited(edit, bundle, tmp_path):
    """SILENT before (dm_ckpt_cfg_edit, dm_ckpt_stats_edit): a checkpoint's config.json (n_action_steps)
    or stats.json edited after the demo evaluated it: the evaluation, delay sweep and report were reused,
    exit 0 (the record held the weights' sha256 alone). Now an edited bundle file is part of the record (an
    unedited bundle's entry stays its weights' sha256, as before): the checkpoint is evaluated again."""
    import io

    from actlab.demo.run_check import CHECKPOINTS, evaluation_outdated, run_checkpoints

    run = tmp_path / "run"
    ckpt = shutil.copytree(bundle, run / "checkpoints" / "step_0000001")
    entry = {"result": {CHECKPOINTS: run_checkpoints(run)}}
    assert "+edited" not in entry["result"][CHECKPOINTS]["step_0000001"]
    assert not evaluation_outdated(entry, run, io.StringIO())
    name = "config.json" if edit == "config" else "stats.json"
    data = json.loads((ckpt / name).read_text())
    if edit == "config":
        data["n_action_steps"] = 2
    else:
        data["action"]["mean"] = [x + 5.0 for x in data["action"]["mean"]]
    (ckpt / name).write_text(json.dumps(data))
    said = io.StringIO()
    assert evaluation_outdated(entry, run, said)
    assert "step_0000001's files were edited" in said.getvalue()


# ------------------------------------------------------------------ a damaged video named by its path
def test_a_video_decoding_error_names_the_video_not_pyavs_function(tiny_dataset, tmp_path):
    """UNCLEAR before (recurate_after_src_change): a video edited in its middle, then `data curate`: "a
    video file cannot be read", file "avcodec_send_packet()" (PyAV puts its function in the error's
    filename); with that dropped, the caller's --out. Now the decoder's own path (self.path) is named."""
    import av

    from actlab.errors import from_environment

    video = _videos(tiny_dataset)[0]

    class Decoder:  # as datasets.video.VideoDecoder.frames_at: the file is self.path, no local names it
        path = video

        def frames_at(self):
            raise av.error.InvalidDataError(1094995529, "Invalid data found", "avcodec_send_packet()")

    def curate(out=str(tmp_path / "out")):  # the caller's --out, a path-like local further up
        Decoder().frames_at()

    with pytest.raises(av.error.InvalidDataError) as e:
        curate()
    err = from_environment(e.value)
    assert err is not None and str(err.file) == str(video), err


# ------------------------------------------------------------------ the sim robot: logs, task and units
@pytest.mark.parametrize("inside", ["export", "dataset"])
def test_the_sim_robot_refuses_to_write_its_logs_into_another_commands_output(
    inside, export, tiny_dataset, tmp_path
):
    """SILENT before (lr_robot_outdir_px, lr_robot_outdir_ds): `--robot.output_dir=` the export it ran or a
    dataset got episodes.jsonl and episodes.log added, exit 0. Now refused before the first episode."""
    from actlab.errors import ActlabError
    from actlab.lerobot.runtime import SimEpisodes

    host = shutil.copytree(export if inside == "export" else tiny_dataset, tmp_path / "host")
    with pytest.raises(ActlabError, match="--robot.output_dir lies inside a directory another command wrote"):
        SimEpisodes(image_size=16, out_dir=host)
    assert not (host / "episodes.jsonl").exists() and not (host / "episodes.log").exists()


def test_the_sim_robot_checks_the_plugins_policy_units_and_task(tmp_path, capsys):
    """SILENT before (lr_robot_units_bad, lr_robot_task_other): a degrees policy run by the sim robot with
    --robot.units=so101_follower (its actions read in the wrong units), and a pick-and-place policy on
    --robot.task=so101_push, exit 0 without a word (actlab eval refuses the first and says the second).
    The plugin now tells the robot the bundle it loaded (SimSignal.policy_bundle)."""
    import sys

    from actlab.cli import main
    from actlab.errors import ActlabError
    from actlab.lerobot.runtime import SimEpisodes, SimSignal

    rec = tmp_path / "rec"
    assert (
        main(["sim", "record", "--episodes", "1", "--image-size", "16", "--workers", "0", "--out", str(rec)])
        == 0
    )
    run = tmp_path / "run"
    assert main(["train", *TINY, "--dataset", str(rec), "--out", str(run), "--set", "steps=1"]) == 0
    signal = SimSignal(policy_bundle=str(run / "checkpoints" / "step_0000001"))
    with pytest.raises(ActlabError, match="trained on joint units degrees") as e:
        SimEpisodes(image_size=16, signal=signal, units="so101_follower", stream=sys.stderr)
    assert e.value.fix.startswith("--robot.units=degrees")
    capsys.readouterr()
    SimEpisodes(image_size=16, signal=signal, task="so101_push", stream=sys.stderr)
    assert "--robot.task=so101_pick_place runs the task it learned" in capsys.readouterr().err


# ------------------------------------------------------------------ policy doctor --sweep of a retrained run
@pytest.mark.slow
def test_the_doctor_refuses_a_sweep_of_weights_the_run_no_longer_holds(tiny_dataset, tmp_path, capsys):
    """SILENT before (doctor_sweep_stale): `eval RUN --out SW`, then RUN trained again from scratch in the
    same directory (new weights, same checkpoint names), then `policy doctor RUN/checkpoints/step_N --sweep
    SW`: "ok ... on the sweep's seeds", the old weights' success judged the new ones, exit 0. results.json
    now records each checkpoint's weights (weights_sha256, from its actlab.json) and the doctor compares."""
    from actlab.cli import main

    run, sweep = tmp_path / "run", tmp_path / "sweep"
    assert _train(main, tiny_dataset, run, 2) == 0
    argv = ["eval", str(run), "--episodes", "1", "--max-steps", "2", "--workers", "1", "--out", str(sweep)]
    assert main(argv) == 0
    assert "weights_sha256" in (sweep / "results.json").read_text()
    shutil.rmtree(run)
    assert _train(main, tiny_dataset, run, 2, "--set", "seed=7") == 0
    capsys.readouterr()
    ckpt = run / "checkpoints" / "step_0000002"
    assert main(["policy", "doctor", str(ckpt), "--dataset", str(tiny_dataset), "--sweep", str(sweep)]) == 2
    err = capsys.readouterr().err
    assert "the checkpoint sweep measured other weights" in err, err


def test_a_sweeps_recorded_weights_are_compared_with_the_bundles(bundle):
    """The fast side of the test above: a results.json entry whose weights_sha256 is not the bundle's."""
    from actlab.evaluation.doctor.findings import _measured_other_weights
    from actlab.evaluation.results import recorded_weights

    now = recorded_weights(bundle)
    assert now is not None
    assert _measured_other_weights([{"name": "a", "path": str(bundle), "weights_sha256": now}]) == []
    assert _measured_other_weights([{"name": "a", "path": str(bundle)}]) == []  # (a sweep before the record)
    stale = _measured_other_weights([{"name": "a", "path": str(bundle), "weights_sha256": "0" * 64}])
    assert stale and stale[0].startswith("a: sha256 000000000000")


# ------------------------------------------------------------------ LeRobot's commands on the plugin
def test_the_lerobot_env_answers_task_as_lerobot_eval_asks():
    """TRACEBACK before (le_exec_async): lerobot-eval --eval.batch_size 2 runs the env in gymnasium's
    AsyncVectorEnv and asks every env for `task`; the missing attribute shut the workers down, a traceback.
    The env answers `task` with its instruction, as `task_description`."""
    import gymnasium as gym

    from actlab.lerobot.sim_env import GYM_NAMESPACE, register_gym_ids

    register_gym_ids()
    env = gym.make(
        f"{GYM_NAMESPACE}/so101_pick_place", image_size=16, max_episode_steps=5, disable_env_checker=True
    )
    try:
        assert env.get_wrapper_attr("task") == env.get_wrapper_attr("task_description")
    finally:
        env.close()


@pytest.mark.slow
def test_lerobot_train_on_frames_of_another_size_is_refused(recording, tmp_path):
    """TRACEBACK before (lt_base, lt_bundle_swap): lerobot-train --policy.path of an export trained at
    32 px on 16 px recordings was a RuntimeError traceback from the position embeddings; now the plugin
    refuses the first batch in actlab's words. Runs in the lerobot venv (skipped without it)."""
    import os

    from actlab.cli import main
    from actlab.policies import save_policy
    from actlab.policies.info import synthetic_features, unit_stats
    from actlab.policies.registry import make_policy
    from actlab.training import get_preset
    from procs import lerobot_env, run

    python = os.environ.get("ACTLAB_LEROBOT_PYTHON", "/work/lerobot-venv/bin/python")
    if not os.path.exists(python):
        pytest.skip("no lerobot venv")
    cfg = get_preset("tiny").policy
    feats = synthetic_features(6, 6, ("top", "wrist"), (32, 32))
    bundle = tmp_path / "b32"
    save_policy(make_policy(cfg, feats, unit_stats(cfg, feats), pretrained=False), bundle)
    export = tmp_path / "px32"
    assert main(["policy", "export", str(bundle), "--to", "lerobot", "--out", str(export)]) == 0
    cmd = [str(Path(python).parent / "lerobot-train"), f"--dataset.root={recording}",
           "--dataset.repo_id=local/r", "--dataset.video_backend=pyav", f"--policy.path={export}",
           "--policy.push_to_hub=false",
           "--policy.device=cpu", "--wandb.enable=false", "--steps=1", "--batch_size=2", "--num_workers=0",
           f"--output_dir={tmp_path / 'out'}"]  # fmt: skip
    res = run(cmd, env=lerobot_env(tmp_path), timeout=600)
    assert res.returncode != 0
    assert "are not the size the policy was trained at" in res.stderr, res.stderr[-3000:]
    assert "must match the size of tensor" not in res.stderr, res.stderr[-3000:]
