"""The one place the service touches the journal for review work: claims, resolutions, history.

Everything the service does to a review item goes through :class:`ReviewDesk`, a thin
layer over :mod:`dissensus.pipeline.review` and the journal's claims
(:meth:`dissensus.store.Journal.claim`), so the service decides nothing the CLI would
decide differently.

* **Content hash.** :func:`content_sha256` is the sha256 of the canonical JSON of the
  review item as journalled (:func:`dissensus.pipeline.review.content_sha256`). A
  resolve quoting any other hash is refused (:class:`StaleContent`, HTTP 409) and
  nothing is written.
* **Claims** are the journal's coordination state, outside the hash chain: a claim
  holds until it expires; a live claim of another reviewer blocks both claiming and
  resolving (:class:`ClaimConflict`, 409); the holder may renew it. The journal takes
  the claim in a write transaction (SQLite's write lock, PostgreSQL's row lock), so of
  two servers racing for one item exactly one gets it. Only the holder may give a claim
  up before it expires (:meth:`ReviewDesk.release`; another's is :class:`ClaimConflict`). :meth:`ReviewDesk.claim` takes
  the ``<run>.<line>`` of an escalated case (an open review item) or of an automatic
  decision not audited yet (:func:`dissensus.pipeline.confirm.claim_audit`; its blind
  audit, if any, has the same reference), since an audit respects a claim as a
  resolution does; anything else is :class:`UnknownItem` (404).
* **Resolutions** go through :func:`dissensus.pipeline.review.resolve` (the CLI's path)
  with the token's name as the reviewer: ``review.resolved`` and ``case.resolved`` are
  one transaction, and the "still open?" check runs inside it, so a second resolve (from
  any process) is refused with who resolved the case and when (:class:`AlreadyResolved`,
  409).
* **Audits** of automatic decisions go through :func:`dissensus.pipeline.confirm.confirm`
  (the CLI's ``review confirm``) with the token's name as the reviewer; a second audit
  is refused with who audited the case and when (:class:`AlreadyConfirmed`, 409).
* **A decision naming an option.** A resolution's or an audit's decision is journalled
  as an option's id when it names that option: once trimmed, it is the option's id or
  the label the review page shows for it ("Output (a)"), exactly or ignoring case
  (:func:`~dissensus.serve.case_view.options_named`; :func:`answer_for`). So an answer
  typed as the page shows an option, through the page's "another answer" field or the
  API, is that option, never a decision "outside the options" that reads the same; an
  exact id always stays itself. A decision naming two options alike (two options with
  one label) is refused (:class:`AmbiguousAnswer`, 422 naming ``decision``). The CLI's
  ``review resolve`` and ``review confirm`` journal the decision as given: they show no
  labels.
* The history of a case is its ``review.*`` events in the hash chain (claims, being
  coordination state, are shown while live but are not history).
* **Queue order** (:meth:`ReviewDesk.order`): the journal's queue order (oldest run
  first, then line), newest first, or by reason (then queue order); a text search
  matches the question (:func:`question_of`: the first of ``meta.question``,
  ``meta.input``, ``meta.prompt`` and ``meta.statement`` that is a non-blank text,
  :data:`~dissensus.cases.QUESTION_KEYS`, else a chat panel's last ``user`` message),
  the case id or the reason, ignoring case. The entries come from the review index as
  for the unfiltered queue; the text of each item is read from its ``review.opened``
  payload (no item is validated) and remembered by the desk as the next bullet says; a
  journal of more than :data:`SEARCH_CACHE_ITEMS` review items has the texts of the
  entries searched read for each search instead, and none remembered.
* **Automatic decisions** to audit (:meth:`ReviewDesk.auto_cases`) are the
  ``case.record`` events with ``auto: true`` of the journal's decide runs, in run then
  line order; the panel is shown without ``meta.gold``, as in review items. A listed
  case the journal no longer holds (it changed between the list and the case's read)
  drops what the desk remembers and the list is read again, never a 404 page.
* **What the desk remembers** of the journal: the automatically committed cases of the
  decide runs' case records, the acceptance files the runs' starts name
  (:meth:`ReviewDesk.acceptance_files`, which the queue page's acceptance monitor reads:
  a run's start holds its file's calibration, 150 kB for the LLMBar file) and the search
  text of each review item. Each is kept by a
  :class:`~dissensus.store.follow.TypeFollower` (:mod:`dissensus.store.follow` says how):
  per run, what was read of it and how far (its number of events and head hash), so a
  page reads the runs' heads (one light row per run, one read shared by the followers
  of the desk's journal object, the shift watch's included) and only the events of the
  runs that changed since the last page, in one snapshot; a page when nothing was
  committed since reads no head (the back end says so: :mod:`dissensus.store.follow`).
  What the desk shows is thus what a read of every event would show whenever it is
  shown: a journal restored from a
  backup, or replaced by another, or a run written again, is read again where it
  differs, even when it holds as many events of each type and the same newest one as
  before (a count and the newest event, which the desk checked before, showed the cases
  read before such a restore). A run's kind is read with its head each time, so a run
  that is no longer a decide run leaves the list. The first page after a start reads
  every decide run's case records and every run's start once (minutes at 20,000 runs
  deciding with the LLMBar file), then only what changed; a restart starts afresh. What
  is remembered grows with the journal's runs, not capped but for the search texts (the
  bullet above): 31 MB at 20,000 runs each holding one automatic decision and one
  review item, the shift watch's judged cases included (1.6 kB a run), 32 MB once
  another connection journalled one more run and it was read (the runs' ids and hashes
  are held once, shared by the heads, their order and what each follower read of each
  run), plus one copy of each acceptance file.
* "Resolved today" counts a reviewer's ``review.resolved`` events since midnight UTC
  (an undone resolution still counts: it was work done).
* **Undo** goes through :func:`dissensus.pipeline.review.reopen` with the token's name
  and the server's window (``undo_window_s``); "your last resolution" is the reviewer's
  latest ``review.resolved`` event that still stands.
* **Every page reads only recent resolutions.** Both of the above read the
  ``review.resolved`` events journalled since midnight UTC, or since the undo window
  opened, and the database picks them (``events_of_type(..., since=...)``): every case
  and queue page asks for both, so a read of every resolution ever journalled made
  each page slower with every case resolved, for as long as the journal lives (70 ms
  each at 2,000 resolutions).
* **Unknown ids.** Every id and case reference is parsed by
  :func:`dissensus.pipeline.review.split_ref` (one spelling per item: the line without
  leading zeros); one it refuses, and a case reference naming no run of the journal, is
  :class:`UnknownItem` (404), never the library's :class:`~dissensus.errors.InputError`
  (400), which stays for a case that exists but cannot be audited.
* **Text bounds.** A resolution's or an audit's ``decision`` and ``note`` are at most
  ``max_field_chars`` characters each (the server's ``--max-field-chars``), checked
  before the journal is touched (:class:`TextTooLong`: 422 naming the field from the
  API, a refusal shown on the page), whichever door they came through: the note is
  journalled twice (the resolution and the case's new record), so an unbounded one
  grows the journal by twice its size.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel

from dissensus.cases import asked_question, option_ids
from dissensus.deprecation import deprecated_names, renamed
from dissensus.errors import ConfigError, DissensusError, InputError
from dissensus.io.limits import MAX_FIELD_CHARS
from dissensus.outputs import ResolutionInfo
from dissensus.pipeline import review as queue
from dissensus.pipeline.batch import RUN_KIND
from dissensus.pipeline.confirm import AlreadyConfirmed, Confirmation, claim_audit, confirm
from dissensus.pipeline.durable import case_step
from dissensus.pipeline.records import CaseRecord, ReviewItem
from dissensus.pipeline.review import (
    AlreadyResolved,
    NotUndoable,
    ReviewStatus,
    StaleContent,
    content_sha256,
)
from dissensus.quoting import quote_short
from dissensus.serve.case_view import OptionView, option_views, options_named
from dissensus.store import ClaimConflict, Event, IndexEntry, Journal, open_journal
from dissensus.store import event_types as ev
from dissensus.store.follow import TypeFollower
from dissensus.store.review_index import REVIEW_RESOLVED

__all__ = [
    "AlreadyConfirmed",
    "AlreadyResolved",
    "AmbiguousAnswer",
    "AutoCase",
    "ClaimConflict",
    "ClaimInfo",
    "HistoryEntry",
    "NotUndoable",
    "QueueEntry",
    "QueueSort",
    "ResolutionInfo",
    "ReviewDesk",
    "StaleContent",
    "TextTooLong",
    "UnknownItem",
    "answer_for",
    "content_sha256",
    "open_journal",
    "question_of",
]


class UnknownItem(DissensusError):
    """No review item with that id (404)."""


class TextTooLong(ConfigError):
    """A reviewer's text longer than the server allows per field (422 naming it)."""


