"""``dissensus runs ...``: the runs in a journal, to list, inspect, export, verify and resume.

* ``dissensus runs list | schema | show ID | export ID | verify ID | resume ID``

Choices this module makes:

* ``runs resume`` checks the run can be resumed and that its input file is still there
  before anything is decided, and ends with the records of an uninterrupted run.
* ``runs resume --output`` / ``--rejects`` never name a file the run reads: its
  journal, its input, a file its ``run.started`` names (the policy and the files the
  policy names) or the recording of one of its model specs (``record:FILE:...``, which
  the resumed run appends to), checked before anything is written.
* ``runs resume`` of an unfinished run whose journalled model specs can no longer make
  a backend (a ``scripted:`` / ``replay:`` file gone) exits 2 naming the spec before
  anything runs, as ``decide`` does: never a run finished with every follow-up failed.
* ``runs resume`` of a run another live process executes exits 2 at once, naming that
  process: its lease is looked at before the chain is verified or anything replayed.
* ``runs resume`` of a finished run prints its journalled records (exit 3 when it had
  rejected lines, as the run did) and appends nothing, whatever ``--deadline``, but,
  with ``$DISSENSUS_SIGNING_KEY`` set, the seal a crash left missing after its last
  ``run.finished`` or resolution (:mod:`dissensus.store.seals`).
* ``runs resume`` interrupted names the resume command from its first moment, with its
  ``--output FILE`` or ``--json`` as every resume line does: once it runs, here
  (:func:`said_resume_interrupted`); before (the command line being built, its options
  parsed), :func:`dissensus.cli.main`, and while the command line loads,
  :mod:`dissensus.__main__`, in the same words.
* ``runs show --json`` prints the document it printed when it held the run's records,
  character for character, but writes the records (the last field) as a second pass
  reads them, in line order (:class:`~dissensus.pipeline.review.RecordsInOrder`): a
  run of any length is shown in the same memory. Everything before them comes from
  the pass that checks the chain, as before.
* ``runs verify`` of a run that verifies and has no ``run.finished`` says why as far as
  the journal tells: a live process executing it (its pid and host, from the run's
  lock: the events it appends next are not in this check), else "interrupted, or its
  tail was removed".
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from dissensus.cli.app import app
from dissensus.cli.common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    INTERRUPT_SAID,
    Bar,
    check_output_path,
    count_lines,
    err_console,
    out_console,
    output_handle,
    print_json,
    print_json_listing,
    print_table,
    progress_enabled,
    shown,
)
from dissensus.errors import InputError
from dissensus.quoting import message_line

if TYPE_CHECKING:
    from dissensus.store import Journal
    from dissensus.store.events import Event
    from dissensus.types import JsonObject
from dissensus.cli.decide import (
    DeadlineOpt,
    EngineOpt,
    OutputOpt,
    RayAddressOpt,
    RejectsOpt,
    ShiftEveryOpt,
    WorkersOpt,
    run_and_report,
    said_interrupted,
)
from dissensus.cli.journals import JournalOpt, JsonOpt, opened_journal, warn_if_altered
from dissensus.cli.review import MAX_REVIEW_LIMIT as MAX_LIST_LIMIT

runs_app = typer.Typer(
    help="Runs in the journal: list, inspect, export, verify, resume.", no_args_is_help=True
)
app.add_typer(runs_app, name="runs")


@runs_app.command("list")
def runs_list(
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            min=1,
            max=MAX_LIST_LIMIT,
            help="At most this many runs (default: all of them).",
        ),
    ] = None,
    after: Annotated[
        str | None,
        typer.Option("--after", help="Only the runs after this one (the last of a page)."),
    ] = None,
) -> None:
    """List the journal's runs, oldest first."""
    from dissensus.io.jsonl import write_jsonl_line
    from dissensus.outputs import run_summaries

    with opened_journal(journal) as store:
        summaries = run_summaries(store, after=after, limit=limit)
    if json_out:
        for summary in summaries:
            write_jsonl_line(sys.stdout, summary)
        raise typer.Exit(code=EXIT_OK)
    table = Table(show_edge=False)
    for col in ("run", "kind", "created", "events", "status", "input"):
        table.add_column(col, overflow="fold")
    for summary in summaries:
        table.add_row(
            shown(summary.run_id),
            shown(summary.kind),  # header columns: what an edit outside dissensus wrote
            shown(summary.created),
            str(summary.n_events),
            shown(summary.status),
            shown(summary.meta.get("input", "-")),
        )
    print_table(table)
    raise typer.Exit(code=EXIT_OK)


