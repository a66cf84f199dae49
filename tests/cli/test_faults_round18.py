"""Faults of our eighteenth planted-fault run (docs/faults.md "Eighteenth fault run"), planted for real:
the real parser and commands, real .npy sources, a real sim recording with its info.json edited, real
evaluation records, a real LeRobot export of the plugin with its processor files edited; the plugin's
config checks and its lerobot-train / lerobot-eval rows run in the lerobot venv on this checkout's source
(skipped without it; the ones that start lerobot processes are marked slow).

Each test names the probes of docs/faults_round18_probes.md it plants again and what happened before its
fix.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from actlab.cli import main
from actlab.errors import ActlabError
from procs import lerobot_env

LEROBOT_PYTHON = Path(os.environ.get("ACTLAB_LEROBOT_PYTHON", "/work/lerobot-venv/bin/python"))
LEROBOT_BIN = LEROBOT_PYTHON.parent


def _edit_json(path: Path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def _needs_lerobot() -> None:
    if not LEROBOT_PYTHON.is_file():
        pytest.skip("needs the lerobot venv ($ACTLAB_LEROBOT_PYTHON)")


# ------------------------------------------------------------------ data convert
def _npy_source(root: Path, frames_as_list: bool = False) -> Path:
    rng = np.random.default_rng(0)
    obs = {
        "image_left": rng.integers(0, 255, (8, 16, 16, 3), dtype=np.uint8),
        "image_right": rng.integers(0, 255, (8, 16, 16, 3), dtype=np.uint8),
        "state": rng.standard_normal((8, 6)).astype(np.float32),
    }
    root.mkdir(parents=True)
    if frames_as_list:
        frames = np.empty(8, dtype=object)
        frames[:] = [{k: v[i] for k, v in obs.items()} for i in range(8)]
        np.save(root / "observations.npy", frames, allow_pickle=True)
    else:
        np.save(root / "observations.npy", np.array(obs, dtype=object), allow_pickle=True)
    np.save(root / "actions.npy", rng.standard_normal((8, 6)).astype(np.float32))
    np.save(root / "rollout_length.npy", np.array([4, 4]))
    return root


def _cut_actions(root: Path) -> None:
    data = (root / "actions.npy").read_bytes()
    (root / "actions.npy").write_bytes(data[: len(data) // 2])


def _frame_without_state(root: Path) -> None:
    frames = np.load(root / "observations.npy", allow_pickle=True)
    frames[5] = {k: v for k, v in frames[5].items() if k != "state"}
    np.save(root / "observations.npy", frames, allow_pickle=True)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("probe", "as_list", "edit", "said"),
    [
        ("cv15", False, _cut_actions, "the .npy file is cut short or damaged"),
        ("cv18", True, _frame_without_state, "frame 5 of the observations has other keys than frame 0"),
    ],
)
def test_data_convert_names_a_cut_or_uneven_source(tmp_path, capsys, probe, as_list, edit, said):
    """TRACEBACK before (cv15: actions.npy cut to half its bytes: numpy's "ValueError: Failed to read all
    data for array"; cv18: observations.npy as a list of frame dicts, one frame without its state:
    KeyError 'state'). Now the file, the frame or field, and the fix; nothing written."""
    src = _npy_source(tmp_path / "src", frames_as_list=as_list)
    edit(src)
    out = tmp_path / "out"
    assert main(["data", "convert", str(src), "--out", str(out), "--codec", "h264"]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and "fix:" in err and not out.exists()


# ------------------------------------------------------------------ policy doctor --sweep
@pytest.fixture(scope="module")
def sweep(tmp_path_factory, bundle) -> Path:
    """A real evaluation record of the bundle (1 episode of 5 steps)."""
    out = tmp_path_factory.mktemp("sweep") / "eval"
    argv = ["eval", str(bundle), "--episodes", "1", "--max-steps", "5", "--workers", "1", "--out", str(out)]
    assert main(argv) == 0
    return out / "results.json"


def _twice(d):
    d["checkpoints"].append(dict(d["checkpoints"][0]))


def _renamed(d):
    d["checkpoints"][0]["name"] = "step_0000003"


def _a_dict(d):
    d["checkpoints"] = {"a": 1}


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    ("probe", "edit", "field"),
    [
        ("pd09", _twice, "checkpoints[1]"),
        ("pd19", _renamed, "checkpoints[0].name"),
        ("pd18", _a_dict, "checkpoints"),
    ],
)
def test_policy_doctor_refuses_a_damaged_sweep_record(
    tmp_path, bundle, tiny_dataset, sweep, capsys, probe, edit, field
):
    """SILENT before (pd09: a sweep record holding its checkpoint twice: compared with itself, "not
    clearly behind"; pd19: the entry's name edited: "the sweep's best is step_0000003", a checkpoint whose
    path was another); UNCLEAR before (pd18: checkpoints a dict: "TypeError: string indices must be
    integers"). Now "the evaluation record is damaged", the field (eval compare's reading)."""
    record = tmp_path / "results.json"
    shutil.copy(sweep, record)
    _edit_json(record, edit)
    argv = ["policy", "doctor", str(bundle), "--dataset", str(tiny_dataset), "--max-episodes", "1"]
    assert main([*argv, "--sweep", str(record)]) == 2
    err = capsys.readouterr().err
    assert "the evaluation record is damaged" in err and f"field:    {field}\n" in err


# ------------------------------------------------------------------ the sim recorder's block
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("probe", "key", "value", "field"),
    [
        ("ds01", "episode_seeds", [0], "actlab_sim.episode_seeds"),
        ("ds02", "episode_seeds", [0, 0], "actlab_sim.episode_seeds"),
        ("ds06", "episode_seeds", [0, 1, 2, 3], "actlab_sim.episode_seeds"),
        ("ds03", "task", "so101_bogus", "actlab_sim.task"),
        ("ds04", "task", "", "actlab_sim.task"),
    ],
)
def test_a_sim_record_of_other_seeds_or_task_is_damaged(tmp_path, rec2, capsys, probe, key, value, field):
    """SILENT before (ds01, ds02: episode_seeds shorter than the episodes, or one seed repeated: the
    doctor said 0 errors, and eval of a policy trained on it ran on its training scenes 2 and 3 without a
    word); UNCLEAR before (ds06: more seeds than episodes: eval refused seeds never trained on as
    training scenes; ds03, ds04: a task of no such name, or none: eval's warning named it with the fix
    "--task so101_bogus"). Now the block is damaged: the doctor's sim_record error, and train refuses."""
    data = tmp_path / "data"
    shutil.copytree(rec2, data)
    (data / "meta/actlab_checksums.json").unlink(missing_ok=True)
    _edit_json(data / "meta/info.json", lambda d: d["actlab_sim"].update({key: value}))
    assert main(["data", "doctor", str(data)]) == 1
    out = capsys.readouterr()
    assert "sim_record" in out.out + out.err and f"field:    {field}" in out.out + out.err
    argv = ["train", "--preset", "tiny", "--dataset", str(data), "--out", str(tmp_path / "run")]
    assert main([*argv, "--set", "steps=1"]) == 2
    assert "the sim recorder's record of the episodes is damaged" in capsys.readouterr().err


