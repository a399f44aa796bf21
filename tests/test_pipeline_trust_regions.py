"""Signals and calibrated acceptance on hand-checkable numbers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dissensus.pipeline.trust_regions import (
    AgentCalibration,
    CalibrationFile,
    build_calibration,
    calibrated_accept,
    trust_regions,
)
from dissensus.signals import (
    AgentSignal,
    MarkerLexicon,
    SecondAnswer,
    agent_signals,
    count_markers,
)
from dissensus.types import Panel

LEX = MarkerLexicon(concession=("however", "both"), grounding=("instruction",))


def sig(
    agent: str, decision: str | None, second: str | None, score: int = 0, family: str | None = None
) -> AgentSignal:
    return AgentSignal(
        agent=agent,
        family=family,
        decision=decision,
        second=second,
        stable=decision is not None and decision == second,
        concession=max(score, 0),
        grounding=max(-score, 0),
        score=score,
    )


def test_markers_are_whole_words_case_insensitive() -> None:
    assert count_markers("However, BOTH are fine; bothersome however.", ("however", "both")) == 3
    assert count_markers("more detailed and more  detailed", ("more detailed",)) == 1
    assert count_markers("anything", ()) == 0


def test_signals_read_the_recorded_reask() -> None:
    panel = Panel.model_validate(
        {
            "id": "p",
            "outputs": [
                {
                    "agent": "a",
                    "decision": "1",
                    "reasoning": "Follows the instruction.",
                    "swap_decision": "1",
                    "swap_reasoning": "However both ok.",
                },
                {"agent": "b", "decision": "1", "reasoning": "x", "swap_decision": "2"},
                {"agent": "c", "decision": None, "reasoning": "y", "swap_decision": None},
            ],
        }
    )
    got = {
        s.agent: s
        for s in agent_signals(
            panel, {"a": SecondAnswer(decision="1", reasoning="However both ok.")}, LEX
        )
    }
    assert got["a"].stable and (got["a"].concession, got["a"].grounding, got["a"].score) == (
        2,
        1,
        1,
    )
    assert not got["b"].stable and got["b"].second is None  # not re-asked
    assert not got["c"].stable


def _cal() -> CalibrationFile:
    # strong: 19/20 and 18/20 right at score <= 0 in both strata, worse above.
    strong = AgentCalibration(
        family="F1",
        strata={
            "s1": {"-1": [10, 10], "0": [10, 9], "2": [10, 5]},
            "s2": {"0": [20, 18], "3": [10, 4]},
        },
    )
    weak = AgentCalibration(family="F2", strata={"s1": {"0": [30, 12]}, "s2": {"0": [30, 15]}})
    return CalibrationFile(lexicon=LEX, agents={"strong": strong, "weak": weak})


def test_trust_region_is_the_largest_score_reaching_target_in_every_stratum() -> None:
    regions = trust_regions(_cal(), target=0.9, min_support=10)
    assert regions["strong"].max_score == 0
    assert regions["strong"].worst_precision == 0.9  # s2: 18/20; s1: 19/20
    assert regions["strong"].support == 40
    assert regions["weak"].max_score is None
    assert regions["weak"].stable_precision == 0.4
    # Raising min_support above a stratum's count removes the region.
    assert trust_regions(_cal(), target=0.9, min_support=25)["strong"].max_score is None


def test_acceptance_needs_a_trusted_stable_decisive_answer_and_no_reliable_veto() -> None:
    regions = trust_regions(_cal(), target=0.9, min_support=10)
    kw = {"veto_precision": 0.75, "min_families": 3, "fallback_max_score": 0}
    ok = calibrated_accept([sig("strong", "1", "1", 0), sig("weak", "2", "2")], regions, **kw)
    assert (
        ok.accepted
        and ok.decision == "1"
        and ok.basis == "calibrated"
        and ok.supporters == ["strong"]
    )
    hedged = calibrated_accept([sig("strong", "1", "1", 2)], regions, **kw)
    assert not hedged.accepted
    flipped = calibrated_accept([sig("strong", "1", "2", -1)], regions, **kw)
    assert not flipped.accepted
    vetoed = calibrated_accept(
        [sig("strong", "1", "1", 0), sig("weak", "2", "2")],
        regions,
        **{**kw, "veto_precision": 0.3},
    )
    assert not vetoed.accepted and vetoed.contradicted_by == ["weak"]


def test_uncalibrated_panels_need_independent_families() -> None:
    kw = {"veto_precision": 0.75, "min_families": 2, "fallback_max_score": 0}
    same_family = [sig("a", "1", "1", family="F"), sig("b", "1", "1", family="F")]
    assert not calibrated_accept(same_family, {}, **kw).accepted
    two = [sig("a", "1", "1", family="F"), sig("b", "1", "1", family="G")]
    assert calibrated_accept(two, {}, **kw).accepted
    contradicted = [*two, sig("c", "2", "2", family="H")]
    assert not calibrated_accept(contradicted, {}, **kw).accepted
    hedged = [sig("a", "1", "1", 1, "F"), sig("b", "1", "1", 1, "G")]
    assert not calibrated_accept(hedged, {}, **kw).accepted


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from(["1", "2"]),
            st.sampled_from(["1", "2", None]),
            st.integers(-2, 3),
        ),
        min_size=1,
        max_size=6,
        unique_by=lambda t: t[0],
    ),
    st.floats(0.5, 1.0),
)
def test_accepted_answers_are_always_stable_answers_of_trusted_agents(
    rows: list[tuple[str, str, str | None, int]], target: float
) -> None:
    cal = build_calibration(
        [
            ([sig("a", "1", "1", s) for s in range(-2, 4)], "s", "1"),
            ([sig("b", "1", "1", 0), sig("c", "2", "2", 0)], "s", "2"),
        ],
        lexicon=LEX,
    )
    regions = trust_regions(cal, target=target, min_support=1)
    signals = [sig(agent, d, second, score) for agent, d, second, score in rows]
    result = calibrated_accept(
        signals, regions, veto_precision=0.75, min_families=2, fallback_max_score=0
    )
    if result.accepted:
        backers = [s for s in signals if s.agent in result.supporters]
        assert backers and all(s.stable and s.decision == result.decision for s in backers)
        for s in backers:
            region = regions[s.agent]
            assert region.max_score is not None and s.score <= region.max_score
            assert region.worst_precision is not None and region.worst_precision >= target
