"""Paired comparison of two policies on the same seeds: McNemar's exact test on the discordant pairs.

Two policies run on the same n seeds give n pairs of outcomes. Seeds both solve or both fail say nothing
about which policy is better; the ``b`` seeds only the second solves and the ``c`` seeds only the first
solves do. Under "equally good" each discordant seed is a fair coin, so ``min(b, c)`` is binomial
(b + c, 1/2) and the two-sided exact p-value is ``min(1, 2 * sum_{k <= min(b, c)} C(b + c, k) / 2^(b + c))``
(McNemar 1947; the exact binomial form). Example: 9 seeds gained and 1 lost gives
2 * (C(10, 0) + C(10, 1)) / 2^10 = 22 / 1024 = 0.0215.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from actlab.errors import ActlabError

VERDICTS = ("better", "worse", "no evidence")


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` and ``c`` discordant pairs (1.0 when there are none)."""
    if b < 0 or c < 0:
        raise ActlabError("discordant pair counts are never negative", field="b, c", found=(b, c))
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1))  # exact integers; one division at the end
    return min(1.0, 2 * tail / 2**n)


@dataclass(frozen=True)
class PairedComparison:
    """A candidate against a reference on the same seeds."""

    n: int  # seeds compared
    reference_successes: int
    candidate_successes: int
    gained: int  # seeds only the candidate solved (b)
    lost: int  # seeds only the reference solved (c)
    p: float  # McNemar's exact two-sided p-value
    alpha: float  # significance level of the verdict
    verdict: str  # "better", "worse" or "no evidence"

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def sentence(self, candidate: str = "residual", reference: str = "base") -> str:
        """``residual better than base: 9 seeds gained, 1 lost of 30 (McNemar exact p = 0.021 < 0.05)``."""
        sign = "<" if self.p < self.alpha else ">="
        verdict = "no evidence either way" if self.verdict == "no evidence" else self.verdict
        if self.verdict != "no evidence":
            verdict += f" than {reference}"
        return (
            f"{candidate} {verdict}: {self.gained} seeds gained, {self.lost} lost of {self.n} "
            f"({self.candidate_successes} vs {self.reference_successes} solved; McNemar exact "
            f"p = {self.p:.3g} {sign} {self.alpha:g})"
        )


def paired_compare(
    reference: Sequence[bool], candidate: Sequence[bool], alpha: float = 0.05
) -> PairedComparison:
    """Compare per-seed successes (the same seeds, in the same order)."""
    if len(reference) != len(candidate):
        raise ActlabError(
            "a paired comparison needs the same seeds for both policies",
            field="seeds",
            expected=f"{len(reference)} outcomes",
            found=f"{len(candidate)} outcomes",
        )
    gained = sum(1 for r, c in zip(reference, candidate) if c and not r)
    lost = sum(1 for r, c in zip(reference, candidate) if r and not c)
    p = mcnemar_exact(gained, lost)
    verdict = "no evidence"
    if p < alpha:
        verdict = "better" if gained > lost else "worse"
    return PairedComparison(
        n=len(reference),
        reference_successes=int(sum(map(bool, reference))),
        candidate_successes=int(sum(map(bool, candidate))),
        gained=gained,
        lost=lost,
        p=p,
        alpha=alpha,
        verdict=verdict,
    )