@pytest.mark.timeout(90)
def test_curate_keeps_the_sim_record_of_the_kept_episodes(tmp_path, rec2, capsys):
    """SILENT before (cu01: `data curate` wrote its copy without the actlab_sim block: a policy trained on
    the copy was evaluated on its training scenes, `eval --seed 0`, exit 0). Now the copy holds the kept
    episodes' seeds, and the evaluation refuses them."""
    seeds = json.loads((rec2 / "meta/info.json").read_text())["actlab_sim"]["episode_seeds"]
    out = tmp_path / "cur"
    assert main(["data", "curate", str(rec2), "--out", str(out), "--drop-episodes", "0"]) == 0
    block = json.loads((out / "meta/info.json").read_text())["actlab_sim"]
    assert block == {"task": "so101_pick_place", "episode_seeds": [seeds[1]]}
    run = tmp_path / "run"
    argv = ["train", "--preset", "tiny", "--dataset", str(out), "--out", str(run), "--set", "steps=1"]
    argv += ["--set", "data.val_fraction=0"]
    assert main([*argv, "--set", "log.progress=false"]) == 0
    capsys.readouterr()
    ckpt = run / "checkpoints/step_0000001"
    assert main(["eval", str(ckpt), "--episodes", "1", "--max-steps", "2", "--seed", str(seeds[1])]) == 2
    assert "start from scenes the policy was trained on" in capsys.readouterr().err


