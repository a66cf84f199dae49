"""The bridge's child: run ANY LeRobot policy in the user's lerobot environment, behind a pipe.

Run by the lerobot python (NOT actlab's; actlab is not installed there)::

    /path/to/lerobot-venv/bin/python child.py POLICY_DIR [--device cpu] [--threads N]

It imports only the standard library and numpy at module level (actlab imports the wire format from
here, so both sides speak one implementation of it), and torch and lerobot inside :class:`LeRobotHandler`.
The policy is loaded with lerobot's own API (``PreTrainedConfig.from_pretrained``, the policy class's
``from_pretrained``, ``make_pre_post_processors`` with the processor files saved beside it), so reset,
normalization and postprocessing are lerobot's, not glue.

Wire format (stdin: requests, stdout: replies; nothing is ever pickled)::

    message := u32 little-endian header length | header (UTF-8 JSON) | array buffers, in header order
    header  := {"op": ..., ..., "arrays": [{"key": str, "dtype": "float32" | "uint8" | ..., "shape": [...]}]}

Requests: ``reset`` (``seed``), ``select_action`` / ``predict_action_chunk`` (observation arrays: images
``(B, C, H, W)`` uint8, everything else float32, plus an optional ``task`` string list), ``processors``
(``action`` ``(N, A)`` float32 in dataset units: the action normalized by the preprocessor's normalizer and
that again through the postprocessor, for the doctor's round trip), ``close``. Every
reply has ``ok``; a failed request answers ``{"ok": false, "error": ..., "traceback": ...}`` and the child
keeps serving. The first message the child writes is ``hello`` (policy info) or its load error.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import traceback
from typing import Any, BinaryIO

# Run as a script, this file's directory is sys.path[0]: its siblings (export.py, bridge.py ...) must not
# shadow top-level modules that numpy, torch or lerobot import.
if (
    __name__ == "__main__"
    and sys.path
    and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__))
):
    sys.path.pop(0)

import numpy as np

PROTOCOL_VERSION = 1
# dtypes that may cross the pipe (raw little-endian buffers); anything else is refused, never pickled.
DTYPES = ("float32", "float64", "uint8", "int64", "bool")
# Largest header accepted (a corrupt length prefix must not allocate gigabytes).
MAX_HEADER_BYTES = 16 * 2**20


class ProtocolError(RuntimeError):
    """The other side sent something that is not a well-formed message (or closed the pipe mid-message)."""


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            if got == 0 and not chunks:
                raise EOFError("the pipe was closed")
            raise ProtocolError(f"the pipe closed after {got} of {n} bytes of a message")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def write_message(
    stream: BinaryIO, header: dict[str, Any], arrays: dict[str, np.ndarray] | None = None
) -> None:
    """Write one message: the JSON header (with an ``arrays`` table) and the raw array buffers."""
    arrays = arrays or {}
    table, buffers = [], []
    for key, value in arrays.items():
        arr = np.asarray(value)  # (ascontiguousarray would make a 0-d array 1-d; tobytes is C order)
        if arr.dtype.name not in DTYPES:
            raise ProtocolError(f"array {key!r} has dtype {arr.dtype.name}; allowed: {', '.join(DTYPES)}")
        arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
        table.append({"key": key, "dtype": arr.dtype.name, "shape": list(arr.shape)})
        buffers.append(arr.tobytes())
    raw = json.dumps({**header, "arrays": table}).encode()
    stream.write(struct.pack("<I", len(raw)) + raw)
    for b in buffers:
        stream.write(b)
    stream.flush()


def read_message(stream: BinaryIO) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read one message; EOFError when the pipe was closed between messages."""
    (n,) = struct.unpack("<I", _read_exact(stream, 4))
    if n > MAX_HEADER_BYTES:
        raise ProtocolError(f"header of {n} bytes announced (at most {MAX_HEADER_BYTES}): not this protocol")
    try:
        header = json.loads(_read_exact(stream, n).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"the header is not JSON: {e}") from e
    if not isinstance(header, dict) or not isinstance(header.get("arrays", []), list):
        raise ProtocolError("the header is not an object with an 'arrays' list")
    arrays = {}
    for spec in header.pop("arrays", []):
        dtype, shape = spec.get("dtype"), spec.get("shape")
        if dtype not in DTYPES or not isinstance(shape, list) or not all(isinstance(s, int) for s in shape):
            raise ProtocolError(f"bad array entry {spec!r}")
        dt = np.dtype(dtype).newbyteorder("<")
        count = int(np.prod(shape)) if shape else 1
        buf = _read_exact(stream, count * dt.itemsize) if count else b""
        arrays[spec["key"]] = np.frombuffer(buf, dtype=dt).reshape(shape).astype(dt.newbyteorder("="))
    return header, arrays