class AmbiguousAnswer(ConfigError):
    """A decision naming more than one option alike (422 naming ``decision``)."""


def _as_option(decision: str, options: list[OptionView]) -> str:
    """``decision`` as the id of the option it names, else as given
    (:class:`AmbiguousAnswer` when it names several)."""
    named = options_named(decision, options)
    if len(named) > 1:
        listed = ", ".join(quote_short(i) for i in named[:5])
        raise AmbiguousAnswer(
            f"{quote_short(decision.strip())} names more than one option ({listed}): "
            "pick the option itself, or give its id",
            field="decision",
        )
    return named[0] if named else decision


def _item_options(item: ReviewItem) -> list[OptionView]:
    """The options of a review item as the case page shows them (labelled)."""
    if not item.options:
        return []
    positions = [(p.agent, p.decision, p.reasoning) for p in item.positions]
    return option_views(item.options, item.panel, positions, None)


def answer_for(item: ReviewItem, decision: str) -> str:
    """A resolution's ``decision`` as journalled: the id of the option of ``item`` it
    names (its id or its label, see the module docstring), else as given."""
    options = _item_options(item)
    return _as_option(decision, options) if options else decision


def _audit_options(journal: Journal, ref: str) -> list[OptionView]:
    """The options of case ``ref`` (its panel as it entered the run; the options
    :func:`~dissensus.pipeline.confirm.confirm` counts), labelled as the audit pages
    show them; none when the case cannot be read (confirm names what is wrong)."""
    try:
        run_id, line = queue.split_ref(ref, "case reference")
        entered = case_step(journal, run_id, line, "input")
    except DissensusError:
        return []
    panel = entered.get("panel") if entered is not None else None
    if not isinstance(panel, dict):
        return []
    outputs = [o for o in panel.get("outputs") or [] if isinstance(o, dict)]
    positions = [
        (str(o.get("agent", "?")), o.get("decision"), str(o.get("reasoning", ""))) for o in outputs
    ]
    meta = panel.get("meta")
    chosen = {d for _, d, _ in positions if isinstance(d, str)}
    ids = sorted(chosen | set(option_ids(meta if isinstance(meta, dict) else None)))
    return option_views(ids, panel, positions, None) if ids else []


