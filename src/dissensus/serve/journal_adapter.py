"""The one place the service touches the journal for review work: claims, resolutions, history.

Everything the service does to a review item goes through :class:`ReviewDesk`, so the
service does not depend on how the journal stores claims or resolutions.

* **Content hash.** :func:`content_sha256` is the sha256 of the canonical JSON of the
  review item (:mod:`dissensus.store.canonical`): the case content the reviewer saw. A
  resolve quoting any other hash is refused (:class:`StaleContent`, HTTP 409).
* **Claims** are journal events ``review.claimed`` under the keys
  ``review/<line>/claim/<n>`` (``n`` = claims so far), payload ``{review_id, reviewer,
  ttl_s, expires}``. A claim holds until ``expires``; a live claim of another reviewer
  blocks both claiming and resolving (:class:`Claimed`, 409); the holder may renew it.
  Two writers racing for the same claim number write the same key with different
  payloads: the journal keeps the first and refuses the second
  (:class:`~dissensus.store.JournalConflict`), which is reported as the case being
  claimed, so a claim is granted to exactly one writer.
* **Resolutions** go through :func:`dissensus.pipeline.review.resolve` (the CLI's path),
  with the token's name as the reviewer. A second resolve is refused with who resolved
  the case and when (:class:`AlreadyResolved`, 409), also when the first one came from
  another process between our check and our write (the journal refuses a second
  ``review/<line>/resolved`` with a different payload).
* Time comes from :meth:`ReviewDesk.now` (UTC), so tests can move the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel

from dissensus.errors import DissensusError, InputError
from dissensus.pipeline.records import CaseRecord, ReviewItem
from dissensus.pipeline.review import ReviewStatus, find_item, list_items, resolve
from dissensus.store.canonical import canonical, sha256_text
from dissensus.store.journal import Journal, JournalConflict

__all__ = [
    "AlreadyResolved",
    "Claim",
    "Claimed",
    "HistoryEntry",
    "ResolutionInfo",
    "ReviewDesk",
    "StaleContent",
    "UnknownItem",
    "content_sha256",
    "open_journal",
]


def open_journal(target: str) -> Journal:
    """Open the journal at ``target`` (an SQLite path; URLs need the PostgreSQL back end)."""
    if "://" in target:
        try:
            from dissensus import store

            opener: Callable[[str], Journal] = store.open_journal  # type: ignore[attr-defined]
        except AttributeError:
            raise InputError(
                f"this build has no journal back end for {target.split('://')[0]}:// URLs"
            ) from None
        return opener(target)
    return Journal(target)


def content_sha256(item: ReviewItem) -> str:
    """sha256 of the review item's canonical JSON: the content a resolve must quote."""
    return sha256_text(canonical(item.model_dump(mode="json")))


class UnknownItem(DissensusError):
    """No review item with that id (404)."""


class StaleContent(DissensusError):
    """The quoted content hash is not the item's (409)."""


class Claimed(DissensusError):
    """Another reviewer holds a live claim (409)."""

    def __init__(self, message: str, claim: Claim) -> None:
        super().__init__(message)
        self.claim = claim


class AlreadyResolved(DissensusError):
    """The item was resolved before (409), by ``reviewer`` at ``at``."""

    def __init__(self, message: str, info: ResolutionInfo) -> None:
        super().__init__(message)
        self.info = info


class Claim(BaseModel):
    """A reviewer's hold on a case."""

    review_id: str
    reviewer: str
    at: str
    expires: str


class ResolutionInfo(BaseModel):
    """Who resolved a case, when, how and why."""

    review_id: str
    reviewer: str | None
    at: str
    decision: str
    note: str
    outside_options: bool = False


class HistoryEntry(BaseModel):
    """One review event of a case (claims, resolutions), oldest first."""

    type: str
    at: str
    reviewer: str | None
    detail: dict[str, Any]


def _split(review_id: str) -> tuple[str, int]:
    run_id, sep, line = review_id.rpartition(".")
    if not sep or not run_id or not line.isdigit():
        raise UnknownItem(f"not a review id: {review_id!r} (expected <run>.<line>)")
    return run_id, int(line)


def _parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts)


