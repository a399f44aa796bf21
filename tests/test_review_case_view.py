"""What the review page shows of a case: option labels, who chose what, the word diff, plain reasons."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dissensus.serve.case_view import option_views, plain_reasons, word_diff

WORDS = st.lists(st.sampled_from(["the", "refund", "window", "is", "30", "days", "<b>", "&"]))


@given(a=WORDS, b=WORDS)
def test_the_word_diff_rebuilds_both_texts(a: list[str], b: list[str]) -> None:
    segments = word_diff(" ".join(a), " ".join(b))
    left = " ".join(s.text for s in segments if s.side in ("same", "a")).split()
    right = " ".join(s.text for s in segments if s.side in ("same", "b")).split()
    assert left == a and right == b
    assert all(s.text for s in segments)
    if a == b:
        assert all(s.side == "same" for s in segments)


def test_options_are_labelled_as_the_agents_name_them() -> None:
    panel = {"meta": {"options": {"1": "Refunds in 30 days.", "2": "Refunds anytime."}}}
    positions = [
        ("GPT-4", "1", "Output (a) states the window."),
        ("PaLM2", "2", "Output (b) is friendlier."),
        ("Falcon", "1", "Output (a)."),
    ]
    views = option_views(["1", "2"], panel, positions, "1")
    assert [(v.id, v.label, v.key) for v in views] == [
        ("1", "Output (a)", "1"),
        ("2", "Output (b)", "2"),
    ]
    assert views[0].chosen_by == ["GPT-4", "Falcon"] and views[0].suggested
    assert views[1].text == "Refunds anytime." and not views[1].suggested
    plain = plain_reasons(
        "CA agreement not accepted on its face: guard refused consensus", views, 0
    )
    assert plain[0] == "The agents split: 2 chose Output (a), 1 chose Output (b)."
    assert any("not independent evidence" in p for p in plain)


def test_without_lettered_reasoning_or_with_given_labels() -> None:
    positions = [("a1", "1", "Option 1 is right."), ("a2", "2", "Option 2.")]
    assert [v.label for v in option_views(["1", "2"], {}, positions, None)] == ["1", "2"]
    given_labels = {"meta": {"option_labels": {"1": "Response A", "2": "Response B"}}}
    assert [v.label for v in option_views(["1", "2"], given_labels, positions, None)] == [
        "Response A",
        "Response B",
    ]
    named = option_views(["yes", "no"], {}, [("a1", "yes", "Output (a)")], "yes")
    assert [v.label for v in named] == ["yes", "no"]
    assert [v.key for v in option_views([str(i) for i in range(11)], {}, [], None)][-2:] == ["", ""]
