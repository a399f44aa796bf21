"""``dissensus review ...``: the human review queue of escalated cases and blind audits.

* ``dissensus review list | audits | show ID | claim ID | resolve ID --decision X --note TEXT | undo ID | confirm ID``

Choices this module makes:

* ``review list`` pages as the service's ``GET /v1/review`` does: at most ``--limit``
  items (1,000 by default, the service's page), after the item ``--after`` names (a place
  in the queue, whether that item is open or resolved), each printed as it is read (a
  table holds one page). It reads one item more than the page to know whether another
  follows, and then says so with the command listing it: after the table, or on stderr
  with ``--json``, whose standard output stays one entry a line. ``--limit`` is at most
  :data:`MAX_REVIEW_LIMIT` (a billion; exit 2 above): a larger number overflowed the
  database's integers, a traceback on SQLite.
* ``review show`` of a blind audit item stays blind: neither the committed answer nor the
  suggestion is printed.
* ``review show`` of a review item prints its ``content_sha256`` (a field with ``--json``,
  as ``GET /v1/review/{id}`` answers it) and names it in the ``review resolve`` command
  it suggests: ``review resolve --content-sha256 HASH`` is refused (exit 1, nothing
  journalled) when the case is no longer the content that hash names, so a resolution
  made from the command line is bound to what the reviewer saw, as one made through the
  service. The hash is 64 hex digits (upper case read as the same hash, as the service
  reads it); anything else is exit 2 naming the option. Without the option, a resolve
  binds nothing, as a library call without ``content_sha256``.
* Text from agents and reviewers is printed verbatim, never read as console markup.
* ``review resolve --decision`` typed as ``review show`` prints an option (``yes\\x20``
  for the option ``yes ``) is that option; a text that is one option's own id and
  another's printed form (the literal ``yes\\x20`` beside ``yes ``) is exit 2 naming
  both, never either taken silently.
* ``review claim`` holds an open case for ``--ttl`` seconds (900 by default, as the
  service's claims), as ``--reviewer``: the page, the API and other CLIs then leave it to
  that reviewer until it expires or is resolved; claiming it again renews the claim, and
  ``--release`` gives it up. Someone else's live claim is exit 1 naming the holder (for
  ``--release`` too: only the holder gives a claim up), a resolved case exit 1 naming
  who resolved it. ``--release`` with no claim of the reviewer's on the case says so
  (``no claim of NAME to release on ID``; ``"released": false`` with ``--json``), exit 0.
* ``review claim`` of a blind audit item claims the audit, as the service's audit claim
  does (:func:`dissensus.pipeline.confirm.claim_audit`): ``review confirm`` by anyone
  else is refused until it expires or is released, and a case audited already is exit
  1 naming who audited it. Before, the command refused every audit item, so an auditor
  on the command line could not hold one that ``review confirm`` honours claims on.
* ``review show`` prints the question a reviewer is shown
  (:func:`dissensus.cases.asked_question`: ``meta.question`` and its kin, else a chat
  panel's last ``user`` message) and, when the panel records several messages (a system
  prompt, earlier turns), every message role by role, in order; each an excerpt of at
  most 400 characters, control characters escaped, as other long texts are.
* Decisions, options, agents and families are printed as the review page shows them
  (:func:`dissensus.quoting.visible`): whitespace at either end, and any but the space,
  escaped, so ``yes`` and ``yes `` (two options of a panel) never print alike.
"""

from __future__ import annotations

import re
import shlex
import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from dissensus.cli.app import app
from dissensus.cli.common import (
    EXIT_OK,
    MAX_SECONDS,
    err_console,
    number_in,
    out_console,
    print_json,
    print_table,
    quoted,
    shown,
)
from dissensus.errors import InputError
from dissensus.quoting import quote_short
from dissensus.quoting import visible_label as field

if TYPE_CHECKING:
    pass
from dissensus.cli.journals import JournalOpt, JsonOpt, opened_journal, warn_if_altered

review_app = typer.Typer(
    help="The human review queue: escalated cases waiting for a decision.", no_args_is_help=True
)
app.add_typer(review_app, name="review")


REVIEW_PAGE = 1000
"""``review list``'s default ``--limit``: the service's ``GET /v1/review`` page."""

MAX_REVIEW_LIMIT = 1_000_000_000
"""The largest ``review list --limit``: more than any journal holds, and a number every
journal's database takes (a larger one overflowed SQLite's and PostgreSQL's integers)."""


