"""Runs: a JSONL file of panels decided case by case, journalled, resumable — the one run loop.

:func:`start_run` registers a run and journals everything needed to redo it without the
original command line: the input file's path and sha256 (or the text itself, for
standard input and for panels handed in by a door), and the run specification
(:class:`~dissensus.pipeline.spec.RunSpec`: policy, loaded files and their sha256,
model spec). :func:`execute_run` is the only run loop, whatever the door: it takes the
run's lease, feeds the run to an *executor* (:mod:`dissensus.pipeline.executors`: in
this process by default, or the Ray engine's workers), journals what the executor hands
back, enforces the deadline, and yields one
:class:`~dissensus.pipeline.records.CaseRecord` per accepted panel *in input order*.
It is also how a run resumes (:func:`resume_run`): cases whose record is journalled are
replayed, the case in flight continues from its last journalled step.

Choices this module makes:

* **Group commit.** The loop appends the events of the cases the executor has finished
  in one batch (:meth:`~dissensus.store.journal.Journal.append_batch`: one transaction)
  when the executor has no further outcome ready within one turn of the event loop, or
  :data:`BLOCK_CASES` cases are waiting, and only then yields their records: a record
  handed out is durable; a crash loses at most the batch being written (never part of
  it) and the cases in flight, which a resumed run decides again.
* **Durability points** (commits, hence fsyncs under SQLite's ``synchronous=full``) of a
  run: (1) the run, its ``run.started`` and, with ``start_run(..., lock=True)``, its
  execution lock; (2) each block but the last; (3) the last block together with the
  shift check, ``run.finished`` and the lock's release. A run of one case that makes no
  model call commits twice (once when deferred, below). A crash before (3) commits leaves the run unfinished with its
  lock naming a dead process (taken over on resume); a crash after it leaves a finished
  run. The records of the last block are handed out after (3). A run that fails or is
  abandoned (its reader stops, as when ``--output`` fails on a full disk) releases its
  lock on the way out when the journal takes the write; when the journal cannot (the
  same full disk, the server gone), the lock row is left naming this process, which a
  resume takes over, and what stopped the run is the one error reported.
* **A run started with** ``start_run(..., defer=True)`` is created by its first write
  (:meth:`~dissensus.store.journal.Journal.defer_run`): a run of one block that makes no
  model call (a single panel through :func:`~dissensus.pipeline.adecide` or the chat
  door) is created, decided and finished in one commit, without lock rows, its
  ``run.started``, case events and ``run.finished`` one insert (without a shift check
  between them), and a crash before that commit leaves nothing (the caller has no
  record and tries again). A write before the last block (a block, a case's steps
  before its model call, a deadline's ``run.stopped``) creates it with its lock, and
  from there on it is the run above.
* **The specification a run decides with is the one its** ``run.started`` **reads back
  as** (:meth:`~dissensus.pipeline.spec.RunSpec.from_started`), whether the run is
  resumed or new. A deferred run is handed that spec by :func:`start_run` with its
  registration (:meth:`~dissensus.pipeline.spec.RunSpec.journalled`, made once per spec
  object, as is the spec's part of the payload), so a door deciding one panel per run
  under one spec (the service, the chat door) does not rebuild it per run; the payload
  is the one validating every field gives, byte for byte.
* At most ``policy.concurrency`` cases are in flight; records are emitted in input order
  (a finished case waits for the earlier ones, so memory stays bounded by the window).
* A resumed run refuses an input file whose sha256 changed since the run started. The
  run reads the file once more as it decides it, and hashes what it reads: a file that
  changed meanwhile (lines appended after ``run.started``) stops the run at the end of
  its input, before ``run.finished``, with the same error (:class:`InputError`), so a
  finished run holds no record its journalled hash does not cover. A file whose size
  is not what reading it gives (being written, or made up as it is read, as under
  ``/proc``) is refused by :func:`start_run` before the run is created.
* Rejected lines are journalled (``input.rejected``) and reported, never decided.
* ``run.finished`` is journalled once, with the counts, when every line was handled
  (the model follow-ups attempted and failed among them, :func:`~dissensus.pipeline.engine.followup_tally`,
  when not zero).
* **A finished run stays finished.** :func:`execute_run` replays a finished run from the
  journal (each line's ``case.record`` or ``input.rejected``): no lease, no executor, no
  deadline, nothing appended but, with a signer, the seal a crash between the run's
  last commit and its seal left missing (:meth:`~dissensus.store.seals.Seals.seal`
  with ``missing_only``), so ``runs resume`` makes the seal its end lost. The records are read :data:`REPLAY_PART` at a time and
  handed out as they are read, in input order (next point), so a replay holds a part
  of the run, never all of it. Nothing of a run's execution ever follows its
  ``run.finished``: the loop looks again once it holds the run's lease (the holder it
  waited for may have finished the run), and only the lease's holder executes a run, so
  the run cannot end under it; a deadline's ``run.stopped`` is refused for a finished
  run (:func:`refuse_finished`, in the stop's transaction). A human's review events and
  seals are what may come after the end.
* **A replay puts a run journalled out of input order back in order, holding a bounded
  part of it.** The run loop journals its cases in input order, so sequence order is
  input order for every run it wrote; but up to 0.1 each case appended its events when
  it ended, with up to ``concurrency`` cases in flight, so a case that waited on a model
  call came after later ones that made none (and the cases a crash left undecided came,
  once resumed, after those the crash had journalled). Rather than sort the run (all of
  it in memory), the replay first reads the run's ``(sequence number, case)`` pairs
  alone, :data:`REPLAY_REFS` a query, no payload, and runs on those lines the heap it
  would hand the records out through (:func:`_replay_order`): a run in order is handed
  out as read, as before; a run whose records come at most :data:`REPLAY_HELD` places
  late (every 0.1 run: a few windows at most) goes through a heap of that many records;
  a run further out of order (none any version wrote) is read in passes of
  :data:`REPLAY_HELD` records, each pass reading the pairs again and those records by
  their sequence numbers. Rejects are read whole and reported in line order first, as
  before, wherever 0.1 interleaved them; a human's resolutions replace the records by
  line as they come (:func:`~dissensus.pipeline.review.resolved_records`), so they come
  in the same order. A partial 0.1 run resumes in input order anyway (the executor hands
  its cases over in input order, replaying each journalled case from its own events),
  and once finished it is replayed as above. A ``case.record`` whose case is no line
  number is :class:`~dissensus.store.errors.JournalDamaged`.
* One process at a time works on a run: :func:`execute_run` takes the run's lease in
  the journal (:meth:`~dissensus.store.journal.Journal.acquire_run_lock`; already held,
  with nothing to write, when :func:`start_run` took it with the run) and a second process
  gets :class:`RunBusy` ("run is being resumed by pid N", exit 2) instead of doubling
  the spend; the lease of a killed process is taken over. A live holder is told at once:
  :func:`check_resumable` looks at the lease before it verifies the chain, and taking it
  reads the holder before it waits for the journal's write lock.
* A deadline (``deadline_s`` of the policy, or the caller's) is wall-clock time for this
  invocation: when it passes, no new case starts, cases in flight are cancelled (their
  journalled steps stay), a ``run.stopped`` event records ``{reason: deadline, cases}``
  and :class:`DeadlineReached` (exit 1) is raised after the records finished in input
  order were yielded. The run is *partial*: no ``run.finished``, resumable with
  ``runs resume``. A deadline that passes once the executor has handed over its last
  case and ended stops nothing: the run finishes. The deadline is the loop's, so it holds on every executor; the
  executor is told it
  (:attr:`~dissensus.pipeline.executors.RunContext.stop_at`) so that it starts no long step after
  it: the local one embeds a window in calls of a few texts and none after the
  deadline, so a run stops within the step in progress (one embedding call at most),
  and starts no model attempt after it (:class:`~dissensus.pipeline.durable.PastDeadline`:
  not sent, so no resume charges it); a call in flight is cancelled with its one attempt.
* **The executor's outcome stream is driven by one task** (:class:`_Feed`), which also
  closes it: an interrupt or a cancellation landing anywhere in the loop never closes
  the stream while an ``anext`` runs it, nor leaves a task whose exception nobody
  retrieves.
* A resumed run is decided with the specification journalled at its start; a file that
  specification loaded and that has changed since is refused, naming the file
  (:meth:`~dissensus.pipeline.spec.RunSpec.check_files`).
* **A shift flag holds a resumed run too.** :func:`start_run` puts the hold of a flagged
  acceptance file (``on_shift: escalate``) in the run's specification; a check that
  flags the file after the run started is read again each time the run is executed
  (a resume, as the acceptance monitor's suspensions are, once per invocation, not
  before each case): the run journals the hold as its own (``acceptance.held``, once,
  before its next case) and decides the rest with it, so from the resume on learned
  acceptance commits nothing and each case it would have judged says ``acceptance
  held: ...``; later resumes read that event. The records journalled before the resume
  stand as they were. A flag journalled while an invocation runs holds the run from
  its next resume, or from the run's next check mid-run.
* **Under ``on_shift: escalate`` the run checks its cases while it runs**
  (:class:`~dissensus.pipeline.shift_in_run.InRunChecks`, asked after each block,
  which ends at the case that makes a check due): when a check flags the file, the
  loop stops the executor as an interrupt does, journals the hold as the run's own
  (``acceptance.held`` with ``within_run``) and starts the executor again, held, on
  the lines after the committed frontier
  (:attr:`~dissensus.pipeline.executors.RunContext.after`: every line up to it is
  committed); an outcome of a committed line that an executor hands again (the Ray
  engine replays its committed blocks; a rejected line past the frontier may be
  committed, handed over before the cases above it) is skipped, also among what a
  deadline finds handed over (:class:`_Committed`). A run that makes no check mid-run
  skips nothing: its executor hands each line over once.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import heapq
import io
import os
import socket
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple, overload

from pydantic import ValidationError

from dissensus.errors import ConfigError, DissensusError, InputError
from dissensus.files import file_kind
from dissensus.io.jsonl import (
    HEAD_BYTES,
    Reject,
    blank_line,
    bounded_lines,
    not_text,
    parse_line,
)
from dissensus.pipeline.engine import followup_outcome
from dissensus.pipeline.executors import Executor, LocalExecutor, Outcome, RunContext
from dissensus.pipeline.records import CaseRecord
from dissensus.pipeline.run_events import (
    HELD_KEY,
    AcceptanceHeld,
    RunFinished,
    RunInput,
    RunStarted,
    RunStopped,
)
from dissensus.pipeline.runtime import PastDeadline
from dissensus.pipeline.shift import check_run, checks_shift, latest_flag, load_shift_check
from dissensus.pipeline.shift_in_run import InRunChecks
from dissensus.pipeline.spec import (
    PolicyLike,
    RunSpec,
    file_sha256,
    policy_calibration,
    policy_guard_calibration,
)
from dissensus.states import SimilarityBackend
from dissensus.store import event_types as ev
from dissensus.store.errors import JournalDamaged, JournalError, RunExists
from dissensus.store.journal import Journal, NewEvent, RunInfo
from dissensus.store.run_header import STARTED_KEY, run_meta
from dissensus.store.targets import journal_option
from dissensus.types import JsonObject, Panel

__all__ = [
    "FINISHED_KEY",
    "DeadlineReached",
    "RunBusy",
    "RunFinishedError",
    "check_not_busy",
    "claim_run",
    "execute_run",
    "input_lines",
    "is_finished",
    "new_run_id",
    "policy_calibration",
    "policy_guard_calibration",
    "read_stdin",
    "refuse_finished",
    "resume_run",
    "run_spec",
    "start_run",
]

RUN_KIND = "decide"

BLOCK_CASES = 512
"""Most cases whose events one batch (one transaction, one fsync) appends."""

FINISHED_KEY = "run/finished"
"""The key of a run's ``run.finished`` event."""


