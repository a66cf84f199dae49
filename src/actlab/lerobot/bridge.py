"""Evaluate ANY LeRobot policy in actlab's harness: a policy object whose model runs in a child process.

lerobot pins its own torch, so the policy cannot be imported here. :class:`LeRobotBridgePolicy` starts
``child.py`` with the user's lerobot python, sends observations (images uint8 ``(B, C, H, W)``, state
float32) through a pipe and gets actions back (wire format: :mod:`actlab.lerobot.child`; JSON headers and
raw buffers, never pickle). To the harness it is a policy like actlab's own: ``reset()``,
``select_action(obs) -> (B, A)``, ``predict_action_chunk(obs) -> (B, H, A)`` and a ``features`` dict
(what the sim must render, at which size), so episodes, taxonomy, confidence intervals, videos, whiskers
and sweeps are unchanged. Reset, normalization and postprocessing are lerobot's own processors.

Camera names: ``rename`` pairs ``A=B`` map a policy input to an env observation key (either order: the
side that names one of the policy's inputs is the policy's). ``features`` speaks the env's names; the
child gets the policy's.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actlab.datasets.hub import model_location
from actlab.errors import ActlabError
from actlab.evaluation.sources import PolicySource
from actlab.lerobot.child import PROTOCOL_VERSION, ProtocolError, read_message, write_message
from actlab.utils.io import read_json

CHILD_SCRIPT = Path(__file__).with_name("child.py")
# Characters of the child's stderr quoted in an error.
STDERR_TAIL = 3000
# How long a closing child may take before it is killed (seconds).
CLOSE_WAIT_S = 30.0
# Default deadline for each answer of the child (seconds), the hello that follows loading the policy
# included: a large VLA loads in a few minutes on a CPU and one step takes seconds; a child that has not
# answered in 10 minutes is stuck (a deadlock, a blocked device), not slow.
REPLY_TIMEOUT_S = 600.0


def parse_rename(pairs: Sequence[str]) -> list[tuple[str, str]]:
    """``["observation.images.x=observation.images.top", ...]`` -> pairs; an ActlabError on bad syntax."""
    out = []
    for raw in pairs:
        a, sep, b = raw.partition("=")
        if not sep or not a.strip() or not b.strip():
            raise ActlabError(
                "a --rename entry must be KEY=KEY",
                field="--rename",
                expected="observation.images.<policy camera>=observation.images.<env camera>",
                found=raw,
            )
        out.append((a.strip(), b.strip()))
    return out


def resolve_rename(pairs: Sequence[tuple[str, str]], policy_keys: Sequence[str]) -> dict[str, str]:
    """``{policy input key: env key}`` from rename pairs (either order, see the module docstring)."""
    mapping: dict[str, str] = {}
    for a, b in pairs:
        if (a in policy_keys) == (b in policy_keys):
            raise ActlabError(
                "a --rename pair must name exactly one of the policy's inputs",
                field="--rename",
                expected="one side in: " + ", ".join(policy_keys),
                found=f"{a}={b}",
                fix="write POLICY_KEY=ENV_KEY, e.g. observation.images.front=observation.images.top",
            )
        policy_key, env_key = (a, b) if a in policy_keys else (b, a)
        mapping[policy_key] = env_key
    envs = list(mapping.values())
    if len(set(envs)) != len(envs):
        raise ActlabError("two policy inputs renamed to the same env key", field="--rename", found=mapping)
    return mapping


def read_policy_features(policy_dir: str | Path) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(policy type, input_features, output_features) from a LeRobot ``config.json`` (no lerobot needed)."""

    file = Path(policy_dir) / "config.json"
    if not file.is_file():
        raise ActlabError(
            "not a LeRobot pretrained-policy directory (no config.json)",
            file=file,
            expected="config.json, model.safetensors, policy_preprocessor.json, policy_postprocessor.json",
            fix="pass e.g. outputs/train/RUN/checkpoints/last/pretrained_model",
        )
    cfg = read_json(file, "LeRobot policy config")
    inputs = cfg.get("input_features") if isinstance(cfg, dict) else None
    outputs = cfg.get("output_features") if isinstance(cfg, dict) else None
    if not isinstance(inputs, dict) or not isinstance(outputs, dict) or "type" not in cfg:
        raise ActlabError(
            "the LeRobot config has no type / input_features / output_features",
            file=file,
            expected='{"type": ..., "input_features": {...}, "output_features": {...}}',
            found=str(cfg)[:120],
        )
    return str(cfg["type"]), inputs, outputs


