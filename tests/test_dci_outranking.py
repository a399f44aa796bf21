"""The stage-7 fallback cascade against hand-computed examples, plus its properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.dci.outranking import cascade, concordance, discordance, minimax_regret, satisficing
from dissensus.dci.selection import compress, convergence

# A beats B on p1, p2, p4 (C = 0.75) and loses by at most 0.35 on p3 (D = 0.35 <= 0.4).
OUTRANK = {
    "p1": {"A": 0.8, "B": 0.6, "C": 0.4},
    "p2": {"A": 0.75, "B": 0.65, "C": 0.5},
    "p3": {"A": 0.45, "B": 0.8, "C": 0.5},
    "p4": {"A": 0.7, "B": 0.6, "C": 0.45},
}


def test_concordance_and_discordance_by_hand() -> None:
    assert concordance("A", "B", OUTRANK) == pytest.approx(0.75)
    assert concordance("B", "A", OUTRANK) == pytest.approx(0.25)
    assert discordance("A", "B", OUTRANK) == pytest.approx(0.35)
    assert discordance("B", "C", OUTRANK) == pytest.approx(0.0)
    assert concordance("A", "B", OUTRANK, weights={"p3": 3.0, "p1": 1.0}) == pytest.approx(0.25)


def test_outranking_decides_when_one_option_is_unbeaten() -> None:
    r = cascade(["A", "B", "C"], OUTRANK)
    assert (r.selected, r.rule) == ("A", "outranking")
    assert r.steps[0].candidates_out == ["A"]
    assert r.steps[0].detail == {"A": 2.0, "B": 0.0, "C": -2.0}


def test_minimax_regret_breaks_an_outranking_deadlock() -> None:
    # Nobody outranks anybody (concordance 0.5 everywhere); C's worst regret is 0.4, A's and B's 1.0.
    scores = {"p1": {"A": 1.0, "B": 0.0, "C": 0.6}, "p2": {"A": 0.0, "B": 1.0, "C": 0.6}}
    r = cascade(["A", "B", "C"], scores)
    assert (r.selected, r.rule) == ("C", "minimax")
    assert r.steps[1].detail == pytest.approx({"A": 1.0, "B": 1.0, "C": 0.4})


def test_satisficing_separates_a_minimax_tie() -> None:
    # Regret 0.45 for both; only A scores >= 0.5 for everybody.
    scores = {"p1": {"A": 0.9, "B": 0.45}, "p2": {"A": 0.55, "B": 1.0}, "p3": {"A": 0.9, "B": 0.45}}
    r = cascade(["A", "B"], scores)
    assert (r.selected, r.rule) == ("A", "satisficing")
    assert [s.rule for s in r.steps] == ["outranking", "minimax", "satisficing"]


def test_fixed_tie_break_is_canonical_order() -> None:
    scores = {"p1": {"A": 0.8, "B": 0.3}, "p2": {"A": 0.3, "B": 0.8}}
    assert (cascade(["A", "B"], scores).selected, cascade(["A", "B"], scores).rule) == (
        "A",
        "tie_break",
    )
    assert cascade(["B", "A"], scores).selected == "B"


def test_no_scores_falls_through_to_the_tie_break_and_incomplete_rows_are_reported() -> None:
    r = cascade(["o2", "o1"], {"p": {"o1": 0.9}})
    assert (r.selected, r.rule) == ("o2", "tie_break")
    assert r.excluded_participants == ["p"]
    assert cascade([], {}).selected is None


def test_helpers_by_hand() -> None:
    rows = {"p": {"A": 0.2, "B": 0.6}, "q": {"A": 0.9, "B": 0.6}}
    assert minimax_regret(["A", "B"], ["A", "B"], rows) == (
        ["B"],
        pytest.approx({"A": 0.4, "B": 0.3}),
    )
    assert satisficing(["A", "B"], rows, 0.5)[0] == ["B"]
    assert compress(["A", "B"], rows, 1) == ["B"]


def test_convergence_needs_margin_and_no_blocking_objection() -> None:
    rows = {"p": {"A": 0.9, "B": 0.5}, "q": {"A": 0.8, "B": 0.6}}
    assert convergence(["A", "B"], rows, {}, 0.15).converged
    assert convergence(["A", "B"], rows, {}, 0.31).converged is False
    blocked = convergence(["A", "B"], rows, {"A": ["t1"]}, 0.15)
    assert blocked.converged is False and blocked.blocking_tensions == ["t1"]


matrices = st.integers(min_value=1, max_value=5).flatmap(
    lambda n_opts: st.dictionaries(
        st.sampled_from(["p1", "p2", "p3", "p4", "p5"]),
        st.fixed_dictionaries({f"o{i}": st.floats(0.0, 1.0) for i in range(1, n_opts + 1)}),
        min_size=0,
        max_size=5,
    ).map(lambda m, n=n_opts: ([f"o{i}" for i in range(1, n + 1)], m))
)


@given(matrices)
def test_cascade_is_deterministic_and_order_of_participants_does_not_matter(
    case: tuple[list[str], dict[str, dict[str, float]]],
) -> None:
    options, scores = case
    first = cascade(options, scores)
    assert first == cascade(options, scores)
    reversed_rows = dict(reversed(list(scores.items())))
    assert cascade(options, reversed_rows).selected == first.selected
    assert first.selected in options
    assert first.steps[-1].candidates_out == [first.selected]


@given(matrices)
def test_a_strictly_dominant_option_wins_by_outranking(
    case: tuple[list[str], dict[str, dict[str, float]]],
) -> None:
    options, scores = case
    if not scores:
        return
    boosted = {p: {**row, options[-1]: 1.0} for p, row in scores.items()}
    boosted = {
        p: {o: (v if o == options[-1] else min(v, 0.99)) for o, v in row.items()}
        for p, row in boosted.items()
    }
    r = cascade(options, boosted)
    assert r.selected == options[-1]
    assert len(options) == 1 or r.rule == "outranking"
