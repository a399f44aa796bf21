"""CLI commands of CONCORD (``docs/concord.md``): ``negotiate``, ``verify``, ``bound``.

* ``dissensus negotiate PROBLEM.yaml`` runs the protocol; ``--json`` prints the
  certificate, ``--out`` writes it, ``--compare`` adds the comparison with other decision
  rules (with ``--json``: ``{"certificate": ..., "comparison": [...]}``), ``--deadline``
  stops the run and returns the current leader; Ctrl-C does the same (cancellation). A
  comparison that does not finish (deadline, Ctrl-C, an arbiter whose model fails) leaves
  the certificate: one stderr line says why, ``"comparison": null`` under ``--json``.
  Exit 0 whatever the status (``certified`` or ``best_effort``), 2 on a bad problem file
  (one line naming the file, the field and the line it is written on, ``(line 12)``,
  whether the file, an agent's module or its anchors at run time is wrong),
  1 (after the record) when the run is not certified, model calls were made and every
  one of them failed to reach the server: counted by the protocol from the failures'
  ``kind`` (``connection``, as the model client reports it), never read from the words
  of fault messages, so function and table agents' faults never count. The human
  output shows a score beside the floor with two decimals, or with as many digits as
  tell a score below the floor from it (the shortfall, an agent's calibrated score
  below the floor, a worst-off recorded below it; the floor whole when two decimals do
  not hold it), as the reason of a pipeline's CONCORD step does
  (:func:`~dissensus.concord.scale.below_floor`). A ``--compare`` row that fails the
  floor for an agent whose score the record rounded onto it shows that agent's
  unrounded score (just below the floor for a written plan), never the floor itself.
* ``dissensus verify CERT.json`` recomputes every property; exit 0 valid, 1 invalid
  (naming the first violated property), 2 unreadable (not JSON, not a JSON object). A
  JSON object that is not a certificate is ``invalid: schema``, exit 1; a DCI decision
  packet (or a ``deliberate --json`` line) too, unless ``--public-key`` is given, which
  checks its signature. The output of ``negotiate --compare --json`` is verified for its
  certificate; with ``--public-key``, a signed one is said to leave ``comparison``
  uncovered (``unsigned_fields`` under ``--json``), as a ``deliberate --json`` line's
  fields beside its packet are.
* ``dissensus bound --agents N --rounds R`` prints the cost bound.

The model for LLM agents (and the "LLM picks" / "LLM writes" rows) is ``--model``, else
the problem file's ``model:``, else ``$DISSENSUS_MODEL``; function and table agents need
none. A problem file is trusted code: function agents' modules beside it are imported
by file path (``sys.path`` is never changed). ``--model`` is checked even when the
problem has no LLM agent: an invalid spec is exit 2, never silently unused. The
problem file's ``model:``, when it is the one used (LLM agents, or ``--compare``), is
checked the same way before any work, its errors naming the file and the field
``model``. A
recording (``record:FILE:...``) is an output: one that is the problem file, ``--out`` or
a module file a function agent names beside the problem file is refused (exit 2,
naming ``model`` and the file's role, ``agents.I.score``), before anything is appended.
``--out`` is refused (exit 2, before any agent is called) when it is the problem file,
a module a function agent names beside it (``agents.I.score``) or the file the model
reads (``scripted:``/``replay:``, labelled ``model``): the certificate was written over
the user's code or script.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from dissensus.cli.app import app
from dissensus.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    MAX_SECONDS,
    atomic_output,
    check_file_input,
    check_outputs,
    err_console,
    json_shown,
    load_json_file,
    no_dash,
    number_in,
    out_console,
    shown,
    stdout_handle,
    write_stdout,
)
from dissensus.errors import ConfigError, DissensusError, InputError

if TYPE_CHECKING:
    from dissensus.concord.problem import Problem
    from dissensus.concord.record import Certificate
    from dissensus.types import JsonObject

__all__ = ["bound", "negotiate", "verify"]

RULES = ("maximin", "leximin", "nash", "utilitarian")
"""The names of ``dissensus.concord.rules.RULES``, spelt out so that registering the
commands loads no CONCORD code (a test keeps the two equal)."""

MAX_AGENTS = 256
MAX_ROUNDS = 1000
"""``dissensus.concord.controls``' caps on a problem's agents and round budget, spelt
out for ``bound``'s options as :data:`RULES` is (a test keeps them equal)."""


