"""The label-free shift check: a sample-split test whose p-value is uniform on exchangeable
cases and fine enough to spend over a file's life; a clear shift is flagged at small levels."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.acceptance import Candidate

if TYPE_CHECKING:
    from dissensus.acceptance.shift import ShiftReference


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


def test_case_vector_takes_the_plurality_row_with_its_label() -> None:
    from dissensus.acceptance.shift import case_vector

    rows = _cases(np.random.default_rng(0), 1)[0]
    vec = case_vector(rows)
    best = max(rows, key=lambda c: c.features["cand.share"])
    assert vec["cand.share"] == best.features["cand.share"]
    assert [k for k in vec if k.startswith("option=")] == [f"option={best.label}"]


def _labelled(rng: np.random.Generator, n: int, b_share: float) -> list[list[Candidate]]:
    """Unanimous-looking panels alike in every feature but the label they back: ``b`` in
    about ``b_share`` of them, ``a`` in the rest."""
    out = []
    for _ in range(n):
        backed = "b" if rng.uniform() < b_share else "a"
        other = "a" if backed == "b" else "b"
        share = float(rng.choice([0.8, 1.0]))
        out.append(
            [
                Candidate(label=backed, features={"cand.share": share, f"option={backed}": 1.0}),
                Candidate(label=other, features={"cand.share": 1 - share, f"option={other}": 1.0}),
            ]
        )
    return out


def test_a_change_in_the_label_mix_of_a_closed_label_set_is_flagged() -> None:
    """Calibration cases whose panels back ``a`` (as when they are chosen by their gold)
    and deployed cases whose panels back ``b`` half of the time, alike otherwise: the
    label is all that differs, and the check sees it; the same mix is not flagged."""
    from dissensus.acceptance.shift import case_vector, reference, shift_check

    rng = np.random.default_rng(3)
    ref = reference(_labelled(rng, 120, 0.05))
    assert {"option=a", "option=b"} <= set(ref.features)
    moved = shift_check(ref, _labelled(rng, 120, 0.5), alpha=0.01)
    assert moved.shifted and moved.auc > 0.6
    alike = shift_check(ref, _labelled(rng, 120, 0.05), alpha=0.01)
    assert not alike.shifted
    # A reference made without the label columns (a file from before they were kept)
    # reads the deployed vectors on its own columns and checks as it did.
    old = ref.model_copy(
        update={
            "features": [k for k in ref.features if not k.startswith("option=")],
            "rows": [
                [v for k, v in zip(ref.features, row, strict=True) if not k.startswith("option=")]
                for row in ref.rows
            ],
        }
    )
    assert not shift_check(old, _labelled(rng, 120, 0.5), alpha=0.01).shifted
    assert "option=b" in case_vector(_labelled(rng, 1, 1.0)[0])


def test_free_answers_keep_no_label_columns() -> None:
    """More candidate labels than a closed option set holds (numbers, free text): the
    reference keeps no ``option=`` column, as the fit keeps no such feature."""
    from dissensus.acceptance.features import MAX_OPTION_LABELS
    from dissensus.acceptance.shift import reference

    cases = [
        [
            Candidate(label=str(i), features={"cand.share": 0.6 + i / 100, f"option={i}": 1.0}),
            Candidate(label=f"x{i}", features={"cand.share": 0.2, f"option=x{i}": 1.0}),
        ]
        for i in range(MAX_OPTION_LABELS)
    ]
    ref = reference(cases)
    assert ref.features == ["cand.share"]
    closed = reference(cases[: MAX_OPTION_LABELS // 2])
    assert sum(k.startswith("option=") for k in closed.features) == MAX_OPTION_LABELS // 2


def _reference(rng: np.random.Generator, n: int, d: int = 3) -> ShiftReference:
    from dissensus.acceptance.shift import ShiftReference

    return ShiftReference(
        features=[f"f{j}" for j in range(d)], rows=rng.normal(size=(n, d)).tolist()
    )


def _vectors(
    rng: np.random.Generator, n: int, d: int = 3, shift: float = 0.0
) -> list[dict[str, float]]:
    return [
        {f"f{j}": float(v) for j, v in enumerate(row)} for row in rng.normal(size=(n, d)) + shift
    ]


def test_the_p_value_is_uniform_under_exchangeability() -> None:
    """300 seeded exchangeable draws (40 calibration cases against 30 deployed): the
    sample-split p-value is (about) uniform, so a check at level a flags about an a share."""
    from dissensus.acceptance.shift import shift_check_vectors

    draws = 300
    ps = []
    for seed in range(draws):
        rng = np.random.default_rng(1000 + seed)
        got = shift_check_vectors(_reference(rng, 40), _vectors(rng, 30), alpha=0.05, seed=seed)
        assert 0.0 < got.p_value <= 1.0 and got.tested_n == (20, 15)
        ps.append(got.p_value)
    p = np.asarray(ps)
    for level in (0.01, 0.05, 0.1, 0.25, 0.5):
        slack = 3 * np.sqrt(level * (1 - level) / draws) + 0.01
        assert np.mean(p <= level) <= level + slack, level
    # Not too conservative either (uniform: the mean p is 1/2).
    assert 0.4 < p.mean() < 0.6


def test_one_seed_for_every_check_stays_valid() -> None:
    """Checks of many exchangeable pairs of samples of the same sizes with the *same* seed
    (as a caller with a fixed seed makes them): the splits still differ from pair to pair,
    so the p-values stay (about) uniform over the pairs."""
    from dissensus.acceptance.shift import shift_check_vectors

    draws = 200
    ps = []
    for draw in range(draws):
        rng = np.random.default_rng(2000 + draw)
        got = shift_check_vectors(_reference(rng, 60), _vectors(rng, 40), alpha=0.1, seed=0)
        ps.append(got.p_value)
    p = np.asarray(ps)
    for level in (0.05, 0.1, 0.25):
        assert np.mean(p <= level) <= level + 3 * np.sqrt(level * (1 - level) / draws) + 0.01
    assert 0.4 < p.mean() < 0.6


def test_a_clear_shift_is_flagged_at_the_tenth_and_the_fiftieth_check() -> None:
    from dissensus.acceptance.shift import check_level, reference, shift_check

    rng = np.random.default_rng(7)
    ref = reference(_cases(rng, 150))
    deployed = _cases(rng, 60, shift=0.15)
    for check in (10, 50):
        level = check_level(0.1, check)
        got = shift_check(ref, deployed, alpha=level)
        assert got.shifted and got.p_value <= level and got.auc > 0.75, (check, got)
        assert "look different" in got.reason
    assert check_level(0.1, 50) < 2e-5  # far below the 1/201 a permutation test could reach


def test_too_few_cases_are_not_tested_and_small_halves_use_the_exact_p_value() -> None:
    from dissensus.acceptance.shift import MIN_CASES, reference, shift_check

    rng = np.random.default_rng(3)
    ref = reference(_cases(rng, 60))
    few = shift_check(ref, _cases(rng, MIN_CASES - 1, shift=0.15))
    assert not few.shifted and few.p_value == 1.0 and "too few" in few.reason
    assert few.tested_n == (0, 0) and few.method == ""
    small = shift_check(ref, _cases(rng, MIN_CASES, shift=0.15))
    assert small.tested_n == (30, 5) and small.method == "exact"
    assert small.permutations == 0
    large = shift_check(reference(_cases(rng, 400)), _cases(rng, 400))
    assert large.method == "asymptotic"


def test_the_check_is_seeded() -> None:
    from dissensus.acceptance.shift import reference, shift_check

    rng = np.random.default_rng(11)
    ref, deployed = reference(_cases(rng, 80)), _cases(rng, 40, shift=0.05)
    assert shift_check(ref, deployed, seed=4) == shift_check(ref, deployed, seed=4)


def test_the_check_does_not_depend_on_the_order_of_the_vectors() -> None:
    """A resumed run may journal its cases in another order: the same vectors, the same check."""
    from dissensus.acceptance.shift import ShiftReference, shift_check_vectors

    rng = np.random.default_rng(5)
    ref = _reference(rng, 60)
    deployed = _vectors(rng, 40, shift=0.3)
    first = shift_check_vectors(ref, deployed, seed=2)
    for order in range(4):
        shuffled = list(np.random.default_rng(order).permutation(len(deployed)))
        again = shift_check_vectors(
            ShiftReference(features=ref.features, rows=list(reversed(ref.rows))),
            [deployed[i] for i in shuffled],
            seed=2,
        )
        assert again == first


def _discrete(rng: np.random.Generator, n: int, rare: float) -> list[dict[str, float]]:
    """Vectors of discrete features, most of them one vector (a unanimous panel's)."""
    out = []
    for _ in range(n):
        row = {"split": 0.0, "a": 0.0, "b": 0.0}
        if rng.random() < rare:
            row["split"] = 1.0
            row["ab"[int(rng.integers(0, 2))]] = 1.0
        out.append(row)
    return out


def test_cases_that_all_look_alike_are_never_flagged() -> None:
    """One vector on both sides: the scores are all tied (AUC 0.5), and no check flags them."""
    from dissensus.acceptance.shift import ShiftReference, shift_check_vectors

    ref = ShiftReference(features=["split", "a", "b"], rows=[[0.0, 0.0, 0.0]] * 150)
    for seed in range(60):
        got = shift_check_vectors(ref, [{"split": 0.0}] * (20 + seed), alpha=0.5, seed=seed)
        assert not got.shifted and got.auc == 0.5, (seed, got)


def test_mostly_tied_scores_flag_at_most_at_the_level() -> None:
    """Discrete features, most cases one vector (a few cases above many tied ones): a
    check's false flags stay near its level."""
    from dissensus.acceptance.shift import ShiftReference, shift_check_vectors

    draws, flags = 300, {0.05: 0, 0.01: 0}
    for seed in range(draws):
        rng = np.random.default_rng(50_000 + seed)
        cal = _discrete(rng, 300, 0.1)
        ref = ShiftReference(features=["split", "a", "b"], rows=[list(v.values()) for v in cal])
        got = shift_check_vectors(ref, _discrete(rng, 40, 0.1), seed=seed, alpha=0.05)
        for level in flags:
            flags[level] += got.p_value <= level and got.auc > 0.5
    for level, n in flags.items():
        assert n / draws <= level + 3 * math.sqrt(level * (1 - level) / draws) + 0.01, flags


def test_one_case_above_many_tied_ones_is_not_strong_evidence() -> None:
    """Testing halves of 20 deployed and 150 calibration scores, all tied but one deployed
    score above: by chance that happens with probability 20/170 ~ 0.12, the exact p-value
    (the tie-corrected normal approximation called it 0.003)."""
    from dissensus.acceptance.shift import _p_value

    dep = np.r_[np.ones(1), np.zeros(19)]
    cal = np.zeros(150)
    auc, p, method = _p_value(dep, cal)
    assert method == "exact" and auc > 0.5
    assert p == pytest.approx(20 / 170)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=1, max_size=6),
    st.lists(st.integers(0, 3), min_size=1, max_size=6),
)
def test_the_exact_p_value_given_ties_is_the_share_of_all_draws(
    dep_values: list[int], cal_values: list[int]
) -> None:
    """Tied scores: the p-value is the share of all ways of drawing as many scores as the
    deployed side has whose mid-rank sum reaches the deployed one (every draw listed)."""
    from itertools import combinations

    from scipy.stats import rankdata

    from dissensus.acceptance.shift import _p_value

    dep, cal = np.asarray(dep_values, float), np.asarray(cal_values, float)
    ranks = rankdata(np.r_[dep, cal])
    observed = ranks[: len(dep)].sum()
    draws = [ranks[list(c)].sum() for c in combinations(range(len(ranks)), len(dep))]
    share = float(np.mean([d >= observed - 1e-9 for d in draws]))
    _, p, method = _p_value(dep, cal)
    if len(set(dep_values) | set(cal_values)) > 1:
        assert method == "exact" and p == pytest.approx(share)


