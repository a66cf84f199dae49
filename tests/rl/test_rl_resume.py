"""Kill -9 during RL training, then --resume: the run ends exactly where an uninterrupted one does."""

from __future__ import annotations

import json
import signal
import time

import pytest

import procs
from actlab.errors import ActlabError
from actlab.lifecycle.metrics_log import read_metrics
from actlab.rl.config import apply_rl_overrides as apply_overrides
from actlab.rl.config import get_preset
from actlab.rl.train import train_rl

# A run of a few seconds that checkpoints often: reach, tiny networks.
SETS = [
    "total_env_steps=1200",
    "checkpoint.every=400",
    "sac.random_steps=200",
    "sac.learning_starts=200",
    "sac.hidden=32",
    "sac.batch_size=64",
    "env.num_envs=4",
    "env.max_steps=30",
    "eval.episodes=4",
    "eval.every=800",
]


def _cmd(out, *extra):
    args = ["rl", "train", "--out", out, "--json", *extra]
    return procs.cli(*args, *[x for s in SETS for x in ("--set", s)])


def _weights(run):
    from safetensors.torch import load_file

    last = json.loads((run / "checkpoints" / "last.json").read_text())
    return last["step"], load_file(str(run / "checkpoints" / last["path"] / "agent.safetensors"))


# Slow (20 s; the default suite resumes RL runs after SIGTERM (test_rl_lifecycle.py) and from the previous
# code (test_old_runs.py)): run with -m slow.
@pytest.mark.slow
def test_kill_9_then_resume_continues_the_run_exactly(tmp_path):
    ref, run = tmp_path / "ref", tmp_path / "run"
    cfg = apply_overrides(get_preset("smoke"), SETS)
    summary_ref = train_rl(cfg, ref, progress=False)  # uninterrupted, in this process
    with procs.started(_cmd(run, "--preset", "smoke")) as proc:
        deadline = time.monotonic() + 120
        while not (run / "checkpoints" / "last.json").is_file():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "no checkpoint within 120 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    killed_at = json.loads((run / "checkpoints" / "last.json").read_text())["step"]
    assert killed_at < 1200
    # a second run into the same directory without --resume is refused, naming the fix
    with pytest.raises(ActlabError, match="already holds an RL run") as e:
        train_rl(cfg, run, progress=False)
    assert "--resume" in e.value.fix
    summary = train_rl(cfg, run, resume=True, progress=False)
    (step_a, wa), (step_b, wb) = _weights(ref), _weights(run)
    assert step_a == step_b
    assert wa.keys() == wb.keys() and all(wa[k].equal(wb[k]) for k in wa)  # bit for bit
    ev, ev_ref = summary.final_eval, summary_ref.final_eval
    ev.pop("eval_s"), ev_ref.pop("eval_s")  # wall time
    assert ev == ev_ref
    steps = [row["step"] for row in read_metrics(run) if "train/return" in row]
    ref_steps = [row["step"] for row in read_metrics(ref) if "train/return" in row]
    assert steps == ref_steps  # one continuous curve: the killed run's rows past its checkpoint are gone
