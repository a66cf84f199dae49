"""McNemar's exact test against hand computations, and the paired verdicts built on it."""

from __future__ import annotations

import math

import pytest

from actlab.errors import ActlabError
from actlab.utils.stats import mcnemar_exact, paired_compare


@pytest.mark.parametrize(
    "b, c, hand",
    [
        (9, 1, 2 * (1 + 10) / 2**10),  # 22/1024 = 0.0215
        (1, 9, 2 * (1 + 10) / 2**10),  # two-sided: symmetric
        (10, 0, 2 * 1 / 2**10),
        (3, 0, 2 * 1 / 2**3),  # 0.25: three gains alone prove nothing
        (6, 2, 2 * (1 + 8 + 28) / 2**8),  # 74/256 = 0.289
        (5, 5, 1.0),  # 2 * 638/1024 > 1 -> capped at 1
        (0, 0, 1.0),  # no discordant pair: no evidence
        (20, 5, 2 * sum(math.comb(25, k) for k in range(6)) / 2**25),
    ],
)
def test_mcnemar_exact_matches_the_hand_computation(b, c, hand):
    assert mcnemar_exact(b, c) == pytest.approx(hand, rel=1e-12)


def test_mcnemar_refuses_negative_counts():
    with pytest.raises(ActlabError, match="negative"):
        mcnemar_exact(-1, 3)


def test_paired_verdicts_better_worse_and_no_evidence():
    base = [True] * 10 + [False] * 20
    better = [True] * 10 + [True] * 9 + [False] * 11  # 9 gained, 0 lost
    cmp = paired_compare(base, better)
    assert (cmp.gained, cmp.lost, cmp.verdict) == (9, 0, "better")
    assert cmp.p == pytest.approx(2 / 2**9)
    assert "better than base" in cmp.sentence() and "9 seeds gained, 0 lost of 30" in cmp.sentence()
    worse = [False] * 8 + [True] * 2 + [False] * 20  # 8 lost
    assert paired_compare(base, worse).verdict == "worse"
    # 13 vs 10 solved looks better, but 3 gains and 0 losses prove nothing (p = 0.25)
    small = [True] * 10 + [True] * 3 + [False] * 17
    assert paired_compare(base, small).verdict == "no evidence"
    with pytest.raises(ActlabError, match="same seeds"):
        paired_compare(base, base[:-1])
