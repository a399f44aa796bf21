"""ReliabilityFit: hand-checkable figures, beta* search, reliabilities, real LLMBar panels."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from dissensus.errors import InputError
from dissensus.guard import ReliabilitySettings, fit_reliability, guard_cases
from dissensus.guard.metrics import ece, figures
from dissensus.guard.reliability import ReliabilityFit
from dissensus.types import Vote, VoteCase


def _case(i: int, answers: list[str], gold: str, present: bool = False) -> VoteCase:
    votes = [
        Vote(
            agent=f"a{j}",
            answer=x,
            evidence_source=f"s{j}" if present else "parametric",
            evidence_present=present,
        )
        for j, x in enumerate(answers)
    ]
    return VoteCase(id=str(i), votes=votes, gold=gold)


def test_metrics_hand_checked() -> None:
    import numpy as np

    conf = np.array([0.9, 0.9, 0.6, 0.6])
    hit = np.array([True, False, True, True])
    f = figures(conf, hit)
    assert (
        f.accuracy == pytest.approx(0.75)
        and f.mean_confidence == pytest.approx(0.75)
        and f.gap == pytest.approx(0.0)
    )
    assert ece(conf, hit) == pytest.approx(0.5 * 0.4 + 0.5 * 0.4)
    assert figures(conf[:0], hit[:0]).accuracy is None


def test_strata_reliability_and_correlation() -> None:
    cases = [_case(i, ["x", "x", "y"], "x", present=i % 2 == 0) for i in range(20)]
    cases += [_case(20 + i, ["y", "y", "x"], "x") for i in range(10)]
    cal = fit_reliability(cases, ReliabilitySettings(min_stratum_cases=5))
    by = {s.stratum: s for s in cal.strata}
    assert by["present"].cases == 10 and by["absent"].cases == 20 and by["all"].cases == 30
    assert by["absent"].majority.accuracy == pytest.approx(0.5)
    assert by["absent"].majority.mean_confidence == pytest.approx(2 / 3)
    a0 = cal.agent("a0")
    assert a0 is not None and a0.accuracy == pytest.approx(20 / 30)
    # a0 and a1 err together on every case: their error correlation is 1.
    assert cal.correlation("a0", "a1") == pytest.approx(1.0)
    assert cal.correlation("a0", "a2") == pytest.approx(-1.0)
    # n_eff clips negative correlations to 0: mean of (1, 0, 0) -> 1/3.
    assert cal.mean_error_correlation == pytest.approx(1 / 3)
    assert cal.n_eff == pytest.approx(3 / (1 + 2 / 3))
    # Majority is wrong on half of the absent stratum at 2/3 vote share: beta* = 0,
    # while the correlated-hallucination study's accuracy-only rule would allow every
    # beta (two answers).
    assert cal.beta_star == 0.0 and cal.beta_star_accuracy == max(cal.settings.beta_grid)
    # a2 is right exactly where the majority is wrong (0.5 each on the absent stratum),
    # a0 and a1 vote with the majority: no voter beats majority, so none is recommended.
    assert cal.verifier is None


def test_beta_star_unmeasured_without_absent_stratum() -> None:
    cases = [_case(i, ["x", "x", "y"], "x", present=True) for i in range(20)]
    cal = fit_reliability(cases)
    assert cal.beta_star is None and cal.beta_stratum_cases == 0
    d = guard_cases(cases[:1], cal)[0]
    assert d.refusal is not None and d.refusal.invariant == 3
    assert "not measured" in d.refusal.message


def test_calibration_round_trips_as_json() -> None:
    cases = [_case(i, ["x", "y", "x"][: 2 + i % 2], "x") for i in range(30)]
    cal = fit_reliability(cases)
    again = type(cal).model_validate_json(cal.model_dump_json())
    assert again == cal


def test_calibrate_needs_labels() -> None:
    with pytest.raises(InputError):
        fit_reliability([VoteCase(id="1", votes=_case(0, ["x", "y"], "x").votes)])


def test_llmbar_guard_meets_target(shared_data: Path) -> None:
    import importlib.util
    import sys

    path = Path(__file__).resolve().parent.parent / "evaluation" / "guard_llmbar.py"
    spec = importlib.util.spec_from_file_location("guard_llmbar", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["guard_llmbar"] = module
    spec.loader.exec_module(module)
    from dissensus.convert.llmbar import iter_llmbar_votes

    rows = module.evaluate(list(iter_llmbar_votes(shared_data / "llmbar", "CoT")), 1.5)
    assert len(rows) == 3
    for r in rows:
        m = {x["method"]: x for x in r["methods"]}
        assert r["refusals"] == {"invariant 1": r["cases"]}  # judges retrieve nothing
        if r["test"].startswith("Adversarial"):
            assert m["guarded"]["gap"] <= 0.10
            assert m["guarded"]["gap"] < m["majority"]["gap"] < m["consensus(beta=1.5)"]["gap"]
        else:
            assert m["guarded"]["accuracy"] >= m["majority"]["accuracy"]


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d.update(error_correlation=d["error_correlation"][:2]), "error_correlation"),
        (lambda d: d.update(error_correlation=[]), "error_correlation"),
        (lambda d: d["error_correlation"][0].__setitem__(1, 5.0), "error_correlation"),
        (lambda d: d["agents"].append(d["agents"][0]), "appears more than once"),
        (lambda d: d["agents"][0].update(reliability=2.0), "agents.0.reliability"),
        (lambda d: d["agents"][0].update(votes=-1), "agents.0.votes"),
        (lambda d: d.update(n_eff=-5), "n_eff"),
        (lambda d: d.update(pooled_reliability=2), "pooled_reliability"),
        (lambda d: d.update(version=9), "version"),
        (lambda d: d.update(beta_star=-3), "beta_star\n  Input should be greater than or equal"),
        (lambda d: d.update(beta_star=float("inf")), "beta_star\n  Input should be a finite"),
        (lambda d: d.update(beta_star_accuracy=-0.25), "beta_star_accuracy\n"),
        (lambda d: d["settings"]["beta_grid"].append(-1), "settings.beta_grid.33\n"),
    ],
)
def test_a_calibration_file_edited_out_of_shape_is_refused_naming_it(
    edit: Callable[[dict[str, Any]], None], field: str
) -> None:
    """A correlation matrix short of the agents crashed vote, decide and
    calibrate-acceptance with an IndexError; impossible figures were used as given."""
    cases = [_case(i, ["x", "x", "y"], "x", present=i % 2 == 0) for i in range(20)]
    data = json.loads(
        fit_reliability(cases, ReliabilitySettings(min_stratum_cases=5)).model_dump_json()
    )
    edit(data)
    with pytest.raises(ValidationError, match=re.escape(field)):
        ReliabilityFit.model_validate(data)


def test_a_beta_grid_with_a_negative_beta_is_refused_before_fitting() -> None:
    """A grid of negative betas made a beta* below 0, which invariant 3 reads as 0."""
    with pytest.raises(ValidationError, match=r"beta_grid\.0\n  Input should be greater"):
        ReliabilitySettings(beta_grid=[-1.0, 0.0])


@st.composite
def _absent_strata(draw: st.DrawFn) -> list[VoteCase]:
    """10 to 24 labelled cases of 3 to 5 voters without evidence, answers among three."""
    n_agents = draw(st.integers(3, 5))
    cases = []
    for i in range(draw(st.integers(10, 24))):
        gold = draw(st.sampled_from("abc"))
        answers = [draw(st.sampled_from("abc")) for _ in range(n_agents)]
        cases.append(_case(i, answers, gold))
    return cases


@settings(max_examples=150, deadline=None)
@given(
    _absent_strata(),
    st.floats(0.0, 1.0),
    st.lists(
        st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0]),
        min_size=1,
        max_size=9,
        unique=True,
    ),
)
def test_beta_star_is_the_end_of_the_safe_prefix_of_the_grid(
    cases: list[VoteCase], tolerance: float, grid: list[float]
) -> None:
    """beta* is the largest beta such that it *and every smaller beta of the grid* lose no
    accuracy against majority and keep the mean confidence within the tolerance of the
    majority's accuracy; beta_star_accuracy the same for the accuracy condition alone."""
    cal = fit_reliability(
        cases, ReliabilitySettings(beta_grid=grid, overconfidence_tolerance=tolerance)
    )
    points = cal.beta_search
    assert [p.beta for p in points] == sorted(grid)
    for p in points:
        accurate = p.accuracy_delta >= -1e-12
        assert p.safe == (p.beta == 0 or (accurate and p.overshoot <= tolerance))

    def prefix_end(ok: list[bool]) -> float:
        end = 0.0
        for p, good in zip(points, ok, strict=True):
            if not good:
                break
            end = p.beta
        return end

    assert cal.beta_star == prefix_end([p.safe for p in points])
    assert cal.beta_star_accuracy == prefix_end([p.accuracy_delta >= -1e-12 for p in points])


def test_without_an_absent_case_the_verifier_is_measured_on_all_cases() -> None:
    """A labelled set whose voters always had evidence has no absent stratum: the
    verifier is then measured on all cases (agent a0 always right, a1 and a2 wrong
    together on every third case, so the majority is right on two thirds)."""
    cases = [
        _case(i, ["y", "n" if i % 3 == 0 else "y", "n" if i % 3 == 0 else "y"], "y", present=True)
        for i in range(30)
    ]
    cal = fit_reliability(cases)
    assert cal.beta_stratum_cases == 0 and cal.beta_star is None
    assert cal.verifier is not None and cal.verifier.agent == "a0"
    assert cal.verifier.votes == 30 and cal.verifier.accuracy == 1.0
