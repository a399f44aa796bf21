"""What the review pages show of untrusted text (:func:`dissensus.quoting.visible` for a
short field, :func:`dissensus.quoting.visible_text` for a long text shown as lines).

Every character that shows as nothing is written escaped, as the command line writes an
escape: every control and format character, every Default_Ignorable_Code_Point, the
line and paragraph separators. A long text keeps its line breaks and tabs, and the
joiners and emoji presentation selectors prose needs; a short field keeps none of them,
so two different options or agent ids never read the same.
"""

from __future__ import annotations

import re
import sys
import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.quoting import INVISIBLE, INVISIBLE_IN_TEXT, visible, visible_text

RANGES = [
    (0x0000, 0x001F),
    (0x007F, 0x009F),
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
]
"""The characters that show as nothing a page must escape (Default_Ignorable_Code_Point
and the controls)."""
LISTED = [chr(c) for lo, hi in RANGES for c in range(lo, hi + 1)]
KEPT_IN_TEXT = "\t\n\r\u200c\u200d\ufe0e\ufe0f"
ORDINARY = [
    "approve",
    "Output (a)",
    "مرحبا بالعالم",  # Arabic
    "שלום עולם",  # Hebrew
    "日本語のテキスト",
    "नमस्ते",  # Devanagari (its combining signs are no format characters)
    "👍 ✅ 🎉",
    'naïve café, 1 + 1 = 2; a\\b <x> & "q"',
    "",
]
_ESCAPE = re.compile(r"\\(\\|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|n|t)")


def _unescape(shown: str) -> str:
    """The text ``shown`` escapes, read from the left (a backslash before anything that
    is no escape is the text's own)."""

    def one(m: re.Match[str]) -> str:
        code = m.group(1)
        return {"n": "\n", "t": "\t", "\\": "\\"}.get(code) or chr(int(code[1:], 16))

    return _ESCAPE.sub(one, shown)


def test_every_listed_character_is_escaped_in_a_short_field() -> None:
    for char in LISTED:
        shown = visible(f"appro{char}ve")
        assert char not in shown, hex(ord(char))
        code = ord(char)
        form = (
            {"\n": "\\n", "\t": "\\t"}.get(char)
            or (f"\\x{code:02x}" if code < 0x100 else None)
            or (f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        )
        assert shown == f"appro{form}ve", (hex(code), shown)


def test_a_long_text_escapes_them_too_but_line_breaks_tabs_joiners_and_emoji_selectors() -> None:
    for char in LISTED:
        shown = visible_text(f"appro{char}ve")
        if char in KEPT_IN_TEXT:
            assert shown == f"appro{char}ve", hex(ord(char))
        else:
            assert char not in shown and shown == f"appro{visible(char)}ve", hex(ord(char))
    assert visible_text("a\r\nb\tc") == "a\r\nb\tc"
    assert visible("a\r\nb\tc") == "a\\x0d\\nb\\tc"


def test_bidi_controls_and_marks_are_escaped_everywhere() -> None:
    for char in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c":
        assert char not in visible(char) and char not in visible_text(char)
    assert visible("I pick \u202eyes") == "I pick \\u202eyes"


def test_joiners_and_emoji_selectors_are_escaped_in_short_fields_kept_in_long_texts() -> None:
    family = "\U0001f469\u200d\U0001f4bb"  # woman technologist
    persian = "می\u200cخواهم"  # with a ZWNJ
    warning = "\u26a0\ufe0f"
    for text in (family, persian, warning):
        assert visible_text(text) == text
        assert visible(text) != text and not INVISIBLE.search(visible(text))
    assert visible(family) == "\U0001f469\\u200d\U0001f4bb"


def test_a_typed_escape_does_not_read_as_an_escaped_character() -> None:
    """``approve\\u200e`` typed by an agent and ``approve`` + U+200E were both shown
    ``approve\\u200e``; the typed backslash is now shown doubled, on the page and the
    command line alike, and a backslash that starts no escape is shown as it is."""
    from dissensus.quoting import one_line

    typed, hidden = "approve\\u200e", "approve\u200e"
    assert visible(hidden) == one_line(hidden) == "approve\\u200e"
    assert visible(typed) == one_line(typed) == "approve\\\\u200e"
    assert visible("a\\\u200e") == "a\\\\\\u200e"  # a backslash before an escaped mark
    assert visible("C:\\data\\x.jsonl") == "C:\\data\\\\x.jsonl"
    assert visible("C:\\data") == "C:\\data"


def test_ordinary_text_is_untouched() -> None:
    for text in ORDINARY:
        assert visible(text) == text
        assert visible_text(text) == text
    assert visible(42) == "42"


def test_every_control_and_format_character_of_unicode_is_escaped() -> None:
    """The pattern is written out; every Cc, Cf, Zl and Zp character of the Unicode
    database this Python carries is in it."""
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            assert INVISIBLE.fullmatch(char), hex(code)
            assert char in KEPT_IN_TEXT or INVISIBLE_IN_TEXT.fullmatch(char), hex(code)


NAMES = st.lists(
    st.one_of(
        st.sampled_from(["a", "p", "r", "o", "v", "e", " ", "é", "ש", "👍"]),
        st.sampled_from(LISTED),
        # What reads like an escape when typed: backslashes and escape letters.
        st.sampled_from(["\\", "\\\\", "\\n", "\\t", "\\u200e", "\\x1f", "\\U000e0061", "u", "x"]),
        st.characters(codec="utf-8"),
    ),
    max_size=8,
).map("".join)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(NAMES, NAMES)
def test_two_different_names_never_read_the_same(a: str, b: str) -> None:
    """A short field's shown form escapes the characters that show as nothing, and the
    text's own backslashes where they could be read as an escape, and gives the text
    back read from the left: two different ids, options or agents are shown differently
    (backslashes typed into them included), and the shown form holds nothing invisible."""
    shown_a, shown_b = visible(a), visible(b)
    assert _unescape(shown_a) == a and _unescape(shown_b) == b
    assert INVISIBLE.search(shown_a) is None
    assert (shown_a == shown_b) == (a == b)


def test_a_message_keeps_the_escapes_of_the_values_it_quotes() -> None:
    from dissensus.quoting import message_line, quoted

    said = f"no run {quoted('a' + chr(7))} here\nnext"
    assert message_line(said) == "no run 'a\\x07' here\\nnext"
    assert visible(said) != message_line(said)  # a bare value doubles that backslash