def _model_spec(flag: str | None, problem: Problem) -> str | None:
    return flag or problem.model or os.environ.get("DISSENSUS_MODEL") or None


def _code_files(problem: Problem, base_dir: Path) -> dict[str, str | None]:
    """The files of Python code the problem's function agents name, beside the problem
    file (label ``agents.I.score``, ``.propose``, ``.repair``): inputs a recording must
    never be appended to."""
    from dissensus.loading import code_file

    files: dict[str, str | None] = {}
    for i, agent in enumerate(problem.agents):
        for name in ("score", "propose", "repair"):
            spec = getattr(agent, name)
            path = code_file(spec, base_dir) if spec else None
            if path is not None:
                files[f"agents.{i}.{name}"] = str(path)
    return files


def _model_reads(spec: str | None) -> dict[str, str | None]:
    """The files the model reads (a ``scripted:`` or ``replay:`` file), labelled
    ``model``: inputs ``--out`` must never overwrite."""
    from dissensus.llm.resolve import spec_reads

    reads = spec_reads(spec) if spec else []
    return {("model" if i == 0 else f"model ({i + 1})"): path for i, path in enumerate(reads)}


def _client(spec: str) -> Any:
    from dissensus.llm import resolve_model

    return resolve_model(spec)


async def _run(
    problem: Problem,
    agents: list[Any],
    deadline: float | None,
    rule: str | None,
    compare: bool,
    client: Any,
    on_record: Callable[[Certificate], None],
) -> tuple[Certificate, list[Any] | None, str | None, str | None]:
    """The negotiation, then (``compare``) the comparison: ``(certificate, rows, why the
    comparison stopped (``failed: MESSAGE`` when the arbiter's model failed), the first
    unreachable fault when every model call of the run
    failed to reach the server)``. ``on_record`` gets the certificate as soon as the negotiation
    ends, before any comparison, so an interrupt or a hung arbiter cannot lose it; the
    deadline bounds the whole command (the comparison gets what remains of it), and
    Ctrl-C during the comparison stops it (``rows`` is then ``None``)."""
    from dissensus.baselines.compare import compare_with
    from dissensus.concord.problem import negotiation_for

    started = time.monotonic()
    negotiation = negotiation_for(problem, agents, deadline_s=deadline, rule=rule)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, negotiation.cancel)
    try:
        cert = await negotiation.run()
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
    on_record(cert)
    failed = connection_failure(cert, negotiation.model_calls, negotiation.unreachable)
    if not compare:
        return cert, None, None, failed
    if cert.spent.stopped == "cancelled":
        return cert, None, "interrupted", failed
    remaining = None if deadline is None else deadline - (time.monotonic() - started)
    if remaining is not None and remaining <= 0:
        return cert, None, "deadline", failed
    arbiter = None
    if client is not None:
        from dissensus.baselines.decision_rules import LLMArbiter

        arbiter = LLMArbiter(client)
    task = asyncio.ensure_future(
        compare_with(
            cert,
            {a.id: a for a in agents},
            owner=problem.owner,
            arbiter=arbiter,
            problem=problem.problem,
        )
    )
    interrupted = False

    def interrupt() -> None:
        nonlocal interrupted
        interrupted = True
        task.cancel()

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, interrupt)
    try:
        done, _ = await asyncio.wait({task}, timeout=remaining)
        if task not in done:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return cert, None, "deadline", failed
        if task.cancelled():
            return cert, None, "interrupted" if interrupted else "cancelled", failed
        error = task.exception()
        if isinstance(error, DissensusError | ValueError):  # the arbiter's model failed
            return cert, None, f"failed: {' '.join(str(error).split())}", failed
        return cert, task.result(), None, failed
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)


async def _closing(run: Any, client: Any) -> Any:
    """Await ``run``, then release the model client (if any) on the same loop."""
    try:
        return await run
    finally:
        if client is not None:
            await client.aclose()