# ------------------------------------------------------------------ bench counts at parse time
@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("probe", "argv", "option"),
    [
        ("bn05", ["bench", "data", "DATA", "--seconds", "0"], "--seconds"),
        ("bn07", ["bench", "data", "DATA", "--action-horizon", "0"], "--action-horizon"),
        ("bn08", ["bench", "eval", "expert", "--episodes", "0"], "--episodes"),
        ("bn09", ["bench", "eval", "expert", "--max-steps", "0"], "--max-steps"),
    ],
)
def test_bench_counts_of_zero_are_refused_by_their_option(tiny_dataset, capsys, probe, argv, option):
    """UNCLEAR before (bn05: "--workers must be >= 0 and --seconds/--baseline-seconds > 0", found (2, 0.0,
    1.0); bn07: "batch size and action horizon must be >= 1", found (2, 0); bn08/bn09: "episodes must be
    an integer >= 1" under a config field's name, no fix). Now argparse names the option and its floor."""
    argv = [str(tiny_dataset) if a == "DATA" else a for a in argv]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and f"argument {option}: expected a number >=" in capsys.readouterr().err


@pytest.mark.timeout(30)
def test_act_relative_names_the_rtc_delay_a_short_chunk_needs(tiny_dataset, tmp_path, capsys):
    """UNCLEAR before (lt05: `lerobot-train --policy.type=actlab_act_relative` with chunk_size 10, and
    `actlab train --set policy.type=act_relative --set policy.chunk_size=10`: "invalid value for
    rtc_max_delay", found 10, a field never set, no fix). Now the fix names both and a value that fits."""
    argv = ["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(tmp_path / "r")]
    sets = ["policy.type=act_relative", "policy.chunk_size=10", "policy.n_action_steps=4"]
    assert main([*argv, *(x for s in sets for x in ("--set", s))]) == 2
    assert "fix:      set rtc_max_delay below chunk_size, e.g. rtc_max_delay=3" in capsys.readouterr().err


# ------------------------------------------------------------------ the plugin's export files (actlab side)
def _pre(d):
    return d / "policy_preprocessor.json"


def _mean_std_state(d):
    import torch
    from safetensors.torch import save_file

    save_file(
        {"observation.state.mean": torch.ones(6), "observation.state.std": torch.ones(6)}, str(d / "s.st")
    )
    _edit_json(_pre(d), lambda j: j["steps"][3].update(state_file="s.st"))
    _edit_json(_pre(d), lambda j: j["steps"][3]["config"]["norm_map"].update(STATE="MEAN_STD"))


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("probe", "edit", "said"),
    [
        ("ev01", _mean_std_state, "would normalize a second time"),
        (
            "ev04",
            lambda d: _edit_json(_pre(d), lambda j: j["steps"][3].update(state_file="x.st")),
            "state file",
        ),
        (
            "le09",
            lambda d: _edit_json(_pre(d), lambda j: j["steps"].pop(3)),
            "has no normalizer_processor step",
        ),
        (
            "le16",
            lambda d: _edit_json(d / "policy_postprocessor.json", lambda j: j["steps"].pop(0)),
            "unnormalizer",
        ),
        ("ev06", lambda d: _pre(d).write_text("{not json"), "not valid JSON"),
        ("ev11", lambda d: _pre(d).unlink(), "not found"),
    ],
)
def test_an_edited_processor_file_of_a_plugin_export_is_refused(tmp_path, export, probe, edit, said):
    """SILENT before (ev01, ev03, ro01: the preprocessor's normalizer edited to MEAN_STD with a state file
    of statistics: lerobot-eval and lerobot-rollout normalized the state, then actlab's policy again, exit
    0); TRACEBACK before (ev04, le08: a state file named that is not there: FileNotFoundError; le09, le16,
    ft02: the (un)normalizer step removed: LeRobot's "KeyError: Override keys ... do not match any step"
    on --resume / --policy.path; ev06: not JSON: JSONDecodeError; ev11: deleted: FileNotFoundError).
    check_export_processors, which the plugin's from_pretrained calls before LeRobot reads the files,
    names the file, the step and the fix."""
    from actlab.lerobot.runtime import check_export_processors

    copy = tmp_path / "export"
    shutil.copytree(export, copy)
    check_export_processors(copy)  # as exported: passes
    edit(copy)
    with pytest.raises(ActlabError) as e:
        check_export_processors(copy)
    assert said in str(e.value) and "export again" in str(e.value)


