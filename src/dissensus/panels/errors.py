"""The errors the panel door answers with when it is closing or its journal is down.

The ``code`` of each (:data:`SHUTTING_DOWN`, :data:`UNFINISHED`, :data:`JOURNAL_BUSY`,
:data:`JOURNAL_UNAVAILABLE`, :data:`JOURNAL_FULL`, :data:`JOURNAL_CASE_UNKNOWN`,
:data:`CLOSED`) and the
:class:`~dissensus.panels.shapes.ChatError` that carries it. Which of them the door
answers with, and when, is :mod:`dissensus.panels.door`'s to say.

Choices this module makes: a journal whose disk (or database) is full is told apart
from an unreachable one (:data:`JOURNAL_FULL`, "the journal's disk is full", by the
SQLite error ``SQLITE_FULL``, PostgreSQL's SQLSTATE ``53100`` or their wording):
answered as unreachable, clients and SDKs retried at once what only an operator can
mend, and each retry asked every member again.
"""

from __future__ import annotations

from dissensus.panels.completion import case_links
from dissensus.panels.shapes import ChatError
from dissensus.store.errors import JournalBusy, JournalDamaged, JournalError, JournalReadOnly

__all__ = [
    "CLOSED",
    "JOURNAL_BUSY",
    "JOURNAL_CASE_UNKNOWN",
    "JOURNAL_FULL",
    "JOURNAL_UNAVAILABLE",
    "SHUTTING_DOWN",
    "UNFINISHED",
    "case_unknown",
    "disk_full",
    "journal_down",
    "journal_outage",
    "shutting_down",
    "unfinished_case",
]

CLOSED = "closed"
"""``code`` of a request made of a :class:`~dissensus.panels.door.PanelChat` after its
``close()``."""

SHUTTING_DOWN = "shutting_down"
"""``code`` of the ``503`` of a request ended (or refused) because the door is draining."""

UNFINISHED = "shutting_down_case_unfinished"
"""``code`` of the ``503`` of a request whose decision did not end within the shutdown's
bound (:meth:`~dissensus.panels.door.PanelChat.adrain`): its case is named, and it must
not be sent again."""

JOURNAL_BUSY = "journal_busy"
"""``code`` of the ``503`` of a request whose case the journal could not take because
another writer held its lock past the busy timeout."""

JOURNAL_UNAVAILABLE = "journal_unavailable"
"""``code`` of the ``503`` of a request whose case the journal could not take because it
was unreachable (the database down or restarting, the connection lost)."""

JOURNAL_CASE_UNKNOWN = "journal_unavailable_case_unknown"
"""``code`` of the ``503`` of a request whose journal failed while its case was journalled
and could not be read back: the case may be journalled (its commit went through, only the
acknowledgement was lost); the body names it."""


def shutting_down(ended: bool) -> ChatError:
    """The ``503`` of a request refused (``ended``: ended) because the door is draining."""
    what = (
        "the request was ended before its members all answered"
        if ended
        else "it takes no new requests"
    )
    return ChatError(
        503,
        f"the server is shutting down: {what}; nothing was journalled, the request can be "
        "sent again",
        type="server_error",
        code=SHUTTING_DOWN,
    )


def unfinished_case(case_id: str, run_id: str) -> ChatError:
    """The ``503`` of a request whose decision did not end within the shutdown's bound."""
    return ChatError(
        503,
        f"the server is shutting down and the decision of case {case_id} did not end in "
        f"time: run {run_id} stays in the journal as far as it got, resumable with "
        f"`dissensus runs resume {run_id}`; do not send the request again",
        type="server_error",
        code=UNFINISHED,
        fields={
            "dissensus": {
                "case_id": case_id,
                "run_id": run_id,
                "links": case_links(run_id, case_id, None),
            }
        },
    )


JOURNAL_FULL = "journal_full"
"""``code`` of the ``503`` of a request whose case the journal could not take because its
disk (or database) is full: not an outage a moment mends, and a retry would ask every
member again, so the door says not to retry (:mod:`dissensus.serve.chat`)."""

_DISK_FULL = ("database or disk is full", "no space left on device", "could not extend file")
"""How SQLite and PostgreSQL word a full disk (``SQLITE_FULL``, SQLSTATE ``53100``)."""


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) says the disk is full."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if getattr(error, "sqlite_errorname", None) == "SQLITE_FULL":
            return True
        if getattr(error, "sqlstate", None) == "53100":
            return True
        if any(words in str(error).lower() for words in _DISK_FULL):
            return True
        error = error.__cause__ or error.__context__
    return False


def journal_outage(exc: BaseException) -> tuple[str, str] | None:
    """``(sentence, code)`` of a journal that cannot be used right now (busy or
    unreachable: the request may be sent again later), the sentence without the
    journal's path or URL; ``None`` for any other error (a read-only or damaged journal
    is no outage)."""
    if isinstance(exc, JournalBusy):
        return "the journal is busy (another writer holds its lock)", JOURNAL_BUSY
    if isinstance(exc, JournalError) and not isinstance(exc, JournalReadOnly | JournalDamaged):
        if disk_full(exc):
            return "the journal's disk is full", JOURNAL_FULL
        return "the journal is unreachable", JOURNAL_UNAVAILABLE
    return None


def journal_down(outage: tuple[str, str], then: str) -> ChatError:
    """The ``503`` of a :func:`journal_outage`, its message ending with ``then`` (raised from
    the store's error, which names the journal)."""
    said, code = outage
    return ChatError(503, f"{said}: {then}", type="server_error", code=code)


def case_unknown(case_id: str, run_id: str, *, keyed: bool) -> ChatError:
    """The ``503`` of a decision whose journal failed and could not be read back: its
    case may be journalled (a commit that went through, its acknowledgement lost)."""
    again = " (or send it again with the same Idempotency-Key)" if keyed else ""
    return ChatError(
        503,
        f"the journal became unreachable while case {case_id} was journalled, and whether it "
        f"was cannot be told now: poll GET /v1/cases/{case_id} (a 404 says it was not) before "
        f"sending the request again{again}",
        type="server_error",
        code=JOURNAL_CASE_UNKNOWN,
        fields={
            "dissensus": {
                "case_id": case_id,
                "run_id": run_id,
                "links": case_links(run_id, case_id, None),
            }
        },
    )