@runs_app.command("schema")
def runs_schema(journal: JournalOpt = None, json_out: JsonOpt = False) -> None:
    """The journal's schema revision and its upgrade history (upgrades run on open)."""
    from dissensus.io.jsonl import write_jsonl_line

    with opened_journal(journal) as store:
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
    from dissensus.pipeline.audit import acceptance_of
    from dissensus.pipeline.spec import RunSpec

    with opened_journal(journal) as store:
        info = store.run(run_id)
        assert info is not None
        # One pass over the run, a page at a time: the chain's check (a damaged event is
        # the error) and, from the same rows, everything shown but the event list.
        seen = _Seen(whole=json_out)
        verified = warn_if_altered(store, run_id, each=seen.add)
        # The header as it stands once the rows are read (the check reads on to it): a
        # run appended to meanwhile is shown as far as its rows were counted.
        info = store.run(run_id) or info
        acceptance = acceptance_of(seen.started, seen.suspensions, held=seen.held)
        by_type = seen.by_type
        started, checked = seen.started, seen.shift
        spec = RunSpec.from_started(started.payload).summary() if started is not None else None
        shift = checked.payload if checked is not None else None
        if json_out:
            data: dict[str, object] = {
                "run": info.model_dump(),
                "verified": verified,
                "spec": spec,
                "shift": shift,
                "acceptance": acceptance.model_dump(mode="json")
                if acceptance is not None
                else None,
                "events": dict(sorted(by_type.items())),
                "finished": seen.finished,
            }
            # The records last, each written as a second pass reads it, in line order.
            records = seen.in_order.records(store, run_id)
            print_json_listing(data, "records", (r.model_dump(mode="json") for r in records))
            raise typer.Exit(code=EXIT_OK)
        actions = Counter(str(r) for r in seen.records.settle(store, run_id).values())
        n_records = sum(actions.values())
        out_console.print(
            f"run {shown(info.run_id)} ({shown(info.kind)}) created {shown(info.created)}"
        )
        out_console.print(f"events {info.n_events}, head {info.head_hash[:16]}...")
        if spec is not None:
            _print_spec(spec)
        if shift is not None:
            from dissensus.pipeline.shift import shift_words

            out_console.print(f"shift check: {shift_words(shift)}", soft_wrap=True)
        elif (alone := _too_small(seen)) is not None:
            out_console.print(f"shift check: {alone}", soft_wrap=True)
        stopped = acceptance.words() if acceptance is not None else None
        if stopped is not None:
            out_console.print(shown(stopped), soft_wrap=True)
        out_console.print("by type: " + ", ".join(f"{k} {v}" for k, v in sorted(by_type.items())))
        out_console.print(
            f"{n_records} case record(s): "
            + ", ".join(f"{k} {v}" for k, v in sorted(actions.items()))
        )
        if events:
            # A second pass, a page at a time: the list comes after the counts.
            for e in store.events(run_id):
                out_console.print(f"{e.seq:>6} {e.type:<18} {shown(e.key)}")
    raise typer.Exit(code=EXIT_OK)


class _Seen:
    """What ``runs show`` shows of a run, gathered from its rows as one pass meets them:
    counts by type, the ``run/started`` and ``run/shift`` events, whether it finished,
    its acceptance suspensions and hold and its final records: only their actions
    (:attr:`records`), or with ``whole`` what a second pass needs to hand them out in
    line order (:attr:`in_order`); no list of the run's events, and no record."""

    def __init__(self, *, whole: bool) -> None:
        from dissensus.pipeline.review import FinalRecords, RecordsInOrder
        from dissensus.store import event_types

        self._types = event_types

        self.by_type: Counter[str] = Counter()
        self.started: Event | None = None
        self.shift: Event | None = None
        self.finished = False
        self.suspensions: list[Event] = []
        self.held: Event | None = None
        self.records = FinalRecords(whole=False)
        self.in_order = RecordsInOrder()
        self._whole = whole

    def add(self, event: Event) -> None:
        ev = self._types
        self.by_type[event.type] += 1
        if event.key == "run/started" and self.started is None:
            self.started = event
        elif event.key == "run/shift" and self.shift is None:
            self.shift = event
        if event.type == ev.RUN_FINISHED:
            self.finished = True
        elif event.type == ev.ACCEPTANCE_SUSPENDED:
            self.suspensions.append(event)
        elif event.type == ev.ACCEPTANCE_HELD and self.held is None:
            self.held = event
        (self.in_order if self._whole else self.records).add(event)


