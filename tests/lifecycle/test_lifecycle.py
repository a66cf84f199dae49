"""actlab.lifecycle alone: the resume check, the config hash, digests of checkpoint files, stop reasons."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from actlab.errors import ActlabError
from actlab.lifecycle.checkpoints import Checkpoints
from actlab.lifecycle.rundir import (
    RunKind,
    check_fresh,
    config_hash,
    refuse_changes,
    resume_diff,
    resume_start,
)
from actlab.lifecycle.stop import EXIT_SIGTERM, catch_sigterm

FIXTURES = Path(__file__).parents[1] / "fixtures" / "old_runs"
KIND = RunKind(
    "toy run", "actlab toy", "--preset NAME", lambda p: (p / "toy.json").is_file(), ("log.", "steps")
)


def test_the_training_config_hash_is_the_one_the_previous_code_wrote():
    from actlab.training.config import config_from_dict
    from actlab.training.config import config_hash as train_hash

    run = FIXTURES / "train_a8f039d"
    cfg = config_from_dict(json.loads((run / "config.json").read_text()))
    saved = json.loads((run / "checkpoints/step_0000002/training_state/state.json").read_text())
    assert train_hash(cfg) == saved["config_hash"]


def test_resume_diff_names_changed_keys_and_lets_resumable_ones_pass(tmp_path):
    saved = {"optim.lr": 1e-3, "log.every": 1, "steps": 10, "gamma": 0.9}
    now = {"optim.lr": 1e-3, "log.every": 5, "steps": 20, "gamma": 0.5, "new.key": 1}
    diff = resume_diff(saved, now, KIND.resumable)
    assert diff == {"gamma": (0.9, 0.5), "new.key": (None, 1)}
    with pytest.raises(ActlabError, match="differs from the run being resumed") as e:
        refuse_changes(diff, tmp_path / "config.json", fix="f")
    assert e.value.field == "gamma, new.key" and "gamma: 0.9 -> 0.5" in e.value.found
    refuse_changes({}, tmp_path, fix="f")  # nothing changed: no refusal
    assert config_hash(saved, KIND.resumable) == config_hash({**saved, "steps": 99}, KIND.resumable)
    assert config_hash(saved, KIND.resumable) != config_hash({**saved, "gamma": 0.5}, KIND.resumable)


def test_fresh_and_resume_refusals(tmp_path):
    ckpts = Checkpoints(tmp_path, keep_last=1, keep_best=False, command="actlab toy")
    assert check_fresh(tmp_path / "new", ckpts, KIND) == 0
    (tmp_path / "foreign.txt").write_text("x")
    with pytest.raises(ActlabError, match="not an actlab toy run") as e:
        check_fresh(tmp_path, ckpts, KIND)
    assert "foreign.txt" in e.value.found
    with pytest.raises(ActlabError, match="nothing to resume") as e:
        resume_start(tmp_path, ckpts, KIND)
    assert "--preset NAME" in e.value.fix
    (tmp_path / "toy.json").write_text("{}")  # a run that died before its first checkpoint: started over
    assert resume_start(tmp_path, ckpts, KIND) == 0


def test_a_protected_file_and_a_state_file_are_checked_by_digest(tmp_path):
    ckpts = Checkpoints(tmp_path, keep_last=2, keep_best=False, command="actlab toy")

    def files(d: Path) -> None:
        (d / "weights.bin").write_bytes(bytes(range(200)))

    for step in (1, 2):
        ckpts.write(step, files, {"opt": {"x": [1, 2, 3]}}, {"k": step}, None, protect=["weights.bin"])
    assert ckpts.steps() == [1, 2] and not [p for p in ckpts.root.iterdir() if p.name.startswith(".")]
    meta = ckpts.meta(2)
    assert ckpts.load_state(2, "opt", meta) == {"x": [1, 2, 3]}
    ckpts.verify(2, "weights.bin", meta)
    f = ckpts.path(2) / "weights.bin"
    f.write_bytes(bytes(range(1, 201)))
    with pytest.raises(ActlabError, match="sha256") as e:
        ckpts.verify(2, "weights.bin", meta)
    assert (
        str(e.value.file) == str(f) and "actlab toy --resume" in e.value.fix and "step_0000001" in e.value.fix
    )
    pt = ckpts.path(2) / "training_state" / "opt.pt"
    pt.write_bytes(pt.read_bytes()[:-3])
    with pytest.raises(ActlabError, match="sha256") as e:
        ckpts.load_state(2, "opt", meta)
    assert str(e.value.file) == str(pt)


def test_sigterm_sets_the_flag_and_the_time_limit_passes():
    with catch_sigterm() as stop:
        assert stop.reason() is None
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.reason() == "sigterm"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with catch_sigterm(time_limit_s=1e-9) as stop:
        assert stop.reason() == "time_limit"
    assert EXIT_SIGTERM == 143


def test_a_file_where_the_run_directory_goes_is_refused_for_both_trainers(tmp_path):
    from actlab.lifecycle.rundir import check_run_path

    f = tmp_path / "run"
    f.write_text("not a run")
    with pytest.raises(ActlabError, match="is a file, not a run directory"):
        check_run_path(f)
    assert check_run_path(tmp_path / "new") == tmp_path / "new"
