"""The journal's tables, defined once and written out for SQLite or PostgreSQL.

Each table is a :class:`Table` of typed :class:`Column` s; :func:`create_table` and
:func:`create_index` render the ``CREATE … IF NOT EXISTS`` statement for a dialect. The
back ends never spell a table out themselves: the schema revisions in
:mod:`dissensus.store.migrations` create these tables, so a change to a table is a new
revision there, applied in order to every journal that opens.

Choices this module makes:

* **Integers.** ``int`` columns are ``INTEGER`` in SQLite (always 64-bit) and ``BIGINT``
  in PostgreSQL (sequence numbers and counts outgrow 32 bits in a long-lived journal).
* **Text everywhere else**, timestamps included (ISO 8601 in UTC, as the events store
  them): the hash chain is computed over text, and both engines compare it the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "CLAIMS",
    "EVENTS",
    "INDEXES",
    "META",
    "REVIEW_INDEX",
    "REVISIONS_TABLE",
    "RUNS",
    "RUNS_CREATED",
    "RUN_LOCKS",
    "Column",
    "Dialect",
    "Index",
    "Table",
    "create_index",
    "create_table",
]

Dialect = Literal["sqlite", "postgres"]


@dataclass(frozen=True)
class Column:
    """One column: its name, type and whether it may be NULL."""

    name: str
    type: Literal["text", "int"] = "text"
    null: bool = False


@dataclass(frozen=True)
class Table:
    """One table: columns in order, primary key and unique constraints."""

    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]
    unique: tuple[tuple[str, ...], ...] = ()

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


@dataclass(frozen=True)
class Index:
    """One index, optionally partial (``where`` is the same SQL in both dialects)."""

    name: str
    table: str
    columns: tuple[str, ...]
    where: str | None = None


_TYPES: dict[Dialect, dict[str, str]] = {
    "sqlite": {"text": "TEXT", "int": "INTEGER"},
    "postgres": {"text": "TEXT", "int": "BIGINT"},
}


def create_table(table: Table, dialect: Dialect) -> str:
    """``CREATE TABLE IF NOT EXISTS`` for ``table`` in ``dialect``."""
    lines = [
        f"{c.name} {_TYPES[dialect][c.type]}{'' if c.null else ' NOT NULL'}" for c in table.columns
    ]
    lines.append(f"PRIMARY KEY ({', '.join(table.primary_key)})")
    lines.extend(f"UNIQUE ({', '.join(u)})" for u in table.unique)
    body = ",\n    ".join(lines)
    return f"CREATE TABLE IF NOT EXISTS {table.name} (\n    {body}\n)"


def create_index(index: Index, dialect: Dialect) -> str:
    """``CREATE INDEX IF NOT EXISTS`` for ``index`` (the same text in both dialects)."""
    del dialect  # both engines accept the same statement, partial indexes included
    where = f" WHERE {index.where}" if index.where else ""
    return (
        f"CREATE INDEX IF NOT EXISTS {index.name} ON {index.table} "
        f"({', '.join(index.columns)}){where}"
    )


META = Table(
    "dissensus_meta",
    (Column("key"), Column("value")),
    primary_key=("key",),
)
"""Key-value facts about the journal itself; ``schema`` holds its schema revision."""

RUNS = Table(
    "runs",
    (
        Column("run_id"),
        Column("created"),
        Column("kind"),
        Column("meta"),
        Column("head_hash"),
        Column("n_events", "int"),
    ),
    primary_key=("run_id",),
)

EVENTS = Table(
    "events",
    (
        Column("run_id"),
        Column("seq", "int"),
        Column("key"),
        Column("type"),
        Column("case_ref", null=True),
        Column("at"),
        Column("payload"),
        Column("prev_hash"),
        Column("hash"),
    ),
    primary_key=("run_id", "seq"),
    unique=(("run_id", "key"),),
)

CLAIMS = Table(
    "claims",
    (Column("review_id"), Column("run_id"), Column("who"), Column("claimed_at"), Column("expires")),
    primary_key=("review_id",),
)

REVIEW_INDEX = Table(
    "review_index",
    (
        Column("review_id"),
        Column("run_id"),
        Column("opened_seq", "int"),
        Column("reason"),
        Column("resolved_seq", "int", null=True),
    ),
    primary_key=("review_id",),
)

RUN_LOCKS = Table(
    "run_locks",
    (Column("run_id"), Column("pid", "int"), Column("host"), Column("acquired")),
    primary_key=("run_id",),
)

REVISIONS_TABLE = Table(
    "dissensus_revisions",
    (
        Column("revision", "int"),
        Column("summary"),
        Column("applied_at", null=True),
        Column("applied_by"),
    ),
    primary_key=("revision",),
)
"""One row per schema revision the journal went through (revision 2 on)."""

INDEXES = (
    Index("events_type", "events", ("type", "run_id")),
    Index("events_case", "events", ("run_id", "case_ref")),
    Index("review_index_open", "review_index", ("run_id", "opened_seq"), "resolved_seq IS NULL"),
)

RUNS_CREATED = Index("runs_created", "runs", ("created", "run_id"))
"""The runs in listing order (revision 3): a page of ``runs list`` or ``GET /v1/runs``
reads that page, not the whole table."""