@pytest.mark.timeout(30)
def test_a_loaded_export_names_a_command_line_change_as_such(export):
    """UNCLEAR before (ft05-ft07, ev13: `lerobot-train --policy.path=EXPORT --policy.chunk_size=20` (or
    n_action_steps, or --policy.actlab_config), `lerobot-eval ... --policy.n_action_steps=20`: "the
    export's config.json disagrees", fix "restore config.json", a file nobody edited). Now the option is
    named, with "drop --policy.chunk_size"; an edit of the file itself is said as before."""
    from actlab.lerobot.runtime import check_export_config

    written = json.loads((export / "config.json").read_text())
    model = written["actlab_config"]
    top = {**written, "chunk_size": model["chunk_size"] + 5}
    with pytest.raises(ActlabError) as e:
        check_export_config(top, model, export / "config.json", written)
    assert "cannot be changed when it is loaded" in str(e.value) and "drop --policy.chunk_size" in str(
        e.value
    )
    with pytest.raises(ActlabError) as e:  # the file edited: "restore config.json"
        check_export_config(top, model, export / "config.json", top)
    assert "restore config.json" in str(e.value)


@pytest.mark.timeout(30)
def test_an_execution_setting_is_not_said_as_lerobot_rollout(bundle):
    """UNCLEAR before (lt14-lt17, ev07-ev10: `lerobot-train` / `lerobot-eval --policy.execution=bogus`,
    `--policy.execution_latency=-1` ...: "error: lerobot-rollout --policy.execution: ...", another
    command). Now "invalid --policy.execution setting", the same in every command."""
    from actlab.lerobot.runtime import rollout_execution
    from actlab.policies import load_policy

    policy = load_policy(bundle)
    with pytest.raises(ActlabError) as e:
        rollout_execution(policy, {"execution": "bogus"})
    assert e.value.problem.startswith("invalid --policy.execution setting") and "lerobot-rollout" not in str(
        e.value
    )


