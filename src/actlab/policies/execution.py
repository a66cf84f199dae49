"""One execution model for chunked policies: how a chunk is computed while the previous one executes.

Used by the evaluation harness (``actlab eval --execution``; batched envs, each row with its own chunk
clock) and by the toy servo simulator (``actlab.policies.rtc.simulate``, which takes an
:class:`ExecutionSpec` too: one set of mode names); rollout code asks
:class:`ChunkExecutor` for the next action and never re-implements these rules.

The model (RTC, Black et al. 2025), per row (env), with ``t`` the control steps since its episode began:

- The first chunk is computed from the first observation *before the clock starts* (a robot waits for
  its first plan), so it is executed from index 0 whatever the latency.
- An inference starts every ``horizon`` (s) steps, at ``t = s, 2s, ...``, from the observation of step
  ``t``; its chunk (index k = the action for step ``t + k``) arrives ``latency`` (D) steps later. Steps
  ``t .. t+D-1`` execute the previous chunk (these D actions are *committed*); from step ``t + D`` on the
  new chunk is executed from its index D. So each chunk is executed for s steps, and the previous chunk
  must still hold actions: ``s + D <= H`` (the chunk size); one inference at a time: ``D <= s``.
- Modes:
  ``sync``: the sim waits for the policy (``select_action``; the caller's business, not this class's).
  ``async``: the new chunk is switched to as it is (naive asynchronous execution); at D = 0 it is exactly
  ``sync`` with ``s = n_action_steps``.
  ``blend``: inference-time RTC only: the new chunk's overlap with the old one is blended, old-chunk
  weight 1 for k < D decaying to 0 at k = H - s (the RTC paper's exponential soft mask).
  ``rtc``: as ``blend``, and the committed actions are handed to ``predict_action_chunk(obs, prefix)``
  (act_relative trained with ``rtc_max_delay >= D`` continues them). At D = 0 there is no prefix and rtc
  is ``blend``: the overlap is still blended, so it differs from ``sync``.
  ``ensemble``: temporal ensembling (ACT) under the same delay: a chunk starts every s steps (default
  ``max(1, D)``: the inference engine always busy) and the action of step u is the weighted average of
  every arrived chunk's prediction for u, weights ``exp(-coeff * i)``, i = 0 the oldest
  (:class:`actlab.policies.ensemble.TemporalEnsembler`, the one implementation). At D = 0 and s = 1 it is
  ACT's temporal ensembling.
  ``correct``: ``async``'s chunks, and at every step the executing chunk's action is corrected from the
  newest observation by the policy's correction head (A2C2; ``policy.correct_actions(obs, planned, k)``,
  k = the steps since the chunk's observation, ``actlab.policies.correction``): one small MLP call per
  step, in the control thread (with ``background`` it runs while the next chunk is being computed). A
  head that outputs zero executes exactly ``async``'s actions. Needs a policy trained with
  ``correction_head`` (refused otherwise, with that fix).
- Rows that do not need a chunk at a step ride along in the batched call and their output is dropped:
  each row's numbers then never depend on which other rows needed one (batched matmuls may round
  differently for different batch sizes), and there is still one policy call per control step.
- ``background=True`` (a real robot: actlab's LeRobot plugin) runs each inference started on the clock in
  a worker thread while the caller keeps stepping; its chunk is waited for at its arrival step, so the
  actions are exactly the foreground executor's (the sim's), and the robot moves during the inference.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from actlab.errors import ActlabError

EXECUTION_MODES = ("sync", "async", "ensemble", "blend", "rtc", "correct")
# Earlier spellings (the servo simulator's own mode names), refused with the name to use instead.
RENAMED_MODES = {"naive": "async"}
SCHEDULES = ("exp", "linear", "none")
# ACT's temporal-ensembling coefficient (Zhao et al. 2023): w_i = exp(-0.01 i), i = 0 the oldest prediction.
ENSEMBLE_COEFF = 0.01
# Where each setting of an ExecutionSpec is given: actlab eval's flag, and the LeRobot plugin's policy
# config field (lerobot-rollout --policy.<field>=..., integrations/lerobot_policy_actlab) that runs the same.
EVAL_FLAGS = {"mode": "--execution", "latency": "--latency", "horizon": "--horizon"}
PLUGIN_FIELDS = {"mode": "execution", "latency": "execution_latency", "horizon": "execution_horizon"}


@dataclasses.dataclass(frozen=True)
class ExecutionSpec:
    """How chunks are executed while the next one is computed (one cell of a delay sweep)."""

    # sync / async / ensemble / blend / rtc / correct (module docstring)
    mode: str = "sync"
    # D: control steps one inference takes; the previous chunk is executed meanwhile
    latency: int = 0
    # s: control steps between inference starts (actions executed per chunk); None: the policy's
    # n_action_steps (ensemble: max(1, latency))
    horizon: int | None = None
    # overlap blending for blend / rtc: "exp" (RTC paper), "linear", or "none" (committed prefix only)
    schedule: str = "exp"
    # temporal-ensembling weight exp(-coeff * i), i = 0 the oldest prediction (ensemble mode)
    ensemble_coeff: float = ENSEMBLE_COEFF

    def __post_init__(self) -> None:
        def check(ok: bool, field: str, expected: str, found: object, fix: str | None = None) -> None:
            if not ok:
                raise ActlabError(
                    "invalid execution setting", field=field, expected=expected, found=found, fix=fix
                )

        new = RENAMED_MODES.get(self.mode)
        check(new is None, "execution", f"{new} (the new name of {self.mode!r})", self.mode, f"use {new}")
        check(self.mode in EXECUTION_MODES, "execution", " / ".join(EXECUTION_MODES), self.mode)
        check(isinstance(self.latency, int) and self.latency >= 0, "latency", "an integer >= 0", self.latency)
        check(
            self.horizon is None or (isinstance(self.horizon, int) and self.horizon >= 1),
            "horizon",
            "an integer >= 1",
            self.horizon,
        )
        check(self.schedule in SCHEDULES, "schedule", " / ".join(SCHEDULES), self.schedule)
        check(self.ensemble_coeff >= 0, "ensemble_coeff", ">= 0", self.ensemble_coeff)
        check(
            self.mode != "sync" or self.latency == 0,
            "latency",
            "0 with --execution sync (the sim waits for the policy)",
            self.latency,
            "use --execution async, ensemble, blend, rtc or correct for a latency",
        )
        check(  # sync executes the policy's own n_action_steps: a horizon there was ignored without a word
            self.mode != "sync" or self.horizon is None,
            "horizon",
            "none with --execution sync (it executes the policy's n_action_steps of each chunk)",
            self.horizon,
            "leave --horizon out, or run --execution async --latency 0 --horizon N (N actions of each "
            "chunk, no delay)",
        )

    def resolved_horizon(self, n_action_steps: int, chunk_size: int | None = None) -> int:
        """s for a policy that executes ``n_action_steps`` of each chunk when run synchronously.

        Without ``--horizon``, a policy whose ``n_action_steps`` leaves no room for the delay (LeRobot's
        ACT default executes its whole chunk: n_action_steps = chunk_size = 100) gets the largest horizon
        that fits, ``chunk_size - latency``, when that is at least the latency (:func:`horizon_note` says
        so); otherwise ``n_action_steps`` stays and :func:`check_execution` names the limit."""
        if self.horizon is not None:
            return self.horizon
        if self.mode == "ensemble":
            return max(1, self.latency)
        if self.mode != "sync" and chunk_size is not None and n_action_steps + self.latency > chunk_size:
            fits = chunk_size - self.latency
            if fits >= max(1, self.latency):
                return fits
        return n_action_steps

    def label(self) -> str:
        return f"{self.mode}@{self.latency}"


@dataclasses.dataclass(frozen=True)
class ChunkLimits:
    """What a policy can execute: read from its config (a bundle's config.json or ``policy.config``)."""

    chunk_size: int  # H: actions per predicted chunk
    n_action_steps: int  # actions executed per chunk when run synchronously
    rtc_max_delay: int = 0  # longest committed prefix the policy was trained to continue (0: none)
    history: bool = False  # the policy keeps an observation history in select_action (n_obs_steps, deltas)
    correction_head: bool = False  # the policy has a correction head (correct_actions: --execution correct)

    @classmethod
    def from_config(cls, cfg: Any) -> ChunkLimits:
        """From a policy config object or its JSON dict."""

        def get(name: str, default: Any = None) -> Any:
            return cfg.get(name, default) if isinstance(cfg, dict) else getattr(cfg, name, default)

        h = int(get("chunk_size"))
        return cls(
            chunk_size=h,
            n_action_steps=int(get("n_action_steps") or h),
            rtc_max_delay=int(get("rtc_max_delay") or 0),
            history=int(get("n_obs_steps") or 1) > 1 or get("obs_state_delta_frames") is not None,
            correction_head=get("correction_head") is True,
        )


def check_execution(spec: ExecutionSpec, limits: ChunkLimits, where: str = "policy") -> int:
    """Raise an ActlabError naming the limit if ``spec`` cannot run on a policy with ``limits``; return s."""
    if spec.mode == "sync":
        return limits.n_action_steps
    if spec.mode == "correct" and not limits.correction_head:
        raise ActlabError(
            f"{where}: --execution correct corrects each step's action with the policy's correction head, "
            "and this policy has none",
            field="--execution",
            expected="a policy trained with correction_head = true",
            found="correction_head false (or absent)",
            fix="train with --set policy.correction_head=true, or use --execution async (the same chunks, "
            "uncorrected)",
        )
    s, d, h = spec.resolved_horizon(limits.n_action_steps, limits.chunk_size), spec.latency, limits.chunk_size
    if d >= h:
        raise ActlabError(
            f"{where}: a latency of {d} steps is not shorter than its chunk ({h} actions): the robot would "
            "run out of actions before the next chunk arrives",
            field="--latency",
            expected=f"< chunk_size ({h})",
            found=d,
            fix="lower --latency, or train a policy with a longer chunk_size",
        )
    if s + d > h and spec.horizon is None and spec.mode != "ensemble" and h - d < d:
        raise ActlabError(
            f"{where}: no execution horizon fits a latency of {d} in a chunk of {h} actions: a chunk must be "
            "executed at least as long as the next one takes (horizon >= latency) and the previous one must "
            "last through the delay (horizon + latency <= chunk size)",
            field="--latency",
            expected=f"<= {h // 2} (half the chunk size) for this policy",
            found=d,
            fix="lower --latency, or train a policy with a longer chunk_size",
        )
    if s + d > h:
        raise ActlabError(
            f"{where}: the previous chunk runs out during the delay (execution horizon {s} + latency {d} "
            f"> chunk size {h})",
            field="--horizon",
            expected=f"horizon + latency <= {h}",
            found=s + d,
            fix=f"pass --horizon {h - d} or less, or lower --latency",
        )
    if d > s:
        raise ActlabError(
            f"{where}: the latency ({d}) is longer than the execution horizon ({s}); one inference runs "
            "at a time, so a chunk must be executed at least as long as the next one takes",
            field="--horizon",
            expected=f">= latency ({d})",
            found=s,
            fix=f"pass --horizon {d} (or more)",
        )
    if spec.mode == "rtc" and d > limits.rtc_max_delay:
        raise ActlabError(
            f"{where}: --execution rtc hands the {d} committed actions to the policy as a prefix, but it "
            f"was trained for prefixes of at most rtc_max_delay = {limits.rtc_max_delay}",
            field="--latency",
            expected=f"<= rtc_max_delay ({limits.rtc_max_delay})",
            found=d,
            fix="use --execution blend (inference-time blending only), or train act_relative with a larger "
            "rtc_max_delay (e.g. the so101_sim_cpu_rtc preset)",
        )
    if limits.history:
        raise ActlabError(
            f"{where}: the policy reads an observation history that only select_action keeps, so it cannot "
            "be run asynchronously yet",
            field="--execution",
            expected="a policy with n_obs_steps 1 and no obs_state_delta_frames",
            found=spec.mode,
            fix="use --execution sync for this policy",
        )
    return s


def horizon_note(spec: ExecutionSpec, limits: ChunkLimits, where: str = "policy") -> str | None:
    """The sentence that says the executor chose the horizon (None when it did not): no ``--horizon`` and
    the policy's n_action_steps + latency exceed its chunk, so ``chunk_size - latency`` is executed."""
    if spec.mode in ("sync", "ensemble") or spec.horizon is not None:
        return None
    s = spec.resolved_horizon(limits.n_action_steps, limits.chunk_size)
    if s == limits.n_action_steps:
        return None
    return (
        f"{where}: executes {limits.n_action_steps} of its {limits.chunk_size} actions per chunk, which "
        f"leaves no room for a delay of {spec.latency}: horizon {s} (chunk_size - latency, the largest that "
        "fits) is used; --horizon sets another"
    )


def blend_weights(horizon: int, delay: int, execution_horizon: int, schedule: str = "exp") -> Any:
    """Weights of the old chunk per new-chunk index (H,): 1 for k < d, decaying to 0 at k = H - s.

    ``exp`` is the RTC paper's soft mask ``c (e^c - 1) / (e - 1)`` with ``c = (H - s - k) / (H - s - d + 1)``.
    """
    import torch

    k = torch.arange(horizon, dtype=torch.float64)
    end = horizon - execution_horizon  # old chunk has no actions from here on
    w = torch.zeros(horizon, dtype=torch.float64)
    if schedule != "none":
        c = ((end - k) / (end - delay + 1)).clamp(0, 1)
        w = c * (torch.exp(c) - 1) / (math.e - 1) if schedule == "exp" else c
    w[:delay] = 1.0
    w[end:] = 0.0
    return w.float()


@dataclasses.dataclass
class _Row:
    """The chunk clock of one env."""

    t: int = 0  # control steps executed in this episode
    chunk: Any = None  # (H, A) the chunk being executed
    start: int = 0  # step of the chunk's index 0 (when its inference started)
    # (arrival step, start step, the policy's chunk (H, A) or a _Later of it) of the inference in flight
    pending: tuple[int, int, Any] | None = None
    ensemble: Any = None  # ensemble mode: the chunks that cover upcoming steps
    actions: list[np.ndarray] = dataclasses.field(default_factory=list)  # executed (A,) per step
    boundaries: list[int] = dataclasses.field(default_factory=list)  # steps that began a new chunk
    committed_ok: bool = True  # rtc: every chunk began with exactly the committed prefix
    active: bool = True


class ChunkExecutor:
    """Executes a chunked policy on ``batch`` rows (envs), each with its own chunk clock.

    ``step(observe)`` returns the actions of this control step (B, A) and advances every active row;
    ``observe()`` is called (once) only when some row starts an inference, and must return the batched
    observation of all B rows. ``restart(rows)`` begins a new episode in those rows (their next step
    computes a first chunk, before their clock starts); ``finish(row)`` freezes a row whose episode ended.
    ``chunk_fn(obs, prefix) -> (B, H, A)`` defaults to ``policy.predict_action_chunk``;
    ``on_inference(seconds)`` is told how long each call after the clock started took.
    ``correct`` mode: ``correct_fn(obs, planned (B, A), steps (B,)) -> (B, A)`` (default
    ``policy.correct_actions``) corrects every step's actions from ``observe()``, called at every step;
    ``on_correction(seconds)`` is told how long each of those calls took.
    ``background``: inferences started on the clock (latency > 0) run in one worker thread, and
    ``step`` waits for a chunk only at its arrival step (the same actions; ``close()`` ends the thread).
    """

    def __init__(
        self,
        policy: Any,
        spec: ExecutionSpec,
        limits: ChunkLimits,
        batch: int,
        chunk_fn: Callable[[Any, Any], Any] | None = None,
        on_inference: Callable[[float], None] | None = None,
        background: bool = False,
        correct_fn: Callable[[Any, Any, Any], Any] | None = None,
        on_correction: Callable[[float], None] | None = None,
    ) -> None:
        if spec.mode == "sync":
            raise ActlabError(
                "ChunkExecutor runs the asynchronous modes; sync is select_action",
                field="mode",
                expected="async / ensemble / blend / rtc / correct",
                found=spec.mode,
            )
        self.spec, self.limits = spec, limits
        self.s = check_execution(spec, limits)
        self.d = spec.latency
        self.h = limits.chunk_size
        self.chunk_fn = chunk_fn or (lambda obs, prefix: policy.predict_action_chunk(obs, prefix=prefix))
        self.correct_fn = None  # correct mode only: (obs, planned (B, A), steps (B,)) -> (B, A)
        if spec.mode == "correct":
            self.correct_fn = correct_fn or policy.correct_actions
        self.on_correction = on_correction
        self.on_inference = on_inference
        self.weights = blend_weights(self.h, self.d, self.s, spec.schedule)  # (H,)
        self.rows = [self._new_row() for _ in range(batch)]
        self.background = background and self.d > 0  # at latency 0 a chunk is needed at once
        self._pool: Any = None  # the worker thread (concurrent.futures), started with the first inference
        self._inflight: Any = None  # the Future of the inference running in it

    def _new_row(self) -> _Row:
        if self.spec.mode != "ensemble":
            return _Row()
        # lazy: the ensembler imports torch; specs and limits are read without it (the harness, --help)
        from actlab.policies.ensemble import TemporalEnsembler

        return _Row(ensemble=TemporalEnsembler(self.spec.ensemble_coeff, self.h))

    # ------------------------------------------------------------------------------------ episodes
    def restart(self, rows: Sequence[int] | None = None) -> None:
        """Begin a new episode in ``rows`` (all by default); an inference still running is waited for
        (its chunk is dropped), so the policy is never called from two threads at once."""
        self._wait()
        for b in range(len(self.rows)) if rows is None else rows:
            self.rows[b] = self._new_row()

    def close(self) -> None:
        """End the worker thread of a ``background`` executor (after its running inference)."""
        self._wait()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _wait(self) -> None:
        # Why: the worker may still be inside the policy; a reset or a foreground call must not overlap it
        if self._inflight is not None:
            self._inflight.exception()  # waits; an error is raised where its chunk is used, not here
            self._inflight = None

    def finish(self, row: int) -> None:
        """Freeze ``row`` (its episode ended): it no longer advances; it rides along in calls."""
        self.rows[row].active = False

    # ------------------------------------------------------------------------------------ stepping
    def step(self, observe: Callable[[], Any]) -> Any:
        """The actions (B, A) of this control step; rows that are not active repeat their last one."""
        import torch

        for b, r in enumerate(self.rows):
            # Arrivals first: with latency == horizon a chunk arrives at the step the next inference
            # starts, and that inference commits to (and blends with) the chunk that just arrived.
            if r.active and r.pending is not None and r.pending[0] == r.t:
                _, start, chunk = r.pending
                r.pending = None
                self._arrive(b, self._land(r, start, chunk), start, boundary=True)
        first = [b for b, r in enumerate(self.rows) if r.active and r.chunk is None]
        due = [b for b, r in enumerate(self.rows) if r.active and r.chunk is not None and r.t % self.s == 0]
        obs = observe() if self.correct_fn is not None else None  # correct: the newest, at every step
        if first or due:
            obs = observe() if obs is None else obs
            with_prefix = self.spec.mode == "rtc" and self.d > 0
            out = None
            if first:  # before the clock starts: no prefix, executed from index 0
                # Not timed unless it also serves due rows: it runs before the clock starts (and pays the
                # warm-up costs, which must not pass for the policy's latency).
                self._wait()
                out = self._call(obs, None, timed=bool(due) and not with_prefix)
                for b in first:
                    self._arrive(b, out[b], 0, boundary=False)
            if due:
                # One call serves both unless due rows need a prefix: a first chunk never gets one (a
                # zero-padded prefix would decode to a jump, lerobot #2541), so rtc then calls twice.
                self._start_inferences(obs, due, None if with_prefix else out)
        corrected = self._corrected(obs) if self.correct_fn is not None else None
        actions = []
        for b, r in enumerate(self.rows):
            if r.active:
                a = self._action(r) if corrected is None else corrected[b]
                r.actions.append(a.detach().float().cpu().numpy())
                r.t += 1
            else:
                a = torch.as_tensor(r.actions[-1]) if r.actions else torch.zeros(self._action_dim())
            actions.append(a.float().cpu())
        return torch.stack(actions)  # (B, A)

    def _corrected(self, obs: Any) -> Any:
        """correct mode: every row's planned action of this step corrected by ``correct_fn`` from ``obs``
        (B, A); one batched call, rows that are not active ride along (their output is dropped)."""
        import time

        import torch

        planned, steps = [], []
        for r in self.rows:
            if r.chunk is None:  # a finished row that never got a chunk: any action rides along
                planned.append(torch.zeros(self._action_dim()))
                steps.append(0)
                continue
            i = min(r.t - r.start, self.h - 1)
            planned.append(r.chunk[i])
            steps.append(i)
        t0 = time.perf_counter()
        with torch.no_grad():  # Why: the plugin's select_action may run with gradients on
            out = self.correct_fn(obs, torch.stack(planned), torch.tensor(steps, dtype=torch.int64))
        out = torch.as_tensor(out).detach().float().cpu()  # (B, A); the env needs numbers: one sync a step
        if self.on_correction is not None:
            self.on_correction(time.perf_counter() - t0)
        if tuple(out.shape) != (len(self.rows), len(planned[0])):
            raise ActlabError(
                "the correction head returned actions of the wrong shape",
                field="correct_actions output",
                expected=f"(B={len(self.rows)}, A={len(planned[0])})",
                found=tuple(out.shape),
            )
        return out

    def _action_dim(self) -> int:
        return next(r.chunk.shape[-1] for r in self.rows if r.chunk is not None)

    def _call(self, obs: Any, prefix: Any, timed: bool = True) -> Any:
        import time

        import torch

        t0 = time.perf_counter()
        out = self.chunk_fn(obs, prefix)
        out = out.detach() if hasattr(out, "detach") else torch.as_tensor(np.asarray(out, dtype=np.float32))
        out = out.float().cpu()  # (B, H, A); Why: one host sync per inference, the env needs numbers
        if self.on_inference is not None and timed:
            self.on_inference(time.perf_counter() - t0)
        if out.ndim != 3 or out.shape[0] != len(self.rows) or out.shape[1] < self.h:
            raise ActlabError(
                "the policy returned a chunk of the wrong shape",
                field="predict_action_chunk output",
                expected=f"(B={len(self.rows)}, H>={self.h}, A)",
                found=tuple(out.shape),
            )
        return out[:, : self.h]

    def _call_no_grad(self, obs: Any, prefix: Any) -> Any:
        import torch

        with torch.no_grad():  # Why: grad mode is per thread; the caller's no_grad does not reach the worker
            return self._call(obs, prefix)

    def _start_inferences(self, obs: Any, due: list[int], out: Any = None) -> None:
        """Start the inferences of the rows in ``due`` (one batched call, unless ``out`` already holds
        its result; the other rows ride along)."""
        import torch

        prefix = None
        if self.spec.mode == "rtc" and self.d > 0:
            # The D actions every row executes while this inference runs: what it commits to. Riding rows
            # pass any D actions of their own chunk (their output is dropped): never zeros, which a
            # relative policy would read as "stay here" (a zero-padded prefix decodes to a jump).
            prefix = torch.stack([self._committed(r) for r in self.rows])  # (B, D, A)
        if out is None and self.background:
            self._wait()
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="actlab-inference")
            self._inflight = self._pool.submit(self._call_no_grad, obs, prefix)
            out = _Later(self._inflight)
        elif out is None:
            out = self._call(obs, prefix)
        for b in due:
            r = self.rows[b]
            raw = _Later(out.future, b) if isinstance(out, _Later) else out[b]  # (H, A) or its promise
            if self.d == 0:
                self._arrive(b, self._land(r, r.t, raw), r.t, boundary=True)
            else:
                r.pending = (r.t + self.d, r.t, raw)

    def _land(self, r: _Row, start: int, raw: Any) -> Any:
        """The chunk (H, A) an inference started at step ``start`` delivers, as the row executes it: its
        committed prefix checked (rtc) and its overlap blended with the old chunk (blend, rtc). Called at
        its arrival, when ``r.chunk`` is still the chunk that was executing when it started."""
        import torch

        new = raw.result() if isinstance(raw, _Later) else raw  # (H, A)
        i = start - r.start  # the old chunk's index at the inference start
        if self.spec.mode == "rtc" and self.d > 0:
            r.committed_ok &= bool(torch.equal(new[: self.d], r.chunk[i : i + self.d]))
        if self.spec.mode in ("blend", "rtc"):
            old = r.chunk[i:]  # (H - s, A) what the old chunk still holds
            w = self.weights[: len(old), None]
            new = torch.cat([w * old + (1 - w) * new[: len(old)], new[len(old) :]])
        return new

    def _committed(self, r: _Row) -> Any:
        if r.active and r.chunk is not None and r.t % self.s == 0:
            i = r.t - r.start
            return r.chunk[i : i + self.d]
        return r.chunk[: self.d] if r.chunk is not None else self._any_committed()

    def _any_committed(self) -> Any:
        return next(r.chunk[: self.d] for r in self.rows if r.chunk is not None)

    def _arrive(self, b: int, chunk: Any, start: int, boundary: bool) -> None:
        r = self.rows[b]
        if r.ensemble is not None:
            r.ensemble.add(chunk, start)
        r.chunk, r.start = chunk, start
        if boundary:
            r.boundaries.append(r.t)

    def _action(self, r: _Row) -> Any:
        if r.ensemble is None:
            return r.chunk[r.t - r.start]
        return r.ensemble.action(r.t)

    # ------------------------------------------------------------------------------------ results
    def executed(self, row: int) -> np.ndarray:
        """(T, A) the actions row ``row`` executed."""
        acts = self.rows[row].actions
        return np.stack(acts) if acts else np.zeros((0, 0), dtype=np.float32)

    def boundaries(self, row: int) -> list[int]:
        """Steps of row ``row`` whose action was the first taken from a new chunk."""
        return list(self.rows[row].boundaries)

    def committed_ok(self, row: int) -> bool:
        """rtc: every chunk of the row began with exactly the actions committed for it."""
        return self.rows[row].committed_ok


