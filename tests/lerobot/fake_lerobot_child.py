"""A stand-in for actlab/lerobot/child.py with no lerobot: the real wire format and serving loop (loaded
from child.py by path), a numpy "policy" behind them. Run by the bridge as its child script::

    python fake_lerobot_child.py POLICY_DIR --device cpu CHILD_PY LOG_JSON [MODE] [--FLAG VALUE ...]

The policy holds the arm still: every action of a chunk is the current state plus ``0.001 * step`` (so the
sim is not disturbed), with a queue of N_ACTION_STEPS like ACT's. ``LOG_JSON`` receives what it saw
(resets, seeds, keys, dtypes, tasks) when the bridge closes it. MODE: ``ok``, ``fail-load`` (the hello
reports a load error), ``crash-after-2`` (exits hard at the third request), ``hang-after-2`` (never
answers the third request), ``fail-select`` (every
select_action raises), ``reset-keeps-queue`` (reset() leaves the action queue as it is). Flags (the real
child's, e.g. ``--missing-processors identity``) are accepted and ignored.

Processors, as lerobot's: where POLICY_DIR has lerobot's processor files (policy_preprocessor.json with a
``normalizer_processor`` step, policy_postprocessor.json with an ``unnormalizer_processor``, their
statistics in safetensors), the "model" works in the preprocessor's normalized action space and its
chunks go through the postprocessor's de-normalization; a missing file is an identity, as the real
child's ``--missing-processors identity`` makes it.
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


def action_stats(policy_dir: str, file: str, step_name: str):
    """(mean, std) of ``action`` in a lerobot processor file's (un)normalizer step; None without it."""
    path = os.path.join(policy_dir, file)
    if not os.path.isfile(path):
        return None
    from safetensors.numpy import load_file

    with open(path) as f:
        steps = json.load(f)["steps"]
    step = next((s for s in steps if s["registry_name"] == step_name), None)
    if step is None or "state_file" not in step:  # none, or one without statistics (passes through)
        return None
    stats = load_file(os.path.join(policy_dir, step["state_file"]))
    return stats["action.mean"].astype(np.float32), stats["action.std"].astype(np.float32)


class FakeHandler:
    def __init__(self, log_path: str, mode: str, policy_dir: str = "") -> None:
        self.pre = action_stats(policy_dir, "policy_preprocessor.json", "normalizer_processor")
        self.post = action_stats(policy_dir, "policy_postprocessor.json", "unnormalizer_processor")
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
        if self.mode != "reset-keeps-queue":
            self.queue = []

    def _normalize(self, action):
        return action if self.pre is None else (action - self.pre[0]) / self.pre[1]

    def _unnormalize(self, z):
        return z if self.post is None else z * self.post[1] + self.post[0]

    def processors(self, action):
        z = self._normalize(action)
        return {"normalized": z, "roundtrip": self._unnormalize(z)}

    def predict_action_chunk(self, obs, task):
        self._count()
        self.log["keys"] = sorted(obs)
        self.log["dtypes"] = {k: str(v.dtype) for k, v in obs.items()}
        self.log["shapes"] = {k: list(v.shape) for k, v in obs.items()}
        self.log["tasks"].append(task)
        state = obs["observation.state"].astype(np.float32)  # (B, D) or (B, T, D)
        state = state[:, -1] if state.ndim == 3 else state
        steps = 0.001 * np.arange(CHUNK, dtype=np.float32)[None, :, None]  # (1, H, 1)
        # the "model" predicts normalized actions, the postprocessor de-normalizes them
        return self._unnormalize(self._normalize(state[:, None, :] + steps))  # (B, H, D)

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
    flag_value = [i > 0 and rest[i - 1].startswith("--") for i in range(len(rest))]
    modes = [a for a, v in zip(rest, flag_value) if not a.startswith("--") and not v]
    mode = modes[0] if modes else "ok"
    child = load_child(child_py)
    inp, out = child._protocol_streams()
    if mode == "fail-load":
        print("loading the fake policy failed on purpose", file=sys.stderr)
        child.write_message(
            out, {"op": "hello", "ok": False, "error": "OSError: no weights", "traceback": "tb"}
        )
        return 1
    handler = FakeHandler(log_path, mode, policy_dir)
    info = {"type": "fake", "policy_dir": policy_dir}
    child.write_message(out, {"op": "hello", "ok": True, "protocol": child.PROTOCOL_VERSION, "info": info})
    try:
        child.serve(handler, inp, out)
    finally:
        handler.write_log()
    return 0


if __name__ == "__main__":
    sys.exit(main())