def test_signed_zeros_and_order_do_not_change_the_check() -> None:
    from dissensus.acceptance.shift import ShiftReference, shift_check_vectors

    rng = np.random.default_rng(8)
    ref = _reference(rng, 40)
    deployed = [{**v, "z": -0.0 if i % 2 else 0.0} for i, v in enumerate(_vectors(rng, 30))]
    first = shift_check_vectors(
        ShiftReference(features=[*ref.features, "z"], rows=[[*r, 0.0] for r in ref.rows]),
        deployed,
    )
    for order in range(5):
        shuffled = [deployed[i] for i in np.random.default_rng(order).permutation(30)]
        again = shift_check_vectors(
            ShiftReference(features=[*ref.features, "z"], rows=[[*r, -0.0] for r in ref.rows]),
            shuffled,
        )
        assert again == first


def test_malformed_vectors_are_not_tested_and_say_so() -> None:
    from dissensus.acceptance.shift import ShiftReference, shift_check_vectors
    from dissensus.pipeline.shift import check_vectors, shift_words

    ref = ShiftReference(features=["a"], rows=[[0.0]] * 20)
    broken: list[dict[str, Any]] = [{"a": None}] * 20
    got = shift_check_vectors(ref, broken)
    assert not got.shifted and got.p_value == 1.0 and got.reason.startswith("not tested")
    outcome = check_vectors(
        {"shift_reference": ref.model_dump()}, [{"a": math.nan}] * 20, alpha=0.1
    )
    assert outcome is not None and shift_words(outcome).startswith("Not checked: ")