@app.command("negotiate")
def negotiate(
    problem_file: str = typer.Argument(
        ..., metavar="PROBLEM.yaml", help="The problem file (YAML)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the certificate as JSON."),
    out: str | None = typer.Option(
        None, "--out", "-o", help="Write the certificate (JSON) to this file."
    ),
    deadline: float | None = typer.Option(
        None,
        "--deadline",
        callback=number_in(0.0, MAX_SECONDS),
        help="Stop after SECONDS; return the current leader.",
    ),
    compare: bool = typer.Option(
        False, "--compare", help="Compare with other decision rules on the same scores."
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        help="Model spec for LLM agents and the LLM rows (openai:M, scripted:FILE, ...).",
    ),
    rule: str | None = typer.Option(
        None,
        "--rule",
        help=f"Selection rule: {', '.join(RULES)} (default: the file's, else maximin).",
    ),
) -> None:
    """Negotiate one decision with CONCORD and print its certificate or shortfall."""
    from dissensus.agents.assembly import build_agents
    from dissensus.concord.problem import load_problem, with_line
    from dissensus.signing import sign_document, signer_from_env

    no_dash(out, "--out", "standard output carries the report; --json prints the certificate there")
    check_file_input(problem_file, "PROBLEM.yaml", "problem file")
    if rule is not None and rule not in RULES:
        raise ConfigError(
            f"unknown rule {rule!r}; expected one of {', '.join(RULES)}", field="rule"
        )
    check_outputs({"--out": out}, reads={"PROBLEM.yaml": problem_file})
    if model is not None:  # checked whether or not the problem needs a model
        from dissensus.llm.resolve import check_model_spec

        check_model_spec(model, files={"PROBLEM.yaml": problem_file, "--out": out})
    problem = load_problem(problem_file)
    spec = _model_spec(model, problem)
    from dissensus.llm.resolve import check_model_spec, check_recordings

    code = _code_files(problem, Path(problem_file).parent)
    files = {"PROBLEM.yaml": problem_file, "--out": out} | code
    # --out is never a file the run reads: an agent's module, the model's script
    reads: dict[str, str | None] = code | _model_reads(spec)
    check_outputs({"--out": out}, reads=reads)
    check_recordings(spec, files)
    needs_model = any(a.kind == "llm" for a in problem.agents)
    if model is None and spec and spec == problem.model and (needs_model or compare):
        try:  # the file's model:, checked before any work and named as its field
            check_model_spec(spec, files=files)
        except ConfigError as exc:
            located = ConfigError(exc.message, file=problem_file, field="model")
            raise with_line(located, problem_file) from None
    client = _client(spec) if spec and (needs_model or compare) else None
    if needs_model and client is None:
        raise ConfigError(
            "the problem has LLM agents: configure a model (--model or DISSENSUS_MODEL)",
            file=problem_file,
            field="model",
        )
    try:
        agents = build_agents(
            problem,
            base_dir=Path(problem_file).parent,
            client=client,
            file=problem_file,
            threaded=deadline is not None,
        )
    except ConfigError as exc:  # a module that does not load: the line of its field
        raise with_line(exc, problem_file) from None
    signer = signer_from_env()
    record: dict[str, JsonObject] = {}

    def on_record(cert: Certificate) -> None:
        """The negotiation's record, written and printed before any comparison."""
        cert_doc: JsonObject = cert.model_dump(mode="json")  # signed as it is
        if signer is not None:  # $DISSENSUS_SIGNING_KEY: the certificate carries a signature
            cert_doc = sign_document(cert_doc, signer)
        record["certificate"] = cert_doc
        if out:
            with atomic_output(out) as handle:
                handle.write(json_shown(json.dumps(cert_doc, indent=2, ensure_ascii=False)) + "\n")
        if as_json and not compare:
            write_stdout(json_shown(json.dumps(cert_doc, indent=2, ensure_ascii=False)) + "\n")
        elif not as_json:
            _print_certificate(cert)
        stdout_handle().flush()

    try:
        cert, rows, stopped, failed = asyncio.run(
            _closing(_run(problem, agents, deadline, rule, compare, client, on_record), client)
        )
    except ConfigError as exc:
        if exc.file is not None:
            raise
        # A run-time configuration error (an agent's equal anchors): name the file too,
        # and the line of the agent it names.
        message = str(exc).removeprefix(f"field {exc.field!r}: " if exc.field else "")
        located = ConfigError(message, file=problem_file, field=exc.field)
        raise with_line(located, problem_file, agents=[a.id for a in problem.agents]) from exc
    if as_json and compare:
        comparison = None if rows is None else [r.model_dump(mode="json") for r in rows]
        doc = {"certificate": record["certificate"], "comparison": comparison}
        write_stdout(json_shown(json.dumps(doc, indent=2, ensure_ascii=False)) + "\n")
    elif rows is not None:
        _print_comparison(rows, cert)
    if stopped is not None:
        err_console.print(_stopped_line(stopped), markup=False)
    if failed is not None:
        err_console.print(
            f"error: connection failed: every model call failed to reach the server ({shown(failed)})"
        )
        raise typer.Exit(code=EXIT_FAILURE)
    raise typer.Exit(code=EXIT_OK)


