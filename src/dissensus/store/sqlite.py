"""The embedded SQLite back end of the run journal (the default).

:class:`SQLiteBackend` implements :class:`~dissensus.store.backend.Backend` over one file.

Choices this module makes:

* **Durability.** WAL mode with ``synchronous=FULL``: an append returns only after its
  transaction is on disk, so an appended event survives ``kill -9`` (and power loss)
  and one that was not is absent entirely. A batch
  (:meth:`~dissensus.store.journal.Journal.append_batch`) is one transaction: one fsync
  for the block, all of its events or none. ``$DISSENSUS_JOURNAL_SYNC=normal`` trades
  power-loss durability for speed (every committed event still survives a process kill).
* **Pages of 16 KiB** (:data:`PAGE_SIZE`) in a new journal file, against SQLite's 4 KiB:
  an escalated case's ``review.opened`` payload (the whole panel, some 5 kB) then fits
  in its table page rather than spilling into a chain of overflow pages, and a block's
  rows are written in fewer pages, so appending a block of synthetic 5-agent panels
  takes less CPU. An existing file keeps its page size (SQLite fixes it with the first
  table); any SQLite reads either.
* **Checkpoints by size, not pages.** SQLite copies the WAL back into the file once it
  holds 1,000 pages: 4 MiB of 4 KiB pages, but 16 MiB of 16 KiB ones. Each connection
  sets ``wal_autocheckpoint`` from its file's actual page size so the WAL checkpoints
  at about 4 MiB (:data:`WAL_CHECKPOINT_BYTES`) either way: 250 pages in a 16 KiB
  journal, SQLite's own 1,000 in a 4 KiB one.
* **Batched inserts.** A batch's rows go in with one ``executemany`` and the run's head
  moves once, to the batch's last event.
* **Sharing a file.** WAL lets readers work while one process writes; writers take the
  database write lock (``BEGIN IMMEDIATE``) and wait up to the busy timeout for it, so a
  service and a CLI can share one journal file. A lock held longer than that is a
  one-line :class:`~dissensus.store.errors.JournalBusy` error, never a traceback.
* **Someone else's database.** A file that already holds tables and is not a dissensus
  journal is refused (exit 2) instead of having tables added to it.
* **A damaged file.** SQLite's corruption errors (``SQLITE_CORRUPT``: "database disk
  image is malformed"; ``SQLITE_NOTADB``, "file is not a database", once the file was
  opened as a journal), met when opening or in any later statement, are a one-line
  :class:`~dissensus.store.errors.JournalDamaged` naming the journal (exit 2, as a
  truncated file is), never a failure of the command. A file that is not a database
  when it is opened stays "not a dissensus journal" (exit 2).
* **Regular files only.** A journal path that exists and is not a regular file
  (``/dev/null``, ``/dev/full``, a named pipe, a directory) is refused
  (:class:`~dissensus.errors.InputError`, exit 2) before SQLite opens it: SQLite would
  make its ``-journal`` file beside it (``/dev/null-journal``) and then fail.
* **Paths, not URIs.** A target starting ``file:`` is refused (InputError, exit 2):
  SQLite would read it as a URI whose parameters (``mode=ro``, ``vfs=``) override the
  journal's own settings, and the file it names would not be made ``0600``.
  ``./file:x`` names a file called ``file:x``.
* **Snapshots.** A read of several queries that must agree (``snapshot``) is one
  deferred read transaction: in WAL mode it sees the journal as it was at its first
  query, never blocks a writer and is never blocked by one.
* **What changed since** (:meth:`SQLiteBackend.version`, which followers of the journal
  use to skip reading the runs' heads when nothing changed): inside a read snapshot, the
  file's identity (device and inode, as ``os.stat`` of the journal's path finds them
  now), SQLite's ``PRAGMA data_version`` (which changes when a connection other than
  this object's commits to the file: a write of another process or of another journal
  object, a restore through SQLite's backup API, a checkpoint; it is that of the
  snapshot the read holds), this connection's ``total_changes`` and the number of write
  transactions it began, and which object this is. Two equal versions thus mean nothing
  was committed to the file in between. A file replaced by rename is a new identity (the
  connection goes on reading the file it opened, as every other read of it does); a
  write through this object's connection outside its seam (a backup into it) is not
  seen. Inside a write transaction of this object there is no version.
* **Run locks** live in a ``run_locks`` table; a holder whose process is gone (same
  host; a zombie counts as gone) is replaced.
* **File mode.** A new journal file is created ``0600`` (owner only), whatever the
  umask: it holds every case's text; SQLite's ``-wal`` and ``-shm`` files follow it.
* **A journal on a read-only file system** (an archive mounted read-only, a snapshot)
  is read as it is: a WAL database cannot be opened the ordinary way where its ``-shm``
  file cannot be made, so such a journal is opened ``immutable`` (SQLite reads the file
  and nothing beside it). That is exact only when the journal holds no writes still in
  a ``-wal`` file beside it (a journal closed by its last writer has none); with one
  there, opening it is an error naming the file to copy somewhere writable. ``runs
  list``, ``runs show`` and ``runs verify`` work; any write is
  :class:`~dissensus.store.errors.JournalReadOnly`. So is a journal in a folder this
  process cannot write (another user's, an archive's) when no ``-shm`` file lies beside
  it: SQLite could not make one, and none there means no process has the journal open
  (:func:`read_as_it_stands`).
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import stat
import threading
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dissensus.errors import InputError
from dissensus.files import file_kind
from dissensus.store import clock, migrations
from dissensus.store.backend import Row, SessionLocks, stored_keys
from dissensus.store.errors import JournalBusy, JournalDamaged, JournalError, JournalReadOnly
from dissensus.store.events import EVENTS_COLUMNS, RUNS_COLUMNS, EventRow, EventValues, RunHead
from dissensus.store.migrations import SchemaInfo
from dissensus.store.schema import Dialect
from dissensus.store.targets import BUSY_TIMEOUT_ENV, busy_timeout, check_journal_target

__all__ = [
    "SYNC_ENV",
    "SQLiteBackend",
    "checkpoint_pages",
    "immutable_uri",
    "on_read_only_file_system",
    "read_as_it_stands",
]

SYNC_ENV = "DISSENSUS_JOURNAL_SYNC"
"""``full`` (default) or ``normal``: SQLite's ``synchronous`` setting of the journal."""