def test_the_earlier_settings_are_accepted_ignored_and_warned_about() -> None:
    from dissensus.acceptance.shift import reference, shift_check

    rng = np.random.default_rng(5)
    ref, deployed = reference(_cases(rng, 40)), _cases(rng, 30)
    with pytest.warns(DeprecationWarning, match="permutations and folds"):
        old = shift_check(ref, deployed, permutations=19, folds=3)
    assert old == shift_check(ref, deployed)


def test_an_outcome_of_the_permutation_test_still_reads() -> None:
    from dissensus.acceptance.shift import ShiftCheck

    old = {
        "auc": 0.76,
        "p_value": 0.005,
        "shifted": True,
        "alpha": 0.1,
        "calibration_n": 326,
        "deployed_n": 80,
        "permutations": 200,
        "reason": "the deployed cases look different (AUC 0.76, p = 0.005)",
    }
    check = ShiftCheck.model_validate(old)
    assert check.permutations == 200 and check.shifted and check.tested_n == (0, 0)


_INDICES = st.sets(st.integers(min_value=1, max_value=10**6), max_size=200)


@given(runs=_INDICES, watch=_INDICES, alpha=st.floats(min_value=1e-6, max_value=0.99))
def test_the_levels_of_both_sequences_sum_to_at_most_alpha(
    runs: set[int], watch: set[int], alpha: float
) -> None:
    """Any checks of both kinds (each index at most once per sequence): their levels sum
    to at most the file's lifetime level, so by the union bound a file whose cases stay
    exchangeable is ever flagged with probability at most alpha."""
    from dissensus.acceptance.shift import check_level
    from dissensus.pipeline.shift import RUN_SHARE, WATCH_SHARE

    assert RUN_SHARE + WATCH_SHARE <= 1.0
    spent = math.fsum(
        [check_level(alpha, i, share=RUN_SHARE) for i in runs]
        + [check_level(alpha, i, share=WATCH_SHARE) for i in watch]
    )
    assert spent <= alpha
    assert math.fsum(check_level(alpha, i, share=RUN_SHARE) for i in runs) <= alpha * RUN_SHARE