class RunBusy(ConfigError):
    """Another live process is working on the run (exit 2)."""


class DeadlineReached(DissensusError):
    """The run's wall-clock deadline passed; the run stopped partial and is resumable (exit 1)."""

    def __init__(self, message: str, *, resume: str = "") -> None:
        super().__init__(message)
        self.resume = resume
        """The resume command the message ends with (a command line words it whole)."""


class RunFinishedError(DissensusError):
    """Something of a run's execution was about to be appended after its ``run.finished``
    (refused: a finished run stays finished)."""


def new_run_id() -> str:
    """A fresh run id (12 hex digits)."""
    return uuid.uuid4().hex[:12]


@overload
def start_run(
    journal: Journal,
    input_path: str | None,
    policy: PolicyLike = None,
    *,
    text: str | None = None,
    stdin: bytes | None = None,
    policy_file: str | None = None,
    policy_dir: Path | None = None,
    run_id: str | None = None,
    model: str | None = None,
    similarity: str | None = None,
    acceptance: str | None = None,
    kind: str = RUN_KIND,
    extra: JsonObject | None = None,
    via: str | None = None,
    lock: bool = False,
    fresh: bool = False,
    defer: Literal[False] = False,
) -> RunInfo: ...


@overload
def start_run(
    journal: Journal,
    input_path: str | None,
    policy: PolicyLike = None,
    *,
    text: str | None = None,
    stdin: bytes | None = None,
    policy_file: str | None = None,
    policy_dir: Path | None = None,
    run_id: str | None = None,
    model: str | None = None,
    similarity: str | None = None,
    acceptance: str | None = None,
    kind: str = RUN_KIND,
    extra: JsonObject | None = None,
    via: str | None = None,
    lock: bool = False,
    fresh: bool = False,
    defer: Literal[True],
) -> None: ...


