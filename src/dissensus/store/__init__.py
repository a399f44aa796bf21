"""The run journal: append-only, hash-chained, SQLite by default (see :mod:`.journal`)."""

from dissensus.store.canonical import GENESIS, canonical, chain_hash, sha256_text
from dissensus.store.journal import (
    DEFAULT_JOURNAL,
    Event,
    Journal,
    JournalConflict,
    RunInfo,
    UnknownRun,
    VerifyReport,
    journal_path,
)

__all__ = [
    "DEFAULT_JOURNAL",
    "GENESIS",
    "Event",
    "Journal",
    "JournalConflict",
    "RunInfo",
    "UnknownRun",
    "VerifyReport",
    "canonical",
    "chain_hash",
    "journal_path",
    "sha256_text",
]