def test_check_levels_are_numbered_from_one() -> None:
    from dissensus.acceptance.shift import check_level

    assert check_level(0.1, 1) == pytest.approx(0.05 * 6 / math.pi**2)
    assert check_level(0.1, 10) == pytest.approx(check_level(0.1, 1) / 100)
    with pytest.raises(ValueError):
        check_level(0.1, 0)


def test_the_acceptance_file_keeps_the_reference() -> None:
    from dissensus.acceptance import calibrate

    rng = np.random.default_rng(0)
    cases = _cases(rng, 50)
    acc = calibrate(cases, ["a"] * 50, target=0.8, delta=0.1, min_accepted=10, family="learned")
    assert acc.shift_reference is not None and len(acc.shift_reference.rows) == 50


def test_calibration_cases_of_one_vector_are_no_reference() -> None:
    """Judged cases whose shift vectors are all one row (here the guard family ranks them
    by a candidate the plurality row does not hold) are refused when a threshold would be
    set, as a file whose reference is copies of one row is refused when read."""
    from dissensus.acceptance import calibrate
    from dissensus.errors import InputError

    rng = np.random.default_rng(0)
    cases, golds = [], []
    for _ in range(200):
        g = float(rng.uniform(0.5, 1.0))
        cases.append(
            [
                Candidate(label="a", features={"cand.share": 0.6, "cand.guard_posterior": 0.5}),
                Candidate(label="b", features={"cand.share": 0.4, "cand.guard_posterior": g}),
            ]
        )
        golds.append("b" if rng.uniform() < g else "a")
    with pytest.raises(InputError, match="one and the same feature vector"):
        calibrate(cases, golds, target=0.6, delta=0.1, min_accepted=10, family="guard")