@review_app.command("list")
def review_list(
    journal: JournalOpt = None,
    run: Annotated[str | None, typer.Option("--run", help="Only this run.")] = None,
    all_items: Annotated[bool, typer.Option("--all", help="Include resolved items.")] = False,
    json_out: JsonOpt = False,
    limit: Annotated[
        int,
        typer.Option(
            "--limit",
            min=1,
            max=MAX_REVIEW_LIMIT,
            help=f"At most this many items (default {REVIEW_PAGE:,}, as GET /v1/review).",
        ),
    ] = REVIEW_PAGE,
    after: Annotated[
        str | None,
        typer.Option("--after", help="Only the items after this review id (the last of a page)."),
    ] = None,
) -> None:
    """List review items (open ones unless --all), oldest first, a page at a time."""
    from dissensus.io.jsonl import write_jsonl_line
    from dissensus.pipeline.review import list_items

    table = Table(show_edge=False)
    for col in ("review id", "case", "status", "suggestion", "reason"):
        table.add_column(col, overflow="fold")
    shown_n = 0
    last: str | None = None
    more = False
    with opened_journal(journal) as store:
        if run is not None:
            store.run(run)  # exit 2 naming the run when there is none
        # One item more than the page: whether another page follows.
        items = list_items(
            store, run_id=run, include_resolved=all_items, limit=limit + 1, after=after
        )
        for st in items:
            if shown_n == limit:
                more = True
                break
            shown_n += 1
            last = st.item.review_id
            if json_out:
                from dissensus.outputs import ReviewEntry

                write_jsonl_line(sys.stdout, ReviewEntry.of(st))  # as it is read
                continue
            status = f"resolved: {field(st.resolution.decision)}" if st.resolution else "open"
            table.add_row(
                shown(st.item.review_id),
                shown(st.item.id),
                status,
                field(st.item.suggestion or "-"),
                shown(st.item.reason),
            )
    nxt = _next_page(journal, run, all_items, limit, last) if more and last else None
    if json_out:
        if nxt is not None:
            err_console.print(nxt, soft_wrap=True)
        raise typer.Exit(code=EXIT_OK)
    if not shown_n:
        out_console.print("no review items" + ("" if all_items else " open"))
        raise typer.Exit(code=EXIT_OK)
    print_table(table)
    if nxt is not None:
        out_console.print(nxt, soft_wrap=True)
    raise typer.Exit(code=EXIT_OK)


def _next_page(journal: str | None, run: str | None, all_items: bool, limit: int, last: str) -> str:
    """The line saying more items follow a page of ``review list``, and the command
    listing the next page."""
    from dissensus.store.journal import journal_path
    from dissensus.store.targets import journal_option

    command = f"dissensus review list --after {last}"
    if run is not None:
        command += f" --run {run}"
    if all_items:
        command += " --all"
    if limit != REVIEW_PAGE:
        command += f" --limit {limit}"
    command += journal_option(journal_path(journal))
    return f"more items after {shown(last)} (at most {limit:,} shown): {shown(command)}"


