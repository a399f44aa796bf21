"""Array API: hand-checked fixtures, properties, and the cross-check against crowd-kit."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dissensus.guard.arrays import (
    agreement_fraction,
    consensus_weighted_vote,
    encode_labels,
    log_odds_weights,
    majority_vote,
    n_eff_per_case,
    pairwise_error_correlation,
    reliability_posterior,
    wawa,
)


def test_majority_hand_checked() -> None:
    labels, classes = encode_labels([["b", "a", "b"], ["a", "b", None], ["c", "c", "a"]])
    answers, probs = majority_vote(labels, len(classes))
    assert [classes[a] for a in answers] == ["b", "a", "c"]  # tie a/b -> smallest label
    assert probs[0].tolist() == pytest.approx([1 / 3, 2 / 3, 0])
    assert probs[1].tolist() == pytest.approx([0.5, 0.5, 0])


def test_agreement_and_consensus_hand_checked() -> None:
    labels = np.array([[0, 0, 1, -1]])
    agree = agreement_fraction(labels, 2)
    assert agree.tolist() == [[0.5, 0.5, 0.0, 0.0]]
    answers, probs = consensus_weighted_vote(labels, 2, beta=2.0)
    w = math.exp(1.0)
    assert answers.tolist() == [0]
    assert probs[0, 0] == pytest.approx(2 * w / (2 * w + 1))
    # With a mask only the masked votes earn agreement.
    masked = agreement_fraction(labels, 2, mask=np.array([[True, False, True, True]]))
    assert masked.tolist() == [[0.0, 0.0, 0.0, 0.0]]


def test_n_eff_formula() -> None:
    rho = np.full((4, 4), 0.5)
    np.fill_diagonal(rho, 1.0)
    present = np.array([[True] * 4, [True, True, False, False], [True, False, False, False]])
    assert n_eff_per_case(present, rho).tolist() == pytest.approx([4 / (1 + 3 * 0.5), 2 / 1.5, 1.0])
    clones = np.ones((3, 3))
    assert n_eff_per_case(np.ones((1, 3), dtype=bool), clones)[0] == pytest.approx(1.0)


def test_error_correlation_and_posterior() -> None:
    e = np.array(
        [[1, 1, 0], [0, 0, 1], [1, 1, 1], [0, 0, 0], [1, 1, 0], [0, 0, np.nan]], dtype=float
    )
    rho = pairwise_error_correlation(e, min_overlap=3)
    assert rho[0, 1] == pytest.approx(1.0)
    assert np.isnan(pairwise_error_correlation(e, min_overlap=10)[0, 1])
    w = log_odds_weights(np.array([0.9, 0.5, 0.2]), 2)
    assert w[0] == pytest.approx(math.log(9)) and w[1] == 0 and w[2] == 0
    post = reliability_posterior(np.array([[0, 1, 1]]), 2, w, shrink=0.5)
    assert post[0, 0] == pytest.approx(1 / (1 + math.exp(-0.5 * math.log(9))))


label_matrices = arrays(
    np.int64, st.tuples(st.integers(1, 12), st.integers(1, 6)), elements=st.integers(-1, 3)
)


@given(label_matrices, st.floats(0.0, 6.0))
def test_shares_are_distributions_and_weighting_keeps_plurality(
    labels: np.ndarray, beta: float
) -> None:
    mv, mp = majority_vote(labels, 4)
    cw, cp = consensus_weighted_vote(labels, 4, beta)
    voted = (labels >= 0).any(axis=1)
    assert np.allclose(mp[voted].sum(axis=1), 1.0) and np.allclose(cp[voted].sum(axis=1), 1.0)
    assert (mv[~voted] == -1).all()
    # Per-case agreement weighting never changes the plurality winner's vote count rank.
    counts = np.array([[np.sum(row == k) for k in range(4)] for row in labels])
    for i in np.flatnonzero(voted):
        assert counts[i, cw[i]] == counts[i].max()


@given(
    label_matrices,
    st.one_of(st.floats(0.0, 1e308), st.sampled_from([710.0, 1e3, 1e6, 1e308])),
    st.booleans(),
)
def test_large_beta_is_finite_and_the_limit_of_consensus_weighting(
    labels: np.ndarray, beta: float, masked: bool
) -> None:
    """``exp(beta * agreement)`` overflowed past beta ~710 (NaN shares, RuntimeWarnings);
    the weights are now taken relative to each case's most agreeing voter."""
    import warnings

    mask = (np.arange(labels.shape[1]) % 2 == 0)[None, :].repeat(labels.shape[0], 0)
    use_mask = mask if masked else None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        answers, shares = consensus_weighted_vote(labels, 4, beta, use_mask)
    voted = (labels >= 0).any(axis=1)
    assert np.isfinite(shares).all()
    assert np.allclose(shares[voted].sum(axis=1), 1.0)
    assert ((answers >= 0) == voted).all()
    frac = agreement_fraction(labels, 4, use_mask)
    for i in np.flatnonzero(voted):
        present = labels[i] >= 0
        top = frac[i][present].max()
        rel = np.array([math.exp(beta * (f - top)) for f in frac[i]])  # the exact weights
        expect = np.array([rel[present & (labels[i] == k)].sum() for k in range(4)])
        assert shares[i] == pytest.approx(expect / expect.sum(), abs=1e-12)
        if beta <= 50:  # where the direct form does not overflow, it is the same
            direct = np.array([math.exp(beta * f) for f in frac[i]])
            naive = np.array([direct[present & (labels[i] == k)].sum() for k in range(4)])
            assert shares[i] == pytest.approx(naive / naive.sum(), rel=1e-9, abs=1e-12)


