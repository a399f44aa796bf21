"""A proposal under a pool option's id is that option or renamed, never another plan
scored as the option.

Table agents score by id: ``{"id": "A", "text": "plan d"}`` from a function agent was
tabled as ``A`` and scored with every table agent's score of option A ("plan a"), so a
plan nobody scored could be certified, and option A itself, proposed next, was renamed
``C2`` and could not be scored by the table agents at all.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from concord_helpers import IDEAL, REJECTED
from dissensus.concord import TableAgent, negotiate_sync, verify
from dissensus.concord.agent import NegotiationView, Outcome
from dissensus.concord.controls import plan_text, same_name

OPTIONS = [Outcome(id="A", text="plan a"), Outcome(id="B", text="plan b")]


class _Proposer(TableAgent):
    """A table agent whose opening proposal is ``proposal``; it never repairs."""

    def __init__(self, agent_id: str, scores: dict[str, float], proposal: Outcome) -> None:
        super().__init__(agent_id, scores)
        self._proposal = proposal

    async def propose(self, view: NegotiationView) -> Outcome | None:
        return self._proposal

    async def repair(self, view: NegotiationView) -> Outcome | None:
        return None


def _run(proposal: Outcome) -> list[tuple[str, str]]:
    agents = [
        _Proposer("f", {"R0": 0, "I0": 10, "A": 9, "B": 1}, proposal),
        TableAgent("t", {"R0": 0, "I0": 10, "A": 9, "B": 1}),
    ]
    cert = negotiate_sync(
        agents, rejected=REJECTED, ideal=IDEAL, floor=0.7, rounds=2, options=OPTIONS
    )
    assert verify(cert.model_dump(mode="json")).valid
    pool = {o.id: o.text for o in OPTIONS}
    for cand in cert.candidates:
        # a candidate under a pool option's id is that option's plan
        assert pool.get(cand.id, cand.text) == cand.text, cand
    if cert.status == "certified":
        assert cert.selected is not None and cert.selected.text == "plan a"
    return [(c.id, c.text) for c in cert.candidates]


def test_another_plan_under_a_pool_options_id_is_renamed() -> None:
    for forged in ("A", "\uff21", "A\u200b"):  # the id, fullwidth, with a zero-width space
        assert _run(Outcome(id=forged, text="plan d")) == [("C1", "plan d"), ("A", "plan a")]


def test_the_options_text_under_its_id_is_the_option() -> None:
    assert _run(Outcome(id="A", text="  plan a\n")) == [("A", "plan a")]
    assert _run(Outcome(id="\uff21", text="plan a")) == [("A", "plan a")]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["A", "\uff21", "B", "C1", "x", "y", ""]),
            st.sampled_from(["plan a", "plan b", "plan d", " plan a ", "plan a\n"]),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_whatever_ids_are_proposed_no_two_candidates_read_alike(
    plans: list[tuple[str, str]],
) -> None:
    agents = [
        _Proposer(f"f{k}", {"R0": 0, "I0": 10, "A": 9, "B": 1}, Outcome(id=i or None, text=t))
        for k, (i, t) in enumerate(plans)
    ]
    cert = negotiate_sync(
        agents, rejected=REJECTED, ideal=IDEAL, floor=0.7, rounds=1, options=OPTIONS
    )
    assert verify(cert.model_dump(mode="json")).valid
    names = [same_name(c.id) for c in cert.candidates]
    assert len(set(names)) == len(names), names
    pool = {o.id: o.text for o in OPTIONS}
    by_text = {plan_text(text): oid for oid, text in pool.items()}
    for cand in cert.candidates:
        assert plan_text(pool.get(cand.id, cand.text)) == plan_text(cand.text), cand
        # a pool option's text is tabled as that option, which table agents can score
        assert by_text.get(plan_text(cand.text), cand.id) == cand.id, cand
    # (so no table agent faults on one: only a new plan has no score in the table)
    unscored = {f.message for s in cert.trajectory for f in s.faults if "no score" in f.message}
    plans_ = [c.id for c in cert.candidates if plan_text(c.text) in by_text]
    assert not [c for c in plans_ if f"no score in the table for outcome {c!r}" in unscored]


def _tabled(*proposals: Outcome) -> list[tuple[str, str]]:
    agents = [
        _Proposer(f"f{k}", {"R0": 0, "I0": 10, "A": 9, "B": 1}, p) for k, p in enumerate(proposals)
    ]
    cert = negotiate_sync(
        agents, rejected=REJECTED, ideal=IDEAL, floor=0.7, rounds=0, options=OPTIONS
    )
    assert verify(cert.model_dump(mode="json")).valid
    return [(c.id, c.text) for c in cert.candidates]


def test_a_pool_options_text_is_one_plan_whatever_its_outer_white_space() -> None:
    # without an id: the option, under its own text
    assert _tabled(Outcome(text=" plan a\n")) == [("A", "plan a")]
    # under ids of no option: the option, and the second merged into it
    assert _tabled(Outcome(id="x", text="plan a\n"), Outcome(id="y", text="plan a")) == [
        ("A", "plan a")
    ]
    # under another option's id: merged into the candidate of its text, not renamed
    assert _tabled(Outcome(id="A", text="plan a"), Outcome(id="B", text="plan a")) == [
        ("A", "plan a")
    ]


def test_an_options_text_under_a_foreign_id_before_the_option_is_the_option() -> None:
    """The text of option A under option B's id or an id of its own, before A is tabled,
    is A (noted as a proposal without an id is), not a candidate no table agent can
    score with A tabled again after it."""
    for forged in ("B", "y", "C1"):
        for text in ("plan a", "plan a\n"):
            proposal = Outcome(id=forged, text=text)
            assert _run(proposal) == [("A", "plan a")], (forged, text)
            agents = [
                _Proposer("f", {"R0": 0, "I0": 10, "A": 9, "B": 1}, proposal),
                _Proposer("g", {"R0": 0, "I0": 10, "A": 9, "B": 1}, OPTIONS[0]),
            ]
            cert = negotiate_sync(
                agents, rejected=REJECTED, ideal=IDEAL, floor=0.7, rounds=0, options=OPTIONS
            )
            assert verify(cert.model_dump(mode="json")).valid
            assert [(c.id, c.author) for c in cert.candidates] == [("A", "f")]
            notes = cert.trajectory[0].notes
            assert "f's proposal is the text of option A; tabled as A" in notes
            assert "g proposed A, already tabled by f; merged" in notes
            assert not cert.trajectory[0].faults
