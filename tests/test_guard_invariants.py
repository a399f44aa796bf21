"""Property tests of the guard's guarantees (docs/guard.md)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.errors import ConfigError, InputError
from dissensus.guard import (
    CorrelatedConsensusError,
    GuardThresholds,
    ReliabilityFit,
    fit_reliability,
    guard_votes,
)
from dissensus.guard.provenance import has_evidence, independent_sources
from dissensus.types import Vote, VoteCase

ANSWERS = ["a", "b", "c"]
SOURCES = ["wiki", "pubmed", "news", "parametric", "parametric:OpenAI"]
EVIDENCE = {"wiki", "pubmed", "news"}
"""The SOURCES that are documents; the other two are a model's own memory."""
FAMILIES = [None, "OpenAI", "Google", "Meta"]


@st.composite
def vote_lists(draw: st.DrawFn, min_size: int = 2, max_size: int = 7) -> list[Vote]:
    n = draw(st.integers(min_size, max_size))
    return [
        Vote(
            agent=f"agent{i}",
            answer=draw(st.sampled_from(ANSWERS)),
            evidence_source=draw(st.sampled_from(SOURCES)),
            evidence_present=draw(st.booleans()),
            family=draw(st.sampled_from(FAMILIES)),
        )
        for i in range(n)
    ]


def _labelled(seed: int, n_cases: int = 60, herd: bool = False) -> list[VoteCase]:
    """Deterministic labelled cases: 4 agents, a mix of strata, some errors.

    With ``herd``, on a third of the cases agents 1-3 agree on one wrong answer while
    agent 0 stays right: the majority is confidently wrong, agent 0 is a verifier.
    """
    cases = []
    for i in range(n_cases):
        gold = ANSWERS[(i * 7 + seed) % 3]
        votes = []
        for j in range(4):
            wrong = (i * (j + 3) + seed) % (5 + j) == 0
            if herd:
                wrong = j > 0 and i % 3 == 0
            answer = ANSWERS[(ANSWERS.index(gold) + 1) % 3] if wrong else gold
            present = (i + j + seed) % 3 != 0 if i % 2 else False
            votes.append(
                Vote(
                    agent=f"agent{j}",
                    answer=answer,
                    evidence_source=f"src{j % 2}",
                    evidence_present=present,
                )
            )
        cases.append(VoteCase(id=str(i), votes=votes, gold=gold))
    return cases


CALIBRATIONS = [
    fit_reliability(_labelled(0)),
    fit_reliability(_labelled(1, herd=True)),
    fit_reliability(_labelled(2, n_cases=12)),
]
calibrations = st.one_of(st.none(), st.sampled_from(CALIBRATIONS))


@given(vote_lists(), calibrations, st.floats(0.0, 10.0))
def test_refusal_whenever_fewer_than_two_independent_sources(
    votes: list[Vote], cal: ReliabilityFit | None, beta: float
) -> None:
    d = guard_votes(votes, cal, beta=beta)
    # Independent oracle: evidence sources of SOURCES that are real documents (not a
    # model's memory) among the voters that had evidence, written out by hand here.
    real = {
        v.evidence_source for v in votes if v.evidence_present and v.evidence_source in EVIDENCE
    }
    assert independent_sources(votes) == sorted(real)
    if len(real) < 2:
        assert not d.weighted
        assert d.mode in ("majority", "verifier")
        if beta > 0:
            assert d.refusal is not None and d.refusal.invariant == 1
            assert d.refusal.figures["independent_sources"] == len(real)


@given(vote_lists(), calibrations, st.floats(0.01, 10.0))
def test_refusal_strict_raises_and_carries_decision(
    votes: list[Vote], cal: ReliabilityFit | None, beta: float
) -> None:
    d = guard_votes(votes, cal, beta=beta)
    if d.refusal is None:
        assert guard_votes(votes, cal, beta=beta, strict=True) == d
        return
    with pytest.raises(CorrelatedConsensusError) as info:
        guard_votes(votes, cal, beta=beta, strict=True)
    assert info.value.decision == d
    assert f"invariant {d.refusal.invariant}" in str(info.value)


