"""CLI commands: ``dissensus calibrate`` and ``dissensus vote`` (the guard, ``docs/guard.md``).

Input of both: JSONL, one case per line::

    {"id": "q1", "votes": [{"agent": "a", "answer": "yes", "evidence_source": "wiki",
      "evidence_present": true, "confidence": 0.7, "family": "openai"}, ...], "gold": "yes"}

``gold`` is required by ``calibrate`` and ignored by ``vote``. A bad record (invalid
JSON, a missing field, fewer than two voters, a NaN or out-of-range confidence) is
rejected with its line and field on stderr (and in ``--rejects``); the rest is processed
and the exit code is 3. Too few voters and duplicate agent ids are reported on field
``votes``. A calibration file that cannot be read, an ``--out`` / ``--rejects`` file that
cannot be written, or a non-finite ``--beta`` / ``--beta-ref`` / ``--tolerance`` is a
usage error (2); a refusal under ``--strict`` is a failure (1) naming the case and the
invariant.

Choices this module makes:

* ``calibrate`` reads a case id once: a later case of an id seen before is dropped, one
  warning per repeated id (a copy would count twice in every accuracy, reliability and
  stratum size); ``vote`` decides every case, copies included, as ``decide`` does.
* An answer and a gold are read without the whitespace around them (``"1 "`` is the
  answer ``"1"``, the one a gold ``"1"`` names), as a reader typing them back sees them;
  an answer of whitespace only names no answer and rejects its line, naming
  ``votes.N.answer``, as an empty one does. So does a blank gold for ``calibrate``;
  ``vote`` ignores the gold, blank or not. Only this command's input is read so: a
  panel's decisions, which the guard votes with in ``decide``, are read as they are.
* A ``--calibration`` none of whose agents voted in a case (the calibration of another
  panel) is a warning at the end, one line counting such cases and naming the agents
  it measured, not an error: those cases were decided with its pooled reliability and
  prior correlations, as documented for an unmeasured voter.
* A ``--verifier`` that no voter of any decided case has is a warning at the end, one
  line naming the closest agent id (a case-only difference first), not an error: the
  cases were decided as the guard decides without a verifier who voted, and which
  agents vote is known only once every line is read.
"""

from __future__ import annotations

from collections import Counter
from typing import IO, TYPE_CHECKING, Annotated

import typer
from pydantic import Field, ValidationError, ValidationInfo, field_validator
from rich.table import Table

from dissensus.cli.app import app
from dissensus.cli.common import (
    atomic_output,
    check_input_path,
    check_output_path,
    check_outputs,
    err_console,
    exit_for,
    json_shown,
    load_json_file,
    no_dash,
    not_empty,
    number_in,
    open_input,
    out_console,
    print_json,
    print_table,
    progress,
    quoted,
    reject_sink,
    shown,
    stdout_handle,
    whole_records,
)
from dissensus.errors import ConfigError, InputError
from dissensus.types import Vote, VoteCase

if TYPE_CHECKING:
    from dissensus.guard import ReliabilityFit
    from dissensus.guard.decision import GuardDecision
    from dissensus.io.jsonl import RejectSink

__all__ = ["calibrate_command", "vote_command"]


def _stripped(value: str | None, info: ValidationInfo) -> str | None:
    """A label without the whitespace around it; an answer of whitespace only is refused
    (it names no answer), a blank gold kept as it is (``vote`` ignores the gold)."""
    if value is None:
        return None
    text = value.strip()
    if text:
        return text
    if info.field_name == "answer":
        raise ValueError(f"the answer is blank ({value!r}: whitespace only)")
    return value


class _VoteInput(Vote):
    """A vote as ``vote`` and ``calibrate`` read it: the answer without surrounding
    whitespace, never blank."""

    _stripped = field_validator("answer")(_stripped)


class _CaseInput(VoteCase):
    """A case as ``vote`` reads it: its votes as :class:`_VoteInput`, its gold stripped."""

    votes: list[_VoteInput]  # type: ignore[assignment]
    _stripped = field_validator("gold")(_stripped)


class _LabelledInput(_CaseInput):
    """A case as ``calibrate`` reads it: ``gold`` is required, and is a label (an empty
    or blank string names no answer: a reject naming ``gold``, as a list or an object is)."""

    gold: str = Field(min_length=1)

    @field_validator("gold")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(f"the gold answer is blank ({value!r}: whitespace only)")
        return value


