"""The bridge's deadline ends the lerobot child's whole process tree (the third fault run's HANG rows,
docs/faults.md).

Before: the deadline killed only the direct child. A ``--lerobot-python`` that is a wrapper (``conda run``,
``uv run``, a shell script) keeps the pipe open through its own child, so the bridge's read never ended and
``actlab eval`` / ``actlab policy doctor`` waited forever. Here the "python" is a real shell script whose
python child forks a grandchild and never answers (one variant leaves the process group with setsid);
every process it starts carries an environment marker, so the tests find all of them, whether or not
they got as far as writing their pid.
"""

from __future__ import annotations

import json
import stat
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

import actlab.lerobot.child as child
from actlab.errors import ActlabError
from actlab.lerobot.bridge import MAX_REPLY_TIMEOUT_S, REPLY_TIMEOUT_S, LeRobotBridgePolicy, child_env
from procs import clock, hanging_wrapper, marked, wait_gone

FAKE = Path(__file__).with_name("fake_lerobot_child.py")
# The child tree's marker variable (its value is one uuid per test).
MARK = "ACTLAB_TEST_HANGING_CHILD"


def _policy_dir(tmp_path: Path) -> Path:
    d = tmp_path / "policy"
    d.mkdir(exist_ok=True)
    cfg = {
        "type": "fake",
        "input_features": {
            "observation.state": {"type": "STATE", "shape": [2]},
            "observation.images.top": {"type": "VISUAL", "shape": [3, 16, 16]},
        },
        "output_features": {"action": {"type": "ACTION", "shape": [2]}},
    }
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def _tree(token: str, since: float) -> list:
    return marked(MARK, token, since)


@pytest.mark.parametrize("mode", ["group", "setsid"])
def test_a_wrapper_whose_child_never_answers_is_ended_as_a_tree_at_the_deadline(tmp_path, mode):
    token, since = uuid.uuid4().hex, clock()
    bridge = LeRobotBridgePolicy(
        _policy_dir(tmp_path),
        hanging_wrapper(tmp_path, mode),
        timeout_s=3.0,
        env={**child_env(), MARK: token},
    )
    t0 = time.monotonic()
    with pytest.raises(ActlabError) as e:
        bridge.start()
    took = time.monotonic() - t0
    message = str(e.value)
    assert "did not answer 'hello' within the --lerobot-timeout of 3 s" in message
    assert "killed with every process it started" in message and "raise --lerobot-timeout" in message
    assert took < 3.0 + 10.0, f"the bridge gave up {took:.1f} s after the start (deadline 3 s)"
    assert wait_gone(_tree(token, since), 5.0) == []  # nothing of the tree is left
    bridge.close()


def test_a_child_that_hangs_mid_run_is_ended_with_its_tree(tmp_path):
    # The wrapper here answers the hello (a real fake child) but its request handler hangs after two
    # requests while a grandchild it forked holds the pipe: the request's deadline still ends it all.
    token, since = uuid.uuid4().hex, clock()
    script = tmp_path / "lerobot-python-forking"
    # the wrapper forks a sleeper beside the child (which inherits the pipes) and waits for both
    script.write_text(f'#!/bin/sh\nsleep 100000 &\n"{sys.executable}" "$@"\nwait\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    bridge = LeRobotBridgePolicy(
        _policy_dir(tmp_path),
        script,
        timeout_s=2.0,
        env={**child_env(), MARK: token},
        child_script=FAKE,
        child_args=[child.__file__, str(tmp_path / "log.json"), "hang-after-2"],
    )
    obs = {
        "observation.state": np.zeros((1, 2), np.float32),
        "observation.images.top": np.zeros((1, 3, 16, 16), np.uint8),
    }
    with bridge:
        bridge.reset()
        bridge.select_action(obs)
        assert len(_tree(token, since)) >= 3  # the wrapper, the sleeper, the child
        t0 = time.monotonic()
        with pytest.raises(ActlabError, match="did not answer 'select_action' within the --lerobot-timeout"):
            bridge.select_action(obs)
        assert time.monotonic() - t0 < 2.0 + 10.0
        assert wait_gone(_tree(token, since), 5.0) == []


def test_the_timeout_is_refused_out_of_range(tmp_path):
    for bad in (0, -1, float("nan"), float("inf"), MAX_REPLY_TIMEOUT_S * 2):
        with pytest.raises(ActlabError, match="timeout must be > 0") as e:
            LeRobotBridgePolicy(_policy_dir(tmp_path), sys.executable, timeout_s=bad)
        assert e.value.field == "--lerobot-timeout"


def test_the_cli_default_and_limit_are_the_bridges():
    import actlab.cli as cli

    assert cli.LEROBOT_TIMEOUT_S == REPLY_TIMEOUT_S and cli.LEROBOT_TIMEOUT_MAX_S == MAX_REPLY_TIMEOUT_S


@pytest.mark.parametrize("command", ["eval", "doctor"])
@pytest.mark.parametrize("bad", ["0", "-3", "nan", "inf", "1e9", "soon"])
def test_both_commands_refuse_a_bad_lerobot_timeout_at_parse_time(tmp_path, command, bad, capsys):
    from actlab.cli import main

    args = ["--lerobot-policy", str(tmp_path), "--lerobot-python", sys.executable, "--lerobot-timeout", bad]
    argv = ["eval", *args] if command == "eval" else ["policy", "doctor", "--dataset", str(tmp_path), *args]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert "--lerobot-timeout" in capsys.readouterr().err


@pytest.mark.timeout(240)
@pytest.mark.parametrize("command", ["eval", "doctor"])
def test_eval_and_doctor_end_within_the_deadline_with_no_process_left(
    tmp_path, command, make_dataset, monkeypatch, capsys
):
    # The case: a --lerobot-python script forking a child that never answers. The command runs in
    # this process (the wait on the child is under test, not an interpreter start); every process the
    # bridge starts inherits the marker set here, so the test finds any that outlives the command.
    from actlab.cli import main

    deadline = 3
    wrapper, policy = hanging_wrapper(tmp_path), _policy_dir(tmp_path)
    common = ["--lerobot-policy", policy, "--lerobot-python", wrapper, "--lerobot-timeout", str(deadline)]
    if command == "eval":
        argv = ["eval", *common, "--episodes", "1", "--max-steps", "5", "--workers", "1"]
    else:
        data = make_dataset(
            tmp_path, episodes=2, length=10, cameras={"top": (16, 16)}, state_dim=2, action_dim=2
        )
        argv = ["policy", "doctor", *common, "--dataset", data]
    token, since = uuid.uuid4().hex, clock()
    monkeypatch.setenv(MARK, token)
    monkeypatch.setenv("ACTLAB_TRACEBACK", "0")
    t0 = time.monotonic()
    code = main(list(map(str, argv)))
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"within the --lerobot-timeout of {deadline} s" in err
    assert wait_gone(_tree(token, since), 5.0) == []  # nothing the command started is left
    # The whole command (the sim included) within the deadline + 10 s on a quiet machine; the bound
    # allows the load of a shared 2-core machine on top.
    assert took < deadline + 10 + 30, f"{command} took {took:.1f} s with a {deadline} s deadline"
    print(f"{command}: exit 2 after {took:.1f} s (deadline {deadline} s)")