@given(
    st.integers(2, 6),
    st.integers(0, 3),
    st.sampled_from(ANSWERS),
    st.floats(0.05, 1.0),
    calibrations,
)
def test_fallback_agreement_at_or_above_maximum_always_refuses(
    n_absent: int, n_dissent: int, answer: str, maximum: float, cal: ReliabilityFit | None
) -> None:
    # Two independent evidence sources so that invariant 1 holds; absent voters agree.
    votes = [
        Vote(agent="e1", answer="a", evidence_source="wiki", evidence_present=True),
        Vote(agent="e2", answer="b", evidence_source="pubmed", evidence_present=True),
    ]
    votes += [
        Vote(agent=f"f{i}", answer=answer, evidence_source="parametric", evidence_present=False)
        for i in range(n_absent)
    ]
    other = "c" if answer != "c" else "a"
    votes += [
        Vote(agent=f"d{i}", answer=other, evidence_source="parametric", evidence_present=False)
        for i in range(n_dissent)
    ]
    absent = n_absent + n_dissent
    frac = max(n_absent, n_dissent) / absent
    d = guard_votes(votes, cal, settings=GuardThresholds(max_fallback_agreement=maximum))
    assert d.invariants[1].figures["fallback_agreement"] == pytest.approx(frac)
    if frac >= maximum:
        assert d.refusal is not None and d.refusal.invariant == 2
        assert not d.weighted


@given(vote_lists(), calibrations, st.floats(0.0, 20.0))
def test_beta_never_exceeds_measured_beta_star(
    votes: list[Vote], cal: ReliabilityFit | None, beta: float
) -> None:
    d = guard_votes(votes, cal, beta=beta)
    if d.weighted:
        assert cal is not None and cal.beta_star is not None
        assert d.beta_used is not None
        assert 0 < d.beta_used <= cal.beta_star
        assert d.beta_used <= beta
        assert all(c.holds for c in d.invariants)
    else:
        assert d.beta_used is None


@given(vote_lists(), calibrations, st.floats(0.0, 10.0))
def test_confidence_in_unit_interval_and_probabilities_sum_to_one(
    votes: list[Vote], cal: ReliabilityFit | None, beta: float
) -> None:
    d = guard_votes(votes, cal, beta=beta)
    assert 0.0 <= d.confidence <= 1.0
    assert all(0.0 <= p <= 1.0 for p in d.probabilities.values())
    assert math.isclose(sum(d.probabilities.values()), 1.0, abs_tol=1e-9)
    assert d.confidence == d.probabilities[d.answer]
    assert d.answer in {v.answer for v in votes}
    assert 1.0 - 1e-9 <= d.n_eff <= len(votes) + 1e-9


@given(vote_lists(), calibrations, st.floats(0.0, 10.0))
def test_decisions_are_deterministic(
    votes: list[Vote], cal: ReliabilityFit | None, beta: float
) -> None:
    first = guard_votes(votes, cal, beta=beta)
    again = guard_votes(
        list(votes),
        ReliabilityFit.model_validate_json(cal.model_dump_json()) if cal else None,
        beta=beta,
    )
    assert first.model_dump_json() == again.model_dump_json()


@given(vote_lists())
def test_every_decision_reports_mode_neff_and_why(votes: list[Vote]) -> None:
    d = guard_votes(votes)
    assert d.mode in ("consensus", "bounded", "majority", "verifier")
    assert d.reason and f"n_eff {d.n_eff:.2f}" in d.reason
    assert [c.number for c in d.invariants] == [1, 2, 3]
    # Without calibration invariant 3 cannot hold: weighting is never applied.
    assert not d.invariants[2].holds and not d.weighted


def test_all_invariants_hold_gives_consensus_weighting() -> None:
    cal = CALIBRATIONS[0]
    assert cal.beta_star is not None and cal.beta_star > 0
    votes = [
        Vote(agent="agent0", answer="a", evidence_source="wiki", evidence_present=True),
        Vote(agent="agent1", answer="a", evidence_source="pubmed", evidence_present=True),
        Vote(agent="agent2", answer="b", evidence_source="news", evidence_present=True),
    ]
    d = guard_votes(votes, cal, beta=min(0.5, cal.beta_star))
    assert d.mode == "consensus" and d.weighted and d.refusal is None and d.answer == "a"
    bounded = guard_votes(votes, cal, beta=cal.beta_star + 5)
    assert bounded.mode == "bounded" and bounded.beta_used == cal.beta_star
    undecomposed = guard_votes(
        votes, cal, beta=min(0.5, cal.beta_star), settings=GuardThresholds(decompose=False)
    )
    assert undecomposed.mode == "bounded" and undecomposed.weighted


