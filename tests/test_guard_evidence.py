"""Which voters had evidence: one definition for the whole guard (docs/guard.md).

A parametric source (a model's own memory) is no evidence, even marked
``evidence_present``: such a voter counts as a voter without evidence for invariant 1,
for the fallback agreement of invariant 2, for consensus weight, for the evidence
stratum of its reliability and for the strata of the reliability fit.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dissensus.guard import (
    GuardThresholds,
    ReliabilityFit,
    fit_reliability,
    guard_votes,
    panel_votes,
)
from dissensus.guard.provenance import (
    canonical_source,
    fallback_agreement,
    has_evidence,
    independent_sources,
    is_parametric,
    share_cause,
)
from dissensus.pipeline import decide, policy_from_dict
from dissensus.types import Vote, VoteCase
from pipeline_cases import as_panel, panel

ANSWERS = ["a", "b", "c"]
SOURCES = ["wiki", "pubmed", "news", "parametric", "parametric:OpenAI", " Parametric:meta "]
FAMILIES = [None, "OpenAI", "Google"]


def _vote(agent: str, answer: str, source: str, present: bool, family: str | None = None) -> Vote:
    return Vote(
        agent=agent,
        answer=answer,
        evidence_source=source,
        evidence_present=present,
        family=family,
    )


@st.composite
def vote_lists(draw: st.DrawFn) -> list[Vote]:
    n = draw(st.integers(2, 7))
    return [
        _vote(
            f"agent{i}",
            draw(st.sampled_from(ANSWERS)),
            draw(st.sampled_from(SOURCES)),
            draw(st.booleans()),
            draw(st.sampled_from(FAMILIES)),
        )
        for i in range(n)
    ]


def _labelled(seed: int, n_cases: int = 60) -> list[VoteCase]:
    """Deterministic labelled cases: 4 agents, parametric and indexed votes, some errors.

    Agents 2 and 3 vote from memory on the odd cases, marked present on every third."""
    cases = []
    for i in range(n_cases):
        gold = ANSWERS[(i * 7 + seed) % 3]
        votes = []
        for j in range(4):
            wrong = (i * (j + 3) + seed) % (5 + j) == 0 or (j > 1 and i % 4 == 1)
            answer = ANSWERS[(ANSWERS.index(gold) + 1) % 3] if wrong else gold
            memory = j > 1 and i % 2 == 1
            source = "parametric" if memory else f"src{j}"
            present = i % 3 == 0 if memory else (i + j + seed) % 3 != 0
            votes.append(_vote(f"agent{j}", answer, source, present))
        cases.append(VoteCase(id=str(i), votes=votes, gold=gold))
    return cases


def _unmarked(votes: list[Vote]) -> list[Vote]:
    """The same votes with every parametric vote marked not present."""
    return [
        v.model_copy(update={"evidence_present": False}) if is_parametric(v.evidence_source) else v
        for v in votes
    ]


BETA_STAR_4 = fit_reliability(_labelled(0)).model_copy(update={"beta_star": 4.0})
CALIBRATIONS = [fit_reliability(_labelled(0)), fit_reliability(_labelled(1)), BETA_STAR_4]
calibrations = st.one_of(st.none(), st.sampled_from(CALIBRATIONS))


def test_parametric_votes_marked_present_do_not_carry_consensus_weight() -> None:
    # Two indexed voters disagree; three voters from memory agree on "no", marked present.
    marked = [
        _vote("e1", "yes", "wiki-index", True),
        _vote("e2", "no", "news-index", True),
        *(_vote(f"p{i}", "no", "parametric", True) for i in range(3)),
    ]
    d = guard_votes(marked, BETA_STAR_4, beta=1.5)
    assert not d.weighted and d.mode in ("majority", "verifier")
    assert d.refusal is not None and d.refusal.invariant == 2
    assert d.invariants[1].figures["voters_without_evidence"] == 3
    assert d.invariants[1].figures["fallback_agreement"] == 1.0
    assert d == guard_votes(_unmarked(marked), BETA_STAR_4, beta=1.5)
    assert fallback_agreement(marked) == (1.0, 3)
    assert not any(has_evidence(v) for v in marked[2:])


@given(vote_lists(), calibrations, st.floats(0.0, 10.0), st.booleans())
def test_marking_a_parametric_vote_present_never_changes_the_decision(
    votes: list[Vote], cal: ReliabilityFit | None, beta: float, decompose: bool
) -> None:
    settings = GuardThresholds(decompose=decompose)
    marked = [
        v.model_copy(update={"evidence_present": True}) if is_parametric(v.evidence_source) else v
        for v in votes
    ]
    want = guard_votes(_unmarked(votes), cal, beta=beta, settings=settings)
    assert guard_votes(votes, cal, beta=beta, settings=settings) == want
    assert guard_votes(marked, cal, beta=beta, settings=settings) == want


@given(st.integers(0, 3))
def test_marking_a_parametric_vote_present_never_changes_the_reliability_fit(seed: int) -> None:
    cases = _labelled(seed)
    assert any(
        v.evidence_present and is_parametric(v.evidence_source) for c in cases for v in c.votes
    )
    unmarked = [c.model_copy(update={"votes": _unmarked(c.votes)}) for c in cases]
    assert fit_reliability(cases) == fit_reliability(unmarked)


def _panel_row(parametric_items: bool) -> dict[str, Any]:
    """Two indexed agents that disagree, three memory-only agents that agree."""
    memory = [{"source": "parametric"}] if parametric_items else None
    return panel(
        "p",
        ["1", "2", "2", "2", "2"],
        evidence=[
            [{"source": "kb:policies", "present": True}],
            [{"source": "web:faq", "present": True}],
            memory,
            memory,
            memory,
        ],
        reasoning=["Option 1 states the refund window."] * 5,
    )


def test_a_panel_declaring_parametric_evidence_is_guarded_as_one_declaring_none() -> None:
    policy = policy_from_dict(
        {"reading": {"similarity": "tfidf", "theta_s": 0.3}, "acceptance": {"min_families": 2}}
    )
    declared = decide(as_panel(_panel_row(True)), policy)
    silent = decide(as_panel(_panel_row(False)), policy)
    assert "guard:backed" not in declared.path
    assert (declared.auto, declared.action, declared.decision) == (
        silent.auto,
        silent.action,
        silent.decision,
    )
    votes = panel_votes(as_panel(_panel_row(True)))
    assert fallback_agreement(votes) == (1.0, 3)


def test_a_panel_vote_is_read_from_its_index_before_its_memory() -> None:
    row = panel(
        "p",
        ["1", "1"],
        evidence=[
            [{"source": "parametric"}, {"source": "kb:policies"}],
            [{"source": "parametric:x", "present": True}, {"source": "web:faq", "present": False}],
        ],
    )
    first, second = panel_votes(as_panel(row))
    assert (first.evidence_source, first.evidence_present) == ("kb:policies", True)
    assert has_evidence(first)
    # Only a memory item was present: the vote is from memory, without evidence.
    assert second.evidence_source == "parametric:x" and not has_evidence(second)


# Sources are compared normalised: NFKC, case-folded, stripped.

BASE_SOURCES = ["wiki-index", "news-index", "pubmed", "parametric", "parametric:openai", " "]
SPACES = ["", " ", "\t", "\u3000", "\u00a0", "\n"]


@st.composite
def respelled(draw: st.DrawFn, source: str) -> str:
    """``source`` in another case, width and surrounding whitespace: the same source."""
    chars = []
    for c in source:
        c = c.upper() if draw(st.booleans()) else c
        if "!" <= c <= "~" and draw(st.booleans()):
            c = chr(ord(c) + 0xFEE0)  # the fullwidth form, which NFKC maps back
        chars.append(c)
    return draw(st.sampled_from(SPACES)) + "".join(chars) + draw(st.sampled_from(SPACES))


@st.composite
def respelled_votes(draw: st.DrawFn) -> tuple[list[Vote], list[Vote]]:
    """Votes with plain sources, and the same votes with every source respelled."""
    n = draw(st.integers(2, 7))
    plain, other = [], []
    for i in range(n):
        source = draw(st.sampled_from(BASE_SOURCES))
        vote = _vote(
            f"agent{i}",
            draw(st.sampled_from(ANSWERS)),
            source,
            draw(st.booleans()),
            draw(st.sampled_from(FAMILIES)),
        )
        plain.append(vote)
        other.append(vote.model_copy(update={"evidence_source": draw(respelled(source))}))
    return plain, other


def test_one_source_spelled_three_ways_is_one_source() -> None:
    votes = [
        _vote("a", "yes", "wiki-index", True),
        _vote("b", "yes", "Wiki-Index", True),
        _vote("c", "yes", "wiki-index ", True),
    ]
    assert independent_sources(votes) == ["wiki-index"]
    d = guard_votes(votes, BETA_STAR_4)
    assert d.refusal is not None and d.refusal.invariant == 1
    assert d.refusal.figures["independent_sources"] == 1
    assert d.refusal.figures["sources"] == "wiki-index"
    assert share_cause(votes[0], votes[1]) and share_cause(votes[1], votes[2])
    assert is_parametric(" ＰＡＲＡＭＥＴＲＩＣ:x") and not has_evidence(
        _vote("p", "y", "\u3000", True)
    )


@given(respelled_votes(), calibrations, st.floats(0.0, 10.0))
def test_respelling_a_source_never_changes_the_decision(
    votes: tuple[list[Vote], list[Vote]], cal: ReliabilityFit | None, beta: float
) -> None:
    plain, other = votes
    assert guard_votes(other, cal, beta=beta) == guard_votes(plain, cal, beta=beta)
    assert independent_sources(other) == independent_sources(plain)
    assert [has_evidence(v) for v in other] == [has_evidence(v) for v in plain]


@given(st.text(max_size=12), st.text(st.characters(max_codepoint=127), max_size=12))
def test_a_canonical_source_is_its_own_canonical_form(source: str, ascii_source: str) -> None:
    once = canonical_source(source)
    assert canonical_source(once) == once
    assert canonical_source(f" {source}\t") == once
    assert canonical_source(ascii_source.upper()) == canonical_source(ascii_source.lower())


_UNSEEN = ["\u200b", "\u2060", "\u200e", "\u202e", "\u00ad", "\ufe0f", "\U000e0061", "\u034f"]


@given(
    source=st.sampled_from(["wiki", "pubmed", "news-index"]),
    family=st.sampled_from(["openai", "google", "acme"]),
    marks=st.lists(st.tuples(st.sampled_from(_UNSEEN), st.integers(0, 8)), min_size=1, max_size=3),
    wide=st.booleans(),
)
def test_a_name_spelt_with_invisible_characters_is_the_same_name(
    source: str, family: str, marks: list[tuple[str, int]], wide: bool
) -> None:
    """A zero-width space, a bidirectional mark or another character that shows as
    nothing (or fullwidth letters) does not make a new source or family: two such
    spellings of one source passed invariant 1 as two independent sources, and of one
    family raised n_eff and the confidence."""

    def hidden(text: str) -> str:
        for mark, at in marks:
            at = min(at, len(text))
            text = text[:at] + mark + text[at:]
        if wide:  # fullwidth letters, NFKC's compatibility forms
            text = "".join(chr(ord(c) + 0xFEE0) if "a" <= c <= "z" else c for c in text)
        return text

    assert canonical_source(hidden(source)) == canonical_source(source)
    a = _vote("a", "x", source, True, family)
    b = _vote("b", "x", hidden(source), True, hidden(family))
    assert independent_sources([a, b]) == [canonical_source(source)]
    assert share_cause(a, b)
    c = _vote("c", "x", source, True, family)
    plain = [a, a.model_copy(update={"agent": "b"}), c]
    for cal in (None, BETA_STAR_4):
        got, want = guard_votes([a, b, c], cal), guard_votes(plain, cal)
        assert (got.mode, got.n_eff, got.confidence, got.refusal) == (
            want.mode,
            want.n_eff,
            want.confidence,
            want.refusal,
        )


@given(
    st.sampled_from(["", " ", "\u200b", "\ufe0f"]),
    st.sampled_from(["", "  ", "\u200b\u200b"]),
)
def test_a_blank_family_names_no_shared_cause(first: str, second: str) -> None:
    """Two voters whose family is blank (or invisible only) were taken for one family:
    their unmeasured error correlation was the shared prior (0.8), so n_eff and the
    confidence fell as for clones. A blank family names none: they are two voters of
    unknown families, as with no family at all."""

    def vote(agent: str, family: str | None) -> Vote:
        return Vote(
            agent=agent,
            answer="x",
            evidence_source="parametric",
            evidence_present=False,
            family=family,
        )

    blank = [vote("a", first), vote("b", second)]
    unknown = [vote("a", None), vote("b", None)]
    assert not share_cause(blank[0], blank[1])
    d, e = guard_votes(blank), guard_votes(unknown)
    assert (d.n_eff, d.confidence) == (e.n_eff, e.confidence)
    assert share_cause(vote("a", "OpenAI"), vote("b", "gpt-4o"))