class ReviewDesk:
    """Review operations over one journal."""

    def __init__(
        self, journal: Journal, *, claim_ttl_s: float, clock: Callable[[], datetime] | None = None
    ) -> None:
        self.journal = journal
        self.claim_ttl_s = claim_ttl_s
        self._clock = clock or (lambda: datetime.now(UTC))

    def now(self) -> datetime:
        return self._clock()

    # -- reading ----------------------------------------------------------------------

    def items(
        self, *, run_id: str | None = None, include_resolved: bool = False
    ) -> Iterator[ReviewStatus]:
        return list_items(self.journal, run_id=run_id, include_resolved=include_resolved)

    def status(self, review_id: str) -> ReviewStatus:
        _split(review_id)
        try:
            return find_item(self.journal, review_id)
        except InputError as exc:
            raise UnknownItem(str(exc)) from exc

    def resolution(self, review_id: str) -> ResolutionInfo | None:
        run_id, line = _split(review_id)
        event = self.journal.get(run_id, f"review/{line}/resolved")
        if event is None:
            return None
        p = event.payload
        return ResolutionInfo(
            review_id=review_id,
            reviewer=p.get("reviewer"),
            at=event.at,
            decision=str(p["decision"]),
            note=str(p.get("note", "")),
            outside_options=bool(p.get("outside_options", False)),
        )

    def _claims(self, review_id: str) -> list[Claim]:
        run_id, line = _split(review_id)
        out = []
        for event in self.journal.events(run_id, type="review.claimed", case=str(line)):
            out.append(
                Claim(
                    review_id=review_id,
                    reviewer=str(event.payload["reviewer"]),
                    at=event.at,
                    expires=str(event.payload["expires"]),
                )
            )
        return out

    def live_claim(self, review_id: str) -> Claim | None:
        """The claim holding the case now, if any."""
        claims = self._claims(review_id)
        if not claims or _parse(claims[-1].expires) <= self.now():
            return None
        return claims[-1]

    def history(self, review_id: str) -> list[HistoryEntry]:
        """Claims and resolutions of the case, oldest first."""
        run_id, line = _split(review_id)
        out = []
        for event in self.journal.events(run_id, case=str(line)):
            if not event.type.startswith("review.") or event.type == "review.opened":
                continue
            detail = {k: v for k, v in event.payload.items() if k not in ("review_id", "reviewer")}
            out.append(
                HistoryEntry(
                    type=event.type,
                    at=event.at,
                    reviewer=event.payload.get("reviewer"),
                    detail=detail,
                )
            )
        return out

    # -- writing ----------------------------------------------------------------------

    def _refuse_resolved(self, review_id: str) -> None:
        info = self.resolution(review_id)
        if info is not None:
            raise AlreadyResolved(
                f"review item {review_id} was already resolved by {info.reviewer or 'an unnamed reviewer'} at {info.at}",
                info,
            )

    def _refuse_claimed(self, review_id: str, reviewer: str) -> None:
        claim = self.live_claim(review_id)
        if claim is not None and claim.reviewer != reviewer:
            raise Claimed(
                f"review item {review_id} is claimed by {claim.reviewer} until {claim.expires}",
                claim,
            )

    def claim(self, review_id: str, reviewer: str, ttl_s: float | None = None) -> Claim:
        """Claim (or renew the claim on) an open case for ``ttl_s`` seconds."""
        self.status(review_id)
        self._refuse_resolved(review_id)
        self._refuse_claimed(review_id, reviewer)
        run_id, line = _split(review_id)
        n = len(self._claims(review_id))
        ttl = self.claim_ttl_s if ttl_s is None else ttl_s
        expires = (self.now() + timedelta(seconds=ttl)).isoformat(timespec="microseconds")
        payload = {"review_id": review_id, "reviewer": reviewer, "ttl_s": ttl, "expires": expires}
        try:
            event = self.journal.append(
                run_id, "review.claimed", payload, key=f"review/{line}/claim/{n}", case=str(line)
            )
        except JournalConflict:
            self._refuse_claimed(review_id, reviewer)
            raise
        return Claim(review_id=review_id, reviewer=reviewer, at=event.at, expires=expires)

    def resolve(
        self, review_id: str, *, decision: str, note: str, reviewer: str, sha256: str
    ) -> CaseRecord:
        """Resolve an open case as ``reviewer``, who saw the content whose hash is ``sha256``."""
        status = self.status(review_id)
        self._refuse_resolved(review_id)
        if sha256 != content_sha256(status.item):
            raise StaleContent(
                f"review item {review_id}: the content changed since it was shown (stale content_sha256)"
            )
        self._refuse_claimed(review_id, reviewer)
        try:
            return resolve(self.journal, review_id, decision=decision, note=note, reviewer=reviewer)
        except JournalConflict:
            self._refuse_resolved(review_id)
            raise
