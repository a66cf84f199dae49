import time
import types

from actlab.profiling import timing
from actlab.profiling.timing import PhaseTimer


def test_phases_sum_per_step_and_reset_on_read(monkeypatch):
    # A scripted clock: exact sums, whatever the machine's load does to real sleeps.
    ticks = iter([0.0, 1.0, 3.0, 10.0, 10.5, 13.0])  # two steps: data 1 + 0.5, fwd_bwd 2 + 2.5
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    t = PhaseTimer("cpu")
    for _ in range(2):
        t.start()
        t.mark("data")
        t.mark("fwd_bwd")
        t.stop()
    assert t.read() == ({"data": 1.5, "fwd_bwd": 4.5}, 2)
    assert t.read() == ({}, 0)


def test_phases_are_measured_with_the_real_clock():
    t = PhaseTimer("cpu")
    begin = time.perf_counter()
    for _ in range(3):
        t.start()
        time.sleep(0.01)
        t.mark("data")
        time.sleep(0.02)
        t.mark("fwd_bwd")
        t.stop()
    wall = time.perf_counter() - begin
    totals, n = t.read()
    assert n == 3
    # A sleep never returns early; a loaded machine only makes the phases longer, and never longer than
    # the loop that contains them.
    assert totals["data"] >= 0.03 and totals["fwd_bwd"] >= 0.06
    assert totals["data"] + totals["fwd_bwd"] <= wall
    assert t.read() == ({}, 0)
