"""The hash chain's verification: recompute a run's chain and compare it with what is stored.

Each event's ``hash`` is ``sha256(prev_hash + canonical(body))`` where ``prev_hash`` is
the hash of the run's previous event (:data:`~dissensus.store.canonical.GENESIS` for the
first) and ``body`` its run, sequence number, key, type, case, time and payload
(:mod:`dissensus.store.canonical`). :func:`check_chain` recomputes it from the stored
rows; any edited, removed, inserted or reordered event breaks it.

Choices this module makes:

* **Canonical text.** A payload is stored as its canonical JSON text, and verification
  requires the stored text to *be* canonical: a payload edited to carry a duplicate key
  (which different JSON readers resolve differently) fails.
* **The head anchor** (``runs.head_hash``, ``runs.n_events``) is compared with the chain,
  so a removed tail is found even when every remaining hash is right.
* **Too deep to read.** A payload nested deeper than the parser's recursion allows (an
  edit outside dissensus: dissensus never writes one) is a problem naming its event,
  like any payload that is not JSON; every other reader of the journal refuses it as
  :class:`~dissensus.store.errors.JournalDamaged` naming the event.
* **Keep going, within bounds.** Problems are listed (not only the first), each naming
  the event's sequence number and key, up to :data:`MAX_PROBLEMS`; the rest are counted
  in one last line, ``and K more problems`` (a run of a million edited events is not a
  million lines, nor a million strings in memory).
* **Each event is checked against itself.** An event's hash is recomputed from its own
  stored ``prev_hash`` and content, so ``content does not match its hash`` names only an
  event whose own row was altered; whether it links to the event before it (its
  ``prev_hash`` is that event's hash) is a separate problem.
* **A gap is one problem.** Missing sequence numbers are reported once per gap
  (``event 500 missing (1 event)``, ``events 500-519 missing (20 events)``), not once
  per later event; the broken link of the event after a gap is part of the gap and not
  reported again (an edit of that event still shows: its own hash no longer matches).
* **One pass, in pages.** The run's rows are read a page at a time
  (:meth:`~dissensus.store.log.SQLEventLog.rows`) and checked as they come: nothing
  of the run is held but the event before the one being checked (and its seals, for
  their signatures), so a run of any length is verified in the same memory. A
  command that shows the run gathers what it shows from the same pass (``each``).
* **Read to the head as it stands at the end.** The pages are separate queries, so a
  run appended to while it is verified (a reviewer resolving, a decide running) gains
  events the header read first does not count. The header is read again when the
  pages end: if the run has moved on, the rows after the last one read are read too,
  until the header stands still (at most :data:`CATCH_UP` times; a run still moving
  then is compared with the last header read). Never capped at the first header's
  count: rows forged beyond it are read and named.
* **Every stored row is read.** Pages follow the sequence number, so a row whose
  sequence number repeats another's (possible only once the table's key was dropped)
  could fall between two pages unread; the run's rows are also counted, and a count
  above the rows read in sequence order is a problem.
* **A seal is an object.** An event typed ``run.sealed`` whose payload is no JSON
  object is a seal holding something else (a problem, and ``invalid`` with a key), never
  skipped as no seal.
* **A canonical payload is read once.** A payload whose stored text is vouched for as
  canonical (:func:`~dissensus.canonical.canonical_value`: orjson reads it and writes
  it back byte for byte) is not read again by the strict reader nor written again, and
  the event's hash is computed around that stored text
  (:class:`~dissensus.store.canonical.EventHasher`, the digest
  :func:`~dissensus.store.canonical.chain_hash` gives) rather than by serialising the
  event's object. Any other text (not canonical, a duplicate key, too deep, a number
  orjson writes otherwise) and any column edited into another type than text take the
  reference path (the strict reader, :func:`~dissensus.store.canonical.canonical`,
  the event's object), so every problem is found and worded as before; a property
  test compares the two paths row for row.
* **Seals** are checked for what they describe (the run, the count and head before
  them) always, and for their signature only with a public key
  (:func:`~dissensus.store.seals.seal_status`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from dissensus.canonical import canonical_value
from dissensus.store import event_types as ev
from dissensus.store.canonical import GENESIS, EventHasher, canonical, chain_hash
from dissensus.store.events import Event, EventRow, RunHead, event_from_row
from dissensus.store.seals import SEAL_FIELDS, SEAL_TYPE, Seal, SignatureStatus, seal_status

if TYPE_CHECKING:
    from collections.abc import Callable

    from dissensus.signing import PublicKey
    from dissensus.store.log import SQLEventLog

__all__ = [
    "CATCH_UP",
    "MAX_PROBLEMS",
    "ChainCheck",
    "VerifyReport",
    "check_chain",
    "strict_loads",
    "verify",
]

MAX_PROBLEMS = 20
"""Problems a verification lists one by one; any more are one line, ``and K more problems``."""


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
    more: int = 0
    """Problems found beyond :data:`MAX_PROBLEMS` (counted, not listed)."""
    first_broken: int | None = None
    """The sequence number of the first event whose own check failed (its text, hash,
    link or place): a seal after it signs content that changed."""

    def found(self) -> int:
        """How many problems were found so far (listed or counted)."""
        return len(self.problems) + self.more

    def add(self, problem: str) -> None:
        """Record ``problem`` (listed while fewer than :data:`MAX_PROBLEMS` are, else counted)."""
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)
        else:
            self.more += 1


def _bounded(problems: list[str], more: int = 0) -> list[str]:
    """``problems`` cut to :data:`MAX_PROBLEMS` lines, the rest (and ``more``) counted in one."""
    more += max(0, len(problems) - MAX_PROBLEMS)
    listed = problems[:MAX_PROBLEMS]
    if more:
        listed.append(f"and {more} more problem{'s' if more != 1 else ''}")
    return listed


def _missing(first: int, last: int) -> str:
    """The problem for the missing sequence numbers ``first`` to ``last``."""
    n = last - first + 1
    if n == 1:
        return f"event {first} missing (1 event)"
    return f"events {first}-{last} missing ({n} events)"


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


class _Hashes:
    """An event's hash as :func:`~dissensus.store.canonical.chain_hash` computes it from
    its stored columns, given its payload's canonical text: assembled around that text
    (:class:`~dissensus.store.canonical.EventHasher`, one per run and time, the last one
    kept: a batch's events share their time) when every column is text, as dissensus
    writes them; otherwise (a column edited into another type) from the event's object,
    as before."""

    def __init__(self) -> None:
        self._key: tuple[str, str] | None = None
        self._hasher: EventHasher | None = None

    def __call__(
        self, prev: str, row: EventRow, seq: int, key: str, text: str, payload: Any
    ) -> str:
        run, type_, case, at = row["run_id"], row["type"], row["case_ref"], row["at"]
        if (
            type(run) is str
            and type(type_) is str
            and type(at) is str
            and (case is None or type(case) is str)
        ):
            if self._key != (run, at) or self._hasher is None:
                self._key, self._hasher = (run, at), EventHasher(run, at)
            return self._hasher(prev, seq=seq, key=key, type=type_, case=case, payload_text=text)
        body = {
            "run": run,
            "seq": seq,
            "key": key,
            "type": type_,
            "case": case,
            "at": at,
            "payload": payload,
        }
        return chain_hash(prev, body)


def check_chain(
    run_id: str,
    rows: Iterable[EventRow],
    head: RunHead | Callable[[], RunHead],
    each: Callable[[Event], None] | None = None,
) -> ChainCheck:
    """Recompute the chain of ``rows`` (the run's stored events in sequence order) and
    compare it with the stored text, hashes and the run's header ``head`` (or the header
    ``head()`` gives once the rows are read). ``each`` is given every row's event
    (:func:`~dissensus.store.events.event_from_row`, its payload read once for both)
    before the row is checked."""
    out = ChainCheck()
    add = out.add
    hashed = _Hashes()
    prev = GENESIS
    count = 0
    expected = 0  # the sequence number the next event should carry
    last: tuple[int, int] | None = None  # the previous event's seq, problems before it

    def settle() -> None:
        if last is not None and out.first_broken is None and out.found() > last[1]:
            out.first_broken = last[0]

    for row in rows:
        stored = row["payload"]
        vouched, payload = canonical_value(stored)
        if each is not None:  # a row that makes no event is the caller's error, as before
            each(event_from_row(row, payload if vouched and type(payload) is dict else None))
        settle()
        key = str(row["key"])
        try:
            seq = int(str(row["seq"]).strip(), 10)
        except ValueError:  # text edited into the column: named, and read as in place
            add(f"event {expected} ({key}): sequence number {str(row['seq'])[:40]!r}")
            seq = expected
        where = f"event {seq} ({key})"
        last = (seq, out.found())
        gap = seq > expected
        if gap:
            add(_missing(expected, seq - 1))
        elif seq < expected:
            add(f"{where}: out of order (after event {expected - 1})")
        own_prev = str(row["prev_hash"])
        if own_prev != prev and not gap:
            add(f"{where}: prev_hash does not match the previous event")
        expected = max(expected, seq + 1)
        if not vouched:  # not vouched for as it stands: read as before, to say why
            try:
                payload = strict_loads(str(stored))
                text = canonical(payload)
            except RecursionError:  # read, but too deep to write back
                exc = ValueError("nested too deeply to read")
                add(f"{where}: stored payload is not valid canonical JSON ({exc})")
                prev = str(row["hash"])
                count += 1
                continue
            except ValueError as exc:
                add(f"{where}: stored payload is not valid canonical JSON ({exc})")
                prev = str(row["hash"])
                count += 1
                continue
            if text != stored:
                add(f"{where}: stored payload text is not its canonical JSON")
        else:
            text = stored
        if hashed(own_prev, row, seq, key, text, payload) != row["hash"]:
            add(f"{where}: content does not match its hash")
        if row["type"] == ev.RUN_FINISHED:
            out.finished = True
        if row["type"] == SEAL_TYPE and not isinstance(payload, dict):
            # Never written by a signer: a seal skipped here would leave the run read as
            # merely unsigned after it, an edit of a seal as an append.
            add(f"{where}: a seal holds only run, n_events, head and signature (an object)")
            out.seals.append((seq, {}))
            out.mismatched_seals.append(seq)
        elif row["type"] == SEAL_TYPE:
            out.seals.append((seq, payload))
            if (
                payload.get("n_events") != seq
                or payload.get("head") != prev
                or payload.get("run") != run_id
            ):
                add(f"{where}: seal does not describe the chain before it")
                out.mismatched_seals.append(seq)
            elif set(payload) != SEAL_FIELDS or key != f"seal/{seq}" or row["case_ref"]:
                # Nothing signs a seal's own event: only its claim and signature belong in it.
                add(
                    f"{where}: a seal holds only run, n_events, head and signature, "
                    f"under key seal/{seq} and no case"
                )
                out.mismatched_seals.append(seq)
        prev = str(row["hash"])
        count += 1
    settle()
    if callable(head):
        head = head()
    if count != head.n_events:
        add(f"run header counts {head.n_events} events, journal holds {count}")
    if prev != head.head_hash:
        add("run head hash does not match the last event")
    out.n_events = count
    out.head_hash = prev
    return out


CATCH_UP = 100
"""How many times a verification reads on after a run that moved while it was read."""


class _ToHead:
    """A run's rows read to its header as it stands once they are read (module
    docstring): :meth:`rows` yields them, :meth:`head` is the header they end at, and
    :attr:`stored` the run's rows counted at that header (``None`` if the run never
    stood still)."""

    def __init__(self, log: SQLEventLog, run_id: str) -> None:
        self._log = log
        self._run_id = run_id
        self._head = log.head(run_id)
        self.stored: int | None = None

    def head(self) -> RunHead:
        return self._head

    def rows(self) -> Iterator[EventRow]:
        log, run_id = self._log, self._run_id
        last: Any = None  # the stored sequence number of the last row read
        for _ in range(CATCH_UP):
            for row in log.rows(run_id, after=last):
                last = row["seq"]
                yield row
            now = log.head(run_id)
            stored = log.count_rows(run_id)
            if now == self._head and log.head(run_id) == now:
                self.stored = stored  # counted while the header stood still
                return
            self._head = now


def verify(
    log: SQLEventLog,
    run_id: str,
    *,
    public_key: PublicKey | None = None,
    more_problems: Callable[[str], list[str]] | None = None,
    each: Callable[[Event], None] | None = None,
) -> VerifyReport:
    """Recompute the run's hash chain in ``log``; ``more_problems(run_id)`` adds what
    else the journal checks (its review index); with ``public_key``, check the seals.
    ``each`` is given every stored row's event as the check reads it, in sequence order
    (what a command shows of the run, gathered in the same pass)."""
    to_head = _ToHead(log, run_id)
    found = check_chain(run_id, to_head.rows(), to_head.head, each)
    problems = list(found.problems)
    if to_head.stored is not None and to_head.stored != found.n_events:
        problems.append(
            f"the journal holds {to_head.stored} events of the run, {found.n_events} "
            "of them read in sequence order (a sequence number is held twice)"
        )
    if more_problems is not None:
        problems.extend(more_problems(run_id))
    problems = _bounded(problems, found.more)
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
            found.seals,
            found.n_events,
            public_key,
            mismatched=found.mismatched_seals,
            broken=found.first_broken,
        )
        report.signature = status
        report.signature_detail = detail
    return report
