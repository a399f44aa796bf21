"""Claims on review items: who is working on an item, until when.

A claim is coordination state, kept outside the hash chain (a resolution names its
reviewer in the chain; a claim is not evidence). Choices this module makes:

* **Expiry, not release.** A claim lasts ``ttl`` seconds; an expired one is anybody's.
  Claiming again renews one's own claim.
* **A claim and a resolution never interleave.** Given the key of the case's closing
  event (``closed_by``), a claim holds the run's write lock, as a resolution does, and
  is refused (:class:`~dissensus.store.errors.CaseClosed`) when that event is already
  journalled. The key names the resolution that would stand now (after an undo, the next
  one's key); a caller reads it under the same lock, in a transaction the claim joins.
* **A claim lasts at most ten years** (:data:`MAX_CLAIM_TTL`, the CLI's bound on
  ``--ttl``): a longer one is refused as any other bad claim time, never a clock
  overflow when its expiry is written.
* **Racing claimants** are told who won: the insert only replaces one's own or an
  expired claim, and a loser reads the winner's row (PostgreSQL also locks an existing
  claim row, so a loser waits for the winner's short transaction).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from dissensus.errors import DissensusError
from dissensus.store import clock
from dissensus.store.backend import Backend
from dissensus.store.errors import CaseClosed, ClaimConflict
from dissensus.store.log import SQLEventLog
from dissensus.store.transactions import Transactions

MAX_CLAIM_TTL = 315_576_000.0
"""The longest claim, in seconds (ten years): its expiry stays a date the clock writes."""

__all__ = ["MAX_CLAIM_TTL", "Claim", "Claims"]


class Claim(BaseModel):
    """Who is working on a review item, until when (UTC ISO-8601)."""

    review_id: str
    run_id: str
    who: str
    claimed_at: str
    expires: str


class Claims:
    """The claims of one journal, in its ``claims`` table."""

    def __init__(self, backend: Backend, transactions: Transactions, log: SQLEventLog) -> None:
        self._backend = backend
        self._tx = transactions
        self._log = log

    def claim(
        self, review_id: str, who: str, ttl: float, *, run_id: str, closed_by: str | None = None
    ) -> Claim:
        """Claim ``review_id`` for ``who`` for ``ttl`` seconds (renewing one's own claim).

        :class:`~dissensus.store.errors.ClaimConflict` when someone else holds an
        unexpired claim (naming who); :class:`~dissensus.store.errors.CaseClosed` when
        the run holds the event keyed ``closed_by``.
        """
        if not who.strip():
            raise DissensusError("a claim needs a reviewer name")
        if not (0 < ttl <= MAX_CLAIM_TTL):
            raise DissensusError(
                "claim time must be a positive number of seconds, at most "
                f"{MAX_CLAIM_TTL:,.0f} (ten years), got {ttl!r}"
            )
        backend = self._backend
        with self._tx.transaction(run_id if closed_by is not None else None):
            if closed_by is not None and (closing := self._log.get(run_id, closed_by)) is not None:
                raise CaseClosed(f"review item {review_id} is closed", event=closing)
            with backend.errors():
                row = backend.claim_row(review_id)
            now = clock.now()
            if row is not None and row["who"] != who and str(row["expires"]) > now:
                raise ClaimConflict(
                    f"review item {review_id} is claimed by {row['who']} until {row['expires']}",
                    holder=str(row["who"]),
                    expires=str(row["expires"]),
                )
            claim = Claim(
                review_id=review_id,
                run_id=run_id,
                who=who,
                claimed_at=now,
                expires=clock.later(ttl),
            )
            with backend.errors():
                changed = backend.exec(
                    "INSERT INTO claims (review_id, run_id, who, claimed_at, expires) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (review_id) DO UPDATE SET run_id = excluded.run_id, who = excluded.who, "
                    "claimed_at = excluded.claimed_at, expires = excluded.expires "
                    "WHERE claims.who = excluded.who OR claims.expires <= ?",
                    (
                        claim.review_id,
                        claim.run_id,
                        claim.who,
                        claim.claimed_at,
                        claim.expires,
                        now,
                    ),
                )
            if not changed:
                # Someone else's claim was committed while this one waited for it: name them.
                with backend.errors():
                    rows = backend.rows(
                        "SELECT who, expires FROM claims WHERE review_id = ?", (review_id,)
                    )
                holder = str(rows[0]["who"]) if rows else "?"
                until = str(rows[0]["expires"]) if rows else now
                raise ClaimConflict(
                    f"review item {review_id} was just claimed by {holder} until {until}",
                    holder=holder,
                    expires=until,
                )
        return claim

    def current(self, review_id: str) -> Claim | None:
        """The unexpired claim on ``review_id``, if any."""
        with self._backend.errors():
            rows = self._backend.rows(
                "SELECT * FROM claims WHERE review_id = ? AND expires > ?",
                (review_id, clock.now()),
            )
        return Claim.model_validate(rows[0]) if rows else None

    def current_many(self, review_ids: Sequence[str]) -> dict[str, Claim]:
        """The unexpired claims on ``review_ids`` (one query per 100 ids)."""
        out: dict[str, Claim] = {}
        ids = list(dict.fromkeys(review_ids))
        now = clock.now()
        for start in range(0, len(ids), 100):
            chunk = ids[start : start + 100]
            marks = ", ".join("?" * len(chunk))
            with self._backend.errors():
                rows = self._backend.rows(
                    f"SELECT * FROM claims WHERE review_id IN ({marks}) AND expires > ?",
                    [*chunk, now],
                )
            for row in rows:
                claim = Claim.model_validate(row)
                out[claim.review_id] = claim
        return out

    def release(self, review_id: str, who: str | None = None) -> bool:
        """Drop the claim on ``review_id`` (only ``who``'s, when given); whether there was
        one to drop (live or expired)."""
        backend = self._backend
        with self._tx.transaction(), backend.errors():
            if who is None:
                changed = backend.exec("DELETE FROM claims WHERE review_id = ?", (review_id,))
            else:
                changed = backend.exec(
                    "DELETE FROM claims WHERE review_id = ? AND who = ?", (review_id, who)
                )
        return bool(changed)