def serve(handler: Any, inp: BinaryIO, out: BinaryIO) -> None:
    """Answer requests until ``close`` or EOF. ``handler`` has ``reset(seed)``, ``select_action(obs, task)``
    and ``predict_action_chunk(obs, task)`` (numpy in, numpy out), and ``processors(action)`` for the
    ``processors`` request."""
    while True:
        try:
            header, arrays = read_message(inp)
        except EOFError:
            return
        op = header.get("op")
        if op == "close":
            write_message(out, {"op": "close", "ok": True})
            return
        try:
            if op == "reset":
                handler.reset(header.get("seed"))
                write_message(out, {"op": op, "ok": True})
            elif op in ("select_action", "predict_action_chunk"):
                actions = getattr(handler, op)(arrays, header.get("task"))
                write_message(out, {"op": op, "ok": True}, {"action": np.asarray(actions, dtype=np.float32)})
            elif op == "processors":
                found = handler.processors(arrays["action"])
                write_message(
                    out, {"op": op, "ok": True}, {k: np.asarray(v, np.float32) for k, v in found.items()}
                )
            else:
                raise ValueError(f"unknown request {op!r}")
        except Exception as e:  # answered, not fatal: the parent raises it with the traceback
            write_message(
                out,
                {
                    "op": op,
                    "ok": False,
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc(),
                    "actlab_error": actlab_error(e),
                },
            )


def actlab_error(e: BaseException) -> dict[str, Any] | None:
    """The fields of the actlab error in ``e``'s chain (raised by actlab's plugin inside lerobot: an edited
    export refused, an execution setting out of range), so the parent raises it as itself instead of a
    traceback with the error at its end; None for any other failure."""
    seen: BaseException | None = e
    while seen is not None:
        if type(seen).__name__ == "ActlabError" and callable(getattr(seen, "as_dict", None)):
            return seen.as_dict()
        seen = seen.__cause__ or seen.__context__
    return None


def config_unreadable(e: BaseException, policy_dir: str) -> dict[str, Any] | None:
    """The fields of a refusal for a config.json LeRobot's loader cannot decode (draccus's DecodingError:
    `"actlab_config": [1, 2]`, a shape of 6.5), which reached the user as the child's traceback (23rd fault
    run); None for any other failure."""
    seen: BaseException | None = e
    while seen is not None:
        if type(seen).__name__ == "DecodingError":
            return {
                "problem": "LeRobot cannot read the policy's config.json: a field holds a value of another "
                "type",
                "file": os.path.join(policy_dir, "config.json"),
                "found": " ".join(str(seen).split())[:400],
                "fix": "restore config.json from the checkpoint it came from (an actlab export: export it "
                "again, actlab policy export BUNDLE --to lerobot)",
            }
        seen = seen.__cause__ or seen.__context__
    return None


