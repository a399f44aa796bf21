"""The run journal: append-only, hash-chained, SQLite by default or PostgreSQL (see :mod:`.journal`)."""

from dissensus.deprecation import deprecated_names, renamed
from dissensus.store.canonical import GENESIS, canonical, chain_hash, sha256_text
from dissensus.store.journal import (
    DEFAULT_JOURNAL,
    SEAL_TYPE,
    CaseClosed,
    Claim,
    ClaimConflict,
    Event,
    IndexEntry,
    Journal,
    JournalBusy,
    JournalConflict,
    JournalError,
    JournalReadOnly,
    RunExists,
    RunInfo,
    RunLock,
    UnknownRun,
    VerifyReport,
    is_postgres_url,
    journal_path,
    mask_url,
    open_journal,
)
from dissensus.store.targets import journal_option

__all__ = [
    "DEFAULT_JOURNAL",
    "GENESIS",
    "SEAL_TYPE",
    "CaseClosed",
    "Claim",
    "ClaimConflict",
    "Event",
    "IndexEntry",
    "Journal",
    "JournalBusy",
    "JournalConflict",
    "JournalError",
    "JournalReadOnly",
    "RunExists",
    "RunInfo",
    "RunLock",
    "UnknownRun",
    "VerifyReport",
    "canonical",
    "chain_hash",
    "is_postgres_url",
    "journal_option",
    "journal_path",
    "mask_url",
    "open_journal",
    "sha256_text",
]


__getattr__ = deprecated_names(
    __name__,
    renamed(
        __name__,
        globals(),
        {"ReviewEntry": "IndexEntry"},
        "dissensus.outputs.ReviewEntry is the review queue's entry",
    ),
)