def test_verifier_veto_over_majority() -> None:
    votes = [
        Vote(
            agent=f"c{i}",
            answer="x",
            evidence_source="parametric:OpenAI",
            evidence_present=False,
            family="OpenAI",
        )
        for i in range(4)
    ]
    votes.append(
        Vote(agent="judge", answer="y", evidence_source="parametric:Other", evidence_present=False)
    )
    d = guard_votes(votes, verifier="judge", settings=GuardThresholds(max_fallback_agreement=1.0))
    assert d.mode == "verifier" and d.answer == "y" and "vetoed" in d.reason
    assert d.refusal is not None and d.refusal.invariant == 1
    missing = guard_votes(votes, verifier="nobody")
    assert missing.mode == "majority" and missing.answer == "x"


def test_clones_count_as_fewer_independent_voters() -> None:
    clones = [
        Vote(
            agent=f"c{i}",
            answer="x",
            evidence_source="parametric:OpenAI",
            evidence_present=False,
            family="OpenAI",
        )
        for i in range(5)
    ]
    mixed = [
        Vote(
            agent=f"m{i}",
            answer="x",
            evidence_source=f"parametric:F{i}",
            evidence_present=False,
            family=f"F{i}",
        )
        for i in range(5)
    ]
    a, b = guard_votes(clones), guard_votes(mixed)
    assert a.n_eff < b.n_eff
    assert a.confidence < b.confidence
    # Vote share is 1.0 for both; the guard's confidence is not.
    assert a.share == b.share == 1.0 and b.confidence < 1.0


def test_audit_rejects_bad_arguments() -> None:
    one = [Vote(agent="a", answer="x", evidence_source="s", evidence_present=True)]
    with pytest.raises(InputError):
        guard_votes(one)
    two = [*one, Vote(agent="b", answer="x", evidence_source="t", evidence_present=True)]
    with pytest.raises(ConfigError):
        guard_votes(two, beta=float("nan"))


@given(votes=vote_lists(min_size=2, max_size=6), data=st.data())
def test_an_agent_voting_twice_is_refused_never_a_second_voice(
    votes: list[Vote], data: st.DataObject
) -> None:
    """One agent, one vote: a copy of any vote under its agent's name (whatever its answer
    or source) is an InputError, as VoteCase and a panel refuse it."""
    twin = data.draw(st.sampled_from(votes))
    copy = twin.model_copy(update={"answer": data.draw(st.sampled_from(ANSWERS))})
    at = data.draw(st.integers(0, len(votes)))
    with pytest.raises(InputError, match="duplicate agent id"):
        guard_votes([*votes[:at], copy, *votes[at:]])


@pytest.mark.parametrize("votes", [None, "ab", [{"agent": "a", "answer": "x"}, None]])
def test_what_is_not_a_list_of_votes_is_an_input_error(votes: object) -> None:
    with pytest.raises(InputError):
        guard_votes(votes)  # type: ignore[arg-type]


def _agreeing(label: str) -> list[Vote]:
    return [
        Vote(agent="a", answer=label, evidence_source="w", evidence_present=True),
        Vote(agent="b", answer=label, evidence_source="x", evidence_present=True),
    ]


