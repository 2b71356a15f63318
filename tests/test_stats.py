"""Tests for the paired statistics used to compare strategies seed by seed."""

from __future__ import annotations

import math
from statistics import NormalDist

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_ai_compaction_bench.stats import (
    Comparison,
    PairedCounts,
    compare,
    holm,
    mcnemar_exact,
    newcombe_paired_interval,
)

# The fork-vs-native study: 30 seeds, a passed 26, b passed 19, discordant 9 vs 2.
STUDY_30 = PairedCounts(both=17, only_a=9, only_b=2, neither=2)
# The second study table: 15 seeds, a passed all 15, b passed 8.
STUDY_15 = PairedCounts(both=8, only_a=7, only_b=0, neither=0)

Z95 = NormalDist().inv_cdf(0.975)


def _points(value: float) -> int:
    """Round a fraction to whole percentage points, as the study reports them."""
    return round(100 * value)


def _wilson_roots(successes: int, n: int, z: float) -> tuple[float, float]:
    """Wilson limits as the roots of (p_hat - pi)^2 = z^2 pi (1 - pi) / n.

    Deliberately a different derivation from the closed form in the module, so the
    tests do not merely restate the implementation.
    """
    p_hat = successes / n
    qa = 1 + z * z / n
    qb = -(2 * p_hat + z * z / n)
    qc = p_hat * p_hat
    root = math.sqrt(qb * qb - 4 * qa * qc)
    return (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)


def _square_and_add(counts: PairedCounts, phi: float, z: float = Z95) -> tuple[float, float]:
    """Newcombe's square-and-add limits for a given phi, from first principles."""
    n = counts.n
    x_a = counts.both + counts.only_a
    x_b = counts.both + counts.only_b
    p_a, p_b = x_a / n, x_b / n
    l_a, u_a = _wilson_roots(x_a, n, z)
    l_b, u_b = _wilson_roots(x_b, n, z)
    d = p_a - p_b
    dl_a, du_a, dl_b, du_b = p_a - l_a, u_a - p_a, p_b - l_b, u_b - p_b
    return (
        d - math.sqrt(dl_a**2 - 2 * phi * dl_a * du_b + du_b**2),
        d + math.sqrt(du_a**2 - 2 * phi * du_a * dl_b + dl_b**2),
    )


def _marginal_product(counts: PairedCounts) -> int:
    return (
        (counts.both + counts.only_a)
        * (counts.only_b + counts.neither)
        * (counts.both + counts.only_b)
        * (counts.only_a + counts.neither)
    )


@st.composite
def paired_counts(draw: st.DrawFn) -> PairedCounts:
    cells = draw(st.tuples(*(st.integers(min_value=0, max_value=60) for _ in range(4))).filter(lambda c: sum(c) > 0))
    return PairedCounts(*cells)


# --- PairedCounts -------------------------------------------------------------------------------------------------


def test_from_outcomes_tabulates_each_cell_by_seed() -> None:
    a = [True, True, False, False, True, True]
    b = [True, False, True, False, True, False]

    counts = PairedCounts.from_outcomes(a, b)

    assert counts == PairedCounts(both=2, only_a=2, only_b=1, neither=1)
    assert counts.n == 6


def test_n_sums_all_four_cells() -> None:
    assert PairedCounts(both=1, only_a=2, only_b=3, neither=4).n == 10


def test_difference_is_discordant_balance_over_n() -> None:
    assert STUDY_30.difference == pytest.approx((26 - 19) / 30)


def test_from_outcomes_rejects_length_mismatch_naming_both_lengths() -> None:
    with pytest.raises(ValueError, match='a has 3 outcomes, b has 2'):
        PairedCounts.from_outcomes([True, False, True], [True, False])


def test_from_outcomes_rejects_empty_input() -> None:
    with pytest.raises(ValueError, match='empty'):
        PairedCounts.from_outcomes([], [])


def test_counts_reject_negative_cells() -> None:
    with pytest.raises(ValueError, match='only_b must be non-negative'):
        PairedCounts(both=1, only_a=1, only_b=-1, neither=0)


def test_difference_of_empty_table_is_an_error() -> None:
    with pytest.raises(ValueError, match='empty'):
        _ = PairedCounts(0, 0, 0, 0).difference


# --- McNemar ------------------------------------------------------------------------------------------------------


