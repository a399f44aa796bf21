"""The human review queue: escalated cases waiting for a person, kept in the run journal.

An escalation journals a ``review.opened`` event holding a
:class:`~dissensus.pipeline.records.ReviewItem` (the panel, the readings, the positions
and value profiles side by side, any packet or certificate). The queue is a view of the
journal, not a second store: an item is *open* until a ``review.resolved`` event for it
exists. Resolving journals the human's decision and note together with the case's new
final record (``case.resolved``: ``action: human``, ``auto: false``, the decision, the
resolution), which supersedes the pipeline's record in exports.

Choices this module makes:

* Review ids are ``<run>.<line>``, the line (the case's 1-based input line) written
  without leading zeros: :func:`split_ref`, which every door (library, CLI, API, page)
  parses ids with, refuses any other spelling (``R.026``, ``R.0``, ``R.-3``) as an
  unknown item. An id that passes is therefore the very string the journal keys the
  item's events, index row and claims on: no other spelling of it can reach the case
  while missing its index row or passing another reviewer's claim.
* **Listing** reads the journal's review index (one row per item, written in the same
  transaction as its ``review.opened`` / ``review.resolved`` events; see
  :mod:`dissensus.store.review_index`), then only the items it yields; the hash chain stays the
  evidence and :func:`list_items_from_events` derives the same listing from it alone
  (two reads: every ``review.opened`` and every ``review.resolved`` event, however many
  items). A page after an item (``after``, a review id) starts at that item's place in
  the queue (its run's creation time, its run, its ``review.opened`` event), so the
  next page is the same whether that item was resolved since or not.
* **The database orders the runs**, on both paths: the index's page and the events'
  order compare creation times and run ids in SQL, and listing from the events takes an
  item of another run than the place's as after it when the journal lists its run after
  the place's run (:meth:`~dissensus.store.journal.Journal.runs`, one query), never by
  comparing the ids here. A PostgreSQL database that compares text by language
  (``en_US``: ``'alpha' < 'Zed'``, ``'run_b' < 'run-b'``) orders runs created at one
  instant otherwise than Python does, and comparing them here lost items from the pages
  listed from the events (and repeated others) there.
* **Final records gathered in one pass.** :class:`FinalRecords` takes a run's events as a
  pass in sequence order meets them (``runs show`` gathers them from the pass that checks
  the chain) and keeps each case's final record, or only its action: counting a run's
  records by action holds a short string per case, never the records.
  :class:`RecordsInOrder` gathers, from the same pass, what is needed to hand the final
  records out afterwards in line order as a second pass reads them, holding only the
  human changes and a position: the run's ``case.record`` events, read again
  :data:`RECORDS_PART` at a time, each replaced by its case's human resolution where
  one stands. That holds when the pass met the run's records each under its own key
  (``case/<line>/record``, case ``<line>``, the record's own line) in strictly
  increasing line order, and every human change is of such a case and keeps its line:
  what every run the run loop writes and every review journals. A run otherwise (one
  an older version journalled out of line order, or edited) is settled whole, in
  memory, as :func:`final_records` does.
* **One atomic append.** ``review.resolved`` and ``case.resolved`` are written in one
  journal transaction that holds the run's write lock, and the "is it still open?" check
  runs inside that transaction: of two reviewers racing, exactly one wins and the other
  gets :class:`AlreadyResolved` naming who resolved it and when. A journal written by an
  older version may hold a ``review.resolved`` without its ``case.resolved``: reading
  derives the record from the resolution, and the next resolve attempt (or
  :func:`complete_resolutions`) journals it.
* **Content binding.** :func:`content_sha256` is the sha256 of the canonical JSON of the
  review item whole, as every door returns it (each position with its reasoning), whether
  it is given the item or its journalled payload in either form
  (:func:`~dissensus.pipeline.review_form.whole_form`): a client can check it against the
  item it was shown, and a hash quoted before review items were journalled with each
  reasoning once still holds. A resolve may quote it (the service requires it,
  ``review resolve --content-sha256`` takes it); a hash that does not match, compared
  in lower case (upper-case hex digits are the same hash), is :class:`StaleContent`
  and nothing is written.
* **Reviewer names** (:func:`reviewer_name_problem`) hold no character of
  :data:`~dissensus.quoting.INVISIBLE`: not only controls and format characters but
  every default-ignorable character and the line and paragraph separators.
  ``alice`` + U+3164 (a Hangul filler) or ``al`` + U+034F + ``ice`` looked like
  ``alice`` and claimed and resolved cases as someone else than ``alice``.
* **Claims** (:func:`claim`) say who is working on an item until when; they are not part
  of the hash chain. A resolve by someone other than the holder of an unexpired claim is
  refused (:class:`~dissensus.store.errors.ClaimConflict`). A library call without a
  reviewer name ignores claims; the CLI and the service always name one
  (:func:`reviewer_name`: ``--reviewer``, else ``$DISSENSUS_REVIEWER``, else the login
  name, else ``uid-<n>``), so both respect claims the same way. A claim on a resolved
  item is refused, checked again under the run's write lock (which resolve and reopen
  also take) against the key of the resolution that would stand *now*
  (``review/<line>/resolved/<k>`` after the *k*-th reopening): a case whose resolution
  was undone is open and claimable, and closed again once it is resolved anew.
* **Undo** (:func:`reopen`): the reviewer who resolved a case may reopen it within a
  window (seconds, chosen by the caller). Reopening is a new ``review.reopened`` event,
  never an edit: the resolution stays in the chain, the item is open again, and the
  case's final record is the pipeline's escalation again until it is resolved anew. The
  *k*-th reopening is keyed ``review/<line>/reopened/<k>``, and the resolutions and final
  records after it ``review/<line>/resolved/<k>`` and ``case/<line>/resolved/<k>`` (the
  first ones keep their keys, so older journals read the same).
* **An option's id is kept exactly.** A decision is trimmed of white space before it is
  journalled (``" 1 "`` typed is option ``1``), except a decision that is one of the
  case's options as given (:func:`as_decision`): an agent's decision may begin or end
  with white space (``"yes "``, ``"a\u00a0"``), and that option, picked on the review
  page or named exactly, was journalled as ``"yes"``, a decision outside the options
  (an automatic decision confirmed so became a correction).
* A case can be resolved once at a time (a second resolution is an error, the first
  stands, until it is undone); the decision may be any label, and a label outside the item's options is allowed but
  flagged (``outside_options``) because a reviewer may reject every option; a case whose
  run was killed before its record was journalled cannot be resolved until the run is
  resumed.
"""

