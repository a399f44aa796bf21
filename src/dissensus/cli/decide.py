"""``dissensus decide``: decide every panel of a file into a journalled, resumable run.

* ``dissensus decide PANELS.jsonl [--policy FILE] [--journal PATH] [--json] [--rejects FILE]``

``run_and_report`` drives a run to its end and prints its summary
(:mod:`dissensus.cli.run_summary`); ``runs resume`` (:mod:`dissensus.cli.runs`) uses it
too. How a signal stops it is :mod:`dissensus.cli.interrupts`'s.

The journal is ``--journal PATH``, else ``$DISSENSUS_JOURNAL``, else
``./dissensus-journal.sqlite``.

Choices this module makes:

* Everything ``decide`` can check is checked before the run is created: the input is
  readable, ``--output`` and ``--rejects`` are writable and name no file the run reads
  (the input, the policy, ``--acceptance``, the calibration and acceptance files the
  policy names, the journal) nor each other, the journal is a dissensus journal (or
  absent) in a writable place, the policy loads, the similarity backend can be made (a
  ``module:function`` one is allowed and importable), and the model spec (``--model``,
  else the policy's ``seek_context.model``, else ``$DISSENSUS_MODEL``) names a usable
  model. Any failure is one line and exit 2, and no run is created, so a run is never
  left incomplete by its own configuration.
* SIGINT, SIGTERM and SIGHUP stop ``decide`` and ``runs resume`` at once (also while
  embedding): the message names the resume command and the exit code is 130. The
  command names the run's ``--output`` file when it had one (as the line of a
  ``--deadline`` does), so that, copied as shown, it writes every record there; without
  it the resumed run printed a table, and the file kept the records of before the stop. Every
  journalled step stays; the resumed run ends with the records of an uninterrupted one.
  The message is the only line, wherever the signal arrives: while the run's event
  loop runs, the loop raises the interrupt between two of its steps, so no task is cut
  off between making a coroutine and awaiting it, and the loop's shutdown cancels every
  task cleanly; a step that keeps the loop longer than
  :data:`~dissensus.cli.interrupts.GRACE_S` (0.2 s: an embedding) gets it where it is,
  from a timer, so it stops at once. Signals that
  follow the first change nothing (three in a row print the one line too): the run
  stops once, and a signal while it stops (its loop cancelling its tasks, the commit
  that releases its lock) is not raised again. Wherever it lands, the run loop leaves no task whose exception goes
  unretrieved and never closes a generator an ``anext`` runs
  (:mod:`dissensus.pipeline.batch`). A signal once the run is journalled but before
  its loop starts (counting the input's lines, reading its resolutions) names the
  resume command too; so does one while ``run.started`` is being committed, once the
  commit is done (the run's id is chosen before, a random one too); one before it says
  ``interrupted``: no run exists.
* ``--deadline`` stops a run within the step in progress when it passes: a window of
  panels is embedded in calls of at most 32 texts and none starts after the deadline
  (:mod:`dissensus.pipeline.runtime`).
* An output that cannot be written once the run has started (``--output``, ``--rejects``
  or standard output, a full disk: ``> /dev/full``), with ``--json`` or the human
  summary, stops the command with one line naming that output, the error and the resume
  command (``dissensus runs resume R --journal J --output FILE``, and the run's
  ``--rejects`` file), exit 1: the run is journalled, and the resumed run writes all its
  records. A closed pipe is not a failure (below).
* A journal that goes away mid-run (a database restart, a lock held past the busy
  timeout) stops the run with one line naming the error and the resume command (exit
  1): every step written so far stays. A read-only or damaged journal is its own error.
* Every resume command printed (an interrupt, a deadline, a journal lost mid-run, a Ray
  worker that died, a closed standard output) names the run's output as the run was given it
  (:func:`output_option`): ``--output FILE`` shell-quoted from the path as it is, never
  from the path as a message shows it (whitespace collapsed, escapes: ``a  b.jsonl``
  read ``a b.jsonl``, and the resumed run wrote another file and said it succeeded), and
  ``--json`` for a run that printed JSON, and its ``--rejects FILE`` (the resumed run
  writes that file whole again; without it, lines rejected after the stop were only said
  on standard error). A path a terminal cannot show on one line (a
  tab, a newline, a control character) is not printed: the line asks for it typed, and
  so for a ``--journal`` path (``--journal JOURNAL (type the journal's path ...)``),
  which printed raw ended the line or drove the terminal (an escape sequence). The
  command is written after the error's words, never through the message's whitespace
  collapsing.
* When every follow-up of a run failed and all for the same cause (an unreachable
  server, say), the summary says so in one line and the exit code is 1.
* Records resolved by a human are emitted in their resolved form (basis ``human``),
  also by ``runs resume`` of a finished run.
* An empty ``--run-id ""`` (an unset shell variable) is refused (exit 2), as an empty
  ``--journal`` is: it is not taken for "a random id", which no later ``runs resume``
  given the same empty variable would find.
* Panel ids seen twice in one input are warned about (one line per id, and a count in
  the summary); both records are kept, distinguished by their line.
* **Memory does not grow with the run.** Each record is written (``--output``,
  ``--json``) as the run loop hands it out, and the summary (also a deadline's) is kept
  as counts (:class:`~dissensus.cli.run_summary.RunTally`: the first 20 records, the
  counts by action, the first escalated case, the follow-ups' causes), never as the
  records. What stays per case is a 16-byte digest of its panel id (:func:`id_key`),
  to find ids seen twice: about 90 bytes a case, against about 2,800 for a record. A
  run that starts or resumes reads the records a human resolved (they replace the
  pipeline's: :func:`~dissensus.pipeline.review.resolved_records`), not every
  journalled record; a finished run's replay streams its records from the journal
  (:mod:`dissensus.pipeline.batch`). The output is the same, in the same order.
* **Progress** (``$DISSENSUS_PROGRESS=1``, or a terminal unless ``$DISSENSUS_PROGRESS=0``:
  :func:`~dissensus.cli.common.progress_enabled`): the bar says how many of a
  window's texts are embedded (:class:`_EmbeddingProgress`, told the count by the
  prefetch before its first call), plain lines come on a timer
  (:class:`~dissensus.cli.common.Bar`), and the clock counts from the command's start.
  The bar counts the input's lines: each record and each rejected line advances it, so
  a run with rejected lines ends at ``done/total (100%)`` too. Each record (with its
  warning) and each rejected line is written holding
  :data:`~dissensus.cli.common.OUTPUT_LOCK`, so no progress line lands inside a record
  when standard output and standard error share a pipe.
* ``--json`` output cut short by a closed pipe (``| head -1``) exits 0; a run it stopped
  before its end says so on standard error with its resume command (above).
* Whether records are written as JSONL is the options' to say (``--json``, or
  ``--output`` naming a file other than ``-``), never whether the output handle is
  ``sys.stdout``: the progress bar replaces ``sys.stdout`` with its proxy while it is
  drawn, and that test took a terminal for a file, printing every record as raw JSON
  above the table.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import suppress
from typing import IO, TYPE_CHECKING, Annotated, Any

import typer

from dissensus.cli.app import app
from dissensus.cli.common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    INTERRUPT_SAID,
    MAX_SECONDS,
    MAX_WORKERS,
    Bar,
    check_journal_file,
    check_outputs,
    check_run_input,
    count_lines,
    err_console,
    exit_for,
    has_control,
    number_in,
    output_handle,
    progress_enabled,
    quoted,
    shown,
    shown_message,
    silence_stdout,
    whole_write,
)

if TYPE_CHECKING:
    from dissensus.io.atomic import OutputWriteError
    from dissensus.io.jsonl import Reject
    from dissensus.pipeline.records import CaseRecord
    from dissensus.pipeline.shift_watch import RunWatch
    from dissensus.pipeline.spec import RunSpec
    from dissensus.states import EmbeddingBackend, SimilarityBackend
    from dissensus.store.journal import Journal
from dissensus.cli.interrupts import Interrupted, interruptible
from dissensus.cli.journals import JournalOpt, JsonOpt, opened_journal
from dissensus.cli.run_summary import (
    RunTally,
    audits_of,
    journal_option,
    print_summary,
    shift_off_of,
)
from dissensus.errors import DissensusError


class _EmbeddingProgress:
    """An embedding backend that reports on the bar how many texts are embedded.

    The run's prefetch says first how many texts it will embed
    (:meth:`will_embed`, :mod:`dissensus.pipeline.runtime`), then embeds them in calls of
    :data:`~dissensus.pipeline.runtime.EMBED_CHUNK`: the bar says ``embedding D/N
    texts``, ``D`` counting across those calls, from before the first call (which may
    load the model) until the N-th text is embedded. A call outside a prefetch (a live
    re-ask's answers) is shown only when it is longer than :attr:`CHUNK` texts, which it
    embeds in parts."""

    CHUNK = 32

    def __init__(self, inner: EmbeddingBackend, bar: Bar, label: Callable[[str], str]) -> None:
        self._inner = inner
        self._bar = bar
        self._label = label
        self.name = inner.name
        self._planned = 0
        self._done = 0

    def _show(self, done: int, planned: int) -> None:
        self._bar.update(description=self._label(f"embedding {done:,}/{planned:,} texts"))

    def will_embed(self, count: int) -> None:
        """The next ``count`` texts embedded are one prefetch's: count them together."""
        self._planned, self._done = count, 0
        if count:
            self._show(0, count)

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        items = list(texts)
        if self._planned:
            self._show(self._done, self._planned)
            vectors = self._inner.embed(items)
            self._done += len(items)
            if self._done >= self._planned:
                self._planned = self._done = 0
                self._bar.update(description=self._label(""))
            else:
                self._show(self._done, self._planned)
            return vectors
        if len(items) <= self.CHUNK:
            return self._inner.embed(items)
        parts = []
        for start in range(0, len(items), self.CHUNK):
            self._show(start, len(items))
            parts.append(
                np.asarray(self._inner.embed(items[start : start + self.CHUNK]), dtype=np.float64)
            )
        self._bar.update(description=self._label(""))
        return np.concatenate(parts, axis=0)

    def matrix(self, texts: Sequence[str]) -> Any:
        return self._inner.matrix(texts)


def _records(
    journal: Journal,
    run_id: str,
    on_reject: Callable[[Reject], None],
    bar: Bar,
    *,
    engine: str,
    ray_address: str | None,
    workers: int | None,
    deadline: float | None = None,
) -> AsyncIterator[CaseRecord]:
    """The run's records from the chosen engine (:mod:`dissensus.engines`)."""
    from dissensus.pipeline.batch import execute_run

    if engine == "ray":
        from dissensus.engines.ray import RayOptions, decide_ray

        return decide_ray(
            journal,
            run_id,
            on_reject=on_reject,
            options=RayOptions(address=ray_address, workers=workers),
            deadline_s=deadline,
        )
    return execute_run(
        journal,
        run_id,
        on_reject=on_reject,
        backend=_backend_factory(bar, journal, run_id),
        deadline_s=deadline,
    )


def _backend_factory(
    bar: Bar, journal: Journal, run_id: str
) -> Callable[[], SimilarityBackend] | None:
    if not progress_enabled():
        return None
    from dissensus.pipeline.batch import run_spec

    policy = run_spec(journal, run_id).policy
    name = policy.reading.similarity
    allow_code = policy.allow_code or None

    def factory() -> SimilarityBackend:
        from dissensus.states import EmbeddingBackend, get_backend

        inner = get_backend(name, allow_code=allow_code)
        if not isinstance(inner, EmbeddingBackend):
            return inner
        return _EmbeddingProgress(
            inner, bar, lambda extra: "deciding" + (f" ({extra})" if extra else "")
        )

    return factory


async def _drain(
    records: AsyncIterator[CaseRecord], *, emit: Callable[[CaseRecord], None], bar: Bar
) -> None:
    """Hand each record to ``emit`` as it comes; none is kept."""
    async for record in records:
        emit(record)
        bar.advance()


def id_key(panel_id: str) -> bytes:
    """What duplicate detection keeps of a panel id: a 16-byte digest, whatever the
    id's length (two ids share one with a chance of about 2^-128)."""
    import hashlib

    return hashlib.blake2b(panel_id.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _emitter(
    json_out: bool, output: str | None, handle: IO[str], resolved: dict[int, CaseRecord]
) -> Callable[[CaseRecord], CaseRecord]:
    """What writes each record: JSONL with ``--json`` (to standard output, or to the
    ``--output`` file), always JSONL into an ``--output`` file, nothing otherwise (the
    human summary shows the records). Decided from the options, never from whether
    ``handle`` is ``sys.stdout``: a progress bar replaces ``sys.stdout`` while it is
    drawn (rich's redirect), so that test would take a terminal for a file."""
    from dissensus.io.atomic import stdout_handle

    to_file = output is not None and output != "-"
    if not (json_out or to_file):
        return lambda record: resolved.get(record.line, record)
    # Standard output is looked up at each write (the bar's proxy while it is drawn, so
    # a line lands above the bar), and a failed write names it.
    out = handle if to_file else stdout_handle()

    def emit(record: CaseRecord) -> CaseRecord:
        from dissensus.io.jsonl import write_jsonl_line

        record = resolved.get(record.line, record)
        with whole_write():  # written whole: no progress line lands inside it
            write_jsonl_line(out, record)
            out.flush()
        return record

    return emit


RejectsOpt = Annotated[
    str | None, typer.Option("--rejects", help="Write rejected lines here (JSONL).")
]
OutputOpt = Annotated[
    str | None, typer.Option("--output", "-o", help="Write records here instead of stdout.")
]
DeadlineOpt = Annotated[
    float | None,
    typer.Option(
        "--deadline",
        callback=number_in(0.001, MAX_SECONDS),
        help="Stop after SECONDS of wall-clock time (the run stays resumable; exit 1).",
    ),
]

ShiftEveryOpt = Annotated[
    int,
    typer.Option(
        "--shift-every",
        min=0,
        max=1_000_000_000,
        help="Judged cases between two checks of the shift watch, stepped after a run too "
        "small for its own shift check (0: none).",
    ),
]


EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help="local (this process) or ray (blocks of lines on Ray actors, the journal in this process; the 'ray' extra).",
    ),
]
RayAddressOpt = Annotated[
    str | None,
    typer.Option("--ray-address", help="Ray cluster to join (default: start a local one)."),
]
WorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--workers",
        min=1,
        max=MAX_WORKERS,
        help="Ray workers (default: the cluster's CPUs).",
    ),
]