@given(
    label=st.one_of(
        st.sampled_from(["*", "**", "***", "* ", "x*"]),
        st.text(alphabet="*ab-_ ", min_size=1, max_size=6).filter(lambda s: s.strip() != ""),
    )
)
def test_the_answer_star_is_not_the_any_other_answer_key(label: str) -> None:
    baseline = guard_votes(_agreeing("plain"))
    got = guard_votes(_agreeing(label))
    assert got.answer == label
    assert got.confidence == pytest.approx(baseline.confidence)
    assert got.confidence < 1.0
    assert (got.n_eff, got.mode, got.share) == (baseline.n_eff, baseline.mode, baseline.share)
    assert len(got.probabilities) == 2
    assert got.probabilities[label] == pytest.approx(baseline.probabilities["plain"])
    assert math.fsum(got.probabilities.values()) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("prior_reliability", math.nan),
        ("prior_reliability", 0.0),
        ("prior_reliability", 1.0),
        ("prior_reliability", -0.2),
        ("prior_rho_other", math.nan),
        ("prior_rho_other", 1.5),
        ("prior_rho_shared", -0.1),
        ("prior_rho_shared", math.inf),
        ("max_fallback_agreement", math.nan),
        ("max_fallback_agreement", 1.01),
        ("max_fallback_agreement", -math.inf),
    ],
)
def test_public_guard_thresholds_are_range_checked(field: str, value: float) -> None:
    """guard.md: each setting is checked; a NaN prior gave NaN confidences and a NaN
    ``max_fallback_agreement`` silently never failed invariant 2."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=field):
        GuardThresholds(**{field: value})
    with pytest.raises(ValidationError, match=field):
        GuardThresholds.model_validate({field: value})


@given(
    votes=vote_lists(),
    reliability=st.floats(0.01, 0.99),
    shared=st.floats(0.0, 1.0),
    other=st.floats(0.0, 1.0),
    fallback=st.floats(0.0, 1.0),
)
def test_every_accepted_setting_gives_finite_figures(
    votes: list[Vote], reliability: float, shared: float, other: float, fallback: float
) -> None:
    settings = GuardThresholds(
        prior_reliability=reliability,
        prior_rho_shared=shared,
        prior_rho_other=other,
        max_fallback_agreement=fallback,
    )
    d = guard_votes(votes, settings=settings)
    assert math.isfinite(d.confidence) and 0.0 <= d.confidence <= 1.0
    assert math.isfinite(d.n_eff) and 1.0 - 1e-9 <= d.n_eff <= len(votes) + 1e-9
    assert all(math.isfinite(p) for p in d.probabilities.values())


def test_a_journalled_min_sources_of_one_still_reads_and_out_of_range_is_one_line() -> None:
    from dissensus.pipeline.policy import Policy, guard_thresholds

    old = Policy.model_validate({"guard": {"options": {"min_sources": 1}}})
    assert guard_thresholds(old).min_sources == 1  # counted as 2 by invariant 1
    bad = Policy.model_validate({"guard": {"options": {"prior_rho_other": 2.0}}})
    with pytest.raises(ConfigError, match="prior_rho_other") as info:
        guard_thresholds(bad)
    assert info.value.field == "guard.options.prior_rho_other"


@st.composite
def one_source_votes(draw: st.DrawFn) -> list[Vote]:
    """Votes whose voters with evidence all cite one document source; the others cite a
    model's memory or had no evidence."""
    source = draw(st.sampled_from(sorted(EVIDENCE)))
    votes = draw(vote_lists())
    votes[0] = votes[0].model_copy(update={"evidence_source": source, "evidence_present": True})
    return [
        v
        if not (v.evidence_present and v.evidence_source in EVIDENCE)
        else v.model_copy(update={"evidence_source": source})
        for v in votes
    ]


@given(one_source_votes(), st.integers(-3, 1), calibrations, st.floats(0.0, 10.0))
def test_a_min_sources_below_two_still_needs_two_sources(
    votes: list[Vote], min_sources: int, cal: ReliabilityFit | None, beta: float
) -> None:
    """A ``min_sources`` below 2 (a journalled policy's) counts as 2: votes whose evidence
    comes from one source never satisfy invariant 1, and are never weighted."""
    d = guard_votes(votes, cal, beta=beta, settings=GuardThresholds(min_sources=min_sources))
    assert len(independent_sources(votes)) == 1
    first = d.invariants[0]
    assert not first.holds and first.figures["required"] == 2, first
    assert not d.weighted
    if beta > 0:
        assert d.refusal is not None and d.refusal.invariant == 1


