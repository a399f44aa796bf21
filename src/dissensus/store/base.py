"""Where the journal's names were defined before it was split by job; they still import.

``from dissensus.store.base import X`` keeps working for every name this module
exported, each now defined by the module doing its job: the models in
:mod:`~dissensus.store.events`, the errors in :mod:`~dissensus.store.errors`, targets and
settings in :mod:`~dissensus.store.targets`, the :class:`Journal` facade in
:mod:`~dissensus.store.journal` (see its docstring for the layout). New code imports from
:mod:`dissensus.store` or from the module that defines the name.
"""

from __future__ import annotations

from dissensus.store.chain import VerifyReport
from dissensus.store.claims import Claim
from dissensus.store.errors import (
    CaseClosed,
    ClaimConflict,
    JournalBusy,
    JournalConflict,
    JournalError,
    JournalReadOnly,
    RunExists,
    UnknownRun,
)
from dissensus.store.events import (
    EVENTS_COLUMNS,
    RUNS_COLUMNS,
    Event,
    NewEvent,
    RunHead,
    RunInfo,
)
from dissensus.store.journal import Journal, open_journal
from dissensus.store.locks import RunLock
from dissensus.store.log import EventLog
from dissensus.store.review_index import (
    REVIEW_OPENED,
    REVIEW_REOPENED,
    REVIEW_RESOLVED,
    ReviewFilter,
)
from dissensus.store.review_index import IndexEntry as ReviewEntry  # its name here
from dissensus.store.seals import SEAL_AFTER, SEAL_TYPE, SignatureStatus
from dissensus.store.targets import (
    BUSY_TIMEOUT_ENV,
    DEFAULT_JOURNAL,
    RUN_ID_PATTERN,
    busy_timeout,
    check_run_id,
    is_postgres_url,
    journal_path,
    mask_url,
)

__all__ = [
    "BUSY_TIMEOUT_ENV",
    "DEFAULT_JOURNAL",
    "EVENTS_COLUMNS",
    "REVIEW_OPENED",
    "REVIEW_REOPENED",
    "REVIEW_RESOLVED",
    "RUNS_COLUMNS",
    "RUN_ID_PATTERN",
    "SEAL_AFTER",
    "SEAL_TYPE",
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
    "ReviewFilter",
    "RunExists",
    "RunHead",
    "RunInfo",
    "RunLock",
    "SignatureStatus",
    "UnknownRun",
    "VerifyReport",
    "busy_timeout",
    "check_run_id",
    "is_postgres_url",
    "journal_path",
    "mask_url",
    "open_journal",
]
