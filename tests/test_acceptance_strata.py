"""Strata: a threshold passes only where every stratum tested it and passed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


def _holds_everywhere(
    scores: list[float],
    correct: list[bool],
    strata: list[str],
    t: float,
    target: float,
    delta: float,
    fewest: int,
) -> bool:
    from dissensus.acceptance import clopper_pearson_upper

    sc, ok, lab = np.asarray(scores), np.asarray(correct), np.asarray(strata)
    for name in set(strata):
        mask = (lab == name) & (sc >= t)
        accepted = int(mask.sum())
        if accepted < fewest:
            return False
        if clopper_pearson_upper(accepted - int(ok[mask].sum()), accepted, delta) > 1 - target:
            return False
    return True


@pytest.mark.parametrize("grid", [200, None, "counts"])
def test_a_stratum_that_skipped_a_threshold_does_not_let_it_pass(grid: object) -> None:
    from dissensus.acceptance import fewest_tested, select_threshold
    from dissensus.acceptance.bound import DEFAULT_SEQUENCE

    # Stratum B: 5 confidently wrong cases at 0.99 and 200 right ones at 0.5. Stratum A:
    # 300 right cases spread over (0.6, 1). At 0.955, B accepts 5 cases: too few to test,
    # and all wrong, so 0.955 must not pass.
    rng = np.random.default_rng(0)
    scores = [0.99] * 5 + [0.5] * 200 + rng.uniform(0.6, 1.0, 300).round(4).tolist()
    correct = [False] * 5 + [True] * 200 + [True] * 300
    strata = ["B"] * 205 + ["A"] * 300
    choice = select_threshold(
        scores, correct, target=0.9, delta=0.1, min_accepted=30, strata=strata,
        grid=DEFAULT_SEQUENCE if grid == "counts" else grid,  # type: ignore[arg-type]
    )  # fmt: skip
    assert choice.threshold is not None and choice.threshold <= 0.5
    b = next(s for s in choice.strata if s.stratum == "B")
    assert b.accepted == 205 and b.correct == 200
    assert _holds_everywhere(
        scores, correct, strata, choice.threshold, 0.9, 0.1, fewest_tested(0.9, 0.1)
    )


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(40, 300),
    k=st.integers(1, 3),
    skew=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31 - 1),
    grid=st.sampled_from([50, None, "counts"]),
)
def test_a_passing_threshold_was_tested_and_passed_in_every_stratum(
    n: int, k: int, skew: float, seed: int, grid: object
) -> None:
    from dissensus.acceptance import fewest_tested, select_threshold
    from dissensus.acceptance.bound import DEFAULT_SEQUENCE

    rng = np.random.default_rng(seed)
    strata = [f"s{i}" for i in rng.integers(0, k, n)]
    scores = rng.uniform(0, 1, n).round(3)
    # Stratum s0's confident answers are wrong more often: the strata differ.
    p_right = np.where(np.asarray(strata) == "s0", 1 - skew * scores, 0.5 + 0.5 * scores)
    correct = (rng.uniform(0, 1, n) < p_right).tolist()
    choice = select_threshold(
        scores.tolist(), correct, target=0.8, delta=0.2, min_accepted=10, strata=strata,
        grid=DEFAULT_SEQUENCE if grid == "counts" else grid,  # type: ignore[arg-type]
    )  # fmt: skip
    if choice.threshold is None:
        assert choice.accepted == 0
        return
    fewest = max(10, fewest_tested(0.8, 0.2))
    assert _holds_everywhere(scores.tolist(), correct, strata, choice.threshold, 0.8, 0.2, fewest)
