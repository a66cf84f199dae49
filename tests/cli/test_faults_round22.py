"""Faults of our twenty-second planted-fault run (docs/faults.md "Twenty-second fault run"), planted for real:
real commands, real files, the plugin through LeRobot's own command line where the fault was the plugin's.

Each test names the probes of docs/faults_round22_probes.md it plants again and what happened before its
fix.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from procs import finish, started

# ------------------------------------------------------------------ --set keys with an empty part
# every command that takes --set, each with a key it refuses for a stray dot
_EMPTY_PART = [
    (["train", "--preset", "tiny", "--print-config"], "optim..lr=0.1"),
    (["train", "--preset", "tiny", "--print-config"], ".lr=0.1"),
    (["train", "--preset", "tiny", "--print-config"], "=0.1"),
    (["rl", "train", "--preset", "smoke", "--print-config"], "sac..lr=0.1"),
    (["policy", "info", "act"], "policy..dim_model=64"),
    (["bench", "train", "--preset", "tiny", "--steps", "1"], "optim.=0.1"),
    (["rl", "reward-model", "--demos", "D", "--base", "B", "--out", "O"], "steps.=4"),
]


@pytest.mark.parametrize(
    "argv,item",
    _EMPTY_PART,
    ids=["train a..b", "train .b", "train =", "rl a..b", "policy info", "bench", "rm"],
)
def test_a_set_key_with_an_empty_part_is_refused_as_written(argv, item, capsys):
    """UNCLEAR before (set_tr_optim_dotdot_lr, set_tr_dot_lr, set_tr_empty_key, set_rl_dotdot,
    set_pinfo_dotdot, set_bt_dotdot, set_rm_dot ...): `--set optim..lr=0.1` was "unknown config key
    'optim.'", `.lr=0.1` and `=0.1` "unknown config key ''", `steps.=4` "steps is not a section" (found
    "steps", no fix): the item as written was not shown and the stray dot not named. Now: "a --set key has
    an empty part", found the item as written, fix the key with one dot between its parts."""
    from actlab.cli import main

    assert main([*argv, "--set", item]) == 2
    err = capsys.readouterr().err
    assert "a --set key has an empty part" in err, err
    assert f"found:    {item}" in err, err


def test_a_key_given_keys_inside_it_is_refused_with_a_fix(capsys):
    """UNCLEAR before (set_tr_key_as_section): `--set steps.x=1` was "steps is not a section", found
    "steps" (not the item written), no fix."""
    from actlab.cli import main

    assert main(["train", "--preset", "tiny", "--print-config", "--set", "steps.x=1"]) == 2
    err = capsys.readouterr().err
    assert "steps is a key, not a section" in err and "found:    --set steps.x=1" in err, err
    assert "fix:" in err and "--set steps=VALUE" in err, err


@pytest.mark.parametrize("items", [["optim.lr.x=2", "optim.lr=0.5"], ["optim.lr=0.5", "optim.lr.x=2"]])
def test_a_key_and_keys_inside_it_are_refused_in_either_order(items, capsys):
    """SILENT before (set_tr_inside_then_key): `--set optim.lr.x=2 --set optim.lr=0.5` ran with lr 0.5,
    exit 0: the first item dropped without a word (the other order was refused, set_tr_key_and_inside,
    UNCLEAR: no expected, no fix)."""
    from actlab.cli import main

    argv = ["train", "--preset", "tiny", "--print-config"]
    assert main([*argv, "--set", items[0], "--set", items[1]]) == 2
    err = capsys.readouterr().err
    assert "an override sets a key and also keys inside it" in err and "drop one of the two" in err, err


# ------------------------------------------------------------------ the fix of a refused --set key
# commands with --set but no --help-config of their own
_NO_HELP_CONFIG = [
    ["rl", "reward-model", "--demos", "D", "--base", "B", "--out", "O", "--set", "stepz=1"],
    ["policy", "info", "act", "--set", "dim_modle=64"],
    ["policy", "bench", "act", "--steps", "1", "--set", "dim_modle=64"],
    ["bench", "train", "--preset", "tiny", "--steps", "1", "--set", "stepz=1"],
    ["demo", "--out", "O", "--set", "optim.lrr=1"],
    ["find-batch-size", "--preset", "tiny", "--dataset", "REC", "--max", "4", "--set", "stepz=1"],
    [
        "find-batch-size",
        "--preset",
        "tiny",
        "--dataset",
        "REC",
        "--max",
        "4",
        "--set",
        'data={"image_size": 16}',
    ],
]


