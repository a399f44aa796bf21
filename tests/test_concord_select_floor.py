"""CONCORD's selection reads the floor as certification does (unrounded, a fault never
clearing it): an opening candidate every agent really scored at or above the floor is
never passed over, under maximin (a tie of two worst-off scores that both round to the
floor) or utilitarian (a faulted score, or one just below the floor, read as clearing
it), for a candidate the run can never certify on."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.baselines.compare import exact_scores
from dissensus.concord import TableAgent, negotiate_sync, verify
from dissensus.concord.agent import Outcome

R0 = Outcome(id="R0", text="no")
I0 = Outcome(id="I0", text="yes")
OPTIONS = [Outcome(id=f"O{i}", text=f"plan {i}") for i in range(4)]

# raw scores on a 0..10 scale, with values just below and at 7 (a floor of 0.7)
RAW = st.one_of(
    st.sampled_from([7.0, 6.9999999999996, 6.99999999999999, 7.0000000000004, 10.0, 0.0]),
    st.floats(0, 10, allow_nan=False),
    st.none(),  # no entry: a faulted score of that option
)


def _run(tables: list[dict[str, float]], floor: float, rule: str):  # type: ignore[no-untyped-def]
    agents = [TableAgent(f"a{i}", {"R0": 0, "I0": 10} | t) for i, t in enumerate(tables)]
    return negotiate_sync(
        agents, rejected=R0, ideal=I0, floor=floor, rounds=2, rule=rule, options=OPTIONS
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(RAW, min_size=4, max_size=4), min_size=1, max_size=4),
    st.sampled_from([0.0, 0.7]),
    st.sampled_from(["maximin", "utilitarian"]),
)
def test_a_certifiable_opening_candidate_is_selected_at_once(
    rows: list[list[float | None]], floor: float, rule: str
) -> None:
    tables = [{f"O{j}": v for j, v in enumerate(row) if v is not None} for row in rows]
    cert = _run(tables, floor, rule)
    assert verify(cert.model_dump(mode="json")).valid
    exact = exact_scores(cert)
    clearing = [
        c.id
        for c in cert.candidates
        if c.round == 1
        and len(c.scores) == len(cert.covered)
        and all(v is not None and v >= floor for v in exact[c.id].values())
    ]
    if clearing:
        assert cert.status == "certified" and len(cert.trajectory) == 1, (clearing, cert.selected)


def test_a_rounding_tie_goes_to_the_candidate_that_clears_the_floor() -> None:
    tables = [{"O0": 10, "O1": 7.0}, {"O0": 6.9999999999996, "O1": 9}]
    cert = _run(tables, 0.7, "maximin")
    assert cert.status == "certified" and cert.selected is not None
    assert cert.selected.id == "O1"
    assert "O1, the earliest tabled candidate that clears the floor" in cert.trajectory[0].ties[0]


def test_utilitarian_never_ranks_a_faulted_score_as_clearing_a_floor_of_0() -> None:
    tables = [{"O0": 10, "O1": 3}, {"O1": 4}]  # a1 has no score for O0: a fault
    cert = _run(tables, 0.0, "utilitarian")
    assert cert.status == "certified" and cert.selected is not None
    assert cert.selected.id == "O1" and cert.spent.stopped == "floor_cleared"