@overload
def start_run(
    journal: Journal,
    input_path: str | None,
    policy: PolicyLike = None,
    *,
    text: str | None = None,
    stdin: bytes | None = None,
    policy_file: str | None = None,
    policy_dir: Path | None = None,
    run_id: str | None = None,
    model: str | None = None,
    similarity: str | None = None,
    acceptance: str | None = None,
    kind: str = RUN_KIND,
    extra: JsonObject | None = None,
    via: str | None = None,
    lock: bool = False,
    fresh: bool = False,
    defer: bool = ...,
) -> RunInfo | None: ...


def start_run(
    journal: Journal,
    input_path: str | None,
    policy: PolicyLike = None,
    *,
    text: str | None = None,
    stdin: bytes | None = None,
    policy_file: str | None = None,
    policy_dir: Path | None = None,
    run_id: str | None = None,
    model: str | None = None,
    similarity: str | None = None,
    acceptance: str | None = None,
    kind: str = RUN_KIND,
    extra: JsonObject | None = None,
    via: str | None = None,
    lock: bool = False,
    fresh: bool = False,
    defer: bool = False,
) -> RunInfo | None:
    """Register a new run of ``input_path`` (``"-"``: standard input) or of ``text`` (JSONL
    handed in by a door) and journal its inputs and specification (``run.started``).
    ``stdin`` is standard input already read (:func:`read_stdin`) for ``input_path``
    ``"-"``: a command reads it before it opens the journal, so that standard input
    refused whole (too large, gzip, UTF-16) leaves no journal behind.

    ``policy`` is a :class:`RunSpec`, a :class:`Policy`, a policy file or ``None``; the
    other settings are :meth:`RunSpec.from_policy`'s overrides. Everything is checked
    before the run exists. ``extra`` adds fields to ``run.started`` (e.g. who submitted);
    ``kind`` and ``via`` (the door, e.g. ``serve``) are journalled there too, and the
    run's header is made from that event (:func:`~dissensus.store.run_header.run_meta`;
    ``runs verify`` compares them). ``lock`` takes the run's
    execution lock for this process in the same transaction (for a caller that calls
    :func:`execute_run` next with the same journal object: one commit fewer); a door that
    executes the run elsewhere (another thread's connection) leaves it to
    :func:`execute_run`. ``defer`` writes nothing now and returns ``None``: the run is
    created by its first write, with this process's lock unless that write is the run's
    end (see the module docstring), for a caller that calls :func:`execute_run` next
    with the same journal object and has checked that ``run_id`` is new (an id this
    journal object is starting already is refused now, one taken in the journal
    meanwhile at the first write). ``fresh``: ``run_id`` was drawn by the caller with
    :func:`new_run_id`, not chosen, so a run the journal holds under it is another's:
    :class:`~dissensus.store.errors.RunExists` (for the caller to draw again, as
    :func:`~dissensus.pipeline.adecide` does), not the advice to resume it.
    """
    spec = RunSpec.from_policy(
        policy,
        base_dir=policy_dir,
        policy_file=policy_file,
        model=model,
        similarity=similarity,
        acceptance=acceptance,
    )
    spec = _with_shift_hold(journal, spec)
    run_id = new_run_id() if run_id is None else run_id  # "" is refused, not random
    if not defer and journal.run(run_id, missing_ok=True) is not None:
        if fresh:  # drawn by the caller (new_run_id), not chosen: another is to be drawn
            raise RunExists(f"run {run_id!r} (a fresh id) names a run the journal holds")
        raise ConfigError(
            f"run {run_id!r} already exists in {journal.path}; resume it with: "
            f"dissensus runs resume {run_id}{journal_option(journal.path)}"
        )
    source: RunInput
    if text is not None:
        source = {"path": "-", "text": text}
    elif input_path == "-":
        source = stdin_source(read_stdin() if stdin is None else stdin)
    elif input_path is not None:
        path = Path(input_path).resolve()
        if not path.is_file():
            if not path.exists():
                raise InputError(f"file not found: {input_path}")
            # A run reads its input again on resume (and checks it unchanged): a device or
            # a pipe cannot be read twice. Standard input is journalled instead.
            raise InputError(
                f"{input_path}: not a regular file ({file_kind(path.stat().st_mode)}); "
                "a run's input is a file, or - to read standard input"
            )
        source = {"path": str(path), "sha256": _steady_sha256(path, input_path)}
    else:
        raise ConfigError("a run needs an input file or text", field="input")
    payload = _started_payload(spec, source, extra, kind, via)
    meta = run_meta(payload)
    started = (ev.RUN_STARTED, payload, STARTED_KEY)
    # The run, its run.started event (and its lock) are one transaction: a crash leaves
    # none of them. exclusive: of two starts with one --run-id, the second fails cleanly.
    # Its header is made from the event, as runs verify checks it.
    if defer:
        # A deferred run written before its end (a case's steps before a model call)
        # is created with this process's lock, whatever ``lock`` says. The run loop is
        # handed the spec this payload reads as (RunSpec.journalled), not rebuilt per run;
        # unless ``extra`` overrides a field of the spec: the payload then reads as
        # another spec, which the run loop rebuilds from the event as a resume would.
        overridden = not spec.started_fields().keys().isdisjoint(extra or {})
        journal.defer_run(
            run_id,
            kind=kind,
            meta=meta,
            first=started,
            lock_pid=os.getpid(),
            handed=None if overridden else _Handed(payload, spec.journalled()),
        )
        return None
    return journal.create_run(
        run_id,
        kind=kind,
        meta=meta,
        first=started,
        exclusive=True,
        lock_pid=os.getpid() if lock else None,
    )