def _limit(value: object, unit: str) -> str:
    """A budget limit as ``runs show`` prints it: ``200 calls``; ``no token limit`` for
    ``None`` (the policy sets no such limit)."""
    if value is None:
        return f"no {unit[:-1]} limit"
    return f"{value} {unit}"


def _print_spec(spec: JsonObject) -> None:
    # RunSpec.summary()'s JSON, printed as it is.
    """The run specification's lines of ``runs show``."""
    budget = spec["budget"]
    # theta_s: null when the policy gave none, or gave one for another backend than a
    # --similarity override's (not carried over): the backend's calibrated default.
    theta_s = spec.get("theta_s")
    threshold = "θ_s the backend's calibrated default" if theta_s is None else f"θ_s {theta_s}"
    out_console.print(
        f"policy {shown(str(spec['policy_file'] or '(built-in defaults)'))}, similarity "
        f"{shown(str(spec['similarity']))} ({threshold}), "
        f"model {shown(str(spec['model'] or '(none)'))}, "
        f"concurrency {spec['concurrency']}, deadline "
        f"{spec['deadline_s'] if spec['deadline_s'] is not None else 'none'}, budget "
        f"{_limit(budget['max_calls'], 'calls')} / {_limit(budget['max_tokens'], 'tokens')}"
    )
    for agent, model in sorted(spec["models"].items()):
        out_console.print(f"  model of {shown(agent)}: {shown(model)}")
    for f in spec["files"]:
        line = f"  {shown(f['role'])}: {shown(f['path'])} sha256 {f['sha256']}"
        content = spec.get("acceptance_sha256")
        if f["role"] == "acceptance.model" and content and content != f["sha256"]:
            # The file's bytes, above; its records quote the hash the file states of its
            # content (``file_sha256``), which is another digest of the same file.
            line += f" (content sha256 {content}, the file_sha256 its records quote)"
        out_console.print(line)
    # A hold (spec["shift_hold"]) is said with the run's suspensions, by runs show.


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
    with opened_journal(journal) as store:
        store.run(run_id)
        with output_handle(output) as handle:
            # One pass over the run, a page at a time: each event is written as the
            # chain's check reads it (one that does not read is the command's error).
            def write(event: Event) -> None:
                write_jsonl_line(handle, event)

            warn_if_altered(store, run_id, what="what was exported", each=write)
    raise typer.Exit(code=EXIT_OK)


@runs_app.command("verify")
def runs_verify(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
    public_key: Annotated[
        list[str] | None,
        typer.Option(
            "--public-key",
            help="Ed25519 public key (PEM): also check the run's signed head. Repeat it "
            "for a rotated key: each seal checks with the key it names.",
        ),
    ] = None,
) -> None:
    """Recompute the run's hash chain; exit 1 when any event was edited, removed, inserted or reordered.

    With --public-key, exit 1 also when the run's head is unsigned or its signature invalid.
    """
    from dissensus.signing import load_public_keys

    key = load_public_keys(public_key) if public_key else None
    with opened_journal(journal) as store:
        report = store.verify(run_id, public_key=key)
        # A run a live process executes is not finished yet: saying so, not that it was
        # interrupted or cut back, which an auditor would take for an alarm.
        holder = None if report.finished else store.run_lock_holder(run_id)
    ok = report.ok and (key is None or report.signature == "signed")
    if json_out:
        print_json(report)
    elif report.ok:
        state = (
            ""
            if report.finished
            else " (not finished: interrupted, or its tail was removed)"
            if holder is None
            else f" (not finished: being executed by pid {holder.pid} on {shown(holder.host)})"
        )
        out_console.print(
            f"run {shown(run_id)}: OK, {report.n_events} events, head {report.head_hash}{state}"
        )
    else:
        err_console.print(f"run {shown(run_id)}: FAILED")
        for problem in report.problems:
            # The values a problem names are quoted already: their escapes shown once.
            err_console.print(f"  {message_line(problem)}")
    if key is not None and not json_out:
        console = out_console if report.signature == "signed" else err_console
        console.print(f"signature: {shown(report.signature)} ({shown(report.signature_detail)})")
    raise typer.Exit(code=EXIT_OK if ok else EXIT_FAILURE)


