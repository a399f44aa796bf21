"""CLI commands of the composed pipeline: ``decide``, ``review ...``, ``runs ...``.

* ``dissensus decide PANELS.jsonl [--policy FILE] [--journal PATH] [--json] [--rejects FILE]``
* ``dissensus review list | show ID | resolve ID --decision X --note TEXT``
* ``dissensus runs list | show ID | export ID | verify ID | resume ID``

The journal is ``--journal PATH``, else ``$DISSENSUS_JOURNAL``, else
``./dissensus-journal.sqlite``. ``$DISSENSUS_FAULT_KILL_AFTER`` (an integer N) makes the
process kill itself with SIGKILL right after its N-th journalled event: the switch the
crash tests use to stop a run at a chosen point.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import IO, Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from dissensus.cli.app import app
from dissensus.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    check_input_path,
    err_console,
    exit_for,
    out_console,
    output_handle,
    print_json,
)
from dissensus.io.jsonl import Reject, RejectSink, write_jsonl_line
from dissensus.pipeline.batch import execute_run, start_run
from dissensus.pipeline.policy import load_policy
from dissensus.pipeline.records import CaseRecord
from dissensus.pipeline.review import final_records, find_item, list_items, resolve
from dissensus.signing import load_public_key, signer_from_env
from dissensus.store.journal import Event, Journal, is_postgres_url, journal_path

review_app = typer.Typer(help="The human review queue: escalated cases waiting for a decision.", no_args_is_help=True)
runs_app = typer.Typer(help="Runs in the journal: list, inspect, export, verify, resume.", no_args_is_help=True)
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

FAULT_ENV = "DISSENSUS_FAULT_KILL_AFTER"


def _fault_hook() -> Callable[[Event], None] | None:
    raw = os.environ.get(FAULT_ENV)
    if not raw:
        return None
    limit = int(raw)
    seen = [0]

    def hook(_: Event) -> None:
        seen[0] += 1
        if seen[0] >= limit:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def _open(path: str | None, *, must_exist: bool = False) -> Journal:
    target = journal_path(path)
    if must_exist and not is_postgres_url(target) and not os.path.exists(target):
        raise typer.BadParameter(f"journal not found: {target}", param_hint="--journal")
    return Journal(target, after_append=_fault_hook(), signer=signer_from_env())


def _count_lines(path: str) -> int | None:
    if path == "-":
        return None
    with open(path, encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip())


async def _drain(
    records: AsyncIterator[CaseRecord],
    *,
    emit: Callable[[CaseRecord], None],
    total: int | None,
) -> list[CaseRecord]:
    show = err_console.is_terminal or os.environ.get("DISSENSUS_PROGRESS") == "1"
    out: list[CaseRecord] = []
    if not show:
        async for record in records:
            emit(record)
            out.append(record)
        return out
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task("deciding", total=total)
        async for record in records:
            emit(record)
            out.append(record)
            bar.advance(task)
    return out


def _emitter(json_out: bool, handle: IO[str]) -> Callable[[CaseRecord], None]:
    def emit(record: CaseRecord) -> None:
        # Records go out as JSONL with --json, and always into an --output file.
        if json_out or handle is not sys.stdout:
            write_jsonl_line(handle, record)
            handle.flush()

    return emit


def _summary(records: list[CaseRecord], rejected: int, run_id: str, journal: str) -> None:
    actions = Counter(r.action for r in records)
    auto = sum(r.auto for r in records)
    escalated = [r for r in records if r.action == "escalate"]
    out_console.print(f"[bold]run {run_id}[/bold]  journal {journal}")
    shown = records[:20]
    width = max((len(r.id) for r in shown), default=0)
    for r in shown:
        flow = f"{r.route} -> {r.action}" if r.route != r.action else r.action
        outcome = f"decision {r.decision} ({r.basis})" if r.decision is not None else f"review {r.review_id}"
        out_console.print(f"{r.id:<{width}}  {r.state}  {flow:<28} {outcome}", highlight=False, soft_wrap=True)
    if len(records) > len(shown):
        out_console.print(f"... {len(records) - len(shown)} more case(s) (use --json for every record)")
    n = len(records)
    share = f" ({auto / n:.0%})" if n else ""
    out_console.print(
        f"{n} case(s): {auto} decided automatically{share}, {len(escalated)} waiting for review"
        + (f", {rejected} rejected line(s)" if rejected else "")
    )
    out_console.print("by action: " + ", ".join(f"{k} {v}" for k, v in sorted(actions.items())))
    if escalated:
        out_console.print(
            f"review them: dissensus review list --journal {journal}  |  dissensus review show {escalated[0].review_id}"
        )


def _run(journal: Journal, run_id: str, *, json_out: bool, output: str | None, rejects: str | None, total: int | None) -> int:
    with RejectSink(rejects) as sink, output_handle(output) as handle:

        def on_reject(reject: Reject) -> None:
            sink.add(reject)

        records = asyncio.run(
            _drain(execute_run(journal, run_id, on_reject=on_reject), emit=_emitter(json_out, handle), total=total)
        )
        if not json_out:
            _summary(records, sink.count, run_id, journal.path)
        return exit_for(sink.count)


@app.command("decide")
def decide_cmd(
    panels: Annotated[str, typer.Argument(help="Panels, one JSON object a line ('-' = stdin).")],
    policy: Annotated[str | None, typer.Option("--policy", help="Pipeline policy (YAML). Default: built-in defaults.")] = None,
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
    rejects: Annotated[str | None, typer.Option("--rejects", help="Write rejected lines here (JSONL).")] = None,
    output: Annotated[str | None, typer.Option("--output", "-o", help="Write records here instead of stdout.")] = None,
    run_id: Annotated[str | None, typer.Option("--run-id", help="Id of the new run (default: random).")] = None,
    similarity: Annotated[str | None, typer.Option("--similarity", help="Override the policy's similarity backend (minilm, tfidf).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model spec for live follow-ups (default: policy, $DISSENSUS_MODEL).")] = None,
) -> None:
    """Decide every panel: read -> guard -> route -> protocol -> record, journalled and resumable."""
    check_input_path(panels)
    pol, pol_dir = load_policy(policy)
    store = _open(journal)
    try:
        info = start_run(
            store, panels, pol, policy_file=policy, policy_dir=pol_dir, run_id=run_id, model=model, similarity=similarity
        )
        total = _count_lines(panels)
        code = _run(store, info.run_id, json_out=json_out, output=output, rejects=rejects, total=total)
    finally:
        store.close()
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
    store = _open(journal, must_exist=True)
    try:
        items = list(list_items(store, run_id=run, include_resolved=all_items))
    finally:
        store.close()
    if json_out:
        for st in items:
            write_jsonl_line(
                sys.stdout,
                {
                    "review_id": st.item.review_id,
                    "id": st.item.id,
                    "reason": st.item.reason,
                    "suggestion": st.item.suggestion,
                    "options": st.item.options,
                    "status": "resolved" if st.resolution else "open",
                    "resolution": st.resolution.model_dump() if st.resolution else None,
                },
            )
        raise typer.Exit(code=EXIT_OK)
    if not items:
        out_console.print("no review items" + ("" if all_items else " open"))
        raise typer.Exit(code=EXIT_OK)
    table = Table(show_edge=False)
    for col in ("review id", "case", "status", "suggestion", "reason"):
        table.add_column(col, overflow="fold")
    for st in items:
        status = f"resolved: {st.resolution.decision}" if st.resolution else "open"
        table.add_row(st.item.review_id, st.item.id, status, st.item.suggestion or "-", st.item.reason)
    out_console.print(table)
    raise typer.Exit(code=EXIT_OK)


@review_app.command("show")
def review_show(
    review_id: Annotated[str, typer.Argument(help="Review id (<run>.<line>).")],
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show everything a reviewer needs: the case, positions and value profiles side by side."""
    store = _open(journal, must_exist=True)
    try:
        st = find_item(store, review_id)
    finally:
        store.close()
    if json_out:
        data = st.item.model_dump(mode="json")
        data["resolution"] = st.resolution.model_dump() if st.resolution else None
        print_json(data)
        raise typer.Exit(code=EXIT_OK)
    item = st.item
    out_console.print(f"[bold]review {item.review_id}[/bold]  case {item.id}  (run {item.run_id}, line {item.line})")
    out_console.print(f"status: {'resolved: ' + st.resolution.decision if st.resolution else 'open'}")
    out_console.print(f"why escalated: {item.reason}")
    question = item.panel.get("meta", {}).get("question") or item.panel.get("meta", {}).get("input")
    if question:
        out_console.print(f"question: {_excerpt(str(question), 400)}", highlight=False)
    out_console.print(f"options: {', '.join(item.options) or '-'}   panel suggestion: {item.suggestion or '-'}")
    reading = item.reading
    out_console.print(
        f"reading: {reading.get('state')}  agreement {reading.get('agreement', 0):.2f}  "
        f"mean similarity {reading.get('mean_similarity', 0):.2f} ({reading.get('model')})"
    )
    options = _option_texts(item.panel.get("meta", {}))
    for oid, text in options:
        out_console.print(f"  option {oid}: {_excerpt(text, 200)}", highlight=False)
    scores = {x["agent"]: x for x in (item.acceptance or {}).get("signals", [])}
    table = Table(show_edge=False, title="positions")
    for col in ("agent", "family", "decision", "re-ask", "stable", "margin", "conf.", *item.value_dimensions):
        table.add_column(col, overflow="fold")
    for p in item.positions:
        values = [f"{p.values[d]:.2f}" if p.values and d in p.values else "-" for d in item.value_dimensions]
        table.add_row(
            p.agent,
            p.family or "-",
            p.decision or "(abstained)",
            p.second or "-",
            "-" if p.stable is None else ("yes" if p.stable else "no"),
            str(scores[p.agent]["score"]) if p.agent in scores else "-",
            "-" if p.confidence is None else f"{p.confidence:.2f}",
            *values,
        )
    out_console.print(table)
    out_console.print("reasoning (excerpts):")
    for p in item.positions:
        out_console.print(f"  {p.agent}: {_excerpt(p.reasoning, 220)}", highlight=False)
    if item.packet:
        sel = item.packet.get("selected") or {}
        out_console.print(
            f"DCI packet: path {item.packet.get('path')}, selected {sel.get('label') or sel.get('id') or '-'}: "
            f"{_excerpt(str(sel.get('rationale', '')), 200)}",
            highlight=False,
        )
        status = item.packet.get("status", "complete")
        detail = f" ({item.packet.get('status_detail')})" if status != "complete" and item.packet.get("status_detail") else ""
        out_console.print(
            f"  packet status: {status}{detail}; residual objections "
            f"{len(item.packet.get('residual_objections') or [])}, minority positions "
            f"{len(item.packet.get('minority_report') or [])}",
            highlight=False,
        )
    if item.concord:
        out_console.print(f"CONCORD: {item.concord.get('status')} ({item.concord.get('summary')})")
    out_console.print(f"resolve: dissensus review resolve {item.review_id} --decision X --note TEXT")
    raise typer.Exit(code=EXIT_OK)


