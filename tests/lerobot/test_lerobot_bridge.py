"""The bridge's wire format and process handling against a fake child (a real Python script speaking the
protocol with numpy; no lerobot), and a bridged policy inside actlab's evaluation harness."""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import actlab.lerobot.child as child
from actlab.errors import ActlabError
from actlab.lerobot.bridge import (
    ChildSlot,
    LeRobotBridgePolicy,
    dataset_features,
    parse_rename,
    resolve_rename,
)

FAKE = Path(__file__).with_name("fake_lerobot_child.py")


def _policy_dir(tmp_path: Path, cameras=("observation.images.top",), size=32) -> Path:
    d = tmp_path / "policy"
    d.mkdir(exist_ok=True)
    inputs = {"observation.state": {"type": "STATE", "shape": [6]}}
    inputs.update({c: {"type": "VISUAL", "shape": [3, size, size]} for c in cameras})
    cfg = {
        "type": "fake",
        "input_features": inputs,
        "output_features": {"action": {"type": "ACTION", "shape": [6]}},
    }
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def _bridge(tmp_path: Path, mode: str = "ok", **kwargs) -> tuple[LeRobotBridgePolicy, Path]:
    log = tmp_path / f"log-{mode}.json"
    policy_dir = kwargs.pop("policy_dir", None) or _policy_dir(tmp_path)
    bridge = LeRobotBridgePolicy(
        policy_dir,
        sys.executable,
        child_script=FAKE,
        child_args=[child.__file__, str(log), mode],
        **kwargs,
    )
    return bridge, log


def _obs(batch: int = 2, key: str = "observation.images.top") -> dict[str, torch.Tensor]:
    return {
        "observation.state": torch.arange(batch * 6, dtype=torch.float32).view(batch, 6),
        key: torch.full((batch, 3, 32, 32), 7, dtype=torch.uint8),
    }


def test_wire_roundtrip_keeps_dtypes_shapes_and_values():
    arrays = {
        "f": np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32),
        "u": np.arange(24, dtype=np.uint8).reshape(2, 3, 4),
        "b": np.array([True, False]),
        "i": np.array([], dtype=np.int64).reshape(0, 2),
        "d": np.float64(2.5) * np.ones(()),
    }
    buf = io.BytesIO()
    child.write_message(buf, {"op": "x", "task": ["pick"]}, arrays)
    child.write_message(buf, {"op": "y"})
    buf.seek(0)
    header, got = child.read_message(buf)
    assert header == {"op": "x", "task": ["pick"]}
    for k, v in arrays.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape and np.array_equal(got[k], v)
    assert child.read_message(buf) == ({"op": "y"}, {})
    with pytest.raises(EOFError):
        child.read_message(buf)


def test_wire_refuses_what_it_cannot_send_and_broken_messages():
    with pytest.raises(child.ProtocolError, match="dtype object"):
        child.write_message(io.BytesIO(), {"op": "x"}, {"o": np.array([{"a": 1}], dtype=object)})
    buf = io.BytesIO()
    child.write_message(buf, {"op": "x"}, {"f": np.ones(4, np.float32)})
    with pytest.raises(child.ProtocolError, match="closed after"):
        child.read_message(io.BytesIO(buf.getvalue()[:-3]))  # truncated buffer
    with pytest.raises(child.ProtocolError, match="not this protocol"):
        child.read_message(io.BytesIO(b"\xff\xff\xff\xff" + b"x" * 8))


def test_rename_pairs_either_order_and_errors():
    keys = ["observation.state", "observation.images.front"]
    pairs = parse_rename(["observation.images.front=observation.images.top"])
    assert resolve_rename(pairs, keys) == {"observation.images.front": "observation.images.top"}
    assert resolve_rename([("observation.images.top", "observation.images.front")], keys) == {
        "observation.images.front": "observation.images.top"
    }
    with pytest.raises(ActlabError, match="KEY=KEY"):
        parse_rename(["observation.images.front"])
    with pytest.raises(ActlabError, match="exactly one"):
        resolve_rename([("observation.images.a", "observation.images.b")], keys)


def test_dataset_features_speak_the_env_names_with_hwc_images():
    inputs = {
        "observation.state": {"type": "STATE", "shape": [6]},
        "observation.images.front": {"type": "VISUAL", "shape": [3, 48, 64]},
    }
    feats = dataset_features(
        inputs,
        {"action": {"type": "ACTION", "shape": [6]}},
        {"observation.images.front": "observation.images.top"},
    )
    assert feats["observation.images.top"]["shape"] == [48, 64, 3]
    assert "observation.images.front" not in feats and feats["action"]["shape"] == [6]


