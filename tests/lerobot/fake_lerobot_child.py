"""A stand-in for actlab/lerobot/child.py with no lerobot: the real wire format and serving loop (loaded
from child.py by path), a numpy "policy" behind them. Run by the bridge as its child script::

    python fake_lerobot_child.py POLICY_DIR --device cpu CHILD_PY LOG_JSON [MODE]

The policy holds the arm still: every action of a chunk is the current state plus ``0.001 * step`` (so the
sim is not disturbed), with a queue of N_ACTION_STEPS like ACT's. ``LOG_JSON`` receives what it saw
(resets, seeds, keys, dtypes, tasks) when the bridge closes it. MODE: ``ok``, ``fail-load`` (the hello
reports a load error), ``crash-after-2`` (exits hard at the third request), ``hang-after-2`` (never
answers the third request), ``fail-select`` (every select_action raises).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time

import numpy as np

CHUNK = 4
N_ACTION_STEPS = 2


def load_child(path: str):
    spec = importlib.util.spec_from_file_location("bridge_child", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeHandler:
    def __init__(self, log_path: str, mode: str) -> None:
        self.log_path, self.mode = log_path, mode
        self.log = {
            "resets": 0,
            "seeds": [],
            "keys": [],
            "dtypes": {},
            "shapes": {},
            "tasks": [],
            "requests": 0,
        }
        self.queue: list[np.ndarray] = []

    def _count(self) -> None:
        self.log["requests"] += 1
        if self.mode == "crash-after-2" and self.log["requests"] > 2:
            os._exit(3)
        if self.mode == "hang-after-2" and self.log["requests"] > 2:
            time.sleep(3600)  # a deadlocked policy: the bridge's deadline must end it

    def reset(self, seed):
        self._count()
        self.log["resets"] += 1
        self.log["seeds"].append(seed)
        self.queue = []

    def predict_action_chunk(self, obs, task):
        self._count()
        self.log["keys"] = sorted(obs)
        self.log["dtypes"] = {k: str(v.dtype) for k, v in obs.items()}
        self.log["shapes"] = {k: list(v.shape) for k, v in obs.items()}
        self.log["tasks"].append(task)
        state = obs["observation.state"].astype(np.float32)  # (B, D)
        steps = 0.001 * np.arange(CHUNK, dtype=np.float32)[None, :, None]  # (1, H, 1)
        return state[:, None, :] + steps  # (B, H, D)

    def select_action(self, obs, task):
        if self.mode == "fail-select":
            raise ValueError("the fake policy refuses")
        if not self.queue:
            chunk = self.predict_action_chunk(obs, task)
            self.queue = list(chunk[:, :N_ACTION_STEPS].transpose(1, 0, 2))
        else:
            self._count()
        return self.queue.pop(0)

    def write_log(self) -> None:
        with open(self.log_path, "w") as f:
            json.dump(self.log, f)


def main() -> int:
    policy_dir, _, _device, child_py, log_path, *rest = sys.argv[1:]
    mode = rest[0] if rest else "ok"
    child = load_child(child_py)
    inp, out = child._protocol_streams()
    if mode == "fail-load":
        print("loading the fake policy failed on purpose", file=sys.stderr)
        child.write_message(
            out, {"op": "hello", "ok": False, "error": "OSError: no weights", "traceback": "tb"}
        )
        return 1
    handler = FakeHandler(log_path, mode)
    info = {"type": "fake", "policy_dir": policy_dir}
    child.write_message(out, {"op": "hello", "ok": True, "protocol": child.PROTOCOL_VERSION, "info": info})
    try:
        child.serve(handler, inp, out)
    finally:
        handler.write_log()
    return 0


if __name__ == "__main__":
    sys.exit(main())