class LeRobotHandler:
    """A LeRobot policy of any type with its own pre/post-processors (lerobot's API only)."""

    def __init__(self, policy_dir: str, device: str = "cpu", missing_processors: str = "fail") -> None:
        import torch
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class
        from lerobot.utils.import_utils import register_third_party_plugins

        # What lerobot's own scripts do first: import installed lerobot_policy_* plugins (actlab's plugin
        # types actlab_act / actlab_act_relative among them), so their config types resolve.
        register_third_party_plugins()
        self.torch = torch
        cfg = PreTrainedConfig.from_pretrained(policy_dir)
        cfg.device = device
        self.policy = get_policy_class(cfg.type).from_pretrained(policy_dir, config=cfg)
        self.policy.to(device).eval()
        self.pre, self.post, self.processor_files = _load_processors(
            cfg, policy_dir, device, missing_processors
        )
        self.cfg = cfg
        self.device = device
        self.weights_check = _weights_check(self.policy, policy_dir)
        self.image_keys = set(cfg.image_features)

    def info(self) -> dict[str, Any]:
        import lerobot

        cfg = self.cfg
        return {
            "type": cfg.type,
            "lerobot_version": getattr(lerobot, "__version__", "?"),
            "torch_version": self.torch.__version__,
            "input_features": {
                k: {"type": v.type.value, "shape": list(v.shape)} for k, v in cfg.input_features.items()
            },
            "output_features": {
                k: {"type": v.type.value, "shape": list(v.shape)} for k, v in cfg.output_features.items()
            },
            "n_action_steps": getattr(cfg, "n_action_steps", None),
            "chunk_size": getattr(cfg, "chunk_size", getattr(cfg, "horizon", None)),
            "n_obs_steps": getattr(cfg, "n_obs_steps", None),
            # per processor file: "loaded" or "missing" (an identity stand-in runs: --missing-processors)
            "processor_files": self.processor_files,
            "preprocessor_steps": [type(s).__name__ for s in getattr(self.pre, "steps", [])],
            "postprocessor_steps": [type(s).__name__ for s in getattr(self.post, "steps", [])],
            # from_pretrained loads with strict=False: name what it did not find (random weights)
            **self.weights_check,
        }

    def processors(self, action: np.ndarray) -> dict[str, np.ndarray]:
        """``action`` (N, A) in dataset units -> ``normalized`` by the preprocessor's normalizer step (as
        training normalized the targets; unchanged when it has none) and ``roundtrip``: that through the
        whole postprocessor, which a deployed policy's outputs go through."""
        from lerobot.processor import NormalizerProcessorStep

        torch = self.torch
        a = torch.from_numpy(np.ascontiguousarray(action, dtype=np.float32)).to(self.device)  # (N, A)
        normalized = a
        for step in getattr(self.pre, "steps", []):
            if isinstance(step, NormalizerProcessorStep):
                normalized = step._normalize_action(a, inverse=False)  # the step's own action transform
        with torch.inference_mode():
            back = self.post(normalized.clone())
        return {"normalized": normalized.float().cpu().numpy(), "roundtrip": back.float().cpu().numpy()}

    def reset(self, seed: int | None) -> None:
        if seed is not None:
            self.torch.manual_seed(
                int(seed)
            )  # a stochastic policy (diffusion) draws the same noise per episode
        self.policy.reset()
        self.pre.reset()
        self.post.reset()

    def _batch(self, obs: dict[str, np.ndarray], task: list[str] | None) -> dict[str, Any]:
        """Observation arrays -> lerobot's inference batch: images float32 [0, 1] (B, C, H, W), as
        lerobot's own ``predict_action`` prepares a robot observation; then the policy's preprocessor."""
        torch = self.torch
        batch: dict[str, Any] = {}
        for key, arr in obs.items():
            t = torch.from_numpy(np.ascontiguousarray(arr))
            batch[key] = t.float() / 255.0 if key in self.image_keys and t.dtype == torch.uint8 else t.float()
        if task is not None:
            batch["task"] = list(task)
        return self.pre(batch)

    def select_action(self, obs: dict[str, np.ndarray], task: list[str] | None) -> np.ndarray:
        with self.torch.inference_mode():
            action = self.post(self.policy.select_action(self._batch(obs, task)))
        return action.float().cpu().numpy()  # (B, A)

    def predict_action_chunk(self, obs: dict[str, np.ndarray], task: list[str] | None) -> np.ndarray:
        with self.torch.inference_mode():
            chunk = self.post(self.policy.predict_action_chunk(self._batch(obs, task)))
        return chunk.float().cpu().numpy()  # (B, H, A)


