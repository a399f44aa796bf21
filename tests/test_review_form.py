"""A review item's journal form: each agent's reasoning held once, read back whole.

The positions leave their reasonings to the panel beside them in the journal; every
reader sees the item whole, items journalled whole before read alike, and the content
hash a reviewer quotes is the same for an item and its payload in either form.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cli_helpers import cli
from dissensus.pipeline import decide
from dissensus.pipeline.records import ReviewItem
from dissensus.pipeline.review import content_sha256, list_items
from dissensus.pipeline.review_form import journal_form, whole_form
from dissensus.store import event_types as ev
from dissensus.store.canonical import canonical, sha256_text
from dissensus.store.errors import JournalDamaged
from dissensus.store.events import Event
from dissensus.store.journal import Journal
from dissensus.store.migrations import CURRENT
from dissensus.types import Panel
from pipeline_cases import panel, write_jsonl

REASONINGS = ["Option 1 states the window.", "Option 2 is faster.", "Option 1, twice over."]


def _journalled(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    path = tmp_path / "j.sqlite"
    data = panel("split", ["1", "2", "1"], reasoning=REASONINGS)
    with Journal(path) as journal:
        record = decide(Panel.model_validate(data), journal=journal, run_id="R")
        assert record.action == "escalate"
        event = journal.get("R", "case/1/review")
        assert event is not None and event.type == ev.REVIEW_OPENED
        return path, event.payload


def test_an_escalated_item_journals_each_reasoning_once_and_reads_it_whole(
    tmp_path: Path,
) -> None:
    path, payload = _journalled(tmp_path)
    assert all("reasoning" not in p for p in payload["positions"])
    assert [o["reasoning"] for o in payload["panel"]["outputs"]] == REASONINGS
    item = ReviewItem.model_validate(payload)
    assert [p.reasoning for p in item.positions] == REASONINGS
    with Journal(path) as journal:
        (status,) = list(list_items(journal))
        assert [p.reasoning for p in status.item.positions] == REASONINGS
        # The hash the queue gives equals the hash of the item a page renders.
        assert status.content_sha256 == content_sha256(status.item)
        assert journal.schema()["revision"] == CURRENT == 4
    # ``review show --json`` prints every reasoning.
    out = cli("review", "show", "R.1", "--json", "--journal", str(path))
    assert out.code == 0, out.out + out.err
    for text in REASONINGS:
        assert text in out.out


def test_an_item_journalled_whole_reads_and_hashes_alike(tmp_path: Path) -> None:
    _, payload = _journalled(tmp_path)
    whole = whole_form(payload)
    assert [p["reasoning"] for p in whole["positions"]] == REASONINGS
    assert ReviewItem.model_validate(whole) == ReviewItem.model_validate(payload)
    assert content_sha256(whole) == content_sha256(payload)
    assert content_sha256(ReviewItem.model_validate(whole)) == content_sha256(payload)
    # The hash is that of the item whole, as the doors return it (and as it was before
    # items were journalled in this form): a client can check it against what it saw.
    assert content_sha256(payload) == sha256_text(canonical(whole))


def test_a_position_whose_reasoning_the_panel_does_not_hold_keeps_it(tmp_path: Path) -> None:
    _, payload = _journalled(tmp_path)
    whole = whole_form(payload)
    whole["positions"][1] = {**whole["positions"][1], "reasoning": "said otherwise"}
    kept = journal_form(whole)
    assert kept["positions"][1]["reasoning"] == "said otherwise"
    assert "reasoning" not in kept["positions"][0]
    assert ReviewItem.model_validate(kept).positions[1].reasoning == "said otherwise"


def test_a_reasoning_missing_without_its_output_is_a_damaged_payload_naming_the_field(
    tmp_path: Path,
) -> None:
    _, payload = _journalled(tmp_path)
    damaged = copy.deepcopy(payload)
    damaged["panel"]["outputs"][0]["agent"] = "someone else"
    with pytest.raises(ValidationError) as caught:
        ReviewItem.model_validate(damaged)
    assert caught.value.errors()[0]["loc"] == ("positions", 0, "reasoning")
    event = Event(
        run_id="R",
        seq=3,
        key="case/1/review",
        type=ev.REVIEW_OPENED,
        case="1",
        at="2026-01-01T00:00:00+00:00",
        payload=damaged,
        prev_hash="0" * 64,
        hash="0" * 64,
    )
    with pytest.raises(JournalDamaged, match=r"positions\.0\.reasoning"):
        event.read_as(ReviewItem)


def test_a_case_decided_again_replays_its_item_whole(tmp_path: Path) -> None:
    """Deciding a journalled case again (a resume) reads its item back from the journal
    form: the same record, the same item."""
    path = tmp_path / "j.sqlite"
    data = Panel.model_validate(panel("split", ["1", "2", "1"], reasoning=REASONINGS))
    with Journal(path) as journal:
        first = decide(data, journal=journal, run_id="R")
        (opened,) = list(list_items(journal))
        again = decide(data, journal=journal, run_id="R")
        (reopened,) = list(list_items(journal))
        assert again == first
        assert reopened.item == opened.item
        assert len(list(journal.events("R", type=ev.REVIEW_OPENED))) == 1


def test_a_cli_run_journals_the_form_and_verifies(tmp_path: Path) -> None:
    """``decide`` from the command line journals items in their journal form, and verify
    accepts the journal."""
    rows = [panel(f"p{i}", ["1", "2", str(1 + i % 2)], reasoning=REASONINGS) for i in range(6)]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    journal = str(tmp_path / "j.sqlite")
    first = cli("decide", str(src), "--similarity", "tfidf", "--journal", journal, "--json")
    assert first.code in (0, 1), first.out + first.err
    with Journal(journal) as j:
        (run,) = [r.run_id for r in j.runs()]
        for e in j.events(run, type=ev.REVIEW_OPENED):
            assert all("reasoning" not in p for p in e.payload["positions"])
    verified = cli("runs", "verify", run, "--journal", journal)
    assert verified.code == 0, verified.out + verified.err


_text = st.text(alphabet="ab \n", max_size=6)


@st.composite
def _items(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(min_value=0, max_value=4))
    outputs = [
        {"agent": draw(st.sampled_from(["a", "b", "c"])), "reasoning": draw(_text)}
        for _ in range(n)
    ]
    positions = []
    for o in outputs:
        same = draw(st.booleans())
        positions.append(
            {
                "agent": o["agent"] if draw(st.booleans()) else "z",
                "decision": "1",
                "reasoning": o["reasoning"] if same else draw(_text),
            }
        )
    extra = draw(st.booleans())
    if extra:
        positions.append({"agent": "a", "decision": None, "reasoning": draw(_text)})
    return {"positions": positions, "panel": {"id": "p", "outputs": outputs}, "line": 1}


@settings(max_examples=300, derandomize=True, deadline=None)
@given(_items())
def test_the_journal_form_round_trips_and_is_idempotent(item: dict[str, Any]) -> None:
    before = copy.deepcopy(item)
    form = journal_form(item)
    assert item == before  # not changed in place
    assert whole_form(form) == item
    assert journal_form(form) == form
    assert whole_form(item) == item
    # Only a reasoning the panel holds, at the same place for the same agent, is left out.
    for i, p in enumerate(form["positions"]):
        if "reasoning" not in p:
            output = item["panel"]["outputs"][i]
            assert output["agent"] == p["agent"]
            assert output["reasoning"] == item["positions"][i]["reasoning"]
