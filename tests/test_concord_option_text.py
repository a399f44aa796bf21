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