RejectsOption = Annotated[
    str | None,
    typer.Option(
        "--rejects",
        help="Also write every rejected record (file, line, field, message) here as JSONL.",
    ),
]
JsonOption = Annotated[
    bool,
    typer.Option(
        "--json", help="Machine output: JSON (calibrate) or JSONL, one decision per case (vote)."
    ),
]


def _no_verifier_voted(verifier: str, cases: int, agents: Counter[str]) -> None:
    """Say that the ``--verifier`` agent voted in no case (a misspelt agent id: every
    case fell back without it), naming the agent id closest to it."""
    import difflib

    # A case-only difference (gpt-4 for GPT-4) first, then the closest spelling.
    close = [a for a in agents if a.casefold() == verifier.casefold()][:1]
    close = close or difflib.get_close_matches(verifier, list(agents), n=1, cutoff=0.6)
    hint = f" (did you mean {quoted(close[0])}?)" if close else ""
    err_console.print(
        f"warning: --verifier {quoted(verifier)} voted in none of the {cases} case(s): "
        f"no case had its veto{hint}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _no_voter_measured(path: str, unmeasured: int, cases: int, cal: ReliabilityFit) -> None:
    """Say that ``unmeasured`` of the ``cases`` decided had no voter the calibration
    measured (a calibration of another panel): their voters got its pooled reliability,
    no measured correlation, and its labels were counted among their possible answers."""
    names = ", ".join(quoted(a.agent) for a in cal.agents[:5])
    more = f" and {len(cal.agents) - 5} more" if len(cal.agents) > 5 else ""
    err_console.print(
        f"warning: --calibration {quoted(path)}: {unmeasured} of the {cases} case(s) had no "
        f"voter it measured (it measured {names or 'no agent'}{more}): their voters got "
        f"its pooled reliability {cal.pooled_reliability:.3f} and prior correlations, "
        "and its labels were counted among their possible answers; is it the calibration "
        "of this panel?",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _read_numbered(
    model: type[VoteCase], handle: IO[str], path: str, sink: RejectSink
) -> list[tuple[int, VoteCase]]:
    """The valid cases of ``handle`` (``path`` opened by :func:`open_input`, before the
    rejects file) with their input lines; each bad line to ``sink``."""
    from dissensus.io.jsonl import Reject, read_numbered_models

    cases: list[tuple[int, VoteCase]] = []
    try:
        for number, _, item in read_numbered_models(model, handle, file=path):
            if isinstance(item, Reject):
                sink.add(item)
            else:
                cases.append((number, item))
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from exc
    return cases


def _once(numbered: list[tuple[int, VoteCase]]) -> list[VoteCase]:
    """The cases with an id not seen before (the first is kept): a copy would count twice
    in every accuracy, reliability and stratum size of the calibration (``cat a a``
    made ``--min-stratum-cases 10`` hold on five cases). One warning per repeated id."""
    first: dict[str, int] = {}
    again: Counter[str] = Counter()
    kept: list[VoteCase] = []
    for number, case in numbered:
        if case.id in first:
            again[case.id] += 1
            continue
        first[case.id] = number
        kept.append(case)
    for case_id, n in again.items():
        err_console.print(
            f"warning: case id {quoted(case_id)} appears {n + 1} times (first at line "
            f"{first[case_id]}): calibrating on the first only",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    return kept


def _load_calibration(path: str) -> ReliabilityFit:
    from dissensus.guard import ReliabilityFit

    data = load_json_file(path, what="calibration")
    try:
        return ReliabilityFit.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "<root>"
        raise ConfigError(first["msg"], file=path, field=field) from exc


def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _calibration_tables(cal: ReliabilityFit) -> None:
    strata = Table(title=f"Calibration on {cal.cases} labelled cases, per evidence stratum")
    for col in ("stratum", "cases", "aggregator", "accuracy", "mean conf", "ECE", "|conf-acc|"):
        strata.add_column(col, justify="left" if col in ("stratum", "aggregator") else "right")
    for s in cal.strata:
        if s.cases == 0:
            strata.add_row(shown(s.stratum), "0", "-", "-", "-", "-", "-")
            continue
        rows = [
            ("majority (vote share)", s.majority),
            (f"consensus beta={cal.settings.beta_reference:g}", s.consensus),
        ]
        if s.guarded is not None:
            rows.append(("guarded", s.guarded))
        for name, f in rows:
            strata.add_row(
                shown(s.stratum),
                str(s.cases),
                name,
                _fmt(f.accuracy),
                _fmt(f.mean_confidence),
                _fmt(f.ece),
                _fmt(f.gap),
            )
    out_console.print(strata)
    agents = Table(title="Agents")
    for col in ("agent", "family", "votes", "accuracy", "reliability (present/absent)"):
        agents.add_column(col)
    for a in cal.agents:
        agents.add_row(
            shown(a.agent),
            shown(a.family or "-"),
            str(a.votes),
            _fmt(a.accuracy),
            f"{a.reliability_present:.3f} / {a.reliability_absent:.3f}",
        )
    out_console.print(agents)
    out_console.print(
        f"beta* = {cal.beta_star if cal.beta_star is not None else 'unmeasured'} "
        f"(accuracy-only {cal.beta_star_accuracy if cal.beta_star_accuracy is not None else 'unmeasured'}; "
        f"evidence-absent stratum {cal.beta_stratum_cases} cases); "
        f"mean pairwise error correlation {_fmt(cal.mean_error_correlation)}; "
        f"n_eff {cal.n_eff:.2f} of {len(cal.agents)}; "
        f"verifier {cal.verifier.agent + f' ({cal.verifier.accuracy:.3f} vs majority {cal.verifier.majority_accuracy:.3f})' if cal.verifier else 'none'}",
        highlight=False,
    )


@app.command("calibrate")
def calibrate_command(
    labelled: Annotated[str, typer.Argument(help="Labelled vote cases (JSONL, '-' for stdin).")],
    out: Annotated[
        str | None, typer.Option("--out", "-o", help="Write the calibration (JSON) here.")
    ] = None,
    beta_reference: Annotated[
        float,
        typer.Option("--beta-ref", callback=number_in(0.0), help="Beta of the consensus figures."),
    ] = 1.5,
    tolerance: Annotated[
        float,
        typer.Option(
            "--tolerance",
            callback=number_in(0.0),
            help="Allowed overconfidence of weighting on the absent stratum.",
        ),
    ] = 0.05,
    min_stratum_cases: Annotated[
        int,
        typer.Option(
            "--min-stratum-cases",
            min=1,
            help="Fewest evidence-absent cases for beta* to be measured.",
        ),
    ] = 10,
    json_out: JsonOption = False,
    rejects: RejectsOption = None,
) -> None:
    """Measure strata, beta*, reliabilities, error correlations and n_eff on a labelled set."""
    from dissensus.guard import ReliabilitySettings, fit_reliability

    no_dash(out, "--out", "standard output carries the report; --json prints the calibration there")
    check_input_path(labelled)
    check_output_path(out, option="--out", inputs={"LABELLED": labelled}, what="calibration file")
    check_outputs({"--rejects": rejects}, reads={"LABELLED": labelled, "--out": out})
    # The input first: one refused whole (gzip piped in) leaves --rejects as it was.
    with open_input(labelled) as handle, reject_sink(rejects) as sink:
        cases = _once(_read_numbered(_LabelledInput, handle, labelled, sink))
    if not cases:
        raise InputError(f"{labelled}: no valid labelled case to calibrate on")
    settings = ReliabilitySettings(
        beta_reference=beta_reference,
        overconfidence_tolerance=tolerance,
        min_stratum_cases=min_stratum_cases,
    )
    cal = fit_reliability(cases, settings)
    if out:
        try:
            with atomic_output(out) as handle:
                handle.write(json_shown(cal.model_dump_json(indent=2)) + "\n")
        except OSError as exc:
            raise InputError(
                f"cannot write the calibration file {out}: {exc.strerror or exc}"
            ) from None
    if json_out:
        print_json(cal)
    else:
        _calibration_tables(cal)
    raise typer.Exit(code=exit_for(sink.count))


@app.command("vote")
def vote_command(
    votes: Annotated[str, typer.Argument(help="Vote cases (JSONL, '-' for stdin).")],
    beta: Annotated[
        float,
        typer.Option(
            "--beta", callback=number_in(0.0), help="Requested consensus sharpening exponent."
        ),
    ] = 1.5,
    calibration: Annotated[
        str | None,
        typer.Option("--calibration", help="Calibration JSON from `dissensus calibrate`."),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="Fail (exit 1) on the first refusal instead of falling back."
        ),
    ] = False,
    verifier: Annotated[
        str | None, typer.Option("--verifier", help="Agent with veto when weighting is refused.")
    ] = None,
    no_recommended_verifier: Annotated[
        bool,
        typer.Option(
            "--no-recommended-verifier", help="Ignore the verifier the calibration recommends."
        ),
    ] = False,
    no_decompose: Annotated[
        bool,
        typer.Option(
            "--no-decompose", help="Let fallback voters earn consensus weight too (mode 'bounded')."
        ),
    ] = False,
    max_fallback: Annotated[
        float,
        typer.Option(
            "--max-fallback-agreement", callback=number_in(0.0, 1.0), help="Invariant 2 threshold."
        ),
    ] = 0.85,
    json_out: JsonOption = False,
    rejects: RejectsOption = None,
) -> None:
    """Decide every case under the guard: mode, answer, confidence, n_eff and why."""
    from dissensus.guard import CorrelatedConsensusError, GuardThresholds, guard_case
    from dissensus.io.fastjson import dumps_line
    from dissensus.io.jsonl import Reject, read_numbered_models

    check_input_path(votes)
    not_empty(calibration, "--calibration", "the calibration file")
    not_empty(verifier, "--verifier", "the verifier agent")
    check_outputs({"--rejects": rejects}, reads={"VOTES": votes, "--calibration": calibration})
    cal = _load_calibration(calibration) if calibration else None
    settings = GuardThresholds(
        max_fallback_agreement=max_fallback,
        use_recommended_verifier=not no_recommended_verifier,
        decompose=not no_decompose,
    )
    decisions: list[GuardDecision] = []
    modes: Counter[str] = Counter()
    agents: Counter[str] = Counter()  # every voter's agent id, for a --verifier none had
    measured = {a.agent for a in cal.agents} if cal is not None else set()
    unmeasured = 0  # cases none of whose voters the calibration measured
    with open_input(votes) as handle, reject_sink(rejects) as sink:
        # Streamed: with --json memory does not grow with the number of cases.
        cases = read_numbered_models(_CaseInput, handle, file=votes)
        out = whole_records(stdout_handle())  # no progress line inside a record
        for number, _, item in progress(cases, description="vote"):
            if isinstance(item, Reject):
                sink.add(item)
                continue
            try:
                d = guard_case(
                    item, cal, beta=beta, strict=strict, verifier=verifier, settings=settings
                )
            except CorrelatedConsensusError as exc:
                raise CorrelatedConsensusError(f"case {item.id!r}: {exc}", exc.decision) from exc
            modes[d.mode] += 1
            if cal is not None and measured.isdisjoint([v.agent for v in item.votes]):
                unmeasured += 1
            if verifier is not None:
                agents.update(v.agent for v in item.votes)
            if json_out:
                # The input line after the id, as decide's records carry it: two cases
                # of one id are told apart.
                record = {"id": d.id, "line": number} | d.model_dump(mode="json")
                out.write(dumps_line(record))
            else:
                decisions.append(d)
    if verifier is not None and modes and verifier not in agents:
        _no_verifier_voted(verifier, sum(modes.values()), agents)
    if cal is not None and calibration is not None and unmeasured:
        _no_voter_measured(calibration, unmeasured, sum(modes.values()), cal)
    if not json_out:
        table = Table(title=f"Guarded decisions ({len(decisions)} cases)")
        for col in ("id", "answer", "confidence", "mode", "weighted", "refusal", "n_eff"):
            table.add_column(col)
        for d in decisions:
            table.add_row(
                shown(d.id),
                shown(d.answer),
                f"{d.confidence:.3f}",
                d.mode,
                "yes" if d.weighted else "no",
                f"invariant {d.refusal.invariant}" if d.refusal else "-",
                f"{d.n_eff:.2f}",
            )
        print_table(table)
        summary = ", ".join(f"{m}: {n}" for m, n in sorted(modes.items()))
        out_console.print(f"modes: {summary or 'none'}; rejected: {sink.count}", highlight=False)
    raise typer.Exit(code=exit_for(sink.count))