def output_option(output: str | None, json_out: bool = False, rejects: str | None = None) -> str:
    """`` --output FILE`` of a resume command, for a run that wrote its records into
    ``FILE`` (`` --json`` for one that printed them as JSON): without it the command
    shown resumes into a table on the terminal, and ``FILE`` never gets the records it
    was asked for; empty otherwise. ``--output -`` (the records on standard output) is
    named too: it is ``--json``. Then `` --rejects FILE`` for a run that wrote its
    rejected lines there: the resumed run writes the file whole again, and without it
    the lines rejected after the stop were only said on standard error. A path is
    shell-quoted as it is, never as a message shows it (two spaces, a backslash or a tab
    shown otherwise would name another file); one holding a character a terminal cannot
    show on one line (a control character, a newline, a tab) is not printed: ``--output
    FILE`` says to type it."""
    if output is None:
        said = " --json" if json_out else ""
    else:
        said = " --output " + _path_word(output, "output file")
    return said if rejects is None else f"{said} --rejects {_path_word(rejects, 'rejects file')}"


def _path_word(path: str, what: str) -> str:
    """``path`` shell-quoted, or ``FILE`` and the words asking for it to be typed when a
    terminal cannot show it (:func:`output_option`)."""
    if has_control(path):
        return f"FILE (type the {what}'s path: it holds a character a terminal cannot show)"
    return shlex.quote(path)


