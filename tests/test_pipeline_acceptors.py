"""One acceptance interface: the run's acceptor is chosen once from its specification,
every acceptor answers with the journalled step, and a held file never accepts."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissensus.acceptance.calibrate import AcceptanceVerdict
from dissensus.pipeline.acceptors import (
    AcceptInput,
    Acceptor,
    HeldAcceptor,
    LearnedAcceptor,
    TrustRegionAcceptor,
    acceptor_for,
)
from dissensus.pipeline.policy import Policy
from dissensus.pipeline.steps import AcceptanceStep
from dissensus.types import AcceptanceFigures, Panel
from pipeline_cases import panel


def _runtime(*, acceptance: dict[str, Any] | None, hold: str | None) -> Any:
    return SimpleNamespace(
        policy=Policy(),
        spec=SimpleNamespace(shift_hold=hold),
        acceptance=acceptance,
        guard_calibration=None,
        learned=None,
        regions={},
    )


def test_the_run_specification_picks_one_acceptor() -> None:
    assert isinstance(acceptor_for(_runtime(acceptance=None, hold=None)), TrustRegionAcceptor)
    assert isinstance(
        acceptor_for(_runtime(acceptance={"sha256": "x"}, hold=None)), LearnedAcceptor
    )
    held = acceptor_for(_runtime(acceptance={"sha256": "x"}, hold="shift p = 0.01"))
    assert isinstance(held, HeldAcceptor)
    # A hold without a file holds nothing: the trust regions judge.
    assert isinstance(acceptor_for(_runtime(acceptance=None, hold="x")), TrustRegionAcceptor)
    chosen: list[Acceptor] = [held, acceptor_for(_runtime(acceptance=None, hold=None))]
    assert [a.name for a in chosen] == ["held", "trust_regions"]


def _case(decisions: list[str | None]) -> AcceptInput:
    return AcceptInput(
        panel=Panel.model_validate(panel("p", decisions)), reading=None, second={}, signals=[]
    )


@settings(max_examples=50, deadline=None)
@given(
    hold=st.text(min_size=1, max_size=40),
    decisions=st.lists(st.sampled_from(["1", "2", None]), min_size=2, max_size=6),
)
def test_a_held_file_never_accepts(hold: str, decisions: list[str | None]) -> None:
    step = HeldAcceptor(hold).judge(_case(decisions))
    assert isinstance(step, AcceptanceStep)
    assert step.accepted is False and step.decision is None and step.basis == "none"
    assert step.reason == f"acceptance held: {hold}"


def test_trust_regions_without_a_calibration_answer_with_the_step() -> None:
    acceptor = TrustRegionAcceptor(
        regions=dict, veto_precision=0.75, min_families=3, fallback_max_score=0
    )
    step = acceptor.judge(_case(["1", "1", "1"]))
    assert isinstance(step, AcceptanceStep)
    assert step.figures is None  # only learned acceptance quotes figures
    assert not step.accepted  # no signals: no calibrated agent, no independent families


def test_the_verdict_is_the_figures_and_the_answer() -> None:
    verdict = AcceptanceVerdict(
        accepted=True,
        decision="1",
        reason="scored high",
        family="votes",
        score=0.9,
        threshold=0.8,
        target_precision=0.9,
        delta=0.1,
        calibration_n=100,
        file_sha256="ab" * 32,
    )
    assert isinstance(verdict, AcceptanceFigures)
    figures = AcceptanceFigures.model_validate(
        verdict.model_dump(include=set(AcceptanceFigures.model_fields))
    )
    assert figures.family == "votes" and figures.score == 0.9 and figures.calibration_n == 100


_VOTES = st.lists(st.sampled_from(["A", "B", None]), min_size=2, max_size=5)


@pytest.fixture(scope="module")
def tfidf_acceptance(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[bool, bool], str]:
    """Acceptance files calibrated (TF-IDF) on the bundled LLMBar panels, by whether the
    policy's guard is enabled and whether its cases have second answers (a file is used
    with the guard setting and the re-asks it was calibrated with)."""
    from dissensus.cli import main

    where = tmp_path_factory.mktemp("acceptance")
    panels = Path(__file__).resolve().parent.parent / "examples" / "llmbar-swap.jsonl"
    files: dict[tuple[bool, bool], str] = {}
    for guard in (True, False):
        for reask in (True, False):
            policy = where / f"policy-{guard}-{reask}.yaml"
            policy.write_text(
                f"reading:\n  similarity: tfidf\nguard:\n  enabled: {str(guard).lower()}\n"
                f"seek_context:\n  followup: {'reask' if reask else 'none'}\n"
            )
            out = where / f"A-{guard}-{reask}.json"
            argv = ["calibrate-acceptance", str(panels), "--policy", str(policy), "--out", str(out)]
            assert main([*argv, "--target-precision", "0.8", "--json"]) == 0
            files[guard, reask] = str(out)
    return files


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    decisions=_VOTES,
    evidence=st.booleans(),
    same_family=st.booleans(),
    guard=st.booleans(),
    cd=st.sampled_from(["escalate", "seek_context", "deliberate"]),
    followup=st.sampled_from(["reask", "none", "dci"]),
    rounds=st.sampled_from([0, 1, 2]),
)
def test_the_judged_population_is_the_one_decide_judges(
    tfidf_acceptance: dict[tuple[bool, bool], str],
    decisions: list[str | None],
    evidence: bool,
    same_family: bool,
    guard: bool,
    cd: str,
    followup: str,
    rounds: int,
) -> None:
    """``judged_by_acceptance`` (what calibrate-acceptance calibrates on) names exactly
    the cases ``decide`` under the same policy has acceptance judge."""
    from dissensus.pipeline import decide, policy_from_dict
    from dissensus.pipeline.gates import judged_by_acceptance
    from dissensus.states import Thresholds, get_backend, read_panels

    policy = policy_from_dict(
        {
            "reading": {"similarity": "tfidf"},
            "guard": {"enabled": guard},
            "routing": (
                {"defaults": {"CD": "deliberate", "DD": "deliberate"}}
                if cd == "deliberate"
                else {"convergent_disagreement_without_values": cd}
            ),
            "seek_context": {"followup": followup, "max_followups": rounds},
            "acceptance": {"model": tfidf_acceptance[guard, followup == "reask" and rounds > 0]},
        }
    )
    data = panel(
        "p",
        decisions,
        families=["one" if same_family else None] * len(decisions),
        evidence=[
            [{"source": f"doc{i}", "present": True}] if evidence else None
            for i in range(len(decisions))
        ],
    )
    record = decide(data, policy)
    judged = any(step.startswith("accept:") for step in record.path)
    backend = get_backend("tfidf")
    readings = read_panels(
        [Panel.model_validate(data)], backend, Thresholds.for_model("tfidf", None, 0.8)
    )
    assert judged_by_acceptance(policy, [Panel.model_validate(data)], readings) == [judged], (
        record.path
    )