def _started_payload(
    spec: RunSpec, source: RunInput, extra: JsonObject | None, kind: str, via: str | None
) -> JsonObject:
    """The ``run.started`` payload of a run of ``source`` under ``spec``: the spec's
    journalled fields (:meth:`RunSpec.started_fields`, made once per spec) and the run's
    own fields validated as :class:`RunStarted` validates them, in the order its
    ``payload()`` gives. ``extra`` naming a field of the spec (which then overrides it)
    is validated whole instead."""
    fields: JsonObject = {"input": source, **(extra or {}), "kind": kind}
    if via:
        fields["via"] = via
    spec_fields = spec.started_fields()
    if not spec_fields.keys().isdisjoint(fields):
        return RunStarted.model_validate({**spec_fields, **fields}).payload()
    return {**spec_fields, **RunStarted.model_validate(fields).payload()}


class _Handed(NamedTuple):
    """What :func:`start_run` hands the run loop with a deferred run: its ``run.started``
    payload (the very object registered) and the spec that payload reads as."""

    payload: JsonObject
    spec: RunSpec


def _steady_sha256(path: Path, shown: str) -> str:
    """The sha256 of the file ``path``; :class:`InputError` when reading it gives other
    than its size (a file being written, or one the system makes up as it is read, as
    ``/proc``'s): the run could never read it again as it started."""
    digest = hashlib.sha256()
    read = 0
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
            read += len(chunk)
        size_after = os.fstat(handle.fileno()).st_size
    if read != size or size_after != size:
        raise InputError(
            f"{shown}: reading it gave {read} bytes, its size says {size_after}: the file "
            "changes as it is read (being written, or made up by the system, as under "
            "/proc); a run reads its input again as it decides and resumes: copy it to "
            "a file first"
        )
    return digest.hexdigest()


def _with_shift_hold(journal: Journal, spec: RunSpec) -> RunSpec:
    """``spec`` with a hold on its acceptance file when the policy says ``on_shift:
    escalate`` and a shift check in this journal flagged the file."""
    if spec.acceptance is None or spec.policy.acceptance.on_shift != "escalate":
        return spec
    flag = latest_flag(journal, spec.acceptance.get("sha256"))
    if flag is None:
        return spec
    hold = (
        f"a shift check flagged this acceptance file in run {flag['run_id']} "
        f"(AUC {float(flag['auc']):.2f}, p = {float(flag['p_value']):.2g}); calibrate a new file"
    )
    return spec.model_copy(update={"shift_hold": hold})


def _held_since_start(journal: Journal, run_id: str, spec: RunSpec) -> RunSpec:
    """``spec`` (the run's, as journalled in its ``run.started``) with the hold a shift
    check journalled since the run started puts on its acceptance file, under ``on_shift:
    escalate``: the hold the run journalled when an earlier resume met it, else the
    journal's newest flag of the file, journalled now as the run's own
    (``acceptance.held``, once per run) so that the run reports it and every later
    resume keeps it. A run that started held, or whose policy does not escalate, is
    ``spec`` unchanged. The caller holds the run's lease."""
    if spec.shift_hold is not None:
        return spec
    if spec.acceptance is None or spec.policy.acceptance.on_shift != "escalate":
        return spec
    journalled = journal.get(run_id, HELD_KEY)
    if journalled is not None:
        return spec.model_copy(update={"shift_hold": str(journalled.payload.get("hold"))})
    held = _with_shift_hold(journal, spec)
    if held.shift_hold is None:
        return spec
    # The run's own check mid-run, journalled just before an interruption: its hold is
    # one made while the run ran, at that check.
    sha = (spec.acceptance or {}).get("sha256")
    flag = latest_flag(journal, None if sha is None else str(sha))
    within = flag.get("within_run") if flag is not None and flag["run_id"] == run_id else None
    at = {} if within is None else {"within_run": within}
    payload = AcceptanceHeld(hold=held.shift_hold, **at).payload()
    journal.append(run_id, ev.ACCEPTANCE_HELD, payload, key=HELD_KEY)
    return held


def _held_within(journal: Journal, run_id: str, spec: RunSpec, at: int) -> RunSpec:
    """``spec`` with the hold of the flag an in-run check found
    (:mod:`dissensus.pipeline.shift_in_run`), journalled as the run's own
    (``acceptance.held``, with the run's judged cases then) so that a resume keeps it.
    The caller holds the run's lease."""
    held = _with_shift_hold(journal, spec)
    if held.shift_hold is None:
        return spec
    payload = AcceptanceHeld(hold=held.shift_hold, within_run=at).payload()
    journal.append(run_id, ev.ACCEPTANCE_HELD, payload, key=HELD_KEY)
    return held


MAX_STDIN_BYTES = 64 * 1024 * 1024
"""The most standard input a run takes (64 MiB): a run journals its standard input whole
in its ``run.started`` (it cannot be read again on resume), and an event of hundreds of
megabytes is refused by the journal's back end (SQLite's blob limit, PostgreSQL's field
limit) or exhausts memory. A larger input is a file: a run reads a file again on resume
and journals only its path and hash."""


def _size(n: int) -> str:
    mib = 1024 * 1024
    return f"{n // mib} MiB" if n % mib == 0 else f"{n:,} bytes"


def read_stdin(limit: int | None = None) -> bytes:
    """Standard input, refused past :data:`MAX_STDIN_BYTES`, or when it is no UTF-8 text
    (:func:`~dissensus.io.jsonl.not_text`), before any run is created: a command calls it
    before it opens the journal (``decide -``), and hands the bytes to :func:`start_run`."""
    limit = MAX_STDIN_BYTES if limit is None else limit
    stream = sys.stdin.buffer if hasattr(sys.stdin, "buffer") else None
    data = stream.read(limit + 1) if stream is not None else sys.stdin.read(limit + 1).encode()
    if len(data) > limit:
        raise InputError(
            f"standard input holds more than {_size(limit)}: a run journals its "
            "standard input whole; write it to a file and give the file's path instead of -"
        )
    if (why := not_text(data[:HEAD_BYTES])) is not None:  # UTF-16, gzip: no run of it
        raise InputError(f"standard input: {why}")
    return data