def dataset_features(
    inputs: dict[str, Any], outputs: dict[str, Any], mapping: dict[str, str]
) -> dict[str, dict[str, Any]]:
    """LeRobot policy features -> dataset-style features under the env's names (images ``[H, W, C]``)."""
    out: dict[str, dict[str, Any]] = {}
    for key, feat in inputs.items():
        shape = [int(s) for s in feat.get("shape", [])]
        name = mapping.get(key, key)
        if feat.get("type") == "VISUAL":
            c, h, w = shape
            out[name] = {"dtype": "video", "shape": [h, w, c], "names": ["height", "width", "channels"]}
        elif feat.get("type") in ("STATE", "ENV"):
            out[name] = {"dtype": "float32", "shape": shape, "names": None}
        # other input types (e.g. language tokens made by the processors) are not observations
    for key, feat in outputs.items():
        out[key] = {"dtype": "float32", "shape": [int(s) for s in feat.get("shape", [])], "names": None}
    return out


# Variables of actlab's environment that must not reach the lerobot python (another venv, another torch).
FOREIGN_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")


def child_env() -> dict[str, str]:
    """This process's environment without :data:`FOREIGN_ENV`: the lerobot python finds its own packages."""
    return {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}


class ChildSlot:
    """At most one running child among the bridges that share it (a sweep over LeRobot checkpoints keeps
    one policy in memory at a time, as actlab's workers do with bundles)."""

    def __init__(self) -> None:
        self.holder: LeRobotBridgePolicy | None = None

    def take(self, bridge: LeRobotBridgePolicy) -> None:
        if self.holder is not None and self.holder is not bridge:
            self.holder.close()
        self.holder = bridge


