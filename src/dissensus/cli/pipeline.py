"""CLI commands of the composed pipeline: ``decide``, ``review ...``, ``runs ...``.

* ``dissensus decide PANELS.jsonl [--policy FILE] [--journal PATH] [--json] [--rejects FILE]``
* ``dissensus review list | show ID | resolve ID --decision X --note TEXT | undo ID``
* ``dissensus runs list | show ID | export ID | verify ID | resume ID``

The journal is ``--journal PATH``, else ``$DISSENSUS_JOURNAL``, else
``./dissensus-journal.sqlite``.

Choices where the design is silent:

* Everything ``decide`` can check is checked before the run is created: the input is
  readable, ``--output`` and ``--rejects`` are writable and name neither the input nor
  the journal, the journal is a dissensus journal (or absent) in a writable place, the
  policy loads, and the model spec (``--model``, else the policy's
  ``seek_context.model``, else ``$DISSENSUS_MODEL``) names a usable model. Any failure
  is one line and exit 2, and no run is created, so a run is never left incomplete by
  its own configuration.
* SIGINT and SIGTERM stop ``decide`` and ``runs resume`` at once (also while
  embedding): the message names the resume command and the exit code is 130. Every
  journalled step stays; the resumed run ends with the records of an uninterrupted one.
* When every follow-up of a run failed and all for the same cause (an unreachable
  server, say), the summary says so in one line and the exit code is 1.
* Records resolved by a human are emitted in their resolved form (basis ``human``),
  also by ``runs resume`` of a finished run.
* Panel ids seen twice in one input are warned about (one line per id, and a count in
  the summary); both records are kept, distinguished by their line.
* ``--json`` output cut short by a closed pipe (``| head -1``) exits 0 silently.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import IO, TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from dissensus.cli.app import app
from dissensus.cli.common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Bar,
    check_input_path,
    check_journal_file,
    check_output_path,
    count_lines,
    err_console,
    exit_for,
    out_console,
    output_handle,
    print_json,
    progress_enabled,
    shown,
)
from dissensus.errors import InputError

if TYPE_CHECKING:
    from dissensus.io.jsonl import RejectSink
    from dissensus.pipeline.records import CaseRecord
    from dissensus.states import EmbeddingBackend, SimilarityBackend
    from dissensus.store.journal import Event, Journal
    from dissensus.types import JsonObject

review_app = typer.Typer(
    help="The human review queue: escalated cases waiting for a decision.", no_args_is_help=True
)
runs_app = typer.Typer(
    help="Runs in the journal: list, inspect, export, verify, resume.", no_args_is_help=True
)
app.add_typer(review_app, name="review")
app.add_typer(runs_app, name="runs")

JournalOpt = Annotated[
    str | None,
    typer.Option(
        "--journal",
        help="Run journal: an SQLite file or a postgresql:// URL. Default: $DISSENSUS_JOURNAL or ./dissensus-journal.sqlite.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]

JOURNAL_HOOKS: list[Callable[[Event], None]] = []
"""Called with every event the CLI's journal appends (progress, tests' fault injection)."""

STATE_LEGEND = (
    "states: CA convergent agreement, DA divergent agreement, CD convergent disagreement, "
    "DD divergent disagreement (reasoning similar or not x conclusions agree or not)"
)
DECIDE_LEGEND = (
    "'auto -> escalate': the route, then what the pipeline did; '(learned)' and the like: "
    "what a committed decision rests on (guard, learned acceptance, calibrated reliability, "
    "independent families, CONCORD certificate, human)"
)


def _after_append(event: Event) -> None:
    for hook in JOURNAL_HOOKS:
        hook(event)


def _open(path: str | None, *, must_exist: bool = False) -> Journal:
    from dissensus.signing import signer_from_env
    from dissensus.store.journal import Journal, is_postgres_url, journal_path

    target = journal_path(path)
    if not is_postgres_url(target):
        check_journal_file(target, must_exist=must_exist)
    return Journal(
        target, after_append=_after_append if JOURNAL_HOOKS else None, signer=signer_from_env()
    )


@contextmanager
def _journal(path: str | None, *, must_exist: bool = True) -> Iterator[Journal]:
    """The journal, opened and closed around one command."""
    store = _open(path, must_exist=must_exist)
    try:
        yield store
    finally:
        store.close()


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while a run was being decided."""