def _audit_answer(journal: Journal, ref: str, decision: str) -> str:
    """An audit's ``decision`` as journalled: the id of the option of case ``ref`` it
    names, else as given."""
    options = _audit_options(journal, ref)
    return _as_option(decision, options) if options else decision


class ClaimInfo(BaseModel):
    """A reviewer's hold on a case, as the service reports it (the journal's own row is
    `dissensus.store.claims.Claim`)."""

    review_id: str
    reviewer: str
    at: str
    expires: str


class HistoryEntry(BaseModel):
    """One review event of a case in the hash chain, oldest first."""

    type: str
    at: str
    reviewer: str | None
    detail: dict[str, Any]
    """The event's payload but its reviewer, passed through untouched (each type its own)."""


def _split(review_id: str, what: str = "review id") -> tuple[str, int]:
    """:func:`~dissensus.pipeline.review.split_ref`, a malformed id being an unknown item (404)."""
    try:
        return queue.split_ref(review_id, what)
    except InputError as exc:
        raise UnknownItem(str(exc)) from None


QueueSort = Literal["oldest", "newest", "reason"]


class QueueEntry(BaseModel):
    """One row of a queue's order: enough to move through it without reading items."""

    review_id: str
    reason: str
    resolved: bool


def question_of(panel: dict[str, Any]) -> str | None:
    """The question a panel asks, as a reviewer is shown it
    (:func:`~dissensus.cases.asked_question`: ``meta.question`` and its kin, else a chat
    panel's last ``user`` message), if any. ``panel`` is the journalled panel's JSON as
    the review item keeps it, read here and not changed."""
    return asked_question(panel.get("meta"))