def _stopped_line(stopped: str) -> str:
    """The stderr line saying why the comparison did not finish (the certificate stands)."""
    if stopped.startswith("failed: "):
        return (
            f"the comparison failed: {shown(stopped.removeprefix('failed: '))}; "
            "the certificate stands"
        )
    return {
        "interrupted": "interrupted: the comparison was not run to its end; the certificate stands",
        "cancelled": "the comparison was cancelled; the certificate stands",
        "deadline": "deadline: no time was left for the comparison; the certificate stands",
    }[stopped]


def connection_failure(cert: Certificate, model_calls: int, unreachable: list[str]) -> str | None:
    """The first of the ``unreachable`` faults when the run is not certified, made model
    calls and every one of them failed to reach the server; else ``None``.

    ``model_calls`` and ``unreachable`` are the protocol's counts
    (:attr:`~dissensus.concord.protocol.Negotiation.unreachable`: failures of ``kind``
    ``connection``), never the words of fault messages: a table agent's missing entry for
    ``connection-pool`` or a function agent's ``invalid connection string`` is no model
    call, and a certified run did reach a decision."""
    if cert.status == "certified" or model_calls == 0 or len(unreachable) < model_calls:
        return None
    return " ".join(unreachable[0].split())


def _fmt_floor(floor: float) -> str:
    """The floor: two decimals, or its shortest ``repr`` when they do not hold it."""
    text = f"{floor:.2f}"
    return text if float(text) == floor else repr(floor)


def _fmt_score(value: float | None, floor: float, gap: float | None = None) -> str:
    """A score beside the floor: two decimals, or as many digits as keep it on its side of
    the floor (a score below it never reads at or above it, a score at or above it
    never reads below it; :func:`~dissensus.concord.scale.below_floor`). ``gap`` is the
    agent's shortfall, which tells a score the record rounded onto the floor."""
    from dissensus.concord.scale import below_floor

    if value is None:
        return "—"
    if gap is not None:
        return below_floor(value, gap, floor)
    if value < floor:
        return below_floor(value, floor - value, floor)
    text = f"{value:.2f}"  # at or above the floor: never shown below it (0.703 by 0.701)
    return text if float(text) >= floor else repr(value)


