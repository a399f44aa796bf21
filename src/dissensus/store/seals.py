"""Seals: a signature over a run's chain, appended as the run's next event.

When the journal has a signer (``DISSENSUS_SIGNING_KEY``, read by the command line),
every ``run.finished``, ``run.stopped`` (a deadline's stop: the run is partial, and a
resume seals it again at its end), ``case.resolved``, ``review.reopened`` and
``review.confirmed`` append is followed by a ``run.sealed`` event whose payload signs ``{run, n_events, head}`` of the chain before it
(:mod:`dissensus.signing`). An unkeyed chain cannot stop an editor who re-chains every
hash; a seal can, for anyone holding the public key.

Choices this module makes:

* **After the commit.** The seal is appended in its own transaction once the sealed
  events have committed, so a crash between the two leaves an unsealed (not a broken)
  chain, which verification reports as ``unsigned``, until the run is next run with a
  signer (``runs resume``, or a decide replaying it): a finished run whose last event is
  one a seal follows (:data:`SEAL_AFTER`), with no seal after it, is sealed then (:meth:`Seals.seal` with
  ``missing_only``). Only that: events of another type after the last seal (appended by
  hand, or by a writer without the key) are never signed after the fact.
* **Never twice.** A run whose last event already is a seal is not sealed again.
* **The key is the position**: a seal's key is ``seal/<n_events>``, so replaying a run
  never seals one head twice.
* **Each seal by its own key.** Checked with several public keys (a
  :class:`~dissensus.signing.KeyRing`: the signing key was rotated while the run lived),
  each seal verifies with the key its ``key_id`` names among them. A seal that does not
  verify is named with why: the key that signed it (by id) and the key(s) given (by id
  and file), or the content that changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from dissensus.store import event_types as ev
from dissensus.store.canonical import canonical
from dissensus.store.events import Event, NewEvent
from dissensus.store.log import SQLEventLog
from dissensus.store.transactions import Transactions

if TYPE_CHECKING:
    from dissensus.signing import PublicKey, Signer

__all__ = ["SEAL_AFTER", "SEAL_FIELDS", "SEAL_TYPE", "Seals", "SignatureStatus", "seal_status"]

SEAL_TYPE = ev.RUN_SEALED
"""Type of the event that signs the chain before it."""

SEAL_AFTER = frozenset(
    {
        ev.RUN_FINISHED,
        ev.RUN_STOPPED,
        ev.CASE_RESOLVED,
        ev.REVIEW_REOPENED,
        ev.REVIEW_CONFIRMED,
    }
)
"""Event types after which a journal with a signer seals the run's head: the end of a
run's execution (finished, or stopped by its deadline) and each human answer."""

SEAL_FIELDS = frozenset({"run", "n_events", "head", "signature"})
"""The fields of a seal's payload: its claim and the signature over it."""

SignatureStatus = Literal["signed", "unsigned", "invalid"]

Seal = tuple[int, dict[str, Any]]
"""A seal event's sequence number and payload (JSON as stored, checked field by field)."""


class Seals:
    """Seals the runs of one journal with its signer."""

    def __init__(
        self, log: SQLEventLog, transactions: Transactions, signer: Signer | None = None
    ) -> None:
        self._log = log
        self._tx = transactions
        self.signer = signer

    def seal(self, run_id: str, *, missing_only: bool = False) -> Event | None:
        """Sign the run's current head (``None`` without a signer, or when the last event
        already is a seal). ``missing_only``: only when the last event is one a seal
        follows (:data:`SEAL_AFTER`), i.e. the seal its append should have made is
        missing."""
        signer = self.signer
        if signer is None:
            return None
        with self._tx.transaction(run_id):
            head = self._log.head(run_id)
            last = self._log.type_at(run_id, head.n_events - 1) if head.n_events else None
            if last == SEAL_TYPE or (missing_only and last not in SEAL_AFTER):
                return None
            claim = {"run": run_id, "n_events": head.n_events, "head": head.head_hash}
            payload = {**claim, "signature": signer.sign_text(canonical(claim))}
            key = f"seal/{head.n_events}"
            return self._log.append_batch(run_id, [NewEvent(SEAL_TYPE, payload, key)])[0]

    def after_commit(self, events: Sequence[Event]) -> None:
        """Seal every run that just committed an event of :data:`SEAL_AFTER`."""
        if self.signer is None:
            return
        for run_id in dict.fromkeys(e.run_id for e in events if e.type in SEAL_AFTER):
            self.seal(run_id)


def seal_status(
    seals: Sequence[Seal],
    count: int,
    public_key: PublicKey,
    *,
    mismatched: Sequence[int] = (),
    broken: int | None = None,
) -> tuple[SignatureStatus, str]:
    """Whether a run of ``count`` events whose seals are ``seals`` is signed with
    ``public_key``: every seal verifies, describes the chain before it (``mismatched``:
    the sequence numbers of seals that do not, or that hold more than a seal, from
    :func:`~dissensus.store.chain.check_chain`) and the last one is the run's last event.
    A seal whose signature verifies over a claim the chain no longer matches is
    ``invalid``: the signed content changed; so is a run whose event ``broken`` (the
    first whose own check failed: edited, moved, removed) comes before a seal."""
    from dissensus.signing import verify_text, why_invalid

    if not seals:
        return "unsigned", "the run has no seal"
    if mismatched:
        return (
            "invalid",
            f"seal at event {mismatched[0]} does not describe the chain before it: "
            "the signed content changed",
        )
    if broken is not None and broken <= seals[-1][0]:
        covering = next(seq for seq, _ in seals if seq >= broken)
        return (
            "invalid",
            f"event {broken} (sealed at event {covering}) fails its check: "
            "the signed content changed",
        )
    for seq, payload in seals:
        claim = {k: payload.get(k) for k in ("run", "n_events", "head")}
        signature = payload.get("signature")
        if (
            not isinstance(signature, dict)
            or verify_text(canonical(claim), signature, public_key) != "valid"
        ):
            return "invalid", f"seal at event {seq}: {why_invalid(signature, public_key)}"
    last_seq = seals[-1][0]
    if last_seq != count - 1:
        return (
            "unsigned",
            f"{count - 1 - last_seq} event(s) after the last seal (event {last_seq}) are unsigned",
        )
    return (
        "signed",
        f"head signed at event {last_seq} covering {seals[-1][1].get('n_events')} event(s)",
    )
