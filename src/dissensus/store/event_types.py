"""Every event type the run journal holds, in one place.

Each constant is the ``type`` of one kind of event; code that appends or selects events
names them through this module, never as a string of its own, so the list below is the
whole vocabulary of the journal (``docs/pipeline.md`` describes each). Plain strings, not
an ``Enum``: the type is written into SQLite and PostgreSQL rows and the hash chain as
text, and a plain ``str`` is what both drivers and the canonical JSON take unchanged.
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = [
    "ACCEPTANCE_HELD",
    "ACCEPTANCE_SHIFT",
    "ACCEPTANCE_SUSPENDED",
    "CASE_ACCEPTANCE",
    "CASE_CERTIFICATE",
    "CASE_FOLLOWUP",
    "CASE_GUARD",
    "CASE_INPUT",
    "CASE_MONITOR",
    "CASE_PACKET",
    "CASE_READING",
    "CASE_RECORD",
    "CASE_RESOLVED",
    "CASE_ROUTE",
    "CASE_STEPS",
    "EVENT_TYPES",
    "INPUT_REJECTED",
    "MODEL_CALL",
    "MODEL_FAILED",
    "MODEL_RESERVED",
    "MODEL_SENT",
    "MODEL_SETTLED",
    "MODEL_SPEND",
    "REVIEW_AUDIT",
    "REVIEW_CONFIRMED",
    "REVIEW_OPENED",
    "REVIEW_REOPENED",
    "REVIEW_RESOLVED",
    "RUN_FINISHED",
    "RUN_SEALED",
    "RUN_STARTED",
    "RUN_STOPPED",
    "EventTypeName",
]

ACCEPTANCE_HELD: Final = "acceptance.held"
"""A hold on the run's acceptance file, met when the run resumed (a shift check flagged
the file after the run started)."""
ACCEPTANCE_SHIFT: Final = "acceptance.shift"
"""The shift check at the end of a run."""
ACCEPTANCE_SUSPENDED: Final = "acceptance.suspended"
"""A stratum whose automatic commits the monitor suspended."""
CASE_ACCEPTANCE: Final = "case.acceptance"
"""The acceptance step of a case."""
CASE_CERTIFICATE: Final = "case.certificate"
"""A CONCORD negotiation's certificate or shortfall."""
CASE_FOLLOWUP: Final = "case.followup"
"""A follow-up (re-ask) of a case."""
CASE_GUARD: Final = "case.guard"
"""The guard's check of a case."""
CASE_INPUT: Final = "case.input"
"""A case's panel (one event per step, journals before case.steps)."""
CASE_MONITOR: Final = "case.monitor"
"""The acceptance monitor's state for a case's stratum."""
CASE_PACKET: Final = "case.packet"
"""A DCI deliberation's decision packet."""
CASE_READING: Final = "case.reading"
"""A case's reading (or a re-reading after a follow-up)."""
CASE_RECORD: Final = "case.record"
"""A case's final record."""
CASE_RESOLVED: Final = "case.resolved"
"""A case's record after a human resolution or correction."""
CASE_ROUTE: Final = "case.route"
"""A case's route."""
CASE_STEPS: Final = "case.steps"
"""A case's input, reading, route and guard in one event (without those its review
item in the same write holds, named in ``in_review``: :mod:`dissensus.pipeline.compact`)."""
INPUT_REJECTED: Final = "input.rejected"
"""An input line that is not a panel (file, line, field)."""
MODEL_CALL: Final = "model.call"
"""A model call's request and answer."""
MODEL_FAILED: Final = "model.failed"
"""A model call that failed, with what it spent (attempts, and the tokens of the answers
the server gave it)."""
MODEL_RESERVED: Final = "model.reserved"
"""The calls and tokens a Ray block may spend, journalled before the block is sent to a
worker (a resumed run charges it in full until it is settled)."""
MODEL_SENT: Final = "model.sent"
"""A model request about to be sent (budgets count it), with what its call spent before
it when answers that failed validation used tokens (``spent``)."""
MODEL_SETTLED: Final = "model.settled"
"""A Ray block's reservation settled: appended with the block's events (its spend is theirs)."""
MODEL_SPEND: Final = "model.spend"
"""Spending recorded against the run's budget."""
REVIEW_AUDIT: Final = "review.audit"
"""A blind audit of an automatic commit."""
REVIEW_CONFIRMED: Final = "review.confirmed"
"""An audit's answer (confirmation or correction)."""
REVIEW_OPENED: Final = "review.opened"
"""A case waiting for a human."""
REVIEW_REOPENED: Final = "review.reopened"
"""A resolution undone."""
REVIEW_RESOLVED: Final = "review.resolved"
"""A human's resolution."""
RUN_FINISHED: Final = "run.finished"
"""A run's counts, once every case is decided."""
RUN_SEALED: Final = "run.sealed"
"""A signature over the chain before it."""
RUN_STARTED: Final = "run.started"
"""A run's specification and input (the first event)."""
RUN_STOPPED: Final = "run.stopped"
"""A run stopped by its deadline (resumable)."""

EventTypeName = Literal[
    "acceptance.held",
    "acceptance.shift",
    "acceptance.suspended",
    "case.acceptance",
    "case.certificate",
    "case.followup",
    "case.guard",
    "case.input",
    "case.monitor",
    "case.packet",
    "case.reading",
    "case.record",
    "case.resolved",
    "case.route",
    "case.steps",
    "input.rejected",
    "model.call",
    "model.failed",
    "model.reserved",
    "model.sent",
    "model.settled",
    "model.spend",
    "review.audit",
    "review.confirmed",
    "review.opened",
    "review.reopened",
    "review.resolved",
    "run.finished",
    "run.sealed",
    "run.started",
    "run.stopped",
]
"""The type of any journal event."""

EVENT_TYPES: Final[frozenset[str]] = frozenset(
    {
        ACCEPTANCE_HELD,
        ACCEPTANCE_SHIFT,
        ACCEPTANCE_SUSPENDED,
        CASE_ACCEPTANCE,
        CASE_CERTIFICATE,
        CASE_FOLLOWUP,
        CASE_GUARD,
        CASE_INPUT,
        CASE_MONITOR,
        CASE_PACKET,
        CASE_READING,
        CASE_RECORD,
        CASE_RESOLVED,
        CASE_ROUTE,
        CASE_STEPS,
        INPUT_REJECTED,
        MODEL_CALL,
        MODEL_FAILED,
        MODEL_RESERVED,
        MODEL_SENT,
        MODEL_SETTLED,
        MODEL_SPEND,
        REVIEW_AUDIT,
        REVIEW_CONFIRMED,
        REVIEW_OPENED,
        REVIEW_REOPENED,
        REVIEW_RESOLVED,
        RUN_FINISHED,
        RUN_SEALED,
        RUN_STARTED,
        RUN_STOPPED,
    }
)
"""Every event type this version writes."""