from __future__ import annotations

import getpass
import os
import re
import sys
import unicodedata
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import UTC, datetime
from itertools import islice

from pydantic import BaseModel

from dissensus.errors import DissensusError, InputError
from dissensus.io.limits import MAX_FIELD_CHARS
from dissensus.pipeline.records import CaseRecord, Resolution, ReviewItem
from dissensus.pipeline.review_form import whole_form
from dissensus.pipeline.run_events import ReviewResolved
from dissensus.quoting import INVISIBLE, quote_short
from dissensus.store import event_types as ev
from dissensus.store.canonical import canonical, sha256_text
from dissensus.store.claims import Claim
from dissensus.store.errors import CaseClosed, ClaimConflict
from dissensus.store.events import Event
from dissensus.store.journal import Journal
from dissensus.store.review_index import (
    REVIEW_REOPENED,
    REVIEW_RESOLVED,
    IndexEntry,
    QueuePlace,
    ReviewFilter,
)
from dissensus.store.targets import journal_option
from dissensus.types import lone_surrogate

__all__ = [
    "AlreadyResolved",
    "ClaimConflict",
    "FinalRecords",
    "NotUndoable",
    "RecordsInOrder",
    "ReviewStatus",
    "StaleContent",
    "as_decision",
    "claim",
    "claim_next",
    "complete_resolutions",
    "content_sha256",
    "control_problem",
    "final_records",
    "find_item",
    "human_record",
    "item_decisions",
    "list_items",
    "list_items_from_events",
    "record_key",
    "reopen",
    "resolution_event",
    "resolve",
    "resolved_records",
    "review_entries",
    "reviewer_name",
    "reviewer_name_problem",
    "shows_nothing",
]

REVIEWER_ENV = "DISSENSUS_REVIEWER"
"""The reviewer's name when ``--reviewer`` is not given."""

LIST_CHUNK = 25
"""Items :func:`list_items` reads per query (a reviewer's client asks for about 10)."""

DEFAULT_CLAIM_TTL = 900.0
"""Seconds a claim lasts unless renewed (15 minutes)."""


class AlreadyResolved(DissensusError):
    """The review item was resolved before (by ``reviewer`` at ``at``)."""

    def __init__(self, review_id: str, *, reviewer: str | None, at: str, decision: str) -> None:
        who = reviewer or "an unnamed reviewer"
        super().__init__(
            f"review item {review_id} was already resolved by {who} at {at} (decision {decision!r})"
        )
        self.review_id = review_id
        self.reviewer = reviewer
        self.at = at
        self.decision = decision


class StaleContent(DissensusError):
    """The content hash a reviewer quoted is not the item's current content."""

    def __init__(self, review_id: str, *, quoted: str, current: str) -> None:
        super().__init__(
            f"review item {review_id}: the case content changed since it was shown "
            f"(quoted sha256 {quoted[:16]}..., current {current[:16]}...); reload it"
        )
        self.review_id = review_id
        self.quoted = quoted
        self.current = current


class NotUndoable(DissensusError):
    """The resolution cannot be undone (open, someone else's, or past the window)."""


class ReviewStatus(BaseModel):
    """One queue entry."""

    item: ReviewItem
    resolution: Resolution | None
    content_sha256: str = ""
    """sha256 of the item's canonical JSON: what a resolve quotes to prove what was seen."""
    resolved_at: str | None = None


def _login() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):
        return ""


def reviewer_name(
    given: str | None,
    environ: Mapping[str, str] | None = None,
    login: Callable[[], str] = _login,
) -> str:
    """Who is reviewing: ``given``, else ``$DISSENSUS_REVIEWER``, else the login name,
    else ``uid-<n>``; never empty (a blank ``given`` is an :class:`InputError`).

    A name is journalled with every resolution and printed on every screen that shows
    it, so ``given`` or ``$DISSENSUS_REVIEWER`` holding a control or format character
    (an escape sequence, a zero-width space that makes ``al\u200bice`` look like
    ``alice``) or more than :data:`MAX_REVIEWER_CHARS` characters is an
    :class:`InputError` naming where it came from, as ``serve-token`` refuses such a
    token name."""
    if given is not None:
        if not given.strip():
            raise InputError("--reviewer must not be empty")
        return _checked_reviewer(given.strip(), "--reviewer")
    env = os.environ if environ is None else environ
    named = env.get(REVIEWER_ENV, "")
    if named.strip():
        return _checked_reviewer(named.strip(), f"${REVIEWER_ENV}")
    name = login()
    if name.strip():
        return name.strip()
    uid = getattr(os, "getuid", None)
    return f"uid-{uid()}" if uid is not None else "unnamed-reviewer"