def said_interrupted(
    journal: Journal,
    run_id: str,
    output: str | None = None,
    json_out: bool = False,
    rejects: str | None = None,
) -> int:
    """Name the resume command of the interrupted run ``run_id`` (with its ``--output``
    file or ``--json``, and its ``--rejects`` file, as :func:`output_option` words
    them); the exit code."""
    sys.stderr.write(
        "interrupted: resume with dissensus runs resume "
        f"{run_id}{journal_option(journal.path)}{output_option(output, json_out, rejects)}\n"
    )
    sys.stderr.flush()
    INTERRUPT_SAID.append(True)
    return EXIT_INTERRUPTED


def _said_interrupted_start(
    journal: Journal, run_id: str, output: str | None, json_out: bool, rejects: str | None
) -> int:
    """A signal while the run was being started: the run's resume command when its
    ``run.started`` was committed (the signal came as the commit returned), else the
    plain ``interrupted`` (nothing was journalled; so too when the journal cannot say);
    the exit code."""
    try:
        exists = journal.run(run_id, missing_ok=True) is not None
    except Exception:
        exists = False
    if exists:
        return said_interrupted(journal, run_id, output, json_out, rejects)
    sys.stderr.write("interrupted\n")
    sys.stderr.flush()
    INTERRUPT_SAID.append(True)
    return EXIT_INTERRUPTED


