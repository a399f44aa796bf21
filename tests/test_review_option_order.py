"""The options of a review item: the panel's declared order, then natural order, at every door."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.cases import natural_key, review_options
from dissensus.integrations._review import review_request
from dissensus.outputs import ReviewEntry
from dissensus.pipeline import decide, policy_from_dict
from dissensus.pipeline.records import ReviewItem
from dissensus.pipeline.review import ReviewStatus, content_sha256, find_item
from dissensus.serve.case_view import option_views
from dissensus.store import Journal
from pipeline_cases import as_panel, panel
from serve_helpers import auth, client_for, login, settings

POLICY = policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.3}})
TWELVE = [str(i) for i in range(1, 13)]
EXTRAS = ["item 9", "item 10"]
"""Decisions an agent gave that the panel does not declare."""


def _twelve() -> dict[str, object]:
    return panel(
        "twelve",
        ["2", "10", "2", "item 10", "item 9"],
        values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}, {"a": 0.5}, {"b": 1.0}],
        reasoning=["Option 2 is right."] * 5,
        meta={"question": "Which?", "options": TWELVE},
    )


def _escalated(journal: Journal) -> str:
    record = decide(as_panel(_twelve()), POLICY, journal=journal, run_id="R")
    assert record.action == "escalate" and record.review_id
    return record.review_id


@given(st.lists(st.integers(min_value=0, max_value=10**30), max_size=30))
def test_numbers_sort_as_numbers(numbers: list[int]) -> None:
    texts = [str(n) for n in numbers]
    assert sorted(texts, key=natural_key) == [str(n) for n in sorted(numbers)]


@given(
    st.lists(st.text(max_size=6), max_size=12),
    st.lists(st.text(max_size=6), max_size=12),
)
def test_declared_options_lead_in_their_order(declared: list[str], labels: list[str]) -> None:
    shown = review_options(declared, labels)
    first = list(dict.fromkeys(declared))
    assert shown[: len(first)] == first
    assert len(shown) == len(set(shown)) and set(shown) == set(declared) | set(labels)
    rest = shown[len(first) :]
    assert rest == sorted(rest, key=natural_key)
    assert review_options(first, shown) == shown  # ordering again changes nothing
    assert review_options(declared, reversed(labels)) == shown  # whoever spoke first


def test_a_very_long_number_is_ordered_without_converting_it() -> None:
    huge = "9" * 5000
    assert review_options([], [huge, "10", "2", "x"]) == ["2", "10", huge, "x"]


def test_a_fresh_item_lists_the_panels_options_in_order(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        item = find_item(journal, _escalated(journal)).item
    assert item.options == [*TWELVE, *EXTRAS] == item.shown_options()
    views = option_views(item.options, item.panel, [], None)
    assert [(v.key, v.id) for v in views[:9]] == [(str(i), str(i)) for i in range(1, 10)]
    assert [v.key for v in views[9:]] == [""] * 5


def _old(item: ReviewItem) -> ReviewItem:
    """``item`` as journalled when its options were sorted as strings."""
    return ReviewItem.model_validate(
        {**item.model_dump(mode="json"), "options": sorted(item.options)}
    )


def test_an_item_journalled_in_string_order_is_shown_in_the_panels_order(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        fresh = find_item(journal, _escalated(journal)).item
    old = _old(fresh)
    assert old.options[:3] == ["1", "10", "11"]
    assert old.shown_options() == fresh.options
    views = option_views(old.options, old.panel, [], None)
    assert [v.id for v in views if v.key] == [str(i) for i in range(1, 10)]
    assert next(v.key for v in views if v.id == "2") == "2"
    status = ReviewStatus(item=old, resolution=None, content_sha256=content_sha256(old))
    assert ReviewEntry.of(status).options == fresh.options
    assert review_request(status).options == fresh.options
    # The item itself stays as journalled: its hash is what a resolution quotes.
    assert review_request(status).content_sha256 == content_sha256(old) != content_sha256(fresh)


def test_review_show_lists_the_options_in_order(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        review_id = _escalated(journal)
    shown = cli("review", "show", review_id, "--journal", path, env={"COLUMNS": "200"})
    assert shown.code == 0, shown.err
    line = next(x for x in shown.out.splitlines() if x.startswith("options:"))
    assert line.split("   ")[0] == f"options: {', '.join([*TWELVE, *EXTRAS])}"
    listed = cli("review", "list", "--journal", path, "--json")
    assert json.loads(listed.out)["options"] == [*TWELVE, *EXTRAS]


@pytest.mark.anyio
async def test_the_case_page_keys_follow_the_panels_order(tmp_path: Path) -> None:
    s = settings(tmp_path)
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=[_twelve()], headers=auth("sub"))).json()
        review_id = run["records"][0]["review_id"]
        assert (await login(client, "rev")).status_code == 303
        page = (await client.get(f"/review/case/{review_id}")).text
        shown = (await client.get(f"/v1/review/{review_id}", headers=auth("rev"))).json()
    radios = re.findall(r'name="decision" value="([^"]*)" data-key="([^"]*)"', page)
    assert radios[:10] == [(str(i), str(i)) for i in range(1, 10)] + [("10", "")]
    assert [value for value, _ in radios] == [*TWELVE, *EXTRAS]
    assert shown["item"]["options"] == [*TWELVE, *EXTRAS]
    # An option past the ninth has no key, and no empty key box either.
    assert "<kbd></kbd>" not in page
    assert page.count("<kbd>9</kbd> <bdi>") == 2  # its heading and its radio


NLI = ["entailment", "neutral", "contradiction"]


def _as_object(options: list[str], decisions: list[str], pid: str) -> dict[str, object]:
    """A panel whose ``meta.options`` is an object, as ``dissensus convert`` writes it."""
    return panel(
        pid,
        decisions,
        values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
        reasoning=["It follows."] * 3,
        meta={"question": "Which?", "options": {o: f"text of {o}" for o in options}},
    )


@pytest.mark.parametrize(
    ("options", "decisions"),
    [(TWELVE, ["2", "10", "7"]), (NLI, ["neutral", "contradiction", "entailment"])],
)
def test_an_options_object_is_shown_in_its_declared_order(
    tmp_path: Path, options: list[str], decisions: list[str]
) -> None:
    """The journal stores a panel's objects with sorted keys, so the declared order of a
    ``meta.options`` object lives in the item's own list: every view follows it (they
    read the journalled panel's sorted keys, and key 2 picked option 10, or key 1
    'contradiction' on a VariErrNLI panel)."""
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        record = decide(as_panel(_as_object(options, decisions, "obj")), POLICY, journal=journal)
        assert record.review_id
        item = find_item(journal, record.review_id).item
    assert item.options == options
    assert item.shown_options() == options
    views = option_views(item.options, item.panel, [], None)
    assert [v.id for v in views] == options
    assert views[1].key == "2" and views[1].id == options[1]
    shown = cli("review", "show", record.review_id, "--journal", path, env={"COLUMNS": "200"})
    line = next(x for x in shown.out.splitlines() if x.startswith("options:"))
    assert line.split("   ")[0] == f"options: {', '.join(options)}"
    listed = cli("review", "list", "--journal", path, "--json")
    assert json.loads(listed.out)["options"] == options


def test_an_old_item_of_an_options_object_is_shown_in_natural_order(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        record = decide(
            as_panel(_as_object(TWELVE, ["2", "10", "7"], "o")), POLICY, journal=journal
        )
        assert record.review_id
        old = _old(find_item(journal, record.review_id).item)
    assert old.options[:3] == ["1", "10", "11"]
    assert old.shown_options() == TWELVE
    assert [v.id for v in option_views(old.options, old.panel, [], None)] == TWELVE