def stdin_source(data: bytes) -> RunInput:
    """The journalled form of standard input: its text, or base64 when it is not UTF-8.

    Lines that are not UTF-8 are rejected one by one when the run reads them, like the
    same bytes in a file; the journal (canonical JSON, UTF-8) can only hold them encoded.
    """
    try:
        return {"path": "-", "text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"path": "-", "base64": base64.b64encode(data).decode("ascii")}


def _start_of(journal: Journal, run_id: str) -> tuple[RunStarted, RunSpec]:
    """The run's ``run.started`` and the spec it reads as: for a run this process
    deferred (:func:`start_run`), the spec it handed on with that very payload
    (:meth:`RunSpec.journalled`, what :meth:`RunSpec.from_started` gives of it);
    otherwise built from the event."""
    handed = journal.handed(run_id)
    if handed is not None:
        first, given = handed
        if isinstance(given, _Handed) and given.payload is first.payload:
            return _started(journal, run_id), given.spec
    started = _started(journal, run_id)
    return started, RunSpec.from_started(started)


def _started(journal: Journal, run_id: str) -> RunStarted:
    event = journal.deferred(run_id) or journal.get(run_id, "run/started")
    if event is None:
        raise DissensusError(f"run {run_id} has no run.started event: not a decide run")
    try:
        return RunStarted.model_validate(event.payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(
            f"the run's run.started event is invalid: {first['msg']}",
            field=".".join(str(p) for p in first["loc"]) or ev.RUN_STARTED,
        ) from None


def run_spec(journal: Journal, run_id: str) -> RunSpec:
    """The specification run ``run_id`` was started with (from its ``run.started``)."""
    return RunSpec.from_started(_started(journal, run_id))


def input_lines(source: Mapping[str, Any]) -> tuple[str, list[str] | None]:
    """A run's input (a :class:`~dissensus.pipeline.run_events.RunInput`, or the JSON of
    one) as ``(file name, None)`` for a file (unchanged since the run started) or
    ``("-", lines)`` for journalled text."""
    if source.get("path") == "-":
        if "base64" in source:
            text = base64.b64decode(str(source["base64"])).decode("utf-8", "surrogateescape")
        else:
            text = str(source.get("text", ""))
        # Split as a file is read (universal newlines only), never on U+2028 and the like.
        return "-", list(io.StringIO(text, newline=None))
    path = Path(str(source["path"]))
    if not path.is_file():
        raise InputError(f"the run's input file is gone: {path}")
    if file_sha256(path) != source.get("sha256"):
        raise InputError(f"the run's input file changed since the run started: {path}")
    return str(path), None


_lines = input_lines  # the name the 0.2 Ray engine imported


async def execute_run(
    journal: Journal,
    run_id: str,
    *,
    on_reject: Callable[[Reject], None] | None = None,
    backend: Callable[[], SimilarityBackend] | None = None,
    deadline_s: float | None = None,
    executor: Executor | None = None,
) -> AsyncIterator[CaseRecord]:
    """Decide (or finish deciding) every case of the run, yielding records in input order.

    The one run loop: ``executor`` (default :class:`LocalExecutor` with ``backend``)
    decides the cases; this loop journals what it hands back, counts, and enforces
    ``deadline_s`` (default: the policy's ``deadline_s``); see the module docstring. A
    finished run is replayed from the journal: nothing is locked, decided or appended,
    whatever the deadline.
    """
    pid = os.getpid()
    try:
        started, spec = _start_of(journal, run_id)
    except BaseException:
        if journal.deferred(run_id) is not None:
            _release_on_the_way_out(journal, run_id, pid)  # given up: a deferred run leaves nothing
        raise
    if is_finished(journal, run_id):
        # The seal its end lost (a crash between the two commits), made now with a signer.
        journal.seal(run_id, missing_only=True)
        for record in _replay(journal, run_id, on_reject):
            yield record
        return
    claim_run(journal, run_id, pid)  # a read only when start_run took it
    released = False
    try:
        if is_finished(journal, run_id):
            # Finished by the process that held the run until this one took it.
            journal.release_run_lock(run_id, pid)
            released = True
            journal.seal(run_id, missing_only=True)
            for record in _replay(journal, run_id, on_reject):
                yield record
            return
        if journal.deferred(run_id) is None:
            # A flag journalled since the run started holds the file from here on, as
            # the monitor's suspensions are read again by each invocation; a deferred
            # run is new: start_run read the flags a moment ago.
            spec = _held_since_start(journal, run_id, spec)
        limit = deadline_s if deadline_s is not None else spec.policy.deadline_s
        end = None if limit is None else asyncio.get_running_loop().time() + limit
        name, lines = input_lines(started.input)
        ctx = RunContext(
            journal=journal,
            run_id=run_id,
            spec=spec,
            name=name,
            lines=lines,
            stop_at=end,
            sha256=None if lines is not None else started.input.get("sha256"),
        )
        engine = executor or LocalExecutor(backend)
        counts: Counter[str] = Counter()
        block: list[Outcome] = []
        feed: _Feed | None = None
        checks = InRunChecks.of(journal, run_id, spec)
        # Only a run that checks itself mid-run may start its executor again.
        committed = _Committed(journal, run_id) if checks is not None else None
        judged = 0  # the block's records judged by learned acceptance (when checking)
        try:
            feed = _Feed(engine, ctx)
            while True:
                if block and (
                    len(block) >= BLOCK_CASES
                    or (checks is not None and judged >= checks.room)
                    or not await feed.ready()
                ):
                    # The executor has nothing more at hand (or the block is full, or
                    # holds the case a check waits for): commit the block, then hand its
                    # records out.
                    records = _commit(journal, run_id, block, counts, on_reject)
                    if committed is not None:
                        committed.add(block)
                    block, judged = [], 0
                    for record in records:
                        yield record
                    if checks is not None and checks.add(records) and checks.check():
                        assert committed is not None
                        # A flag holds the file: go on as a resume after it would. The
                        # cases decided and not committed are dropped, as an interrupt
                        # drops them, and decided again, held.
                        await feed.stop()
                        feed = None
                        ctx.spec = spec = _held_within(journal, run_id, spec, checks.flag_at)
                        ctx.after, checks = committed.start_again(), None
                        feed = _Feed(engine, ctx)
                outcome = await feed.next(end)
                if outcome is None:
                    break
                if committed is not None:
                    if committed.again(outcome):
                        continue  # committed before the executor was started again
                    judged += outcome.record is not None and outcome.record.acceptance is not None
                block.append(outcome)
        except _Late:
            # No case starts any more; those in flight are cancelled (their journalled
            # steps stay); those finished are appended in one last batch.
            assert feed is not None
            left = await feed.stop()
            block.extend(o for o in left if committed is None or not committed.again(o))
            for record in _commit(journal, run_id, block, counts, on_reject):
                yield record
            _stopped(journal, run_id, limit or 0.0, counts["cases"])
            resume = f"dissensus runs resume {run_id}{journal_option(journal.path)}"
            raise DeadlineReached(
                f"run {run_id}: deadline of {limit:g} s reached after {counts['cases']} case(s); "
                # No quotes around the command: journal_option shell-quotes the path.
                f"the run is partial, finish it with: {resume}",
                resume=resume,
            ) from None
        finally:
            if feed is not None:
                await feed.stop()
        settings = spec.policy.acceptance
        # The last block, the shift check (which reads the block's acceptance events),
        # run.finished and the lock's release: one transaction, one commit.
        # Without a shift check to run between them, the block and run.finished are one
        # batch (one head read, one insert). A deferred run not written yet is created
        # here, without a lock: it is finished in this same commit (without a shift
        # check, its start, block and end are one insert).
        unlocked = journal.deferred(run_id) is not None
        shift = checks_shift(spec.acceptance)
        if shift:
            # The check's libraries load (a second, the first time) before the write lock.
            load_shift_check()
        with journal.transaction(), journal.transaction(run_id if not unlocked else None):
            events = _block_events(block)
            records, rejects = _tally(block, counts)
            finished_event = NewEvent(
                ev.RUN_FINISHED, RunFinished(**counts).payload(), FINISHED_KEY
            )
            if not shift:
                if unlocked:
                    journal.create_deferred(run_id, lock=False, then=[*events, finished_event])
                else:
                    journal.append_batch(run_id, [*events, finished_event])
            else:
                if unlocked:
                    journal.create_deferred(run_id, lock=False)
                journal.append_batch(run_id, events)
                check_run(
                    journal,
                    run_id,
                    spec.acceptance,
                    alpha=settings.shift_alpha,
                )
                journal.append_batch(run_id, [finished_event])
            if not unlocked:
                journal.release_run_lock(run_id, pid)
        released = True
        _report(rejects, on_reject)
        for record in records:
            yield record
    finally:
        if not released:
            _release_on_the_way_out(journal, run_id, pid)


def _release_on_the_way_out(journal: Journal, run_id: str, pid: int) -> None:
    """Release the run's lock as a run that failed or was abandoned ends. A journal that
    cannot take the release (the disk full, the server gone: often what stopped the run)
    leaves the lock row naming this process, which a resume here or after this process
    takes over; raising it would hide what stopped the run, or, when the run loop is
    closed by its reader, reach the event loop as a traceback."""
    with contextlib.suppress(JournalError):
        journal.release_run_lock(run_id, pid)


def is_finished(journal: Journal, run_id: str) -> bool:
    """Whether the run's ``run.finished`` is journalled (a run not created yet is not)."""
    return journal.get(run_id, FINISHED_KEY) is not None


def claim_run(journal: Journal, run_id: str, pid: int | None = None) -> None:
    """Take the run's execution lock for ``pid`` (default: this process), or raise
    :class:`RunBusy` naming the live process that holds it (a read, never a wait on
    another writer, when that process holds it)."""
    holder = journal.acquire_run_lock(run_id, os.getpid() if pid is None else pid)
    if holder is not None:
        raise RunBusy(f"run {run_id} is being resumed by pid {holder.pid} (host {holder.host})")


def check_not_busy(journal: Journal, run_id: str) -> None:
    """Raise :class:`RunBusy` when a live process other than this one executes the run
    (reads only: a caller checks this before its long reads, and takes the lock later)."""
    holder = journal.run_lock_holder(run_id)
    if holder is not None and (holder.pid, holder.host) != (os.getpid(), socket.gethostname()):
        raise RunBusy(f"run {run_id} is being resumed by pid {holder.pid} (host {holder.host})")


REPLAY_PART = 256
"""Records a finished run's replay reads per query (:func:`_replay`)."""

REPLAY_HELD = 1024
"""Records a replay holds back at most to hand out, in input order, a run journalled out
of it (:func:`_replay`): a run 0.1 wrote is out of order by at most a few times its
``concurrency`` (64 at most), so this covers it with room to spare; a run further out of
order is read in passes instead."""

REPLAY_REFS = 4096
"""``(sequence number, case)`` pairs a replay's look at its order reads per query."""


def _replay(
    journal: Journal, run_id: str, on_reject: Callable[[Reject], None] | None
) -> Iterator[CaseRecord]:
    """A finished run's records in input order (its rejects reported first), from the
    journal alone: each case's ``case.record`` and each line's ``input.rejected``.

    The records are read :data:`REPLAY_PART` events at a time and handed out as they are
    read, never held together. The run loop journals its cases' records in input order
    (a block's cases in order, the blocks in order, on every executor), but 0.1 appended
    each case's events when the case ended, with several cases in flight, so a case that
    waited on a model call came after later ones (and a run it left partial, resumed,
    after all of them). So the run's order is looked at first (:func:`_replay_order`,
    which reads only sequence numbers and cases), and the records are handed out as they
    come, through a heap of at most :data:`REPLAY_HELD` records, or in passes."""
    rejects = [e.read_as(Reject) for e in journal.events(run_id, type=ev.INPUT_REJECTED)]
    _report(sorted(rejects, key=lambda r: r.line), on_reject)
    order = _replay_order(journal, run_id)
    if order == "passes":
        yield from _replay_passes(journal, run_id)
        return
    held: list[tuple[int, int, CaseRecord]] = []
    after = -1  # sequence numbers start at 0
    while part := journal.events_after(run_id, after, REPLAY_PART, type=ev.CASE_RECORD):
        after = part[-1].seq
        for event in part:
            record = event.read_as(CaseRecord)
            if order == "sequence":
                yield record
                continue
            heapq.heappush(held, (_case_line(run_id, event.seq, event.case), event.seq, record))
            if len(held) > REPLAY_HELD:
                yield heapq.heappop(held)[2]
    while held:
        yield heapq.heappop(held)[2]


def _case_line(run_id: str, seq: int, case: str | None) -> int:
    """The input line of a ``case.record`` event (its case, a line number)."""
    if case is None or not case.isascii() or not case.isdigit():
        raise JournalDamaged(
            f"journal damaged: run {run_id}: the case.record at sequence number {seq} "
            f"names no input line (case {case!r}); see dissensus runs verify {run_id}"
        )
    return int(case)


def _record_lines(journal: Journal, run_id: str) -> Iterator[tuple[int, int]]:
    """``(sequence number, input line)`` of each of the run's ``case.record`` events, in
    sequence order, :data:`REPLAY_REFS` a query, their payloads not read."""
    after = -1
    while part := journal.refs_after(run_id, after, REPLAY_REFS, type=ev.CASE_RECORD):
        after = part[-1][0]
        for seq, case in part:
            yield seq, _case_line(run_id, seq, case)


def _replay_order(journal: Journal, run_id: str) -> Literal["sequence", "held", "passes"]:
    """How :func:`_replay` puts the run's records in input order: ``sequence`` when
    sequence order is input order (every run the run loop wrote), ``held`` when a heap of
    :data:`REPLAY_HELD` records does it (the heap is run here on the lines alone, as the
    replay will run it on the records), ``passes`` otherwise."""
    heap: list[int] = []
    out = -1  # the last line the heap handed out
    top = -1
    in_order = True
    for _, line in _record_lines(journal, run_id):
        if line < out:
            return "passes"
        if line < top:
            in_order = False
        top = max(top, line)
        heapq.heappush(heap, line)
        if len(heap) > REPLAY_HELD:
            out = heapq.heappop(heap)
    return "sequence" if in_order else "held"


def _replay_passes(journal: Journal, run_id: str) -> Iterator[CaseRecord]:
    """The run's records in input order, :data:`REPLAY_HELD` at a time: each pass reads
    the run's lines (not its records) for the next lines, then those records by their
    sequence numbers. Only for a run far out of order (none the run loop writes)."""
    done = -1
    while True:
        nearest: list[tuple[int, int]] = []  # (-line, seq): the largest line on top
        for seq, line in _record_lines(journal, run_id):
            if line <= done:
                continue
            if len(nearest) < REPLAY_HELD:
                heapq.heappush(nearest, (-line, seq))
            elif line < -nearest[0][0]:
                heapq.heapreplace(nearest, (-line, seq))
        if not nearest:
            return
        chosen = sorted((-negative, seq) for negative, seq in nearest)
        events = journal.events_at([(run_id, seq) for _, seq in chosen])
        for _, seq in chosen:
            yield events[(run_id, seq)].read_as(CaseRecord)
        done = chosen[-1][0]


class _Done:
    """The end of the executor's outcomes (its task ended: see :class:`_Feed`)."""


_DONE = _Done()

READY_TURNS = 3
"""Turns of the event loop the run loop waits for a next outcome before it commits the
block it holds: fewer commit after every few cases (about 4 cases a commit with 1, where
one turn reached the executor's stream directly), more only delay a commit by turns."""


class _Feed:
    """The executor's outcomes, taken from it by one task of their own.

    That task makes the executor's outcome stream, drives it and closes it: nothing
    else ever resumes or closes the stream, so closing it never meets an ``anext`` in
    flight, wherever an interrupt or a cancellation lands. It hands each outcome over as
    it comes (an outcome that comes without waiting, as a decoded Ray block's do, costs
    the loop no turn of the event loop), then the end, in the step the stream ends in.
    The executor runs only while the loop waits (one thread), so what waits to be taken
    is what the executor finished in one of its steps. How the task ended (the stream's
    end or its exception) is retrieved as it ends and handed to the loop after the last
    outcome, so no exception is left unretrieved.
    """

    def __init__(self, engine: Executor, ctx: RunContext) -> None:
        self._queue: asyncio.Queue[Outcome | _Done] = asyncio.Queue()
        self._over = False
        self._task = asyncio.ensure_future(self._pump(engine, ctx))
        self._task.add_done_callback(self._ended)

    async def _pump(self, engine: Executor, ctx: RunContext) -> None:
        outcomes = engine.outcomes(ctx)
        try:
            async for outcome in outcomes:
                self._queue.put_nowait(outcome)
        finally:
            try:
                await outcomes.aclose()
            finally:
                self._end()

    def _end(self) -> None:
        if not self._over:
            self._over = True
            self._queue.put_nowait(_DONE)

    def _ended(self, task: asyncio.Future[None]) -> None:
        if not task.cancelled():
            task.exception()  # retrieved now; the loop raises it after the last outcome
        self._end()  # a task cancelled before it started

    async def ready(self) -> bool:
        """Whether the next outcome (or the end) comes within :data:`READY_TURNS` turns of
        the event loop (a case that makes no model call finishes in one; its outcome then
        takes the executor's stream, and this task, a turn or two more to arrive)."""
        for _ in range(READY_TURNS):
            if not self._queue.empty():
                return True
            await asyncio.sleep(0)
        return not self._queue.empty()

    async def next(self, end: float | None) -> Outcome | None:
        """The next outcome, ``None`` after the last; :class:`_Late` once the loop's clock
        reaches ``end`` while the executor is still at work (once it has ended, what it
        handed over is taken whatever the clock says: its last case decided just before
        the deadline finishes the run, rather than leaving it partial)."""
        if end is not None and not self._over and asyncio.get_running_loop().time() >= end:
            raise _Late()
        if self._queue.empty():
            try:
                async with asyncio.timeout_at(end):
                    item = await self._queue.get()
            except TimeoutError:
                raise _Late() from None
        else:
            item = self._queue.get_nowait()
        if isinstance(item, _Done):
            task = self._task
            if not task.done():  # it ends in the step that handed the end over
                await asyncio.wait([task])
            if task.cancelled():
                raise asyncio.CancelledError()
            error = task.exception()
            if isinstance(error, PastDeadline):
                raise _Late()
            if error is not None:
                raise error
            return None
        return item

    async def stop(self) -> list[Outcome]:
        """Stop the executor (its cases in flight are cancelled) and wait until it has
        stopped; the outcomes it had handed over that the loop had not taken yet."""
        if not self._task.done():
            self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        left: list[Outcome] = []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if not isinstance(item, _Done):
                left.append(item)
        return left


def _commit(
    journal: Journal,
    run_id: str,
    block: list[Outcome],
    counts: Counter[str],
    on_reject: Callable[[Reject], None] | None,
) -> list[CaseRecord]:
    """Append a block's events in one batch (one transaction); its records, in order,
    once they are durable."""
    journal.append_batch(run_id, _block_events(block))
    records, rejects = _tally(block, counts)
    _report(rejects, on_reject)
    return records


def _report(rejects: list[Reject], on_reject: Callable[[Reject], None] | None) -> None:
    if on_reject is not None:
        for reject in rejects:
            on_reject(reject)


def _block_events(block: list[Outcome]) -> list[NewEvent]:
    """The events a block of outcomes appends, in order."""
    events: list[NewEvent] = []
    for outcome in block:
        if outcome.reject is not None:
            if not outcome.journalled:
                events.append(
                    NewEvent(
                        ev.INPUT_REJECTED,
                        outcome.reject.model_dump(mode="json"),
                        f"reject/{outcome.line}",
                        str(outcome.line),
                    )
                )
            if not outcome.events:
                continue
        events.extend(
            e if isinstance(e, NewEvent) else NewEvent(e.type, e.payload, e.key, e.case)
            for e in outcome.events
        )
    return events


def _tally(block: list[Outcome], counts: Counter[str]) -> tuple[list[CaseRecord], list[Reject]]:
    """Count a block's outcomes into ``counts``; its records and rejects, in order."""
    records: list[CaseRecord] = []
    rejects: list[Reject] = []
    for outcome in block:
        if outcome.reject is not None:
            counts["rejected"] += 1
            rejects.append(outcome.reject)
            continue
        record = outcome.record
        assert record is not None
        counts["cases"] += 1
        counts["auto"] += int(record.auto)
        counts["escalated"] += int(record.action == "escalate")
        attempted, cause = followup_outcome(record)
        if attempted:  # counted only when not zero: earlier runs' payloads stay as they were
            counts["followups"] += 1
            if cause is not None:
                counts["followups_failed"] += 1
        records.append(record)
    return records, rejects


class _Committed:
    """How far a run's committed outcomes reach, for a loop that may start its executor
    again mid-run (a shift flag's hold): the executor then hands over again outcomes of
    lines already committed, which the loop must not commit twice.

    Records come in input order, so the highest committed record's line is a frontier:
    every line up to it is committed (a rejected line is handed over as soon as it is
    read, before the records after it). Rejects past it may be committed too (handed
    over while earlier cases were still being decided): those are looked up in the
    journal, only after a start again and only up to the highest line committed."""

    def __init__(self, journal: Journal, run_id: str) -> None:
        self._journal = journal
        self._run_id = run_id
        self.frontier = 0
        """Every line up to this one is committed."""
        self._highest = 0
        """The highest line committed (a reject's, maybe past the frontier)."""
        self._again = False

    def add(self, block: list[Outcome]) -> None:
        """Note a committed block."""
        for outcome in block:
            if outcome.record is not None and outcome.line > self.frontier:
                self.frontier = outcome.line
            if outcome.line > self._highest:
                self._highest = outcome.line

    def start_again(self) -> int:
        """The executor is started again: the line after which it starts reading."""
        self._again = True
        return self.frontier

    def again(self, outcome: Outcome) -> bool:
        """Whether ``outcome`` is one committed before the executor was started again."""
        if not self._again or outcome.line > self._highest:
            return False
        if outcome.line <= self.frontier:
            return True
        if outcome.reject is None:
            return False  # no record past the frontier is committed
        return self._journal.get(self._run_id, f"reject/{outcome.line}") is not None


class _Late(Exception):
    """The deadline passed (internal signal)."""


def _stopped(journal: Journal, run_id: str, limit: float, cases: int) -> None:
    with journal.transaction(run_id):
        refuse_finished(journal, run_id, ev.RUN_STOPPED)
        n = 0
        while journal.get(run_id, f"run/stopped/{n}") is not None:
            n += 1
        payload = RunStopped(reason="deadline", deadline_s=limit, cases=cases).payload()
        journal.append(run_id, ev.RUN_STOPPED, payload, key=f"run/stopped/{n}")


def refuse_finished(journal: Journal, run_id: str, what: str) -> None:
    """Raise :class:`RunFinishedError` when the run is finished: nothing its execution
    writes may follow its ``run.finished``."""
    if is_finished(journal, run_id):
        raise RunFinishedError(
            f"run {run_id} is finished: its execution appends nothing after run.finished "
            f"(refused: {what})"
        )


def numbered_panels(
    name: str, lines: list[str] | None, sha256: str | None = None
) -> Iterator[tuple[Panel | Reject, int]]:
    """``(panel or reject, line number)`` for every non-blank input line, lazily. With
    ``sha256`` (the file's, as the run journalled it), the bytes are hashed as they are
    read: a file that read otherwise is an :class:`InputError` at its end."""
    if lines is not None:
        yield from _numbered(name, lines)
        return
    hashed = _Hashed(open(name, "rb"))  # noqa: SIM115  (closed by the text wrapper)
    # surrogateescape: a line that is not UTF-8 is rejected on its own (see io.jsonl).
    with io.TextIOWrapper(
        io.BufferedReader(hashed, 1 << 20),
        encoding="utf-8",
        errors="surrogateescape",
        newline=None,
    ) as handle:
        yield from _numbered(name, bounded_lines(handle))
    if sha256 is not None and hashed.digest.hexdigest() != sha256:
        raise InputError(f"the run's input file changed since the run started: {name}")


class _Hashed(io.RawIOBase):
    """A file read through, its bytes hashed (sha256) on the way."""

    def __init__(self, raw: io.RawIOBase | io.BufferedReader) -> None:
        super().__init__()
        self._raw = raw
        self.digest = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = self._raw.readinto(buffer) or 0
        if count:
            self.digest.update(memoryview(buffer)[:count])
        return count

    def close(self) -> None:
        self._raw.close()
        super().close()


def _numbered(name: str, lines: Iterable[str]) -> Iterator[tuple[Panel | Reject, int]]:
    for number, text in enumerate(lines, start=1):
        if not blank_line(text, number):
            yield parse_line(Panel, text, file=name, line=number), number


def check_resumable(journal: Journal, run_id: str) -> None:
    """Refuse to resume a run that another live process executes (:class:`RunBusy`, told
    before anything long is read), whose hash chain does not verify (resuming re-runs the
    journalled policy and inputs, which an edited journal could have replaced), or whose
    specification loaded a file that changed since (:meth:`RunSpec.check_files`). A
    finished run is only replayed, with no lease, so no lock holder stops it."""
    if not is_finished(journal, run_id):
        check_not_busy(journal, run_id)
    report = journal.verify(run_id)
    if not report.ok:
        first = report.problems[0] if report.problems else "the chain is broken"
        raise InputError(
            f"cannot resume run {run_id}: its journal does not verify ({first}); "
            f"see dissensus runs verify {run_id}"
        )
    run_spec(journal, run_id).check_files()


async def resume_run(
    journal: Journal,
    run_id: str,
    *,
    on_reject: Callable[[Reject], None] | None = None,
    backend: Callable[[], SimilarityBackend] | None = None,
    deadline_s: float | None = None,
    executor: Executor | None = None,
) -> AsyncIterator[CaseRecord]:
    """Resume a run (same as :func:`execute_run`; completed cases are replayed).

    A run whose journal does not verify is refused (:func:`check_resumable`)."""
    check_resumable(journal, run_id)
    async for record in execute_run(
        journal,
        run_id,
        on_reject=on_reject,
        backend=backend,
        deadline_s=deadline_s,
        executor=executor,
    ):
        yield record