def _print_certificate(cert: Certificate) -> None:
    from dissensus.concord.scale import below_floor, gap_text

    con = out_console
    b = cert.budget
    regime = (
        "group channel" if b.topology == "group" else f"workflow graph ({len(b.edges or [])} edges)"
    )
    con.print(
        f"CONCORD {cert.status}  floor {_fmt_floor(cert.floor)}, margin "
        f"{cert.margin:.2f}, rule {b.rule}, {regime}, stopped: {cert.spent.stopped}"
    )
    if cert.selected:
        s = cert.selected
        con.print(
            f"Selected {shown(s.id)} (by {shown(s.author)}, round {s.round}): {shown(s.text)}"
        )
    else:
        con.print("No candidate was scored by every agent; nothing selected.")
    path = " → ".join(_fmt_score(step.worst_off, cert.floor) for step in cert.trajectory)
    con.print(f"Worst-off of the leader per round: {path}")
    table = Table(title="Trajectory", show_lines=False)
    for col in ("round", "leader", "worst-off", "bottleneck", "new candidate", "accepted", "notes"):
        table.add_column(col)
    for step in cert.trajectory:
        notes = (
            step.ties
            + step.notes
            + [f"fault {f.agent} ({f.phase}): {f.message}" for f in step.faults]
        )
        table.add_row(
            str(step.round),
            shown(step.leader or "—"),
            _fmt_score(step.worst_off, cert.floor),
            shown(step.bottleneck or "—"),
            shown(step.candidate or "—"),
            "—" if step.accepted is None else ("yes" if step.accepted else "no"),
            shown("; ".join(notes)),
        )
    con.print(table)
    scores = Table(title="Scores on the selected candidate")
    for col in ("agent", "calibrated", "raw", "anchors (rejected, ideal)", "status"):
        scores.add_column(col)
    below = {s.agent: s.gap for s in cert.shortfall}  # judged on the unrounded scores
    for agent, st in cert.scores.items():
        ok = st.calibrated is not None and agent not in below
        status = st.fault or ("≥ floor" if ok else "below floor")
        scores.add_row(
            shown(agent),
            _fmt_score(st.calibrated, cert.floor, below.get(agent)),
            "—" if st.raw is None else f"{st.raw:.15g}",
            f"{st.anchors.rejected}, {st.anchors.ideal}",
            shown(status),
        )
    con.print(scores)
    if cert.shortfall:
        con.print(
            "Shortfall: "
            + ", ".join(
                f"{shown(s.agent)} {below_floor(s.score, s.gap, cert.floor)} (gap {gap_text(s.gap)})"
                for s in cert.shortfall
            )
        )
    if cert.unknown:
        con.print(
            f"Unknown (not connected by the graph): {', '.join(map(shown, cert.unknown))}; "
            f"the certificate covers {', '.join(map(shown, cert.covered))} only."
        )
    sp, bd = cert.spent, cert.bound
    con.print(
        f"Spent / bound: rounds {sp.rounds}/{bd.rounds}, candidates {sp.candidates}/{bd.candidates}, "
        f"evaluations {sp.evaluations}/{bd.evaluations}, model calls {sp.model_calls}/{bd.model_calls} "
        f"(attempts {sp.attempts}); messages {sp.messages}, longest relay {sp.hops} hop(s)"
    )
    con.print(f"digest {cert.digest}")


def _row_worst_off(row: Any, cert: Certificate, exact: dict[str, dict[str, float | None]]) -> str:
    """A comparison row's worst-off beside the floor: a pick that fails for an agent whose
    score the record rounded onto the floor reads below it, as the certificate's own
    shortfall does (its unrounded score when the pick is a candidate of the record; just
    below the floor for a written plan)."""
    value, floor = row.worst_off, cert.floor
    if value is None or value < floor or not row.below_floor:
        return _fmt_score(value, floor)
    scores = exact.get(row.selected or "", {})
    lows = [v for a in row.below_floor if (v := scores.get(a)) is not None and v < floor]
    if lows:
        return _fmt_score(value, floor, floor - min(lows))
    if all(scores.get(a) is None for a in row.below_floor) and row.selected in exact:
        return _fmt_score(value, floor)  # faults only: recorded as 0, which is the floor
    return _fmt_score(value, floor, floor - math.nextafter(floor, -math.inf))


def _print_comparison(rows: list[Any], cert: Certificate) -> None:
    from dissensus.baselines.compare import exact_scores

    exact = exact_scores(cert)
    table = Table(title=f"Comparison on identical scores (floor {_fmt_floor(cert.floor)})")
    for col in ("strategy", "pick", "worst-off", "result", "note"):
        table.add_column(col)
    for row in rows:
        table.add_row(
            shown(row.strategy),
            shown(row.selected or "—"),
            _row_worst_off(row, cert, exact),
            shown(row.result),
            shown(row.note or ""),
        )
    out_console.print(table)


