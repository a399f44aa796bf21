"""The library's ``calibrate(strata=...)`` reads each stratum as every door reads a
case's (:func:`dissensus.acceptance.calibrate.stratum_of`): strata given as the raw
``meta`` values (``True``, ``7.0``, ``None``) were named by Python's ``str`` (``True``,
``7.0``, ``None``), so a file written that way accepted no case through any door (a
case with ``true`` in the field is in stratum ``'true'``, none of the file's), and
``None`` beside a number was a ``TypeError`` from sorting them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dissensus.acceptance import FeatureSettings, apply_acceptance, calibrate
from dissensus.acceptance.calibrate import stratum_of, uncovered_stratum
from dissensus.acceptance.prepare import prepare_cases
from dissensus.errors import InputError
from dissensus.states import get_backend
from dissensus.types import Panel

PANELS = Path(__file__).resolve().parent.parent / "examples" / "llmbar-swap.jsonl"
FS = FeatureSettings(similarity="tfidf")
ARGS: dict[str, Any] = {"target": 0.8, "delta": 0.2, "min_accepted": 0, "settings": FS}


@pytest.fixture(scope="module")
def labelled() -> tuple[list[Any], list[str]]:
    lines = PANELS.read_text(encoding="utf-8").splitlines()[:80]
    panels = [Panel.model_validate_json(x) for x in lines]
    cases = prepare_cases(panels, settings=FS, backend=get_backend("tfidf"))
    return cases, [str(p.meta["gold"]) for p in panels]


@pytest.mark.parametrize(
    ("raw", "names"),
    [
        ([True, False], ["false", "true"]),
        ([7.0, None], ["(none)", "7"]),
        ([np.int64(3), "a"], ["3", "a"]),
    ],
)
def test_strata_are_read_as_the_doors_read_a_case(
    labelled: tuple[list[Any], list[str]], raw: list[object], names: list[str]
) -> None:
    cases, golds = labelled
    values = [raw[k % 2] for k in range(len(cases))]
    acc = calibrate(cases, golds, strata=values, strata_field="part", **ARGS)
    assert [s.stratum for s in acc.strata] == names
    # Every calibrated value, read from a case's meta, is one of the file's strata.
    for value in raw:
        plain = value.item() if isinstance(value, np.generic) else value
        stratum = stratum_of({"part": plain}, "part")
        assert uncovered_stratum(acc, stratum) is None, stratum
        verdict = apply_acceptance(acc, cases[0], stratum=stratum)
        assert "none of the" not in verdict.reason
    # The same strata written as strings make the same file.
    spelled = calibrate(cases, golds, strata=[str(stratum_of({"part": v}, "part")) for v in values],
                        strata_field="part", **ARGS)  # fmt: skip
    assert spelled.strata == acc.strata and spelled.threshold == acc.threshold


@pytest.mark.parametrize("bad", [[1, 2], {"a": 1}, float("nan"), np.array([1])])
def test_a_value_that_names_no_stratum_is_refused_naming_it(
    labelled: tuple[list[Any], list[str]], bad: object
) -> None:
    cases, golds = labelled
    values: list[object] = ["a"] * len(cases)
    values[3] = bad
    with pytest.raises(InputError) as err:
        calibrate(cases, golds, strata=values, strata_field="part", **ARGS)
    assert err.value.field == "strata.3"
    assert str(err.value).startswith("strata[3]: a stratum is a string, number or boolean")
