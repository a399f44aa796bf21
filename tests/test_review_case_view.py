"""What the review page shows of a case: option labels, who chose what, the word diff, plain reasons."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.serve.case_view import option_views, plain_reasons, word_diff

WORDS = st.lists(st.sampled_from(["the", "refund", "window", "is", "30", "days", "<b>", "&"]))


LONG_WORDS = st.lists(st.sampled_from(["a", "b", "refund", "window"]), min_size=250, max_size=600)


@given(a=WORDS, b=WORDS)
def test_the_word_diff_rebuilds_both_texts(a: list[str], b: list[str]) -> None:
    _rebuilds(a, b)


@given(a=LONG_WORDS, b=LONG_WORDS)
def test_a_long_word_diff_rebuilds_both_texts_too(a: list[str], b: list[str]) -> None:
    """Past EXACT_DIFF_WORDS the junk heuristic bounds the work; the segments still
    rebuild both texts."""
    _rebuilds(a, b)


def test_repetitive_texts_are_diffed_in_bounded_work_or_not_at_all() -> None:
    """A model stuck on one word: two 1,000-word texts of repeats (minutes of exact
    diffing) are diffed with the heuristic; a side longer than MOST_DIFF_WORDS gets none."""
    from dissensus.serve.case_view import MOST_DIFF_WORDS

    _rebuilds(["a"] * MOST_DIFF_WORDS, ["a", "b"] * (MOST_DIFF_WORDS // 2))
    assert word_diff("a " * (MOST_DIFF_WORDS + 1), "a b " * 10) is None
    assert word_diff("a b", "a " * (MOST_DIFF_WORDS + 1)) is None


def _rebuilds(a: list[str], b: list[str]) -> None:
    segments = word_diff(" ".join(a), " ".join(b))
    assert segments is not None
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
    assert plain[0] == (
        "The agents split: 2 chose <bdi>Output (a)</bdi>, 1 chose <bdi>Output (b)</bdi>."
    )
    assert any("not independent evidence" in p for p in plain)


def test_without_lettered_reasoning_or_with_given_labels() -> None:
    positions = [("a1", "1", "Option 1 is right."), ("a2", "2", "Option 2.")]
    assert [v.label for v in option_views(["1", "2"], {}, positions, None)] == ["1", "2"]
    given_labels = {"meta": {"option_labels": {"1": "Response A", "2": "Response B"}}}
    assert [v.label for v in option_views(["1", "2"], given_labels, positions, None)] == [
        "Response A",
        "Response B",
    ]
    named = option_views(["no", "yes"], {}, [("a1", "yes", "Output (a)")], "yes")
    assert [v.label for v in named] == ["no", "yes"]
    assert [v.key for v in option_views([str(i) for i in range(11)], {}, [], None)][-2:] == ["", ""]


NOT_ASKED = (
    "The agents were not asked again: the panel records no second answers, and no model "
    "is configured to ask them."
)
DID_NOT_SETTLE = "Asking the agents again did not settle it."
GUARD = "CA agreement not accepted on its face: guard refused consensus: 0 independent evidence source(s) among voters with evidence (need 2): agreement is not evidence"
NO_MODEL = "no model configured (seek_context.model or $DISSENSUS_MODEL)"


@pytest.mark.parametrize(
    ("reason", "present", "absent"),
    [
        # The chat door's escalation: no recorded re-ask and nothing to ask with.
        (
            f"{GUARD}; no recorded re-ask in the panel and {NO_MODEL}",
            [NOT_ASKED, "Agreement among them is not independent evidence"],
            [DID_NOT_SETTLE],
        ),
        (
            f"{GUARD}; no recorded re-ask in the panel and {NO_MODEL}; learned acceptance "
            "(logistic): best answer '7' scored 0.410 < threshold 0.800",
            [NOT_ASKED],
            [DID_NOT_SETTLE],
        ),
        # A re-ask that ran and did not settle it.
        (
            f"{GUARD}; after recorded re-ask: stable, decisive agents of this (uncalibrated) panel disagree",
            [DID_NOT_SETTLE],
            [NOT_ASKED],
        ),
        (
            "route seek_context (rule r1); after live re-ask: trusted agents contradict each other: a=1, b=2; "
            f"no further follow-up: the recorded re-ask was used and {NO_MODEL}",
            [DID_NOT_SETTLE, "Agents the calibration trusts contradict each other."],
            [NOT_ASKED, "The routing policy sends cases like this one to a person."],
        ),
        (
            f"{GUARD}; the case has no explicit options to re-ask",
            ["The agents were not asked again: the case lists no options to put to them."],
            [DID_NOT_SETTLE, NOT_ASKED],
        ),
        (
            f"{GUARD}; re-ask failed: the model returned no JSON",
            ["Asking the agents again failed (the technical detail says why)."],
            [DID_NOT_SETTLE],
        ),
        (
            "route escalate (rule values)",
            ["The routing policy sends cases like this one to a person."],
            [DID_NOT_SETTLE],
        ),
        (
            "route deliberate (rule r); DCI packet attached for review",
            ["A structured deliberation among the agents did not settle it."],
            ["The routing policy sends cases like this one to a person."],
        ),
        (
            "route deliberate (rule r); deliberation failed: timeout",
            ["A structured deliberation among the agents could not be held."],
            ["A structured deliberation among the agents did not settle it."],
        ),
        (
            f"{GUARD}; after live re-ask: answer '1' stably contradicted by a2",
            [DID_NOT_SETTLE, "Agents that answered consistently contradict the answer"],
            ["Agents the calibration trusts contradict each other."],
        ),
        (
            # A commit of a suspended stratum: the commit's own reason is no refusal.
            f"{GUARD}; after live re-ask: 3 independent families (a, b, c) stable and decisive "
            "on '1'; acceptance suspended: audited precision below 0.90 after 40 audits",
            ["Automatic decisions of this kind are suspended"],
            ["Too few independent model families back the answer."],
        ),
        (
            f"{GUARD}; after live re-ask: only 1 independent family (fam1) stable and decisive; "
            "2 needed without calibration",
            ["Too few independent model families back the answer."],
            [],
        ),
    ],
)
def test_plain_reasons_match_the_trails_forms(
    reason: str, present: list[str], absent: list[str]
) -> None:
    plain = plain_reasons(reason, [], 0)
    for sentence in present:
        assert any(p.startswith(sentence) for p in plain), (sentence, plain)
    for sentence in absent:
        assert not any(p.startswith(sentence) for p in plain), (sentence, plain)