# ------------------------------------------------------------------ the plugin's config (lerobot venv)
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("probe", "kwargs", "said"),
    [
        ("lt19", {"actlab_config": {"type": "act_relative"}}, "names another policy type than --policy.type"),
        ("lt21", {"actlab_config": {"chunk_size": "x"}}, "--policy.actlab_config chunk_size"),
    ],
)
def test_the_plugin_config_refuses_an_actlab_config_it_would_not_run(tmp_path, probe, kwargs, said):
    """SILENT before (lt19: `--policy.type=actlab_act --policy.actlab_config={"type": "act_relative"}`
    trained an act, exit 0); TRACEBACK before (lt21: actlab_config chunk_size "x": int()'s ValueError in
    action_delta_indices). Run in the lerobot venv on this checkout's source."""
    _needs_lerobot()
    code = (
        "from lerobot_policy_actlab.configuration_actlab import ActlabActConfig as C\n"
        f"C(**{kwargs!r}).action_delta_indices"
    )
    p = subprocess.run(
        [str(LEROBOT_PYTHON), "-c", code],
        capture_output=True,
        text=True,
        timeout=100,
        env=lerobot_env(tmp_path),
    )
    assert p.returncode != 0 and said in p.stderr and "ValueError" not in p.stderr, p.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_lerobot_eval_and_train_refuse_an_edited_plugin_export(tmp_path, export, tiny_dataset, rec2):
    """The plugin rows through LeRobot's own scripts: ev01 (SILENT: lerobot-eval of an export whose
    preprocessor normalizes with MEAN_STD statistics ran, exit 0), ft02 (TRACEBACK: a fine-tune from an
    export without its normalizer step: LeRobot's KeyError), lt10 (SILENT: `--policy.chunk_size=30`, its
    default, beside actlab_config chunk_size 10: trained with 10 without a word)."""
    _needs_lerobot()
    env = lerobot_env(tmp_path)
    ev01 = tmp_path / "ev01"
    shutil.copytree(export, ev01)
    _mean_std_state(ev01)
    evals = [
        "--env.type=actlab_so101",
        "--env.image_size=16",
        "--env.episode_length=5",
        "--eval.n_episodes=1",
    ]
    evals += ["--eval.batch_size=1", "--policy.device=cpu", f"--output_dir={tmp_path / 'e'}"]
    p = subprocess.run(
        [str(LEROBOT_BIN / "lerobot-eval"), f"--policy.path={ev01}", *evals],
        capture_output=True, text=True, timeout=280, env=env,
    )  # fmt: skip
    assert p.returncode != 0 and "would normalize a second time" in p.stderr, p.stderr[-3000:]
    ft02 = tmp_path / "ft02"
    shutil.copytree(export, ft02)
    _edit_json(_pre(ft02), lambda j: j["steps"].pop(3))
    train = ["--policy.push_to_hub=false", "--policy.device=cpu", "--wandb.enable=false", "--batch_size=2"]
    train += ["--num_workers=0", f"--dataset.root={rec2}", "--dataset.repo_id=local/sim", "--steps=1"]
    train += ["--dataset.video_backend=pyav"]
    tune = [f"--policy.path={ft02}", *train, f"--output_dir={tmp_path / 't'}"]
    p = subprocess.run(
        [str(LEROBOT_BIN / "lerobot-train"), *tune],
        capture_output=True, text=True, timeout=280, env=env,
    )  # fmt: skip
    assert p.returncode != 0 and "has no normalizer_processor step" in p.stderr, p.stderr[-3000:]
    assert "Override keys" not in p.stderr
    ac = json.dumps({"vision_backbone": "cnn_small", "pretrained_backbone_weights": None, "chunk_size": 10,
                     "n_action_steps": 4, "dim_model": 32, "n_heads": 2, "dim_feedforward": 64})  # fmt: skip
    argv = ["--policy.type=actlab_act", f"--policy.actlab_config={ac}", "--policy.chunk_size=30", *train]
    p = subprocess.run(
        [str(LEROBOT_BIN / "lerobot-train"), *argv, f"--output_dir={tmp_path / 'lt10'}"],
        capture_output=True, text=True, timeout=280, env=env,
    )  # fmt: skip
    assert p.returncode != 0 and "--policy.chunk_size and --policy.actlab_config disagree" in p.stderr


def test_the_sim_task_names_of_datasets_are_the_sims():
    """datasets.format.SIM_TASKS (read by the recorder-block check, below the sim) names the sim's tasks."""
    from actlab.datasets.format import SIM_TASKS
    from actlab.sim.tasks import TASKS

    assert sorted(SIM_TASKS) == sorted(TASKS)