def said_resumable(
    exc: DissensusError,
    journal: str,
    output: str | None,
    json_out: bool,
    rejects: str | None = None,
) -> int:
    """The error line of a run stopped partial (its deadline, a Ray worker that died):
    the error's words as a message shows them, then the resume command it names, with
    its ``--output`` file or ``--json`` (:func:`output_option`), as it is (whitespace
    never collapsed: the command is what gets copied), its ``--journal`` (of the
    journal ``journal``, its path or URL) as
    :func:`~dissensus.cli.run_summary.journal_option` words it (a path a terminal cannot
    show asked for, never printed); the exit code."""
    from dissensus.store.targets import journal_option as as_given

    text, resume = str(exc), str(getattr(exc, "resume", "") or "")
    if resume and text.endswith(resume):
        command = resume.replace(as_given(journal), journal_option(journal))
        if has_control(command):  # a command naming its journal some other way
            command = shown_message(command)
        said = f"{shown_message(text[: -len(resume)])} {command}"
    else:
        said = shown_message(text)
    sys.stderr.write(f"error: {said}{output_option(output, json_out, rejects)}\n")
    sys.stderr.flush()
    return exc.exit_code


def _said_unwritten(
    exc: OutputWriteError,
    journal: Journal,
    run_id: str,
    output: str | None,
    rejects: str | None,
    json_out: bool = False,
) -> int:
    """An output (a file or standard output) could not be written (a full disk): every
    journalled step stays, and the resumed run writes the whole output again. Names the
    resume command with the run's own ``--output`` file or ``--json`` (the output to
    write once there is room; ``--output FILE`` when standard output was what was full) and its ``--rejects`` file, as :func:`output_option` words them (without
    it, the lines rejected after the stop were only said on standard error); the exit
    code."""
    if exc.stdout:
        silence_stdout()  # what it still holds would only fail again on the way out
    if exc.stdout:  # standard output was what was full
        said = " --output FILE" + output_option(None, False, rejects)
    else:
        said = output_option(output, json_out, rejects)
    sys.stderr.write(
        f"error: {shown_message(exc)}; every journalled step of run {run_id} stays: "
        f"dissensus runs resume {run_id}{journal_option(journal.path)}"
        f"{said} goes on and writes all its records once there is room\n"
    )
    sys.stderr.flush()
    return exc.exit_code