def _excerpt(text: str, limit: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _option_texts(meta: dict[str, object]) -> list[tuple[str, str]]:
    raw = meta.get("options")
    if isinstance(raw, list):
        return [(str(o.get("id")), str(o.get("text", ""))) if isinstance(o, dict) else (str(o), str(o)) for o in raw]
    if isinstance(raw, dict):
        return [(str(k), str(v)) for k, v in raw.items()]
    if "output_1" in meta and "output_2" in meta:
        return [("1", str(meta["output_1"])), ("2", str(meta["output_2"]))]
    return []


@review_app.command("resolve")
def review_resolve(
    review_id: Annotated[str, typer.Argument(help="Review id (<run>.<line>).")],
    decision: Annotated[str, typer.Option("--decision", help="The decision taken.")],
    note: Annotated[str, typer.Option("--note", help="Why (recorded in the journal).")],
    reviewer: Annotated[str | None, typer.Option("--reviewer", help="Who decided.")] = None,
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Record a human decision; the case resumes with it as its final record."""
    store = _open(journal, must_exist=True)
    try:
        options = find_item(store, review_id).item.options
        record = resolve(store, review_id, decision=decision, note=note, reviewer=reviewer)
    finally:
        store.close()
    if options and decision not in options:
        err_console.print(
            f"note: {decision!r} is none of the case's options ({', '.join(options)}); journalled as outside_options",
            markup=False,
        )
    if json_out:
        print_json(record)
    else:
        out_console.print(f"resolved {review_id}: case {record.id} -> {record.decision}")
    raise typer.Exit(code=EXIT_OK)


# -- runs -----------------------------------------------------------------------------


@runs_app.command("list")
def runs_list(journal: JournalOpt = None, json_out: JsonOpt = False) -> None:
    """List the journal's runs."""
    store = _open(journal, must_exist=True)
    try:
        infos = store.runs()
        finished = {i.run_id: store.get(i.run_id, "run/finished") is not None for i in infos}
    finally:
        store.close()
    if json_out:
        for info in infos:
            data = info.model_dump()
            data["finished"] = finished[info.run_id]
            write_jsonl_line(sys.stdout, data)
        raise typer.Exit(code=EXIT_OK)
    table = Table(show_edge=False)
    for col in ("run", "kind", "created", "events", "status", "input"):
        table.add_column(col, overflow="fold")
    for info in infos:
        status = "finished" if finished[info.run_id] else "incomplete"
        table.add_row(info.run_id, info.kind, info.created, str(info.n_events), status, str(info.meta.get("input", "-")))
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
    store = _open(journal, must_exist=True)
    try:
        info = store.run(run_id)
        assert info is not None
        evs = list(store.events(run_id))
        records = final_records(store, run_id)
    finally:
        store.close()
    by_type = Counter(e.type for e in evs)
    if json_out:
        data = {
            "run": info.model_dump(),
            "events": dict(sorted(by_type.items())),
            "finished": any(e.type == "run.finished" for e in evs),
            "records": [r.model_dump(mode="json") for r in records],
        }
        print_json(data)
        raise typer.Exit(code=EXIT_OK)
    out_console.print(f"[bold]run {info.run_id}[/bold] ({info.kind}) created {info.created}")
    out_console.print(f"events {info.n_events}, head {info.head_hash[:16]}...")
    out_console.print("by type: " + ", ".join(f"{k} {v}" for k, v in sorted(by_type.items())))
    actions = Counter(r.action for r in records)
    out_console.print(f"{len(records)} case record(s): " + ", ".join(f"{k} {v}" for k, v in sorted(actions.items())))
    if events:
        for e in evs:
            out_console.print(f"{e.seq:>6} {e.type:<18} {e.key}")
    raise typer.Exit(code=EXIT_OK)


@runs_app.command("export")
def runs_export(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    journal: JournalOpt = None,
    output: Annotated[str | None, typer.Option("--output", "-o", help="Write here instead of stdout.")] = None,
) -> None:
    """Export a run's events as JSONL (with hashes: verifiable without this program)."""
    store = _open(journal, must_exist=True)
    try:
        store.run(run_id)
        with output_handle(output) as handle:
            for event in store.events(run_id):
                write_jsonl_line(handle, event)
    finally:
        store.close()
    raise typer.Exit(code=EXIT_OK)


@runs_app.command("verify")
def runs_verify(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
    public_key: Annotated[
        str | None, typer.Option("--public-key", help="Ed25519 public key (PEM): also check the run's signed head.")
    ] = None,
) -> None:
    """Recompute the run's hash chain; exit 1 when any event was edited, removed, inserted or reordered.

    With --public-key, exit 1 also when the run's head is unsigned or its signature invalid.
    """
    key = load_public_key(public_key) if public_key else None
    store = _open(journal, must_exist=True)
    try:
        report = store.verify(run_id, public_key=key)
    finally:
        store.close()
    ok = report.ok and (key is None or report.signature == "signed")
    if json_out:
        print_json(report)
    elif report.ok:
        state = "" if report.finished else " (not finished: interrupted, or its tail was removed)"
        out_console.print(f"run {run_id}: OK, {report.n_events} events, head {report.head_hash}{state}", highlight=False)
    else:
        err_console.print(f"run {run_id}: FAILED", markup=False)
        for problem in report.problems:
            err_console.print(f"  {problem}", markup=False)
    if key is not None and not json_out:
        console = out_console if report.signature == "signed" else err_console
        console.print(f"signature: {report.signature} ({report.signature_detail})", markup=False, highlight=False)
    raise typer.Exit(code=EXIT_OK if ok else EXIT_FAILURE)


@runs_app.command("resume")
def runs_resume(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
    rejects: Annotated[str | None, typer.Option("--rejects", help="Write rejected lines here (JSONL).")] = None,
    output: Annotated[str | None, typer.Option("--output", "-o", help="Write records here instead of stdout.")] = None,
) -> None:
    """Finish a run that was interrupted; completed steps and model calls are replayed, not redone."""
    store = _open(journal, must_exist=True)
    try:
        info = store.run(run_id)
        assert info is not None
        started = store.get(run_id, "run/started")
        source = started.payload["input"] if started else {}
        total = None if source.get("path") in (None, "-") else _count_lines(str(source["path"]))
        code = _run(store, run_id, json_out=json_out, output=output, rejects=rejects, total=total)
    finally:
        store.close()
    raise typer.Exit(code=code)
