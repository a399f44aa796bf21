"""The acceptance monitor (betting confidence sequences) and the seeded audit choice."""

from __future__ import annotations

import itertools
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.acceptance.monitor import (
    ONE_STRATUM,
    case_stratum,
    confseq_available,
    monitor,
    suspended_after,
    upper_bounds,
)
from dissensus.pipeline.audit import audit_share, is_audited

DELTA = 0.1

NEEDS_CONFSEQ = pytest.mark.skipif(
    not confseq_available(),
    reason="confseq is not installed (pip install 'dissensus[monitor]'; it builds against "
    "libboost-dev, see the Makefile)",
)


@NEEDS_CONFSEQ
def test_false_suspension_at_most_delta_over_500_exchangeable_streams() -> None:
    """Streams whose precision meets the target (exactly: the hardest case) are suspended
    at most delta of the time, however often the monitor looks."""
    rng = np.random.default_rng(20261201)
    target = 0.9
    suspended = sum(
        suspended_after(list(rng.random(200) < target), target=target, delta=DELTA, breaks=100)
        is not None
        for _ in range(500)
    )
    rate = suspended / 500
    print(f"false suspension rate: {rate} ({suspended}/500 streams of 200 audits, delta {DELTA})")
    assert rate <= DELTA


@NEEDS_CONFSEQ
def test_a_fifteen_point_drop_is_suspended_within_a_median_of_40_audits() -> None:
    rng = np.random.default_rng(7)
    target = 0.95
    points = [
        suspended_after(list(rng.random(120) < target - 0.15), target=target, delta=DELTA)
        for _ in range(40)
    ]
    # A stream never suspended within its 120 audits counts as suspended after infinitely many.
    median = statistics.median(float("inf") if p is None else p for p in points)
    caught = sum(p is not None for p in points)
    print(
        f"median audits to suspension (precision 0.80, target 0.95): {median}; "
        f"suspended within 120 audits: {caught}/40"
    )
    assert median <= 40
    assert caught >= 36


@NEEDS_CONFSEQ
@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.lists(st.booleans(), min_size=1, max_size=40))
def test_the_upper_bound_only_falls_and_covers_the_observed_share(outcomes: list[bool]) -> None:
    upper = upper_bounds(outcomes, delta=DELTA, breaks=100)
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(upper))
    assert upper[-1] >= sum(outcomes) / len(outcomes) - 1e-9


@NEEDS_CONFSEQ
def test_the_verdict_counts_and_names_the_suspension() -> None:
    verdict = monitor([False] * 10 + [True] * 3, target=0.95, delta=DELTA, stratum="math")
    assert verdict.audits == 13 and verdict.correct == 3
    assert verdict.suspended and verdict.suspended_after is not None
    assert verdict.lower <= 3 / 13 <= verdict.upper < 0.95
    assert verdict.reason() == (
        f"acceptance suspended: audited precision below 0.95 after "
        f"{verdict.suspended_after} audits in stratum 'math'"
    )
    empty = monitor([], target=0.9, delta=DELTA)
    assert not empty.suspended and empty.audits == 0 and empty.upper == 1.0


@NEEDS_CONFSEQ
def test_a_repeated_outcome_sequence_is_bounded_once() -> None:
    from dissensus.acceptance.monitor import _lower_cs_cached

    outcomes = [True, False, True, True] * 25 + [False]
    first = monitor(outcomes, target=0.9, delta=DELTA)
    before = _lower_cs_cached.cache_info()
    again = monitor(list(outcomes), target=0.9, delta=DELTA)
    after = _lower_cs_cached.cache_info()
    assert again == first
    assert after.hits == before.hits + 2 and after.misses == before.misses
    longer = monitor([*outcomes, True], target=0.9, delta=DELTA)
    assert longer.audits == first.audits + 1
    assert _lower_cs_cached.cache_info().misses == after.misses + 2


def test_case_stratum_reads_the_acceptance_files_strata_field() -> None:
    assert case_stratum({"strata_field": "subset"}, {"subset": "Natural"}) == "Natural"
    assert case_stratum({"strata_field": None}, {"subset": "Natural"}) == ONE_STRATUM
    assert case_stratum(None, {}) == ONE_STRATUM


@settings(max_examples=50, deadline=None, derandomize=True)
@given(st.integers(0, 2**31), st.text(min_size=1, max_size=12), st.integers(1, 10**6))
def test_the_audit_choice_is_a_function_of_seed_run_and_line(
    seed: int, run_id: str, line: int
) -> None:
    share = audit_share(seed, run_id, line)
    assert 0.0 <= share < 1.0
    assert is_audited(seed, run_id, line, 0.3) == is_audited(seed, run_id, line, 0.3)
    assert not is_audited(seed, run_id, line, 0.0)
    assert is_audited(seed, run_id, line, 1.0)


@pytest.mark.parametrize("rate", [0.05, 0.2])
def test_the_audit_share_is_about_the_rate(rate: float) -> None:
    n = 4000
    share = sum(is_audited(0, "run-a", line, rate) for line in range(1, n + 1)) / n
    sd = (rate * (1 - rate) / n) ** 0.5
    assert abs(share - rate) <= 4 * sd


@NEEDS_CONFSEQ
def test_the_bound_is_the_betting_sequence_at_level_delta() -> None:
    """The monitor's upper bound is confseq's betting lower sequence on the error rate at
    level delta, not a wider level: a stream of true precision 0.80 below a target of 0.85
    is not yet suspended within 400 audits at delta 0.1, though it is at 0.2."""
    import random

    from confseq.betting import betting_lower_cs

    rng = random.Random(1)
    outcomes = [rng.random() < 0.80 for _ in range(400)]
    head = outcomes[:80]
    errors = np.asarray([0.0 if o else 1.0 for o in head])
    expected = 1.0 - betting_lower_cs(errors, alpha=DELTA, breaks=100, running_intersection=True)
    assert np.allclose(upper_bounds(head, delta=DELTA, breaks=100), expected, rtol=0, atol=1e-12)
    wider = 1.0 - betting_lower_cs(errors, alpha=2 * DELTA, breaks=100, running_intersection=True)
    assert not np.allclose(expected, wider, rtol=0, atol=1e-12)
    assert suspended_after(outcomes, target=0.85, delta=DELTA) is None
    assert suspended_after(outcomes, target=0.85, delta=2 * DELTA) is not None


@pytest.mark.parametrize(
    ("target", "said"),
    [(0.9, "0.90"), (0.95, "0.95"), (0.975, "0.975"), (0.996, "0.996"), (0.999, "0.999")],
)
def test_a_suspension_names_the_target_it_fell_below(target: float, said: str) -> None:
    step = monitor([False] * 3, target=target, delta=0.1)
    assert step.suspended
    assert f"audited precision below {said} after" in step.reason()