def run_and_report(
    journal: Journal,
    run_id: str,
    *,
    json_out: bool,
    output: str | None,
    rejects: str | None,
    total: int | None,
    engine: str = "local",
    ray_address: str | None = None,
    workers: int | None = None,
    deadline: float | None = None,
    shift_every: int = 100,
) -> int:
    from dissensus.io.atomic import OutputWriteError
    from dissensus.io.jsonl import RejectSink
    from dissensus.pipeline.audit import run_acceptance
    from dissensus.pipeline.batch import DeadlineReached
    from dissensus.pipeline.review import resolved_records
    from dissensus.store.errors import JournalDamaged, JournalError, JournalReadOnly

    # ``--output -`` is standard output as the records' destination: ``--json``, the
    # records alone, no summary after them (as ``route --out -``).
    json_out = json_out or output == "-"
    # Only the cases a human resolved are held (their records replace the pipeline's).
    resolved = resolved_records(journal, run_id)
    replayed = journal.get(run_id, "run/finished") is not None  # no new case: no watch
    seen: set[bytes] = set()  # each panel id's digest: the one thing kept per case
    duplicates: set[bytes] = set()
    tally = RunTally()  # what the summary needs, also of a run a deadline stops
    try:
        with (
            interruptible() as complete,
            RejectSink(rejects) as sink,
            # A deadline keeps the records finished so far, in input order (as --json).
            output_handle(output, keep_on=(DeadlineReached,)) as handle,
            Bar("deciding", total=total) as bar,
        ):
            emit_one = _emitter(json_out, output, handle, resolved)

            def emit(record: CaseRecord) -> None:
                key = id_key(record.id)
                # Whole, with its warning: a progress line comes before or after it.
                with whole_write():
                    if key not in seen:
                        seen.add(key)
                    elif key not in duplicates:
                        duplicates.add(key)
                        err_console.print(
                            f"warning: panel id {quoted(record.id)} appears more than once (line {record.line})"
                        )
                    tally.add(emit_one(record))

            def rejected(reject: Reject) -> None:
                # A rejected line is one of the input's lines the bar counts, as a record is.
                with whole_write():
                    sink.add(reject)
                bar.advance()

            async def decided() -> None:
                await _drain(
                    _records(
                        journal,
                        run_id,
                        rejected,
                        bar,
                        engine=engine,
                        ray_address=ray_address,
                        workers=workers,
                        deadline=deadline,
                    ),
                    emit=emit,
                    bar=bar,
                )
                complete()  # every record is out: a signal no longer stops the run

            asyncio.run(decided())
    except Interrupted:
        return said_interrupted(journal, run_id, output, json_out, rejects)
    except OutputWriteError as exc:
        return _said_unwritten(exc, journal, run_id, output, rejects, json_out)
    except DeadlineReached as exc:
        # The cases finished before the deadline are shown as a finished run's are (the
        # JSONL has them already); the error line that follows names the resume command.
        if not json_out and tally.n:
            with suppress(OutputWriteError):
                print_summary(tally, sink.count, run_id, journal.path, len(duplicates))
        # The records so far are in the output file: the command that finishes the run
        # writes them all there again, as the interrupt's line says it.
        return said_resumable(exc, journal.path, output, json_out, rejects)
    except BrokenPipeError:
        # Standard output was closed (``| head -1``): exit 0 as for every command, but the
        # run stopped with it, so the line that finishes it is not left unsaid, naming its
        # output and its rejects file as every other resume line does.
        silence_stdout()
        if journal.get(run_id, "run/finished") is None:
            sys.stderr.write(
                f"standard output was closed: run {run_id} stopped; finish it with "
                f"dissensus runs resume {run_id}{journal_option(journal.path)}"
                f"{output_option(output, json_out, rejects)}\n"
            )
            sys.stderr.flush()
        return EXIT_OK
    except JournalError as exc:
        if isinstance(exc, JournalReadOnly | JournalDamaged):
            raise
        # The journal went away mid-run (a database restart, a lock held too long): every
        # step written so far stays, so the run is resumable once the journal is back.
        sys.stderr.write(
            f"error: {shown_message(exc)}; the run stopped: resume it with "
            f"dissensus runs resume {run_id}{journal_option(journal.path)}"
            f"{output_option(output, json_out, rejects)}\n"
        )
        sys.stderr.flush()
        return exc.exit_code
    except DissensusError as exc:
        if not getattr(exc, "resume", None):
            raise
        # A run stopped partial another way (a Ray worker that died on every attempt):
        # its line names the resume command, with the output as the deadline's does.
        return said_resumable(exc, journal.path, output, json_out, rejects)
    checked = journal.get(run_id, "run/shift")
    shift = checked.payload if checked is not None else None
    watched = None if replayed else _watched(journal, run_id, shift_every)
    if not json_out:
        try:
            print_summary(
                tally,
                sink.count,
                run_id,
                journal.path,
                len(duplicates),
                shift,
                audits=audits_of(journal, run_id),
                shift_off=shift_off_of(journal, run_id),
                acceptance=run_acceptance(journal, run_id),
                watched=None if watched is None else watched.words(),
            )
        except OutputWriteError as exc:  # standard output is full: the run is journalled
            return _said_unwritten(exc, journal, run_id, output, rejects, json_out)
    elif shift is not None and shift.get("shifted"):
        from dissensus.pipeline.shift import shift_words

        err_console.print(f"warning: {shift_words(shift)}", soft_wrap=True)
    elif watched is not None and watched.outcome is not None and watched.outcome["shifted"]:
        err_console.print(f"warning: {watched.words()}", soft_wrap=True)
    if json_out and (off := shift_off_of(journal, run_id)) is not None:
        err_console.print(f"warning: {off}", soft_wrap=True)
    if json_out and (state := run_acceptance(journal, run_id)) is not None:
        stopped = state.words()
        if stopped is not None:
            err_console.print(f"warning: {shown(stopped)}", soft_wrap=True)
    followups = tally.followups.tally
    cause = followups.every_one_failed()
    if cause is None and (some := followups.warning()) is not None:
        # Some follow-ups failed (a model server that went away mid-run): exit 0 as
        # documented, but not in silence.
        err_console.print(f"warning: {shown(some)}", soft_wrap=True)
    if cause is not None:
        err_console.print(
            f"error: every follow-up of run {run_id} failed: {shown(cause)}", soft_wrap=True
        )
        return EXIT_FAILURE
    return exit_for(sink.count)