def test_consensus_weighted_vote_at_beta_1000_hand_checked() -> None:
    # agreement 1/3, 1/3, 0, 0: the two agreeing voters weigh 1, the others e^-333.
    answers, shares = consensus_weighted_vote(np.array([[0, 0, 1, 2]]), 3, 1000.0)
    assert answers.tolist() == [0]
    tail = math.exp(-1000.0 / 3)
    assert shares[0].tolist() == pytest.approx([1.0, tail / 2, tail / 2], rel=1e-9, abs=0)


def _frame(labels: np.ndarray) -> Any:
    pd = pytest.importorskip("pandas")
    rows = [
        (f"t{i:05d}", f"w{j}", int(labels[i, j]))
        for i in range(labels.shape[0])
        for j in range(labels.shape[1])
        if labels[i, j] >= 0
    ]
    return pd.DataFrame(rows, columns=["task", "worker", "label"])


def _random_labels(seed: int, cases: int = 400, voters: int = 5, classes: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, classes, cases)
    skill = rng.uniform(0.4, 0.9, voters)
    right = rng.random((cases, voters)) < skill
    noise = rng.integers(0, classes, (cases, voters))
    labels = np.where(right, truth[:, None], noise)
    labels[rng.random((cases, voters)) < 0.1] = -1
    labels[labels[:, :2].sum(axis=1) < -1, 0] = truth[labels[:, :2].sum(axis=1) < -1]
    return labels.astype(np.int64)


CROWDKIT_NOISE = pytest.mark.filterwarnings("ignore:The inplace keyword")


@CROWDKIT_NOISE
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_majority_equals_crowdkit(seed: int) -> None:
    crowdkit = pytest.importorskip("crowdkit.aggregation")
    labels = _random_labels(seed)
    df = _frame(labels)
    theirs = crowdkit.MajorityVote().fit(df)
    # crowd-kit breaks ties by its score table's column order: pass the same order.
    answers, probs = majority_vote(labels, 3, tie_order=[int(c) for c in theirs.probas_.columns])
    tasks = sorted(df["task"].unique())
    voted = np.flatnonzero((labels >= 0).any(axis=1))
    assert [f"t{i:05d}" for i in voted] == tasks
    assert answers[voted].tolist() == theirs.labels_.loc[tasks].astype(int).tolist()
    ref = theirs.probas_.reindex(columns=range(3), fill_value=0.0).loc[tasks].to_numpy()
    assert np.allclose(probs[voted], ref)


@CROWDKIT_NOISE
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_agreement_weighted_equals_crowdkit_wawa(seed: int) -> None:
    crowdkit = pytest.importorskip("crowdkit.aggregation")
    labels = _random_labels(seed)
    df = _frame(labels)
    theirs = crowdkit.Wawa().fit(df)
    # Wawa.predict is MajorityVote with the fitted skills (its sklearn fit check breaks
    # with recent scikit-learn, so the same step is called directly).
    applied = crowdkit.MajorityVote().fit(df, skills=theirs.skills_)
    tasks = sorted(df["task"].unique())
    their_labels = applied.labels_.loc[tasks].astype(int).to_numpy()
    their_probas = applied.probas_.reindex(columns=range(3), fill_value=0.0).loc[tasks].to_numpy()
    first = crowdkit.MajorityVote().fit(df)
    answers, probs, skills = wawa(labels, 3, tie_order=[int(c) for c in first.probas_.columns])
    voted = np.flatnonzero((labels >= 0).any(axis=1))
    assert np.allclose(
        skills, theirs.skills_.loc[[f"w{j}" for j in range(labels.shape[1])]].to_numpy()
    )
    assert np.allclose(probs[voted], their_probas)
    # Labels agree everywhere except on exact float ties summed in another order.
    top = np.sort(their_probas, axis=1)
    clear = ~np.isclose(top[:, -1], top[:, -2])
    assert (answers[voted][clear] == their_labels[clear]).all()
    assert clear.mean() > 0.9


def test_a_label_outside_the_classes_or_a_class_twice_is_named() -> None:
    """encode_labels raised a bare KeyError for an answer missing from ``classes`` and
    gave a class listed twice its later index; a float label matrix was a numpy casting
    TypeError. Each is now an error naming the value."""
    from dissensus.errors import ConfigError, InputError

    with pytest.raises(InputError, match=r"rows\[1\]\[0\]: answer 'c' is not one of") as err:
        encode_labels([["a", "b"], ["c", None]], classes=["a", "b"])
    assert err.value.field == "rows.1.0"
    with pytest.raises(ConfigError, match="classes lists 'a' twice"):
        encode_labels([["a", "b"]], classes=["a", "b", "a"])
    for bad in (np.array([[0.0, 1.0]]), np.array([[True, False]])):
        with pytest.raises(InputError, match="integer array"):
            majority_vote(bad, 2)
    # Unsigned and narrower integer matrices are label matrices too.
    answers, _ = majority_vote(np.array([[1, 1, 0]], dtype=np.uint8), 2)
    assert answers.tolist() == [1]