@pytest.mark.parametrize(
    "argv",
    _NO_HELP_CONFIG,
    ids=["rm", "policy info", "policy bench", "bench train", "demo", "fbs", "fbs sec"],
)
def test_a_refused_set_key_is_not_sent_to_a_help_config_the_command_lacks(argv, tmp_path, capsys, request):
    """UNCLEAR before (hc_rm_unknown, hc_pinfo_unknown, hc_pbench_unknown, hc_bt_unknown, hc_demo_unknown,
    hc_fbs_unknown, hc_fbs_section, set_demo_section, set_bt_section, set_fbs): a refused --set key's fix
    was "run with --help-config to list every key" (or "--help-config lists them") in six commands that have
    no --help-config: the fix failed as printed ("unrecognized arguments: --help-config"). Now it names
    the command that lists the keys (`actlab train --help-config` for the training config, the expected
    line for the reward model's and a bare policy config's), and that command runs."""
    from actlab.cli import main

    argv = [str(tmp_path / a) if a in ("D", "B", "O") else a for a in argv]
    if "REC" in argv:  # find-batch-size reads its dataset before the config
        argv[argv.index("REC")] = str(request.getfixturevalue("rec2"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    fix = err[err.index("fix:") :]
    assert "run with --help-config" not in fix and "; --help-config" not in fix, fix
    assert "`actlab train --help-config`" in fix or "expected line above lists every key" in fix, fix
    if "`actlab train --help-config`" in fix:
        assert main(["train", "--help-config"]) == 0


# ------------------------------------------------------------------ the demo's dataset edited in place
def _edit_an_action(data: Path) -> None:
    """Add 30 degrees to one frame's action in the data file, as a hand edit with pyarrow does."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = next((data / "data").rglob("*.parquet"))
    table = pq.read_table(path)
    actions = table.column("action").to_pylist()
    actions[5] = [x + 30.0 for x in actions[5]]
    i = table.schema.get_field_index("action")
    pq.write_table(
        table.set_column(i, "action", pa.array(actions, type=table.schema.field("action").type)), path
    )


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("edit", ["a row", "another recording"])
def test_a_demo_does_not_reuse_its_run_for_a_dataset_edited_in_place(edit, tmp_path, capsys):
    """SILENT before (dsed_demo_row_sums, dsed_demo_row_nosums, dsed_demo_other_recording): a demo run
    again after its DIR/data was edited in place (an action changed) or replaced by another recording
    reused the dataset, the run trained on the old data, its evaluation and report, exit 0: the report
    described data the run never saw. Now the reuse of the run compares the dataset's identity (what a
    resume compares) and refuses, naming what differs and how to keep the edited dataset."""
    import json
    import shutil

    from actlab.cli import main
    from actlab.demo.pipeline import STATE_FILE

    out = tmp_path / "dm"
    demo = ["demo", "--episodes", "2", "--eval-episodes", "1", "--image-size", "16", "--preset", "tiny"]
    demo += ["--set", "steps=1", "--workers", "1", "--out", str(out)]
    assert main(demo) == 0
    # a demo recorded before the record stage kept its files' sha256 (24th fault run, which refuses these
    # edits at that stage first): the run's dataset identity is what still catches them
    state = json.loads((out / STATE_FILE).read_text())
    del state["record"]["sources"]
    (out / STATE_FILE).write_text(json.dumps(state))
    if edit == "a row":
        _edit_an_action(out / "data")
        (out / "data" / "meta" / "actlab_checksums.json").unlink()  # another tool's edit leaves none
    else:
        other = tmp_path / "other"
        argv = [
            "sim",
            "record",
            "--episodes",
            "3",
            "--image-size",
            "16",
            "--workers",
            "0",
            "--out",
            str(other),
        ]
        assert main(argv) == 0
        shutil.rmtree(out / "data")
        shutil.copytree(other, out / "data")
    capsys.readouterr()
    assert main(demo) == 2
    err = capsys.readouterr().err
    assert "the demo's dataset is not the one its run was trained on" in err, err
    assert "data_sha256" in err and f"move {out / 'data'} aside" in err, err


# ------------------------------------------------------------------ the plugin's --policy.execution=
@pytest.mark.parametrize("fields", [{"execution": ""}, {"execution": "", "execution_latency": 2}])
def test_an_empty_plugin_execution_is_refused_not_run_as_sync(fields):
    """SILENT before (pe_exec_empty): `lerobot-rollout --policy.execution=` (an empty value: a script's
    `--policy.execution=$MODE` with MODE unset) ran sync, exit 0, no word; with a latency the latency was
    checked against sync. Only a field left out takes its default now. The function lerobot-rollout,
    lerobot-eval and lerobot-train reach through the plugin's policy (actlab's side, no lerobot needed)."""
    from actlab.errors import ActlabError
    from actlab.lerobot.runtime import rollout_execution

    with pytest.raises(ActlabError) as e:
        rollout_execution(None, fields)
    assert e.value.field == "--policy.execution" and e.value.found == "'' (an empty value)"
    assert "sync / async" in str(e.value.expected)


def test_an_execution_setting_refused_from_the_exports_config_json_names_that_file(tmp_path):
    """UNCLEAR before (px_cfg_exec_bad): an export whose config.json holds `"execution": "warp"` (an edit,
    or a lerobot-train checkpoint saved with it) was refused as "invalid --policy.execution setting",
    field --policy.execution, no file: the command line had no such flag. Now the file is named, with the
    command-line override and the exported values as the fix; a value the command line gives is refused
    as the flag it is (as before)."""
    from actlab.errors import ActlabError
    from actlab.lerobot.runtime import rollout_execution

    config = tmp_path / "config.json"
    with pytest.raises(ActlabError) as e:
        rollout_execution(None, {"execution": "warp"}, config_file=config, argv=["--policy.path=X"])
    assert e.value.file == str(config) and e.value.field.startswith("execution (the command line has no")
    assert "--policy.execution=VALUE on the command line" in e.value.fix
    with pytest.raises(ActlabError) as e:
        rollout_execution(None, {"execution": "warp"}, config_file=config, argv=["--policy.execution=warp"])
    assert e.value.file is None and e.value.field == "--policy.execution"


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("where", ["command line", "config.json"])
def test_lerobot_rollout_refuses_an_empty_or_edited_policy_execution(where, tmp_path, export):
    """The two rows above through LeRobot's own command line (lerobot-rollout on the plugin's simulated
    arm), in the lerobot venv on this checkout's source: refused in actlab's words before the arm moves;
    an execution edited into config.json names the file."""
    import json
    import shutil

    from procs import lerobot_env, lerobot_python

    python = lerobot_python()
    policy, flags = export, ["--policy.execution="]
    if where == "config.json":
        policy, flags = tmp_path / "edited", []
        shutil.copytree(export, policy)
        config = json.loads((policy / "config.json").read_text())
        (policy / "config.json").write_text(json.dumps({**config, "execution": "warp"}))
    cmd = [str(python.parent / "lerobot-rollout"), "--strategy.type=base", f"--policy.path={policy}"]
    cmd += ["--robot.type=actlab_so101_sim", "--robot.image_size=16", "--robot.max_steps=10"]
    cmd += ["--robot.hold_s=0", f"--robot.output_dir={tmp_path / 'sim'}", "--duration=3"]
    cmd += ["--return_to_initial_position=false", "--task=pick", *flags]
    with started(cmd, env=lerobot_env(tmp_path), cwd=tmp_path) as proc:
        _, err = finish(proc, 240)
    assert proc.returncode != 0, err[-2000:]
    if where == "config.json":
        assert "invalid execution setting in the export's config.json" in err, err[-2000:]
        assert f"file:     {policy / 'config.json'}" in err, err[-2000:]
    else:
        assert "invalid --policy.execution setting" in err and "'' (an empty value)" in err, err[-2000:]
    assert not (tmp_path / "sim" / "episodes.jsonl").exists()


# ------------------------------------------------------------------ the simulated arm's episode logs
@pytest.mark.parametrize(
    "case", ["log a directory", "log in /proc", "log a user's file", "output_dir a file"]
)
def test_the_sim_robot_checks_its_episode_logs_before_the_first_episode(case, tmp_path):
    """TRACEBACK before (rb_log_dir, rb_log_ro, rb_outdir_file): `lerobot-rollout` on actlab_so101_sim
    with --robot.log_file a directory or in /proc, or --robot.output_dir a file, ran an episode and ended
    in IsADirectoryError / FileNotFoundError / FileExistsError's traceback. LOSS before (rb_log_existing):
    --robot.log_file=<a user's notes> got JSON lines appended, exit 0 (the env's --env.log_file refused
    that since the 17th run; the robot's did not). Now the robot (``SimEpisodes``, built at connect)
    refuses each before any episode, naming the flag, and leaves the user's file as it was."""
    from actlab.errors import ActlabError
    from actlab.lerobot.runtime import SimEpisodes

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    kwargs, flag = {
        "log a directory": ({"log_file": tmp_path}, "--robot.log_file"),
        "log in /proc": ({"log_file": "/proc/actlab_episodes.jsonl"}, "--robot.log_file"),
        "log a user's file": ({"log_file": notes}, "--robot.log_file"),
        "output_dir a file": ({"out_dir": notes}, "--robot.output_dir"),
    }[case]
    with pytest.raises(ActlabError) as e:
        SimEpisodes(image_size=16, max_steps=5, **kwargs)
    assert e.value.field == flag, str(e.value)
    assert notes.read_text() == "my notes\n"


