"""The execution model of chunked policies: which chunk every executed action came from under a delay,
the committed prefix handed over, per-row chunk clocks in a batch, boundary metrics, errors."""

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from actlab.errors import ActlabError
from actlab.policies.ensemble import TemporalEnsembler
from actlab.policies.execution import (
    ChunkExecutor,
    ChunkLimits,
    ExecutionSpec,
    blend_weights,
    check_execution,
    chunk_metrics,
    horizon_note,
)


@dataclass(frozen=True)
class Cfg:
    chunk_size: int = 12
    n_action_steps: int = 5
    rtc_max_delay: int = 4


class Scripted:
    """Chunks you can tell apart: action k of the chunk made by call c (0-based, per row) is
    ``[c, k, obs]`` where obs is the observation value the call saw; with a prefix the first d actions
    are the prefix itself (as act_relative returns them). Records every call."""

    def __init__(self, cfg: Cfg = Cfg()) -> None:
        self.config = cfg
        self.calls: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        self.counts: torch.Tensor | None = None

    def reset(self) -> None:
        self.calls, self.counts = [], None

    def predict_action_chunk(self, obs, prefix=None):
        x = obs["observation.state"]  # (B, 1)
        b, h = x.shape[0], self.config.chunk_size
        if self.counts is None:
            self.counts = torch.zeros(b)
        k = torch.arange(h, dtype=torch.float32)
        chunk = torch.stack(
            [self.counts[:, None].expand(b, h), k.expand(b, h), x[:, :1].expand(b, h)], dim=-1
        )  # (B, H, 3)
        if prefix is not None:
            chunk[:, : prefix.shape[1]] = prefix
        self.calls.append((x.clone(), None if prefix is None else prefix.clone()))
        self.counts = self.counts + 1
        return chunk

    def select_action(self, obs):  # sync: a queue of n_action_steps, as ACTPolicy does
        if not getattr(self, "_queue", None):
            chunk = self.predict_action_chunk(obs)[:, : self.config.n_action_steps]
            self._queue = list(chunk.transpose(0, 1))
        return self._queue.pop(0)


def run(policy, spec, steps, batch=1, restart_at=None):
    """Drive an executor; the observation of row b at global step g is 100 * b + g."""
    ex = ChunkExecutor(policy, spec, ChunkLimits.from_config(policy.config), batch)
    seen = []
    for g in range(steps):
        if restart_at is not None and g == restart_at[1]:
            ex.restart([restart_at[0]])

        def observe(g=g):
            seen.append(g)
            return {"observation.state": torch.tensor([[100.0 * b + g] for b in range(batch)])}

        ex.step(observe)
    return ex, seen


def test_the_previous_chunk_is_executed_during_the_delay():
    d, s = 3, 5
    ex, seen = run(Scripted(), ExecutionSpec("async", latency=d), steps=23)
    a = ex.executed(0)  # (T, 3): [chunk call, index, observation]
    assert seen == [0, 5, 10, 15, 20]  # inferences start every s steps, from that step's observation
    # The first chunk is computed before the clock starts: step 0 executes its index 0 (not skipped).
    assert a[0].tolist() == [0, 0, 0]
    for t in range(23):
        c = 0 if t < s + d else (t - d) // s  # chunk c (c >= 1) starts at c * s and arrives d later
        start = c * s
        assert a[t].tolist() == [c, t - start, start], t
    assert ex.boundaries(0) == [8, 13, 18]


def test_async_with_no_delay_is_sync():
    p_sync, p_async = Scripted(), Scripted()
    sync = [p_sync.select_action({"observation.state": torch.tensor([[float(t)]])})[0] for t in range(17)]
    ex, _ = run(p_async, ExecutionSpec("async", latency=0), steps=17)
    assert np.array_equal(np.stack([x.numpy() for x in sync]), ex.executed(0))
    assert ex.boundaries(0) == [5, 10, 15]


def test_rtc_hands_the_committed_actions_over_and_executes_them():
    d = 3
    policy = Scripted()
    ex, _ = run(policy, ExecutionSpec("rtc", latency=d, schedule="none"), steps=19)
    a = ex.executed(0)
    assert policy.calls[0][1] is None  # the first chunk gets no (zero-padded) prefix
    for (obs, prefix), start in zip(policy.calls[1:], (5, 10, 15)):
        assert obs.item() == start
        # The prefix is exactly what the robot executes while this inference runs.
        assert np.array_equal(prefix[0].numpy(), a[start : start + d])
    assert ex.committed_ok(0)
    # From the arrival on, the new chunk's own actions (call 1, index 3 = step 8).
    assert a[8].tolist() == [1, 3, 5]


def test_blend_mixes_the_overlap_with_the_old_chunk():
    ex, _ = run(Scripted(), ExecutionSpec("blend", latency=2), steps=12)
    a = ex.executed(0)
    w = blend_weights(12, 2, 5, "exp")  # old-chunk weight per new-chunk index
    assert w[:2].tolist() == [1.0, 1.0] and w[7:].tolist() == [0.0] * 5
    # Step 7 executes the new chunk's index 2, blended with the old chunk's action for step 7.
    old, new = np.array([0.0, 7.0, 0.0]), np.array([1.0, 2.0, 5.0])
    np.testing.assert_allclose(a[7], w[2].item() * old + (1 - w[2].item()) * new, rtol=1e-6)
    assert a[12 - 1][0] > 0  # the new chunk takes over


