"""The guarantee in words never rounds a target or a confidence up to a certainty.

A file calibrated at ``--delta 0.004`` promises its precision with probability 0.996;
written with two decimals and in whole percent that read "probability >= 1.00" and
"(100% confidence)", a certainty no finite calibration gives; a target of 0.995 read
"At least 100 of every 100 automatic decisions should be right".
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_a_tiny_delta_is_not_written_as_certainty() -> None:
    # The library takes delta=1e-7 (the command line stops at 0.001): six digits rounded
    # to nearest said "probability >= 1" and "(100% confidence)".
    assert target_words(1 - 1e-7) == "0.999999"
    assert percent_words(1 - 1e-7) == "99.9999"
    words = guarantee_sentence(_figures(0.5, 1e-7))
    assert "(99.9999% confidence)" in words and "probability >= 0.999999 " in words, words
    assert "100%" not in words and ">= 1 " not in words, words


def test_a_complement_is_written_as_the_delta_given() -> None:
    # 1 - 0.07 is 0.9299999999999999 as a float; the guarantee says 0.93, not 0.929999.
    assert "probability >= 0.93 " in guarantee_sentence(_figures(0.9, 0.07))


def test_the_accept_reason_never_rounds_the_target_up() -> None:
    from dissensus.acceptance import Candidate, apply_acceptance, load_acceptance
    from dissensus.acceptance.bound import floor_words

    assert floor_words(0.9) == "0.9" and floor_words(1 - 1e-7) == "0.999999"
    example = Path(__file__).resolve().parents[1] / "examples" / "llmbar-accept.json"
    acc = load_acceptance(example).model_copy(
        update={"threshold": 0.0, "target_precision": 1 - 1e-7}
    )
    case = [Candidate(label="1", features={"cand.share": 1.0}), Candidate(label="2", features={})]
    verdict = apply_acceptance(acc, case)
    assert verdict.accepted and "(precision >= 0.999999 at delta" in verdict.reason, verdict.reason


@settings(max_examples=400, derandomize=True, deadline=None)
@given(st.floats(min_value=0.0, max_value=1.0, exclude_min=True, exclude_max=True))
def test_words_are_never_above_the_share(share: float) -> None:
    exact = Decimal(repr(share))
    for words, scale in ((target_words(share), 1), (percent_words(share), 100)):
        shown = Decimal(words)
        assert shown <= exact * scale and shown < scale, (share, words)
