"""Spread, medians and the A/B verdict: pure Python, used by the orchestrating process.

A difference counts only when it is outside the spread: the bootstrap interval of the ratio of
medians must exclude 1, and neither median may lie inside the other wheel's min..max. Anything
else is reported as no difference. Kernel costs are marginal ((t_L - t_1) / (L - 1)), with a
bootstrap interval that resamples interleaved requests together (``bootstrap_interval``). With four
or more rounds, an A/B interval draws rounds before requests (``bootstrap_ratio_by_rounds``).
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

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


MIN_ROUNDS_TO_RESAMPLE = 4
"""From this many rounds on, an A/B interval resamples whole rounds too (``bootstrap_ratio_by_rounds``)."""


@dataclass(frozen=True, kw_only=True)
class Comparison:
    ratio: float
    """median(B) / median(A)."""
    ci_low: float
    ci_high: float
    verdict: str
    """``no difference``, ``B better`` or ``B worse`` (by the metric's direction)."""
    resampled: str = "requests"
    """What the interval's bootstrap drew: ``requests``, or ``rounds and requests``."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def bootstrap_ratio(
    a: Sequence[float], b: Sequence[float], *, resamples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of median(b) / median(a)."""
    rng = random.Random(seed)
    ratios = [
        statistics.median(rng.choices(b, k=len(b))) / statistics.median(rng.choices(a, k=len(a)))
        for _ in range(resamples)
    ]
    return _percentile_interval(ratios, confidence)


def bootstrap_ratio_by_rounds(
    a_rounds: Sequence[Sequence[float]],
    b_rounds: Sequence[Sequence[float]],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of median(b) / median(a) that draws rounds, then requests within them.

    Round r of A and round r of B ran next to each other, so a round is drawn for both wheels at once:
    what moved a whole round (the machine's state while it ran) moves the interval, where a bootstrap of
    pooled requests would take it for precision.
    """
    rng = random.Random(seed)
    rounds = range(len(a_rounds))
    ratios = []
    for _ in range(resamples):
        picks = rng.choices(rounds, k=len(a_rounds))
        a = [x for r in picks for x in rng.choices(a_rounds[r], k=len(a_rounds[r]))]
        b = [x for r in picks for x in rng.choices(b_rounds[r], k=len(b_rounds[r]))]
        ratios.append(statistics.median(b) / statistics.median(a))
    return _percentile_interval(ratios, confidence)


def compare(
    a: Sequence[float],
    b: Sequence[float],
    *,
    higher_is_better: bool,
    rounds: tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]] | None = None,
) -> Comparison:
    """B against A over their pooled samples. ``rounds``: the same samples by round, A's and B's in the
    same round order; from ``MIN_ROUNDS_TO_RESAMPLE`` paired rounds on, the interval draws rounds too."""
    spread_a, spread_b = Spread.of(a), Spread.of(b)
    ratio = spread_b.median / spread_a.median
    if rounds is not None and len(rounds[0]) == len(rounds[1]) >= MIN_ROUNDS_TO_RESAMPLE:
        low, high = bootstrap_ratio_by_rounds(*rounds)
        resampled = "rounds and requests"
    else:
        low, high = bootstrap_ratio(a, b)
        resampled = "requests"
    inside = spread_a.contains(spread_b.median) or spread_b.contains(spread_a.median) or low <= 1.0 <= high
    if inside:
        verdict = NO_DIFFERENCE
    else:
        b_higher = ratio > 1.0
        verdict = "B better" if b_higher == higher_is_better else "B worse"
    return Comparison(ratio=ratio, ci_low=low, ci_high=high, verdict=verdict, resampled=resampled)


PROCESS_STATE_SPREAD = 0.10
"""Round medians spread over this fraction of their median, and"""
PROCESS_STATE_FACTOR = 3.0
"""this many times the spread within a round, say the worker processes differ, not their requests."""


@dataclass(frozen=True, kw_only=True)
class RoundSpread:
    """How one wheel's round medians spread against the spread of requests within a round."""

    medians: list[float]
    """Each round's median."""
    between: float
    """(max - min) / median of the round medians."""
    within: float
    """The median over rounds of a round's interquartile range / its median."""

    @classmethod
    def of(cls, rounds: Sequence[Sequence[float]]) -> RoundSpread:
        medians = [statistics.median(r) for r in rounds]
        within = statistics.median(_iqr(r) / statistics.median(r) for r in rounds)
        between = (max(medians) - min(medians)) / statistics.median(medians)
        return cls(medians=medians, between=between, within=within)

    @property
    def process_level(self) -> bool:
        """Whether the rounds differ far more than their requests: each worker process settles in a state
        of its own, so more rounds narrow an interval and more requests per round do not."""
        return (
            len(self.medians) >= MIN_ROUNDS_TO_RESAMPLE
            and self.between > PROCESS_STATE_SPREAD
            and self.between > PROCESS_STATE_FACTOR * self.within
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"process_level": self.process_level}


def _iqr(samples: Sequence[float]) -> float:
    if len(samples) < 2:  # quartiles need two samples
        return 0.0
    low, _, high = statistics.quantiles(samples, n=4)
    return high - low


def marginal(long: Sequence[float], one: Sequence[float], layers: int) -> float:
    """The cost of one more layer: (median(t_L) - median(t_1)) / (L - 1), without the fixed cost of a run."""
    return (statistics.median(long) - statistics.median(one)) / (layers - 1)


def bootstrap_interval(
    statistic: Callable[[list[list[float]]], float],
    columns: Sequence[Sequence[float]],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic(columns)``.

    Columns of equal length are resampled by one shared index (paired): requests interleaved them,
    so whatever drifted moved them together. Columns of different lengths are resampled each on
    its own. Resamples whose statistic is undefined (NaN, e.g. a ratio to a zero marginal) are left out.
    """
    rng = random.Random(seed)
    lengths = {len(column) for column in columns}
    values = []
    for _ in range(resamples):
        if len(lengths) == 1:
            picks = rng.choices(range(len(columns[0])), k=len(columns[0]))
            drawn = [[column[i] for i in picks] for column in columns]
        else:
            drawn = [rng.choices(list(column), k=len(column)) for column in columns]
        value = statistic(drawn)
        if not math.isnan(value):
            values.append(value)
    if not values:
        return math.nan, math.nan
    return _percentile_interval(values, confidence)


def _percentile_interval(values: list[float], confidence: float) -> tuple[float, float]:
    """The central ``confidence`` share of the bootstrap statistics ``values`` (sorted here): its two ends."""
    values.sort()
    tail = (1 - confidence) / 2
    return values[int(tail * (len(values) - 1))], values[int((1 - tail) * (len(values) - 1))]


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN where the denominator is not positive (no cost to compare with)."""
    return numerator / denominator if denominator > 0 else math.nan