MAX_REVIEWER_CHARS = 128
"""The longest reviewer name (``--reviewer``, ``$DISSENSUS_REVIEWER``)."""


def _lone_surrogate(text: str, where: str) -> str | None:
    """Why ``text`` is not Unicode text, naming ``where``, or None: a lone surrogate
    (``"\\ud83d"`` from a JSON escape, an undecodable byte of an argument) has no UTF-8
    form, so no journal could hold it."""
    problem = lone_surrogate(text)
    return None if problem is None else f"{where} is {problem}"


def reviewer_name_problem(name: str, where: str) -> str | None:
    """Why ``name`` (named ``where`` in the text) cannot be a reviewer's, or None: a lone
    surrogate, more than :data:`MAX_REVIEWER_CHARS` characters, or a character that
    shows as nothing or does what a reader cannot see (:data:`~dissensus.quoting.INVISIBLE`:
    a control or format character, such as an escape sequence or a zero-width space that
    makes ``al\u200bice`` look like ``alice``; any other default-ignorable one, such as
    a Hangul filler or a combining grapheme joiner; a line or paragraph separator).
    The one test of every place a reviewer is named: ``--reviewer``,
    ``$DISSENSUS_REVIEWER``, a resolution, and the service's token names."""
    surrogate = _lone_surrogate(name, where)
    if surrogate is not None:
        return surrogate
    if len(name) > MAX_REVIEWER_CHARS:
        return (
            f"{where} is {len(name)} characters long; a reviewer name holds at most "
            f"{MAX_REVIEWER_CHARS}"
        )
    if INVISIBLE.search(name) or any(unicodedata.category(ch) in ("Cc", "Cf") for ch in name):
        return f"{where} may not hold control or invisible characters (got {quote_short(name)})"
    return None


def _checked_reviewer(name: str, where: str) -> str:
    problem = reviewer_name_problem(name, where)
    if problem is not None:
        raise InputError(problem)
    return name


def refuse_others_claim(journal: Journal, ref: str, reviewer: str | None, what: str) -> None:
    """:class:`ClaimConflict` when a live claim on ``ref`` is not ``reviewer``'s: only its
    holder resolves or audits, never an unnamed caller (``reviewer=None``), who holds no
    claim. ``what`` names the case in the message."""
    held = journal.current_claim(ref)
    if held is not None and held.who != reviewer:
        raise ClaimConflict(
            f"{what} is claimed by {held.who} until {held.expires}",
            holder=held.who,
            expires=held.expires,
        )


def as_decision(decision: str, options: Collection[str]) -> str:
    """A reviewer's ``decision`` as journalled: one of ``options`` exactly as given (an
    option's id may begin or end with white space, as an agent's decision may), any
    other trimmed (``" 1 "`` typed is ``"1"``)."""
    return decision if decision in options else decision.strip()


def item_decisions(item: ReviewItem) -> set[str]:
    """The decisions a resolution of ``item`` may name exactly: its options, every
    decision an agent gave, and the suggestion."""
    given = {p.decision for p in item.positions if p.decision is not None}
    return set(item.options) | given | ({item.suggestion} if item.suggestion else set())


def check_resolution_fields(*, decision: str | None, note: str, reviewer: str | None) -> None:
    """What every resolution and audit checks before it is journalled: a decision (when
    given) and a note that are not blank (nothing but spaces and invisible characters,
    such as a zero-width space), without a control character (:func:`control_problem`;
    a note may hold tabs and line breaks), and hold at most
    :data:`~dissensus.io.limits.MAX_FIELD_CHARS` characters (the bound of a panel's text
    fields, and the service's ``--max-field-chars`` default), and a reviewer name as
    :func:`reviewer_name` allows; none of them holding a lone surrogate (a ``"\\ud83d"``
    JSON escape, which no UTF-8 journal can hold); an :class:`InputError` naming the
    field (also as its :attr:`~InputError.field`, for a door that names fields its own way)."""
    for field, value in (("decision", decision), ("note", note)):
        if value is None:
            continue
        problem = None
        if shows_nothing(value):
            problem = f"the {field} must not be empty"
        elif (surrogate := _lone_surrogate(value, f"the {field}")) is not None:
            problem = surrogate
        elif (control := control_problem(value, lines=field == "note")) is not None:
            problem = f"the {field} {control}"
        elif len(value) > MAX_FIELD_CHARS:
            problem = f"the {field} is {len(value)} characters long; at most {MAX_FIELD_CHARS}"
        if problem is not None:
            error = InputError(problem)
            error.field = field
            raise error
    if reviewer is not None:
        _checked_reviewer(reviewer, "the reviewer")