@st.composite
def evidenced_votes(draw: st.DrawFn) -> list[Vote]:
    """Votes that all had evidence, from at least two document sources and not all of one
    declared family (agent0 declares none): invariants 1 and 2 hold."""
    n = draw(st.integers(2, 7))
    sources = draw(st.lists(st.sampled_from(sorted(EVIDENCE)), min_size=n, max_size=n))
    if len(set(sources)) < 2:
        sources[1] = next(s for s in sorted(EVIDENCE) if s != sources[0])
    return [
        Vote(
            agent=f"agent{i}",
            answer=draw(st.sampled_from(ANSWERS)),
            evidence_source=source,
            evidence_present=True,
            family=None if i == 0 else draw(st.sampled_from(FAMILIES)),
        )
        for i, source in enumerate(sources)
    ]


@given(evidenced_votes(), st.floats(0.01, 20.0), st.booleans())
def test_a_weighted_decision_s_confidence_is_the_posterior_of_its_answer(
    votes: list[Vote], beta: float, decompose: bool
) -> None:
    """Weighted (consensus or bounded) decisions state as confidence the posterior
    probability of the answer, not the weighted vote share the answer was chosen by."""
    cal = CALIBRATIONS[0]
    assert cal.beta_star is not None and cal.beta_star > 0
    d = guard_votes(votes, cal, beta=beta, settings=GuardThresholds(decompose=decompose))
    assert d.weighted and d.mode in ("consensus", "bounded"), d.reason
    assert d.share is not None
    assert d.confidence == d.probabilities[d.answer]


def test_a_weighted_confidence_differs_from_the_share_where_the_posterior_does() -> None:
    """Two of three evidenced voters agree: the answer's posterior is not its share of the
    weighted vote, and the confidence is the posterior."""
    cal = CALIBRATIONS[0]
    votes = [
        Vote(agent="agent0", answer="a", evidence_source="wiki", evidence_present=True),
        Vote(agent="agent1", answer="a", evidence_source="pubmed", evidence_present=True),
        Vote(agent="agent2", answer="b", evidence_source="news", evidence_present=True),
    ]
    d = guard_votes(votes, cal, beta=1.0)
    assert d.weighted and d.answer == "a" and d.share is not None
    assert d.confidence == d.probabilities["a"]
    assert not math.isclose(d.confidence, d.share), (d.confidence, d.share)


@st.composite
def evidenced_and_fallback_votes(draw: st.DrawFn) -> list[Vote]:
    """Evidenced votes (invariant 1 holds) plus 0 to 4 voters without evidence (parametric,
    or parametric marked present), answers among three."""
    votes = draw(evidenced_votes())
    for i in range(draw(st.integers(0, 4))):
        votes.append(
            Vote(
                agent=f"fallback{i}",
                answer=draw(st.sampled_from(ANSWERS)),
                evidence_source=draw(st.sampled_from(["parametric", "parametric:OpenAI"])),
                evidence_present=draw(st.booleans()),
            )
        )
    return votes


def _hand_weighted(votes: list[Vote], beta: float, decompose: bool) -> dict[str, float]:
    """The documented weighting by hand: ``w_i = exp(beta * agreement_i)``, agreement the
    share of the *other* earning voters with ``i``'s answer; with decomposition only
    voters with evidence earn it and the others keep weight 1. Weight share per answer."""
    earning = [v for v in votes if not decompose or has_evidence(v)]
    weights: dict[str, float] = {}
    for v in votes:
        if any(u.agent == v.agent for u in earning) and len(earning) > 1:
            same = sum(1 for u in earning if u.answer == v.answer) - 1
            w = math.exp(beta * same / (len(earning) - 1))
        else:
            w = 1.0
        weights[v.answer] = weights.get(v.answer, 0.0) + w
    total = sum(weights.values())
    return {a: w / total for a, w in weights.items()}


