"""Text no journal can hold: a lone surrogate in a resolution is refused naming its field.

Through :func:`dissensus.pipeline.review.resolve` (every door's path), the integrations'
:func:`resolve_checked` and :class:`ReviewAnswer`, and the reviewer's name; nothing is
journalled.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from dissensus.errors import InputError
from dissensus.integrations._review import ReviewAnswer, resolve_checked
from dissensus.pipeline import decide, policy_from_dict
from dissensus.pipeline.review import content_sha256, find_item, resolve, reviewer_name
from dissensus.store import Journal
from pipeline_cases import as_panel, panel

POLICY = policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.3}})


def _escalated(journal: Journal) -> str:
    row = panel(
        "vc",
        ["1", "2", "1"],
        values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
        reasoning=["Option 1 is right."] * 3,
    )
    record = decide(as_panel(row), POLICY, journal=journal, run_id="run1")
    assert record.action == "escalate" and record.review_id
    return record.review_id


_SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)


@settings(max_examples=30, deadline=None)
@given(
    field=st.sampled_from(["decision", "note", "reviewer"]),
    before=st.text(st.characters(codec="utf-8"), max_size=5),
    lone=_SURROGATES,
)
def test_a_lone_surrogate_in_a_resolution_is_an_input_error_naming_the_field(
    tmp_path_factory: pytest.TempPathFactory, field: str, before: str, lone: str
) -> None:
    with Journal(tmp_path_factory.mktemp("text") / "j.sqlite") as journal:
        review_id = _escalated(journal)
        fields = {"decision": "2", "note": "policy says 2", "reviewer": "kim"}
        fields[field] = "x" + before + lone
        events = len(list(journal.events("run1")))
        with pytest.raises(InputError, match=f"the {field} is not valid Unicode text"):
            resolve(journal, review_id, **fields)
        with pytest.raises(InputError, match=f"the {field} is not valid Unicode text"):
            resolve_checked(
                journal,
                review_id,
                content_sha256=content_sha256(find_item(journal, review_id).item),
                **fields,
            )
        assert len(list(journal.events("run1"))) == events
        assert find_item(journal, review_id).resolution is None


def test_the_message_says_where_the_surrogate_is(tmp_path: Path) -> None:
    note = json.loads('"copied text \\ud83d"')
    with Journal(tmp_path / "j.sqlite") as journal:
        review_id = _escalated(journal)
        with pytest.raises(InputError) as refused:
            resolve(journal, review_id, decision="2", note=note, reviewer="kim")
    assert str(refused.value) == (
        "the note is not valid Unicode text: a lone surrogate (U+D83D) at character 13"
    )


def test_a_reviewer_name_with_an_undecodable_byte_is_refused() -> None:
    # How an argument's undecodable byte reaches Python: os.fsdecode's surrogateescape.
    given = b"kim\xff".decode("utf-8", "surrogateescape")
    with pytest.raises(InputError, match=re.escape("--reviewer is not valid Unicode text")):
        reviewer_name(given)
    with pytest.raises(InputError, match=re.escape("$DISSENSUS_REVIEWER is not valid Unicode")):
        reviewer_name(None, environ={"DISSENSUS_REVIEWER": given})


@pytest.mark.parametrize("field", ["decision", "note", "content_sha256"])
def test_a_review_answer_refuses_a_lone_surrogate_in_any_field(field: str) -> None:
    answer = {"decision": "2", "note": "fine", "content_sha256": "a" * 64}
    answer[field] = "\ud800" + answer[field][1:]
    with pytest.raises(ValidationError) as refused:
        ReviewAnswer.model_validate(answer)
    (error,) = refused.value.errors()
    assert error["loc"] == (field,)
    assert error["msg"].endswith("not valid Unicode text: a lone surrogate (U+D800) at character 1")


def test_a_hash_quoted_in_upper_case_resolves(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        review_id = _escalated(journal)
        quoted = content_sha256(find_item(journal, review_id).item).upper()
        record = resolve_checked(
            journal, review_id, decision="2", note="ok", content_sha256=quoted, reviewer="kim"
        )
    assert (record.action, record.decision) == ("human", "2")


@pytest.mark.parametrize("quoted", ["z" * 64, "a" * 63, "", "a" * 64 + " "])
def test_a_quoted_hash_that_is_no_sha256_is_named_as_such(tmp_path: Path, quoted: str) -> None:
    """Not a hash at all (``"z" * 64``): an InputError naming ``content_sha256``, not
    "the case content changed since it was shown"; the item stays open."""
    from dissensus.errors import InputError

    with Journal(tmp_path / "j.sqlite") as journal:
        review_id = _escalated(journal)
        with pytest.raises(InputError, match="not a sha256") as refused:
            resolve_checked(
                journal, review_id, decision="2", note="ok", content_sha256=quoted, reviewer="kim"
            )
        assert refused.value.field == "content_sha256"
        assert find_item(journal, review_id).resolution is None