def control_problem(text: str, *, lines: bool) -> str | None:
    """Why ``text`` cannot be a decision (``lines=False``) or a note (``lines=True``: tab,
    newline and carriage return allowed), or ``None``: a control character (``U+0000``
    to ``U+001F``, ``U+007F`` to ``U+009F``). ``"1\u0000"`` looked like ``1`` on every
    screen and was journalled as an answer outside the options."""
    allowed = "\t\n\r" if lines else ""
    for ch in text:
        if unicodedata.category(ch) == "Cc" and ch not in allowed:
            return f"holds the control character U+{ord(ch):04X}"
    return None


def shows_nothing(text: str) -> bool:
    """Whether ``text`` shows nothing: only white space and format characters (Cf)."""
    return all(ch.isspace() or unicodedata.category(ch) == "Cf" for ch in text)


_LINE = re.compile(r"[1-9][0-9]{0,17}")
"""The line part of a review id or case reference, in its one written form."""

_UNKNOWN = {"review id": "review item", "case reference": "case"}


def split_ref(ref: str, what: str = "review id") -> tuple[str, int]:
    """``<run>.<line>`` -> ``(run, line)``; :class:`InputError` ("no review item ...", or
    "no case ..." for a ``case reference``) for anything else.

    The line is written one way only: ASCII digits without a leading zero (at most 18).
    ``R.026``, ``R.0`` and ``R.-3`` name no item, so every id that passes is the exact
    string the journal keys its events, index row and claims on.
    """
    run_id, sep, line = ref.rpartition(".")
    if not sep or not run_id or _LINE.fullmatch(line) is None:
        raise InputError(
            f"no {_UNKNOWN.get(what, what)} {quote_short(ref)}: a {what} is <run>.<line>, the line a "
            f"number from 1 without leading zeros"
        )
    return run_id, int(line)


def content_sha256(item: ReviewItem | dict[str, object]) -> str:
    """sha256 of the canonical JSON of the review item whole (each position with its
    reasoning), given the item or its journalled payload in either form."""
    data = item.model_dump(mode="json") if isinstance(item, ReviewItem) else whole_form(item)
    return sha256_text(canonical(data))


def _generation(journal: Journal, run_id: str, line: int) -> int:
    """How many times the item was reopened."""
    n = 0
    while journal.get(run_id, f"review/{line}/reopened/{n + 1}") is not None:
        n += 1
    return n


def _suffix(generation: int) -> str:
    return "" if generation == 0 else f"/{generation}"


def _resolution_event(journal: Journal, run_id: str, line: int) -> Event | None:
    """The item's standing resolution (``None`` while open)."""
    return journal.get(
        run_id, f"review/{line}/resolved{_suffix(_generation(journal, run_id, line))}"
    )


def resolution_event(journal: Journal, run_id: str, line: int) -> Event | None:
    """The ``review.resolved`` event standing for case ``line`` of ``run_id`` (``None``
    while it is open, e.g. after its resolution was undone)."""
    return _resolution_event(journal, run_id, line)


def record_key(journal: Journal, run_id: str, line: int) -> str:
    """The key of the case's standing ``case.resolved`` event (it may not exist)."""
    return f"case/{line}/resolved{_suffix(_generation(journal, run_id, line))}"


def _resolution(event: Event | None) -> Resolution | None:
    if event is None:
        return None
    return event.read_as(Resolution)


def _status(journal: Journal, event: Event, resolved: Event | bool | None = True) -> ReviewStatus:
    """The queue entry of a ``review.opened`` event; ``resolved`` is its resolution event
    (or ``None``) when already read, ``True`` to read it."""
    item = event.read_as(ReviewItem)
    if resolved is True:
        resolved = _resolution_event(journal, item.run_id, item.line)
    assert resolved is not False
    return ReviewStatus(
        item=item,
        resolution=_resolution(resolved),
        content_sha256=content_sha256(event.payload),
        resolved_at=resolved.at if resolved else None,
    )


def list_items(
    journal: Journal,
    *,
    run_id: str | None = None,
    include_resolved: bool = False,
    resolved_only: bool = False,
    reason: str | None = None,
    limit: int | None = None,
    after: str | None = None,
) -> Iterator[ReviewStatus]:
    """Queue entries (open ones only unless ``include_resolved``; resolved ones only with
    ``resolved_only``; with ``reason``, those whose reason contains it, ignoring case;
    at most ``limit``; with ``after``, a review id, only those after that item in the
    queue, whatever its status: the next page), oldest run first.

    The entries come from the journal's review index (:meth:`Journal.review_entries`) and
    each item is read when the iteration reaches it, so taking the first few costs a few
    reads however long the journal; the result is the same as :func:`list_items_from_events`.
    """
    place = queue_place(journal, after) if after is not None else None
    entries = review_entries(
        journal,
        run_id=run_id,
        include_resolved=include_resolved,
        resolved_only=resolved_only,
        reason=reason,
        limit=limit,
        after=place,
    )
    if entries is None:
        yield from islice(
            list_items_from_events(
                journal,
                run_id=run_id,
                include_resolved=include_resolved,
                resolved_only=resolved_only,
                reason=reason,
                after=place,
            ),
            limit,
        )
        return
    for start in range(0, len(entries), LIST_CHUNK):
        chunk = entries[start : start + LIST_CHUNK]
        refs = [(e.run_id, e.seq) for e in chunk]
        refs += [(e.run_id, e.resolved_seq) for e in chunk if e.resolved_seq is not None]
        events = journal.events_at(refs)
        for entry in chunk:
            event = events.get((entry.run_id, entry.seq))
            if event is None:  # pragma: no cover - the index is written with the event
                continue
            resolved = (
                events.get((entry.run_id, entry.resolved_seq))
                if entry.resolved_seq is not None
                else None
            )
            yield _status(journal, event, resolved)