PROCESSOR_FILES = ("policy_preprocessor.json", "policy_postprocessor.json")


def _load_processors(cfg: Any, policy_dir: str, device: str, missing: str) -> tuple[Any, Any, dict[str, str]]:
    """lerobot's pre/post-processors saved beside the policy. A missing file fails the load (lerobot's own
    behaviour) unless ``missing == "identity"``: then lerobot's processors for that config without
    statistics stand in (their (un)normalizer passes values through), which is what a deployment that
    never loads the file runs; the doctor uses it to show the effect."""
    from lerobot.policies.factory import make_pre_post_processors

    overrides = {"device_processor": {"device": device}}
    status = {
        f: "loaded" if os.path.isfile(os.path.join(policy_dir, f)) else "missing" for f in PROCESSOR_FILES
    }
    if missing != "identity" or "missing" not in status.values():
        pre, post = make_pre_post_processors(
            cfg, pretrained_path=policy_dir, preprocessor_overrides=overrides
        )
        return pre, post, status
    from lerobot.processor import (
        PolicyProcessorPipeline,
        batch_to_transition,
        policy_action_to_transition,
        transition_to_batch,
        transition_to_policy_action,
    )

    pre, post = make_pre_post_processors(cfg)  # no dataset_stats: identity normalization
    if status[PROCESSOR_FILES[0]] == "loaded":
        pre = PolicyProcessorPipeline.from_pretrained(
            policy_dir,
            config_filename=PROCESSOR_FILES[0],
            overrides=overrides,
            to_transition=batch_to_transition,
            to_output=transition_to_batch,
        )
    if status[PROCESSOR_FILES[1]] == "loaded":
        post = PolicyProcessorPipeline.from_pretrained(
            policy_dir,
            config_filename=PROCESSOR_FILES[1],
            to_transition=policy_action_to_transition,
            to_output=transition_to_policy_action,
        )
    return pre, post, status


def _weights_check(policy: Any, policy_dir: str) -> dict[str, list[str]]:
    """Tensors of the policy missing from model.safetensors, and file tensors the policy has no use for."""
    from safetensors import safe_open

    path = os.path.join(policy_dir, "model.safetensors")
    if not os.path.isfile(path):
        return {}
    with safe_open(path, "pt") as f:
        in_file = set(f.keys())
    expected = set(policy.state_dict())
    return {"missing_weights": sorted(expected - in_file), "unexpected_weights": sorted(in_file - expected)}


def _protocol_streams() -> tuple[BinaryIO, BinaryIO]:
    """stdin/stdout for the protocol only: anything lerobot prints goes to stderr instead of the pipe."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return sys.stdin.buffer, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="actlab's LeRobot bridge child (runs in the lerobot env)")
    p.add_argument(
        "policy_dir", help="a LeRobot pretrained-policy directory (config.json, model.safetensors)"
    )
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument(
        "--missing-processors",
        choices=["fail", "identity"],
        default="fail",
        help="a missing policy_pre/postprocessor.json: fail to load (lerobot's behaviour), or run an "
        "identity stand-in and report it (the doctor shows what such a deployment does)",
    )
    args = p.parse_args(argv)
    inp, out = _protocol_streams()
    try:
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        handler = LeRobotHandler(args.policy_dir, args.device, args.missing_processors)
        info = handler.info()
    except Exception as e:
        write_message(
            out,
            {
                "op": "hello",
                "ok": False,
                "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc(),
                "actlab_error": actlab_error(e) or config_unreadable(e, args.policy_dir),
            },
        )
        return 1
    write_message(out, {"op": "hello", "ok": True, "protocol": PROTOCOL_VERSION, "info": info})
    serve(handler, inp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