@contextmanager
def _interruptible() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Interrupted` in the main thread while inside."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class _EmbeddingProgress:
    """An embedding backend that embeds in small chunks and reports each on the bar."""

    CHUNK = 32

    def __init__(self, inner: EmbeddingBackend, bar: Bar, label: Callable[[str], str]) -> None:
        self._inner = inner
        self._bar = bar
        self._label = label
        self.name = inner.name

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        items = list(texts)
        if len(items) <= self.CHUNK:
            return self._inner.embed(items)
        parts = []
        for start in range(0, len(items), self.CHUNK):
            self._bar.update(description=self._label(f"embedding {start}/{len(items)} texts"))
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
    sink: RejectSink,
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
            on_reject=sink.add,
            options=RayOptions(address=ray_address, workers=workers),
            deadline_s=deadline,
        )
    return execute_run(
        journal,
        run_id,
        on_reject=sink.add,
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
) -> list[CaseRecord]:
    out: list[CaseRecord] = []
    async for record in records:
        emit(record)
        out.append(record)
        bar.advance()
    return out


def _emitter(
    json_out: bool, handle: IO[str], resolved: dict[int, CaseRecord]
) -> Callable[[CaseRecord], CaseRecord]:
    def emit(record: CaseRecord) -> CaseRecord:
        from dissensus.io.jsonl import write_jsonl_line

        record = resolved.get(record.line, record)
        # Records go out as JSONL with --json, and always into an --output file.
        if json_out or handle is not sys.stdout:
            write_jsonl_line(handle, record)
            handle.flush()
        return record

    return emit


_FAILED = re.compile(r"(?:re-ask|deliberation) failed: (.+)$")


def followup_failure(records: Sequence[CaseRecord]) -> str | None:
    """The one cause every model follow-up of the run failed for, or None.

    A model follow-up is a live re-ask or a DCI deliberation; recorded re-asks call no
    model and do not count.
    """
    attempted = 0
    causes: set[str] = set()
    for r in records:
        if any(step == "followup:live" or step.startswith("deliberation:") for step in r.path):
            attempted += 1
        match = _FAILED.search(r.reason)
        if match:
            attempted += 1
            causes.add(match.group(1))
    failed = sum(1 for r in records if _FAILED.search(r.reason))
    if failed and failed == attempted and len(causes) == 1:
        return next(iter(causes))
    return None


def _summary(
    records: list[CaseRecord],
    rejected: int,
    run_id: str,
    journal: str,
    duplicates: int,
    shift: JsonObject | None = None,  # the journalled run/shift payload
    audits: tuple[float, int] | None = None,
) -> None:
    from dissensus.pipeline.learned import guarantee_sentence
    from dissensus.pipeline.shift import shift_words

    actions = Counter(r.action for r in records)
    auto = sum(r.auto for r in records)
    escalated = [r for r in records if r.action == "escalate" and r.decision is None]
    out_console.print(f"run {run_id}  journal {shown(journal)}")
    shown_records = records[:20]
    ids = [shown(r.id) for r in shown_records]
    width = max((len(i) for i in ids), default=0)
    for rid, r in zip(ids, shown_records, strict=True):
        flow = f"{r.route} -> {r.action}" if r.route != r.action else r.action
        outcome = (
            f"decision {shown(r.decision)} ({r.basis})"
            if r.decision is not None
            else f"review {r.review_id}"
        )
        out_console.print(f"{rid:<{width}}  {r.state}  {flow:<28} {outcome}", soft_wrap=True)
    if len(records) > len(shown_records):
        out_console.print(
            f"... {len(records) - len(shown_records)} more case(s) (use --json for every record)"
        )
    if records:
        out_console.print(STATE_LEGEND, soft_wrap=True)
        out_console.print(DECIDE_LEGEND, soft_wrap=True)
    n = len(records)
    share = f" ({auto / n:.0%})" if n else ""
    out_console.print(
        f"{n} case(s): {auto} decided automatically{share}, {len(escalated)} waiting for review"
        + (f", {rejected} rejected line(s)" if rejected else "")
        + (f", {duplicates} duplicate panel id(s)" if duplicates else "")
    )
    out_console.print("by action: " + ", ".join(f"{k} {v}" for k, v in sorted(actions.items())))
    figures = next((r.acceptance for r in records if r.acceptance is not None), None)
    if figures is not None:
        out_console.print(guarantee_sentence(figures), soft_wrap=True)
        if audits is not None and audits[0] > 0:
            out_console.print(_audit_words(audits, figures.target_precision), soft_wrap=True)
    if shift is not None:
        out_console.print(shift_words(shift), soft_wrap=True)
    if escalated:
        program = _program()
        out_console.print("review them:")
        out_console.print(f"  {program} review list --journal {journal}", soft_wrap=True)
        out_console.print(
            f"  {program} review show {escalated[0].review_id} --journal {journal}", soft_wrap=True
        )


def _audits_of(journal: Journal, run_id: str) -> tuple[float, int] | None:
    """The run's audit rate and the blind audits it opened."""
    from dissensus.pipeline.spec import RunSpec
    from dissensus.store import event_types as ev

    started = journal.get(run_id, "run/started")
    if started is None:
        return None
    rate = RunSpec.from_started(started.payload).policy.acceptance.audit_rate
    return rate, sum(1 for _ in journal.events(run_id, type=ev.REVIEW_AUDIT))


def _audit_words(audits: tuple[float, int], target: float) -> str:
    """The audits and the monitor, in words (the summary's last promise)."""
    from dissensus.acceptance.monitor import confseq_available

    rate, opened = audits
    said = (
        f"{rate:.0%} of automatic decisions are audited blind ({opened} opened in this run: "
        "dissensus review audits)"
    )
    if confseq_available():
        return (
            f"{said}; automatic decisions stop where the audits show precision below {target:.0%}."
        )
    return f"{said}; the monitor that would stop them needs the monitor extra (confseq)."


def _program() -> str:
    """How to call this program again, as typed (``.venv/bin/dissensus`` off the PATH)."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) != "dissensus":
        return "dissensus"
    found = shutil.which("dissensus")
    if found and os.path.realpath(found) == os.path.realpath(argv0):
        return "dissensus"
    return argv0


DeadlineOpt = Annotated[
    float | None,
    typer.Option(
        "--deadline",
        min=0.001,
        help="Stop after SECONDS of wall-clock time (the run stays resumable; exit 1).",
    ),
]


def _run(
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
) -> int:
    from dissensus.io.jsonl import RejectSink
    from dissensus.pipeline.review import final_records

    resolved = {r.line: r for r in final_records(journal, run_id) if r.resolution is not None}
    seen: dict[str, int] = {}
    duplicates: list[str] = []
    try:
        with (
            _interruptible(),
            RejectSink(rejects) as sink,
            output_handle(output) as handle,
            Bar("deciding", total=total) as bar,
        ):
            emit_one = _emitter(json_out, handle, resolved)

            def emit(record: CaseRecord) -> None:
                if record.id in seen:
                    if seen[record.id] == 1:
                        duplicates.append(record.id)
                        err_console.print(
                            f"warning: panel id {shown(record.id)!r} appears more than once (line {record.line})"
                        )
                    seen[record.id] += 1
                else:
                    seen[record.id] = 1
                emit_one(record)

            records = asyncio.run(
                _drain(
                    _records(
                        journal,
                        run_id,
                        sink,
                        bar,
                        engine=engine,
                        ray_address=ray_address,
                        workers=workers,
                        deadline=deadline,
                    ),
                    emit=emit,
                    bar=bar,
                )
            )
            records = [resolved.get(r.line, r) for r in records]
    except Interrupted:
        sys.stderr.write(
            f"interrupted: resume with dissensus runs resume {run_id} --journal {journal.path}\n"
        )
        sys.stderr.flush()
        return EXIT_INTERRUPTED
    checked = journal.get(run_id, "run/shift")
    shift = checked.payload if checked is not None else None
    if not json_out:
        _summary(
            records,
            sink.count,
            run_id,
            journal.path,
            len(duplicates),
            shift,
            audits=_audits_of(journal, run_id),
        )
    elif shift is not None and shift.get("shifted"):
        from dissensus.pipeline.shift import shift_words

        err_console.print(f"warning: {shift_words(shift)}", soft_wrap=True)
    cause = followup_failure(records)
    if cause is not None:
        err_console.print(
            f"error: every follow-up of run {run_id} failed: {shown(cause)}", soft_wrap=True
        )
        return EXIT_FAILURE
    return exit_for(sink.count)


def _check_decide_paths(panels: str, journal: str, output: str | None, rejects: str | None) -> None:
    from dissensus.store.journal import is_postgres_url

    check_input_path(panels)
    if not is_postgres_url(journal):
        check_journal_file(journal)
    inputs = [panels, journal]
    check_output_path(output, option="--output", inputs=inputs)
    check_output_path(rejects, option="--rejects", inputs=[*inputs, output])


@app.command("decide")
def decide_cmd(
    panels: Annotated[str, typer.Argument(help="Panels, one JSON object a line ('-' = stdin).")],
    policy: Annotated[
        str | None,
        typer.Option("--policy", help="Pipeline policy (YAML). Default: built-in defaults."),
    ] = None,
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
    rejects: Annotated[
        str | None, typer.Option("--rejects", help="Write rejected lines here (JSONL).")
    ] = None,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Write records here instead of stdout.")
    ] = None,
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
    engine: Annotated[
        str,
        typer.Option(
            "--engine", help="local (this process) or ray (Ray Data workers; the 'ray' extra)."
        ),
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option("--ray-address", help="Ray cluster to join (default: start a local one)."),
    ] = None,
    workers: Annotated[
        int | None, typer.Option("--workers", help="Ray workers (default: the cluster's CPUs).")
    ] = None,
    deadline: DeadlineOpt = None,
    acceptance: Annotated[
        str | None,
        typer.Option(
            "--acceptance",
            help="Learned acceptance file (dissensus calibrate-acceptance); overrides acceptance.model.",
        ),
    ] = None,
) -> None:
    """Decide every panel: read -> route -> guard -> protocol -> record, journalled and resumable."""
    from dissensus.engines import check_engine
    from dissensus.pipeline.batch import start_run
    from dissensus.pipeline.spec import RunSpec
    from dissensus.store.journal import journal_path

    engine = check_engine(engine, workers=workers, address=ray_address)
    target = journal_path(journal)
    _check_decide_paths(panels, target, output, rejects)
    # One specification, checked before the journal is touched: every file it names is read.
    spec = RunSpec.from_policy(policy, model=model, similarity=similarity, acceptance=acceptance)
    with _journal(target, must_exist=False) as store:
        info = start_run(store, panels, spec, run_id=run_id, lock=True)
        total = count_lines(panels) if progress_enabled() else None
        code = _run(
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
        )
    raise typer.Exit(code=code)


# -- review ---------------------------------------------------------------------------


@review_app.command("list")
def review_list(
    journal: JournalOpt = None,
    run: Annotated[str | None, typer.Option("--run", help="Only this run.")] = None,
    all_items: Annotated[bool, typer.Option("--all", help="Include resolved items.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """List review items (open ones unless --all)."""
    from dissensus.io.jsonl import write_jsonl_line
    from dissensus.pipeline.review import list_items

    with _journal(journal) as store:
        if run is not None:
            store.run(run)  # exit 2 naming the run when there is none
        items = list(list_items(store, run_id=run, include_resolved=all_items))
    if json_out:
        from dissensus.outputs import ReviewEntry

        for st in items:
            write_jsonl_line(sys.stdout, ReviewEntry.of(st))
        raise typer.Exit(code=EXIT_OK)
    if not items:
        out_console.print("no review items" + ("" if all_items else " open"))
        raise typer.Exit(code=EXIT_OK)
    table = Table(show_edge=False)
    for col in ("review id", "case", "status", "suggestion", "reason"):
        table.add_column(col, overflow="fold")
    for st in items:
        status = f"resolved: {shown(st.resolution.decision)}" if st.resolution else "open"
        table.add_row(
            shown(st.item.review_id),
            shown(st.item.id),
            status,
            shown(st.item.suggestion or "-"),
            shown(st.item.reason),
        )
    out_console.print(table)
    raise typer.Exit(code=EXIT_OK)


@review_app.command("audits")
def review_audits(
    journal: JournalOpt = None,
    run: Annotated[str | None, typer.Option("--run", help="Only this run.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """List open blind audits of automatic decisions (answer each with `review confirm`)."""
    from dissensus.pipeline.audit import open_audits

    with _journal(journal) as store:
        items = list(open_audits(store, run))
    if json_out:
        print_json(
            {
                "audits": [
                    {"review_id": i.review_id, "id": i.id, "stratum": i.stratum} for i in items
                ]
            }
        )
        raise typer.Exit(code=EXIT_OK)
    for i in items:
        out_console.print(f"{shown(i.review_id)}  case {shown(i.id)}", soft_wrap=True)
    if not items:
        out_console.print("no open audits")
    raise typer.Exit(code=EXIT_OK)


@review_app.command("show")
def review_show(
    review_id: Annotated[str, typer.Argument(help="Review id (<run>.<line>).")],
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show everything a reviewer needs: the case, positions and value profiles side by side."""
    from dissensus.cases import CaseSpec
    from dissensus.pipeline.audit import audit_item
    from dissensus.pipeline.review import find_item, split_ref

    run_id, line = split_ref(review_id)
    with _journal(journal) as store:
        audit = audit_item(store, run_id, line)
        audited = audit is not None and store.get(run_id, f"confirm/{line}") is not None
        st = None if audit is not None else find_item(store, review_id)
    if json_out:
        if audit is not None:
            # A blind audit: neither the committed answer nor any suggestion is shown.
            print_json({**audit.model_dump(mode="json"), "audited": audited})
            raise typer.Exit(code=EXIT_OK)
        assert st is not None
        data = st.item.model_dump(mode="json")
        data["resolution"] = st.resolution.model_dump() if st.resolution else None
        print_json(data)
        raise typer.Exit(code=EXIT_OK)
    item = audit if audit is not None else st.item if st is not None else None
    assert item is not None
    say = out_console.print
    say(
        f"review {shown(item.review_id)}  case {shown(item.id)}  (run {shown(item.run_id)}, line {item.line})",
        soft_wrap=True,
    )
    if audit is not None:
        say(f"status: blind audit, {'answered' if audited else 'open'}", soft_wrap=True)
        say(
            "audit of an automatic decision: decide it afresh with "
            f"`dissensus review confirm {shown(item.review_id)} --decision D --note N`",
            soft_wrap=True,
        )
    else:
        assert st is not None
        say(
            f"status: {'resolved: ' + shown(st.resolution.decision) if st.resolution else 'open'}",
            soft_wrap=True,
        )
        say(f"why escalated: {shown(item.reason)}", soft_wrap=True)
    case = CaseSpec.from_panel(item.panel)
    question = case.question
    if question:
        say(f"question: {_excerpt(str(question), 400)}", soft_wrap=True)
    say(
        f"options: {', '.join(shown(o) for o in item.options) or '-'}   panel suggestion: {shown(item.suggestion or '-')}",
        soft_wrap=True,
    )
    reading = item.reading
    similarity = (
        f"mean similarity {reading.mean_similarity:.2f}"
        if reading.similarity_defined
        else "similarity undefined (fewer than two agents gave reasoning)"
    )
    say(
        f"reading: {reading.state.value}  agreement {reading.agreement:.2f}  {similarity} ({shown(reading.model)})"
    )
    if reading.missing_reasoning:
        say(f"no reasoning from: {', '.join(shown(a) for a in reading.missing_reasoning)}")
    for option in case.options:
        label = "" if option.label == option.id else f" ({shown(option.label)})"
        say(f"  option {shown(option.id)}{label}: {_excerpt(option.text, 200)}", soft_wrap=True)
    scores = {x.agent: x for x in (item.acceptance.signals if item.acceptance else [])}
    table = Table(show_edge=False, title="positions")
    for col in (
        "agent",
        "family",
        "decision",
        "re-ask",
        "stable",
        "margin",
        "conf.",
        *(shown(d) for d in item.value_dimensions),
    ):
        table.add_column(col, overflow="fold")
    for p in item.positions:
        values = [
            f"{p.values[d]:.2f}" if p.values and d in p.values else "-"
            for d in item.value_dimensions
        ]
        table.add_row(
            shown(p.agent),
            shown(p.family or "-"),
            shown(p.decision) if p.decision is not None else "(abstained)",
            shown(p.second or "-"),
            "-" if p.stable is None else ("yes" if p.stable else "no"),
            str(scores[p.agent].score) if p.agent in scores else "-",
            "-" if p.confidence is None else f"{p.confidence:.2f}",
            *values,
        )
    say(table)
    agents = {p.agent for p in item.positions}
    for sig in scores.values():
        if sig.agent not in agents:  # a shared model's voice, never an agent's
            say(
                f"extra voice {shown(sig.agent)} ({shown(sig.family or '-')}): {shown(sig.decision or '-')} then "
                f"{shown(sig.second or '-')}, {'stable' if sig.stable else 'not stable'}, margin {sig.score}",
                soft_wrap=True,
            )
    say("reasoning (excerpts):")
    for p in item.positions:
        say(
            f"  {shown(p.agent)}: {_excerpt(p.reasoning, 220) or '(no reasoning given)'}",
            soft_wrap=True,
        )
    if item.packet:
        packet = item.packet
        sel = packet.selected
        label = (sel.label or sel.id) if sel else "-"
        say(
            f"DCI packet: path {shown(packet.path)}, selected {shown(label)}: {_excerpt(sel.rationale if sel else '', 200)}",
            soft_wrap=True,
        )
        detail = (
            f" ({shown(packet.status_detail)})"
            if packet.status != "complete" and packet.status_detail
            else ""
        )
        say(
            f"  packet status: {shown(packet.status)}{detail}; residual objections "
            f"{len(packet.residual_objections)}, minority positions {len(packet.minority_report)}",
            soft_wrap=True,
        )
    if item.concord:
        say(
            f"CONCORD: {shown(item.concord.status)} ({shown(item.concord.summary)})", soft_wrap=True
        )
    say(f"resolve: dissensus review resolve {shown(item.review_id)} --decision X --note TEXT")
    raise typer.Exit(code=EXIT_OK)


def _excerpt(text: str, limit: int) -> str:
    flat = shown(" ".join(str(text).split()))
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@review_app.command("resolve")
def review_resolve(
    review_id: Annotated[str, typer.Argument(help="Review id (<run>.<line>).")],
    decision: Annotated[str, typer.Option("--decision", help="The decision taken.")],
    note: Annotated[str, typer.Option("--note", help="Why (recorded in the journal).")],
    reviewer: Annotated[
        str | None,
        typer.Option(
            "--reviewer", help="Who decided; default $DISSENSUS_REVIEWER, else the login name."
        ),
    ] = None,
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Record a human decision; the case resumes with it as its final record.

    Refused while another reviewer holds a live claim on the case (as in the service).
    """
    from dissensus.pipeline.review import find_item, resolve, reviewer_name

    if not note.strip():
        raise InputError("--note must not be empty: say why the decision was taken")
    who = reviewer_name(reviewer)
    with _journal(journal) as store:
        options = find_item(store, review_id).item.options
        record = resolve(store, review_id, decision=decision, note=note, reviewer=who)
    if options and decision not in options:
        err_console.print(
            f"note: {shown(decision)!r} is none of the case's options ({', '.join(shown(o) for o in options)}); "
            "journalled as outside_options",
            soft_wrap=True,
        )
    if json_out:
        print_json(record)
    else:
        out_console.print(
            f"resolved {shown(review_id)}: case {shown(record.id)} -> {shown(record.decision)}",
            soft_wrap=True,
        )
    raise typer.Exit(code=EXIT_OK)


@review_app.command("undo")
def review_undo(
    review_id: Annotated[str, typer.Argument(help="Review id (<run>.<line>).")],
    within: Annotated[
        float,
        typer.Option("--within", min=0, help="Seconds after resolving that undo is allowed."),
    ] = 300.0,
    reviewer: Annotated[
        str | None,
        typer.Option(
            "--reviewer", help="Who resolved it; default $DISSENSUS_REVIEWER, else the login name."
        ),
    ] = None,
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Undo your resolution of a case within --within seconds: it is open again.

    Journals a ``review.reopened`` event; the resolution stays in the chain.
    """
    from dissensus.pipeline.review import reopen, reviewer_name

    who = reviewer_name(reviewer)
    with _journal(journal) as store:
        event = reopen(store, review_id, reviewer=who, within_s=within)
    if json_out:
        print_json({"review_id": review_id, "status": "open", "undoes": event.payload["undoes"]})
    else:
        out_console.print(f"reopened {shown(review_id)}: it is open again", soft_wrap=True)
    raise typer.Exit(code=EXIT_OK)


@review_app.command("confirm")
def review_confirm(
    case_ref: Annotated[str, typer.Argument(help="Case (<run>.<line>) decided automatically.")],
    note: Annotated[str, typer.Option("--note", help="Why (recorded in the journal).")],
    decision: Annotated[
        str | None,
        typer.Option(
            "--decision",
            help="The right decision; default: the committed one. Another one corrects the record.",
        ),
    ] = None,
    reviewer: Annotated[
        str | None,
        typer.Option(
            "--reviewer", help="Who audited; default $DISSENSUS_REVIEWER, else the login name."
        ),
    ] = None,
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Audit an automatic decision: confirm it or correct it (a label for calibrate-acceptance).

    Refused while another reviewer holds a live claim on the case (as in the service).
    """
    from dissensus.pipeline.confirm import confirm
    from dissensus.pipeline.review import reviewer_name

    who = reviewer_name(reviewer)
    with _journal(journal) as store:
        audit = confirm(store, case_ref, note=note, decision=decision, reviewer=who)
    if json_out:
        print_json(audit)
    elif audit.agrees:
        out_console.print(
            f"confirmed {shown(case_ref)}: case {shown(audit.id)} -> {shown(audit.decision)}",
            soft_wrap=True,
        )
    else:
        out_console.print(
            f"corrected {shown(case_ref)}: case {shown(audit.id)} -> {shown(audit.decision)} "
            f"(committed {shown(audit.committed)})",
            soft_wrap=True,
        )
    raise typer.Exit(code=EXIT_OK)


# -- runs -----------------------------------------------------------------------------


@runs_app.command("list")
def runs_list(journal: JournalOpt = None, json_out: JsonOpt = False) -> None:
    """List the journal's runs."""
    from dissensus.io.jsonl import write_jsonl_line

    with _journal(journal) as store:
        infos = store.runs()
        finished = {i.run_id: store.get(i.run_id, "run/finished") is not None for i in infos}
    if json_out:
        from dissensus.outputs import RunSummary

        for info in infos:
            write_jsonl_line(sys.stdout, RunSummary.of(info, finished=finished[info.run_id]))
        raise typer.Exit(code=EXIT_OK)
    table = Table(show_edge=False)
    for col in ("run", "kind", "created", "events", "status", "input"):
        table.add_column(col, overflow="fold")
    for info in infos:
        status = "finished" if finished[info.run_id] else "incomplete"
        table.add_row(
            shown(info.run_id),
            info.kind,
            info.created,
            str(info.n_events),
            status,
            shown(info.meta.get("input", "-")),
        )
    out_console.print(table)
    raise typer.Exit(code=EXIT_OK)


@runs_app.command("schema")
def runs_schema(journal: JournalOpt = None, json_out: JsonOpt = False) -> None:
    """The journal's schema revision and its upgrade history (upgrades run on open)."""
    from dissensus.io.jsonl import write_jsonl_line

    with _journal(journal) as store:
        info = store.schema()
    if json_out:
        write_jsonl_line(sys.stdout, info)
        raise typer.Exit(code=EXIT_OK)
    out_console.print(
        f"schema revision {info['revision']} (this version writes {info['current']})",
        markup=False,
    )
    table = Table(show_edge=False)
    for col in ("revision", "applied", "by", "what"):
        table.add_column(col, overflow="fold")
    for row in info["history"]:
        table.add_row(
            str(row["revision"]), row["applied_at"] or "-", shown(row["applied_by"]), row["summary"]
        )
    if info["history"]:
        out_console.print(table)
    raise typer.Exit(code=EXIT_OK)


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
    events: Annotated[bool, typer.Option("--events", help="List every event.")] = False,
) -> None:
    """Show a run: header, event counts, final records."""
    from dissensus.pipeline.review import final_records
    from dissensus.pipeline.spec import RunSpec
    from dissensus.store import event_types as ev

    with _journal(journal) as store:
        info = store.run(run_id)
        assert info is not None
        evs = list(store.events(run_id))
        records = final_records(store, run_id)
    by_type = Counter(e.type for e in evs)
    started = next((e for e in evs if e.key == "run/started"), None)
    spec = RunSpec.from_started(started.payload).summary() if started is not None else None
    checked = next((e for e in evs if e.key == "run/shift"), None)
    shift = checked.payload if checked is not None else None
    if json_out:
        data: dict[str, object] = {
            "run": info.model_dump(),
            "spec": spec,
            "shift": shift,
            "events": dict(sorted(by_type.items())),
            "finished": any(e.type == ev.RUN_FINISHED for e in evs),
            "records": [r.model_dump(mode="json") for r in records],
        }
        print_json(data)
        raise typer.Exit(code=EXIT_OK)
    out_console.print(f"run {shown(info.run_id)} ({info.kind}) created {info.created}")
    out_console.print(f"events {info.n_events}, head {info.head_hash[:16]}...")
    if spec is not None:
        _print_spec(spec)
    if shift is not None:
        from dissensus.pipeline.shift import shift_words

        out_console.print(f"shift check: {shift_words(shift)}", soft_wrap=True)
    out_console.print("by type: " + ", ".join(f"{k} {v}" for k, v in sorted(by_type.items())))
    actions = Counter(r.action for r in records)
    out_console.print(
        f"{len(records)} case record(s): "
        + ", ".join(f"{k} {v}" for k, v in sorted(actions.items()))
    )
    if events:
        for e in evs:
            out_console.print(f"{e.seq:>6} {e.type:<18} {shown(e.key)}")
    raise typer.Exit(code=EXIT_OK)


def _print_spec(spec: JsonObject) -> None:
    # RunSpec.summary()'s JSON, printed as it is.
    """The run specification's lines of ``runs show``."""
    budget = spec["budget"]
    out_console.print(
        f"policy {shown(str(spec['policy_file'] or '(built-in defaults)'))}, similarity "
        f"{shown(str(spec['similarity']))}, model {shown(str(spec['model'] or '(none)'))}, "
        f"concurrency {spec['concurrency']}, deadline "
        f"{spec['deadline_s'] if spec['deadline_s'] is not None else 'none'}, budget "
        f"{budget['max_calls']} calls / {budget['max_tokens']} tokens"
    )
    for agent, model in sorted(spec["models"].items()):
        out_console.print(f"  model of {shown(agent)}: {shown(model)}")
    for f in spec["files"]:
        out_console.print(f"  {shown(f['role'])}: {shown(f['path'])} sha256 {f['sha256']}")
    if spec.get("shift_hold"):
        out_console.print(f"acceptance held: {shown(str(spec['shift_hold']))}", soft_wrap=True)


@runs_app.command("export")
def runs_export(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    journal: JournalOpt = None,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
) -> None:
    """Export a run's events as JSONL (with hashes: verifiable without this program)."""
    from dissensus.io.jsonl import write_jsonl_line
    from dissensus.store.journal import journal_path

    check_output_path(output, option="--output", inputs=[journal_path(journal)])
    with _journal(journal) as store:
        store.run(run_id)
        with output_handle(output) as handle:
            for event in store.events(run_id):
                write_jsonl_line(handle, event)
    raise typer.Exit(code=EXIT_OK)


@runs_app.command("verify")
def runs_verify(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
    public_key: Annotated[
        str | None,
        typer.Option(
            "--public-key", help="Ed25519 public key (PEM): also check the run's signed head."
        ),
    ] = None,
) -> None:
    """Recompute the run's hash chain; exit 1 when any event was edited, removed, inserted or reordered.

    With --public-key, exit 1 also when the run's head is unsigned or its signature invalid.
    """
    from dissensus.signing import load_public_key

    key = load_public_key(public_key) if public_key else None
    with _journal(journal) as store:
        report = store.verify(run_id, public_key=key)
    ok = report.ok and (key is None or report.signature == "signed")
    if json_out:
        print_json(report)
    elif report.ok:
        state = "" if report.finished else " (not finished: interrupted, or its tail was removed)"
        out_console.print(
            f"run {shown(run_id)}: OK, {report.n_events} events, head {report.head_hash}{state}"
        )
    else:
        err_console.print(f"run {shown(run_id)}: FAILED")
        for problem in report.problems:
            err_console.print(f"  {shown(problem)}")
    if key is not None and not json_out:
        console = out_console if report.signature == "signed" else err_console
        console.print(f"signature: {shown(report.signature)} ({shown(report.signature_detail)})")
    raise typer.Exit(code=EXIT_OK if ok else EXIT_FAILURE)


@runs_app.command("resume")
def runs_resume(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
    rejects: Annotated[
        str | None, typer.Option("--rejects", help="Write rejected lines here (JSONL).")
    ] = None,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Write records here instead of stdout.")
    ] = None,
    deadline: DeadlineOpt = None,
) -> None:
    """Finish a run that was interrupted; completed steps and model calls are replayed, not redone."""
    from dissensus.pipeline.batch import check_resumable
    from dissensus.store.journal import journal_path

    target = journal_path(journal)
    with _journal(target) as store:
        store.run(run_id)
        check_resumable(store, run_id)
        started = store.get(run_id, "run/started")
        source = started.payload["input"] if started else {}
        path = source.get("path")
        inputs = [target, path]
        check_output_path(output, option="--output", inputs=inputs)
        check_output_path(rejects, option="--rejects", inputs=[*inputs, output])
        if path not in (None, "-") and not os.path.isfile(str(path)):
            raise InputError(f"cannot resume run {run_id}: its input file is gone: {path}")
        total = count_lines(str(path)) if path not in (None, "-") and progress_enabled() else None
        code = _run(
            store,
            run_id,
            json_out=json_out,
            output=output,
            rejects=rejects,
            total=total,
            deadline=deadline,
        )
    raise typer.Exit(code=code)