def review_entries(
    journal: Journal,
    *,
    run_id: str | None = None,
    include_resolved: bool = False,
    resolved_only: bool = False,
    reason: str | None = None,
    limit: int | None = None,
    after: QueuePlace | None = None,
) -> list[IndexEntry] | None:
    """The index entries :func:`list_items` would yield, without reading the items
    (``None`` when the journal's index cannot be used)."""
    if run_id is not None:
        journal.run(run_id)
    status: ReviewFilter = "resolved" if resolved_only else "all" if include_resolved else "open"
    entries = journal.review_entries(
        run_id=run_id, status=status, limit=None if reason else limit, after=after
    )
    if entries is None or not reason:
        return entries
    needle = reason.lower()
    return [e for e in entries if needle in e.reason.lower()][:limit]


def list_items_from_events(
    journal: Journal,
    *,
    run_id: str | None = None,
    include_resolved: bool = False,
    resolved_only: bool = False,
    reason: str | None = None,
    after: QueuePlace | None = None,
) -> Iterator[ReviewStatus]:
    """:func:`list_items` computed from the hash chain alone: every ``review.opened``
    event and its resolution (slower; the reference the review index is checked against).

    With ``after`` (an item's place), an item of the place's run is after it when its
    ``review.opened`` event is later in the run; an item of another run, when the journal
    lists its run after the place's (:meth:`Journal.runs`: by creation time, then by id,
    as the database compares them, which is how the index's page and the events' order
    compare them too)."""
    later: set[str] | None = None

    def placed(event: Event) -> bool:
        nonlocal later
        if after is None:
            return True
        _, after_run, after_seq = after
        if event.run_id == after_run:
            return event.seq > after_seq
        if later is None:  # one query, the first time an item of another run is met
            later = {info.run_id for info in journal.runs(after=after_run)}
        return event.run_id in later

    if run_id is not None:
        journal.run(run_id)
    events = (
        journal.events(run_id, type=ev.REVIEW_OPENED)
        if run_id
        else journal.events_of_type(ev.REVIEW_OPENED)
    )
    resolutions = (
        journal.events(run_id, type=REVIEW_RESOLVED)
        if run_id
        else journal.events_of_type(REVIEW_RESOLVED)
    )
    reopenings = (
        journal.events(run_id, type=REVIEW_REOPENED)
        if run_id
        else journal.events_of_type(REVIEW_REOPENED)
    )
    standing: dict[tuple[str, str | None], Event] = {}
    for e in sorted([*resolutions, *reopenings], key=lambda e: (e.run_id, e.seq)):
        if e.type == REVIEW_RESOLVED:
            standing[(e.run_id, e.case)] = e
        else:
            standing.pop((e.run_id, e.case), None)
    needle = reason.lower() if reason else None
    for event in events:
        if not placed(event):
            continue
        item_run, line = event.run_id, event.payload.get("line")
        status = _status(journal, event, standing.get((item_run, str(line))))
        if needle is not None and needle not in status.item.reason.lower():
            continue
        if resolved_only and status.resolution is None:
            continue
        if status.resolution is None or include_resolved or resolved_only:
            yield status


def queue_place(journal: Journal, review_id: str) -> QueuePlace:
    """Where item ``review_id`` stands in the review queue (:class:`InputError`, as
    :func:`find_item`, when there is no such item): a page's ``after``."""
    st = find_item(journal, review_id)
    info = journal.run(st.item.run_id)
    opened = journal.get(st.item.run_id, f"case/{st.item.line}/review")
    assert info is not None and opened is not None
    return (info.created, info.run_id, opened.seq)


def find_item(journal: Journal, review_id: str) -> ReviewStatus:
    """The queue entry ``review_id`` (:class:`InputError` when there is none)."""
    run_id, line = split_ref(review_id)
    if journal.run(run_id, missing_ok=True) is None:
        raise InputError(
            f"no review item {quote_short(review_id)}: no run {quote_short(run_id)} in {journal.path}"
        )
    event = journal.get(run_id, f"case/{line}/review")
    if event is None:
        if journal.get(run_id, f"case/{line}/audit") is not None:
            # pipeline.audit's key: a blind audit of an automatic decision, not an escalation.
            raise InputError(
                f"{quote_short(review_id)} is a blind audit of an automatic decision, not a "
                "review item: answer it with dissensus review confirm "
                f"{review_id}{journal_option(journal.path)} --decision D --note TEXT"
            )
        raise InputError(f"no review item {quote_short(review_id)} in {journal.path}")
    return _status(journal, event)


