import time

from actlab.training.timing import PhaseTimer


def test_phases_sum_per_step_and_reset_on_read():
    t = PhaseTimer("cpu")
    for _ in range(3):
        t.start()
        time.sleep(0.01)
        t.mark("data")
        time.sleep(0.02)
        t.mark("fwd_bwd")
        t.stop()
    totals, n = t.read()
    assert n == 3
    assert 0.025 <= totals["data"] < 0.2 and 0.055 <= totals["fwd_bwd"] < 0.4
    assert totals["fwd_bwd"] > totals["data"]
    assert t.read() == ({}, 0)
