"""Schema revisions of the run journal: numbered, ordered upgrade steps (alembic's model).

A journal records its schema revision in ``dissensus_meta`` (key ``schema``). When a
journal opens, :func:`plan` compares it with :data:`CURRENT` and the back end applies the
missing revisions in order, inside one write transaction, so a journal written by an older
version opens in this one, and a journal written by a newer version is refused with one
line (:class:`JournalTooNew`) instead of being misread.

Revisions:

1. **The 0.2 journal**: ``runs``, ``events``, ``claims``, ``review_index``, ``run_locks``
   and ``dissensus_meta`` with their indexes (the layout every journal had since the
   journal became one interface over SQLite and PostgreSQL; a 0.1 file with only ``runs``
   and ``events`` gains the rest).
2. **Revision history**: ``dissensus_revisions`` gains one row per revision applied from
   then on (when, by which version); revisions the journal already had are listed with no
   date.
3. **Runs in listing order**: an index of ``runs`` on ``(created, run_id)``, so that a
   page of the runs (``runs list --limit``, ``GET /v1/runs``) costs the page, not the
   journal. Not needed to read.
4. **Review items in their journal form**: no table changes; a journal at this revision
   may hold review items whose positions leave their reasonings to the panel beside them
   (:mod:`dissensus.pipeline.review_form`), which versions before it cannot read, so
   those that know schema revisions refuse it (0.1 and 0.2 know none: they open it and
   fail on such an item). Journals before it read as they are.

Choices this module makes:

* **When.** Upgrades run on open, not by a separate command: the upgrade steps only add
  tables and indexes, never rewrite events, so the hash chain is untouched and
  ``runs verify`` gives the same answer before and after. ``dissensus runs schema`` shows
  the revision and the history.
* **Read-only journals.** A journal that cannot be written opens as it is when every
  missing revision is marked ``needed_to_read=False`` (revision 2: history only);
  otherwise the open fails naming the revision it needs and why.
* **Concurrent openers.** The back end takes its write lock (SQLite ``BEGIN IMMEDIATE``,
  a PostgreSQL advisory lock) and reads the revision again under it, so two processes
  opening an old journal at once upgrade it once.
* **No downgrades.** An older version refuses a newer journal; nothing is ever removed.
* **The review index is checked again after an upgrade.** Applying any revision removes
  the mark (``dissensus_meta`` key :data:`INDEX_CHECKED_KEY`) that says at which
  revision the review index was last compared with its events: the next open compares
  them (:meth:`~dissensus.store.review_index.ReviewIndex.check_on_open`), since a
  journal an upgrade reached may have been written without the index, or by a version
  that derived it otherwise. A change to what the index derives from the events is
  therefore a revision too: older versions then refuse the journal, so every writer
  after the check keeps the index as the check found it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from dissensus.errors import InputError
from dissensus.store.schema import (
    CLAIMS,
    EVENTS,
    INDEXES,
    META,
    REVIEW_INDEX,
    REVISIONS_TABLE,
    RUN_LOCKS,
    RUNS,
    RUNS_CREATED,
    Dialect,
    create_index,
    create_table,
)

__all__ = [
    "CURRENT",
    "INDEX_CHECKED_KEY",
    "REVISIONS",
    "JournalTooNew",
    "Revision",
    "RevisionRow",
    "SchemaInfo",
    "Statement",
    "applied_by",
    "apply",
    "check_known",
    "describe",
    "history_query",
    "parse_revision",
    "plan",
]

Statement = tuple[str, tuple[Any, ...]]
"""SQL with ``?`` placeholders and its arguments (PostgreSQL's back end rewrites them)."""


class RevisionRow(TypedDict):
    """One row of ``dissensus_revisions`` (and of :class:`SchemaInfo`'s history)."""

    revision: int
    summary: str
    applied_at: str | None
    """When it was applied (``None``: the journal had it before the history began)."""
    applied_by: str


class SchemaInfo(TypedDict):
    """What ``dissensus runs schema`` prints."""

    revision: int
    """The journal's schema revision."""
    current: int
    """The revision this version writes."""
    pending: list[int]
    """Revisions the journal still lacks (a read-only journal may open without some)."""
    history: list[RevisionRow]


class JournalTooNew(InputError):
    """The journal was written by a newer version of dissensus."""


@dataclass(frozen=True)
class Revision:
    """One upgrade step: its number, what it changes and the statements that do it."""

    number: int
    summary: str
    statements: Callable[[Dialect], list[Statement]]
    needed_to_read: bool = True


def _revision_1(dialect: Dialect) -> list[Statement]:
    tables = (META, RUNS, EVENTS, CLAIMS, REVIEW_INDEX, RUN_LOCKS)
    out: list[Statement] = [(create_table(t, dialect), ()) for t in tables]
    out.extend((create_index(i, dialect), ()) for i in INDEXES)
    return out


def _revision_2(dialect: Dialect) -> list[Statement]:
    return [(create_table(REVISIONS_TABLE, dialect), ())]


def _revision_3(dialect: Dialect) -> list[Statement]:
    return [(create_index(RUNS_CREATED, dialect), ())]


def _revision_4(dialect: Dialect) -> list[Statement]:
    """No statement: the revision marks the journal form of review items."""
    return []


REVISIONS: tuple[Revision, ...] = (
    Revision(1, "the 0.2 journal: runs, events, claims, review index, run locks", _revision_1),
    Revision(2, "revision history", _revision_2, needed_to_read=False),
    Revision(3, "runs in listing order", _revision_3, needed_to_read=False),
    Revision(4, "review items with each reasoning held once", _revision_4, needed_to_read=False),
)

CURRENT = REVISIONS[-1].number
"""The schema revision this version writes."""

INDEX_CHECKED_KEY = "review_index_checked"
"""The ``dissensus_meta`` key whose value is the schema revision at which the review
index was last found to agree with the events (removed by every upgrade)."""

REVISIONS_HISTORY_FROM = 2
"""The revision that created ``dissensus_revisions`` (rows are written from it on)."""


def applied_by() -> str:
    """Who applies a revision: this package and its version, the source's
    (:mod:`dissensus.version`, as ``dissensus version`` says it), never an editable
    install's metadata, which keeps the version it was installed at."""
    from dissensus.version import __version__

    return f"dissensus {__version__}"


def parse_revision(value: object, path: str) -> int:
    """The revision stored in ``dissensus_meta`` (``None``: no meta table yet, revision 0)."""
    if value is None:
        return 0
    try:
        number = int(str(value))
    except ValueError:
        raise InputError(
            f"journal {path}: unreadable schema revision {str(value)[:40]!r} in dissensus_meta"
        ) from None
    if number < 0:
        raise InputError(f"journal {path}: unreadable schema revision {number} in dissensus_meta")
    return number


def check_known(found: int, path: str) -> None:
    """Refuse a journal whose revision is newer than :data:`CURRENT`."""
    if found > CURRENT:
        raise JournalTooNew(
            f"journal {path} was written by a newer dissensus (schema revision {found}; this "
            f"version reads up to {CURRENT}): upgrade dissensus to open it"
        )


def plan(found: int) -> tuple[Revision, ...]:
    """The revisions a journal at revision ``found`` still needs, in order."""
    return tuple(r for r in REVISIONS if r.number > found)


def apply(
    found: int,
    dialect: Dialect,
    execute: Callable[[str, tuple[Any, ...]], object],
    *,
    at: str,
    by: str | None = None,
) -> tuple[Revision, ...]:
    """Apply every revision after ``found`` through ``execute`` (inside the caller's write
    transaction) and record each; returns what was applied."""
    todo = plan(found)
    by = by or applied_by()
    upsert = (
        "INSERT INTO dissensus_meta (key, value) VALUES ('schema', ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
    )
    history = (
        "INSERT INTO dissensus_revisions (revision, summary, applied_at, applied_by) "
        "VALUES (?, ?, ?, ?) ON CONFLICT (revision) DO NOTHING"
    )
    for revision in todo:
        for sql, args in revision.statements(dialect):
            execute(sql, args)
        if revision.number == REVISIONS_HISTORY_FROM:
            for earlier in REVISIONS:
                if earlier.number <= found:
                    execute(history, (earlier.number, earlier.summary, None, "before history"))
        if revision.number >= REVISIONS_HISTORY_FROM:
            execute(history, (revision.number, revision.summary, at, by))
        execute(upsert, (str(revision.number),))
    if todo:
        execute("DELETE FROM dissensus_meta WHERE key = ?", (INDEX_CHECKED_KEY,))
    return todo


def history_query() -> str:
    """The rows of the revision history, oldest first."""
    return "SELECT revision, summary, applied_at, applied_by FROM dissensus_revisions ORDER BY revision"


def describe(found: int, rows: Sequence[Mapping[str, Any]]) -> SchemaInfo:
    """What ``dissensus runs schema`` prints: the revision, this version's, the history."""
    known = {r.number: r.summary for r in REVISIONS}
    return {
        "revision": found,
        "current": CURRENT,
        "pending": [r.number for r in plan(found)],
        "history": [
            {
                "revision": int(r["revision"]),
                "summary": str(r["summary"] or known.get(int(r["revision"]), "")),
                "applied_at": r["applied_at"],
                "applied_by": str(r["applied_by"]),
            }
            for r in rows
        ],
    }