def claim(journal: Journal, review_id: str, who: str, *, ttl: float = DEFAULT_CLAIM_TTL) -> Claim:
    """Claim an open item for ``who`` for ``ttl`` seconds (renews ``who``'s own claim).

    :class:`AlreadyResolved` for a resolved item; :class:`ClaimConflict` when someone
    else holds it.
    """
    status = find_item(journal, review_id)
    if status.resolution is not None:
        raise AlreadyResolved(
            review_id,
            reviewer=status.resolution.reviewer,
            at=status.resolved_at or "?",
            decision=status.resolution.decision,
        )
    run_id, line = split_ref(review_id)
    try:
        # Checked again under the run's write lock, which resolve and reopen take too: the
        # key of the resolution that would stand now (``resolved/<k>`` after the k-th
        # reopening) is read under it, so no resolution slips in between, and a resolution
        # that was undone no longer closes the case.
        with journal.transaction(run_id):
            closing = f"review/{line}/resolved{_suffix(_generation(journal, run_id, line))}"
            return journal.claim(review_id, who, ttl, run_id=run_id, closed_by=closing)
    except CaseClosed as closed:
        p = closed.event.payload
        raise AlreadyResolved(
            review_id, reviewer=p.get("reviewer"), at=closed.event.at, decision=str(p["decision"])
        ) from None


def claim_next(
    journal: Journal, who: str, *, ttl: float = DEFAULT_CLAIM_TTL, run_id: str | None = None
) -> ReviewStatus | None:
    """Claim the oldest open item nobody else holds (``who``'s own claim counts as free);
    ``None`` when there is none. Reviewers racing for items each get a different one."""
    for status in list_items(journal, run_id=run_id):
        held = journal.current_claim(status.item.review_id)
        if held is not None and held.who != who:
            continue
        try:
            claim(journal, status.item.review_id, who, ttl=ttl)
        except (ClaimConflict, AlreadyResolved):
            continue
        return status
    return None


def human_record(original: CaseRecord, resolution: Resolution, how: str = "resolved") -> CaseRecord:
    """The case's record once a person decided it (``how``: ``resolved``, ``corrected``)."""
    note = resolution.note
    return original.model_copy(
        update={
            "action": "human",
            "decision": resolution.decision,
            "auto": False,
            "basis": "human",
            "reason": f"{original.reason}; {how} by a reviewer: {note}"
            if note
            else f"{original.reason}; {how} by a reviewer",
            "path": [*original.path, f"human:{how}"],
            "resolution": resolution,
        }
    )


def resolve(
    journal: Journal,
    review_id: str,
    *,
    decision: str,
    note: str,
    reviewer: str | None = None,
    content_sha256: str | None = None,
) -> CaseRecord:
    """Record a human decision on an escalated case and return the case's new record.

    Both events are appended in one transaction. ``content_sha256``, when given, must be
    the item's current :func:`content_sha256` (:class:`StaleContent` otherwise). A live
    claim of anyone but ``reviewer`` refuses it (:class:`ClaimConflict`), also when
    ``reviewer`` is ``None``: an unnamed caller holds no claim.
    """
    check_resolution_fields(decision=decision, note=note, reviewer=reviewer)
    run_id, line = split_ref(review_id)
    find_item(journal, review_id)  # unknown ids fail before any lock is taken
    with journal.transaction(run_id):
        done = _resolution_event(journal, run_id, line)
        if done is not None:
            _complete(journal, run_id, line)  # a half-applied resolution is finished, then reported
    if done is not None:
        previous = _resolution(done)
        assert previous is not None
        raise AlreadyResolved(
            review_id, reviewer=previous.reviewer, at=done.at, decision=previous.decision
        )
    with journal.transaction(run_id):
        status = find_item(journal, review_id)
        done = _resolution_event(journal, run_id, line)
        if done is not None:
            previous = _resolution(done)
            assert previous is not None
            raise AlreadyResolved(
                review_id, reviewer=previous.reviewer, at=done.at, decision=previous.decision
            )
        if content_sha256 is not None and content_sha256.lower() != status.content_sha256:
            raise StaleContent(review_id, quoted=content_sha256, current=status.content_sha256)
        refuse_others_claim(journal, review_id, reviewer, f"review item {review_id}")
        stored = journal.get(run_id, f"case/{line}/record")
        if stored is None:
            raise DissensusError(
                f"run {run_id} has not finished case {line}: resume it first "
                f"(dissensus runs resume {run_id}{journal_option(journal.path)})"
            )
        original = stored.read_as(CaseRecord)
        decision = as_decision(decision, item_decisions(status.item))
        outside = bool(status.item.options) and decision not in status.item.options
        suffix = _suffix(_generation(journal, run_id, line))
        journal.append(
            run_id,
            ev.REVIEW_RESOLVED,
            ReviewResolved(
                review_id=review_id,
                decision=decision,
                note=note,
                reviewer=reviewer,
                outside_options=outside,
                content_sha256=status.content_sha256,
            ).payload(),
            key=f"review/{line}/resolved{suffix}",
            case=str(line),
        )
        record = human_record(original, Resolution(decision=decision, note=note, reviewer=reviewer))
        journal.append(
            run_id,
            ev.CASE_RESOLVED,
            record.model_dump(mode="json"),
            key=f"case/{line}/resolved{suffix}",
            case=str(line),
        )
        if reviewer is not None:
            # In the resolution's own transaction: a busy journal cannot refuse the claim's
            # release after the resolution has committed (the reviewer told "not saved"
            # while it was).
            journal.release_claim(review_id, reviewer)
    return record