def test_the_sim_env_refuses_an_episode_log_no_file_can_be_written_to():
    """TRACEBACK before (le_log_proc): `lerobot-eval --env.type=actlab_so101 --env.log_file=/proc/x.jsonl`
    ran its first episode and ended in FileNotFoundError's traceback: the env's check refused a directory
    and a file it did not write, not a place where no file can be made. Now the env opens it when built."""
    from actlab.errors import ActlabError
    from actlab.lerobot.sim_env import LeRobotSimEnv

    with pytest.raises(ActlabError) as e:
        LeRobotSimEnv(image_size=16, max_steps=5, log_file="/proc/actlab_episodes.jsonl")
    assert e.value.problem == "cannot write the episode log" and e.value.field == "log_file"


# ------------------------------------------------------------------ an export's config.json edited
def _edited_export(export: Path, tmp_path: Path, **changes) -> Path:
    """A copy of ``export`` whose config.json has ``changes`` (``actlab_config`` entries merged into it)."""
    import json
    import shutil

    out = tmp_path / "edited"
    shutil.copytree(export, out)
    config = json.loads((out / "config.json").read_text())
    config["actlab_config"].update(changes.pop("actlab_config", {}))
    (out / "config.json").write_text(json.dumps({**config, **changes}))
    return out


def test_an_unknown_actlab_config_key_in_an_export_is_refused(tmp_path, export, capsys):
    """SILENT before (x_imp_cfg_inner_unknown, px_cfg_inner_unknown): an export whose config.json's
    actlab_config holds a key the shipped bundle's config does not have (an edit, a typo: `chunk_sise`)
    was imported (and loaded by lerobot-eval) with exit 0, the key dropped without a word; an edit of a
    known key was refused. Now the unknown key is refused too, with a did-you-mean (the check LeRobot's
    load and `actlab policy import` share)."""
    from actlab.cli import main

    edited = _edited_export(export, tmp_path, actlab_config={"chunk_sise": 20})
    assert main(["policy", "import", str(edited), "--out", str(tmp_path / "bundle")]) == 2
    err = capsys.readouterr().err
    assert "unknown actlab_config key 'chunk_sise' (did you mean 'chunk_size'?)" in err, err
    assert not (tmp_path / "bundle").exists()