@dataclasses.dataclass(frozen=True)
class _Later:
    """A chunk still being computed in the worker thread: row ``row`` of the Future's (B, H, A) result."""

    future: Any  # concurrent.futures.Future of ChunkExecutor._call
    row: int = -1  # -1: the whole batch

    def result(self) -> Any:
        out = self.future.result()  # waits for the inference (re-raises its error)
        return out if self.row < 0 else out[self.row]


def chunk_metrics(actions: np.ndarray, boundaries: Sequence[int]) -> dict[str, float | int | None]:
    """Smoothness of executed actions (T, A) whose steps ``boundaries`` began a new chunk.

    ``boundary_jump``: mean ``||a[b] - a[b-1]||`` (L2 over action dims) over boundaries; ``step_change``:
    the mean step-to-step change away from boundaries; ``spike_factor``: their ratio (1: a boundary is an
    ordinary step); ``jerk``: mean norm of the third difference ``a[t] - 3a[t-1] + 3a[t-2] - a[t-3]``
    (action units per step^3); ``chunk_switches``: the number of boundaries. None where undefined.
    """
    a = np.asarray(actions, dtype=np.float64)
    bs = [b for b in boundaries if 0 < b < len(a)]
    out: dict[str, float | int | None] = {
        "boundary_jump": None,
        "boundary_jump_max": None,
        "step_change": None,
        "spike_factor": None,
        "jerk": None,
        "chunk_switches": len(bs),
    }
    if len(a) < 2:
        return out
    steps = np.linalg.norm(np.diff(a, axis=0), axis=1)  # steps[t-1] = ||a[t] - a[t-1]||
    mask = np.ones(len(steps), dtype=bool)
    mask[[b - 1 for b in bs]] = False
    if bs:
        jumps = steps[[b - 1 for b in bs]]
        out["boundary_jump"], out["boundary_jump_max"] = float(jumps.mean()), float(jumps.max())
    if mask.any():
        out["step_change"] = float(steps[mask].mean())
    if out["boundary_jump"] is not None and out["step_change"]:
        out["spike_factor"] = out["boundary_jump"] / out["step_change"]
    if len(a) >= 4:
        third = a[3:] - 3 * a[2:-1] + 3 * a[1:-2] - a[:-3]
        out["jerk"] = float(np.linalg.norm(third, axis=1).mean())
    return out


def sync_boundaries(n_steps: int, n_action_steps: int | None) -> list[int]:
    """Chunk boundaries of a synchronous chunked policy (a new chunk every ``n_action_steps``)."""
    if not n_action_steps:
        return []
    return list(range(n_action_steps, n_steps, n_action_steps))