def reopen(
    journal: Journal,
    review_id: str,
    *,
    reviewer: str,
    within_s: float,
    now: datetime | None = None,
) -> Event:
    """Undo ``reviewer``'s resolution of ``review_id`` made at most ``within_s`` seconds
    ago: journal a ``review.reopened`` event (the item is open again) and return it.

    :class:`NotUndoable` when the item is open, was resolved by someone else, or the
    window has passed.
    """
    run_id, line = split_ref(review_id)
    find_item(journal, review_id)
    with journal.transaction(run_id):
        generation = _generation(journal, run_id, line)
        done = journal.get(run_id, f"review/{line}/resolved{_suffix(generation)}")
        if done is None:
            raise NotUndoable(f"review item {review_id} is open: there is no resolution to undo")
        who = done.payload.get("reviewer")
        if who != reviewer:
            raise NotUndoable(
                f"review item {review_id} was resolved by {who or 'an unnamed reviewer'}: "
                f"only they can undo it"
            )
        age = ((now or datetime.now(UTC)) - datetime.fromisoformat(done.at)).total_seconds()
        if age > within_s:
            raise NotUndoable(
                f"review item {review_id} was resolved {age:.0f} s ago: a resolution can be "
                f"undone for {within_s:g} s"
            )
        return journal.append(
            run_id,
            REVIEW_REOPENED,
            {
                "review_id": review_id,
                "reviewer": reviewer,
                "undoes": done.key,
                "decision": done.payload.get("decision"),
            },
            key=f"review/{line}/reopened/{generation + 1}",
            case=str(line),
        )


def _derived(journal: Journal, run_id: str, line: int) -> CaseRecord | None:
    """The resolved record of a ``review.resolved`` whose ``case.resolved`` is missing."""
    done = _resolution_event(journal, run_id, line)
    stored = journal.get(run_id, f"case/{line}/record")
    if done is None or stored is None:
        return None
    resolution = _resolution(done)
    assert resolution is not None
    return human_record(stored.read_as(CaseRecord), resolution)


def _complete(journal: Journal, run_id: str, line: int) -> None:
    key = record_key(journal, run_id, line)
    if journal.get(run_id, key) is not None:
        return
    record = _derived(journal, run_id, line)
    if record is not None:
        journal.append(
            run_id, ev.CASE_RESOLVED, record.model_dump(mode="json"), key=key, case=str(line)
        )


def complete_resolutions(journal: Journal, run_id: str) -> int:
    """Journal the ``case.resolved`` of every half-applied resolution of the run; the count."""
    done = 0
    with journal.transaction(run_id):
        have = {e.key for e in journal.events(run_id, type=ev.CASE_RESOLVED)}
        for event in journal.events(run_id, type=ev.REVIEW_RESOLVED):
            if event.case is None or not event.case.isdigit():
                continue
            line = int(event.case)
            key = record_key(journal, run_id, line)
            standing = _resolution_event(journal, run_id, line)
            if key in have or standing is None or standing.seq != event.seq:
                continue
            _complete(journal, run_id, line)
            done += journal.get(run_id, key) is not None
    return done


class FinalRecords:
    """A run's final records (or only their actions), gathered from its events as one
    pass over them in sequence order meets them (:meth:`add`), then settled
    (:meth:`settle`): what :func:`final_records` reads. With ``whole=False`` only each
    case's final action is kept, so counting a run's records by action holds a short
    string per case, never the records; the human changes (resolutions, reopenings)
    are held as they are met, a few per reviewed case."""

    def __init__(self, *, whole: bool = True) -> None:
        self._whole = whole
        self._records: dict[str, CaseRecord | str] = {}
        self._original: dict[str, CaseRecord | str] = {}
        self._changes: list[tuple[int, str, str, CaseRecord | str | None]] = []
        self._resolved: list[tuple[int, str]] = []

    def _kept(self, event: Event) -> CaseRecord | str:
        record = event.read_as(CaseRecord)
        return record if self._whole else sys.intern(str(record.action))

    def add(self, event: Event) -> None:
        """Take ``event`` into account (any event of the run: others are passed by)."""
        if event.type == ev.CASE_RECORD:
            case = str(event.case)
            self._records[case] = self._original[case] = self._kept(event)
        elif event.type == ev.CASE_RESOLVED:
            self._changes.append((event.seq, event.type, str(event.case), self._kept(event)))
        elif event.type == REVIEW_REOPENED:
            self._changes.append((event.seq, event.type, str(event.case), None))
        elif event.type == ev.REVIEW_RESOLVED:
            self._resolved.append((event.seq, str(event.case)))

    def cases(self) -> set[str]:
        """The cases a human change (a resolution, a reopening) was met for."""
        return {c[2] for c in self._changes} | {case for _, case in self._resolved}

    def settle(self, journal: Journal, run_id: str) -> dict[str, CaseRecord | str]:
        """The final record (or action) of every case, by case: human resolutions
        superseding escalations, a reopening restoring the pipeline's record."""
        records, original = self._records, self._original
        resolved: set[str] = set()
        # Resolutions and reopenings in chain order: a reopening restores the pipeline's record.
        for _, type, case, kept in sorted(self._changes, key=lambda c: c[0]):
            if type == REVIEW_REOPENED:
                if case in original:
                    records[case] = original[case]
                resolved.discard(case)
            else:
                assert kept is not None
                records[case] = kept
                resolved.add(case)
        for seq, case in sorted(self._resolved):
            if case not in resolved and case.isdigit():
                standing = _resolution_event(journal, run_id, int(case))
                derived = _derived(journal, run_id, int(case))
                if derived is not None and standing is not None and standing.seq == seq:
                    records[case] = derived if self._whole else sys.intern(str(derived.action))
        return records


