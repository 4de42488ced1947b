"""Spread, medians and the A/B verdict: pure Python, used by the orchestrating process.

A difference counts only when it is outside the spread: the bootstrap interval of the ratio of
medians must exclude 1, and neither median may lie inside the other wheel's min..max. Anything
else is reported as no difference.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

NO_DIFFERENCE = "no difference"


@dataclass(frozen=True, kw_only=True)
class Spread:
    n: int
    min: float
    median: float
    max: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Spread:
        return cls(n=len(samples), min=min(samples), median=statistics.median(samples), max=max(samples))

    def contains(self, value: float) -> bool:
        return self.min <= value <= self.max


@dataclass(frozen=True, kw_only=True)
class Comparison:
    ratio: float
    """median(B) / median(A)."""
    ci_low: float
    ci_high: float
    verdict: str
    """``no difference``, ``B better`` or ``B worse`` (by the metric's direction)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def bootstrap_ratio(
    a: Sequence[float], b: Sequence[float], *, resamples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of median(b) / median(a)."""
    rng = random.Random(seed)
    ratios = sorted(
        statistics.median(rng.choices(b, k=len(b))) / statistics.median(rng.choices(a, k=len(a)))
        for _ in range(resamples)
    )
    tail = (1 - confidence) / 2
    return ratios[int(tail * (resamples - 1))], ratios[int((1 - tail) * (resamples - 1))]


def compare(a: Sequence[float], b: Sequence[float], *, higher_is_better: bool) -> Comparison:
    spread_a, spread_b = Spread.of(a), Spread.of(b)
    ratio = spread_b.median / spread_a.median
    low, high = bootstrap_ratio(a, b)
    inside = spread_a.contains(spread_b.median) or spread_b.contains(spread_a.median) or low <= 1.0 <= high
    if inside:
        verdict = NO_DIFFERENCE
    else:
        b_higher = ratio > 1.0
        verdict = "B better" if b_higher == higher_is_better else "B worse"
    return Comparison(ratio=ratio, ci_low=low, ci_high=high, verdict=verdict)