@given(evidenced_and_fallback_votes(), st.floats(0.01, 20.0), st.booleans())
def test_only_voters_with_evidence_earn_consensus_weight(
    votes: list[Vote], beta: float, decompose: bool
) -> None:
    """A weighted decision is the documented weighting: with decomposition (the default)
    only voters with evidence earn or carry consensus weight and fallback votes keep
    weight 1; without it every voter earns weight from its agreement with all others."""
    cal = CALIBRATIONS[0]
    assert cal.beta_star is not None and cal.beta_star > 0
    settings = GuardThresholds(decompose=decompose, max_fallback_agreement=1.0)
    d = guard_votes(votes, cal, beta=beta, settings=settings)
    if not d.weighted:  # a fallback that agreed unanimously fails invariant 2
        assert d.refusal is not None and d.refusal.invariant == 2
        return
    assert d.beta_used is not None
    shares = _hand_weighted(votes, d.beta_used, decompose)
    assert d.share == pytest.approx(shares[d.answer], rel=1e-9, abs=1e-12)
    top = max(shares.values())
    leaders = [a for a, w in shares.items() if math.isclose(w, top, rel_tol=1e-12)]
    if len(leaders) == 1:  # ties: see test_a_weighted_tie_goes_to_the_posterior...
        assert d.answer == leaders[0]


@given(vote_lists(), calibrations, st.floats(0.01, 10.0))
def test_a_majority_tie_goes_to_the_posterior_then_the_smallest_answer(
    votes: list[Vote], cal: ReliabilityFit | None, beta: float
) -> None:
    """In majority mode a tie between answers of equal count is broken by the posterior,
    then by the smallest answer. Without calibration every vote weighs the same, so tied
    answers have equal posteriors and the smallest one is the answer."""
    d = guard_votes(votes, cal, beta=beta, settings=GuardThresholds(use_recommended_verifier=False))
    if d.mode != "majority":
        return
    counts: dict[str, int] = {}
    for v in votes:
        counts[v.answer] = counts.get(v.answer, 0) + 1
    leaders = sorted(a for a, c in counts.items() if c == max(counts.values()))
    assert d.tie == (len(leaders) > 1)
    assert d.answer in leaders
    best = max(d.probabilities[a] for a in leaders)
    assert d.probabilities[d.answer] == best
    assert d.answer == min(a for a in leaders if d.probabilities[a] == best)
    if cal is None:
        assert d.answer == leaders[0]


@given(
    st.lists(st.sampled_from(ANSWERS), min_size=2, max_size=6),
    st.sampled_from(ANSWERS),
    st.booleans(),
    st.floats(0.01, 1.0),
    calibrations,
)
def test_one_voter_without_evidence_has_no_fallback_agreement(
    evidenced: list[str], lone: str, marked: bool, maximum: float, cal: ReliabilityFit | None
) -> None:
    """Fallback agreement is 0 with fewer than two voters without evidence: one voter
    agrees with nobody, so it never fails invariant 2 (a parametric vote marked present
    is such a voter too)."""
    sources = sorted(EVIDENCE)
    votes = [
        Vote(agent=f"e{i}", answer=a, evidence_source=sources[i % 3], evidence_present=True)
        for i, a in enumerate(evidenced)
    ]
    for extra in ([], [lone]):
        panel = votes + [
            Vote(agent="lone", answer=a, evidence_source="parametric", evidence_present=marked)
            for a in extra
        ]
        d = guard_votes(panel, cal, settings=GuardThresholds(max_fallback_agreement=maximum))
        check = d.invariants[1]
        assert check.figures["fallback_agreement"] == 0.0
        assert check.figures["voters_without_evidence"] == len(extra)
        assert check.holds


@given(
    evidenced_votes(),
    st.one_of(st.just(0.0), st.floats(0.0, 10.0)),
    st.integers(0, 6),
    st.booleans(),
)
def test_a_verifier_decides_only_when_an_invariant_failed(
    votes: list[Vote], beta: float, which: int, recommended: bool
) -> None:
    """The verifier is the fallback of a refused weighting: while all three invariants
    hold (beta 0, which asks for no weighting, included) it never decides or vetoes,
    whether named or recommended by the calibration."""
    cal = CALIBRATIONS[0]
    if recommended:  # the herd calibration's verifier, beside a measured beta* > 0
        assert CALIBRATIONS[1].verifier is not None
        cal = cal.model_copy(update={"verifier": CALIBRATIONS[1].verifier})
    assert cal.beta_star is not None and cal.beta_star > 0
    named = None if recommended else votes[which % len(votes)].agent
    d = guard_votes(votes, cal, beta=beta, verifier=named)
    assert all(c.holds for c in d.invariants), d.invariants
    assert d.mode != "verifier" and d.verifier is None, d.reason
    assert d.refusal is None
    if beta == 0:
        assert d.mode == "majority" and not d.weighted


