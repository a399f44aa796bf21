"""The journal's errors: what can go wrong when a run journal is opened, written or read.

Each is a :class:`~dissensus.errors.DissensusError`, so the command line prints it as one
line with its exit code (1 unless set here). Choices this module makes:

* **Exit codes.** A read-only journal, a damaged journal, an unknown run and a run id
  already taken are the caller's to fix (exit 2, usage); a busy or unreachable journal
  is exit 1.
* **Damaged** means SQLite found the file corrupt ("database disk image is malformed",
  "file is not a database"), wherever it notices: when the journal is opened or in any
  later read or write. It is the same problem as a truncated file, which the CLI's check
  before opening already refuses with exit 2: the file needs restoring, not a retry.
  A row that no longer reads (an event payload edited to text that is not JSON) is
  damaged too, named by run, sequence number and key.
* :class:`JournalBusy`, :class:`JournalReadOnly` and :class:`JournalDamaged` are kinds of
  :class:`JournalError`, so a caller that only cares whether the journal can be used
  catches one type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dissensus.errors import DissensusError

if TYPE_CHECKING:
    from dissensus.store.events import Event

__all__ = [
    "CaseClosed",
    "ClaimConflict",
    "JournalBusy",
    "JournalConflict",
    "JournalDamaged",
    "JournalError",
    "JournalReadOnly",
    "RunExists",
    "RunLockLost",
    "UnknownRun",
]


class JournalError(DissensusError):
    """The journal cannot be used (unreachable, not a dissensus journal, a database error)."""


class JournalConflict(DissensusError):
    """A key was appended again with a different payload (the run is not deterministic)."""


class RunLockLost(JournalConflict):
    """This process no longer holds the execution lock of a run it was executing: its
    connection to the database dropped (a PostgreSQL restart) and another process took
    the run meanwhile, so this one stops executing it (no further appends); the other
    process continues it. Not a journal outage: resuming it here would run it twice."""


class JournalBusy(JournalError):
    """Another writer held the journal's lock longer than the busy timeout."""


class JournalReadOnly(JournalError):
    """The journal cannot be written (a read-only file or database user)."""

    exit_code = 2


class JournalDamaged(JournalError):
    """The journal is corrupt: SQLite cannot read its file as a database, or a stored
    row no longer reads (an event payload or run meta that is not JSON, edited outside
    dissensus)."""

    exit_code = 2


class UnknownRun(DissensusError):
    """No run with that id in this journal."""

    exit_code = 2


class CaseClosed(DissensusError):
    """A claim on a case whose closing event (its resolution) is already journalled."""

    def __init__(self, message: str, *, event: Event) -> None:
        super().__init__(message)
        self.event = event


class RunExists(DissensusError):
    """A new run was given the id of a run the journal already holds."""

    exit_code = 2


class ClaimConflict(DissensusError):
    """Someone else holds an unexpired claim on the review item."""

    def __init__(self, message: str, *, holder: str, expires: str) -> None:
        super().__init__(message)
        self.holder = holder
        self.expires = expires