def _watched(journal: Journal, run_id: str, every: int) -> RunWatch | None:
    """The shift watch stepped after a run this process finished, too small for its own
    check (:func:`~dissensus.pipeline.shift_watch.watch_after_run`); a watch that fails
    is a warning, never the run's failure (the run is journalled)."""
    from dissensus.pipeline.batch import run_spec
    from dissensus.pipeline.shift_watch import watch_after_run

    try:
        return watch_after_run(journal, run_id, run_spec(journal, run_id), every=every)
    except Exception as exc:
        err_console.print(
            f"warning: the shift watch could not check this run's cases: {shown_message(exc)}",
            soft_wrap=True,
        )
        return None


def _check_decide_paths(
    panels: str,
    journal: str,
    outputs: dict[str, str | None],
    reads: dict[str, str | None],
) -> None:
    from dissensus.store.journal import is_postgres_url

    check_run_input(panels)
    if not is_postgres_url(journal):
        check_journal_file(journal)
    named: dict[str, str | None] = {"PANELS": panels, **reads, "--journal": journal}
    check_outputs(outputs, reads=named)


def _check_spec(
    spec: RunSpec,
    outputs: dict[str, str | None],
    similarity: str | None,
    reads: dict[str, str | None],
) -> None:
    """What the run specification adds: the files its policy names are no output, and
    its similarity backend can be made (a ``module:function`` only with ``allow_code``,
    and importable)."""
    from dissensus.loading import is_code_name
    from dissensus.states.similarity import check_code_name, get_backend

    # The files the policy names, and those its model specs read (scripted:, replay:).
    named: dict[str, str | None] = {f.role: f.path for f in spec.files if f.role != "policy"}
    named.update(spec.model_reads())
    check_outputs(outputs, reads=named)
    from dissensus.llm.resolve import check_recordings

    # A recording (record:FILE:...) is an output too: never one of the run's files.
    files = {**reads, **{f.role: f.path for f in spec.files}, **outputs}
    for model in (spec.model, *spec.policy.seek_context.models.values()):
        check_recordings(model, files)
    name = spec.policy.reading.similarity
    allow_code = spec.policy.allow_code or None
    field = "--similarity" if similarity is not None else "reading.similarity"
    check_code_name(name, allow_code=allow_code, field=field)
    if is_code_name(name):  # imported now, not at the first panel of a created run
        get_backend(name, cache=False, allow_code=allow_code)