def _search_text(panel: dict[str, Any], case_id: str, reason: str) -> str:
    """What a text search of the queue matches, lower-cased: the question
    (:func:`question_of`), the case id and the reason. ``panel`` is the journalled
    panel's JSON, only read."""
    return " ".join((question_of(panel) or "", case_id, reason)).lower()


SEARCH_CACHE_ITEMS = 200_000
"""Review items whose search texts a desk remembers at most (about 100 MB); a journal
holding more has the texts of the entries searched read for each search."""


class AutoCase(BaseModel):
    """An automatically committed case, as the audit page shows it."""

    ref: str
    """``<run>.<line>``."""
    record: CaseRecord
    panel: dict[str, Any]
    """The panel as it entered the run (``meta.gold`` withheld); empty when not journalled.
    The journalled JSON passed through untouched, as :attr:`dissensus.pipeline.records.ReviewItem.panel`."""
    audit: HistoryEntry | None = None
    """The ``review.confirmed`` event, once audited."""


def _auto_case(event: Event) -> tuple[str, str] | None:
    """``(run, case)`` of a ``case.record`` event committed automatically, else ``None``."""
    if event.payload.get("auto") and event.payload.get("decision") is not None:
        return event.run_id, str(event.case)
    return None


def _opened_text(event: Event) -> tuple[str, str]:
    """The review id of a ``review.opened`` event and what a text search of it matches."""
    payload = event.payload
    panel = payload.get("panel")
    return (
        str(payload.get("review_id")),
        _search_text(
            panel if isinstance(panel, dict) else {},
            str(payload.get("id", "")),
            str(payload.get("reason", "")),
        ),
    )