@review_app.command("audits")
def review_audits(
    journal: JournalOpt = None,
    run: Annotated[str | None, typer.Option("--run", help="Only this run.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """List open blind audits of automatic decisions (answer each with `review confirm`)."""
    from dissensus.pipeline.audit import open_audits

    with opened_journal(journal) as store:
        if run is not None:
            store.run(run)  # exit 2 naming the run when there is none, as review list
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


UNDO_WITHIN_S = 300.0
"""``review undo``'s default window (seconds after resolving)."""


@review_app.command("show")
def review_show(
    review_id: Annotated[str, typer.Argument(help="Review id (<run>.<line>).")],
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show everything a reviewer needs: the case, positions and value profiles side by side."""
    from dissensus.cases import CaseSpec, asked_question, conversation
    from dissensus.pipeline.audit import audit_item
    from dissensus.pipeline.review import find_item, split_ref
    from dissensus.store.targets import journal_option

    run_id, line = split_ref(review_id)
    with opened_journal(journal) as store:
        audit = audit_item(store, run_id, line)
        audited = audit is not None and store.get(run_id, f"confirm/{line}") is not None
        st = None if audit is not None else find_item(store, review_id)
        verified = warn_if_altered(store, run_id)
        on = shown(journal_option(store.path))  # the commands below name this journal
    if json_out:
        if audit is not None:
            # A blind audit: neither the committed answer nor any suggestion is shown.
            print_json({**audit.model_dump(mode="json"), "audited": audited, "verified": verified})
            raise typer.Exit(code=EXIT_OK)
        assert st is not None
        data = st.item.model_dump(mode="json")
        data["resolution"] = st.resolution.model_dump() if st.resolution else None
        data["content_sha256"] = st.content_sha256
        data["verified"] = verified
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
            f"`dissensus review confirm {shown(item.review_id)}{on} --decision D --note N`",
            soft_wrap=True,
        )
    else:
        assert st is not None
        say(
            f"status: {'resolved: ' + field(st.resolution.decision) if st.resolution else 'open'}",
            soft_wrap=True,
        )
        if st.resolution is not None:  # who resolved it and why, as the page shows
            by = st.resolution.reviewer
            say(f"resolved by: {shown(by) if by else '(not recorded)'}", soft_wrap=True)
            say(f"note: {_excerpt(st.resolution.note, 400)}", soft_wrap=True)
        say(f"why escalated: {shown(item.reason)}", soft_wrap=True)
        say(f"content sha256: {st.content_sha256}", soft_wrap=True)
    case = CaseSpec.from_panel(item.panel)
    question = asked_question(item.panel.get("meta"))
    if question:
        say(f"question: {_excerpt(str(question), 400)}", soft_wrap=True)
    messages = conversation(item.panel.get("meta"))
    if len(messages) > 1:  # a system prompt or earlier turns: the whole conversation, in order
        say(f"conversation ({len(messages)} messages, in order):")
        for message in messages:
            say(f"  {shown(message.role)}: {_excerpt(message.text, 400)}", soft_wrap=True)
    say(
        f"options: {', '.join(field(o) for o in item.shown_options()) or '-'}   panel suggestion: {field(item.suggestion or '-')}",
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
        label = "" if option.label == option.id else f" ({field(option.label)})"
        say(f"  option {field(option.id)}{label}: {_excerpt(option.text, 200)}", soft_wrap=True)
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
            field(p.agent),
            field(p.family or "-"),
            field(p.decision) if p.decision is not None else "(abstained)",
            field(p.second or "-"),
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
                f"extra voice {shown(sig.agent)} ({shown(sig.family or '-')}): {field(sig.decision or '-')} then "
                f"{field(sig.second or '-')}, {'stable' if sig.stable else 'not stable'}, margin {sig.score}",
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
    if audit is None:  # an audit's command (review confirm) is named above
        assert st is not None
        if st.resolution is None:
            say(
                f"resolve: dissensus review resolve {shown(item.review_id)}{on} --decision X "
                f"--note TEXT --content-sha256 {st.content_sha256}",
                soft_wrap=True,
            )
        elif _within(st.resolved_at, UNDO_WITHIN_S):
            by = st.resolution.reviewer
            as_who = f" --reviewer {shown(shlex.quote(by))}" if by else ""
            say(
                f"undo: dissensus review undo {shown(item.review_id)}{on}{as_who} (by "
                f"{shown(by or '-')}, within {UNDO_WITHIN_S:.0f} s of resolving)",
                soft_wrap=True,
            )
    raise typer.Exit(code=EXIT_OK)


def _within(at: str | None, seconds: float) -> bool:
    """Whether the journal time ``at`` is at most ``seconds`` ago."""
    from datetime import UTC, datetime

    if at is None:
        return False
    try:
        then = datetime.fromisoformat(at)
    except ValueError:
        return False
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    return (datetime.now(UTC) - then).total_seconds() <= seconds


def _excerpt(text: str, limit: int) -> str:
    flat = shown(" ".join(str(text).split()))
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@review_app.command("claim")
def review_claim(
    review_id: Annotated[str, typer.Argument(help="Review id (<run>.<line>).")],
    ttl: Annotated[
        float,
        typer.Option(
            "--ttl",
            callback=number_in(1.0, MAX_SECONDS),
            help="Seconds the claim lasts (claim again to renew).",
        ),
    ] = 900.0,
    release: Annotated[
        bool, typer.Option("--release", help="Give up your claim on the case instead.")
    ] = False,
    reviewer: Annotated[
        str | None,
        typer.Option(
            "--reviewer", help="Who claims it; default $DISSENSUS_REVIEWER, else the login name."
        ),
    ] = None,
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Hold an open case while you work on it: the review page, the API and other CLIs
    leave it to you until the claim expires, you resolve it, or you --release it."""
    from dissensus.pipeline.audit import audit_item
    from dissensus.pipeline.confirm import claim_audit
    from dissensus.pipeline.review import (
        ClaimConflict,
        claim,
        find_item,
        reviewer_name,
        split_ref,
    )

    who = reviewer_name(reviewer)
    released = False
    run_id, line = split_ref(review_id)
    with opened_journal(journal) as store:
        # A blind audit is claimed as the service claims it: until it is answered.
        blind = audit_item(store, run_id, line) is not None
        if release:
            if not blind:
                find_item(store, review_id)  # an unknown id is named, as for a claim
            live = store.current_claim(review_id)
            if live is not None and live.who != who:
                # Only the holder gives a claim up; it stays until it expires.
                raise ClaimConflict(
                    f"review item {review_id} is claimed by {live.who} until {live.expires}; "
                    f"only {live.who} can release it",
                    holder=live.who,
                    expires=live.expires,
                )
            released = store.release_claim(review_id, who)
            held = None
        elif blind:
            held = claim_audit(store, review_id, who, ttl=ttl)
        else:
            held = claim(store, review_id, who, ttl=ttl)
    if json_out:
        print_json(
            held.model_dump()
            if held is not None
            else {"review_id": review_id, "released": released}
        )
    elif held is None:
        said = "released" if released else f"no claim of {who} to release on"
        out_console.print(f"{said} {shown(review_id)}", soft_wrap=True)
    else:
        out_console.print(
            f"claimed {shown(review_id)} for {shown(held.who)} until {held.expires}",
            soft_wrap=True,
        )
    raise typer.Exit(code=EXIT_OK)


def _as_shown(decision: str, options: list[str]) -> str:
    """``decision`` as the option it names when typed as ``review show`` prints it
    (``yes\\x20`` for the option ``yes ``), else as given. A text that is one option's own
    id and another's shown form (the literal ``yes\\x20`` beside ``yes ``) is an
    :class:`InputError` naming both: the reviewer who typed it as read may mean either."""
    exact = next((o for o in (decision, decision.strip()) if o in options), None)
    text = decision if exact == decision else decision.strip()
    named = [o for o in options if o != exact and text == field(o) != o]
    if exact is not None and named:
        other = named[0]
        raise InputError(
            f"--decision {quote_short(text)} names more than one option: {quote_short(exact)} "
            f"itself, and {quote_short(other)}, which `review show` prints as {field(other)}; "
            f"give {field(exact)} for the first, or the second exactly as {quote_short(other)}"
        )
    if exact is not None:
        return decision
    named = [o for o in options if field(o) == decision.strip()]
    return named[0] if len(named) == 1 else decision


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
    content_sha256: Annotated[
        str | None,
        typer.Option(
            "--content-sha256",
            help="The content hash `review show` printed: refused if the case changed since.",
        ),
    ] = None,
    journal: JournalOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Record a human decision; the case resumes with it as its final record.

    Refused while another reviewer holds a live claim on the case (as in the service),
    and with --content-sha256, when the case's content is not the one that hash names.
    """
    from dissensus.pipeline.review import find_item, resolve, reviewer_name

    if not note.strip():
        raise InputError("--note must not be empty: say why the decision was taken")
    quoted_sha = _content_hash(content_sha256) if content_sha256 is not None else None
    who = reviewer_name(reviewer)
    with opened_journal(journal) as store:
        options = find_item(store, review_id).item.shown_options()
        decision = _as_shown(decision, options)
        record = resolve(
            store,
            review_id,
            decision=decision,
            note=note,
            reviewer=who,
            content_sha256=quoted_sha,
        )
    if options and decision.strip() not in options:
        err_console.print(
            f"note: {quoted(decision)} is none of the case's options ({', '.join(field(o) for o in options)}); "
            "journalled as outside_options",
            soft_wrap=True,
        )
    if json_out:
        print_json(record)
    else:
        out_console.print(
            f"resolved {shown(review_id)}: case {shown(record.id)} -> {field(record.decision)}",
            soft_wrap=True,
        )
    raise typer.Exit(code=EXIT_OK)


_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


def _content_hash(value: str) -> str:
    """``--content-sha256`` in the form the journal keeps (lower-case hex): 64 hex digits,
    upper case read as the same hash, as the service reads it; anything else is an
    :class:`InputError` naming the option."""
    if _HEX64.fullmatch(value.strip()) is None:
        raise InputError(
            f"--content-sha256 must be a sha256: 64 hex digits, as `review show` prints it "
            f"(got {quote_short(value)}, {len(value)} characters)"
        )
    return value.strip().lower()


@review_app.command("undo")
def review_undo(
    review_id: Annotated[str, typer.Argument(help="Review id (<run>.<line>).")],
    within: Annotated[
        float,
        typer.Option(
            "--within",
            callback=number_in(0.0, MAX_SECONDS),
            help="Seconds after resolving that undo is allowed.",
        ),
    ] = UNDO_WITHIN_S,
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
    with opened_journal(journal) as store:
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
    with opened_journal(journal) as store:
        audit = confirm(store, case_ref, note=note, decision=decision, reviewer=who)
    if audit.outside_options:
        err_console.print(
            f"note: {quoted(audit.decision)} is none of the case's options; "
            "journalled as outside_options (calibration leaves it out)",
            soft_wrap=True,
        )
    if json_out:
        print_json(audit)
    elif audit.agrees:
        out_console.print(
            f"confirmed {shown(case_ref)}: case {shown(audit.id)} -> {field(audit.decision)}",
            soft_wrap=True,
        )
    else:
        out_console.print(
            f"corrected {shown(case_ref)}: case {shown(audit.id)} -> {field(audit.decision)} "
            f"(committed {field(audit.committed)})",
            soft_wrap=True,
        )
    raise typer.Exit(code=EXIT_OK)