@app.command("verify")
def verify(
    cert_file: str = typer.Argument(
        ..., metavar="CERT.json", help="A certificate written by negotiate."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the verdict as JSON."),
    public_key: list[str] | None = typer.Option(
        None,
        "--public-key",
        help="Ed25519 public key (PEM): also check the signature (certificate or decision "
        "packet). Repeat it for a rotated key: the signature checks with the key it names.",
    ),
) -> None:
    """Recompute a CONCORD certificate from its raw scores; exit 1 naming the first violation.

    With --public-key, exit 1 also when the document is unsigned or its signature invalid;
    a DCI decision packet (or a deliberate --json line) is checked for its signature only.
    """
    from dissensus.concord.verify import verify as verify_record
    from dissensus.signing import document_detail, document_status, load_public_keys, signed_kind

    check_file_input(cert_file, "CERT.json", "certificate")
    key = load_public_keys(public_key) if public_key else None
    data = load_json_file(cert_file, what="certificate")
    if not isinstance(data, dict):
        raise InputError(f"{cert_file}: a certificate is a JSON object")
    beside: list[str] = []  # fields beside the certificate: neither recomputed nor signed
    if set(data) == {"certificate", "comparison"} and isinstance(data["certificate"], dict):
        # The output of `negotiate --compare --json`: verify the certificate it holds.
        data, beside = data["certificate"], ["comparison"]
    kind = signed_kind(data)
    if kind != "certificate" and key is not None:
        _verify_packet_signature(data, key, as_json)
    if kind != "certificate":  # as any JSON object that is not a certificate: exit 1
        packet = data.get("packet") if kind == "deliberation" else data
        _not_a_certificate(as_json, packet if isinstance(packet, dict) else {})
    verdict = verify_record(data)
    status = document_status(data, key) if key is not None else None
    detail = document_detail(data, key) if key is not None else None
    if as_json:
        doc = verdict.model_dump(mode="json")
        if status is not None:
            doc["signature"] = status
        if detail is not None:
            doc["signature_detail"] = detail
        if status == "signed" and beside:
            doc["unsigned_fields"] = beside
        write_stdout(json.dumps(doc, indent=2) + "\n")
    elif verdict.valid:
        out_console.print(f"valid: {', '.join(verdict.checked)} hold")
    else:
        out_console.print(f"invalid: {verdict.violated}: {shown(verdict.message)}", markup=False)
    if status is not None and not as_json:
        why = f" ({shown(detail)})" if detail is not None else ""
        if status == "signed" and beside:
            why = " (the certificate); not covered by the signature: " + ", ".join(beside)
        out_console.print(f"signature: {status}{why}", markup=False)
    elif verdict.signature != "unsigned" and not as_json:  # present, and no key checked it
        out_console.print(f"signature: {verdict.signature}", markup=False)
    ok = verdict.valid and status in (None, "signed")
    raise typer.Exit(code=EXIT_OK if ok else EXIT_FAILURE)


def _not_a_certificate(as_json: bool, packet: JsonObject) -> None:
    """``invalid: schema`` for a decision packet verified without ``--public-key``."""
    from dissensus.concord.verify import Verdict, signature_state

    message = (
        "a decision packet, not a certificate: it has no properties to recompute "
        "(give --public-key to check its signature)"
    )
    verdict = Verdict(
        valid=False,
        violated="schema",
        message=message,
        checked=[],
        signature=signature_state(packet),
    )
    if as_json:
        write_stdout(json.dumps(verdict.model_dump(mode="json"), indent=2) + "\n")
    else:
        out_console.print(f"invalid: schema: {message}", markup=False)
    raise typer.Exit(code=EXIT_FAILURE)


def _verify_packet_signature(data: JsonObject, key: Any, as_json: bool) -> None:
    from dissensus.signing import document_detail, document_status, signed_kind

    line = signed_kind(data) == "deliberation"
    packet = data.get("packet") if line else data
    status = document_status(packet, key) if isinstance(packet, dict) else "unsigned"
    detail = document_detail(packet, key) if isinstance(packet, dict) else None
    differs: str | None = None
    uncovered: list[str] = []
    if line and status == "signed":
        assert isinstance(packet, dict)
        differs, uncovered = _restated(data, packet)
        if differs is not None:
            status = "invalid"
    if as_json:
        doc: JsonObject = {"kind": "packet", "signature": status}
        if differs == _FORGEABLE:
            doc["differs"] = "answer"
            doc["signature_detail"] = _FORGEABLE_WHY
        elif differs is not None:
            doc["differs"] = differs
        elif detail is not None:
            doc["signature_detail"] = detail
        if line and status == "signed":
            doc["unsigned_fields"] = uncovered
        write_stdout(json.dumps(doc, indent=2) + "\n")
    elif differs == _FORGEABLE:
        out_console.print(f"decision packet: signature invalid ({_FORGEABLE_WHY})", markup=False)
    elif differs is not None:
        out_console.print(
            f"decision packet: signature invalid: the line's {shown(differs)} differs from "
            "the signed packet",
            markup=False,
        )
    elif line and status == "signed":
        out_console.print(
            "decision packet: signature signed (the packet; the line's fields restating it "
            "agree); not covered by the signature: " + (", ".join(map(shown, uncovered)) or "none"),
            markup=False,
        )
    else:
        why = f" ({shown(detail)})" if detail is not None else ""
        out_console.print(f"decision packet: signature {status}{why}", markup=False)
    raise typer.Exit(code=EXIT_OK if status == "signed" else EXIT_FAILURE)


_MISSING = object()
_FORGEABLE = "answer (earlier layout)"
"""What :func:`_restated` names when the line's ``answer`` is the packet in the layout
before participants' line breaks were indented, and participants' text in it could
forge the packet's own lines."""
_FORGEABLE_WHY = (
    "the line's answer is in the earlier layout, and participants' text in it could "
    "forge the packet's own lines (Decision:, Path:, ...)"
)


def _restated(data: JsonObject, packet: JsonObject) -> tuple[str | None, list[str]]:
    """For a ``deliberate --json`` line whose ``packet`` is signed: the first field of the
    line that restates the packet but differs from it (``None``: they all agree, as
    canonical JSON), and the fields the signature does not cover."""
    from pydantic import ValidationError

    from dissensus.canonical import canonical
    from dissensus.dci.output import packet_text, previous_layout_forges
    from dissensus.dci.packet import DecisionPacket

    try:
        model = DecisionPacket.model_validate({k: v for k, v in packet.items() if k != "signature"})
    except ValidationError:
        return "packet", []
    m, sel = model.metrics, model.selected
    expected: dict[str, object] = {
        "task_id": model.task_id,
        "question": model.question,
        "answer": packet_text(model),
        "selected_option": (sel.label or sel.id) if sel is not None else None,
        "status": model.status,
        "detail": model.status_detail,
        "usage.calls": m.calls,
        "usage.attempts": m.attempts,
        "usage.prompt_tokens": m.prompt_tokens,
        "usage.completion_tokens": m.completion_tokens,
        "extras.path": model.path,
        "extras.rounds": m.rounds,
    }
    for field, want in expected.items():
        got: object = data
        for part in field.split("."):
            got = got.get(part, _MISSING) if isinstance(got, dict) else _MISSING
        # A line written before packet_text indented participants' line breaks
        # restates an unedited packet in the previous rendering: it agrees too, unless
        # participants' text at its margin could pass for the packet's own lines.
        previous = field == "answer" and got == packet_text(model, layout="previous")
        if previous and canonical(got) != canonical(want) and previous_layout_forges(model):
            return _FORGEABLE, []
        if (got is _MISSING or canonical(got) != canonical(want)) and not previous:
            return field, []
    uncovered: list[str] = []
    for key, value in data.items():
        if key == "packet":
            continue
        if isinstance(value, dict) and key in ("usage", "extras"):
            uncovered += [f"{key}.{k}" for k in value if f"{key}.{k}" not in expected]
        elif key not in expected:
            uncovered.append(key)
    return None, uncovered


@app.command("bound")
def bound(
    agents: int = typer.Option(
        ...,
        "--agents",
        min=1,
        max=MAX_AGENTS,
        help=f"Number of negotiating agents (at most {MAX_AGENTS}, as in a problem file).",
    ),
    rounds: int = typer.Option(
        ...,
        "--rounds",
        min=0,
        max=MAX_ROUNDS,
        help=f"Round budget in repair rounds (at most {MAX_ROUNDS}, as in a problem file).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the bound as one JSON line."),
) -> None:
    """The worst-case cost of a CONCORD run, known before it starts."""
    from dissensus.concord.bounds import compute_bound

    b = compute_bound(agents, rounds)
    if as_json:
        write_stdout(json.dumps(b.model_dump()) + "\n")
    else:
        out_console.print(
            f"{agents} agents, {rounds} repair rounds: at most {b.rounds} rounds, "
            f"{b.candidates} candidates, {b.evaluations} evaluations, {b.model_calls} model calls"
        )
    raise typer.Exit(code=EXIT_OK)
