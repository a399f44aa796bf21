"""The journal's clock: the UTC timestamps of events, runs, claims and run locks.

Choices this module makes: ISO-8601 text with microseconds (text sorts in time
order, and both back ends compare it as text, so a claim's expiry is a string
comparison); one module, read as ``clock.now()`` by every part of the journal, so a
test moves the journal's time by replacing :func:`now` here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["later", "now"]


def now() -> str:
    """This instant, UTC ISO-8601 with microseconds."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def later(seconds: float) -> str:
    """``seconds`` from this instant, in :func:`now`'s form."""
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat(timespec="microseconds")
