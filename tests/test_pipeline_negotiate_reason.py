"""The reason of a best-effort CONCORD step never shows a score below the floor as the
floor, nor a gap as 0 (two decimals made ``worst-off 0.7; below the floor: m1 0.70 (gap
0.00)`` of a utility 0.6999999999999999 against a floor of 0.7)."""

from __future__ import annotations

import asyncio
import math

from hypothesis import given
from hypothesis import strategies as st

from dissensus.pipeline.negotiate import below_floor, gap_text, run_concord
from dissensus.pipeline.policy import ConcordSettings
from dissensus.types import Panel


def _panel(utilities: dict[str, dict[str, float]]) -> Panel:
    return Panel.model_validate(
        {
            "id": "p",
            "meta": {"options": ["x", "y"], "utilities": utilities},
            "outputs": [{"agent": a, "decision": "x", "reasoning": "r"} for a in utilities],
        }
    )


def test_a_score_a_hair_below_the_floor_does_not_read_as_the_floor() -> None:
    panel = _panel({"m1": {"x": 0.6999999999999999, "y": 0.1}, "m2": {"x": 0.9, "y": 0.9}})
    step = asyncio.run(run_concord(panel, ConcordSettings(enabled=True, floor=0.7, rounds=2)))
    assert step.status == "best_effort" and step.decision == "x"
    assert step.summary == (
        "worst-off 0.6999999999999998; below the floor: m1 0.6999999999999998 (gap 1.1e-16)"
    )
    assert "0.70" not in step.summary and "0.00" not in step.summary


def test_an_ordinary_shortfall_keeps_two_decimals() -> None:
    panel = _panel({"m1": {"x": 0.5, "y": 0.1}, "m2": {"x": 0.9, "y": 0.9}})
    step = asyncio.run(run_concord(panel, ConcordSettings(enabled=True, floor=0.7, rounds=2)))
    assert step.summary == "worst-off 0.5; below the floor: m1 0.50 (gap 0.20)"


floors = st.floats(0.0, 1.0, exclude_min=True)


@given(floors, st.data())
def test_a_score_below_the_floor_reads_below_it(floor: float, data: st.DataObject) -> None:
    exact = data.draw(st.floats(0.0, floor, exclude_max=True))
    recorded = round(exact, 12) + 0.0  # what the record holds: it may round onto the floor
    gap = floor - exact
    shown = below_floor(recorded, gap, floor)
    assert float(shown) < floor
    if float(f"{exact:.2f}") < floor and recorded < floor:
        assert shown == f"{recorded:.2f}"  # two decimals wherever they tell it apart


@given(st.floats(0.0, 1.0, exclude_min=True))
def test_a_gap_never_reads_as_zero(gap: float) -> None:
    shown = gap_text(gap)
    assert float(shown) > 0 and math.isclose(float(shown), gap, rel_tol=0.5)
