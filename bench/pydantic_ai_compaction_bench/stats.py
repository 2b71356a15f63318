"""Paired statistics for comparing two strategies run on the same seeds.

Each seed yields one pass/fail outcome per strategy, so the natural unit is the
pair, not the run: two strategies that fail on the same hard seeds are far more
alike than their pass rates alone suggest. Everything here therefore works on
the 2x2 table of paired outcomes:

* `mcnemar_exact` tests whether the discordant pairs lean one way.
* `newcombe_paired_interval` bounds the difference in pass rates
  (Newcombe 1998, method 10).
* `holm` adjusts a family of p-values when several comparisons are reported.

Pure Python on purpose: the harness must not pull numpy/scipy in for a handful
of binomial sums.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

__all__ = [
    'Alternative',
    'Comparison',
    'PairedCounts',
    'compare',
    'holm',
    'mcnemar_exact',
    'newcombe_paired_interval',
    'wilson_interval',
]

Alternative = Literal['two-sided', 'greater', 'less']


@dataclass(frozen=True)
class PairedCounts:
    """The 2x2 table of paired outcomes for strategies `a` and `b`.

    Attributes:
        both: Seeds on which both strategies passed.
        only_a: Seeds on which `a` passed and `b` failed.
        only_b: Seeds on which `b` passed and `a` failed.
        neither: Seeds on which both strategies failed.
    """

    both: int
    only_a: int
    only_b: int
    neither: int

    def __post_init__(self) -> None:
        # A negative cell can only come from a caller bug; catching it here keeps
        # every downstream formula free of sign checks.
        for name in ('both', 'only_a', 'only_b', 'neither'):
            value: int = getattr(self, name)
            if value < 0:
                raise ValueError(f'{name} must be non-negative, got {value}')

    @property
    def n(self) -> int:
        """Number of pairs (seeds)."""
        return self.both + self.only_a + self.only_b + self.neither

    @property
    def difference(self) -> float:
        """Observed difference in pass rates, p_a - p_b, as a fraction.

        Raises:
            ValueError: If the table is empty.
        """
        _require_pairs(self)
        # The concordant cells cancel: p_a - p_b = (only_a - only_b) / n.
        return (self.only_a - self.only_b) / self.n

    @classmethod
    def from_outcomes(cls, a: Sequence[bool], b: Sequence[bool]) -> PairedCounts:
        """Tabulate per-seed outcomes, where `a[i]` and `b[i]` come from the same seed.

        Args:
            a: Pass (True) / fail (False) for strategy `a`, one entry per seed.
            b: Pass / fail for strategy `b`, in the same seed order as `a`.

        Returns:
            The paired 2x2 table.

        Raises:
            ValueError: If the sequences differ in length or are empty.
        """
        if len(a) != len(b):
            raise ValueError(f'outcome sequences must pair up by seed: a has {len(a)} outcomes, b has {len(b)}')
        if not a:
            raise ValueError('outcome sequences are empty: at least one paired seed is required')
        pairs = list(zip(a, b, strict=True))
        return cls(
            both=sum(1 for x, y in pairs if x and y),
            only_a=sum(1 for x, y in pairs if x and not y),
            only_b=sum(1 for x, y in pairs if y and not x),
            neither=sum(1 for x, y in pairs if not x and not y),
        )


@dataclass(frozen=True)
class Comparison:
    """Result of comparing strategy `a` against strategy `b` on paired seeds.

    Attributes:
        counts: The paired 2x2 table.
        p_one_sided: Exact McNemar p-value for "a is better than b".
        p_two_sided: Exact McNemar p-value for "a and b differ".
        interval: Newcombe method-10 confidence interval for p_a - p_b, as fractions.
        difference: Observed p_a - p_b, as a fraction.
    """

    counts: PairedCounts
    p_one_sided: float
    p_two_sided: float
    interval: tuple[float, float]
    difference: float


def mcnemar_exact(only_a: int, only_b: int, alternative: Alternative = 'two-sided') -> float:
    """Exact (conditional binomial) McNemar test on the discordant pairs.

    Under the null hypothesis a discordant pair is equally likely to favour
    either strategy, so `only_a` ~ Binomial(only_a + only_b, 0.5).

    Args:
        only_a: Pairs where `a` passed and `b` failed.
        only_b: Pairs where `b` passed and `a` failed.
        alternative: `'greater'` tests that `a` beats `b` (large `only_a`),
            `'less'` that `b` beats `a`, and `'two-sided'` that they differ.

    Returns:
        The p-value. Two-sided is `min(1, 2 * smaller tail)`; with no discordant
        pairs there is no evidence either way and the result is 1.0.

    Raises:
        ValueError: If a count is negative or `alternative` is unknown.
    """
    if only_a < 0 or only_b < 0:
        raise ValueError(f'discordant counts must be non-negative, got only_a={only_a}, only_b={only_b}')
    discordant = only_a + only_b
    if discordant == 0:
        return 1.0
    greater = _binomial_upper_tail(only_a, discordant)
    less = _binomial_upper_tail(only_b, discordant)  # P(X <= only_a) == P(n - X >= only_b) by symmetry at p=0.5
    if alternative == 'greater':
        return greater
    if alternative == 'less':
        return less
    if alternative == 'two-sided':
        return min(1.0, 2 * min(greater, less))
    raise ValueError(f"alternative must be 'two-sided', 'greater' or 'less', got {alternative!r}")


def newcombe_paired_interval(
    counts: PairedCounts, confidence: float = 0.95, *, phi_correction: bool = False
) -> tuple[float, float]:
    """Newcombe's method-10 score interval for the paired difference p_a - p_b.

    Newcombe (1998), "Improved confidence intervals for the difference between
    binomial proportions based on paired data", Stat Med 17:2635-2650. Wilson
    score intervals for the two marginal pass rates are combined by
    square-and-add, with the cross term weighted by the phi correlation of the
    pairs, because paired outcomes are positively correlated and ignoring that
    would make the interval too wide.

    Args:
        counts: The paired 2x2 table.
        confidence: Two-sided confidence level, strictly between 0 and 1.
        phi_correction: Apply Newcombe's continuity adjustment to phi: when
            `both * neither > only_a * only_b`, the numerator becomes
            `max(both * neither - only_a * only_b - n / 2, 0)`. The default,
            the plain phi coefficient, is what seed 004's published intervals
            were computed with (3 to 42 points on its 30-pair test, where the
            adjusted phi gives 1 to 43), so reports stay comparable with it.

    Returns:
        `(lower, upper)` as fractions in [-1, 1], not percentages.

    Raises:
        ValueError: If the table is empty or `confidence` is out of range.
    """
    _require_pairs(counts)
    z = _z_two_sided(confidence)
    n = counts.n
    p_a = (counts.both + counts.only_a) / n
    p_b = (counts.both + counts.only_b) / n
    low_a, high_a = _wilson(counts.both + counts.only_a, n, z)
    low_b, high_b = _wilson(counts.both + counts.only_b, n, z)
    phi = _phi(counts, corrected=phi_correction)
    difference = p_a - p_b
    # The lower limit pairs a's downside with b's upside, and vice versa.
    lower = difference - _combine(p_a - low_a, high_b - p_b, phi)
    upper = difference + _combine(high_a - p_a, p_b - low_b, phi)
    # Mathematically already within [-1, 1]; the clamp only absorbs rounding.
    return max(-1.0, lower), min(1.0, upper)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni step-down adjusted p-values.

    Args:
        p_values: Raw p-values for a family of hypotheses.

    Returns:
        Adjusted p-values in the input order, capped at 1. Rejecting every
        hypothesis whose adjusted value is <= alpha controls the family-wise
        error rate at alpha.

    Raises:
        ValueError: If a p-value is outside [0, 1] (or NaN).
    """
    for p in p_values:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f'p-values must lie in [0, 1], got {p}')
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running_max = 0.0
    for rank, index in enumerate(order):
        # The running max keeps the adjusted values monotone in the raw ones,
        # which the step-down procedure requires (a smaller raw p-value must
        # never end up with a larger adjusted one).
        running_max = max(running_max, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running_max
    return adjusted


def compare(
    a: Sequence[bool], b: Sequence[bool], confidence: float = 0.95, *, phi_correction: bool = False
) -> Comparison:
    """Compare strategy `a` against `b` on per-seed outcomes.

    Args:
        a: Pass / fail for strategy `a`, one entry per seed.
        b: Pass / fail for strategy `b`, in the same seed order.
        confidence: Confidence level of the interval.
        phi_correction: See `newcombe_paired_interval`.

    Returns:
        Counts, exact McNemar p-values (one-sided for "a beats b", and
        two-sided), the Newcombe method-10 interval and the observed difference.

    Raises:
        ValueError: If the sequences differ in length or are empty, or
            `confidence` is out of range.
    """
    counts = PairedCounts.from_outcomes(a, b)
    return Comparison(
        counts=counts,
        p_one_sided=mcnemar_exact(counts.only_a, counts.only_b, 'greater'),
        p_two_sided=mcnemar_exact(counts.only_a, counts.only_b, 'two-sided'),
        interval=newcombe_paired_interval(counts, confidence, phi_correction=phi_correction),
        difference=counts.difference,
    )


def _require_pairs(counts: PairedCounts) -> None:
    if counts.n == 0:
        raise ValueError('paired counts are empty: at least one paired seed is required')


def _binomial_upper_tail(k: int, n: int) -> float:
    """P(X >= k) for X ~ Binomial(n, 0.5), computed exactly before the final division."""
    # Integer arithmetic keeps the tail exact for any realistic number of seeds;
    # int / int true division is correctly rounded even for huge operands.
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n


def _z_two_sided(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f'confidence must lie strictly between 0 and 1, got {confidence}')
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a pass rate of *successes* out of *n* (no continuity correction).

    Raises:
        ValueError: when `n` is not positive or `successes` is outside `0..n`.
    """
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f'wilson_interval needs 0 <= successes <= n and n >= 1, got {successes} of {n}')
    return _wilson(successes, n, _z_two_sided(confidence))


def _wilson(successes: int, n: int, z: float) -> tuple[float, float]:
    """Wilson score interval for a single proportion (no continuity correction)."""
    p = successes / n
    z2 = z * z
    denominator = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half_width = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    # At p = 0 or 1 the exact limit is 0 or 1, but rounding can leave it a hair inside (above 0 or below 1),
    # which puts the observed rate outside its own interval, or outside [0, 1], which leaks into the difference
    # interval. Bound by the observed rate and by [0, 1].
    return max(0.0, min(p, centre - half_width)), min(1.0, max(p, centre + half_width))


def _phi(counts: PairedCounts, *, corrected: bool) -> float:
    """Correlation between the two marginal outcomes, as used by method 10."""
    denominator = (
        (counts.both + counts.only_a)  # a passed
        * (counts.only_b + counts.neither)  # a failed
        * (counts.both + counts.only_b)  # b passed
        * (counts.only_a + counts.neither)  # b failed
    )
    if denominator == 0:
        # A constant margin carries no correlation information; Newcombe sets phi to 0.
        return 0.0
    numerator = counts.both * counts.neither - counts.only_a * counts.only_b
    if corrected and numerator > 0:
        # Method 10 shrinks a positive correlation by n/2 (a continuity-style
        # correction), so the interval does not get overconfident on small tables.
        numerator = max(numerator - counts.n / 2, 0.0)
    return numerator / math.sqrt(denominator)


def _combine(own: float, other: float, phi: float) -> float:
    """Square-and-add of two one-sided margins with correlation `phi`."""
    # |phi| <= 1 makes the radicand >= (own - other)^2 >= 0; max() only guards rounding.
    return math.sqrt(max(0.0, own * own - 2 * phi * own * other + other * other))
