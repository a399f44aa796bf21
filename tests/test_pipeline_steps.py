"""Journalled steps are typed: validated when written and again when replayed."""

from __future__ import annotations

import pytest

from dissensus.llm.base import ChatRequest, Message
from dissensus.llm.replay import request_key
from dissensus.pipeline import Policy, decide
from dissensus.pipeline.durable import CaseLog, UnreadableStep, call_digest, case_step
from dissensus.pipeline.records import ReviewItem
from dissensus.pipeline.review_form import journal_form
from dissensus.pipeline.steps import GuardStep
from dissensus.states import Reading, Route
from dissensus.store import Journal
from pipeline_cases import as_panel, panel


def _never() -> GuardStep:
    raise AssertionError("a journalled step must be replayed, not recomputed")


def test_a_journalled_step_that_no_longer_fits_its_model_fails_loudly() -> None:
    journal = Journal(":memory:")
    journal.create_run("r", kind="t", meta={})
    journal.append(
        "r",
        "case.guard",
        {"applicable": True, "backed": "maybe", "reason": "x"},
        key="case/1/guard",
        case="1",
    )
    log = CaseLog(journal, "r", 1)
    with pytest.raises(
        UnreadableStep, match=r"case/1/guard is not a valid GuardStep \(field backed"
    ):
        log.step("guard", "case.guard", GuardStep, _never)


def test_a_step_in_the_older_mapping_shape_replays() -> None:
    journal = Journal(":memory:")
    journal.create_run("r", kind="t", meta={})
    old = {
        "action": "seek_context",
        "rule": "default-CD",
        "defeated": [],
        "concurring": [],
        "override": None,
    }
    journal.append("r", "case.route", old, key="case/1/route", case="1")
    route = CaseLog(journal, "r", 1).replayed("route", Route)
    assert route == Route(action="seek_context", rule="default-CD", defeated=[], concurring=[])


def test_a_review_item_holds_typed_steps() -> None:
    journal = Journal(":memory:")
    row = panel(
        "vc",
        ["1", "2"],
        values=[{"safety": 0.9}, {"speed": 0.7}],
        reasoning=["Option 1 states the window."] * 2,
    )
    policy = Policy.model_validate({"reading": {"similarity": "tfidf", "theta_s": 0.3}})
    decide(as_panel(row), policy, journal=journal, run_id="run")
    event = journal.get("run", "case/1/review")
    assert event is not None
    item = ReviewItem.model_validate(event.payload)
    assert isinstance(item.reading, Reading) and item.reading.state.value == "CD"
    assert isinstance(item.guard, GuardStep) and item.guard.decision is not None


def test_one_request_identity_for_replays_and_durable_calls() -> None:
    """max_tokens shapes how an answer is obtained, not which question was asked."""
    base = ChatRequest(
        messages=[Message(role="user", content="q")], agent="a1", temperature=0.0, seed=0
    )
    capped = base.model_copy(update={"max_tokens": 99})
    other = base.model_copy(update={"messages": [Message(role="user", content="q2")]})
    assert request_key(base) == request_key(capped)
    assert call_digest(base, "S", None) == call_digest(capped, "S", None)
    assert call_digest(base, "S", None) != call_digest(other, "S", None)
    assert call_digest(base, "S", None) != call_digest(base, "S", "openai:gpt-4o")


def test_a_step_holding_earlier_steps_journals_their_json_as_they_were_made() -> None:
    """The review item takes the reading's and the guard's JSON from their own steps and
    the panel's from the input step: the payload is the item's own dump, and a fresh step
    comes back as computed."""
    journal = Journal(":memory:")
    row = panel(
        "vc",
        ["1", "2"],
        values=[{"safety": 0.9}, {"speed": 0.7}],
        reasoning=["Option 1 states the window.", "Option 2 is faster."],
    )
    row["meta"] = {"gold": "1", "category": "x"}
    policy = Policy.model_validate({"reading": {"similarity": "tfidf", "theta_s": 0.3}})
    decide(as_panel(row), policy, journal=journal, run_id="run")
    event = journal.get("run", "case/1/review")
    assert event is not None
    item = ReviewItem.model_validate(event.payload)
    # The payload is the item's dump in its journal form: each reasoning once, in the panel.
    assert event.payload == journal_form(item.model_dump(mode="json"))
    assert all("reasoning" not in p for p in event.payload["positions"])
    assert [p.reasoning for p in item.positions] == [
        "Option 1 states the window.",
        "Option 2 is faster.",
    ]
    assert "gold" not in event.payload["panel"]["meta"]
    # The case's steps, read whole (case.steps leaves out what the item holds).
    for name in ("reading", "guard"):
        assert event.payload[name] == case_step(journal, "run", 1, name)

    log = CaseLog(Journal(":memory:"), "r", 1, fresh=True)
    reading = ReviewItem.model_validate(event.payload).reading
    assert log.append("reading", "case.reading", Reading, reading) is reading
    holding = item.model_copy(update={"reading": reading})
    review = log.append("review", "review.opened", ReviewItem, holding, json_fields=("panel",))
    assert review is holding
    payloads = {e.key: e.payload for e in log.take()}
    assert payloads["case/1/review"] == holding.model_dump(mode="json")
    assert list(payloads["case/1/review"]) == list(holding.model_dump(mode="json"))
    assert payloads["case/1/review"]["reading"] is payloads["case/1/reading"]
