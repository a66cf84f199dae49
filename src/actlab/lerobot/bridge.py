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
import io
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from actlab.datasets.hub import model_location
from actlab.errors import ActlabError
from actlab.evaluation.sources import PolicySource
from actlab.evaluation.sweep import note_left_out
from actlab.lerobot.child import PROTOCOL_VERSION, ProtocolError, read_message, write_message
from actlab.utils.io import read_json
from actlab.utils.kinds import LEROBOT_CONFIG_FIX
from actlab.utils.procs import ChildGuard, kill_tree, start_group_kwargs

CHILD_SCRIPT = Path(__file__).with_name("child.py")
# Characters of the child's stderr quoted in an error.
STDERR_TAIL = 3000
# How long a closing child may take before it is killed (seconds).
CLOSE_WAIT_S = 30.0
# Default deadline for each answer of the child (seconds), the hello that follows loading the policy
# included: a large VLA loads in a few minutes on a CPU and one step takes seconds; a child that has not
# answered in 10 minutes is stuck (a deadlock, a blocked device), not slow. At the deadline the child and
# every process it started are killed (a process group of its own; utils.procs.kill_tree).
REPLY_TIMEOUT_S = 600.0
# The longest --lerobot-timeout accepted (seconds): a day; a larger one is a typo, not a slow policy.
MAX_REPLY_TIMEOUT_S = 86400.0


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
    cfg = read_json(file, "LeRobot policy config", fix=LEROBOT_CONFIG_FIX)
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


class DeadlinePassed(Exception):
    """A :class:`DeadlinePipe` call ran past its deadline."""


