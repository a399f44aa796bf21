"""The label-free shift check: rare false flags on exchangeable cases, flags a shifted set."""

from __future__ import annotations

import numpy as np

from dissensus.acceptance import Candidate


def _cases(rng: np.random.Generator, n: int, shift: float = 0.0) -> list[list[Candidate]]:
    out = []
    for _ in range(n):
        share = float(np.clip(rng.normal(0.7 - shift, 0.15), 0, 1))
        sim = float(np.clip(rng.normal(0.5 + shift, 0.1), 0, 1))
        out.append(
            [
                Candidate(
                    label="a",
                    features={"cand.share": share, "panel.mean_similarity": sim, "option=a": 1.0},
                ),
                Candidate(
                    label="b",
                    features={
                        "cand.share": 1 - share,
                        "panel.mean_similarity": sim,
                        "option=b": 1.0,
                    },
                ),
            ]
        )
    return out


def test_case_vector_takes_the_plurality_row_without_option_labels() -> None:
    from dissensus.acceptance.shift import case_vector

    rows = _cases(np.random.default_rng(0), 1)[0]
    vec = case_vector(rows)
    assert vec["cand.share"] == max(c.features["cand.share"] for c in rows)
    assert not any(k.startswith("option=") for k in vec)


def test_exchangeable_splits_are_rarely_flagged() -> None:
    from dissensus.acceptance.shift import reference, shift_check

    # 40 seeded exchangeable splits of 30 + 30 cases; the permutation p-value is valid at
    # any size, so at alpha 0.1 about 4 are expected to be flagged.
    flags = 0
    runs = 40
    for seed in range(100, 100 + runs):
        rng = np.random.default_rng(seed)
        cases = _cases(rng, 60)
        got = shift_check(
            reference(cases[:30]), cases[30:], alpha=0.1, permutations=19, folds=3, seed=seed
        )
        assert 0.0 < got.p_value <= 1.0
        flags += got.shifted
    assert flags / runs <= 0.10


def test_a_shifted_set_is_flagged_and_too_few_cases_are_not_tested() -> None:
    from dissensus.acceptance.shift import reference, shift_check

    rng = np.random.default_rng(7)
    ref = reference(_cases(rng, 60))
    got = shift_check(ref, _cases(rng, 60, shift=0.15), permutations=50, folds=3)
    assert got.shifted and got.auc > 0.7 and got.p_value <= 0.1
    assert "look different" in got.reason
    few = shift_check(ref, _cases(rng, 5, shift=0.15))
    assert not few.shifted and few.p_value == 1.0 and "too few" in few.reason


def test_the_acceptance_file_keeps_the_reference() -> None:
    from dissensus.acceptance import calibrate

    rng = np.random.default_rng(0)
    cases = _cases(rng, 50)
    acc = calibrate(cases, ["a"] * 50, target=0.8, delta=0.1, min_accepted=10, family="learned")
    assert acc.shift_reference is not None and len(acc.shift_reference.rows) == 50