def test_import_says_how_the_export_was_set_to_execute(tmp_path, export, capsys):
    """SILENT before (x_imp_cfg_exec_blend, x_imp_cfg_exec_lat_bad): importing an export (or a lerobot-train
    checkpoint) whose config.json runs the policy with `execution: blend, execution_latency: 2` wrote a
    bundle without a word: a bundle holds no execution, and `actlab eval BUNDLE` then measured sync. Now
    the import says so, with the eval flags that run the same execution."""
    from actlab.cli import main

    edited = _edited_export(export, tmp_path, execution="blend", execution_latency=2)
    out = tmp_path / "bundle"
    assert main(["policy", "import", str(edited), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"actlab eval {out} --execution blend --latency 2" in said, said


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_lerobots_load_of_an_export_without_its_bundle_says_what_is_missing(tmp_path, export):
    """UNCLEAR before (px_nobundle, lev_nobundle): lerobot-eval / lerobot-rollout (and the bridge's child)
    of an export whose actlab_bundle/ was removed said "policy bundle directory not found", fix "check
    the path": the path given was the export, which exists. `actlab policy import` said what is missing
    since the 19th run; the plugin's load now says the same (one check). Run in the lerobot venv on this
    checkout's source, through the load LeRobot's commands make."""
    import shutil

    from procs import lerobot_policy_call

    broken = tmp_path / "broken"
    shutil.copytree(export, broken)
    shutil.rmtree(broken / "actlab_bundle")
    code = (
        "import sys\n"
        "from lerobot_policy_actlab.modeling_actlab import ActlabActPolicy\n"
        "ActlabActPolicy.from_pretrained(sys.argv[1])\n"
    )
    rc, err = lerobot_policy_call(code, broken, tmp_path)
    assert rc != 0, err[-2000:]
    assert "keeps its weights in actlab_bundle/, which is missing: nothing to load" in err, err[-2000:]
    assert "actlab policy export BUNDLE --to lerobot" in err, err[-2000:]