PAGE_SIZE = 16384
"""Bytes in a page of a new journal file (SQLite's default is 4096)."""

WAL_CHECKPOINT_BYTES = 1000 * 4096
"""The size of WAL at which SQLite checkpoints it: its own 1,000 pages of its default
4 KiB, whatever the file's page size (:func:`checkpoint_pages`)."""


def checkpoint_pages(page_size: int) -> int:
    """``wal_autocheckpoint`` for a file of ``page_size``-byte pages: the pages in
    :data:`WAL_CHECKPOINT_BYTES` (at least one)."""
    return max(1, WAL_CHECKPOINT_BYTES // page_size)


_OURS = {"dissensus_meta", "runs", "events", "claims", "run_locks", "review_index"}
"""The tables of a complete journal (revision 1); ``dissensus_revisions`` joins at 2."""
_KNOWN = _OURS | {"dissensus_revisions"}

_INSERT_EVENT = (
    "INSERT INTO events (run_id, seq, key, type, case_ref, at, payload, prev_hash, hash) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _damaged(exc: sqlite3.Error, *, not_a_database: bool = True) -> bool:
    """Whether ``exc`` says the database file is corrupt: SQLite's primary result code
    ``SQLITE_CORRUPT`` (or, with ``not_a_database``, ``SQLITE_NOTADB``), or the text
    when the driver gave no code."""
    codes = {sqlite3.SQLITE_CORRUPT}
    texts = ["malformed"]
    if not_a_database:
        codes.add(sqlite3.SQLITE_NOTADB)
        texts.append("not a database")
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in codes
    return any(text in str(exc) for text in texts)


def _sync_mode(value: str | None) -> str:
    mode = (value or os.environ.get(SYNC_ENV) or "full").strip().upper()
    if mode not in ("FULL", "NORMAL"):
        raise InputError(f"{SYNC_ENV} must be 'full' or 'normal', got {mode.lower()!r}")
    return mode


def _create_private(path: str) -> None:
    """Create ``path`` readable and writable by its owner only (``0600``) when it does not
    exist; SQLite gives the ``-wal`` and ``-shm`` files it makes beside it the same mode."""
    if os.path.islink(path) and not os.path.exists(path):
        path = os.path.realpath(path)  # a broken link: made where it leads, as SQLite would
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    except OSError:
        return  # sqlite3.connect reports why the file cannot be made
    os.close(fd)


def _check_regular(path: str) -> None:
    """Refuse a journal path that exists and is not a regular file (a device, a named
    pipe, a directory): SQLite would make its ``-journal`` file beside it (``/dev/null-journal``)
    and then fail with "disk I/O error"."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # absent (created next) or unreadable (sqlite3.connect says why)
    if not stat.S_ISREG(mode):
        raise InputError(f"journal {path}: not a regular file ({file_kind(mode)})")


def on_read_only_file_system(path: str) -> bool:
    """Whether ``path`` is an existing file on a file system mounted read-only; raises
    :class:`InputError` when its writes still in a ``-wal`` file could not be read there."""
    if path == ":memory:" or not os.path.isfile(path):
        return False
    try:
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False
    wal = f"{path}-wal"
    if read_only and os.path.exists(wal) and os.path.getsize(wal) > 0:
        raise InputError(
            f"journal {path} is on a read-only file system with writes still in {wal}: "
            "copy the journal and its -wal file somewhere writable to read it"
        )
    return read_only


def read_as_it_stands(path: str) -> bool:
    """Whether ``path`` is an existing journal SQLite can only read as it stands (opened
    ``immutable``): on a file system mounted read-only, or in a folder this process
    cannot write with no ``-shm`` file beside it (SQLite reads a WAL database through
    that file, and could not make it there). No ``-shm`` file means no process has the
    journal open (every connection to a WAL database shares it), so the file is
    complete as it is. Raises :class:`InputError` when writes still in a ``-wal`` file
    could not be read so."""
    if on_read_only_file_system(path):
        return True
    if path == ":memory:" or not os.path.isfile(path):
        return False
    folder = os.path.dirname(os.path.abspath(path))
    if os.access(folder, os.W_OK) or os.path.exists(f"{path}-shm"):
        return False
    wal = f"{path}-wal"
    if os.path.exists(wal) and os.path.getsize(wal) > 0:
        raise InputError(
            f"journal {path} is in a folder this process cannot write ({folder}) with writes "
            f"still in {wal}: copy the journal and its -wal file somewhere writable to read it"
        )
    return True


def immutable_uri(path: str) -> str:
    """SQLite's URI for reading ``path`` as a file nothing will change."""
    return Path(path).resolve().as_uri() + "?mode=ro&immutable=1"


_OBJECTS = itertools.count(1)
"""Numbers the back-end objects of the process (a version names its object)."""

_UNDECODABLE = "Could not decode to UTF-8"
"""The start of sqlite3's error for a text cell whose bytes are not UTF-8."""


def _replacing(data: bytes) -> str:
    """A text cell's bytes as text, undecodable bytes replaced (U+FFFD)."""
    return data.decode("utf-8", "replace")


class SQLiteBackend:
    """A run journal's database in one SQLite file (``":memory:"`` for a throw-away one).

    Opening it checks the file is a journal (or empty) and applies the schema revisions
    it lacks; the review index is checked by the journal once this returns.
    """

    dialect: Dialect = "sqlite"
    session_locks: SessionLocks | None = None

    def __init__(
        self,
        target: str | Path,
        *,
        synchronous: str | None = None,
        busy_timeout: float | None = None,
    ) -> None:
        self.path = str(target)
        self.lock = threading.RLock()
        self._object = next(_OBJECTS)
        self._writes = 0
        """Write transactions this object began."""
        self._reading = False
        """Whether a read snapshot of this object's own is open."""
        self.busy_timeout = _busy(busy_timeout)
        if self.path.startswith("file:"):
            # SQLite would read it as a URI (a stray empty file of that name was made
            # beside the file the URI named, which was not private); the journal's own
            # settings (WAL, synchronous, 0600) need a plain path.
            raise InputError(
                f"journal {self.path}: SQLite URIs ('file:...') are not taken; name the file "
                f"by its path (./{self.path} for a file whose name starts with 'file:')"
            )
        check_journal_target(self.path)
        if self.path != ":memory:":
            parent = Path(self.path).parent
            if not parent.is_dir():
                raise InputError(f"journal directory does not exist: {parent}")
            _check_regular(self.path)
            _create_private(self.path)
        self._db = self._connect(self.path)
        try:
            try:
                tables = self._check_foreign()
            except JournalError:
                if not read_as_it_stands(self.path):
                    raise
                self._db.close()
                self._db = self._connect(immutable_uri(self.path), uri=True)
                tables = self._check_foreign()
            else:
                with self.errors():
                    if self._db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                        # Takes effect on a new file only (before its first table).
                        self._db.execute(f"PRAGMA page_size={PAGE_SIZE}")
                        self._db.execute("PRAGMA journal_mode=WAL")
                    self._db.execute(f"PRAGMA synchronous={_sync_mode(synchronous)}")
                    pages = checkpoint_pages(self._db.execute("PRAGMA page_size").fetchone()[0])
                    self._db.execute(f"PRAGMA wal_autocheckpoint={pages}")
            self._upgrade(tables)
        except BaseException:
            self._db.close()
            raise

    def _connect(self, target: str, *, uri: bool = False) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(
                target,
                isolation_level=None,
                timeout=self.busy_timeout,
                check_same_thread=False,
                uri=uri,
            )
        except sqlite3.Error as exc:
            raise InputError(f"cannot open journal {self.path}: {exc}") from exc
        db.row_factory = sqlite3.Row
        return db

    def _check_foreign(self) -> set[str]:
        try:
            rows = self._db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            # A file that is not a database at all, when opened, is someone else's file.
            if _damaged(exc, not_a_database=False):
                raise self._damaged_error(exc) from exc
            if isinstance(exc, sqlite3.OperationalError):
                raise JournalError(f"cannot read journal {self.path}: {exc}") from exc
            raise InputError(f"not a dissensus journal: {self.path}: {exc}") from exc
        tables = {str(r["name"]) for r in rows}
        if not tables:
            return tables
        foreign = sorted(t for t in tables - _KNOWN if not t.startswith("sqlite_"))
        mismatched = [
            name
            for name, columns in (("runs", RUNS_COLUMNS), ("events", EVENTS_COLUMNS))
            if name in tables
            and tuple(str(r["name"]) for r in self._db.execute(f"PRAGMA table_info({name})"))
            != columns
        ]
        ours = "dissensus_meta" in tables or {"runs", "events"} <= tables
        if (foreign and not ours) or mismatched:
            what = ", ".join(foreign or mismatched)
            raise InputError(
                f"not a dissensus journal: {self.path} is an SQLite database of another application "
                f"(tables: {what}); give --journal a new file"
            )
        return tables

    # -- schema revisions ----------------------------------------------------------------

    def _revision(self, tables: set[str]) -> int:
        if "dissensus_meta" not in tables:
            return 0
        row = self._db.execute("SELECT value FROM dissensus_meta WHERE key = 'schema'").fetchone()
        return migrations.parse_revision(row[0] if row else None, self.path)

    def _tables(self) -> set[str]:
        rows = self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return {str(r["name"]) for r in rows}

    def _upgrade(self, tables: set[str]) -> None:
        """Apply the schema revisions this journal lacks (:mod:`~dissensus.store.migrations`);
        opening a journal that is up to date writes nothing and takes no lock."""
        with self.errors():
            found = self._revision(tables)
        migrations.check_known(found, self.path)
        if found >= migrations.CURRENT and tables >= _OURS:
            return
        try:
            with self.errors():
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    tables = self._tables()  # again, under the write lock
                    found = self._revision(tables)
                    migrations.check_known(found, self.path)
                    migrations.apply(
                        found if tables >= _OURS else 0,
                        "sqlite",
                        self._db.execute,
                        at=clock.now(),
                    )
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise
        except JournalReadOnly as exc:
            needed = [r for r in migrations.plan(found) if r.needed_to_read]
            if needed or not tables >= _OURS:
                raise JournalReadOnly(
                    f"journal {self.path} needs schema revision {migrations.CURRENT} and cannot "
                    f"be written to upgrade it (it is at revision {found}): {exc}"
                ) from exc

    def schema(self) -> SchemaInfo:
        """The journal's schema revision, this version's, and the revision history."""
        with self.lock, self.errors():
            tables = self._tables()
            found = self._revision(tables)
            rows = self.rows(migrations.history_query()) if "dissensus_revisions" in tables else []
        return migrations.describe(found, rows)

    # -- the Backend seam ----------------------------------------------------------------

    def _damaged_error(self, exc: sqlite3.Error) -> JournalDamaged:
        """The one-line error of a corrupt journal file."""
        return JournalDamaged(f"journal {self.path} is damaged (SQLite cannot read it): {exc}")

    @contextmanager
    def errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as exc:
            if _damaged(exc):
                raise self._damaged_error(exc) from exc
            if _UNDECODABLE in str(exc):  # never the cell's text: it is damaged data
                raise JournalDamaged(
                    f"journal {self.path} is damaged: a stored text is not UTF-8"
                ) from exc
            if not isinstance(exc, sqlite3.OperationalError):
                raise JournalError(f"journal {self.path}: {exc}") from exc
            text = str(exc)
            if "locked" in text or "busy" in text:
                raise JournalBusy(
                    f"journal {self.path} is locked by another writer (waited {self.busy_timeout:g} s; "
                    f"see {BUSY_TIMEOUT_ENV})"
                ) from exc
            if "readonly" in text or "read-only" in text:
                raise JournalReadOnly(f"journal {self.path} is read-only: {text}") from exc
            raise JournalError(f"journal {self.path}: {text}") from exc

    def _read(self, sql: str, args: Sequence[Any], row_factory: Any) -> list[Any]:
        """The query's rows, each made by ``row_factory`` (``None``: a tuple)."""
        with self.lock:
            cursor = self._db.cursor()
            cursor.row_factory = row_factory
            try:
                return cursor.execute(sql, tuple(args)).fetchall()
            except sqlite3.OperationalError as exc:
                if _UNDECODABLE not in str(exc):
                    raise
            # A text cell edited outside dissensus into bytes that are not UTF-8: read
            # again with replacement characters, so that its event (or run head) reads as
            # damaged (its hash no longer matches: runs verify names it) rather than the
            # query failing.
            self._db.text_factory = _replacing
            try:
                return cursor.execute(sql, tuple(args)).fetchall()
            finally:
                self._db.text_factory = str

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        return [dict(r) for r in self._read(sql, args, sqlite3.Row)]

    def exec(self, sql: str, args: Sequence[Any] = ()) -> int:
        with self.lock:
            return self._db.execute(sql, tuple(args)).rowcount

    def values(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._read(sql, args, None)

    def append_state(
        self, run_id: str, keys: Sequence[str]
    ) -> tuple[dict[str, EventRow], RunHead | None]:
        return stored_keys(self.rows, run_id, keys)

    def write_events(self, rows: Sequence[EventValues]) -> None:
        with self.lock:
            self._db.executemany(_INSERT_EVENT, rows)
            last = rows[-1]
            self._db.execute(
                "UPDATE runs SET head_hash = ?, n_events = ? WHERE run_id = ?",
                (last[8], last[1] + 1, last[0]),
            )

    def write_index(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self.lock:
            self._db.executemany(sql, rows)

    def lock_review_index(self) -> None:
        """Nothing to do: ``BEGIN IMMEDIATE`` already holds the database's write lock."""

    def lock_name(self, name: str) -> None:
        """Nothing to do: ``BEGIN IMMEDIATE`` already holds the database's write lock."""

    def json_text(self, column: str, key: str) -> str:
        # NULL for text that is not JSON (an edited row), which verification then names,
        # rather than SQLite's "malformed JSON" error for the whole query.
        return f"CASE WHEN json_valid({column}) THEN json_extract({column}, '$.{key}') END"

    def distinct(self, left: str, right: str) -> str:
        return f"{left} IS NOT {right}"

    def begin(self) -> None:
        self._writes += 1
        self._db.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self._db.execute("COMMIT")

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        with self.lock:
            if self._db.in_transaction:  # a write transaction of this object: one view
                yield
                return
            with self.errors():
                # Deferred: the WAL snapshot is taken by the first read and kept to the end.
                self._db.execute("BEGIN DEFERRED")
            self._reading = True
            try:
                yield
            finally:
                self._reading = False
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")  # read only: nothing to keep

    def version(self) -> Hashable | None:
        """What changed since (see the module docstring): inside a read snapshot only."""
        with self.lock:
            if not self._reading:
                return None
            with self.errors():
                data = self._db.execute("PRAGMA data_version").fetchone()[0]
            if self.path == ":memory:":
                identity: tuple[int, int] | None = None
            else:
                try:
                    found = os.stat(self.path)
                except OSError:
                    return None
                identity = (found.st_dev, found.st_ino)
            return (self._object, identity, data, self._db.total_changes, self._writes)

    def rollback(self) -> None:
        if self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def lock_run(self, run_id: str) -> bool:
        # BEGIN IMMEDIATE already holds the database's write lock.
        return bool(self.rows("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)))

    def claim_row(self, review_id: str) -> Row | None:
        rows = self.rows("SELECT * FROM claims WHERE review_id = ?", (review_id,))
        return rows[0] if rows else None

    def close(self) -> None:
        self._db.close()


def _busy(value: float | None) -> float:
    return busy_timeout(value)
