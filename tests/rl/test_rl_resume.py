"""Kill -9 during RL training, then --resume: the run ends exactly where an uninterrupted one does."""

from __future__ import annotations

import json
import signal
import time

import procs
from actlab.training.metrics_log import read_metrics

# A run of a few seconds that checkpoints often: reach, tiny networks.
SETS = [
    "total_env_steps=1600",
    "checkpoint_every=400",
    "random_steps=200",
    "learning_starts=200",
    "hidden=32",
    "batch_size=64",
    "num_envs=4",
    "max_steps=30",
    "eval_episodes=4",
    "eval_every=800",
]


def _cmd(out, *extra):
    args = ["rl", "train", "--out", out, "--json", *extra]
    return procs.cli(*args, *[x for s in SETS for x in ("--set", s)])


def _weights(run):
    from safetensors.torch import load_file

    last = json.loads((run / "checkpoints" / "last.json").read_text())
    return last["step"], load_file(str(run / "checkpoints" / last["path"] / "agent.safetensors"))


def test_kill_9_then_resume_continues_the_run_exactly(tmp_path):
    ref, run = tmp_path / "ref", tmp_path / "run"
    r_ref = procs.run(_cmd(ref, "--preset", "smoke"), timeout=120)
    assert r_ref.returncode == 0, r_ref.stderr
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
    assert killed_at < 1600
    # a second run into the same directory without --resume is refused, naming the fix
    refused = procs.run(_cmd(run, "--preset", "smoke"), timeout=60)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    r = procs.run(_cmd(run, "--resume"), timeout=120)
    assert r.returncode == 0, r.stderr
    (step_a, wa), (step_b, wb) = _weights(ref), _weights(run)
    assert step_a == step_b
    assert wa.keys() == wb.keys() and all(wa[k].equal(wb[k]) for k in wa)  # bit for bit
    ev, ev_ref = json.loads(r.stdout)["final_eval"], json.loads(r_ref.stdout)["final_eval"]
    ev.pop("eval_s"), ev_ref.pop("eval_s")  # wall time
    assert ev == ev_ref
    steps = [row["step"] for row in read_metrics(run) if "train/return" in row]
    ref_steps = [row["step"] for row in read_metrics(ref) if "train/return" in row]
    assert steps == ref_steps  # one continuous curve: the killed run's rows past its checkpoint are gone