def test_batched_rows_keep_their_own_chunk_clocks_with_one_call_per_step():
    policy = Scripted()
    # Row 1 starts a new episode at global step 3: its chunks start at its own steps 0, 5, 10 (g 3, 8, 13).
    ex, seen = run(policy, ExecutionSpec("async", latency=2), steps=16, batch=2, restart_at=(1, 3))
    assert seen == [0, 3, 5, 8, 10, 13, 15]  # one observation (one batched call) per step at most
    assert len(policy.calls) == len(seen) and all(obs.shape[0] == 2 for obs, _ in policy.calls)
    row1 = ex.executed(1)  # since its restart: 13 steps
    assert len(row1) == 13 and row1[0].tolist()[1:] == [0, 103]
    assert row1[7].tolist()[1:] == [2, 108]  # its chunk from its step 5 (global 8) arrived at its step 7
    assert ex.boundaries(0) == [7, 12] and ex.boundaries(1) == [7, 12]


def test_a_finished_row_rides_along_and_stops_advancing():
    policy = Scripted()
    ex = ChunkExecutor(policy, ExecutionSpec("async", latency=1), ChunkLimits.from_config(policy.config), 2)
    obs = {"observation.state": torch.zeros(2, 1)}
    ex.step(lambda: obs)
    ex.finish(1)
    for _ in range(9):
        out = ex.step(lambda: obs)
    assert out.shape == (2, 3) and len(ex.executed(1)) == 1 and len(ex.executed(0)) == 10


def test_ensemble_without_delay_is_act_temporal_ensembling():
    torch.manual_seed(0)
    chunks = torch.randn(10, 1, 12, 3)

    class Noisy(Scripted):
        def predict_action_chunk(self, obs, prefix=None):
            self.calls.append((obs, prefix))
            return chunks[len(self.calls) - 1]

    ex, _ = run(Noisy(), ExecutionSpec("ensemble", latency=0), steps=10)
    ens = TemporalEnsembler(0.01, 12)
    expected = torch.stack([ens.update(chunks[t])[0] for t in range(10)]).numpy()
    np.testing.assert_allclose(ex.executed(0), expected, rtol=0, atol=1e-6)


def test_boundary_metrics_on_a_known_trace():
    a = np.zeros((9, 2))
    a[:, 0] = np.arange(9) * 0.1  # a steady ramp: 0.1 per step
    a[5:, 0] += 0.5  # a jump of 0.5 at the boundary 5 (0.6 in all)
    m = chunk_metrics(a, [5])
    assert m["chunk_switches"] == 1
    assert m["boundary_jump"] == pytest.approx(0.6) and m["step_change"] == pytest.approx(0.1)
    assert m["spike_factor"] == pytest.approx(6.0)
    # Third differences of a step of 0.5 (the ramp has none): +0.5, -1.0, +0.5 at t = 5, 6, 7, over the
    # 6 windows t = 3..8.
    assert m["jerk"] == pytest.approx((0.5 + 1.0 + 0.5) / 6)
    assert chunk_metrics(a[:1], [])["boundary_jump"] is None


@pytest.mark.parametrize(
    ("spec", "cfg", "match"),
    [
        (ExecutionSpec("async", latency=12), Cfg(), "not shorter than its chunk"),
        (ExecutionSpec("async", latency=4, horizon=9), Cfg(), "runs out during the delay"),
        (ExecutionSpec("async", latency=6), Cfg(), "longer than the execution horizon"),
        (ExecutionSpec("rtc", latency=5, horizon=6), Cfg(), r"rtc_max_delay = 4"),
        (ExecutionSpec("rtc", latency=1), Cfg(rtc_max_delay=0), r"rtc_max_delay = 0"),
    ],
)
def test_a_delay_the_policy_cannot_take_names_the_limit(spec, cfg, match):
    with pytest.raises(ActlabError, match=match):
        check_execution(spec, ChunkLimits.from_config(cfg))


