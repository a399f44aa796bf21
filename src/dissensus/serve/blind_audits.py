"""What the review page reads of blind audits: which are open, and what one shows.

A blind audit item (:mod:`dissensus.pipeline.audit`, ``review.audit``) is the case of an
automatic commit with the committed answer, the suggestion, the acceptance figures, the
guard's check and the readings' plurality answer withheld. The page shows it as the CLI
(``dissensus review show RUN.LINE``) and the API (``GET /v1/audits/RUN.LINE``) do, and the
reviewer's answer is journalled by :func:`dissensus.pipeline.confirm.confirm`, the
function behind ``dissensus review confirm``.

Choices this module makes:

* The withheld answer stays withheld while the audit is open, on every page: the list
  of automatic decisions leaves out cases with an open blind audit, and their
  automatic-decision page sends the reviewer to the blind form instead (a look at the
  committed answer first would make the audit a confirmation, not a label).
* The blind form has no default decision (the CLI's ``confirm`` without ``--decision``
  means "the committed one", which a blind reviewer cannot know): an option must be
  picked (or another answer typed, for a case whose panel lists fewer options than
  could be right; the CLI takes any ``--decision`` too), and a note is required, as for
  every audit.
* Once answered, the page shows the reviewer's answer and then the committed one, and
  whether the audit confirmed or corrected it.
* Open audits are listed in journal order (runs in start order, then line), as
  ``dissensus review audits`` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

from dissensus.errors import InputError
from dissensus.pipeline.audit import audit_item, open_audits
from dissensus.pipeline.confirm import EVENT as CONFIRMED
from dissensus.pipeline.records import ReviewItem
from dissensus.pipeline.review import split_ref
from dissensus.quoting import quote_short
from dissensus.serve.journal_adapter import HistoryEntry, UnknownItem
from dissensus.store.journal import Journal

__all__ = ["BlindAudit", "blind_audit", "has_open_audit", "open_audit_refs"]


@dataclass(frozen=True)
class BlindAudit:
    """A blind audit as the page shows it."""

    ref: str
    """``<run>.<line>`` (the case's review id)."""
    item: ReviewItem
    """The blind item (nothing of the committed answer or the suggestion)."""
    answer: HistoryEntry | None
    """The ``review.confirmed`` event once answered (its ``committed`` is shown only then)."""


def _split(ref: str) -> tuple[str, int]:
    try:
        return split_ref(ref, "case reference")
    except InputError as exc:
        raise UnknownItem(str(exc)) from None


def blind_audit(journal: Journal, ref: str) -> BlindAudit:
    """The blind audit of case ``ref`` (:class:`UnknownItem` when the case was not audited)."""
    run_id, line = _split(ref)
    if journal.run(run_id, missing_ok=True) is None:
        raise UnknownItem(f"no case {quote_short(ref)}: no run {quote_short(run_id)}")
    item = audit_item(journal, run_id, line)
    if item is None:
        raise UnknownItem(f"no blind audit for case {quote_short(ref)}")
    done = journal.get(run_id, f"confirm/{line}")
    answer = (
        None
        if done is None or done.type != CONFIRMED
        else HistoryEntry(
            type=done.type,
            at=done.at,
            reviewer=done.payload.get("reviewer"),
            detail={k: v for k, v in done.payload.items() if k != "reviewer"},
        )
    )
    return BlindAudit(ref=ref, item=item, answer=answer)


def open_audit_refs(journal: Journal, run_id: str | None = None) -> list[str]:
    """Refs of the blind audits not answered yet (one run, or every run), in journal order."""
    if run_id and journal.run(run_id, missing_ok=True) is None:
        return []
    return [item.review_id for item in open_audits(journal, run_id or None)]


def has_open_audit(journal: Journal, ref: str) -> bool:
    """Whether case ``ref`` has a blind audit nobody answered yet."""
    try:
        run_id, line = split_ref(ref, "case reference")
    except InputError:
        return False
    if journal.run(run_id, missing_ok=True) is None:
        return False
    return (
        journal.get(run_id, f"case/{line}/audit") is not None
        and journal.get(run_id, f"confirm/{line}") is None
    )