def _fresh_run_id(journal: Journal, run_id: str) -> str:
    """``run_id``, drawn fresh for a command without ``--run-id``, or another when it
    names a run ``journal`` holds (48 random bits: another run's, not one to resume),
    :data:`~dissensus.pipeline.FRESH_ATTEMPTS` ids in all, as ``adecide`` draws them."""
    from dissensus.pipeline import FRESH_ATTEMPTS
    from dissensus.pipeline.batch import new_run_id

    for _ in range(FRESH_ATTEMPTS - 1):
        if journal.run(run_id, missing_ok=True) is None:
            break
        run_id = new_run_id()
    return run_id


def _check_new_run(
    journal: Journal, run_id: str, output: str | None, json_out: bool, rejects: str | None
) -> None:
    """Refuse (exit 2) a ``--run-id`` the journal holds already, naming the command that
    resumes it with this command's output, ``--json`` and rejects file, as every resume
    line does (:func:`output_option`): the library's words name the journal alone, and
    the run resumed as they said printed a table, not into the file given."""
    if journal.run(run_id, missing_ok=True) is None:
        return
    # The command after the message's words, never through their whitespace collapsing.
    words = shown_message(f"run {quoted(run_id)} already exists in {journal.path}")
    sys.stderr.write(
        f"error: {words}; resume it with: dissensus runs resume {shown(run_id)}"
        f"{journal_option(journal.path)}{output_option(output, json_out, rejects)}\n"
    )
    sys.stderr.flush()
    raise typer.Exit(code=EXIT_USAGE)