def _too_small(seen: _Seen) -> str | None:
    """Why a finished run has no shift check of its own: it judged too few cases (the
    shift watch of ``decide`` and the one-panel doors checks them across runs)."""
    from dissensus.acceptance.shift import MIN_CASES
    from dissensus.pipeline.shift import checks_shift
    from dissensus.store import event_types as ev

    started = seen.started
    if started is None or not seen.finished or not checks_shift(started.payload.get("acceptance")):
        return None
    judged = seen.by_type.get(ev.CASE_ACCEPTANCE, 0)
    if not 0 < judged < MIN_CASES:
        return None
    return (
        f"not made for this run alone: it judged {judged} case(s), fewer than the "
        f"{MIN_CASES} a run's own check needs; the shift watch checks the cases judged with "
        "its file across runs, and a check that flags the file is listed as a run of its "
        "own (via shift-watch)."
    )


@runs_app.command("resume")
def runs_resume(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
    rejects: RejectsOpt = None,
    output: OutputOpt = None,
    deadline: DeadlineOpt = None,
    engine: EngineOpt = "local",
    ray_address: RayAddressOpt = None,
    workers: WorkersOpt = None,
    shift_every: ShiftEveryOpt = 100,
) -> None:
    """Finish a run that was interrupted; completed steps and model calls are replayed, not
    redone, on either engine, whichever the run started on."""
    try:
        code = _resume(
            run_id,
            journal,
            json_out=json_out,
            rejects=rejects,
            output=output,
            deadline=deadline,
            engine=engine,
            ray_address=ray_address,
            workers=workers,
            shift_every=shift_every,
        )
    except KeyboardInterrupt:
        # A signal while the resume starts (imports, opening the journal, checking its
        # chain): the run is as resumable as before, so the line names the command again
        # (once: a signal after the run said it stopped only ends the command).
        code = (
            EXIT_INTERRUPTED
            if INTERRUPT_SAID
            else said_resume_interrupted(run_id, journal, output, json_out, rejects)
        )
    raise typer.Exit(code=code)


def resume_interrupted_line(
    run_id: str,
    journal: str | None,
    output: str | None = None,
    json_out: bool = False,
    rejects: str | None = None,
) -> str:
    """The resume line of a ``runs resume`` interrupted before its run took the signal
    over, as :func:`~dissensus.cli.decide.said_interrupted` words it: its ``--journal``
    as given (``None``: the environment's or the default), then its ``--output FILE``
    or ``--json`` and its ``--rejects FILE`` (:func:`~dissensus.cli.decide.output_option`), so that, copied as
    shown, the command writes its records where this one was asked to."""
    from dissensus.cli.decide import output_option
    from dissensus.cli.run_summary import journal_option
    from dissensus.store.journal import journal_path

    where = shown(journal_option(journal_path(journal)))
    return (
        f"interrupted: resume with dissensus runs resume {shown(run_id)}{where}"
        f"{output_option(output, json_out, rejects)}"
    )


def said_resume_interrupted(
    run_id: str,
    journal: str | None,
    output: str | None = None,
    json_out: bool = False,
    rejects: str | None = None,
) -> int:
    """Say :func:`resume_interrupted_line`; the exit code. :func:`dissensus.cli.main`
    says it too for a signal before this command runs (while its options are parsed),
    and :mod:`dissensus.__main__` for one while the command line loads."""
    sys.stderr.write(resume_interrupted_line(run_id, journal, output, json_out, rejects) + "\n")
    sys.stderr.flush()
    INTERRUPT_SAID.append(True)
    return EXIT_INTERRUPTED


def _run_reads(target: str, path: object, started: JsonObject) -> dict[str, str | None]:
    """What a resumed run reads, ``label -> path``: the journal, its input file and every
    file its ``run.started`` names (the policy and the files the policy names), which
    ``--output`` and ``--rejects`` may not overwrite; the files its model specs read
    (:meth:`~dissensus.pipeline.spec.RunSpec.model_reads`, as ``decide`` checks them)
    are added to these."""
    reads: dict[str, str | None] = {"--journal": target}
    if isinstance(path, str):
        reads["the run's input"] = path
    files = started.get("files")
    for i, entry in enumerate(files if isinstance(files, list) else []):
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            continue
        label = f"the run's {entry.get('role') or 'file'}"
        reads[label if label not in reads else f"{label} ({i})"] = entry["path"]
    return reads


