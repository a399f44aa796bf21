"""The PostgreSQL back end of the run journal, for many writers (``postgresql://...``).

:class:`PostgresBackend` implements :class:`~dissensus.store.backend.Backend` over one
connection, and its session advisory locks as :class:`~dissensus.store.backend.SessionLocks`.

Same tables, same canonical payload text, same hash chain as the SQLite back end, so
``runs verify``, ``runs export`` and ``runs resume`` behave identically on both.

Choices this module makes:

* **Driver.** psycopg 3 (the ``postgres`` extra), one connection per journal object, in
  autocommit mode with explicit ``BEGIN``/``COMMIT`` around every write, so a reader
  never holds a transaction open.
* **Serialising a run's appends.** A write transaction on a run first takes
  ``SELECT ... FOR UPDATE`` on the run's header row; appends to different runs proceed
  in parallel, appends to one run queue up and never fork its chain.
* **Claims** read the claim row with ``FOR UPDATE``: a reviewer racing another for the
  same item waits for the other's (short) transaction and is told who won; a claim
  racing the first claim of an item (no row yet) loses on the insert and reads the
  winner's row.
* **Batches.** :meth:`~dissensus.store.journal.Journal.append_batch` reads the run's head
  and the batch's keys (two statements), then writes the block as multi-row
  ``INSERT`` statements (1,000 rows each) and the head's move, queued to travel with
  the ``COMMIT`` in one pipeline: a block of cases costs about three round trips
  whatever its size.
* **Review index.** Its row travels in the same pipeline as the event's insert (no
  extra round trip); a rebuild takes ``LOCK TABLE review_index IN EXCLUSIVE MODE``, so
  it sees every event committed before it and none written while it runs.
* **Stored text that does not read** as the type a query takes it as (an event payload
  edited to text that is not JSON, cast to ``jsonb`` by the review index's check) is a
  one-line :class:`~dissensus.store.errors.JournalDamaged` error; the review index then
  checks itself from the payloads read here, skipping that row as SQLite does, so only
  ``runs verify`` of its run reports it.
* **Busy writers.** ``lock_timeout`` is the busy timeout; a lock held longer than that
  (SQLSTATE 55P03) is a one-line :class:`~dissensus.store.errors.JournalBusy` error. A
  statement the server cancels (57014: its ``statement_timeout``, or an administrator's
  ``pg_cancel_backend``) is not lock contention: a one-line
  :class:`~dissensus.store.errors.JournalError` (exit 1) saying the server cancelled it,
  naming ``statement_timeout`` when that was the cause.
* **Malformed URLs.** A URL that can never connect (libpq cannot parse it, a port
  outside 1-65535, an invalid option value such as ``sslmode=bogus``, an unencoded
  ``@`` in the user-info) is refused before connecting, exit 2 (a configuration
  error), one line naming the journal with its password masked; only a server that
  does not answer is exit 1.
* **Run locks** are session advisory locks (released by the server when the holder's
  connection ends, even on ``kill -9``), with the holder's pid and host in
  ``run_locks`` for the message.
* **Snapshots.** A read of several queries that must agree (``snapshot``) is one
  ``REPEATABLE READ READ ONLY`` transaction: every query in it sees the journal as it
  was at the first one, whatever other sessions commit meanwhile. It is not read again
  on a new connection when the connection is lost halfway (the error is the caller's).
* **What changed since** (:meth:`PostgresBackend.version`, which followers of the journal
  use to skip reading the runs' heads when nothing changed): inside a read snapshot, the
  snapshot itself as the server gives it (``txid_current_snapshot()``: the lowest
  transaction still running, one past the highest finished, and those running between)
  and when the server started, with which object this is. A transaction that writes is
  numbered, so a commit (to this journal or any other database of the server) since an
  earlier snapshot shows in a later one: a transaction running then is no longer
  listed, or one numbered after it raises the highest finished. Two equal snapshots
  thus see the same committed transactions, thus the same rows. A busy
  server changes it often (the heads are then read, as without it); a read-only
  transaction does not. The server's counts of commits (``pg_stat_database``) would
  change less often but are reported late, so they could say nothing changed after a
  commit: they are not used. Inside a write transaction of this object there is no
  version.
* **Named locks** (:meth:`~dissensus.store.journal.Journal.lock_name`) are
  transaction-level advisory locks: a run's shift check counts the file's earlier checks
  under one, so two runs finishing at once take consecutive indices.
* **Schema creation** runs under a transaction-level advisory lock, so several
  processes opening a fresh database at once do not collide. Opening a journal whose
  tables and indexes all exist costs one catalogue query instead (no DDL, no lock): the
  ``CREATE ... IF NOT EXISTS`` statements cost a dozen round trips on every open. A
  database whose ``runs`` or ``events`` table has other columns is refused (exit 2).
* **Reconnecting.** A lost connection (the server restarted, the network failed) is
  replaced by a new one on the next statement that does not belong to an open
  transaction; a read outside a transaction that finds the connection lost is read
  again once on the new connection, so ``/readyz`` recovers on its first probe after
  the database is back, and so is the first round trip of a transaction (its ``BEGIN``
  travels with it, so nothing of it can have committed). A transaction that loses its
  connection later fails (nothing of it is committed) and the next one reconnects. The
  run locks the object held (session advisory locks, released by the server with the
  old connection) are taken again on the new connection. One another process took
  meanwhile (a ``runs resume`` started while the server restarted) is lost: every later
  write transaction on that run is refused with
  :class:`~dissensus.store.errors.RunLockLost` (the run stops here, exit 1, nothing
  more is appended, so none of its model calls is sent again), and the other process
  is the one that continues it. No connection pool:
  the journal object is one session (its advisory run locks live in it), used under
  one lock, so a pool would only add connections that cannot share those locks.
* **The driver's own log.** What psycopg logs while a pipeline of this module ends on a
  lost connection (``error ignored terminating <psycopg.Pipeline [BAD] ...>``) is kept
  at debug level in this module's log (``dissensus.store.postgres``), never printed on
  stderr: the error itself is the caller's one line (or a reconnection).
* **Credentials.** A password in the URL is never printed: messages show the URL with
  the password replaced by ``***``.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from dissensus.errors import ConfigError, InputError
from dissensus.store import clock, migrations
from dissensus.store.backend import Row
from dissensus.store.errors import (
    JournalBusy,
    JournalDamaged,
    JournalError,
    JournalReadOnly,
    RunLockLost,
)
from dissensus.store.events import (
    _SEE,
    EVENTS_COLUMNS,
    RUNS_COLUMNS,
    EventRow,
    EventValues,
    RunHead,
)
from dissensus.store.migrations import SchemaInfo
from dissensus.store.schema import Dialect
from dissensus.store.targets import (
    BUSY_TIMEOUT_ENV,
    busy_timeout,
    check_postgres_url,
    mask_url,
    scrub_secrets,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["AdvisoryLocks", "PostgresBackend", "redact_url"]

_SCHEMA_LOCK = 0x64697373  # advisory lock key held while creating the schema
_RUN_LOCK_NS = 0x72756E  # first half of a run lock's advisory key
_NAME_LOCK_NS = 0x6E616D  # first half of a named lock's advisory key (Journal.lock_name)

_TABLES = ("dissensus_meta", "runs", "events", "claims", "review_index", "run_locks")
"""The tables of a complete journal (revision 1); ``dissensus_revisions`` joins at 2."""
_INDEXES = ("events_type", "events_case", "review_index_open")

# One round trip: the columns of each journal table and which journal indexes exist, in
# the schema the connection writes to (``current_schema()``).
_SCHEMA_STATE = """
SELECT c.relname AS name, c.relkind AS kind,
       (SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a
         WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS columns
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relname = ANY(%s)
"""


log = logging.getLogger("dissensus.store.postgres")


class _PipelineNoise(logging.Filter):
    """On psycopg's logger: what the driver says while one of this module's pipelines
    ends (``error ignored terminating <psycopg.Pipeline [BAD] ...>: the connection is
    lost``, or libpq's three lines after ``consuming input failed``) goes to this module's
    log at debug level instead. The error itself reaches the caller (a one-line message,
    or a reconnection), so without a logging set-up Python's last-resort handler printed
    a stray line on stderr, even when the command then succeeded. The driver's other
    warnings, and those of other code's connections, pass."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(self.local, "active", False):
            return True
        log.debug("psycopg: %s", " ".join(record.getMessage().split()))
        return False


_NOISE = _PipelineNoise()


_ROWS_PER_INSERT = 1000
"""Rows per multi-row INSERT of a batch (9 parameters a row, well under the protocol's 65,535)."""


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (:func:`~dissensus.store.targets.mask_url`)."""
    return mask_url(url)


def _malformed(exc: BaseException) -> bool:
    """Whether a connection error says the URL itself is wrong (it can never work: a
    configuration error, exit 2) rather than that no server answered: psycopg's
    ``ProgrammingError`` (libpq could not parse the URL), or libpq refusing an option's
    value before reaching the network (``connection is bad: invalid sslmode value``;
    a network failure at that point names the server: ``connection to server ...``)."""
    import psycopg

    if isinstance(exc, psycopg.ProgrammingError):
        return True
    first = _first_line(exc)
    return first.startswith("connection is bad:") and "connection to server" not in first


def _cancelled(path: str, said: str) -> str:
    """The one line for a statement the server cancelled (SQLSTATE 57014)."""
    if "statement timeout" in said:
        return (
            f"journal {path}: the server cancelled a statement that ran past its "
            "statement_timeout (set on the server, the database, the user or in the URL's "
            "options); raise statement_timeout for this user or retry later"
        )
    return f"journal {path}: the server cancelled the statement: {said}"


def _sql(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


_OBJECTS = itertools.count(1)
"""Numbers the back-end objects of the process (a version names its object)."""


class PostgresBackend:
    """A run journal's database in PostgreSQL (``postgresql://user[:password]@host[:port]/db``).

    Opening it connects, refuses a database whose journal tables are another
    application's, and applies the schema revisions it lacks; the review index is checked
    by the journal once this returns.
    """

    dialect: Dialect = "postgres"

    def __init__(
        self,
        target: str | Path,
        *,
        synchronous: str | None = None,
        busy_timeout: float | None = None,
    ) -> None:
        del synchronous  # SQLite's setting; the server decides its own durability
        try:
            import psycopg
            from psycopg.rows import dict_row
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise ConfigError(
                "a postgresql:// journal needs psycopg: pip install 'dissensus[postgres]'",
                field="--journal",
            ) from exc
        self._psycopg = psycopg
        logging.getLogger("psycopg").addFilter(_NOISE)  # added once however often called
        url = str(target)
        self.path = redact_url(url)
        self.lock = threading.RLock()
        self.session_locks = AdvisoryLocks(self)
        self._in_transaction = False
        self._reading = False
        """Whether a read snapshot of this object's own is open."""
        self._object = next(_OBJECTS)
        self._queue: list[tuple[str, tuple[Any, ...]]] = []
        self.busy_timeout = _busy(busy_timeout)
        self._url = url
        self._row_factory = dict_row
        check_postgres_url(url)
        self._check_conninfo()
        try:
            # Rows as dicts keyed by column (the Backend seam's Row).
            self._db: psycopg.Connection[Row] = self._connect()
        except psycopg.Error as exc:
            if _malformed(exc):
                raise InputError(f"invalid journal URL {self.path}: {self._said(exc)}") from exc
            if getattr(exc, "sqlstate", None) is None and "FATAL:" not in str(exc):
                # No server answered (refused, unreachable, timed out): an outage, exit 1,
                # as the same outage in the middle of a run is; a server that answered
                # and refused (libpq's "FATAL:": a password, a database that does not
                # exist) is a setting.
                raise JournalError(f"cannot reach journal {self.path}: {self._said(exc)}") from exc
            raise InputError(f"cannot open journal {self.path}: {self._said(exc)}") from exc
        try:
            with self.errors():
                self._configure()
                self._upgrade()
        except BaseException:
            self._db.close()
            raise

    def _check_conninfo(self) -> None:
        """Refuse (exit 2) a URL that can never connect, before trying: one libpq cannot
        parse (an unknown parameter, a bad percent-encoding, an unclosed ``[``) or with
        a port outside 1-65535. Other invalid values (``sslmode=bogus``) are refused by
        libpq before it reaches the network (:func:`_malformed`)."""
        from psycopg.conninfo import conninfo_to_dict

        try:
            params = conninfo_to_dict(self._url)
        except self._psycopg.Error as exc:
            raise InputError(f"invalid journal URL {self.path}: {self._said(exc)}") from exc
        for port in str(params.get("port") or "").split(","):
            port = port.strip()
            if port and not (port.isdigit() and 1 <= int(port) <= 65535):
                raise InputError(
                    f"invalid journal URL {self.path}: port {port[:20]!r} is not a number "
                    "from 1 to 65535"
                )

    def _connect(self) -> psycopg.Connection[Row]:
        return self._psycopg.connect(
            self._url,
            autocommit=True,
            row_factory=self._row_factory,
            connect_timeout=max(1, int(self.busy_timeout) or 10),
        )

    def _configure(self) -> None:
        # Both settings in one round trip (no parameters: one simple query).
        self._db.execute(f"SET lock_timeout = {int(self.busy_timeout * 1000)}; SET TIME ZONE 'UTC'")

    def _lost(self) -> bool:
        """Whether the connection is gone (the server restarted, the network failed)."""
        return bool(self._db.closed or self._db.broken)

    def _reconnect(self) -> None:
        """A new connection in place of a lost one; the run locks this object held are
        taken again (those another process took meanwhile are lost: writing to their
        run is refused, :class:`~dissensus.store.errors.RunLockLost`)."""
        with suppress(Exception):
            self._db.close()
        self._db = self._connect()
        self._configure()
        self.session_locks.retake()

    def _ensure(self) -> None:
        """Reconnect a lost connection, when no transaction of this object is open on it."""
        if not self._lost():
            return
        if self._in_transaction and self._queue[:1] != [("BEGIN", ())]:
            return  # mid-transaction: the statement fails; the transaction is rolled back
        with suppress(self._psycopg.Error):  # still down: the statement reports it
            self._reconnect()

    def _schema_state(self) -> tuple[bool, int]:
        """Whether every table and index exists (checking the two tables' columns), and
        the schema revision the journal records (0 when it records none)."""
        names = list(_TABLES + _INDEXES + ("dissensus_revisions",))
        rows = self._db.execute(_SCHEMA_STATE, (names,)).fetchall()
        found = {r["name"]: (r["kind"], tuple(r["columns"] or ())) for r in rows}
        for name, columns in (("runs", RUNS_COLUMNS), ("events", EVENTS_COLUMNS)):
            if name in found and found[name][1] != columns:
                raise InputError(
                    f"not a dissensus journal: {self.path} has a table {name!r} of another application; "
                    "give --journal another database"
                )
        ready = all(found.get(t, ("",))[0] in ("r", "p") for t in _TABLES) and all(
            found.get(i, ("",))[0] == "i" for i in _INDEXES
        )
        revision = 0
        if "dissensus_meta" in found:
            row = self._db.execute(
                "SELECT value FROM dissensus_meta WHERE key = 'schema'"
            ).fetchone()
            revision = migrations.parse_revision(row["value"] if row else None, self.path)
        return ready, revision

    def _upgrade(self) -> None:
        """Apply the schema revisions this journal lacks (:mod:`~dissensus.store.migrations`)
        under an advisory lock; a journal that is up to date is only read."""
        ready, found = self._schema_state()
        migrations.check_known(found, self.path)
        if ready and found >= migrations.CURRENT:
            return
        try:
            with self._db.transaction():
                self._db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                ready, found = self._schema_state()  # again, under the lock
                migrations.check_known(found, self.path)
                migrations.apply(
                    found if ready else 0,
                    "postgres",
                    lambda sql, args: self._db.execute(_sql(sql), args),
                    at=clock.now(),
                )
        except (
            self._psycopg.errors.InsufficientPrivilege,
            self._psycopg.errors.ReadOnlySqlTransaction,
        ):
            if not ready or any(r.needed_to_read for r in migrations.plan(found)):
                raise

    def _said(self, exc: BaseException) -> str:
        """The first line of the driver's error without the URL's secrets (it may quote
        the URL, or a part of it such as a malformed password)."""
        return scrub_secrets(_first_line(exc), self._url)

    def schema(self) -> SchemaInfo:
        """The journal's schema revision, this version's, and the revision history."""
        with self.lock, self.errors():
            _, found = self._schema_state()
            try:
                rows = self.rows(migrations.history_query())
            except self._psycopg.errors.UndefinedTable:
                rows = []
        return migrations.describe(found, rows)

    # -- the Backend seam ----------------------------------------------------------------

    @contextmanager
    def errors(self) -> Iterator[None]:
        errors = self._psycopg.errors
        try:
            yield
        except errors.QueryCanceled as exc:
            # 57014: the server cancelled the statement (its statement_timeout, or an
            # administrator's pg_cancel_backend), not a lock this store waited for.
            raise JournalError(_cancelled(self.path, self._said(exc))) from exc
        except (
            errors.InvalidTextRepresentation,
            errors.InvalidJsonText,
            errors.UntranslatableCharacter,
        ) as exc:
            # 22P02, 22032, 22P05: stored text that does not read as the type a query
            # takes it as (an event payload edited to text that is not JSON).
            raise JournalDamaged(
                f"journal {self.path} is damaged: a stored row does not read: "
                f"{self._said(exc)}{_SEE}"
            ) from exc
        except (errors.LockNotAvailable, errors.DeadlockDetected) as exc:
            raise JournalBusy(
                f"journal {self.path} is locked by another writer (waited {self.busy_timeout:g} s; see {BUSY_TIMEOUT_ENV})"
            ) from exc
        except errors.InsufficientPrivilege as exc:
            raise JournalReadOnly(
                f"journal {self.path}: the database user is not permitted this: {self._said(exc)}"
            ) from exc
        except errors.ReadOnlySqlTransaction as exc:
            # 25006: a read-only session (default_transaction_read_only, a hot standby).
            raise JournalReadOnly(
                f"journal {self.path}: the session is read-only: {self._said(exc)}"
            ) from exc
        except self._psycopg.OperationalError as exc:
            raise JournalError(f"journal {self.path}: {self._said(exc)}") from exc
        except self._psycopg.Error as exc:
            raise JournalError(f"journal {self.path}: {self._said(exc)}") from exc

    # Statements whose results are not needed (BEGIN, an event's insert) wait in a queue
    # and travel with the next statement in one pipeline: an append costs three round
    # trips to the server (BEGIN + lock, read head, write + COMMIT) instead of seven.

    def _send(self, sql: str, args: Sequence[Any]) -> psycopg.Cursor[Row]:
        self._ensure()
        if not self._queue:
            return self._db.execute(sql, tuple(args))
        queued, self._queue = self._queue, []
        try:
            return self._pipeline(queued, sql, args)
        except self._psycopg.OperationalError:
            # The first round trip of a transaction (its BEGIN goes with it) found the
            # connection lost: nothing of it reached a live server, nothing can have
            # committed, so it is sent again once on a new connection.
            if queued[:1] != [("BEGIN", ())] or not self._lost():
                raise
            self._reconnect()
            return self._pipeline(queued, sql, args)

    def _pipeline(
        self, queued: list[tuple[str, tuple[Any, ...]]], sql: str, args: Sequence[Any]
    ) -> psycopg.Cursor[Row]:
        _NOISE.local.active = True
        try:
            with self._db.pipeline():
                for q_sql, q_args in queued:
                    self._db.execute(q_sql, q_args)
                cur = self._db.execute(sql, tuple(args))
        finally:
            _NOISE.local.active = False
        return cur

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        with self.lock:
            try:
                return self._send(_sql(sql), args).fetchall()
            except self._psycopg.OperationalError:
                # A read outside a transaction found the connection lost (the server
                # restarted): read again once on a new connection.
                if self._in_transaction or self._queue or not self._lost():
                    raise
                self._ensure()
                return self._send(_sql(sql), args).fetchall()

    def exec(self, sql: str, args: Sequence[Any] = ()) -> int:
        with self.lock:
            return self._send(_sql(sql), args).rowcount

    def values(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        from psycopg.rows import tuple_row

        with self.lock:
            if self._queue:  # statements of a write transaction wait: they go first
                return [tuple(row.values()) for row in self.rows(sql, args)]
            self._ensure()
            cursor = self._db.cursor(row_factory=tuple_row)
            return cursor.execute(_sql(sql), tuple(args)).fetchall()

    def begin(self) -> None:
        self._queue = [("BEGIN", ())]
        self._in_transaction = True

    def commit(self) -> None:
        if self._queue == [("BEGIN", ())]:
            self._queue = []  # nothing was done: no transaction to send
            self._in_transaction = False
            return
        self._send("COMMIT", ())
        self._in_transaction = False

    def rollback(self) -> None:
        try:
            if self._queue[:1] == [("BEGIN", ())]:
                self._queue = []  # the transaction never reached the server
                return
            self._queue = []
            if not self._db.closed:
                self._db.execute("ROLLBACK")
        finally:
            self._in_transaction = False

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        with self.lock:
            if self._in_transaction:  # a write transaction of this object: its view
                yield
                return
            with self.errors():
                self.exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            self._in_transaction = self._reading = True
            try:
                yield
            finally:
                self._in_transaction = self._reading = False
                # Read only: nothing to keep. On a lost connection the server ended it.
                with suppress(self._psycopg.Error):
                    if not self._db.closed:
                        self._db.execute("ROLLBACK")

    def version(self) -> Hashable | None:
        """What changed since (see the module docstring): inside a read snapshot only."""
        with self.lock:
            if not self._reading:
                return None
            row = self.values(
                "SELECT pg_postmaster_start_time()::text, txid_current_snapshot()::text"
            )[0]
            return (self._object, *row)

    def append_state(
        self, run_id: str, keys: Sequence[str]
    ) -> tuple[dict[str, EventRow], RunHead | None]:
        # The keys' stored events and the run's head in one round trip: one row per
        # stored key, or a single row with no event when none is stored.
        rows = self.rows(
            "SELECT r.head_hash AS run_head, r.n_events AS run_n, e.* FROM runs r "
            "LEFT JOIN events e ON e.run_id = r.run_id AND e.key = ANY(?) WHERE r.run_id = ?",
            (list(dict.fromkeys(keys)), run_id),
        )
        first = rows[0]
        head = RunHead(n_events=int(first["run_n"]), head_hash=str(first["run_head"]))
        stored: dict[str, EventRow] = {}
        for row in rows:
            row.pop("run_n")
            row.pop("run_head")
            if row["key"] is not None:
                # Without the head's two columns the row is a whole row of ``events``.
                stored[str(row["key"])] = cast(EventRow, row)
        return stored, head

    def write_events(self, rows: Sequence[EventValues]) -> None:
        # A block's rows as multi-row INSERTs of at most _ROWS_PER_INSERT rows each, the
        # head moved by the last of them: queued, they travel with the COMMIT in one
        # pipeline (one round trip for the whole block).
        for start in range(0, len(rows), _ROWS_PER_INSERT):
            chunk = rows[start : start + _ROWS_PER_INSERT]
            values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(chunk))
            args = [x for row in chunk for x in row]
            if start + _ROWS_PER_INSERT >= len(rows):
                last = chunk[-1]
                self._queue.append(
                    (
                        "WITH ins AS (INSERT INTO events (run_id, seq, key, type, case_ref, at, "
                        f"payload, prev_hash, hash) VALUES {values}) "
                        "UPDATE runs SET head_hash = %s, n_events = %s WHERE run_id = %s",
                        (*args, last[8], last[1] + 1, last[0]),
                    )
                )
            else:
                self._queue.append(
                    (
                        "INSERT INTO events (run_id, seq, key, type, case_ref, at, payload, "
                        f"prev_hash, hash) VALUES {values}",
                        tuple(args),
                    )
                )

    def write_index(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        statement = _sql(sql)
        self._queue.extend((statement, tuple(args)) for args in rows)  # with the insert

    def json_text(self, column: str, key: str) -> str:
        # PostgreSQL's JSON types refuse a "\u0000" escape anywhere in the text (its text
        # type cannot hold NUL), and a panel may carry one: each is read as U+FFFD first
        # (no review id or reason holds one). Escaped backslashes are set aside meanwhile
        # (as chr(1): canonical JSON text holds no raw control character), so that the
        # text "\\u0000", a backslash and then "u0000", is left as it is.
        text = (
            rf"CASE WHEN strpos({column}, '\u0000') > 0 THEN replace(replace(replace("
            rf"{column}, '\\', chr(1)), '\u0000', '\ufffd'), chr(1), '\\') ELSE {column} END"
        )
        return f"(({text})::jsonb ->> '{key}')"

    def distinct(self, left: str, right: str) -> str:
        return f"{left} IS DISTINCT FROM {right}"

    def lock_review_index(self) -> None:
        # A rebuild sees every event committed before it and none written during it.
        self.exec("LOCK TABLE review_index IN EXCLUSIVE MODE")

    def lock_name(self, name: str) -> None:
        # A transaction-level advisory lock: released by the server at commit or rollback.
        self.exec("SELECT pg_advisory_xact_lock(?, hashtext(?))", (_NAME_LOCK_NS, name))

    def lock_run(self, run_id: str) -> bool:
        found = bool(self.rows("SELECT 1 FROM runs WHERE run_id = ? FOR UPDATE", (run_id,)))
        # Checked once the statement is sent: it may be the one that reconnected.
        if self.session_locks.lost(run_id):
            raise RunLockLost(
                f"run {run_id!r} stopped: its execution lock was lost to another process "
                f"(the connection to journal {self.path} dropped and another process took "
                "the run over meanwhile); that process continues it"
            )
        return found

    def claim_row(self, review_id: str) -> Row | None:
        # Waits (at most the busy timeout) for a claim being taken, so that a loser is
        # told who won, never "?".
        rows = self.rows("SELECT * FROM claims WHERE review_id = ? FOR UPDATE", (review_id,))
        return rows[0] if rows else None

    def close(self) -> None:
        self._db.close()

    # -- run locks --------------------------------------------------------------------


class AdvisoryLocks:
    """Run locks as PostgreSQL session advisory locks of one connection (the server
    releases them when the connection ends, even on ``kill -9``)."""

    def __init__(self, backend: PostgresBackend) -> None:
        self._backend = backend
        self._held: set[str] = set()
        self._lost: set[str] = set()

    def _key(self, run_id: str) -> int:
        row = self._backend.rows("SELECT hashtext(?) AS h", (run_id,))
        return int(row[0]["h"])

    def holds(self, run_id: str) -> bool:
        return run_id in self._held

    def held(self, run_id: str) -> bool:
        if run_id in self._held:
            return True
        # pg_locks names a two-key advisory lock by classid, objid and objsubid 2.
        rows = self._backend.rows(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND classid = CAST(CAST(? AS integer) AS oid) "
            "AND objid = CAST(hashtext(?) AS oid) AND objsubid = 2) AS held",
            (_RUN_LOCK_NS, run_id),
        )
        return bool(rows[0]["held"])

    def try_lock(self, run_id: str) -> bool:
        key = self._key(run_id)
        got = self._backend.rows("SELECT pg_try_advisory_lock(?, ?) AS ok", (_RUN_LOCK_NS, key))
        if not got[0]["ok"]:
            return False
        self._held.add(run_id)
        self._lost.discard(run_id)
        return True

    def lost(self, run_id: str) -> bool:
        """Whether this object held the run's lock and, on reconnecting, found another
        session holding it (:meth:`retake`): this process must not write to the run."""
        return run_id in self._lost

    def unlock(self, run_id: str) -> None:
        self._lost.discard(run_id)
        if run_id in self._held:
            self._held.discard(run_id)
            key = self._key(run_id)
            self._backend.rows("SELECT pg_advisory_unlock(?, ?) AS ok", (_RUN_LOCK_NS, key))

    def retake(self) -> None:
        """On a new connection: take again the locks the lost one held; those another
        session took meanwhile are :meth:`lost` (each write to their run is refused)."""
        held, self._held = sorted(self._held), set()
        for n, run_id in enumerate(held):
            try:
                taken = self.try_lock(run_id)
            except BaseException:
                self._held.update(held[n:])  # still to take again on the next connection
                raise
            if not taken:
                self._lost.add(run_id)


def _busy(value: float | None) -> float:
    return busy_timeout(value)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
