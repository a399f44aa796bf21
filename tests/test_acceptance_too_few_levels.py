"""The warning that no threshold can be tested counts the cases at the level tested.

Under the Bonferroni rule each competing family tests at its share of delta, and a
smaller level needs more accepted cases: 414 judged GSM8K cases at target 0.99 (388
would do at delta 0.1, the learned family's 0.09 needs 546) got no warning, and the
file's reason read as if the scores had failed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dissensus.acceptance import load_acceptance
from dissensus.acceptance.bound import fewest_tested
from dissensus.acceptance.families import FamilyFigures
from dissensus.cli.acceptance import _warn

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llmbar-accept.json"


def _nothing(n: int, levels: dict[str, float], rule: str = "bonferroni"):  # type: ignore[no-untyped-def]
    families = [
        FamilyFigures(
            family=name,
            competing=True,
            eligible=True,
            delta=level,
            threshold=None,
            accepted=0,
            correct=0,
            cases=n,
        )
        for name, level in levels.items()
    ]
    return load_acceptance(EXAMPLE).model_copy(
        update={
            "threshold": None,
            "calibration_n": n,
            "families": families,
            "strata": [],
            "family_rule": rule,
        }
    )


def _warning(capsys: pytest.CaptureFixture[str], acc, target: float) -> str:  # type: ignore[no-untyped-def]
    _warn(acc, None, acc.calibration_n, target=target, delta=0.1, min_accepted=30)
    return " ".join(capsys.readouterr().err.split())


def test_cases_enough_at_delta_but_not_at_the_share_tested_are_warned(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert fewest_tested(0.99, 0.1) == 388 and fewest_tested(0.99, 0.09) == 546
    acc = _nothing(414, {"learned": 0.09, "votes_both": 0.01})
    words = _warning(capsys, acc, 0.99)
    assert "414 calibration case(s) reach acceptance, fewer than the 546" in words
    assert "delta 0.1, of which the competing score families test at most 0.09" in words


def test_enough_cases_at_the_share_tested_are_not_warned(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _warning(capsys, _nothing(600, {"learned": 0.09, "votes_both": 0.01}), 0.99) == ""


def test_the_split_rule_tests_at_delta(capsys: pytest.CaptureFixture[str]) -> None:
    acc = _nothing(300, {"learned": 0.1, "votes_both": 0.1}, rule="split")
    words = _warning(capsys, acc, 0.99)
    assert "fewer than the 388" in words and "delta 0.1, min accepted 30" in words
