"""The guarantee in words never rounds a target or a confidence up to a certainty.

A file calibrated at ``--delta 0.004`` promises its precision with probability 0.996;
written with two decimals and in whole percent that read "probability >= 1.00" and
"(100% confidence)", a certainty no finite calibration gives; a target of 0.995 read
"At least 100 of every 100 automatic decisions should be right".
"""

from __future__ import annotations

import pytest

from dissensus.acceptance.bound import percent_words, target_words
from dissensus.pipeline.learned import guarantee_sentence
from dissensus.types import AcceptanceFigures


def _figures(target: float, delta: float) -> AcceptanceFigures:
    return AcceptanceFigures(
        score=0.99,
        threshold=0.9,
        target_precision=target,
        delta=delta,
        calibration_n=1000,
        file_sha256="ab" * 32,
    )


def test_a_confidence_above_0_995_is_not_written_as_certainty() -> None:
    words = guarantee_sentence(_figures(0.8, 0.004))
    assert "100% confidence" not in words
    assert "probability >= 1.00" not in words
    assert (
        "At least 80 of every 100 automatic decisions should be right (99.6% confidence)" in words
    )
    assert "precision >= 0.80 with probability >= 0.996 if" in words


def test_a_target_above_0_995_is_not_written_as_every_answer_right() -> None:
    words = guarantee_sentence(_figures(0.995, 0.1))
    assert "100 of every 100" not in words
    assert (
        "At least 99.5 of every 100 automatic decisions should be right (90% confidence)" in words
    )
    assert "precision >= 0.995 with probability >= 0.90 if" in words


@pytest.mark.parametrize(
    ("value", "words", "percent"),
    [
        (0.9, "0.90", "90"),
        (0.95, "0.95", "95"),
        (0.975, "0.975", "97.5"),
        (0.996, "0.996", "99.6"),
        (0.999, "0.999", "99.9"),
    ],
)
def test_words_show_the_value_exactly(value: float, words: str, percent: str) -> None:
    assert target_words(value) == words
    assert percent_words(value) == percent
    assert percent_words(1 - (1 - value)) == percent


def test_the_file_states_its_guarantee_without_rounding_up() -> None:
    from pathlib import Path

    from dissensus.acceptance import load_acceptance

    example = Path(__file__).resolve().parents[1] / "examples" / "llmbar-accept.json"
    acc = load_acceptance(example).model_copy(update={"delta": 0.004, "threshold": 0.9})
    words = acc.guarantee()
    assert "probability >= 1.00" not in words
    assert (
        f"precision >= {target_words(acc.target_precision)} with probability >= 0.996 if" in words
    )