def _check_run_id_given(run_id: str | None) -> None:
    """An empty or blank ``--run-id`` is refused, not taken for a random id: ``--run-id
    "$RID"`` with ``RID`` unset would start a run no later ``runs resume "$RID"`` finds."""
    if run_id is not None and not run_id.strip():
        from dissensus.errors import ConfigError

        raise ConfigError(
            "the run id is empty (an unset shell variable?): name the run, "
            "or leave the option out for a random id",
            field="--run-id",
        )


@app.command("decide")
def decide_cmd(
    panels: Annotated[str, typer.Argument(help="Panels, one JSON object a line ('-' = stdin).")],
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="Pipeline policy (YAML). Default: built-in defaults."),
    ] = None,
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
    rejects: RejectsOpt = None,
    output: OutputOpt = None,
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="Id of the new run (default: random).")
    ] = None,
    similarity: Annotated[
        str | None,
        typer.Option(
            "--similarity", help="Override the policy's similarity backend (minilm, tfidf, static)."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model", help="Model spec for live follow-ups (default: policy, $DISSENSUS_MODEL)."
        ),
    ] = None,
    engine: EngineOpt = "local",
    ray_address: RayAddressOpt = None,
    workers: WorkersOpt = None,
    deadline: DeadlineOpt = None,
    acceptance: Annotated[
        str | None,
        typer.Option(
            "--acceptance",
            help="Learned acceptance file (dissensus calibrate-acceptance); overrides acceptance.model.",
        ),
    ] = None,
    shift_every: ShiftEveryOpt = 100,
) -> None:
    """Decide every panel: read -> route -> guard -> protocol -> record, journalled and resumable."""
    from dissensus.engines import check_engine
    from dissensus.pipeline.batch import new_run_id, read_stdin, start_run
    from dissensus.pipeline.spec import RunSpec
    from dissensus.store.journal import journal_path

    _check_run_id_given(run_id)
    engine = check_engine(engine, workers=workers, address=ray_address)
    target = journal_path(journal)
    outputs = {"--output": output, "--rejects": rejects}
    reads = {"--policy": policy, "--acceptance": acceptance}
    _check_decide_paths(panels, target, outputs, reads=reads)
    # One specification, checked before the journal is touched: every file it names is read.
    spec = RunSpec.from_policy(
        policy,
        model=model,
        similarity=similarity,
        acceptance=acceptance,
        similarity_name="--similarity",
    )
    _check_spec(spec, outputs, similarity, {"PANELS": panels, **reads, "--journal": target})
    if engine == "ray":  # joined before the run exists: a cluster that is not there is exit 2
        from dissensus.engines.ray import RayOptions, ensure_ray

        ensure_ray(RayOptions(address=ray_address, workers=workers))
    # Standard input is read before the journal is opened: refused whole (gzip, UTF-16,
    # too large), it leaves no journal behind, as the same bytes in a file do.
    stdin = read_stdin() if panels == "-" else None
    fresh = run_id is None
    run_id = new_run_id() if run_id is None else run_id  # named, whatever stops the start
    with opened_journal(target, must_exist=False) as store:
        if fresh:
            run_id = _fresh_run_id(store, run_id)
        _check_new_run(store, run_id, output, json_out, rejects)
        try:
            info = start_run(
                store, panels, spec, stdin=stdin, run_id=run_id, lock=True, fresh=fresh
            )
        except KeyboardInterrupt:  # the run may be journalled already: said if it is
            raise typer.Exit(
                code=_said_interrupted_start(store, run_id, output, json_out, rejects)
            ) from None
        try:
            total = count_lines(panels) if progress_enabled() else None
            code = run_and_report(
                store,
                info.run_id,
                json_out=json_out,
                output=output,
                rejects=rejects,
                total=total,
                engine=engine,
                ray_address=ray_address,
                workers=workers,
                deadline=deadline,
                shift_every=shift_every,
            )
        except KeyboardInterrupt:  # a signal after the run began, before it is decided
            # (once: a signal after the run said it stopped only ends the command)
            code = (
                EXIT_INTERRUPTED
                if INTERRUPT_SAID
                else said_interrupted(store, info.run_id, output, json_out, rejects)
            )
    raise typer.Exit(code=code)
