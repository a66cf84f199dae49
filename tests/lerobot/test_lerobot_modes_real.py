"""What ``actlab eval --execution MODE`` measured runs on the arm: every execution mode through the plugin
in real lerobot 0.6.1's ``lerobot-rollout`` on the simulated SO-101, against ``actlab eval`` of the same
policy on the same seeds.

For each (policy, mode, delay) cell: ``actlab eval BUNDLE --execution MODE --latency D --json`` (its
recommendation gives the plugin flags of the cell), then ``lerobot-rollout`` of the policy's export with
exactly those flags on ``--robot.type=actlab_so101_sim`` (same seeds, same 64 px cameras, no home-pose
hold, the same episode length). Per seed the outcome, the steps and the jerk of the commanded actions
(a number of the whole action sequence; it differs between modes) must agree. The policies are tiny and
untrained (weights moved off their initial values, statistics from a real recording): the check is
agreement, not skill.

Slow; skipped without the lerobot venv with the plugin (the same rule and environment as
test_lerobot_plugin_real.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_lerobot_plugin_real import BIN, _base, _policy, _relative, lerobot_env

from procs import run, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("lerobot_plugin")]
SEED = 100_000
EPISODES = 3  # compared: the episodes lerobot-rollout finished within DURATION, at most these
STEPS = 40  # episode length: enough for several chunks in every mode, cheap on a CPU
DURATION = 25  # seconds of lerobot-rollout's control loop: 3 episodes of 40 steps at 30 fps need 4 s
LATENCY = 2
# (policy, mode, delay): plain ACT in sync and the three modes of a delay, act_relative in rtc, and an ACT
# whose correction head reads the cameras in correct (it runs at every control step, in the loop)
CELLS = [
    ("act", "sync", 0),
    ("act", "async", LATENCY),
    ("act", "ensemble", LATENCY),
    ("act", "blend", LATENCY),
    ("rel", "rtc", LATENCY),
    ("head", "correct", LATENCY),
]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lerobot_modes")


@pytest.fixture(scope="module")
def policies(work, sim_data) -> dict[str, tuple[Path, Path]]:
    """{name: (actlab bundle, its plugin export)}: a plain ACT (chunk 10, 4 actions per chunk), an
    act_relative trained-shape for prefixes up to 4 (rtc_max_delay 4) and an ACT with a correction head
    that reads the cameras (its zero last layer moved too, so the head changes every action)."""
    from actlab.lerobot.export import export_policy
    from actlab.policies import save_policy

    out = {}
    head = _base(correction_head=True, correction_only=True, correction_images=True)
    for name, cfg in (("act", _base()), ("rel", _relative(rtc_max_delay=4)), ("head", head)):
        policy = _policy(cfg, sim_data)
        bundle, export = work / f"{name}_bundle", work / f"{name}_export"
        save_policy(policy, bundle)
        export_policy(policy, export, lerobot_type="plugin")
        out[name] = (bundle, export)
    return out


def _actlab_eval(bundle: Path, mode: str, latency: int) -> tuple[list[dict], dict]:
    res = run_cli(
        "eval", bundle, "--execution", mode, "--latency", latency, "--episodes", EPISODES, "--seed", SEED,
        "--max-steps", STEPS, "--image-size", "64", "--workers", "1", "--batch-envs", "1", "--json",
        timeout=900,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    record = json.loads(res.stdout)
    return record["checkpoints"][-1]["episodes"], record["recommendation"]


def _rollout(work: Path, export: Path, name: str, flags: str) -> list[dict]:
    out = work / f"{name}_sim"
    cmd = [
        str(BIN / "lerobot-rollout"),
        "--strategy.type=base",
        f"--policy.path={export}",
        *flags.split(),
        "--robot.type=actlab_so101_sim",
        "--robot.image_size=64",
        f"--robot.max_steps={STEPS}",
        f"--robot.seed={SEED}",
        "--robot.hold_s=0",  # actlab eval starts acting at once
        f"--robot.output_dir={out}",
        f"--duration={DURATION}",
        "--return_to_initial_position=false",
        "--task=pick the cube and place it in the bowl",
    ]
    res = run(cmd, env=lerobot_env(work), timeout=600, cwd=work)
    assert res.returncode == 0, res.stderr[-3000:]
    from actlab.lerobot.runtime import read_episode_log

    return read_episode_log(out / "episodes.jsonl")


@pytest.mark.timeout(3000)
def test_lerobot_rollout_runs_every_measured_mode_with_actlab_evals_outcomes(work, policies):
    jerks: dict[str, list[float]] = {}
    rows = []
    for name, mode, latency in CELLS:
        bundle, export = policies[name]
        ours, rec = _actlab_eval(bundle, mode, latency)
        # the recommendation of a single evaluation is its own cell, with the flags that run it
        assert (rec["mode"], rec["latency"]) == (mode, latency)
        if mode == "sync":
            assert rec["flags"] == ""
        else:
            assert rec["flags"].startswith(f"--policy.execution={mode} --policy.execution_latency={latency} ")
        assert rec["flags"] in rec["rollout_sim"]
        theirs = _rollout(work, export, f"{name}_{mode}", rec["flags"])
        n = min(len(theirs), EPISODES)
        assert n >= 2, f"{mode}: lerobot-rollout finished {len(theirs)} episodes in {DURATION} s"
        assert [e["seed"] for e in theirs[:n]] == [e["seed"] for e in ours[:n]] == list(range(SEED, SEED + n))
        for t, o in zip(theirs[:n], ours[:n]):
            rows.append(
                f"{name:4} {mode:8} d={latency} seed {t['seed']}: outcome {t['outcome']} / {o['outcome']}, "
                f"steps {t['steps']} / {o['steps']}, jerk {t['jerk']:.6f} / {o['jerk']:.6f}"
            )
            assert (t["outcome"], t["steps"]) == (o["outcome"], o["steps"]), rows[-1]
            assert t["jerk"] == pytest.approx(o["jerk"], rel=1e-3), rows[-1]
        jerks[f"{name} {mode}"] = [t["jerk"] for t in theirs[:2]]
    print("\nlerobot-rollout / actlab eval, per seed:\n" + "\n".join(rows))
    # the flags changed what ran: the plain ACT's four modes executed four different action sequences
    act = [tuple(round(j, 4) for j in v) for k, v in jerks.items() if k.startswith("act ")]
    assert len(set(act)) == len(act), jerks