def test_mcnemar_reproduces_published_30_pair_p_values() -> None:
    # P(X >= 9 | X ~ Bin(11, 1/2)) = (C(11,9) + C(11,10) + C(11,11)) / 2^11 = 67 / 2048.
    one_sided = mcnemar_exact(9, 2, 'greater')
    two_sided = mcnemar_exact(9, 2, 'two-sided')

    assert one_sided == pytest.approx(67 / 2048, abs=1e-15)
    assert two_sided == pytest.approx(134 / 2048, abs=1e-15)
    assert round(one_sided, 4) == 0.0327
    assert round(one_sided, 3) == 0.033
    assert round(two_sided, 3) == 0.065


def test_mcnemar_defaults_to_two_sided() -> None:
    assert mcnemar_exact(9, 2) == mcnemar_exact(9, 2, 'two-sided')


def test_mcnemar_small_exact_values() -> None:
    # 3 discordant pairs all favouring a: P = (1/2)^3 one-sided, doubled two-sided.
    assert mcnemar_exact(3, 0, 'greater') == pytest.approx(1 / 8)
    assert mcnemar_exact(3, 0, 'less') == pytest.approx(1.0)
    assert mcnemar_exact(3, 0, 'two-sided') == pytest.approx(1 / 4)
    assert mcnemar_exact(7, 0, 'greater') == pytest.approx(1 / 128)


def test_mcnemar_two_sided_is_capped_at_one() -> None:
    # Balanced discordance: each tail is 11/16, so 2 * tail = 22/16 must be capped.
    assert mcnemar_exact(2, 2, 'greater') == pytest.approx(11 / 16)
    assert mcnemar_exact(2, 2, 'two-sided') == 1.0


@pytest.mark.parametrize('alternative', ['two-sided', 'greater', 'less'])
def test_mcnemar_without_discordant_pairs_is_one(alternative: str) -> None:
    assert mcnemar_exact(0, 0, alternative) == 1.0  # type: ignore[arg-type]


def test_mcnemar_greater_and_less_are_mirror_images() -> None:
    assert mcnemar_exact(9, 2, 'greater') == mcnemar_exact(2, 9, 'less')
    # P(X <= 9 | X ~ Bin(11, 1/2)) = 1 - (C(11,10) + C(11,11)) / 2^11.
    assert mcnemar_exact(9, 2, 'less') == pytest.approx(1 - 12 / 2048, abs=1e-15)


@given(st.integers(min_value=0, max_value=80), st.integers(min_value=0, max_value=80))
def test_mcnemar_symmetry_property(x: int, y: int) -> None:
    assert mcnemar_exact(x, y, 'greater') == mcnemar_exact(y, x, 'less')
    assert mcnemar_exact(x, y, 'two-sided') == mcnemar_exact(y, x, 'two-sided')
    # The observed value sits in both tails, so the two one-sided p-values overlap.
    assert mcnemar_exact(x, y, 'greater') + mcnemar_exact(x, y, 'less') >= 1 - 1e-12


def test_mcnemar_rejects_negative_counts() -> None:
    with pytest.raises(ValueError, match='non-negative'):
        mcnemar_exact(-1, 2)


def test_mcnemar_rejects_unknown_alternative() -> None:
    with pytest.raises(ValueError, match="'sideways'"):
        mcnemar_exact(3, 1, 'sideways')  # type: ignore[arg-type]


# --- Newcombe method 10 ---------------------------------------------------------------------------------------------


def test_newcombe_method_10_on_the_30_pair_study_table() -> None:
    # Method 10 as published: both*neither - only_a*only_b = 34 - 18 = 16 > 0, so the
    # numerator of phi becomes max(16 - 30/2, 0) = 1.
    lower, upper = newcombe_paired_interval(STUDY_30, phi_correction=True)

    assert (lower, upper) == pytest.approx((0.0136059, 0.4282651), abs=1e-6)
    assert (_points(lower), _points(STUDY_30.difference), _points(upper)) == (1, 23, 43)


def test_published_30_pair_interval_matches_uncorrected_phi() -> None:
    # The study reports 3 to 42 points. Method 10's phi correction gives 1 to 43 (above) for
    # every concordant split; the published figure is reproduced by the plain phi coefficient.
    lower, upper = newcombe_paired_interval(STUDY_30, phi_correction=False)

    assert (lower, upper) == pytest.approx((0.0251045, 0.4206538), abs=1e-6)
    assert (_points(lower), _points(STUDY_30.difference), _points(upper)) == (3, 23, 42)


