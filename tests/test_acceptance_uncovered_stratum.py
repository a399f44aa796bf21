"""A stratified acceptance file accepts no case of a stratum it was not calibrated on.

With ``--strata``, the threshold passed in every stratum calibrated, and the guarantee
is one per stratum: it says nothing of another. A file calibrated on LLMBar's two
adversarial subsets committed 88 of the 100 Natural cases, a stratum it never saw.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dissensus.acceptance import Candidate, apply_acceptance, load_acceptance
from dissensus.acceptance.bound import StratumFigures

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llmbar-accept.json"


def _stratified(names: list[str]):  # type: ignore[no-untyped-def]
    acc = load_acceptance(EXAMPLE)
    strata = [
        StratumFigures(stratum=n, n=100, accepted=90, correct=88, error_upper=0.05, threshold=0.0)
        for n in names
    ]
    # Threshold 0: every scored case would pass it; only the stratum can refuse.
    return acc.model_copy(update={"threshold": 0.0, "strata_field": "subset", "strata": strata})


def _case() -> list[Candidate]:
    return [
        Candidate(label="1", features={"cand.share": 1.0, "cand.plurality": 1.0}),
        Candidate(label="2", features={"cand.share": 0.0}),
    ]


@pytest.mark.parametrize("stratum", ["Natural", "(none)", "adversarial/gptinst"])
def test_a_case_of_a_stratum_the_file_never_saw_is_not_accepted(stratum: str) -> None:
    acc = _stratified(["Adversarial/GPTInst", "Adversarial/Neighbor"])
    verdict = apply_acceptance(acc, _case(), stratum=stratum)
    assert not verdict.accepted
    assert f"stratum {stratum!r} ('subset') is none of the 2 strata" in verdict.reason
    assert "Adversarial/GPTInst, Adversarial/Neighbor" in verdict.reason


@pytest.mark.parametrize("stratum", ["Adversarial/GPTInst", "Adversarial/Neighbor"])
def test_a_case_of_a_calibrated_stratum_is_judged_as_before(stratum: str) -> None:
    acc = _stratified(["Adversarial/GPTInst", "Adversarial/Neighbor"])
    assert apply_acceptance(acc, _case(), stratum=stratum).accepted


def test_a_stratum_a_file_named_the_older_way_is_still_covered() -> None:
    # Files written before stratum values were read as labels named True "True".
    acc = _stratified(["True", "None"])
    assert apply_acceptance(acc, _case(), stratum="true").accepted
    assert apply_acceptance(acc, _case(), stratum="(none)").accepted
    assert not apply_acceptance(acc, _case(), stratum="false").accepted


def test_a_file_without_strata_judges_every_case() -> None:
    acc = load_acceptance(EXAMPLE).model_copy(update={"threshold": 0.0})
    assert apply_acceptance(acc, _case(), stratum=None).accepted


def test_a_library_file_with_strata_but_no_field_name_refuses_too() -> None:
    # calibrate(strata=...) without strata_field: the strata are still the file's.
    acc = _stratified(["A", "B"]).model_copy(update={"strata_field": None})
    verdict = apply_acceptance(acc, _case(), stratum="C")
    assert not verdict.accepted
    assert "stratum 'C' is none of the 2 strata" in verdict.reason
    assert apply_acceptance(acc, _case(), stratum="A").accepted
