"""A reliability file's counts are checked when it is read.

The file carries no hash, so a hand edit was used as it stood: ``right`` above
``answers`` made a trust region precision 3.0 would back, and a cell of one number or a
margin score ``abc`` stopped ``decide`` with a Python traceback. Each is now one
:class:`ConfigError` naming the file, the agent's strata, the stratum and the score.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.errors import ConfigError
from dissensus.pipeline.trust_regions import CalibrationFile, load_calibration, trust_regions
from dissensus.signals import MarkerLexicon

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llmbar-reliability.json"


def _edited(tmp_path: Path, cell: Any, score: str = "0") -> tuple[Path, MarkerLexicon]:
    data = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    data = copy.deepcopy(data)
    data["agents"]["Falcon"]["strata"]["Natural"][score] = cell
    path = tmp_path / "rel.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path, MarkerLexicon(**data["lexicon"])


def test_the_shipped_file_loads() -> None:
    data = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    cal = load_calibration(EXAMPLE, MarkerLexicon(**data["lexicon"]))
    assert trust_regions(cal, target=0.9, min_support=10)


@pytest.mark.parametrize(
    ("cell", "score", "words"),
    [
        ([1, 5], "0", "counts [1, 5]: need 0 <= right <= answers"),
        ([4, -1], "0", "counts [4, -1]: need 0 <= right <= answers"),
        ([-3, -3], "0", "counts [-3, -3]"),
        ([4], "0", "expected [answers, right], two integers, got [4]"),
        ([4, 2, 1], "0", "two integers"),
        ([True, 1], "0", "two integers"),
        ([4.5, 1], "0", "two integers"),
        ("4,2", "0", "two integers"),
        ([1, 1], "abc", "margin score 'abc' is not an integer"),
    ],
)
def test_an_edited_count_is_refused_naming_the_file_and_the_cell(
    tmp_path: Path, cell: Any, score: str, words: str
) -> None:
    path, lexicon = _edited(tmp_path, cell, score)
    with pytest.raises(ConfigError) as caught:
        load_calibration(path, lexicon)
    text = str(caught.value)
    assert str(path) in text
    assert "agents.Falcon.strata" in text
    assert f"stratum 'Natural', score {score}" in text
    assert words in text


@settings(max_examples=50, deadline=None, derandomize=True)
@given(n=st.integers(0, 10**6), right=st.integers(-5, 10**6 + 5))
def test_a_cell_loads_exactly_when_its_counts_can_be_counts(n: int, right: int) -> None:
    data = {"agents": {"a": {"strata": {"s": {"0": [n, right]}}}}}
    if 0 <= right <= n:
        regions = trust_regions(CalibrationFile.model_validate(data), target=0.9, min_support=1)
        assert regions["a"].stable_precision <= 1.0
    else:
        with pytest.raises(ValueError, match="need 0 <= right <= answers"):
            CalibrationFile.model_validate(data)


def test_an_acceptance_file_given_as_a_reliability_file_is_named_for_what_it_is(
    tmp_path: Path,
) -> None:
    # It failed on its first field: "field 'settings': Extra inputs are not permitted".
    acceptance = Path(__file__).resolve().parents[1] / "examples" / "llmbar-accept.json"
    with pytest.raises(ConfigError) as caught:
        load_calibration(acceptance, MarkerLexicon())
    text = str(caught.value)
    assert caught.value.field == "format"
    assert "format 'dissensus.acceptance/2', expected 'dissensus.reliability/1'" in text
    assert "goes in acceptance.model" in text and "Extra inputs" not in text
    other = tmp_path / "other.json"
    other.write_text('{"format": "something/9", "agents": {}}', encoding="utf-8")
    with pytest.raises(ConfigError, match="not a reliability calibration: format 'something/9'"):
        load_calibration(other, MarkerLexicon())


def _hand_edited() -> dict[str, Any]:
    data = copy.deepcopy(json.loads(EXAMPLE.read_text(encoding="utf-8")))
    data["agents"]["Falcon"]["strata"]["Natural"]["-7"] = [4, 12]  # right above answers
    return data


def test_a_run_journalled_with_a_hand_edited_file_reads_back() -> None:
    # Started before counts were checked: runs show / runs resume must still read it.
    from dissensus.pipeline.spec import RunSpec

    spec = RunSpec.from_started({"calibration": _hand_edited()})
    assert spec.calibration is not None
    assert spec.calibration.agents["Falcon"].strata["Natural"]["-7"] == [4, 12]


def test_a_journalled_spec_names_the_calibration_field_in_full() -> None:
    from dissensus.pipeline.spec import RunSpec

    data = _hand_edited()
    data["agents"]["Falcon"]["strata"]["Natural"]["-7"] = "many"  # not even a list
    with pytest.raises(ConfigError) as caught:
        RunSpec.from_started({"calibration": data})
    assert caught.value.field is not None
    assert caught.value.field.startswith("calibration.agents.Falcon.strata"), caught.value.field
    assert "Value error" not in str(caught.value)


def test_the_library_door_still_checks_the_counts_without_pydantic_words() -> None:
    from dissensus.pipeline import _model_or_data

    with pytest.raises(ConfigError) as caught:
        _model_or_data(CalibrationFile, _hand_edited(), "calibration")
    said = str(caught.value)
    assert "need 0 <= right <= answers" in said and "Value error" not in said, said


@pytest.mark.parametrize("score", [" -7", "-07", "1_0", "+3", "-0", "7 "])
def test_a_score_spelt_otherwise_than_an_integer_is_refused(tmp_path: Path, score: str) -> None:
    # int() reads each of these, and {"-7", "-07", " -7"} summed into one score's counts.
    path, lexicon = _edited(tmp_path, [3, 3], score=score)
    with pytest.raises(ConfigError) as caught:
        load_calibration(path, lexicon)
    said = str(caught.value)
    assert str(path) in said and "Natural" in said and repr(score) in said, said
    assert caught.value.field == "agents.Falcon.strata", caught.value.field


def test_a_journalled_file_with_such_scores_still_reads_back() -> None:
    from dissensus.pipeline.spec import RunSpec

    data = copy.deepcopy(json.loads(EXAMPLE.read_text(encoding="utf-8")))
    data["agents"]["Falcon"]["strata"]["Natural"]["-07"] = [3, 3]
    spec = RunSpec.from_started({"calibration": data})
    assert spec.calibration is not None
    assert spec.calibration.agents["Falcon"].strata["Natural"]["-07"] == [3, 3]