def test_newcombe_reproduces_published_15_pair_interval() -> None:
    lower, upper = newcombe_paired_interval(STUDY_15)

    assert (lower, upper) == pytest.approx((0.1677656, 0.6988302), abs=1e-6)
    assert (_points(lower), _points(STUDY_15.difference), _points(upper)) == (17, 47, 70)


def test_newcombe_without_correlation_information_is_plain_square_and_add() -> None:
    # only_b == neither == 0 empties the "a failed" margin, so phi carries no information and is 0.
    assert _marginal_product(STUDY_15) == 0
    assert newcombe_paired_interval(STUDY_15) == pytest.approx(_square_and_add(STUDY_15, phi=0.0), abs=1e-12)


def test_newcombe_phi_correction_uses_numerator_minus_half_n() -> None:
    expected_phi = (17 * 2 - 9 * 2 - 30 / 2) / math.sqrt(_marginal_product(STUDY_30))
    assert newcombe_paired_interval(STUDY_30, phi_correction=True) == pytest.approx(
        _square_and_add(STUDY_30, expected_phi), abs=1e-12
    )
    uncorrected_phi = (17 * 2 - 9 * 2) / math.sqrt(_marginal_product(STUDY_30))
    assert newcombe_paired_interval(STUDY_30, phi_correction=False) == pytest.approx(
        _square_and_add(STUDY_30, uncorrected_phi), abs=1e-12
    )


def test_newcombe_small_positive_association_is_truncated_to_zero() -> None:
    # both*neither - only_a*only_b = 30 - 25 = 5 <= n/2 = 10.5, so corrected phi is exactly 0.
    counts = PairedCounts(both=5, only_a=5, only_b=5, neither=6)

    assert newcombe_paired_interval(counts, phi_correction=True) == pytest.approx(
        _square_and_add(counts, phi=0.0), abs=1e-12
    )
    assert newcombe_paired_interval(counts, phi_correction=False) != pytest.approx(
        newcombe_paired_interval(counts, phi_correction=True), abs=1e-6
    )


def test_newcombe_negative_association_is_not_corrected() -> None:
    counts = PairedCounts(both=2, only_a=9, only_b=2, neither=1)  # 2*1 - 9*2 < 0
    phi = (2 * 1 - 9 * 2) / math.sqrt(_marginal_product(counts))

    assert newcombe_paired_interval(counts) == pytest.approx(_square_and_add(counts, phi), abs=1e-12)
    assert newcombe_paired_interval(counts) == newcombe_paired_interval(counts, phi_correction=False)


def test_newcombe_swapping_strategies_negates_the_interval() -> None:
    swapped = PairedCounts(both=17, only_a=2, only_b=9, neither=2)
    lower, upper = newcombe_paired_interval(STUDY_30)

    assert newcombe_paired_interval(swapped) == pytest.approx((-upper, -lower), abs=1e-12)


def test_newcombe_width_grows_with_confidence() -> None:
    widths = [upper - lower for lower, upper in (newcombe_paired_interval(STUDY_30, c) for c in (0.8, 0.95, 0.99))]

    assert widths[0] < widths[1] < widths[2]


@pytest.mark.parametrize('confidence', [0.0, 1.0, 1.5, -0.1])
def test_newcombe_rejects_confidence_outside_open_unit_interval(confidence: float) -> None:
    with pytest.raises(ValueError, match='confidence'):
        newcombe_paired_interval(STUDY_30, confidence)


def test_newcombe_rejects_empty_table() -> None:
    with pytest.raises(ValueError, match='empty'):
        newcombe_paired_interval(PairedCounts(0, 0, 0, 0))


