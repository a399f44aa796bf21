"""``dissensus.acceptance.calibrate`` refuses arguments it cannot take before it fits
anything, with an :class:`InputError` naming the argument: a negative ``min_accepted``
was a pydantic ``ValidationError`` after the whole fit, a quoted ``delta`` a
``TypeError``, golds of another length a bare ``zip()`` ``ValueError``.

It reads each stratum as every door reads a case's
(:func:`dissensus.acceptance.calibrate.stratum_of`): strata given as the raw ``meta``
values (``True``, ``7.0``, ``None``) were named by Python's ``str``, so a file written
that way accepted no case through any door (a case with ``true`` in the field is in
stratum ``'true'``, none of the file's), and ``None`` beside a number was a
``TypeError`` from sorting them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.acceptance import FeatureSettings, apply_acceptance, calibrate
from dissensus.acceptance.calibrate import stratum_of, uncovered_stratum
from dissensus.acceptance.prepare import prepare_cases
from dissensus.errors import InputError
from dissensus.states import get_backend
from dissensus.types import Panel

PANELS = Path(__file__).resolve().parent.parent / "examples" / "llmbar-swap.jsonl"
FS = FeatureSettings(similarity="tfidf")
STRATA_ARGS: dict[str, Any] = {"target": 0.8, "delta": 0.2, "min_accepted": 0, "settings": FS}


@pytest.fixture(scope="module")
def labelled() -> tuple[list[Any], list[str]]:
    lines = PANELS.read_text(encoding="utf-8").splitlines()[:40]
    panels = [Panel.model_validate_json(x) for x in lines]
    cases = prepare_cases(panels, settings=FS, backend=get_backend("tfidf"))
    return cases, [str(p.meta["gold"]) for p in panels]


def _refused(labelled: tuple[list[Any], list[str]], field: str, **kwargs: Any) -> InputError:
    cases, golds = labelled
    args: dict[str, Any] = {"target": 0.8, "delta": 0.2, "min_accepted": 10, "settings": FS}
    args.update(kwargs)
    with pytest.raises(InputError) as err:
        calibrate(args.pop("cases", cases), args.pop("golds", golds), **args)
    assert err.value.field == field, str(err.value)
    return err.value


def test_arguments_it_cannot_take_are_refused_naming_them(
    labelled: tuple[list[Any], list[str]],
) -> None:
    assert "non-negative integer, not -5" in str(
        _refused(labelled, "min_accepted", min_accepted=-5)
    )
    _refused(labelled, "min_accepted", min_accepted=True)
    _refused(labelled, "min_accepted", min_accepted=2.5)
    assert "not '0.1'" in str(_refused(labelled, "delta", delta="0.1"))
    _refused(labelled, "target", target=True)
    cases, golds = labelled
    err = _refused(labelled, "golds", golds=golds[:-1])
    assert str(err) == f"golds has {len(cases) - 1} entries for {len(cases)} cases"
    _refused(labelled, "keys", keys=["k"] * (len(cases) + 1))
    # What it can take still calibrates.
    assert calibrate(cases, golds, target=0.8, delta=0.2, min_accepted=0, settings=FS).sha256 == ""


@settings(max_examples=30, deadline=None, derandomize=True)
@given(
    level=st.one_of(
        st.floats(max_value=0.0),
        st.floats(min_value=1.0),
        st.just(math.nan),
    ),
    which=st.sampled_from(["target", "delta"]),
)
def test_a_level_outside_zero_one_is_refused(
    labelled: tuple[list[Any], list[str]], level: float, which: str
) -> None:
    assert "strictly between 0 and 1" in str(_refused(labelled, which, **{which: level}))


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("rule", {"rule": "bogus"}),
        ("family", {"family": []}),
        ("seed", {"seed": -1}),
        ("seed", {"seed": 2**32}),
        ("seed", {"seed": 1.5}),
        ("grid", {"grid": 0}),
        ("grid", {"grid": True}),
        ("judged.0", {"judged": ["no"] * 40}),
        ("judged", {"judged": [True]}),
    ],
)
def test_choices_it_cannot_take_are_refused_before_the_fit(
    labelled: tuple[list[Any], list[str]], field: str, kwargs: dict[str, Any]
) -> None:
    # An unknown rule was a pydantic ValidationError after the whole fit, an empty family
    # list a bare ValueError, a negative seed NumPy's ValueError, grid 0 a
    # ZeroDivisionError; judged marks of strings were read as true.
    err = _refused(labelled, field, **kwargs)
    assert field.split(".")[0] in str(err)


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
    acc = calibrate(cases, golds, strata=values, strata_field="part", **STRATA_ARGS)
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
                        strata_field="part", **STRATA_ARGS)  # fmt: skip
    assert spelled.strata == acc.strata and spelled.threshold == acc.threshold


@pytest.mark.parametrize("bad", [[1, 2], {"a": 1}, float("nan"), np.array([1])])
def test_a_value_that_names_no_stratum_is_refused_naming_it(
    labelled: tuple[list[Any], list[str]], bad: object
) -> None:
    cases, golds = labelled
    values: list[object] = ["a"] * len(cases)
    values[3] = bad
    with pytest.raises(InputError) as err:
        calibrate(cases, golds, strata=values, strata_field="part", **STRATA_ARGS)
    assert err.value.field == "strata.3"
    assert str(err.value).startswith("strata[3]: a stratum is a string, number or boolean")
