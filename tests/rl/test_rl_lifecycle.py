"""The run lifecycle of ``actlab rl train``: SIGTERM, refused resumes, damaged checkpoints, strict loading,
the base copy, and the config limits."""

from __future__ import annotations

import json
import shutil
import signal

import pytest

import procs
from actlab.errors import ActlabError
from actlab.rl.config import RLConfig, get_preset, replace_keys
from actlab.rl.config import apply_rl_overrides as apply_overrides
from actlab.rl.reward_model import RewardModelConfig
from actlab.rl.train import load_agent, train_rl

# reach, tiny networks: a round is 4 episodes x 30 steps = 120 env steps
SETS = [
    "checkpoint.every=120",
    "sac.random_steps=60",
    "sac.learning_starts=60",
    "sac.hidden=32",
    "sac.batch_size=32",
    "sac.buffer_size=2000",
    "env.num_envs=4",
    "env.max_steps=30",
    "eval.episodes=2",
    "eval.every=0",
]


def _cfg(*extra: str) -> RLConfig:
    return apply_overrides(get_preset("smoke"), [*SETS, *extra])


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A finished run of at least 240 env steps with two checkpoints (episodes that succeed end early, so
    a round may hold fewer than 120 steps)."""
    out = tmp_path_factory.mktemp("rl-life") / "run"
    train_rl(_cfg("total_env_steps=240"), out, progress=False)
    return out


def _copy(run, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(run, dst)
    return dst


def _steps(run) -> list[str]:
    return sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("step_"))


def _last(run) -> int:
    return json.loads((run / "checkpoints" / "last.json").read_text())["step"]


@pytest.mark.timeout(240)
def test_sigterm_writes_a_checkpoint_exits_143_and_resume_continues(tmp_path, capsys):
    """A real SIGTERM to the process running the command; that process is this one (a SIGTERM is caught,
    not a kill: no interpreter start and torch import of its own)."""
    from actlab.cli import main

    run = tmp_path / "run"
    sets = [x for s in [*SETS, "total_env_steps=1000000"] for x in ("--set", s)]
    first_checkpoint = (run / "checkpoints" / "last.json").is_file  # 120 env steps
    with procs.signal_when(signal.SIGTERM, first_checkpoint, 180) as term:
        code = main(["rl", "train", "--preset", "smoke", "--out", str(run), "--json", *sets])
    out, err = capsys.readouterr()
    assert term["sent"] and not term["late"] and not term["stray"], (term, err[-2000:])
    assert code == 143, err[-2000:]
    summary = json.loads(out)
    assert summary["stopped"] == "sigterm"
    stopped_at = _last(run)
    assert stopped_at == summary["env_steps"] >= 120  # the checkpoint of the step it stopped at
    assert "--resume" in err
    assert not [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]  # no .tmp left
    # The resume, in this process too.
    assert main(["rl", "train", "--out", str(run), "--resume", "--set", f"total_env_steps={stopped_at + 120}",
                 "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["env_steps"] > stopped_at
    assert _last(run) > stopped_at


@pytest.mark.timeout(120)
def test_a_resume_with_a_changed_key_is_refused_naming_it(small_run, tmp_path):
    run = _copy(small_run, tmp_path)
    with pytest.raises(ActlabError, match="differs from the run being resumed") as e:
        train_rl(_cfg("total_env_steps=480", "sac.gamma=0.5"), run, resume=True, progress=False)
    assert e.value.field == "sac.gamma"
    assert "0.9 -> 0.5" in str(e.value)
    # budgets and cadence may change
    summary = train_rl(_cfg("total_env_steps=360", "eval.episodes=1"), run, resume=True, progress=False)
    assert summary.env_steps >= 360 and summary.stopped == "completed"


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "name", ["agent.safetensors", "training_state/replay.pt", "training_state/optimizer.pt"]
)
def test_a_checkpoint_with_a_flipped_byte_is_refused_naming_the_file(small_run, tmp_path, name):
    run = _copy(small_run, tmp_path)
    previous, last = _steps(run)[-2:]
    f = run / "checkpoints" / last / name
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))
    with pytest.raises(ActlabError, match="sha256") as e:
        train_rl(_cfg("total_env_steps=480"), run, resume=True, progress=False)
    assert str(e.value.file) == str(f)
    assert "mv " in e.value.fix and previous in e.value.fix  # the previous checkpoint, offered
    if name == "agent.safetensors":  # `rl report` loads agents through the same check
        with pytest.raises(ActlabError, match="sha256"):
            load_agent(run)


@pytest.mark.timeout(120)
def test_a_truncated_state_file_is_an_actlab_error_not_a_torch_traceback(small_run, tmp_path):
    run = _copy(small_run, tmp_path)
    last = run / "checkpoints" / _steps(run)[-1]
    f = last / "training_state" / "rng_rank0.pt"
    f.write_bytes(f.read_bytes()[:100])
    state = last / "training_state" / "state.json"
    meta = json.loads(state.read_text())
    del meta["sha256"]  # as a checkpoint from before the digests: torch's own failure must be named
    state.write_text(json.dumps(meta))
    with pytest.raises(ActlabError, match="torch cannot read it safely") as e:
        train_rl(_cfg("total_env_steps=480"), run, resume=True, progress=False)
    assert str(e.value.file) == str(f)
    assert "weights_only=False: that runs" in e.value.fix


@pytest.mark.timeout(120)
def test_an_agent_without_actor_weights_is_refused_naming_the_missing_keys(small_run, tmp_path):
    from safetensors.torch import load_file, save_file

    name = _steps(small_run)[-1]
    ckpt = tmp_path / name  # a checkpoint directory on its own: no digest to stop it first
    shutil.copytree(small_run / "checkpoints" / name, ckpt)
    tensors = load_file(str(ckpt / "agent.safetensors"))
    kept = {k: v for k, v in tensors.items() if not k.startswith("actor.")}
    save_file(kept, str(ckpt / "agent.safetensors"))
    with pytest.raises(ActlabError, match="do not match") as e:
        load_agent(ckpt)
    assert "missing: actor." in e.value.found


@pytest.mark.timeout(120)
def test_a_leftover_base_copy_that_differs_from_base_is_refused(tiny_base, tmp_path):
    from actlab.rl.train import _load_base

    run = tmp_path / "run"
    other = tmp_path / "other"
    shutil.copytree(tiny_base, other)
    stats = json.loads((other / "stats.json").read_text())
    (other / "stats.json").write_text(json.dumps(stats) + "\n")  # a different file: another bundle
    shutil.copytree(other, run / "base")  # what a failed start with --base other left behind
    cfg = replace_keys(RLConfig(), {"env.task": "pick_place", "base": str(tiny_base)})
    with pytest.raises(ActlabError, match="differs from --base") as e:
        _load_base(cfg, run)
    assert str(e.value.file) == str(run / "base")
    assert f"rm -r {run / 'base'}" in e.value.fix
    shutil.rmtree(run / "base")
    shutil.copytree(tiny_base, run / "base")
    assert _load_base(cfg, run) is not None  # the same bundle: accepted


@pytest.mark.parametrize(
    "item, field, limit",
    [
        ("sac.lr=nan", "sac.lr", "sac.lr <= 1"),
        ("sac.lr=inf", "sac.lr", "sac.lr <= 1"),
        ("time_limit_s=-1", "time_limit_s", "0 <= time_limit_s"),
        ("sac.utd=1e9", "sac.utd", "sac.utd <= 64"),
        ("env.num_envs=100000", "env.num_envs", "env.num_envs <= 256"),
        ("sac.gamma=1", "sac.gamma", "sac.gamma < 1"),
        ("sac.buffer_size=1000000000000", "sac.buffer_size", "sac.buffer_size <= 100000000"),
    ],
)
def test_set_values_are_range_checked_naming_the_limit(item, field, limit):
    with pytest.raises(ActlabError) as e:
        apply_overrides(get_preset("smoke"), [item])
    assert e.value.field == field
    assert limit in e.value.expected


def test_reward_model_values_are_range_checked():
    with pytest.raises(ActlabError) as e:
        apply_overrides(RewardModelConfig(), ["lr=nan"])
    assert e.value.field == "lr"
    with pytest.raises(ActlabError) as e:
        apply_overrides(RewardModelConfig(), ["rollout_envs=100000"])
    assert "256" in e.value.expected


def _exit_code(argv: list[str]) -> int:
    """``actlab ARGV`` in this process (a refusal needs no process of its own): its exit status, also when
    argparse itself refuses (SystemExit)."""
    from actlab.cli import main

    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.timeout(60)
def test_rl_cli_numbers_are_refused_at_parse_time(tmp_path, capsys):
    assert _exit_code(["rl", "report", str(tmp_path), "--episodes", "0", "--out", str(tmp_path / "o")]) == 2
    assert "1 <= N <= 1000000" in capsys.readouterr().err
    argv = ["rl", "train", "--preset", "smoke", "--out", str(tmp_path / "r"), "--set", "sac.utd=nan"]
    assert _exit_code(argv) == 2
    assert "utd" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.timeout(60)
def test_rl_report_refuses_a_directory_it_did_not_write_and_its_own_run(tmp_path, capsys):
    from actlab.cli import main

    run = tmp_path / "run"
    run.mkdir()
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "report.md").write_text("my notes")
    for out, said in ((mine, "did not write: report.md"), (run / "report", "lies inside an input")):
        assert main(["rl", "report", str(run), "--out", str(out)]) == 2
        assert said in capsys.readouterr().err
    assert (mine / "report.md").read_text() == "my notes" and not (run / "report").exists()


@pytest.mark.timeout(60)
def test_reward_model_refuses_a_directory_it_did_not_write_before_any_work(tmp_path):
    from actlab.rl.reward_model import RewardModelConfig, train_reward_model

    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "model.txt").write_text("mine")
    # demos and base need not exist: the refusal comes before they are read
    with pytest.raises(ActlabError, match="not this command's"):
        train_reward_model(RewardModelConfig(), str(tmp_path / "demos"), str(tmp_path / "base"), mine)
    with pytest.raises(ActlabError, match="inside an input"):
        train_reward_model(RewardModelConfig(), str(tmp_path / "demos"), str(tmp_path), tmp_path / "rm")
    assert (mine / "model.txt").read_text() == "mine" and not (tmp_path / "rm").exists()
