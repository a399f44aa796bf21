"""What a remote caller is told when the journal fails, and what only the server's log keeps.

Choices this module makes:

* **Unavailable is 503.** A journal that cannot be used right now, busy (another writer
  held its lock past the busy timeout, :class:`~dissensus.store.errors.JournalBusy`) or
  unreachable (any other :class:`~dissensus.store.errors.JournalError` but a read-only or
  damaged journal: the database is down or restarting, the connection was lost, the
  file cannot be opened), is answered ``503`` with ``Retry-After`` (:data:`RETRY_AFTER_S`):
  the request may be sent again. A read-only or damaged journal is not transient and
  keeps its own answer (409).
* **A full disk is not an outage a moment mends.** A journal error that says its disk
  (or database) is full (SQLite's ``SQLITE_FULL``, PostgreSQL's SQLSTATE ``53100``,
  read by :func:`dissensus.panels.errors.disk_full`, as the chat door reads it) is
  ``503`` "the journal's disk is full" (:data:`DISK_FULL`) **without** ``Retry-After``:
  only an operator mends it, and calling it unreachable and inviting a retry in two
  seconds sent clients to ask again, each retry failing the same way.
* **No location.** The answer of an unavailable journal is a fixed sentence
  (:data:`UNREACHABLE`, :data:`BUSY`): the driver's text (host, port, user, database,
  file) never reaches the caller. Every other message built from a journal error is
  :func:`scrub`-bed of the journal's path or URL. The full text (the URL's password
  masked, as the store words it) goes to the server's log, one line, no traceback.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
from collections.abc import Iterable

from dissensus.panels.errors import disk_full
from dissensus.store.errors import JournalBusy, JournalDamaged, JournalError, JournalReadOnly

__all__ = [
    "BUSY",
    "DISK_FULL",
    "RETRY_AFTER_S",
    "UNREACHABLE",
    "log_unavailable",
    "retry_headers",
    "scrub",
    "unavailable",
]

log = logging.getLogger("dissensus.serve")

RETRY_AFTER_S = 2
"""``Retry-After`` (seconds) of a ``503`` for a journal that is unreachable or busy."""

UNREACHABLE = "the journal is unreachable"
BUSY = "the journal is busy (another writer holds its lock)"
DISK_FULL = "the journal's disk is full"

_URL = re.compile(r"postgres(?:ql)?://\S*[^\s:;,.)\]'\"]", re.IGNORECASE)
"""A PostgreSQL URL in a message (its trailing punctuation left out)."""


def unavailable(exc: BaseException) -> str | None:
    """The public sentence for ``exc`` when it says the journal cannot be used right now
    (answered 503: retry later, or :data:`DISK_FULL`, not before an operator frees
    space); ``None`` for any other error."""
    if isinstance(exc, JournalBusy):
        return BUSY
    if isinstance(exc, JournalReadOnly | JournalDamaged):
        return None
    if isinstance(exc, JournalError):
        return DISK_FULL if disk_full(exc) else UNREACHABLE
    return None


def retry_headers(said: str | None = None) -> dict[str, str]:
    """``Retry-After`` for a 503 whose message is ``said``: none when it says the
    journal's disk is full (:data:`DISK_FULL`), which no retry mends."""
    if said is not None and DISK_FULL in said:
        return {}
    return {"Retry-After": str(RETRY_AFTER_S)}


def log_unavailable(exc: BaseException, during: str) -> None:
    """One log line (no traceback) with the error's full text; the store names the
    journal with its URL's password masked."""
    log.warning("%s: %s: %s", during, type(exc).__name__, exc)


def _places(where: Iterable[str], message: str) -> list[str]:
    found: list[str] = []
    for place in where:
        if place and place != ":memory:":
            found.append(place)
            absolute = os.path.abspath(place) if "://" not in place else place
            if absolute != place:
                found.append(absolute)
    found.extend(m.group(0) for m in _URL.finditer(message))
    # The longest first: a place that holds another is replaced whole.
    return sorted(set(found), key=len, reverse=True)


def scrub(message: str, where: Iterable[str] = ()) -> str:
    """``message`` without the journal's location: each of ``where`` (its path or masked
    URL) and any ``postgresql://`` URL. "run r not found in journal X" loses " in journal
    X"; "journal X: ..." and "cannot open journal X" say "the journal"; "not a dissensus
    journal: X: ..." loses ": X"; a command's ``--journal X`` (X shell-quoted or not)
    says ``--journal JOURNAL``, for the operator to fill in."""
    for place in _places(where, message):
        if place not in message:
            continue
        for form in dict.fromkeys((shlex.quote(place), place)):
            message = re.sub(rf"--journal[\s=]+{re.escape(form)}", "--journal JOURNAL", message)
        p = re.escape(place)
        message = re.sub(rf"\s+in\s+(?:the\s+)?journal\s+{p}", "", message)
        message = re.sub(rf"\s+in\s+{p}", "", message)
        message = re.sub(rf"journal:\s+{p}", "journal", message)
        message = re.sub(rf"(?:\bthe\s+)?\bjournal\s+{p}", "the journal", message)
        message = re.sub(rf"(?:\bthe\s+)?{p}", "the journal", message)
    return message
