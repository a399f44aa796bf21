"""The summary ``dissensus decide`` and ``runs resume`` print of a run (without ``--json``).

:func:`print_summary` lists the first records, the counts by outcome, the acceptance
guarantee and the audits, the shift check, and the commands that review the escalated
cases.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from dissensus.cli.common import has_control, out_console, shown

if TYPE_CHECKING:
    from dissensus.pipeline.audit import RunAcceptance
    from dissensus.pipeline.learned import AcceptanceFigures
    from dissensus.pipeline.records import CaseRecord
    from dissensus.store.journal import Journal
    from dissensus.types import JsonObject

__all__ = [
    "DECIDE_LEGEND",
    "SHOWN_RECORDS",
    "STATE_LEGEND",
    "RunTally",
    "audit_words",
    "audits_of",
    "journal_option",
    "print_summary",
    "program_name",
    "shift_off_of",
]

STATE_LEGEND = (
    "states: CA convergent agreement, DA divergent agreement, CD convergent disagreement, "
    "DD divergent disagreement (reasoning similar or not x conclusions agree or not)"
)
DECIDE_LEGEND = (
    "'auto -> escalate': the route, then what the pipeline did; '(learned)' and the like: "
    "what a committed decision rests on (guard, learned acceptance, calibrated reliability, "
    "independent families, CONCORD certificate, human)"
)


JOURNAL_TYPED = (
    " --journal JOURNAL (type the journal's path: it holds a character a terminal cannot show)"
)
"""The ``--journal`` of a command shown for a journal whose path a terminal cannot show
on one line (a newline, an escape sequence): the path is asked for, never printed."""


def journal_option(target: str) -> str:
    """:func:`dissensus.store.targets.journal_option`, imported when a command is shown
    (registering the commands loads no library part); :data:`JOURNAL_TYPED` for a path
    holding a control character, which printed raw would end the line or drive the
    terminal (as ``--output`` is, :func:`dissensus.cli.decide.output_option`)."""
    from dissensus.store.targets import journal_option as option

    said = option(target)
    return JOURNAL_TYPED if has_control(said) else said


SHOWN_RECORDS = 20
"""Records the summary lists (the first ones, in input order); the rest are counted."""


class RunTally:
    """What a run's summary needs, gathered one record at a time (in input order):
    counts, the first :data:`SHOWN_RECORDS` records, the first escalated case's review
    id, the first acceptance figures and the follow-ups' counts and distinct causes.
    Nothing is kept per case beyond the listed records, so a run of any size is
    summarised in the same memory."""

    def __init__(self) -> None:
        from dissensus.pipeline.engine import FollowupCounter

        self.n = 0
        self.auto = 0
        self.escalated = 0
        self.first_review: str | None = None
        self.learned = False
        self.actions: Counter[str] = Counter()
        self.shown: list[CaseRecord] = []
        self.figures: AcceptanceFigures | None = None
        self.followups = FollowupCounter()

    def add(self, record: CaseRecord) -> None:
        self.n += 1
        self.auto += record.auto
        self.actions[record.action] += 1
        if record.action == "escalate" and record.decision is None:
            self.escalated += 1
            if self.first_review is None:
                self.first_review = record.review_id
        self.learned = self.learned or record.basis == "learned"
        if len(self.shown) < SHOWN_RECORDS:
            self.shown.append(record)
        if self.figures is None and record.acceptance is not None:
            self.figures = record.acceptance
        self.followups.add(record)

    @classmethod
    def of(cls, records: Iterable[CaseRecord]) -> RunTally:
        """The tally of ``records`` (in input order)."""
        tally = cls()
        for record in records:
            tally.add(record)
        return tally


def print_summary(
    records: RunTally,
    rejected: int,
    run_id: str,
    journal: str,
    duplicates: int,
    shift: JsonObject | None = None,  # the journalled run/shift payload
    audits: tuple[float, int] | None = None,
    shift_off: str | None = None,  # the run's file keeps no shift reference: why
    acceptance: RunAcceptance | None = None,  # the suspensions and hold the run met
    watched: str | None = None,  # a small run's shift watch, in words
) -> None:
    """Print the run's summary: its first records, the counts, what its decisions rest on
    (the guarantee, the audits, the shift check) and how to review what it escalated."""
    from dissensus.pipeline.learned import guarantee_sentence
    from dissensus.pipeline.shift import shift_words

    tally = records
    out_console.print(f"run {run_id}  journal {shown(journal)}")
    shown_records = tally.shown
    ids = [shown(r.id) for r in shown_records]
    width = max((len(i) for i in ids), default=0)
    for rid, r in zip(ids, shown_records, strict=True):
        flow = f"{r.route} -> {r.action}" if r.route != r.action else r.action
        outcome = (
            f"decision {shown(r.decision)} ({r.basis})"
            if r.decision is not None
            else f"review {r.review_id}"
        )
        out_console.print(f"{rid:<{width}}  {r.state}  {flow:<28} {outcome}", soft_wrap=True)
    if tally.n > len(shown_records):
        out_console.print(
            f"... {tally.n - len(shown_records)} more case(s) (use --json for every record)"
        )
    if tally.n:
        out_console.print(STATE_LEGEND, soft_wrap=True)
        out_console.print(DECIDE_LEGEND, soft_wrap=True)
    n, auto = tally.n, tally.auto
    share = f" ({auto / n:.0%})" if n else ""
    out_console.print(
        f"{n} case(s): {auto} decided automatically{share}, {tally.escalated} waiting for review"
        + (f", {rejected} rejected line(s)" if rejected else "")
        + (f", {duplicates} duplicate panel id(s)" if duplicates else "")
        + (f", {failed} model follow-up(s) failed" if (failed := tally.followups.failed) else "")
    )
    out_console.print(
        "by action: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.actions.items()))
    )
    figures = tally.figures
    stopped = acceptance.words() if acceptance is not None else None
    # The guarantee speaks for learned acceptance's commits: a held run made none (one
    # held on a resume, only those before it), and a suspended one only where a stratum
    # was still free.
    speaks = stopped is None or (
        acceptance is not None
        and (acceptance.held is None or acceptance.held_on_resume)
        and bool(tally.learned)
    )
    if stopped is not None:
        out_console.print(shown(stopped), soft_wrap=True)
    if figures is not None and speaks:
        out_console.print(shown(guarantee_sentence(figures)), soft_wrap=True)
        if audits is not None and audits[0] > 0:
            listed = (
                f"{program_name()} review audits --run {run_id}{shown(journal_option(journal))}"
            )
            out_console.print(audit_words(audits, figures.target_precision, listed), soft_wrap=True)
    if shift is not None:
        out_console.print(shift_words(shift), soft_wrap=True)
    if shift_off is not None:
        out_console.print(shift_off, soft_wrap=True)
    if watched is not None:
        out_console.print(shown(watched), soft_wrap=True)
    if tally.escalated:
        program = program_name()
        out_console.print("review them:")
        where = shown(journal_option(journal))
        out_console.print(f"  {program} review list{where}", soft_wrap=True)
        out_console.print(
            f"  {program} review show {shown(tally.first_review)}{where}", soft_wrap=True
        )


def shift_off_of(journal: Journal, run_id: str) -> str | None:
    """Why the run's shift check is off, when its acceptance file keeps no shift
    reference (a file written before the shift check)."""
    from dissensus.pipeline.shift import shift_off_words

    started = journal.get(run_id, "run/started")
    return shift_off_words(started.payload.get("acceptance") if started is not None else None)


def audits_of(journal: Journal, run_id: str) -> tuple[float, int] | None:
    """The run's audit rate and the blind audits it opened."""
    from dissensus.pipeline.spec import RunSpec
    from dissensus.store import event_types as ev

    started = journal.get(run_id, "run/started")
    if started is None:
        return None
    rate = RunSpec.from_started(started.payload).policy.acceptance.audit_rate
    return rate, sum(1 for _ in journal.events(run_id, type=ev.REVIEW_AUDIT))


def audit_words(audits: tuple[float, int], target: float, command: str) -> str:
    """The audits and the monitor, in words (the summary's last promise); ``command``
    lists them (this program, ``--run``, ``--journal`` when one is named)."""
    from dissensus.acceptance.monitor import confseq_available, target_words

    rate, opened = audits
    said = (
        f"{rate:.0%} of automatic decisions are audited blind ({opened} opened in this run: "
        f"{command})"
    )
    if confseq_available():
        return (
            f"{said}; automatic decisions stop where the audits show precision below "
            f"{target_words(target)}."
        )
    return f"{said}; the monitor that would stop them needs the monitor extra (confseq)."


def program_name() -> str:
    """How to call this program again, as typed (``.venv/bin/dissensus`` off the PATH)."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) != "dissensus":
        return "dissensus"
    found = shutil.which("dissensus")
    if found and os.path.realpath(found) == os.path.realpath(argv0):
        return "dissensus"
    return argv0