@pytest.mark.parametrize("mode", ["async", "blend", "rtc"])
def test_a_policy_executing_its_whole_chunk_gets_the_largest_horizon_that_fits(mode):
    """LeRobot's ACT default (n_action_steps = chunk_size) under a delay: no refusal without --horizon,
    the executor runs chunk_size - latency actions per chunk and says so."""
    whole = Cfg(chunk_size=12, n_action_steps=12, rtc_max_delay=8)
    spec = ExecutionSpec(mode, latency=4)
    limits = ChunkLimits.from_config(whole)
    assert check_execution(spec, limits) == 8
    note = horizon_note(spec, limits, where="act")
    assert note.startswith("act: executes 12 of its 12 actions per chunk") and "horizon 8" in note
    ex, seen = run(Scripted(whole), spec, steps=30)
    assert seen == [0, 8, 16, 24] and ex.boundaries(0) == [12, 20, 28]  # every 8, arriving 4 later
    # a given --horizon is kept (and refused as before when it does not fit); other modes say nothing
    assert horizon_note(ExecutionSpec(mode, latency=4, horizon=6), limits) is None
    with pytest.raises(ActlabError, match="runs out during the delay"):
        check_execution(ExecutionSpec(mode, latency=4, horizon=12), limits)
    assert horizon_note(ExecutionSpec("async", latency=4), ChunkLimits.from_config(Cfg())) is None
    assert horizon_note(ExecutionSpec("ensemble", latency=4), limits) is None
    # the largest fit is half the chunk: a longer delay has no horizon, and the refusal says why
    assert check_execution(ExecutionSpec(mode, latency=6), limits) == 6
    with pytest.raises(ActlabError, match="no execution horizon fits a latency of 7") as e:
        check_execution(ExecutionSpec(mode, latency=7), limits)
    assert e.value.expected == "<= 6 (half the chunk size) for this policy"


def test_bad_settings_are_errors():
    with pytest.raises(ActlabError, match="latency"):
        ExecutionSpec("sync", latency=2)
    with pytest.raises(ActlabError, match="execution"):
        ExecutionSpec("later")
    with pytest.raises(ActlabError, match="observation history"):
        check_execution(ExecutionSpec("async", latency=1), ChunkLimits(12, 5, history=True))


def test_a_delay_as_long_as_the_horizon_hands_over_the_chunk_that_just_arrived():
    policy = Scripted()
    ex, seen = run(policy, ExecutionSpec("rtc", latency=4, horizon=4, schedule="none"), steps=21)
    a = ex.executed(0)
    assert seen == [0, 4, 8, 12, 16, 20] and ex.boundaries(0) == [8, 12, 16, 20]
    # At step 8 chunk 1 (started at 4) arrives while chunk 2 starts: chunk 2's prefix is chunk 1's.
    assert np.array_equal(policy.calls[2][1][0].numpy(), a[8:12]) and a[8].tolist() == [1, 4, 4]
    assert ex.committed_ok(0)


def _drive(ex, steps, batch=1, restart_at=None):
    for g in range(steps):
        if restart_at is not None and g == restart_at[1]:
            ex.restart([restart_at[0]])
        ex.step(lambda g=g: {"observation.state": torch.tensor([[100.0 * b + g] for b in range(batch)])})
    return [ex.executed(b) for b in range(batch)]


@pytest.mark.parametrize(
    "spec",
    [
        ExecutionSpec("async", latency=3),
        ExecutionSpec("blend", latency=2),
        ExecutionSpec("rtc", latency=3),
        ExecutionSpec("rtc", latency=4, horizon=4),  # a chunk arrives as the next inference starts
        ExecutionSpec("ensemble", latency=2),
        ExecutionSpec("blend", latency=0),  # latency 0: nothing to run in the background
    ],
    ids=lambda s: s.label(),
)
def test_background_inference_executes_exactly_the_foreground_actions(spec):
    limits = ChunkLimits.from_config(Cfg())
    fore = ChunkExecutor(Scripted(), spec, limits, 2)
    back = ChunkExecutor(Scripted(), spec, limits, 2, background=True)
    try:
        a = _drive(fore, 31, batch=2, restart_at=(1, 13))
        b = _drive(back, 31, batch=2, restart_at=(1, 13))
        for row in range(2):
            assert np.array_equal(a[row], b[row])
            assert fore.boundaries(row) == back.boundaries(row)
            assert back.committed_ok(row)
        assert back.background == (spec.latency > 0)
    finally:
        back.close()


class Gated(Scripted):
    """Inferences after the first block until the test opens the gate: a slow policy, on cue."""

    def __init__(self) -> None:
        super().__init__()
        import threading

        self.gate, self.entered = threading.Event(), threading.Event()

    def predict_action_chunk(self, obs, prefix=None):
        if self.calls:  # not the first chunk (computed before the clock starts)
            self.entered.set()
            assert self.gate.wait(timeout=30), "the test never opened the gate"
        return super().predict_action_chunk(obs, prefix)


@pytest.mark.timeout(60)
def test_background_inference_lets_the_robot_move_during_the_delay():
    d, s = 3, 5
    policy = Gated()
    ex = ChunkExecutor(policy, ExecutionSpec("async", latency=d), ChunkLimits.from_config(Cfg()), 1,
                       background=True)  # fmt: skip
    obs = lambda g: lambda: {"observation.state": torch.tensor([[float(g)]])}  # noqa: E731
    try:
        for g in range(s + d):  # step 5 starts an inference that blocks; steps 5..7 still get actions
            ex.step(obs(g))
        assert policy.entered.is_set() and len(policy.calls) == 1  # the inference is still running
        assert ex.executed(0)[-1].tolist() == [0, s + d - 1, 0]  # the first chunk, meanwhile
        policy.gate.set()
        ex.step(obs(s + d))  # the arrival step waits for the chunk and executes its index d
        assert ex.executed(0)[-1].tolist() == [1, d, s]
    finally:
        policy.gate.set()
        ex.close()
