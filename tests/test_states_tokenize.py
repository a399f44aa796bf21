"""TF-IDF tokens: the ASCII byte-table path finds exactly the pattern's tokens."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.states.lexical import tokenize

_PATTERN = re.compile(r"\b\w\w+\b", re.UNICODE)


@settings(max_examples=500, deadline=None)
@given(st.text(st.characters(max_codepoint=127), max_size=200))
def test_ascii_text(text: str) -> None:
    assert text.isascii()
    assert tokenize(text) == _PATTERN.findall(text.lower())


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120))
def test_any_text(text: str) -> None:
    assert tokenize(text) == _PATTERN.findall(text.lower())


def test_examples() -> None:
    text = "Output (a) is BETTER: it_cites 2 sources,\tx y\nzz; Ünïcode ДА ok"
    assert tokenize(text) == _PATTERN.findall(text.lower())
    assert tokenize("A b CD_e1 f") == ["cd_e1"]
