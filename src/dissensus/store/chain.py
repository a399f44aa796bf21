"""The hash chain's verification: recompute a run's chain and compare it with what is stored.

Each event's ``hash`` is ``sha256(prev_hash + canonical(body))`` where ``prev_hash`` is
the hash of the run's previous event (:data:`~dissensus.store.canonical.GENESIS` for the
first) and ``body`` its run, sequence number, key, type, case, time and payload
(:mod:`dissensus.store.canonical`). :func:`check_chain` recomputes it from the stored
rows; any edited, removed, inserted or reordered event breaks it.

Choices where the design is silent:

* **Canonical text.** A payload is stored as its canonical JSON text, and verification
  requires the stored text to *be* canonical: a payload edited to carry a duplicate key
  (which different JSON readers resolve differently) fails.
* **The head anchor** (``runs.head_hash``, ``runs.n_events``) is compared with the chain,
  so a removed tail is found even when every remaining hash is right.
* **Too deep to read.** A payload nested deeper than the parser's recursion allows (an
  edit outside dissensus: dissensus never writes one) is a problem naming its event,
  like any payload that is not JSON; every other reader of the journal refuses it as
  :class:`~dissensus.store.errors.JournalDamaged` naming the event.
* **Keep going.** Every problem is listed (not only the first), each naming the event's
  sequence number and key.
* **Seals** are checked for what they describe (the run, the count and head before
  them) always, and for their signature only with a public key
  (:func:`~dissensus.store.seals.seal_status`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from dissensus.store import event_types as ev
from dissensus.store.canonical import GENESIS, canonical, chain_hash
from dissensus.store.events import EventRow, RunHead
from dissensus.store.seals import SEAL_FIELDS, SEAL_TYPE, Seal, SignatureStatus, seal_status

if TYPE_CHECKING:
    from collections.abc import Callable

    from dissensus.signing import PublicKey
    from dissensus.store.log import SQLEventLog

__all__ = ["ChainCheck", "VerifyReport", "check_chain", "strict_loads", "verify"]


class VerifyReport(BaseModel):
    """Outcome of recomputing a run's hash chain (and, with a public key, its seals)."""

    run_id: str
    ok: bool
    n_events: int
    head_hash: str
    problems: list[str]
    finished: bool = False
    """Whether the chain holds the run's ``run.finished`` event (an unfinished run was
    interrupted, or its tail was removed together with its header fixed)."""
    signature: SignatureStatus | None = None
    """With a public key: ``signed`` (the last event is a valid seal of everything
    before it), ``unsigned`` (no seal, or events after the last seal), ``invalid``."""
    signature_detail: str | None = None


@dataclass
class ChainCheck:
    """What recomputing a run's chain found."""

    problems: list[str] = field(default_factory=list)
    n_events: int = 0
    head_hash: str = GENESIS
    finished: bool = False
    seals: list[Seal] = field(default_factory=list)
    mismatched_seals: list[int] = field(default_factory=list)
    """Sequence numbers of seals whose claim is not the chain before them, or whose event
    holds more than a seal does (its signature may still verify: the signed content
    changed)."""


def strict_loads(text: str) -> Any:
    """JSON text read back, refusing an object with a duplicate key or nesting deeper
    than the parser's recursion allows (ValueError)."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        # JSON passing through: an object of the payload, whatever its keys.
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                raise ValueError(f"duplicate key {k!r}")
            out[k] = v
        return out

    try:
        return json.loads(text, object_pairs_hook=pairs)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def check_chain(run_id: str, rows: Iterable[EventRow], head: RunHead) -> ChainCheck:
    """Recompute the chain of ``rows`` (the run's stored events in sequence order) and
    compare it with the stored text, hashes and the run's header ``head``."""
    out = ChainCheck()
    problems = out.problems
    prev = GENESIS
    count = 0
    for row in rows:
        key = str(row["key"])
        try:
            seq = int(str(row["seq"]).strip(), 10)
        except ValueError:  # text edited into the column: named, and read as in place
            problems.append(f"event {count} ({key}): sequence number {str(row['seq'])[:40]!r}")
            seq = count
        where = f"event {seq} ({key})"
        if seq != count:
            problems.append(f"event {count}: sequence gap (found seq {seq})")
        if row["prev_hash"] != prev:
            problems.append(f"{where}: prev_hash does not match the previous event")
        try:
            payload = strict_loads(str(row["payload"]))
            text = canonical(payload)
        except RecursionError:  # read, but too deep to write back
            exc = ValueError("nested too deeply to read")
            problems.append(f"{where}: stored payload is not valid canonical JSON ({exc})")
            prev = str(row["hash"])
            count += 1
            continue
        except ValueError as exc:
            problems.append(f"{where}: stored payload is not valid canonical JSON ({exc})")
            prev = str(row["hash"])
            count += 1
            continue
        if text != row["payload"]:
            problems.append(f"{where}: stored payload text is not its canonical JSON")
        body = {
            "run": row["run_id"],
            "seq": seq,
            "key": key,
            "type": row["type"],
            "case": row["case_ref"],
            "at": row["at"],
            "payload": payload,
        }
        if chain_hash(prev, body) != row["hash"]:
            problems.append(f"{where}: content does not match its hash")
        if row["type"] == ev.RUN_FINISHED:
            out.finished = True
        if row["type"] == SEAL_TYPE and isinstance(payload, dict):
            out.seals.append((seq, payload))
            if (
                payload.get("n_events") != seq
                or payload.get("head") != prev
                or payload.get("run") != run_id
            ):
                problems.append(f"{where}: seal does not describe the chain before it")
                out.mismatched_seals.append(seq)
            elif set(payload) != SEAL_FIELDS or key != f"seal/{seq}" or row["case_ref"]:
                # Nothing signs a seal's own event: only its claim and signature belong in it.
                problems.append(
                    f"{where}: a seal holds only run, n_events, head and signature, "
                    f"under key seal/{seq} and no case"
                )
                out.mismatched_seals.append(seq)
        prev = str(row["hash"])
        count += 1
    if count != head.n_events:
        problems.append(f"run header counts {head.n_events} events, journal holds {count}")
    if prev != head.head_hash:
        problems.append("run head hash does not match the last event")
    out.n_events = count
    out.head_hash = prev
    return out


def verify(
    log: SQLEventLog,
    run_id: str,
    *,
    public_key: PublicKey | None = None,
    more_problems: Callable[[str], list[str]] | None = None,
) -> VerifyReport:
    """Recompute the run's hash chain in ``log``; ``more_problems(run_id)`` adds what
    else the journal checks (its review index); with ``public_key``, check the seals."""
    head = log.head(run_id)
    found = check_chain(run_id, log.rows(run_id), head)
    problems = found.problems
    if more_problems is not None:
        problems.extend(more_problems(run_id))
    report = VerifyReport(
        run_id=run_id,
        ok=not problems,
        n_events=found.n_events,
        head_hash=found.head_hash,
        problems=problems,
        finished=found.finished,
    )
    if public_key is not None:
        status, detail = seal_status(
            found.seals, found.n_events, public_key, mismatched=found.mismatched_seals
        )
        report.signature = status
        report.signature_detail = detail
    return report
