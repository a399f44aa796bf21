"""Score families: the choice keeps the guarantee, a file decides with the family it names."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.acceptance import Candidate


def _case(share: float, stable: float, right_label: str = "a") -> list[Candidate]:
    return [
        Candidate(
            label="a",
            features={"score.votes": share, "score.votes_both": share, "cand.stable_share": stable},
        ),
        Candidate(
            label="b",
            features={
                "score.votes": 1 - share,
                "score.votes_both": 1 - share,
                "cand.stable_share": 0.0,
            },
        ),
    ]


def test_family_score_takes_the_best_candidate_first_on_ties() -> None:
    from dissensus.acceptance.families import family_score

    assert family_score("votes", _case(0.7, 0.0)) == ("a", 0.7)
    assert family_score("votes", _case(0.2, 0.0)) == ("b", 0.8)
    assert family_score("votes", _case(0.5, 0.0)) == ("a", 0.5)
    assert family_score("votes", []) == (None, 0.0)


def test_bonferroni_runs_each_competitor_at_delta_over_f_and_picks_the_most_accepted() -> None:
    from dissensus.acceptance.bound import DEFAULT_SEQUENCE
    from dissensus.acceptance.families import select_family

    rng = np.random.default_rng(1)
    n = 400
    right = rng.uniform(0, 1, n) < 0.85
    # "votes" ranks the right answers high; "order_stable" is noise; "guard" is constant.
    scores: dict[str, list[tuple[str | None, float]]] = {
        "votes": [("g", float(0.5 + 0.5 * r * rng.uniform(0.5, 1))) for r in right],
        "order_stable": [("g", float(rng.uniform(0, 1))) for _ in right],
        "guard": [("g", 0.3)] * n,
    }
    golds = ["g" if r else "x" for r in right]
    chosen, choice, figures = select_family(
        scores, golds, target=0.9, delta=0.1, min_accepted=30, grid=DEFAULT_SEQUENCE,
        compete=["votes", "order_stable", "guard"],
    )  # fmt: skip
    by = {f.family: f for f in figures}
    assert chosen == "votes" and choice.accepted == by["votes"].accepted > 0
    assert not by["guard"].eligible
    assert by["votes"].delta == by["order_stable"].delta == 0.05  # two eligible, equal shares
    assert by["votes"].accepted >= by["order_stable"].accepted


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(60, 400),
    rule=st.sampled_from(["bonferroni", "split"]),
)
def test_the_chosen_threshold_passes_the_bound_at_its_level(seed: int, n: int, rule: str) -> None:
    from dissensus.acceptance import clopper_pearson_upper
    from dissensus.acceptance.bound import DEFAULT_SEQUENCE
    from dissensus.acceptance.families import select_family

    rng = np.random.default_rng(seed)
    right = rng.uniform(0, 1, n) < rng.uniform(0.6, 1.0)
    scores: dict[str, list[tuple[str | None, float]]] = {
        f: [("g", float(np.clip(r * w + rng.normal(0, 0.3), 0, 1))) for r in right]
        for f, w in (("learned", 0.5), ("votes_both", 0.2), ("guard", 0.0))
    }
    golds = ["g" if r else "x" for r in right]
    chosen, choice, figures = select_family(
        scores, golds, target=0.8, delta=0.1, min_accepted=20, grid=DEFAULT_SEQUENCE,
        rule=rule,  # type: ignore[arg-type]
        compete=["learned", "votes_both", "guard"],
    )  # fmt: skip
    if choice.threshold is None:
        return
    level = 0.1 if rule == "split" else next(f.delta for f in figures if f.family == chosen)
    assert level <= 0.1
    wrong = choice.accepted - choice.correct
    assert clopper_pearson_upper(wrong, choice.accepted, level) <= 0.2 + 1e-12


def test_a_file_decides_with_the_family_it_names() -> None:
    from dissensus.acceptance import apply_acceptance, calibrate

    rng = np.random.default_rng(0)
    shares = rng.uniform(0.3, 1.0, 200)
    cases = [_case(float(s), float(s)) for s in shares]
    golds = ["a" if rng.uniform() < s else "b" for s in shares]
    acc = calibrate(cases, golds, target=0.8, delta=0.1, min_accepted=20, family="votes")
    assert acc.family == "votes" and acc.family_rule == "given"
    assert [f.family for f in acc.families if f.competing] == ["votes"]
    verdict = apply_acceptance(acc, _case(0.95, 0.0))
    assert verdict.family == "votes" and verdict.score == 0.95 and verdict.decision == "a"
    both = calibrate(cases, golds, target=0.8, delta=0.1, min_accepted=20)
    assert both.family in ("learned", "votes_both") and both.family_rule == "bonferroni"
    levels = {f.family: f.delta for f in both.families if f.competing}
    assert levels == pytest.approx({"learned": 0.09, "votes_both": 0.01})


def test_c_is_chosen_from_the_grid_by_grouped_cross_validation() -> None:
    from dissensus.acceptance.fit import C_GRID, choose_c

    rng = np.random.default_rng(0)
    owner = np.repeat(np.arange(100), 2)
    z = rng.normal(size=(200, 40))
    y = (z[:, 0] + rng.normal(0, 2, 200) > 0).astype(int)
    c = choose_c(z, y, owner)
    assert c in C_GRID and c == choose_c(z, y, owner)
    assert choose_c(z[:20], y[:20], owner[:20]) == 1.0  # too few cases: no inner CV
