"""The run journal's public names, whichever back end holds it.

``Journal(target)`` opens an SQLite file (the default, :mod:`dissensus.store.sqlite`)
or, for a ``postgresql://`` URL, a PostgreSQL database (:mod:`dissensus.store.postgres`);
both share the interface and the hash chain defined in :mod:`dissensus.store.base`.
This module re-exports them so callers import from one place.
"""

from __future__ import annotations

from dissensus.store.base import (
    BUSY_TIMEOUT_ENV,
    DEFAULT_JOURNAL,
    SEAL_TYPE,
    CaseClosed,
    Claim,
    ClaimConflict,
    Event,
    EventLog,
    Journal,
    JournalBusy,
    JournalConflict,
    JournalError,
    JournalReadOnly,
    NewEvent,
    ReviewEntry,
    RunExists,
    RunHead,
    RunInfo,
    RunLock,
    UnknownRun,
    VerifyReport,
    is_postgres_url,
    journal_path,
    mask_url,
    open_journal,
)
from dissensus.store.sqlite import SYNC_ENV

__all__ = [
    "BUSY_TIMEOUT_ENV",
    "DEFAULT_JOURNAL",
    "SEAL_TYPE",
    "SYNC_ENV",
    "CaseClosed",
    "Claim",
    "ClaimConflict",
    "Event",
    "EventLog",
    "Journal",
    "JournalBusy",
    "JournalConflict",
    "JournalError",
    "JournalReadOnly",
    "NewEvent",
    "ReviewEntry",
    "RunExists",
    "RunHead",
    "RunInfo",
    "RunLock",
    "UnknownRun",
    "VerifyReport",
    "is_postgres_url",
    "journal_path",
    "mask_url",
    "open_journal",
]
