"""A proposal without an id whose text is exactly a pool option's is that option, tabled
under its id or merged into it, whichever agent is listed first: the record holds one
candidate per plan, table agents score it by its id, and the run verifies."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.concord import TableAgent, negotiate_sync, verify
from dissensus.concord.agent import NegotiationView, Outcome
from dissensus.concord.function import FunctionAgent

R0 = Outcome(id="R0", text="no")
I0 = Outcome(id="I0", text="yes")
OPTIONS = [
    Outcome(id="A", text="fail over to the standby region"),
    Outcome(id="B", text="restore from backup"),
    Outcome(id="C", text="scale the primary up"),
]
RAW = {"no": 0.0, "yes": 10.0} | {o.text: 4.0 + 2 * i for i, o in enumerate(OPTIONS)}


def _writer(agent_id: str, text: str) -> FunctionAgent:
    def score(outcome: Outcome, view: NegotiationView) -> float:
        return RAW.get(outcome.text, 5.0)

    return FunctionAgent(agent_id, score, propose=lambda view: text)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from([o.text for o in OPTIONS] + ["a plan of its own"]), min_size=1, max_size=3
    ),
    st.lists(st.sampled_from(["A", "B", "C"]), min_size=1, max_size=3),
    st.randoms(use_true_random=False),
)
def test_one_candidate_per_plan_whoever_speaks_first(
    written: list[str], favourites: list[str], rnd: object
) -> None:
    writers = [_writer(f"w{i}", text) for i, text in enumerate(written)]
    tables = [
        TableAgent(
            f"t{i}", {"R0": 0, "I0": 10} | {o.id: (9 if o.id == fav else 3) for o in OPTIONS}
        )  # type: ignore[misc]
        for i, fav in enumerate(favourites)
    ]
    agents = writers + tables
    rnd.shuffle(agents)  # type: ignore[attr-defined]
    cert = negotiate_sync(agents, rejected=R0, ideal=I0, floor=0.9, rounds=0, options=OPTIONS)
    assert verify(cert.model_dump(mode="json")).valid
    opening = [c for c in cert.candidates if c.round == 1]
    texts = [c.text for c in opening]
    assert (
        len(texts)
        == len(set(texts))
        == len(set(written) | {o.text for o in OPTIONS if o.id in favourites})
    )
    by_text = {o.text: o.id for o in OPTIONS}
    for cand in opening:
        if cand.text in by_text:
            assert cand.id == by_text[cand.text]
            assert all(e.fault is None for e in cand.scores.values())


def test_the_writer_listed_first_tables_the_option_under_its_id() -> None:
    writer = _writer("f", OPTIONS[0].text)
    table = TableAgent("t", {"R0": 0, "I0": 10, "A": 9, "B": 3, "C": 1})
    cert = negotiate_sync(
        [writer, table], rejected=R0, ideal=I0, floor=0.4, rounds=0, options=OPTIONS
    )
    assert [(c.id, c.author) for c in cert.candidates] == [("A", "f")]
    assert cert.trajectory[0].notes == [
        "f's proposal is the text of option A; tabled as A",
        "t proposed A, already tabled by f; merged",
    ]
    assert cert.status == "certified" and cert.spent.evaluations == 2
    assert not cert.trajectory[0].faults


def _renamer() -> list[FunctionAgent]:
    """``a`` proposes option ``1``; ``b``, the bottleneck, repairs by proposing the
    leader's text under a new id each round (``again2``, ``again3``, ...)."""
    fixed = {R0.text: 0.0, I0.text: 10.0}

    def sa(o: Outcome, v: NegotiationView) -> float:
        return fixed.get(o.text, 8.0 if o.text == "Paris" else 2.0)

    def sb(o: Outcome, v: NegotiationView) -> float:
        return fixed.get(o.text, 3.0 if o.text == "Paris" else 6.0)

    def rename(view: NegotiationView) -> dict[str, str]:
        leader = next(c for c in view.candidates if c.id == view.leader)
        return {"id": f"again{view.round}", "text": leader.text}

    return [
        FunctionAgent("a", sa, propose=lambda v: {"id": "1", "text": "Paris"}),
        FunctionAgent("b", sb, propose=lambda v: None, repair=rename),
    ]


def test_a_pool_options_text_under_a_new_id_is_merged_not_scored_again() -> None:
    """A pool option's text re-proposed under an id of no pool option (``again2`` for
    option ``1``, ``Paris``) was tabled and scored again every round (four candidates of
    one text); it is merged into the candidate of that text, and the run verifies."""
    pool = [Outcome(id="1", text="Paris")]
    cert = negotiate_sync(_renamer(), rejected=R0, ideal=I0, floor=0.5, rounds=3, options=pool)
    assert [(c.id, c.text) for c in cert.candidates] == [("1", "Paris")]
    assert cert.spent.evaluations == 2
    merged = [n for s in cert.trajectory for n in s.notes if n.endswith("; merged")]
    assert merged and all(n == "b proposed 1, already tabled by a; merged" for n in merged)
    assert verify(cert.model_dump(mode="json")).valid


def test_two_pool_options_of_one_text_stay_two_candidates_by_their_ids() -> None:
    """Options ``1`` and ``2`` both ``Paris``: each proposed under its own id is tabled,
    two decisions, never merged into each other by their text."""
    pool = [Outcome(id="1", text="Paris"), Outcome(id="2", text="Paris")]

    def score(o: Outcome, v: NegotiationView) -> float:
        return {R0.text: 0.0, I0.text: 10.0}.get(o.text, 5.0)

    agents = [
        FunctionAgent("a", score, propose=lambda v: {"id": "1", "text": "Paris"}),
        FunctionAgent("b", score, propose=lambda v: {"id": "2", "text": "Paris"}),
    ]
    cert = negotiate_sync(agents, rejected=R0, ideal=I0, floor=0.2, rounds=1, options=pool)
    assert [(c.id, c.text) for c in cert.candidates] == [("1", "Paris"), ("2", "Paris")]
    assert verify(cert.model_dump(mode="json")).valid
