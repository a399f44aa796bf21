"""The library's ``calibrate()`` reads golds as decisions, whatever their type.

Golds taken from JSON or a data frame are often numbers (``[1, 2, ...]`` or a NumPy
array); compared with the candidates' string labels, every case counted wrong and the
file accepted nothing, with no word of why. They are now read as ``calibrate-acceptance``
reads ``meta.gold`` (``2``, ``2.0`` -> ``"2"``), and a gold naming no decision is an
error naming it.
"""

from __future__ import annotations

import numpy as np
import pytest

from dissensus.acceptance import Candidate, calibrate
from dissensus.errors import InputError


def _cases(n: int = 240, seed: int = 0) -> tuple[list[list[Candidate]], list[str]]:
    rng = np.random.default_rng(seed)
    cases: list[list[Candidate]] = []
    golds: list[str] = []
    for _ in range(n):
        share = float(rng.choice([0.5, 0.67, 0.83, 1.0]))
        lead, other = ("1", "2") if rng.random() < 0.5 else ("2", "1")
        right = rng.random() < 0.55 + 0.45 * share
        golds.append(lead if right else other)
        cases.append(
            [
                Candidate(label=lead, features={"cand.share": share, "cand.plurality": 1.0}),
                Candidate(label=other, features={"cand.share": 1 - share, "cand.plurality": 0.0}),
            ]
        )
    return cases, golds


def test_numeric_golds_calibrate_as_their_labels() -> None:
    cases, golds = _cases()
    as_text = calibrate(cases, golds, family="learned")
    assert as_text.threshold is not None
    for numeric in ([int(g) for g in golds], [float(g) for g in golds], np.array(golds, dtype=int)):
        acc = calibrate(cases, numeric, family="learned")  # type: ignore[arg-type]
        assert acc.threshold == as_text.threshold
        assert acc.calibration_correct == as_text.calibration_correct


@pytest.mark.parametrize(("bad", "words"), [(None, "missing"), ("  ", "blank"), ([1], "a list")])
def test_a_gold_that_names_no_decision_is_refused_naming_it(bad: object, words: str) -> None:
    cases, golds = _cases(n=40)
    given: list[object] = list(golds)
    given[7] = bad
    with pytest.raises(InputError) as caught:
        calibrate(cases, given)  # type: ignore[arg-type]
    assert "golds[7]" in str(caught.value) and words in str(caught.value)
    assert caught.value.field == "golds.7"


@pytest.mark.parametrize("bad", [np.array([2]), np.array([[2]]), np.array(["2"])])
def test_a_one_element_array_gold_is_refused_as_the_list_is(bad: object) -> None:
    # np.array([2]).item() is 2: the array read as "2" where the list [2] was refused.
    cases, golds = _cases(n=40)
    given: list[object] = list(golds)
    given[3] = bad
    with pytest.raises(InputError) as caught:
        calibrate(cases, given)  # type: ignore[arg-type]
    assert "golds[3]" in str(caught.value) and "a list" in str(caught.value)


def test_a_zero_d_array_gold_is_its_value() -> None:
    cases, golds = _cases(n=240)
    given: list[object] = [np.array(int(g)) for g in golds]
    acc = calibrate(cases, given, family="learned")  # type: ignore[arg-type]
    assert acc.threshold == calibrate(cases, golds, family="learned").threshold