class LeRobotBridgePolicy:
    """A LeRobot policy running in ``python`` (the user's lerobot environment), seen as an actlab policy.

    The child starts at the first call (or :meth:`start`) and stops at :meth:`close` (also on ``with``
    exit). ``instruction``: the language task sent with every observation (VLA policies read it);
    ``threads``: the child's torch threads; ``slot``: shared by bridges of which one runs at a time;
    ``child_script`` / ``child_args``: what the python runs (tests use a fake child); ``env``: the child's
    environment (default: this one without PYTHONPATH, PYTHONHOME, VIRTUAL_ENV); ``timeout_s``: the
    longest wait for one answer of the child (loading included) before it is killed and an ActlabError
    raised.
    """

    def __init__(
        self,
        policy_dir: str | Path,
        python: str | Path,
        *,
        rename: Sequence[str] | Sequence[tuple[str, str]] = (),
        device: str = "cpu",
        instruction: str | None = None,
        threads: int | None = None,
        slot: ChildSlot | None = None,
        child_script: str | Path = CHILD_SCRIPT,
        child_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        timeout_s: float = REPLY_TIMEOUT_S,
    ) -> None:
        if not timeout_s > 0:
            raise ActlabError(
                "the lerobot child's timeout must be > 0 s", field="--lerobot-timeout", found=timeout_s
            )
        self.timeout_s = float(timeout_s)
        self._timed_out = False
        self.policy_dir = Path(policy_dir)
        self.python = str(python)
        if not Path(self.python).exists():
            raise ActlabError(
                "the lerobot python does not exist",
                file=self.python,
                field="--lerobot-python",
                fix="pass the python of the environment lerobot is installed in (docs/lerobot.md)",
            )
        self.type, self.input_features, self.output_features = read_policy_features(self.policy_dir)
        pairs = [tuple(p) for p in rename if not isinstance(p, str)]
        pairs += parse_rename([p for p in rename if isinstance(p, str)])
        obs_keys = [k for k, v in self.input_features.items() if v.get("type") in ("VISUAL", "STATE", "ENV")]
        self.to_env = resolve_rename(pairs, obs_keys)  # policy key -> env key
        self.to_policy = {e: p for p, e in self.to_env.items()}
        self.features = dataset_features(self.input_features, self.output_features, self.to_env)
        self.device = device
        self.instruction = instruction
        self.threads = threads
        self.slot = slot
        self.child_script = str(child_script)
        self.child_args = list(child_args)
        self.env = env if env is not None else child_env()
        self.info: dict[str, Any] | None = None
        self._proc: subprocess.Popen | None = None
        self._stderr: Any = None

    # ------------------------------------------------------------------------------------------ process
    def start(self) -> None:
        """Start the child and wait for its hello (the policy is loaded when this returns)."""
        if self._proc is not None:
            return
        if self.slot is not None:
            self.slot.take(self)
        cmd = [
            self.python,
            self.child_script,
            str(self.policy_dir),
            "--device",
            self.device,
            *self.child_args,
        ]
        if self.threads:
            cmd += ["--threads", str(self.threads)]
        if self._stderr is not None:
            self._stderr.close()  # from a start that failed
        # The child's stderr goes to a file (quoted in errors): a pipe nobody reads would block the child.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=self.env
        )
        header, _ = self._receive("hello")
        if header.get("protocol") != PROTOCOL_VERSION:
            self.close()
            raise ActlabError(
                "the bridge child speaks another protocol version",
                field="protocol",
                expected=PROTOCOL_VERSION,
                found=header.get("protocol"),
            )
        self.info = header.get("info") or {}

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-STDERR_TAIL:]

    def _fail(self, problem: str, found: Any = None, fix: str | None = None) -> ActlabError:
        tail = self._stderr_tail()
        self._kill()
        return ActlabError(
            problem,
            file=self.policy_dir,
            found=(f"{found}\n" if found else "") + ("child stderr (end):\n" + tail if tail else ""),
            fix=fix or f"run the lerobot python by hand: {self.python} {self.child_script} {self.policy_dir}",
        )

    def _on_deadline(self, proc: subprocess.Popen) -> None:
        # Runs on the timer's thread: killing the child ends the main thread's blocked read with EOF.
        self._timed_out = True
        with contextlib.suppress(OSError):
            proc.kill()

    def _receive(self, op: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        assert self._proc is not None and self._proc.stdout is not None
        proc = self._proc
        self._timed_out = False
        timer = threading.Timer(self.timeout_s, self._on_deadline, args=(proc,))
        timer.daemon = True
        timer.start()
        try:
            header, arrays = read_message(proc.stdout)
        except EOFError:
            timer.cancel()
            if self._timed_out:
                raise self._fail(
                    f"the lerobot child (pid {proc.pid}) did not answer {op!r} within {self.timeout_s:g} s "
                    "and was killed",
                    fix="if the policy is only slow (a large model loading on a CPU), raise "
                    f"--lerobot-timeout; otherwise run the child by hand to see where it hangs: "
                    f"{self.python} "
                    f"{self.child_script} {self.policy_dir}",
                ) from None
            try:
                code = proc.wait(timeout=CLOSE_WAIT_S)  # its stdout closed: it is exiting
            except subprocess.TimeoutExpired:
                code = "none: it closed its output but did not exit, killed"
            raise self._fail(f"the lerobot child exited (code {code}) before answering {op!r}") from None
        except ProtocolError as e:
            timer.cancel()
            raise self._fail(f"the lerobot child broke the protocol while answering {op!r}: {e}") from e
        finally:
            timer.cancel()
        if not header.get("ok", False):
            error = header.get("error", "?")
            if op == "hello":
                raise self._fail(f"lerobot could not load the policy: {error}", found=header.get("traceback"))
            raise ActlabError(
                f"the LeRobot policy failed on {op!r}: {error}",
                file=self.policy_dir,
                found=header.get("traceback"),
                fix="the traceback is from lerobot's side (child process); check the observation keys/shapes "
                "against the policy's config.json input_features",
            )
        return header, arrays

    def _request(
        self, header: dict[str, Any], arrays: dict[str, np.ndarray] | None = None
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        self.start()
        assert self._proc is not None and self._proc.stdin is not None
        try:
            write_message(self._proc.stdin, header, arrays)
        except (BrokenPipeError, OSError) as e:
            code = self._proc.poll()
            raise self._fail(f"the lerobot child is gone (exit code {code})") from e
        return self._receive(header["op"])

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=CLOSE_WAIT_S)  # SIGKILL: only a process stuck in the kernel outlives it
        for stream in (getattr(proc, "stdin", None), getattr(proc, "stdout", None)):
            if stream is not None:
                stream.close()

    def close(self) -> None:
        """Ask the child to exit (killed after CLOSE_WAIT_S); a no-op when it is not running."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            # The goodbye is read under the same deadline: a child that never answers it is killed.
            timer = threading.Timer(CLOSE_WAIT_S, self._on_deadline, args=(proc,))
            timer.daemon = True
            timer.start()
            try:
                write_message(proc.stdin, {"op": "close"})
                read_message(proc.stdout)
                proc.wait(timeout=CLOSE_WAIT_S)
            except (OSError, EOFError, ProtocolError, subprocess.TimeoutExpired):
                pass
            finally:
                timer.cancel()
        self._kill()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        if self.slot is not None and self.slot.holder is self:
            self.slot.holder = None

    def __enter__(self) -> LeRobotBridgePolicy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # a forgotten close must not leave a process behind
        with contextlib.suppress(Exception):
            self._kill()

    # ------------------------------------------------------------------------------------------ policy
    def reset(self) -> None:
        """Reset lerobot's policy and processors; seeds the child's torch from this process's torch RNG
        (the harness seeds it per episode), so a stochastic policy draws the same noise per episode."""
        seed = None
        if "torch" in sys.modules:
            import torch

            seed = int(torch.randint(0, 2**31 - 1, ()).item())
        self._request({"op": "reset", "seed": seed})

    def _arrays(self, obs: dict[str, Any]) -> tuple[dict[str, np.ndarray], int]:
        arrays, batch = {}, None
        for key, value in obs.items():
            if hasattr(value, "detach"):
                value = value.detach().cpu().numpy()
            arr = np.asarray(value)
            if arr.dtype != np.uint8:
                arr = arr.astype(np.float32)
            arrays[self.to_policy.get(key, key)] = arr
            batch = arr.shape[0] if batch is None else batch
        return arrays, int(batch or 1)

    def _ask(self, op: str, obs: dict[str, Any]) -> Any:
        import torch

        arrays, batch = self._arrays(obs)
        header = {"op": op}
        if self.instruction is not None:
            header["task"] = [self.instruction] * batch
        _, out = self._request(header, arrays)
        return torch.from_numpy(out["action"])

    def select_action(self, obs: dict[str, Any]) -> Any:
        """Next action (B, A) float32 from lerobot's ``select_action`` + postprocessor."""
        return self._ask("select_action", obs)

    def predict_action_chunk(self, obs: dict[str, Any]) -> Any:
        """Action chunk (B, H, A) float32 from lerobot's ``predict_action_chunk`` + postprocessor."""
        return self._ask("predict_action_chunk", obs)

    def processors(self, action: np.ndarray) -> dict[str, np.ndarray]:
        """The processors' round trip of dataset actions ``(N, A)``: ``normalized`` by the preprocessor's
        normalizer (what training fit the model to) and ``roundtrip`` (that through the postprocessor)."""
        _, out = self._request({"op": "processors"}, {"action": np.asarray(action, np.float32)})
        return out


def checkpoint_label(policy_dir: str | Path) -> tuple[str, int | None]:
    """(table name, training step) of a LeRobot policy directory.

    lerobot-train writes ``RUN/checkpoints/<step, 6 digits>/pretrained_model`` and a ``last`` symlink to
    the newest; ``last`` is resolved to its step, and the name says which run and step it is, as actlab's
    own checkpoints are named (``RUN_step_0000004``), so side-by-side tables are unambiguous. A directory
    outside that layout keeps its own name and has no step (unless ``training_state/training_step.json``
    beside it says one).
    """
    p = Path(policy_dir)
    real = p.resolve()
    ckpt = real.parent if real.name == "pretrained_model" else real
    step: int | None = int(ckpt.name) if ckpt.name.isdigit() else None
    state = ckpt / "training_state" / "training_step.json"
    if step is None and state.is_file():
        with contextlib.suppress(ValueError, TypeError, ActlabError):
            step = int(read_json(state, "lerobot training step").get("step"))
    if ckpt.parent.name == "checkpoints" and step is not None:
        return f"{ckpt.parent.parent.name}_step_{step:07d}", step
    return (p.name if p.name != "pretrained_model" else ckpt.name), step


def lerobot_sources(
    paths: Sequence[str | Path], python: str | Path, **kwargs: Any
) -> tuple[list[Any], ChildSlot]:
    """Evaluation sources for LeRobot policy directories, or lerobot-train output directories (every
    ``checkpoints/NNNNNN/pretrained_model``: a sweep). One child runs at a time (the returned slot)."""

    slot = ChildSlot()
    found: list[tuple[str, int | None, Path]] = []
    for raw in paths:
        p = model_location(raw)  # a directory, or owner/name in huggingface_hub's local cache
        if (p / "config.json").is_file():
            name, step = checkpoint_label(p)
            if p != Path(raw):  # a Hub snapshot found by its repo id: the id names it
                name = str(raw)
            found.append((name, step, p))
            continue
        ckpts = sorted(
            (c for c in (p / "checkpoints").glob("*/pretrained_model") if c.parent.name.isdigit()),
            key=lambda c: int(c.parent.name),
        )
        if not ckpts:
            raise ActlabError(
                "no LeRobot policy found",
                file=p,
                expected="a pretrained_model directory (config.json) or a lerobot-train output directory "
                "with checkpoints/NNNNNN/pretrained_model",
                fix="pass e.g. outputs/train/RUN/checkpoints/last/pretrained_model",
            )
        found += [(*checkpoint_label(c), c) for c in ckpts]
    sources = [
        PolicySource(name=name, obj=LeRobotBridgePolicy(path, python, slot=slot, **kwargs), step=step)
        for name, step, path in found
    ]
    return sources, slot


__all__ = [
    "ChildSlot",
    "LeRobotBridgePolicy",
    "checkpoint_label",
    "dataset_features",
    "lerobot_sources",
    "parse_rename",
    "read_policy_features",
    "resolve_rename",
]
