"""The doubling-then-bisection search on synthetic probes (no training involved)."""

from __future__ import annotations

import pytest

from actlab.errors import ActlabError
from actlab.training.batch_size import Probe, render_search, search_batch_size


def linear_probe(base: int, per_sample: int, oom_above: int | None = None, calls: list[int] | None = None):
    """Memory = base + per_sample * B; optionally the step fails outright above ``oom_above``."""

    def probe(b: int) -> Probe:
        if calls is not None:
            calls.append(b)
        if oom_above is not None and b > oom_above:
            return Probe(b, ok=False, memory_bytes=None, detail="out of memory")
        return Probe(b, ok=True, memory_bytes=base + per_sample * b)

    return probe


def test_finds_the_largest_batch_within_the_margin():
    calls: list[int] = []
    r = search_batch_size(linear_probe(100, 10, calls=calls), limit_bytes=1000, margin=0.1)
    # budget 900 -> 100 + 10 B <= 900 -> B <= 80
    assert r.recommended == 80 and r.first_fail == 81
    assert calls[:8] == [1, 2, 4, 8, 16, 32, 64, 128]  # doubling
    assert len(calls) == len(set(calls))  # no batch size probed twice
    assert len(calls) <= 8 + 7  # then bisection over (64, 128)
    fits = {t.probe.batch_size: t.fits for t in r.trials}
    assert all(fits[b] for b in fits if b <= 80) and not any(fits[b] for b in fits if b > 80)


def test_margin_zero_uses_the_whole_limit():
    r = search_batch_size(linear_probe(0, 10), limit_bytes=1000, margin=0.0)
    assert r.recommended == 100 and r.first_fail == 101


def test_out_of_memory_failures_bound_the_search():
    r = search_batch_size(linear_probe(0, 1, oom_above=50), limit_bytes=10**9, margin=0.1)
    assert r.recommended == 50 and r.first_fail == 51
    assert any(not t.probe.ok for t in r.trials)


def test_multiple_of_and_start():
    calls: list[int] = []
    r = search_batch_size(
        linear_probe(100, 10, calls=calls), limit_bytes=1000, margin=0.1, start=5, multiple_of=8
    )
    assert all(b % 8 == 0 for b in calls) and calls[0] == 8
    assert r.recommended == 80 and r.first_fail == 88


def test_stops_at_max_batch():
    r = search_batch_size(linear_probe(0, 1), limit_bytes=10**6, max_batch=48)
    assert r.recommended == 48 and r.reached_max and r.first_fail is None
    assert [t.probe.batch_size for t in r.trials] == [1, 2, 4, 8, 16, 32, 48]
    assert "stopped at --max" in render_search(r, "RSS")


def test_nothing_fits():
    r = search_batch_size(linear_probe(2000, 10), limit_bytes=1000)
    assert r.recommended is None and r.first_fail == 1 and len(r.trials) == 1
    assert "no batch size fits" in render_search(r, "RSS")


def test_render_lists_every_trial_with_memory():
    r = search_batch_size(linear_probe(100 * 2**20, 2**20), limit_bytes=2**30, margin=0.1)
    text = render_search(r, "GPU memory reserved")
    assert f"recommended batch size: {r.recommended}" in text
    assert text.count("fits") >= 1 and "over budget" in text
    d = r.as_dict()
    assert d["budget_bytes"] == int(2**30 * 0.9) and len(d["trials"]) == len(r.trials)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"margin": 1.0}, "--margin"),
        ({"margin": -0.1}, "--margin"),
        ({"start": 0}, "--start"),
        ({"multiple_of": 0}, "--multiple-of"),
        ({"start": 8, "max_batch": 4}, "--max"),
        ({"start": 3, "max_batch": 7, "multiple_of": 8}, "--max"),
    ],
)
def test_bad_settings(kwargs, field):
    with pytest.raises(ActlabError) as e:
        search_batch_size(linear_probe(0, 1), limit_bytes=100, **kwargs)
    assert e.value.field == field


def test_tolerance_stops_the_bisection_early():
    calls: list[int] = []
    r = search_batch_size(linear_probe(0, 1, calls=calls), limit_bytes=1000, margin=0.0, tolerance=0.1)
    exact = search_batch_size(linear_probe(0, 1), limit_bytes=1000, margin=0.0)
    assert exact.recommended == 1000 and len(r.trials) < len(exact.trials)
    assert r.first_fail - r.recommended <= 0.1 * r.recommended
    assert 900 <= r.recommended <= 1000
    assert "bisection stopped within 10%" in render_search(r, "RSS")
