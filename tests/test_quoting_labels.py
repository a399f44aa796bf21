"""Only a decision, an option, an agent or a family shows its blanks escaped (``yes ``
reads ``yes\\x20``); a question, a note or a reason shows a no-break space as one (a
French ``remboursement\\u00a0?`` read ``remboursement\\xa0?`` on every page)."""

from __future__ import annotations

from hypothesis import given, seed
from hypothesis import settings as settings_h
from hypothesis import strategies as st

from dissensus.quoting import one_line, visible, visible_label


def test_text_keeps_its_no_break_spaces_and_labels_escape_them() -> None:
    assert visible("remboursement\u00a0?") == "remboursement\u00a0?"
    assert visible(" a note ") == " a note "
    assert visible("a\u200bb") == "a\\u200bb"
    assert visible_label("remboursement\u00a0?") == "remboursement\\xa0?"
    assert visible_label("yes ") == "yes\\x20"
    assert visible_label("  ") == "\\x20\\x20"
    assert visible_label("yes no") == "yes no"


@seed(20261206)
@settings_h(max_examples=200, derandomize=True)
@given(st.text(alphabet=st.sampled_from(["a", " ", "\u00a0", "\u200b", "\\", "x", "\n"])))
def test_visible_is_one_line_and_labels_tell_their_blanks_apart(text: str) -> None:
    assert visible(text) == one_line(text)
    shown = visible_label(text)
    assert not shown.startswith(" ") and not shown.endswith(" ")
    assert "\u00a0" not in shown and "\n" not in shown