def test_bridge_select_action_chunk_reset_and_rename(tmp_path):
    policy_dir = _policy_dir(tmp_path, cameras=("observation.images.front",))
    bridge, log = _bridge(
        tmp_path,
        policy_dir=policy_dir,
        rename=["observation.images.front=observation.images.top"],
        instruction="pick",
    )
    with bridge:
        torch.manual_seed(5)
        bridge.reset()
        obs = _obs()
        a0, a1, a2 = (bridge.select_action(obs) for _ in range(3))
        chunk = bridge.predict_action_chunk(obs)
        assert bridge.info == {"type": "fake", "policy_dir": str(policy_dir)}
    state = obs["observation.state"]
    assert a0.dtype == torch.float32 and a0.shape == (2, 6)
    assert torch.allclose(a0, state) and torch.allclose(a1, state + 0.001) and torch.allclose(a2, state)
    assert chunk.shape == (2, 4, 6) and torch.allclose(chunk[:, 3], state + 0.003)
    seen = json.loads(log.read_text())
    torch.manual_seed(5)
    assert seen["resets"] == 1 and seen["seeds"] == [int(torch.randint(0, 2**31 - 1, ()).item())]
    assert seen["keys"] == ["observation.images.front", "observation.state"]  # the policy's names
    assert seen["dtypes"] == {"observation.images.front": "uint8", "observation.state": "float32"}
    assert seen["tasks"][-1] == ["pick", "pick"]
    assert bridge._proc is None  # closed


def test_bridge_errors_name_the_cause(tmp_path):
    with pytest.raises(ActlabError, match="lerobot python does not exist"):
        LeRobotBridgePolicy(_policy_dir(tmp_path), tmp_path / "nope/python")
    with pytest.raises(ActlabError, match="no config.json"):
        LeRobotBridgePolicy(tmp_path, sys.executable)
    bridge, _ = _bridge(tmp_path, "fail-load")
    with pytest.raises(ActlabError, match="could not load the policy: OSError: no weights") as e:
        bridge.start()
    assert "failed on purpose" in str(e.value)  # the child's stderr is quoted
    bridge, _ = _bridge(tmp_path, "fail-select")
    with (
        bridge,
        pytest.raises(ActlabError, match="failed on 'select_action': ValueError: the fake policy refuses"),
    ):
        bridge.select_action(_obs())
    bridge, _ = _bridge(tmp_path, "crash-after-2")
    with bridge:
        bridge.reset()
        bridge.select_action(_obs())
        with pytest.raises(ActlabError, match=r"exited \(code 3\) before answering 'select_action'"):
            bridge.select_action(_obs())


def test_child_slot_keeps_one_child_running(tmp_path):
    slot = ChildSlot()
    a, _ = _bridge(tmp_path, slot=slot)
    b, _ = _bridge(tmp_path, slot=slot)
    try:
        a.reset()
        assert a._proc is not None
        b.reset()
        assert a._proc is None and b._proc is not None and slot.holder is b
    finally:
        a.close()
        b.close()


def test_bridged_policy_runs_in_the_harness_with_a_reset_per_episode(tmp_path):
    from actlab.evaluation import EnvSpec, EvalConfig, evaluate
    from actlab.evaluation.seeds import DEFAULT_SEED

    bridge, log = _bridge(tmp_path)
    with bridge:
        ev = evaluate(
            bridge, EnvSpec(max_steps=6), EvalConfig(episodes=2, workers=1, batch_envs=1), name="fake"
        )
    assert [e.seed for e in ev.episodes] == [DEFAULT_SEED, DEFAULT_SEED + 1]
    assert all(e.steps == 6 for e in ev.episodes)
    assert ev.summary.episodes == 2 and ev.summary.successes == 0 and sum(ev.summary.outcomes.values()) == 2
    seen = json.loads(log.read_text())
    assert seen["resets"] == 2  # policy.reset() before every episode
    assert seen["shapes"]["observation.images.top"] == [1, 3, 32, 32]  # the sim rendered the policy's size


def test_a_child_that_stops_answering_is_killed_at_the_deadline(tmp_path):
    # Before: the bridge read the child's pipe with no deadline, so a deadlocked policy hung the
    # evaluation forever. Now the child is killed after timeout_s and the error names it and the fix.
    import psutil

    bridge, _ = _bridge(tmp_path, "hang-after-2", timeout_s=1.5)
    with bridge:
        bridge.reset()
        bridge.select_action(_obs())
        pid = bridge._proc.pid
        t0 = time.monotonic()
        with pytest.raises(
            ActlabError, match=r"did not answer .select_action. within the --lerobot-timeout of 1.5"
        ) as e:
            bridge.select_action(_obs())
        assert time.monotonic() - t0 < 10
    assert f"pid {pid}" in str(e.value) and "--lerobot-timeout" in str(e.value)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    with pytest.raises(ActlabError, match="timeout must be > 0"):
        _bridge(tmp_path, timeout_s=0)