@given(evidenced_and_fallback_votes(), st.floats(0.01, 20.0), st.booleans())
def test_a_weighted_tie_goes_to_the_posterior_then_the_smallest_answer(
    votes: list[Vote], beta: float, decompose: bool
) -> None:
    """When the consensus weights of two answers tie, weighting says nothing for either:
    the tie is recorded and broken as a majority tie is, by the posterior, then by the
    smallest answer (never by the spelling alone against the posterior)."""
    cal = CALIBRATIONS[0]
    settings = GuardThresholds(decompose=decompose, max_fallback_agreement=1.0)
    d = guard_votes(votes, cal, beta=beta, settings=settings)
    if not d.weighted:
        return
    assert d.beta_used is not None
    shares = _hand_weighted(votes, d.beta_used, decompose)
    top = max(shares.values())
    leaders = sorted(a for a, w in shares.items() if math.isclose(w, top, rel_tol=1e-12))
    assert d.tie == (len(leaders) > 1), (shares, d.reason)
    assert d.answer in leaders
    best = max(d.probabilities[a] for a in leaders)
    assert d.answer == min(a for a in leaders if d.probabilities[a] == best)
    assert ("tie broken by the calibrated posterior" in d.reason) == d.tie


@given(evidenced_votes(), st.integers(0, 6), st.sampled_from(["none", "zero", "unmeasured"]))
def test_beta_zero_needs_no_measured_beta_star(votes: list[Vote], which: int, cal: str) -> None:
    """At beta 0 nothing is weighted, so invariant 3 holds whatever beta* is: without a
    calibration, with beta* = 0 or with beta* not measured, a named verifier is not
    consulted while invariants 1 and 2 hold (a calibration that measured beta* = 0 sent
    every beta-0 case to the verifier, a calibration allowing weighting none)."""
    base = CALIBRATIONS[0]
    calibration = {
        "none": None,
        "zero": base.model_copy(update={"beta_star": 0.0}),
        "unmeasured": base.model_copy(update={"beta_star": None}),
    }[cal]
    named = votes[which % len(votes)].agent
    d = guard_votes(votes, calibration, beta=0.0, verifier=named)
    assert d.invariants[2].holds, d.invariants[2]
    if d.invariants[0].holds and d.invariants[1].holds:
        assert d.mode == "majority" and d.verifier is None, d.reason
    assert d.refusal is None


@given(
    st.lists(
        st.sampled_from(["gpt-4o", "GPT-4o-mini", "OpenAI", "openai\u200b"]), min_size=2, max_size=5
    ),
    st.lists(st.sampled_from(ANSWERS), min_size=5, max_size=5),
    st.floats(0.01, 10.0),
)
def test_voters_with_evidence_all_of_one_model_are_not_independent(
    families: list[str], answers: list[str], beta: float
) -> None:
    """Distinct indices read by one model family are downstream of one model: invariant 1
    fails however many sources they name, and no consensus weight is given."""
    cal = CALIBRATIONS[0]
    votes = [
        Vote(
            agent=f"agent{i}",
            answer=answers[i],
            evidence_source=f"index{i}",
            evidence_present=True,
            family=family,
        )
        for i, family in enumerate(families)
    ]
    d = guard_votes(votes, cal, beta=beta)
    assert not d.weighted and d.mode in ("majority", "verifier")
    assert d.refusal is not None and d.refusal.invariant == 1
    assert d.refusal.figures["family"] == "openai"
    assert d.refusal.figures["independent_sources"] == len(families)
    # One voter of another family, or one that declares none, makes it auditable again.
    for other in ("Meta", None):
        mixed = [
            *votes,
            Vote(
                agent="x", answer="a", evidence_source="wiki", evidence_present=True, family=other
            ),
        ]
        assert guard_votes(mixed, cal, beta=beta).invariants[0].holds