RECORDS_PART = 500
"""``case.record`` events :meth:`RecordsInOrder.records` reads in one query."""


class RecordsInOrder:
    """A run's final records in line order, handed out as a second pass reads them
    (module docstring): :meth:`add` takes each event of the first pass (in sequence
    order), :meth:`records` then reads the records. Holds the human changes (a few per
    reviewed case) and no record of the run."""

    def __init__(self) -> None:
        self._changes = FinalRecords()
        self._in_order = True
        self._line = -1  # the line of the last case.record met
        self._last = -1  # the sequence number of the last case.record met
        self._seen = -1  # the sequence number of the last event the pass met

    def add(self, event: Event) -> None:
        """Take ``event`` into account: a ``case.record`` is read (one that does not
        read is the caller's error, in this pass) and its place checked; a human
        change is kept."""
        self._seen = max(self._seen, event.seq)
        if event.type == ev.CASE_RECORD:
            line = event.read_as(CaseRecord).line
            case = str(line)
            if event.case != case or event.key != f"case/{case}/record" or line <= self._line:
                self._in_order = False
            self._line = max(self._line, line)
            self._last = event.seq
        elif event.type in (ev.CASE_RESOLVED, REVIEW_REOPENED, ev.REVIEW_RESOLVED):
            self._changes.add(event)

    def _standing(self, journal: Journal, run_id: str) -> dict[str, CaseRecord] | None:
        """The final record of every case a human changed, by case; ``None`` when the
        records cannot be handed out in the order the pass met them."""
        if not self._in_order:
            return None
        changes = self._changes
        for case in sorted(changes.cases()):
            stored = journal.get(run_id, f"case/{case}/record") if case.isdigit() else None
            if (
                stored is None
                or stored.type != ev.CASE_RECORD  # an event of another type under its key
                or stored.seq > self._last
                or stored.case != case
            ):
                return None  # a change of a case whose record the pass did not meet
            changes.add(stored)
        standing: dict[str, CaseRecord] = {}
        for case, record in changes.settle(journal, run_id).items():
            if not isinstance(record, CaseRecord) or str(record.line) != case:
                return None  # a change that moves the record
            standing[case] = record
        return standing

    def records(self, journal: Journal, run_id: str) -> Iterator[CaseRecord]:
        """The final records in line order (what :func:`final_records` gives of the
        events the pass met), read :data:`RECORDS_PART` at a time."""
        standing = self._standing(journal, run_id)
        if standing is None:  # the events the pass met, none appended since
            yield from final_records(journal, run_id, upto=self._seen)
            return
        after = -1
        while part := journal.events_after(run_id, after, RECORDS_PART, type=ev.CASE_RECORD):
            for event in part:
                if event.seq > self._last:
                    return  # appended after the pass: not shown
                kept = standing.get(str(event.case))
                yield kept if kept is not None else event.read_as(CaseRecord)
            after = part[-1].seq


def resolved_records(journal: Journal, run_id: str) -> dict[int, CaseRecord]:
    """Line -> the run's record in its resolved form, for the cases a human's resolution
    stands on (what :func:`final_records` gives them), read from the review and
    resolution events alone: the run's ``case.record`` events are not read, so this
    holds one record per resolved case, never one per case of the run."""
    changes = [
        *journal.events(run_id, type=ev.CASE_RESOLVED),
        *journal.events(run_id, type=REVIEW_REOPENED),
    ]
    records: dict[str, CaseRecord] = {}
    resolved: set[str] = set()
    for event in sorted(changes, key=lambda e: e.seq):
        case = str(event.case)
        if event.type == REVIEW_REOPENED:
            if case.isdigit() and journal.get(run_id, f"case/{case}/record") is not None:
                records.pop(case, None)  # the pipeline's record again
            resolved.discard(case)
        else:
            records[case] = event.read_as(CaseRecord)
            resolved.add(case)
    for event in journal.events(run_id, type=ev.REVIEW_RESOLVED):
        case = str(event.case)
        if case not in resolved and case.isdigit():
            standing = _resolution_event(journal, run_id, int(case))
            derived = _derived(journal, run_id, int(case))
            if derived is not None and standing is not None and standing.seq == event.seq:
                records[case] = derived
    return {r.line: r for r in records.values() if r.resolution is not None}


def final_records(journal: Journal, run_id: str, *, upto: int | None = None) -> list[CaseRecord]:
    """The run's final records in input order, human resolutions superseding escalations;
    of its events up to sequence number ``upto`` when given (what a reader that counted
    the run that far shows, whatever was appended since)."""
    found = FinalRecords()
    for type in (ev.CASE_RECORD, ev.CASE_RESOLVED, REVIEW_REOPENED, ev.REVIEW_RESOLVED):
        for event in journal.events(run_id, type=type):
            if upto is None or event.seq <= upto:
                found.add(event)
    records = [r for r in found.settle(journal, run_id).values() if isinstance(r, CaseRecord)]
    return sorted(records, key=lambda r: r.line)