class _AcceptanceFiles:
    """The acceptance files the ``run.started`` events name, as a
    :class:`~dissensus.store.follow.TypeFollower` keeps them: ``(sha256, file)`` of each
    start naming one, equal files one object (a file's calibration is 150 kB, and every
    run deciding with it holds a copy)."""

    def __init__(self) -> None:
        self.shared: dict[str, dict[str, Any]] = {}
        """The object kept for each sha256 (the first copy read)."""

    def keep(self, event: Event) -> tuple[str, dict[str, Any]] | None:
        acc = event.payload.get("acceptance")
        if not isinstance(acc, dict) or not acc.get("sha256"):
            return None
        sha = str(acc["sha256"])
        known = self.shared.setdefault(sha, acc)
        return sha, known if known == acc else acc

    def files(self, kept: Iterator[tuple[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
        """The first file of each sha256 among ``kept`` (the follower's values, in run
        order); only those are shared from then on."""
        found: dict[str, dict[str, Any]] = {}
        for sha, acc in kept:
            found.setdefault(sha, acc)
        self.shared = dict(found)
        return found


class ReviewDesk:
    """Review operations over one journal."""

    def __init__(
        self, journal: Journal, *, claim_ttl_s: float, max_field_chars: int = MAX_FIELD_CHARS
    ) -> None:
        self.journal = journal
        self.claim_ttl_s = claim_ttl_s
        self.max_field_chars = max_field_chars
        self._opened: TypeFollower[tuple[str, str]] = TypeFollower(ev.REVIEW_OPENED, _opened_text)
        """The review id and search text of each ``review.opened`` event."""
        self._texts: dict[tuple[str, int], tuple[str, str]] = {}
        """What :attr:`_opened` kept, by ``(run, seq)``."""
        self._texts_of = (0, 0)
        """The serial of the state :attr:`_texts` holds, and its number of runs."""
        self._search_lock = threading.Lock()
        """Held while :attr:`_opened` and :attr:`_texts` are read (searches run in worker
        threads)."""
        self._records: TypeFollower[tuple[str, str]] = TypeFollower(
            ev.CASE_RECORD, _auto_case, kind=RUN_KIND
        )
        """The automatically committed cases of the decide runs' case records."""
        self._records_lock = threading.Lock()
        """Held while :attr:`_records` or :attr:`_files` is read (pages run in worker
        threads)."""
        self._acceptance = _AcceptanceFiles()
        self._files: TypeFollower[tuple[str, dict[str, Any]]] = TypeFollower(
            ev.RUN_STARTED, self._acceptance.keep
        )
        """The acceptance files of the ``run.started`` events."""

    def _bounded(self, **texts: str | None) -> None:
        """:class:`TextTooLong` naming the first of ``texts`` over ``max_field_chars``."""
        for field, text in texts.items():
            if text is not None and len(text) > self.max_field_chars:
                raise TextTooLong(
                    f"{len(text)} characters; at most {self.max_field_chars} per field",
                    field=field,
                )

    # -- reading ----------------------------------------------------------------------

    def items(
        self,
        *,
        run_id: str | None = None,
        status: str = "open",
        reason: str | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> Iterator[ReviewStatus]:
        """Queue entries with ``status`` open, resolved or all (and ``reason`` in their
        reason), in queue order, at most ``limit``, after item ``after`` (a review id)
        when given; items are read as the iteration reaches them."""
        return queue.list_items(
            self.journal,
            run_id=run_id,
            include_resolved=status == "all",
            resolved_only=status == "resolved",
            reason=reason,
            limit=limit,
            after=after,
        )

    def count(
        self, *, run_id: str | None = None, status: str = "open", reason: str | None = None
    ) -> int:
        """How many entries :meth:`items` yields (from the review index, no item is read)."""
        entries = queue.review_entries(
            self.journal,
            run_id=run_id,
            include_resolved=status == "all",
            resolved_only=status == "resolved",
            reason=reason,
        )
        if entries is None:
            return sum(1 for _ in self.items(run_id=run_id, status=status, reason=reason))
        return len(entries)

    def ids(self, *, status: str = "all") -> list[str]:
        """Review ids in queue order (from the review index, no item is read)."""
        entries = queue.review_entries(
            self.journal, include_resolved=status == "all", resolved_only=status == "resolved"
        )
        if entries is None:
            return [st.item.review_id for st in self.items(status=status)]
        return [e.review_id for e in entries]

    def order(
        self,
        *,
        run_id: str | None = None,
        status: str = "all",
        reason: str | None = None,
        text: str | None = None,
        sort: QueueSort = "oldest",
    ) -> list[QueueEntry]:
        """The queue's entries in the order the reviewer asked for (see the module docstring)."""
        out: list[QueueEntry]
        entries = queue.review_entries(
            self.journal,
            run_id=run_id,
            include_resolved=status == "all",
            resolved_only=status == "resolved",
            reason=reason,
        )
        if entries is not None:
            if text:
                needle = text.lower()
                searched = self._search_texts(entries)
                entries = [e for e in entries if needle in searched.get((e.run_id, e.seq), "")]
            out = [
                QueueEntry(
                    review_id=e.review_id, reason=e.reason, resolved=e.resolved_seq is not None
                )
                for e in entries
            ]
        else:  # the index cannot be used (a read-only journal whose index disagrees)
            needle = (text or "").lower()
            out = []
            for st in self.items(run_id=run_id, status=status, reason=reason):
                item = st.item
                haystack = _search_text(item.panel, item.id, item.reason)
                if needle in haystack:
                    out.append(
                        QueueEntry(
                            review_id=item.review_id,
                            reason=item.reason,
                            resolved=st.resolution is not None,
                        )
                    )
        if sort == "newest":
            out.reverse()
        elif sort == "reason":
            out.sort(key=lambda e: e.reason.lower())
        return out

    def _search_texts(self, entries: list[IndexEntry]) -> dict[tuple[str, int], str]:
        """What a text search matches of each entry (:func:`_search_text`), by ``(run,
        seq)`` of its ``review.opened`` event: from the ``review.opened`` events read so
        far and those journalled since (:attr:`_opened`, see the module docstring); one
        search at a time reads them (the queue page searches in worker threads). Past
        :data:`SEARCH_CACHE_ITEMS` review items, the entries' events are read for each
        search instead, and nothing is remembered."""
        with self._search_lock:
            if self.journal.count_of_type(ev.REVIEW_OPENED) > SEARCH_CACHE_ITEMS:
                self._opened.forget()
                self._texts, self._texts_of = {}, (0, 0)
                return self._read_texts(entries)
            texts = self._texts_now()
            out: dict[tuple[str, int], str] = {}
            missing: list[IndexEntry] = []
            for e in entries:
                found = texts.get((e.run_id, e.seq))
                if found is not None and found[0] == e.review_id:
                    out[(e.run_id, e.seq)] = found[1]
                else:  # journalled since the read, or an index row the events do not match
                    missing.append(e)
        return out | self._read_texts(missing) if missing else out

    def _texts_now(self) -> dict[tuple[str, int], tuple[str, str]]:
        """The review id and search text of every ``review.opened`` event by ``(run,
        seq)``, as :attr:`_opened` reads them now (with the lock held): the new runs'
        added when only runs after those read before are new, else gathered anew."""
        state = self._opened.read(self.journal)
        serial, read = self._texts_of
        if state.serial != serial:
            if state.extends is None or state.extends != serial:
                self._texts, read = {}, 0
            for run_id in state.order[read:]:
                for seq, found in state.runs[run_id].kept:
                    self._texts[(run_id, seq)] = found
            self._texts_of = (state.serial, len(state.order))
        return self._texts

    def _read_texts(self, entries: list[IndexEntry]) -> dict[tuple[str, int], str]:
        """:meth:`_search_texts` of ``entries`` read from their events (one query per
        500), not remembered."""
        refs = [(e.run_id, e.seq) for e in entries]
        out: dict[tuple[str, int], str] = {}
        for start in range(0, len(refs), 500):
            for ref, event in self.journal.events_at(refs[start : start + 500]).items():
                out[ref] = _opened_text(event)[1]
        return out

    def last_resolution(self, reviewer: str, within_s: float) -> ResolutionInfo | None:
        """``reviewer``'s latest resolution that still stands and is at most ``within_s``
        seconds old (what ``u`` undoes)."""
        if within_s <= 0:
            return None
        since = datetime.now(UTC).timestamp() - within_s
        # The database picks the recent ones (a second early: the bound below is exact);
        # a window reaching before the calendar's first year takes them all.
        try:
            recent: str | None = datetime.fromtimestamp(since - 1, UTC).isoformat(
                timespec="microseconds"
            )
        except (OverflowError, ValueError, OSError):
            recent = None
        latest = None
        for e in self.journal.events_of_type(REVIEW_RESOLVED, since=recent):
            if e.payload.get("reviewer") != reviewer:
                continue
            if datetime.fromisoformat(e.at).timestamp() < since:
                continue
            if latest is None or e.at > latest.at:
                latest = e
        if latest is None:
            return None
        review_id = str(latest.payload.get("review_id"))
        standing = self.resolution(review_id)
        if standing is None or standing.at != latest.at:
            return None
        return standing

    def undo(self, review_id: str, *, reviewer: str, within_s: float) -> ReviewStatus:
        """Reopen ``review_id`` (``reviewer``'s resolution within ``within_s`` seconds)."""
        self.status(review_id)
        queue.reopen(self.journal, review_id, reviewer=reviewer, within_s=within_s)
        return self.status(review_id)

    def auto_cases(self, *, run_id: str | None = None, audited: bool = False) -> list[str]:
        """Refs (``<run>.<line>``) of automatically committed cases, unaudited ones only
        unless ``audited``, in journal order (runs in start order, then line). Every run's
        are read in two queries of the events' type index (the case records and the
        answered audits of decide runs), not three per run."""
        if run_id:
            if self.journal.run(run_id, missing_ok=True) is None:
                return []
            answered = self.journal.events(run_id, type=ev.REVIEW_CONFIRMED)
            records = self.journal.events(run_id, type=ev.CASE_RECORD)
        else:
            answered = self.journal.events_of_type(ev.REVIEW_CONFIRMED, kind=RUN_KIND)
            done = {(e.run_id, e.case) for e in answered}
            return [
                f"{run_id}.{case}"
                for run_id, case in self._auto_records()
                if audited or (run_id, case) not in done
            ]
        done = {(e.run_id, e.case) for e in answered}
        out = []
        for e in records:
            committed = e.payload.get("auto") and e.payload.get("decision") is not None
            if committed and (audited or (e.run_id, e.case) not in done):
                out.append(f"{e.run_id}.{e.case}")
        return out

    def _auto_records(self) -> list[tuple[str, str]]:
        """``(run, case)`` of every automatically committed case of a decide run, in run
        then line order, from the case records read so far and those journalled since
        (the module docstring says how)."""
        with self._records_lock:
            return list(self._records.read(self.journal).kept())

    def forget(self) -> None:
        """Drop what the desk remembers of the journal's case records and run starts, so
        the next list reads them all again (a listed case the journal no longer holds:
        it changed between the list and the case's read)."""
        with self._records_lock:
            self._records.forget()
            self._files.forget()

    def acceptance_files(self) -> dict[str, dict[str, Any]]:
        """The acceptance file of every run that decided with one, by sha256 (the first
        run's copy of each), as the acceptance monitor reads them
        (:func:`~dissensus.pipeline.audit.monitor_status`), from the ``run.started``
        events read so far and those journalled since: a run's start holds its
        calibration (150 kB for the LLMBar file), and a read of every run's on each queue
        page grew with every run the journal holds."""
        with self._records_lock:
            return self._acceptance.files(self._files.read(self.journal).kept())

    def auto_case(self, ref: str) -> AutoCase:
        """One automatically committed case (:class:`UnknownItem` for any other ref)."""
        run_id, line = _split(ref, "case reference")
        if self.journal.run(run_id, missing_ok=True) is None:
            raise UnknownItem(f"no case {quote_short(ref)}: no run {quote_short(run_id)}")
        stored = self.journal.get(run_id, f"case/{line}/record")
        if stored is None or not stored.payload.get("auto"):
            raise UnknownItem(f"no automatic decision {quote_short(ref)}")
        record = stored.read_as(CaseRecord)
        entered = case_step(self.journal, run_id, line, "input")
        panel: dict[str, Any] = {}  # the journalled panel's JSON, passed through
        if entered is not None and isinstance(entered.get("panel"), dict):
            panel = dict(entered["panel"])
            meta = panel.get("meta")
            if isinstance(meta, dict):
                panel["meta"] = {k: v for k, v in meta.items() if k != "gold"}
        done = self.journal.get(run_id, f"confirm/{line}")
        audit = (
            None
            if done is None
            else HistoryEntry(
                type=done.type,
                at=done.at,
                reviewer=done.payload.get("reviewer"),
                detail={k: v for k, v in done.payload.items() if k != "reviewer"},
            )
        )
        return AutoCase(ref=ref, record=record, panel=panel, audit=audit)

    def resolved_today(self, reviewer: str) -> int:
        """How many cases ``reviewer`` resolved since midnight UTC."""
        today = datetime.now(UTC).date().isoformat()
        return sum(
            1
            for e in self.journal.events_of_type(REVIEW_RESOLVED, since=today)
            if e.at.startswith(today) and e.payload.get("reviewer") == reviewer
        )

    def status(self, review_id: str) -> ReviewStatus:
        _split(review_id)
        try:
            return queue.find_item(self.journal, review_id)
        except InputError:  # its message names the journal file: not for a remote caller
            raise UnknownItem(f"no review item {quote_short(review_id)}") from None

    def resolution(self, review_id: str) -> ResolutionInfo | None:
        _split(review_id)
        return ResolutionInfo.read(self.journal, review_id)

    def live_claim(self, review_id: str) -> ClaimInfo | None:
        """The claim holding the case now, if any."""
        held = self.journal.current_claim(review_id)
        if held is None:
            return None
        return ClaimInfo(
            review_id=review_id, reviewer=held.who, at=held.claimed_at, expires=held.expires
        )

    def live_claims(self, review_ids: list[str]) -> dict[str, ClaimInfo]:
        """The claims holding any of ``review_ids`` now (one read for many items)."""
        return {
            review_id: ClaimInfo(
                review_id=review_id, reviewer=held.who, at=held.claimed_at, expires=held.expires
            )
            for review_id, held in self.journal.current_claims(review_ids).items()
        }

    def history(self, review_id: str) -> list[HistoryEntry]:
        """The case's review events in the hash chain, oldest first."""
        run_id, line = _split(review_id)
        out = []
        for event in self.journal.events(run_id, case=str(line)):
            if not event.type.startswith("review.") or event.type == ev.REVIEW_OPENED:
                continue
            detail = {k: v for k, v in event.payload.items() if k not in ("review_id", "reviewer")}
            out.append(
                HistoryEntry(
                    type=event.type,
                    at=event.at,
                    reviewer=event.payload.get("reviewer"),
                    detail=detail,
                )
            )
        return out

    # -- writing ----------------------------------------------------------------------

    def _is_case(self, review_id: str) -> bool:
        """Whether ``review_id`` names a review case (``False``: the audit of an automatic
        decision); :class:`UnknownItem` when it names neither."""
        try:
            self.status(review_id)
        except UnknownItem:
            try:
                self.auto_case(review_id)
            except UnknownItem:
                raise UnknownItem(
                    f"no review item or automatic decision {quote_short(review_id)}"
                ) from None
            return False
        return True

    def claim(self, review_id: str, reviewer: str, ttl_s: float | None = None) -> ClaimInfo:
        """Claim (or renew the claim on) an open case, or the audit of an automatic
        decision, for ``ttl_s`` seconds (see the module docstring)."""
        ttl = self.claim_ttl_s if ttl_s is None else ttl_s
        if self._is_case(review_id):
            held = queue.claim(self.journal, review_id, reviewer, ttl=ttl)
        else:
            held = claim_audit(self.journal, review_id, reviewer, ttl=ttl)
        return ClaimInfo(
            review_id=review_id, reviewer=held.who, at=held.claimed_at, expires=held.expires
        )

    def release(self, review_id: str, reviewer: str) -> bool:
        """Give up ``reviewer``'s claim on a case or an audit (the ids :meth:`claim` takes):
        ``True`` when a live claim of theirs was dropped, ``False`` when none held it.
        Another reviewer's live claim is :class:`ClaimConflict` naming them (only the
        holder may give a claim up; it expires on its own)."""
        self._is_case(review_id)
        held = self.journal.current_claim(review_id)
        if held is None:
            return False
        if held.who != reviewer:
            raise ClaimConflict(
                f"review item {review_id} is claimed by {held.who} until {held.expires}; "
                "only they can give it up",
                holder=held.who,
                expires=held.expires,
            )
        # Only the caller's row is deleted: a claim someone else took meanwhile stays.
        self.journal.release_claim(review_id, reviewer)
        return True

    def labels(self, ref: str, *, audit: bool = False) -> dict[str, str]:
        """The labels of the options of review item ``ref`` (with ``audit``: of case
        ``ref``'s audit) by option id, as the pages show them; empty when it has none or
        cannot be read."""
        if audit:
            options = _audit_options(self.journal, ref)
        else:
            try:
                options = _item_options(self.status(ref).item)
            except DissensusError:
                options = []
        return {o.id: o.label for o in options}

    def audit_answer(self, case_ref: str, decision: str) -> str:
        """An audit's ``decision`` for case ``case_ref`` as :meth:`confirm` journals it:
        the id of the option it names, else as given (:class:`AmbiguousAnswer`)."""
        return _audit_answer(self.journal, case_ref, decision)

    def confirm(
        self, case_ref: str, *, decision: str | None, note: str, reviewer: str
    ) -> Confirmation:
        """Audit the automatic decision of case ``case_ref`` (``<run>.<line>``) as ``reviewer``
        (:class:`UnknownItem` for a malformed reference or one naming no run)."""
        self._bounded(decision=decision, note=note)
        run_id, _ = _split(case_ref, "case reference")
        if self.journal.run(run_id, missing_ok=True) is None:
            raise UnknownItem(f"no case {quote_short(case_ref)}: no run {quote_short(run_id)}")
        if decision is not None:
            decision = _audit_answer(self.journal, case_ref, decision)
        return confirm(self.journal, case_ref, note=note, decision=decision, reviewer=reviewer)

    def resolve(
        self, review_id: str, *, decision: str, note: str, reviewer: str, sha256: str
    ) -> CaseRecord:
        """Resolve an open case as ``reviewer``, who saw the content whose hash is
        ``sha256``; a decision naming an option is journalled as its id (:func:`answer_for`)."""
        self._bounded(decision=decision, note=note)
        item = self.status(review_id).item
        return queue.resolve(
            self.journal,
            review_id,
            decision=answer_for(item, decision),
            note=note,
            reviewer=reviewer,
            content_sha256=sha256,
        )


__getattr__ = deprecated_names(
    __name__,
    renamed(
        __name__,
        globals(),
        {"Claim": "ClaimInfo"},
        "dissensus.store.claims.Claim is the journal's claim row",
    ),
)
