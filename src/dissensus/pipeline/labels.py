"""Labelled cases from a run journal: what human reviewers resolved or audited (edge code).

Every resolved review item is a labelled case (a resolution undone with ``review undo``
is not: only a later resolution of that item is): its panel (as the reviewer saw it),
the reading and guard decision the pipeline made, the re-ask answers shown to the
reviewer, and the reviewer's decision as the gold answer. A resolution flagged
``outside_options`` (the reviewer rejected every option on the table) is excluded: no
candidate could have been right, so it says nothing about which candidate to trust. An
audit flagged alike is excluded alike.

Every audited automatic decision (``review confirm``, :mod:`dissensus.pipeline.confirm`)
is a labelled case too, confirmation or correction alike: the panel the pipeline
journalled (``case.input``), its first reading, the guard's check and the answers of
its last follow-up round, with the reviewer's decision as the gold answer.

Choices this module makes: a resolved item of a run whose review event
cannot be read as a review item is skipped and counted (never silently); the re-ask
answers come from the positions shown to the reviewer (decision only, no reasoning);
the guard decision is the one the pipeline journalled, or none when it did not audit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from dissensus.pipeline.confirm import EVENT as CONFIRMED
from dissensus.pipeline.records import ReviewItem
from dissensus.signals import SecondAnswer
from dissensus.store import event_types as ev
from dissensus.store.events import Event
from dissensus.store.journal import Journal
from dissensus.types import Panel

__all__ = ["JournalCase", "JournalCases", "labelled_from_journal"]


@dataclass(frozen=True)
class _Second:
    decision: str | None
    reasoning: str | None = None


@dataclass(frozen=True)
class JournalCase:
    """One resolved review item as a labelled case."""

    review_id: str
    panel: Panel
    reading: Any
    guard: Any
    second: Mapping[str, Any]
    """Per agent: its second answer (``decision``, optional ``reasoning``)."""
    gold: str


@dataclass
class JournalCases:
    """Outcome of :func:`labelled_from_journal`."""

    cases: list[JournalCase] = field(default_factory=list)
    outside_options: int = 0
    unreadable: int = 0
    confirmed: int = 0
    """Audited automatic decisions among :attr:`cases` (confirmations and corrections)."""


def _audited(journal: Journal, run_id: str, event: Event) -> JournalCase | None:
    from dissensus.pipeline.durable import case_step
    from dissensus.pipeline.steps import CaseInput, FollowupStep, GuardStep
    from dissensus.states import Reading

    line = str(event.case)
    given = case_step(journal, run_id, line, "input")
    read = case_step(journal, run_id, line, "reading")
    if given is None or read is None:
        return None
    try:
        panel = CaseInput.model_validate(given).panel
        reading = Reading.model_validate(read)
        checked = case_step(journal, run_id, line, "guard")
        guard = GuardStep.model_validate(checked).decision if checked else None
        answers: dict[str, SecondAnswer] = {}
        k = 0
        while (round_ := journal.get(run_id, f"case/{line}/followup{k}")) is not None:
            answers = dict(FollowupStep.model_validate(round_.payload).answers) or answers
            k += 1
    except ValidationError:
        return None
    return JournalCase(
        review_id=f"{run_id}.{line}",
        panel=panel,
        reading=reading,
        guard=guard,
        second=answers,
        gold=str(event.payload["decision"]),
    )


def labelled_from_journal(journal: Journal, run_ids: Sequence[str] | None = None) -> JournalCases:
    """Every resolved review item and audited decision of ``run_ids`` (all runs when empty)."""
    from dissensus.states import Reading

    out = JournalCases()
    runs = list(run_ids) if run_ids else [r.run_id for r in journal.runs()]
    for run_id in runs:
        # A resolution undone (``review undo``: a ``review.reopened`` naming it) is withdrawn:
        # the case is open again, and only a later resolution of it is a label.
        undone = {
            str(e.payload.get("undoes")) for e in journal.events(run_id, type=ev.REVIEW_REOPENED)
        }
        for event in journal.events(run_id, type=ev.REVIEW_RESOLVED):
            if event.key in undone:
                continue
            payload = event.payload
            if payload.get("outside_options"):
                out.outside_options += 1
                continue
            review = journal.get(run_id, f"case/{event.case}/review")
            if review is None:
                out.unreadable += 1
                continue
            try:
                item = ReviewItem.model_validate(review.payload)
                panel = Panel.model_validate(item.panel)
                reading = Reading.model_validate(item.reading)
                guard = item.guard.decision if item.guard is not None else None
            except ValidationError:
                out.unreadable += 1
                continue
            second = {p.agent: _Second(p.second) for p in item.positions if p.second is not None}
            out.cases.append(
                JournalCase(
                    review_id=item.review_id,
                    panel=panel,
                    reading=reading,
                    guard=guard,
                    second=second,
                    gold=str(payload["decision"]),
                )
            )
        for event in journal.events(run_id, type=CONFIRMED):
            if event.payload.get("outside_options"):
                out.outside_options += 1
                continue
            case = _audited(journal, run_id, event)
            if case is None:
                out.unreadable += 1
                continue
            out.cases.append(case)
            out.confirmed += 1
    return out