@given(paired_counts(), st.booleans(), st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_newcombe_interval_contains_difference_and_stays_in_range(
    counts: PairedCounts, phi_correction: bool, confidence: float
) -> None:
    lower, upper = newcombe_paired_interval(counts, confidence, phi_correction=phi_correction)

    assert -1.0 <= lower <= counts.difference + 1e-12
    assert counts.difference - 1e-12 <= upper <= 1.0


# --- Holm -----------------------------------------------------------------------------------------------------------


def test_holm_known_example_in_input_order() -> None:
    # Sorted: 0.01 * 3 = 0.03, 0.03 * 2 = 0.06, 0.04 * 1 = 0.04 -> raised to 0.06 for monotonicity.
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def test_holm_caps_at_one() -> None:
    assert holm([0.5, 0.6]) == [1.0, 1.0]


def test_holm_single_value_is_unchanged_and_empty_is_empty() -> None:
    assert holm([0.2]) == [0.2]
    assert holm([]) == []


@pytest.mark.parametrize('bad', [-0.1, 1.1, math.nan])
def test_holm_rejects_values_outside_unit_interval(bad: float) -> None:
    with pytest.raises(ValueError, match='p-values'):
        holm([0.01, bad])


@given(st.lists(st.floats(min_value=0.0, max_value=1.0), max_size=12))
def test_holm_is_conservative_monotone_and_capped(p_values: list[float]) -> None:
    adjusted = holm(p_values)

    assert len(adjusted) == len(p_values)
    for raw, adj in zip(p_values, adjusted, strict=True):
        assert raw <= adj <= 1.0
    for i, j in ((i, j) for i in range(len(p_values)) for j in range(len(p_values))):
        if p_values[i] < p_values[j]:
            assert adjusted[i] <= adjusted[j]
    if p_values:
        # The smallest p-value is multiplied by the full family size (Bonferroni step).
        assert min(adjusted) == pytest.approx(min(1.0, len(p_values) * min(p_values)))


# --- compare --------------------------------------------------------------------------------------------------------


def _study_30_outcomes() -> tuple[list[bool], list[bool]]:
    cells = [(True, True)] * 17 + [(True, False)] * 9 + [(False, True)] * 2 + [(False, False)] * 2
    # Interleave so the result cannot depend on the cells arriving in blocks.
    cells = cells[::2] + cells[1::2]
    return [x for x, _ in cells], [y for _, y in cells]


def test_compare_on_the_30_seed_study() -> None:
    a, b = _study_30_outcomes()
    assert (sum(a), sum(b)) == (26, 19)

    result = compare(a, b)

    assert isinstance(result, Comparison)
    assert result.counts == STUDY_30
    assert result.p_one_sided == pytest.approx(67 / 2048, abs=1e-15)
    assert result.p_two_sided == pytest.approx(134 / 2048, abs=1e-15)
    assert result.difference == pytest.approx(7 / 30)
    # Reports use the plain phi, which reproduces the study's published 3 to 42 points.
    assert result.interval == pytest.approx(newcombe_paired_interval(STUDY_30), abs=1e-15)
    assert result.interval == pytest.approx((0.0251045, 0.4206538), abs=1e-6)
    assert compare(a, b, phi_correction=True).interval == pytest.approx((0.0136059, 0.4282651), abs=1e-6)


def test_compare_one_sided_means_a_better_than_b() -> None:
    a, b = _study_30_outcomes()

    reversed_result = compare(b, a)

    assert reversed_result.p_one_sided == pytest.approx(mcnemar_exact(9, 2, 'less'))
    assert reversed_result.p_one_sided > 0.99
    assert reversed_result.difference == pytest.approx(-7 / 30)


def test_compare_passes_confidence_through() -> None:
    a, b = _study_30_outcomes()

    assert compare(a, b, confidence=0.9).interval == pytest.approx(newcombe_paired_interval(STUDY_30, 0.9), abs=1e-15)


def test_compare_rejects_unpaired_outcomes() -> None:
    with pytest.raises(ValueError, match='a has 2 outcomes, b has 1'):
        compare([True, False], [True])


def test_wilson_interval_of_a_pass_rate() -> None:
    from pydantic_ai_compaction_bench.stats import wilson_interval

    low, high = wilson_interval(9, 9)
    # All 9 passed: the lower bound is n / (n + z²) = 9 / 12.8415 with z = 1.96.
    assert high == 1.0 and round(low, 4) == 0.7009
    low, high = wilson_interval(0, 9)
    assert low == 0.0 and round(high, 4) == 0.2991
    low, high = wilson_interval(5, 10)
    assert round(low, 4) == 0.2366 and round(high, 4) == 0.7634
    with pytest.raises(ValueError, match='0 <= successes <= n'):
        wilson_interval(3, 2)
