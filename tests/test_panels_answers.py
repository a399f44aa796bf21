"""How a member's text becomes a decision: options or abstentions, never an error."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dissensus.convert.zeroeval import extract_answer
from dissensus.panels import normalise_label, read_answer, verdict_schema
from dissensus.pipeline.policy import PanelSettings

OPTIONS = ["yes", "no", "maybe"]


@given(
    decision=st.one_of(st.sampled_from(OPTIONS), st.text(max_size=12), st.integers()),
    spaces=st.sampled_from(["", " ", "  \t"]),
    upper=st.booleans(),
)
def test_structured_decisions_are_options_or_abstentions(
    decision: Any, spaces: str, upper: bool
) -> None:
    """A structured answer's decision is always one of the options, or an abstention."""
    shown = decision.upper() if upper and isinstance(decision, str) else decision
    if isinstance(shown, str):
        shown = spaces + shown + spaces
    text = json.dumps({"decision": shown, "reasoning": "because"})
    got = read_answer(text, PanelSettings(options=OPTIONS))
    assert got.decision is None or got.decision in OPTIONS
    if isinstance(decision, str) and decision in OPTIONS:
        assert got.decision == decision
    assert (got.decision is None) == (got.why is not None)


@given(text=st.text(max_size=200))
def test_any_text_reads_without_error(text: str) -> None:
    """No member text raises: it is a decision or an abstention with its text as reasoning;
    a blank text is an abstention with empty reasoning (nothing invented)."""
    for mode in ("structured", "number", "regex"):
        settings = PanelSettings(answer=mode, pattern=r"(\d+)" if mode == "regex" else None)  # type: ignore[arg-type]
        got = read_answer(text, settings)
        assert bool(got.reasoning) == bool(text.strip()), (mode, text, got)
        assert got.decision is None or got.decision.strip() == got.decision
        if not text.strip():
            assert got.decision is None and got.reasoning == ""


@given(text=st.text(max_size=200))
def test_number_answers_are_what_convert_zeroeval_reads(text: str) -> None:
    """The door's panel equals the converter's panel for the same texts."""
    got = read_answer(text, PanelSettings(answer="number"))
    assert (got.decision, got.reasoning) == extract_answer(text)


def test_regex_and_free_labels() -> None:
    settings = PanelSettings(answer="regex", pattern=r"VERDICT:\s*(\w+)")
    assert read_answer("long text... VERDICT:  Approve", settings).decision == "approve"
    assert read_answer("no verdict here", settings).decision is None
    free = PanelSettings()
    assert read_answer('{"decision": "  Send   Refund ", "reasoning": "r"}', free).decision == (
        "send refund"
    )
    assert normalise_label(" A\tB ") == "a b"


def test_schema_is_an_enum_when_options_are_given() -> None:
    schema = verdict_schema(PanelSettings(options=["yes", "no"]))
    assert schema["properties"]["decision"]["enum"] == ["yes", "no"]
    assert schema["required"] == ["decision", "reasoning"]
    assert "enum" not in verdict_schema(PanelSettings())["properties"]["decision"]


def test_one_answer_spelt_with_invisible_or_fullwidth_characters_is_one_decision() -> None:
    """Members answering ``yes`` with a zero-width space, a soft hyphen, a byte order mark
    or in fullwidth letters gave four decisions where there was one, a disagreement
    nobody had; with options set, they abstained. Letters of another script stay apart."""
    free = PanelSettings(answer="structured")
    spellings = ["yes", "yes\u200b", "y\u00ades", "\ufeffyes", "\uff59\uff45\uff53", "YES\u2060"]
    for spelling in spellings:
        text = json.dumps({"decision": spelling, "reasoning": "r"})
        assert read_answer(text, free).decision == "yes", spelling
        assert read_answer(text, PanelSettings(options=OPTIONS)).decision == "yes", spelling
    cyrillic = json.dumps({"decision": "y\u0435s", "reasoning": "r"})
    assert read_answer(cyrillic, free).decision == "y\u0435s"
    assert read_answer(cyrillic, PanelSettings(options=OPTIONS)).decision is None


@given(
    text=st.text(
        st.one_of(
            st.characters(),
            st.sampled_from("a\u0301\u030c\u200b\u00ad\ufeffJj\u01f0\u00df\uff21 \u00a0"),
        ),
        max_size=40,
    )
)
def test_the_normal_form_is_a_fixed_point(text: str) -> None:
    once = normalise_label(text)
    assert normalise_label(once) == once


def test_what_a_reader_tells_apart_stays_apart() -> None:
    """The first normal form folded everything NFKC folds: a member answering ``25``
    was recorded as the option ``2⁵``, and two different flags were one decision."""
    import pytest

    free = PanelSettings(answer="structured")

    def read(decision: str, settings: PanelSettings = free) -> str | None:
        return read_answer(json.dumps({"decision": decision, "reasoning": "r"}), settings).decision

    assert read("25", PanelSettings(options=["2\u2075", "25"])) == "25"
    assert read("2\u2075") != read("25") and read("\u2163") != read("iv")
    england = "\U0001f3f4\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f"
    scotland = "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"
    assert read(england) != read(scotland)
    # fillers that show as nothing are dropped like format characters; nothing left
    # is no decision
    for filler in ("\u2800", "\u034f", "\u3164", "\ufe0f"):
        assert read("yes" + filler) == "yes", repr(filler)
    assert read("\u2800") is None
    # options are checked in the same form, so none can never be chosen
    with pytest.raises(ValueError, match="distinct"):
        PanelSettings(options=["yes", "yes\u200b"])
    with pytest.raises(ValueError, match="non-empty"):
        PanelSettings(options=["\u200b", "no"])