class DeadlinePipe:
    """The child's stdin and stdout, written and read only as far as ``select`` says they can be, so no
    call waits past its deadline: not on a child that stopped reading (a full pipe), not on one that
    stopped answering, and not on a grandchild that keeps the pipe open after the child was killed.

    ``stdin`` / ``stdout``: the unbuffered pipe ends of ``Popen(..., bufsize=0)``; stdin is made
    non-blocking (a write then takes what fits and never blocks)."""

    def __init__(self, stdin: Any, stdout: Any) -> None:
        self._in, self._out = stdin, stdout
        os.set_blocking(stdin.fileno(), False)
        self._deadline = 0.0

    def _wait(self, fd: int, write: bool) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise DeadlinePassed
        ready = select.select([], [fd], [], left) if write else select.select([fd], [], [], left)
        if not any(ready):
            raise DeadlinePassed

    def send(self, header: dict[str, Any], arrays: dict[str, np.ndarray] | None, deadline: float) -> None:
        """Write one message by ``deadline`` (time.monotonic); BrokenPipeError when the child is gone."""
        buf = io.BytesIO()
        write_message(buf, header, arrays)
        data, fd, self._deadline = memoryview(buf.getvalue()), self._in.fileno(), deadline
        while data:
            self._wait(fd, write=True)
            try:
                data = data[os.write(fd, data) :]
            except BlockingIOError:  # another writer filled it between select and write: wait again
                continue

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes, once some are there (b"" at EOF); read_message's stream interface."""
        fd = self._out.fileno()
        self._wait(fd, write=False)
        return os.read(fd, n)

    def receive(self, deadline: float) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Read one message by ``deadline``; EOFError when the child closed its output between messages."""
        self._deadline = deadline
        return read_message(self)  # type: ignore[arg-type]

    def close(self) -> None:
        for stream in (self._in, self._out):
            with contextlib.suppress(OSError):
                stream.close()


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
        if not 0 < timeout_s <= MAX_REPLY_TIMEOUT_S:  # (also refuses NaN)
            raise ActlabError(
                "the lerobot child's timeout must be > 0 s",
                field="--lerobot-timeout",
                expected=f"seconds in (0, {MAX_REPLY_TIMEOUT_S:g}], e.g. {REPLY_TIMEOUT_S:g}",
                found=timeout_s,
            )
        self.timeout_s = float(timeout_s)
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
        if (self.policy_dir / "actlab_bundle").is_dir():
            # the plugin's export: its bundle's record checked here too, where its notes reach the user
            # (the child's stderr is read only when it fails: an export without the record was run with
            # the note unsaid, 26th fault run, ev_swap_rec_removed2)
            from actlab.lerobot.export import PLUGIN_BUNDLE, check_exported_bundle

            check_exported_bundle(self.policy_dir, PLUGIN_BUNDLE)
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
        self._guard: ChildGuard | None = None
        self._pipe: DeadlinePipe | None = None
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
        # Unbuffered pipes, read and written only when select says so (DeadlinePipe); a process group of
        # its own, ended as a whole (kill_tree): the python may be a wrapper whose own child holds the pipes.
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=self.env,
            bufsize=0,
            **start_group_kwargs(),
        )
        self._guard = ChildGuard(self._proc, group=True)  # ended with its tree if we are killed (-9)
        self._pipe = DeadlinePipe(self._proc.stdin, self._proc.stdout)
        header, _ = self._exchange("hello", None, None, self.timeout_s)
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
        self._kill()  # first: the tail then holds everything the child and its children wrote
        tail = self._stderr_tail()
        return ActlabError(
            problem,
            file=self.policy_dir,
            found=((f"{found}\n" if found else "") + ("child stderr (end):\n" + tail if tail else ""))
            or None,
            fix=fix or f"run the lerobot python by hand: {self.python} {self.child_script} {self.policy_dir}",
        )

    def _exchange(
        self,
        op: str,
        header: dict[str, Any] | None,
        arrays: dict[str, np.ndarray] | None,
        timeout_s: float,
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Send a request (none for the hello) and read its answer, both within ``timeout_s`` seconds.
        Past the deadline the child's whole process tree is killed and an ActlabError names it."""
        assert self._proc is not None and self._pipe is not None
        proc, pipe = self._proc, self._pipe
        deadline = time.monotonic() + timeout_s
        try:
            if header is not None:
                pipe.send(header, arrays, deadline)
            answer = pipe.receive(deadline)
        except DeadlinePassed:
            raise self._fail(
                f"the lerobot child (pid {proc.pid}, {self.python}) did not answer {op!r} within the "
                f"--lerobot-timeout of {timeout_s:g} s; it was killed with every process it started",
                fix="if the policy is only slow (a large model loading on a CPU), raise --lerobot-timeout "
                f"(seconds); otherwise run the child by hand to see where it hangs: {self.python} "
                f"{self.child_script} {self.policy_dir}",
            ) from None
        except (BrokenPipeError, ConnectionResetError) as e:
            code = proc.poll()
            raise self._fail(f"the lerobot child is gone (exit code {code}) before {op!r}") from e
        except EOFError:
            try:
                code = proc.wait(timeout=max(0.1, min(CLOSE_WAIT_S, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:  # its output closed, the process did not exit
                code = "none: it closed its output but did not exit, killed"
            raise self._fail(f"the lerobot child exited (code {code}) before answering {op!r}") from None
        except ProtocolError as e:
            raise self._fail(f"the lerobot child broke the protocol while answering {op!r}: {e}") from e
        header_in, arrays_in = answer
        if not header_in.get("ok", False):
            error = header_in.get("error", "?")
            refusal = header_in.get("actlab_error")
            if isinstance(refusal, dict) and isinstance(refusal.get("problem"), str):
                # actlab's own refusal inside lerobot (the plugin): raised as itself; it was a traceback in
                # found, then "run the lerobot python by hand", which shows the same refusal
                if op == "hello":
                    self._kill()
                fields = {k: refusal.get(k) for k in ("file", "field", "expected", "found", "fix")}
                raise ActlabError(refusal["problem"], **fields)
            if op == "hello":
                raise self._fail(
                    f"lerobot could not load the policy: {error}", found=header_in.get("traceback")
                )
            raise ActlabError(
                f"the LeRobot policy failed on {op!r}: {error}",
                file=self.policy_dir,
                found=header_in.get("traceback"),
                fix="the traceback is from lerobot's side (child process); check the observation keys/shapes "
                "against the policy's config.json input_features",
            )
        return header_in, arrays_in

    def _request(
        self, header: dict[str, Any], arrays: dict[str, np.ndarray] | None = None
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        self.start()
        return self._exchange(header["op"], header, arrays, self.timeout_s)

    def _kill(self) -> None:
        """End the child's whole process tree (also after the child exited: what it left in its group)."""
        proc, self._proc = self._proc, None
        pipe, self._pipe = self._pipe, None
        if proc is not None:
            kill_tree(proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=CLOSE_WAIT_S)  # reap it (SIGKILL: only a process stuck in the kernel waits)
        guard, self._guard = self._guard, None
        if guard is not None:
            guard.disarm()
        if pipe is not None:
            pipe.close()

    def close(self) -> None:
        """Ask the child to exit (its tree killed after CLOSE_WAIT_S); a no-op when it is not running."""
        proc, pipe = self._proc, self._pipe
        # A child that never said hello is not asked for a goodbye: it was waited on for CLOSE_WAIT_S
        # (30 s) after a SIGTERM or a failure of the command, while it would never answer.
        if proc is not None and pipe is not None and proc.poll() is None and self.info is not None:
            # The goodbye is read under its own deadline: a child that never answers it is killed.
            deadline = time.monotonic() + CLOSE_WAIT_S
            try:
                pipe.send({"op": "close"}, None, deadline)
                pipe.receive(deadline)
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except (OSError, EOFError, ProtocolError, DeadlinePassed, subprocess.TimeoutExpired):
                pass
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
        steps = [d for d in (p / "checkpoints").glob("*") if d.name.isdigit() and d.is_dir()]
        ckpts = sorted(
            (d / "pretrained_model" for d in steps if (d / "pretrained_model" / "config.json").is_file()),
            key=lambda c: int(c.parent.name),
        )
        # a checkpoint without pretrained_model/config.json (an interrupted copy or save) was left out of
        # the sweep without a word, as actlab's own step_N (evaluation.sweep.checkpoints_in says it too)
        for d in sorted(set(steps) - {c.parent for c in ckpts}):
            note_left_out(d, "LeRobot checkpoint", "pretrained_model/config.json")
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
