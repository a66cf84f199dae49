"""Faults of our fifteenth planted-fault run (docs/faults.md "Fifteenth fault run"), planted for real:
the real parser, real files, bundles, exports, frame stores and demo state files, real processes.

Each test names the probes of docs/faults_round15_probes.md it plants again and what the command did
before its fix. The native LeRobot ACT rows read tests/cli/data/lerobot_act_16px: the config and
processor files of a 2-step `lerobot-train --policy.type=act` checkpoint (lerobot 0.6.1), without its
weights (the edited config is refused before they are read).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from actlab.cli import main
from actlab.errors import ActlabError

LEROBOT_ACT = Path(__file__).parent / "data" / "lerobot_act_16px"


def _edit_json(path: Path, fn) -> None:
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data, indent=2))


# ------------------------------------------------------------------ a config value of the wrong type
@pytest.mark.timeout(60)
def test_import_refuses_a_lerobot_config_value_of_the_wrong_type(tmp_path, capsys):
    """TRACEBACK before (x10): `policy import` of a LeRobot ACT whose config.json says dim_model "x" was
    ACTConfig's TypeError ('>=' not supported between str and int)."""
    src = shutil.copytree(LEROBOT_ACT, tmp_path / "act")
    _edit_json(src / "config.json", lambda d: d.update(dim_model="x"))
    assert main(["policy", "import", str(src), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "config.json holds a value actlab cannot use" in err and "field:    dim_model" in err
    assert "Traceback" not in err and not (tmp_path / "b").exists()


@pytest.mark.timeout(60)
def test_init_from_a_bundle_config_value_of_the_wrong_type_is_named(tmp_path, bundle, tiny_dataset, capsys):
    """TRACEBACK before (ix01): `train --init-from B` of a bundle whose config.json says dim_model "x" was
    int()'s / a comparison's traceback."""
    b = shutil.copytree(bundle, tmp_path / "b")
    _edit_json(b / "config.json", lambda d: d.update(dim_model="x"))
    args = ["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--init-from", str(b)]
    assert main([*args, "--set", "steps=1", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "the bundle's config.json holds a value actlab cannot use" in err and "dim_model" in err


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("probe", "value"), [("lp1", "x"), ("lp6", "NaN")])
def test_the_plugin_refuses_an_actlab_config_value_of_the_wrong_type(tiny_dataset, probe, value):
    """TRACEBACK before (lp1, lp6): `lerobot-train --policy.actlab_config='{"dim_model": "x"}'` (or NaN)
    ended in _coerce's ValueError traceback."""
    from actlab.lerobot.train_support import build_policy_for_dataset

    with pytest.raises(ActlabError) as e:
        build_policy_for_dataset({"type": "act", "dim_model": value}, tiny_dataset)
    assert e.value.field == "policy.actlab_config.dim_model" and "expected an integer" in str(e.value.found)


# ------------------------------------------------------------------ a LeRobot export's type edited
@pytest.mark.timeout(60)
def test_import_refuses_an_export_whose_type_was_edited(tmp_path, bundle, capsys):
    """SILENT before (q3): an export's config.json type edited to actlab_act_relative (act weights) was
    imported as act without a word (LeRobot would load it as the other type)."""
    x = tmp_path / "x"
    assert main(["policy", "export", str(bundle), "--to", "lerobot", "--out", str(x)]) == 0
    _edit_json(x / "config.json", lambda d: d.update(type="actlab_act_relative"))
    assert main(["policy", "import", str(x), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "declares another policy type" in err and "field:    type" in err and "actlab_act'" in err
    from actlab.lerobot.runtime import check_export_config

    check_export_config({"type": "actlab_act"}, {"type": "act"}, x / "config.json")  # the intact one


# ------------------------------------------------------------------ a read that was blamed on a write
@pytest.mark.timeout(60)
def test_an_unreadable_checkpoint_file_is_said_to_need_read_access(tmp_path, run_dir):
    """UNCLEAR before (u17; u13 the same reader): `train --resume` of a run whose checkpoint state.json the
    user may not read: "user root needs write access there ... or choose an --out on another disk", the
    run directory named. Run as a process without the capability that lets root read any file."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to drop the read-any-file capability")
    run = shutil.copytree(run_dir, tmp_path / "run")
    state = sorted(run.glob("checkpoints/step_*/training_state/state.json"))[-1]
    state.chmod(0)
    cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-m", "actlab.cli"]
    cmd += ["train", "--out", str(run), "--resume", "--set", "steps=3"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=50)
    assert p.returncode == 2, p.stderr
    assert "cannot read state.json" in p.stderr and f"file:     {state}" in p.stderr
    assert "needs read access" in p.stderr and "write access" not in p.stderr


# ------------------------------------------------------------------ a dataset's info.json not a file
@pytest.mark.timeout(60)
def test_an_info_json_that_is_no_file_is_named(tmp_path, recording, capsys):
    """UNCLEAR before (u07): a recording whose meta/info.json is a FIFO (or a link to /dev/zero) was "not a
    dataset ... found: the output of actlab sim record"."""
    ds = shutil.copytree(recording, tmp_path / "ds")
    (ds / "meta" / "info.json").unlink()
    os.mkfifo(ds / "meta" / "info.json")
    assert main(["data", "info", str(ds)]) == 2
    err = capsys.readouterr().err
    assert "meta/info.json is not a regular file" in err and "found:    a FIFO" in err


# ------------------------------------------------------------------ a frame store's store.json edited
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("probe", "edit"),
    [
        ("fs09", lambda d, k: d["keys"][k].update(chunk_frames=0)),
        ("fs06", lambda d, k: d["keys"].pop(k)),
    ],
)
def test_a_frame_store_whose_store_json_was_edited_is_rebuilt(tmp_path, tiny_dataset, capsys, probe, edit):
    """TRACEBACK before (fs09: chunk_frames 0, a ZeroDivisionError); UNCLEAR before (fs06: a camera removed
    from store.json: "not in the frame store" at every run, its fix `actlab data cache` reusing the store
    as it was). Both are a damaged store now: said and rebuilt."""
    args = ["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--set", "steps=1"]
    args += ["--set", f"data.cache_dir={tmp_path / 'cache'}", "--set", "log.progress=false"]
    assert main([*args, "--out", str(tmp_path / "r1")]) == 0
    (meta,) = (tmp_path / "cache").glob("*/store.json")
    _edit_json(meta, lambda d: edit(d, next(iter(d["keys"]))))
    capsys.readouterr()
    assert main([*args, "--out", str(tmp_path / "r2")]) == 0
    assert "rebuilding" in capsys.readouterr().err


# ------------------------------------------------------------------ the demo's state file
def _state(out: Path):
    """A demo directory with a finished eval stage, written by the demo's own state writer."""
    from actlab.demo import pipeline as p

    (out / "eval" / "sweep").mkdir(parents=True)
    sweep = {"checkpoints": [{"name": "step_4", "summary": {"successes": 0, "episodes": 2}}]}
    result = {"best": "step_4", "best_path": str(out.resolve() / "run/checkpoints/step_4"), "sweep": sweep}
    settings = {"episodes": 2}
    p._finish_stage(out, {}, "eval", settings, result, 1.0)
    return p, settings, [out / "eval" / "sweep"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("probe", "edit"),
    [
        ("ds02", lambda e: e.pop("result")),
        ("ds03", lambda e: e["result"]["sweep"]["checkpoints"][0]["summary"].update(successes=2)),
    ],
)
def test_the_demo_reuses_only_the_result_its_stage_wrote(tmp_path, capsys, probe, edit):
    """TRACEBACK before (ds02: the eval result removed from demo_state.json, a KeyError; ds03: a success
    count edited, matplotlib's "yerr must not contain negative values"). The stage runs again, said."""
    p, settings, outputs = _state(tmp_path)
    assert p._stage_current(p._load_state(tmp_path), "eval", settings, outputs, tmp_path)  # intact: reused
    _edit_json(tmp_path / p.STATE_FILE, lambda d: edit(d["eval"]))
    assert not p._stage_current(p._load_state(tmp_path), "eval", settings, outputs, tmp_path)
    assert "result was changed since the stage wrote it (edited?)" in capsys.readouterr().err


@pytest.mark.timeout(30)
def test_a_moved_demo_reports_its_own_checkpoint(tmp_path):
    """SILENT before (mv2, ds01): a demo directory moved or copied and run again reported (its headline,
    summary.json's best_checkpoint) the checkpoint of the directory it was copied from."""
    p, settings, _ = _state(tmp_path / "a")
    (tmp_path / "a").rename(tmp_path / "b")
    state = p._load_state(tmp_path / "b")
    outputs = [tmp_path / "b" / "eval" / "sweep"]
    assert p._stage_current(state, "eval", settings, outputs, tmp_path / "b")
    assert state["eval"]["result"]["best_path"] == str((tmp_path / "b").resolve() / "run/checkpoints/step_4")
    p._finish_stage(tmp_path / "b", state, "realtime", {}, {}, 1.0)  # the next stage's write keeps it current
    assert p._stage_current(p._load_state(tmp_path / "b"), "eval", settings, outputs, tmp_path / "b")