def _check_not_a_recording(store: Journal, run_id: str, outputs: dict[str, str | None]) -> None:
    """Refuse (exit 2) an output that is the recording (``record:FILE:...``) of one of
    the run's model specs: the resumed run appends its model calls there."""
    from dissensus.files import same_file
    from dissensus.pipeline.batch import run_spec

    given = {option: path for option, path in outputs.items() if path not in (None, "-")}
    if not given:
        return
    spec = run_spec(store, run_id)
    for model in (spec.model, *spec.policy.seek_context.models.values()):
        while model and model.startswith("record:"):
            recording, sep, model = model[len("record:") :].partition(":")
            for option, path in given.items():
                what = "rejects file" if option == "--rejects" else "output file"
                if sep and recording and same_file(str(path), recording):
                    raise InputError(
                        f"cannot write the {what} {path} ({option}): it is the "
                        f"recording of the run's model spec (record:{recording}:...); "
                        "refusing to overwrite it"
                    )


def _check_models(store: Journal, run_id: str) -> None:
    """Refuse (exit 2) to resume a run whose journalled model specs can no longer make a
    backend (a ``scripted:`` or ``replay:`` file gone, no key for ``openai:``), as
    ``decide`` refuses them before a run exists: every follow-up the run still had to
    make would fail and its case go to review, and the finished run would keep that."""
    from dissensus.errors import ConfigError
    from dissensus.llm.resolve import check_model_spec
    from dissensus.pipeline.batch import run_spec
    from dissensus.pipeline.gates import asks_a_model

    spec = run_spec(store, run_id)
    if not asks_a_model(spec.policy):
        return  # no follow-up (followup: none, max_followups: 0): no spec is used
    agents = spec.policy.seek_context.models
    for field, model in (
        ("model", spec.model),
        *((f"seek_context.models.{a}", m) for a, m in agents.items()),
    ):
        if not model:
            continue
        try:
            check_model_spec(model)
        except ConfigError as exc:
            raise ConfigError(
                f"cannot resume run {run_id}: its {field} cannot be used: {exc.inner()}",
                field=field,
            ) from None


def _resume(
    run_id: str,
    journal: str | None,
    *,
    json_out: bool,
    rejects: str | None,
    output: str | None,
    deadline: float | None,
    engine: str,
    ray_address: str | None,
    workers: int | None,
    shift_every: int = 100,
) -> int:
    from dissensus.engines import check_engine
    from dissensus.pipeline.batch import check_resumable, is_finished, run_spec
    from dissensus.store.journal import journal_path

    engine = check_engine(engine, workers=workers, address=ray_address)
    target = journal_path(journal)
    with opened_journal(target) as store:
        store.run(run_id)
        # Verifying the run's chain reads every event it has: said, and timed, as it goes.
        with Bar(f"resuming run {shown(run_id)}: reading the journal", announce=True):
            check_resumable(store, run_id)
        started = store.get(run_id, "run/started")
        source = started.payload["input"] if started else {}
        path = source.get("path")
        inputs = _run_reads(target, path, started.payload if started else {})
        inputs.update(run_spec(store, run_id).model_reads())  # the model's files too
        check_output_path(output, option="--output", inputs=inputs)
        inputs["--output"] = output
        check_output_path(rejects, option="--rejects", inputs=inputs)
        _check_not_a_recording(store, run_id, {"--output": output, "--rejects": rejects})
        # A finished run is replayed from the journal alone: its input may be gone.
        present = path not in (None, "-") and os.path.isfile(str(path))
        if path not in (None, "-") and not present and not is_finished(store, run_id):
            raise InputError(f"cannot resume run {run_id}: its input file is gone: {path}")
        if not is_finished(store, run_id):
            _check_models(store, run_id)
        try:
            lines = present and progress_enabled()
            total = count_lines(str(path)) if lines else None
            code = run_and_report(
                store,
                run_id,
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
        except KeyboardInterrupt:  # a signal before the run's loop took it over (or
            # after it said it stopped: said once)
            code = (
                EXIT_INTERRUPTED
                if INTERRUPT_SAID
                else said_interrupted(store, run_id, output, json_out, rejects)
            )
    return code
