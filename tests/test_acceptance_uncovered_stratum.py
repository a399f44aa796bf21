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


def test_a_library_file_with_strata_but_no_field_name_accepts_no_case() -> None:
    # Written by calibrate(strata=...) before strata_field was required: no door can read
    # a case's stratum, so no stratum's guarantee covers it (it committed every case).
    acc = _stratified(["A", "B"]).model_copy(update={"strata_field": None})
    for stratum in ("C", "A", None):
        verdict = apply_acceptance(acc, _case(), stratum=stratum)
        assert not verdict.accepted
        assert "names no strata field" in verdict.reason and "A, B" in verdict.reason


def test_a_stratified_file_refuses_a_case_given_no_stratum() -> None:
    """The reason names what is missing, the case's stratum, not the file's field: the
    file is fine and needs no recalibration."""
    verdict = apply_acceptance(_stratified(["A", "B"]), _case(), stratum=None)
    assert not verdict.accepted
    assert "no stratum was given for this case" in verdict.reason
    assert "'subset'" in verdict.reason and "recalibrate" not in verdict.reason


def test_calibrate_refuses_strata_without_a_field_name() -> None:
    from dissensus.acceptance import calibrate
    from dissensus.errors import InputError

    cases = [_case() for _ in range(4)]
    with pytest.raises(InputError, match="strata_field") as caught:
        calibrate(cases, ["1"] * 4, strata=["A", "A", "B", "B"])
    assert caught.value.field == "strata_field"


def _written_by(acc, version: str):  # type: ignore[no-untyped-def]
    return acc.model_copy(update={"libraries": {**acc.libraries, "dissensus": version}})


@pytest.mark.parametrize("version", ["0.3.1", "0.4.0", "1.0"])
def test_a_file_written_since_the_label_rule_keeps_distinct_strata_apart(version: str) -> None:
    # Its "True" and "None" are strata of their own (strings calibrated as such), not the
    # older spellings of true and a missing field: 50 of 50 such cases were committed.
    acc = _written_by(_stratified(["True", "None"]), version)
    for stratum in ("true", "(none)", "false"):
        assert not apply_acceptance(acc, _case(), stratum=stratum).accepted, stratum
    assert apply_acceptance(acc, _case(), stratum="True").accepted
    numbers = _written_by(_stratified(["7.0", "8.0"]), version)
    assert not apply_acceptance(numbers, _case(), stratum="7").accepted
    assert apply_acceptance(numbers, _case(), stratum="7.0").accepted


@pytest.mark.parametrize("version", ["0.1.0", "0.3.0", "unknown"])
def test_a_file_written_before_the_label_rule_still_finds_its_strata(version: str) -> None:
    acc = _written_by(_stratified(["True", "None", "7.0"]), version)
    for stratum in ("true", "(none)", "7"):
        assert apply_acceptance(acc, _case(), stratum=stratum).accepted, stratum


def test_the_monitor_spells_strata_as_the_file_does() -> None:
    from dissensus.acceptance.monitor import case_stratum

    old = {
        "strata_field": "g",
        "strata": [{"stratum": "True"}],
        "libraries": {"dissensus": "0.3.0"},
    }
    new = {**old, "libraries": {"dissensus": "0.3.1"}}
    assert case_stratum(old, {"g": True}) == "True"
    assert case_stratum(new, {"g": True}) == "true"


def test_a_file_records_the_version_that_wrote_it() -> None:
    from dissensus import __version__
    from dissensus.acceptance import library_versions
    from dissensus.acceptance.calibrate import names_strata_older

    assert library_versions()["dissensus"] == __version__
    assert not names_strata_older(library_versions())


def test_a_stratum_in_another_normalisation_is_shown_by_its_code_points() -> None:
    import unicodedata

    nfc, nfd = "Café", unicodedata.normalize("NFD", "Café")
    verdict = apply_acceptance(_stratified([nfc, "Other"]), _case(), stratum=nfd)
    assert not verdict.accepted  # refused still: not one stratum
    assert r"'Cafe\u0301'" in verdict.reason and r"'Caf\xe9'" in verdict.reason, verdict.reason
    assert "normalisation" in verdict.reason
    plain = apply_acceptance(_stratified([nfc, "Other"]), _case(), stratum="Tea")
    assert "normalisation" not in plain.reason
