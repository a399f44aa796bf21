"""CLI command ``dissensus calibrate-acceptance``: fit learned acceptance on labelled cases.

* ``dissensus calibrate-acceptance LABELLED.jsonl --out ACCEPT.json [options]``: panels
  with the gold decision in ``meta.gold`` (every converter writes it there).
* ``dissensus calibrate-acceptance --journal J [--run ID ...] --out ACCEPT.json``: the
  review items humans resolved in a run journal (the reviewer's decision is the gold).

Both sources may be given together; their cases are pooled. ``LABELLED`` may be ``-``
(standard input, read once: the cases are kept for the fit). A panel without
``meta.gold``, or whose gold is not a label (:func:`dissensus.types.gold_label`: a list,
an object, an empty or blank string), or, for a case with options, is none of them
(``'3' is none of the case's options``; a case without options, a free answer, keeps
any gold), is rejected naming ``meta.gold`` (reported with its line,
exit code 3 after writing the file); a gold is read as a decision is (``2.0`` ->
``"2"``), so it matches the decisions whatever JSON type either was written with. With
``--strata FIELD``, a case whose ``meta.FIELD`` is a list or an object is rejected naming
that field (a journal's case by the journal and its line;
:func:`dissensus.acceptance.calibrate.stratum_of` reads the other values).
The reading settings (similarity backend, thresholds), the guard's calibration and
options, and the acceptance feature settings come from ``--policy`` when given, so that
``decide`` under the same policy computes the same features.

Choices this module makes:

* ``--run`` without ``--journal`` and an empty ``--strata`` are usage errors (exit 2),
  and so are strata too small to be calibrated
  (:func:`dissensus.acceptance.calibrate.check_strata`, before anything is fitted).
* ``--out`` and ``--rejects`` are checked before anything is read: neither may be a
  file the command reads (the labelled panels, the policy and its guard calibration,
  the journal), nor both the same file. ``--out`` is written atomically (a temporary
  file renamed over it): a failed write leaves the previous file whole. ``--out -`` is a
  usage error (exit 2), not standard output, which carries the report (``./-`` names a
  file called ``-``).
* **A case counts once.** The guarantee's bound counts every calibration case as an
  independent draw, so a copy would inflate it. In the pooled input (the labelled
  panels in file order, then the journal's cases) a panel id seen before is dropped
  (the first is kept), with one warning per repeated id on stderr, and so is a panel
  identical to an earlier one under another id (everything but the id equal, gold
  included). Texts are compared with their whitespace collapsed (a run of whitespace
  reads as one space, none at either end): a reasoning with a space added is no new
  case, for a copy, a near copy and the cross-fit folds alike. A *near copy* is counted once too: a case acceptance judges that equals
  an earlier judged case in everything its features read (its outputs, its case's
  question and options, its stratum and its gold; with user features, which may read
  any of ``meta``, all of it). It is still fitted on, but not counted among the
  calibration cases the guarantee's bound counts (a ``meta`` key nothing reads does not
  make a copy another draw), with one warning each; ``near_copies`` with ``--json``.
  Only judged cases are compared: a panel the policy's routing rules escalate by a
  ``meta`` key is no copy of its judged twin. The summary and the file's ``built_from`` say how many were dropped
  (``duplicates`` with ``--json``). Dropped copies are not rejected lines: the exit code
  is unchanged. The cross-fit folds read a case as the bound counts it: cases equal
  in everything acceptance reads but their gold (a near copy, and the same case
  labelled twice, differently) share one fold, so none is scored by a model fitted on
  its copy (:func:`~dissensus.cli.acceptance_cases.panel_key`, the digest near copies
  are counted once by, without the gold).
* **One gold label.** When every calibration case acceptance judges has one and the
  same gold (every ``meta.gold`` is ``"1"``), the guarantee was measured on cases whose
  right answer is always that label: ``calibrate-acceptance`` says so on a ``warning:``
  line on stderr (with ``--json`` too, where ``single_gold`` names the label; ``null``
  otherwise), and the file is still written (exit unchanged). The fit leaves out the
  ``option=`` features when every gold it is fitted on is one label
  (:func:`dissensus.acceptance.fit.feature_list`).
* **A journal's runs read as ``--policy`` does.** A journalled case's reading and guard
  decision are its run's, made under the run's policy, while the file records
  ``--policy``'s settings. Every run holding a case calibrated on (of ``--run``, else of
  the journal) is compared with ``--policy`` as a run's specification is compared with
  an acceptance file (:func:`~dissensus.pipeline.spec.calibration_difference`: the
  similarity backend, the effective reading thresholds, the guard's switch, options and
  calibration by its file's sha256), and one that differs refuses the whole command
  before anything is written (a :class:`~dissensus.errors.ConfigError` naming the run
  and the policy's field, exit 2, neither ``--out`` nor ``--rejects`` written): skipping
  the run would calibrate on some of the cases asked for, silently. A run with no
  labelled case is not compared; a guard calibration journalled without its file's
  sha256 (given to ``decide()`` as an object, or journalled before specifications held
  their files' digests) is compared by its content; a run whose ``run.started`` records
  no policy (an older journal) is not compared, its cases calibrated on as before.
* A feature value that is not finite or exceeds
  :data:`~dissensus.acceptance.features.FEATURE_BOUND` (a user feature's ``NaN``,
  ``inf`` or ``1e308``) is a configuration error naming the panel and the feature (exit
  2, nothing written): the feature's code, not the panel, is at fault, and dropping the
  panel would change the calibration set silently.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from dissensus.cli.acceptance_cases import (
    Gathered,
    PolicyInputs,
    gather,
    judged_once,
    panel_key,
)
from dissensus.cli.acceptance_cases import check_run as _check_run  # noqa: F401  (its old name)
from dissensus.cli.app import app
from dissensus.cli.common import (
    check_input_path,
    check_journal_file,
    check_outputs,
    err_console,
    exit_for,
    no_dash,
    number_in,
    out_console,
    print_json,
    quoted,
    shown,
)
from dissensus.errors import InputError

if TYPE_CHECKING:
    from dissensus.acceptance import FeatureSettings
    from dissensus.acceptance.file import AcceptanceFile

__all__ = ["calibrate_acceptance_cmd", "panel_key"]


def _say_too_few(
    n: int, *, target: float, delta: float, min_accepted: int, level: float | None = None
) -> None:
    """Warn when ``n`` calibration cases are fewer than any threshold must accept to be
    tested: the file accepts nothing whatever the scores (a stratified calibration is
    refused for this before fitting: :func:`~dissensus.acceptance.calibrate.check_strata`).
    ``level``: the largest level a competing family's sequence ran at (a share of
    ``delta`` under the Bonferroni rule, which needs more cases than ``delta`` itself)."""
    from dissensus.acceptance.bound import fewest_tested

    tested = delta if level is None else level
    needed = max(min_accepted, fewest_tested(target, tested))
    if n < needed:
        at = (
            f"delta {delta:g}"
            if tested >= delta
            else f"delta {delta:g}, of which the competing score families test at most {tested:.3g}"
        )
        err_console.print(
            f"warning: {n} calibration case(s) reach acceptance, fewer than the {needed} a "
            f"threshold must accept to be tested (target {target:g}, {at}, min "
            f"accepted {min_accepted}): the file accepts nothing whatever the scores; label "
            "more cases",
            soft_wrap=True,
        )


def _say_one_gold(label: str, n: int) -> None:
    """Warn that every calibration case's gold is ``label``: the guarantee was measured
    on cases whose right answer is always that label, and holds only for cases drawn
    like them (the model leaves out its ``option=`` features, which could learn only the
    label: :func:`~dissensus.acceptance.fit.feature_list`)."""
    err_console.print(
        f"warning: every gold of the {n} calibration case(s) is {quoted(label)}: the "
        "guarantee holds only for cases drawn like the calibration cases (whose right "
        f"answer is {quoted(label)} too), not for cases whose right answer is another; "
        "the model leaves out its option features, which could learn only that label",
        soft_wrap=True,
    )


@app.command("calibrate-acceptance")
def calibrate_acceptance_cmd(
    labelled: Annotated[
        str | None, typer.Argument(help="Labelled panels (JSONL, gold in meta.gold).")
    ] = None,
    out: Annotated[
        str, typer.Option("--out", "-o", help="Write the acceptance file here.")
    ] = "ACCEPT.json",
    journal: Annotated[
        str | None,
        typer.Option(
            "--journal",
            help="Also learn from the reviews resolved and the decisions audited in this journal "
            "(an SQLite file or postgresql:// URL).",
        ),
    ] = None,
    run: Annotated[
        list[str] | None, typer.Option("--run", help="Only these runs of the journal (repeatable).")
    ] = None,
    policy_path: Annotated[
        str | None,
        typer.Option("--policy", help="Pipeline policy (reading and acceptance settings)."),
    ] = None,
    target: Annotated[
        float,
        typer.Option(
            "--target-precision",
            callback=number_in(0.01, 0.999),
            help="Precision to guarantee.",
        ),
    ] = 0.9,
    delta: Annotated[
        float,
        typer.Option(
            "--delta",
            callback=number_in(0.001, 0.5),
            help="Allowed probability that the guarantee fails.",
        ),
    ] = 0.1,
    strata: Annotated[
        str | None,
        typer.Option(
            "--strata",
            help="meta field naming each case's stratum: the threshold must pass in every one.",
        ),
    ] = None,
    min_accepted: Annotated[
        int,
        typer.Option(
            "--min-accepted", min=1, help="Fewest calibration cases a threshold must accept."
        ),
    ] = 30,
    reasoning: Annotated[
        bool, typer.Option("--reasoning/--no-reasoning", help="Add reasoning-similarity features.")
    ] = False,
    markers: Annotated[
        bool,
        typer.Option(
            "--markers/--no-markers",
            help="Add each answer's margin score under the policy's acceptance.markers lexicon.",
        ),
    ] = False,
    feature: Annotated[
        list[str] | None,
        typer.Option("--feature", help="User feature module:function (repeatable)."),
    ] = None,
    family: Annotated[
        list[str] | None,
        typer.Option(
            "--family",
            help="Score family to use (learned, votes, votes_both, order_stable, guard); repeat "
            "to choose among several; default: learned and votes_both compete.",
        ),
    ] = None,
    family_rule: Annotated[
        str,
        typer.Option(
            "--family-rule",
            help="How the family is chosen: bonferroni (each family tested at a share of delta fixed in advance: learned 0.9 and votes_both 0.1 by default, equal shares among families named by --family; the one accepting most wins) or split (half the cases choose, the other half test).",
        ),
    ] = "bonferroni",
    explain: Annotated[
        bool, typer.Option("--explain", help="Print every score family's calibration coverage.")
    ] = False,
    rejects: Annotated[
        str | None, typer.Option("--rejects", help="Write rejected lines (JSONL) here.")
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the acceptance file's summary as JSON.")
    ] = False,
) -> None:
    """Fit learned acceptance with a finite-sample precision guarantee and write ACCEPT.json."""
    _check_options(
        labelled=labelled,
        out=out,
        journal=journal,
        run=run,
        policy_path=policy_path,
        strata=strata,
        family=family,
        family_rule=family_rule,
        rejects=rejects,
    )
    inputs = _policy_inputs(
        policy_path, out=out, rejects=rejects, reasoning=reasoning, markers=markers, feature=feature
    )
    got = gather(
        inputs, labelled=labelled, journal=journal, run=run, strata=strata, rejects=rejects
    )
    judged, near = _checked_judged(got, strata, whole_meta=bool(inputs.settings.user))
    saved = _calibrated(
        got,
        judged,
        inputs.settings,
        out=out,
        target=target,
        delta=delta,
        min_accepted=min_accepted,
        strata=strata,
        family=family,
        family_rule=family_rule,
    )
    one = _single_gold_of(got.golds, judged)
    _warn(saved, one, sum(judged), target=target, delta=delta, min_accepted=min_accepted)
    _report(saved, got, out=out, near=near, one=one, explain=explain, json_out=json_out)
    raise typer.Exit(code=exit_for(got.rejected))


def _check_options(
    *,
    labelled: str | None,
    out: str,
    journal: str | None,
    run: list[str] | None,
    policy_path: str | None,
    strata: str | None,
    family: list[str] | None,
    family_rule: str,
    rejects: str | None,
) -> None:
    """Refuse a usage error (exit 2) before anything is read: the sources, ``--run``,
    ``--strata``, ``--family`` and ``--family-rule``, and the outputs, which are no file
    the command reads nor each other (the module docstring)."""
    if labelled is None and journal is None:
        raise typer.BadParameter("give LABELLED.jsonl, --journal J, or both")
    if run and journal is None:
        raise typer.BadParameter("--run chooses runs of a journal: give --journal J too")
    if strata is not None and not strata:
        raise typer.BadParameter("--strata names a meta field; got an empty name")
    no_dash(out, "--out", "standard output carries the report; name the acceptance file")
    if family_rule not in ("bonferroni", "split"):
        raise typer.BadParameter(f"--family-rule is bonferroni or split, got {family_rule!r}")
    from dissensus.acceptance.families import FAMILIES

    for name in family or []:
        if name not in FAMILIES:
            raise typer.BadParameter(f"--family is one of {', '.join(FAMILIES)}, got {name!r}")
    if labelled is not None:
        check_input_path(labelled)
    if journal is not None:
        check_journal_file(journal, must_exist=True)
    reads = {"LABELLED": labelled, "--policy": policy_path, "--journal": journal}
    check_outputs({"--out": out, "--rejects": rejects}, reads=reads)


def _policy_inputs(
    policy_path: str | None,
    *,
    out: str,
    rejects: str | None,
    reasoning: bool,
    markers: bool,
    feature: list[str] | None,
) -> PolicyInputs:
    """How ``--policy`` reads and guards a case, and the feature settings the file records
    (its guard calibration checked to be no output)."""
    from dissensus.acceptance import FeatureSettings
    from dissensus.acceptance.prepare import GuardInputs, calibrated_settings
    from dissensus.pipeline import load_policy, policy_guard_calibration
    from dissensus.pipeline.gates import second_answers_under
    from dissensus.pipeline.spec import file_sha256
    from dissensus.states import Thresholds, get_backend

    policy, policy_dir = load_policy(policy_path)
    where: Path | None = None
    if policy.guard.calibration:  # read below: not an output either
        named = Path(policy.guard.calibration)
        where = named if named.is_absolute() or policy_dir is None else policy_dir / named
        check_outputs({"--out": out, "--rejects": rejects}, reads={"guard.calibration": str(where)})
    # The guard features as decide computes them: the policy's guard calibration and options.
    guard = GuardInputs.from_policy(
        policy, policy_guard_calibration(policy, policy_dir, policy_path)
    )
    # The guard calibration's bytes, hashed as a run's specification hashes them.
    guard_sha256 = file_sha256(where) if where is not None else None
    # A module:function backend runs the user's code: the policy's allow_code, as decide.
    backend = get_backend(policy.reading.similarity, allow_code=policy.allow_code or None)
    thresholds = Thresholds.for_model(backend.name, policy.reading.theta_s, policy.reading.theta_a)
    # The optional features are chosen here and recorded in the file, which decide
    # follows; the margin score counts the policy's own marker lexicon. The reading
    # thresholds and guard settings the features are computed with are recorded too: a
    # run whose policy differs is refused.
    lexicon = policy.acceptance.markers
    calibrated_reading, calibrated_guard = calibrated_settings(
        policy, guard_calibration_sha256=guard_sha256
    )
    settings = FeatureSettings(
        similarity=policy.reading.similarity,
        reasoning=reasoning,
        markers={"concession": list(lexicon.concession), "grounding": list(lexicon.grounding)}
        if markers
        else None,
        user=list(feature or []),
        reading=calibrated_reading,
        guard=calibrated_guard,
        # Whether the cases have second answers, as decide --policy would: a run that has
        # none (or has them where calibration had none) is refused.
        reask=second_answers_under(policy),
    )
    return PolicyInputs(
        policy=policy, backend=backend, thresholds=thresholds, guard=guard, settings=settings
    )


def _checked_judged(
    got: Gathered, strata: str | None, *, whole_meta: bool
) -> tuple[list[bool], int]:
    """Which cases acceptance judges, a near copy counted once (:func:`judged_once`), and
    how many near copies there were; an :class:`InputError` when there is nothing to
    calibrate on (no case, no stratum, no case acceptance judges)."""
    from dissensus.acceptance.calibrate import MISSING_STRATUM

    if not got.cases:
        read = f" in {', '.join(got.sources)}" if got.sources else ""
        bad = f"; {got.rejected} line(s) rejected, each named above" if got.rejected else ""
        raise InputError(f"no labelled cases to calibrate on{read}{bad}")
    if strata and all(g == MISSING_STRATUM for g in got.groups):
        raise InputError(
            f"--strata {strata}: none of the {len(got.cases)} labelled cases has it in its meta "
            f"(a case without it is in stratum {MISSING_STRATUM!r}; with none, one stratum "
            "is no stratification)"
        )
    judged, near = judged_once(got.read, got.judged, strata, whole_meta=whole_meta)
    if not any(judged):
        raise InputError(
            f"none of the {len(got.cases)} labelled cases reaches acceptance under this policy: "
            "its routing and guard decide them all (escalate, or commit on the guard's word)"
        )
    return judged, near


def _calibrated(
    got: Gathered,
    judged: list[bool],
    settings: FeatureSettings,
    *,
    out: str,
    target: float,
    delta: float,
    min_accepted: int,
    strata: str | None,
    family: list[str] | None,
    family_rule: str,
) -> AcceptanceFile:
    """Fit and calibrate on the gathered cases, and write the file to ``out`` (atomically);
    the file as written."""
    from dissensus.acceptance import calibrate, save_acceptance

    acc = calibrate(
        got.cases,
        got.golds,
        target=target,
        delta=delta,
        min_accepted=min_accepted,
        strata=got.groups if strata else None,
        strata_field=strata,
        settings=settings,
        built_from=got.sources,
        description="learned acceptance fitted by dissensus calibrate-acceptance",
        family=list(family) if family else None,
        rule="split" if family_rule == "split" else "bonferroni",
        judged=judged,
        keys=got.keys,
    )
    return save_acceptance(acc, out)


def _single_gold_of(golds: list[str], judged: list[bool]) -> str | None:
    """The one gold every judged case has, if they all have one (module docstring)."""
    from dissensus.acceptance.fit import single_gold

    return single_gold([g for g, j in zip(golds, judged, strict=True) if j])


def _warn(
    saved: AcceptanceFile,
    one: str | None,
    n_judged: int,
    *,
    target: float,
    delta: float,
    min_accepted: int,
) -> None:
    """The warnings on stderr about the file written: one gold label, a file that
    accepts nothing."""
    if one is not None:
        _say_one_gold(one, n_judged)
    if saved.threshold is None and not any(f.competing for f in saved.families):
        # Every competing family is constant on the calibration cases: nothing to rank with.
        err_console.print(
            f"warning: the file accepts nothing: {saved.threshold_reason}", soft_wrap=True
        )
    elif saved.threshold is None and len({s.stratum for s in saved.strata}) < 2:
        # One stratum is no stratification: check_strata leaves it to this warning. A
        # family tests at its share of delta (the split rule's testing half at delta).
        level = (
            delta
            if saved.family_rule == "split"
            else max((f.delta for f in saved.families if f.competing and f.eligible), default=delta)
        )
        _say_too_few(
            saved.calibration_n,
            target=target,
            delta=delta,
            min_accepted=min_accepted,
            level=level,
        )


def _summary(
    saved: AcceptanceFile, got: Gathered, *, out: str, near: int, one: str | None
) -> dict[str, Any]:
    """The file's summary as ``--json`` prints it."""
    return {
        "out": out,
        "calibration_n": saved.calibration_n,
        "selection_n": saved.selection_n,
        "fitted_n": saved.fitted_n if saved.fitted_n is not None else saved.calibration_n,
        "family": saved.family,
        "family_rule": saved.family_rule,
        "families": [{**f.model_dump(), "coverage": round(f.coverage, 6)} for f in saved.families],
        "threshold": saved.threshold,
        "threshold_reason": saved.threshold_reason,
        "calibration_accepted": saved.calibration_accepted,
        "calibration_correct": saved.calibration_correct,
        "error_upper": saved.error_upper,
        "strata": [s.model_dump() for s in saved.strata],
        "guarantee": saved.guarantee(),
        "sha256": saved.sha256,
        "rejected": got.rejected,
        "duplicates": got.once.dropped,
        "near_copies": near,
        "single_gold": one,
    }


def _report(
    saved: AcceptanceFile,
    got: Gathered,
    *,
    out: str,
    near: int,
    one: str | None,
    explain: bool,
    json_out: bool,
) -> None:
    """Print the file's summary: as JSON with ``--json``, else as tables and sentences."""
    if json_out:
        print_json(_summary(saved, got, out=out, near=near, one=one))
        return
    if explain:
        _print_families(saved)
    _print(saved, out, got.rejected)
    if got.once.dropped:
        out_console.print(
            f"{got.once.dropped} repeated panel(s) dropped: each case is calibrated on once"
        )
    if near:
        out_console.print(
            f"{near} near copies counted once among the calibration cases (fitted on)"
        )


def _print_families(acc: Any) -> None:
    table = Table(title=f"score families (chosen: {acc.family}, rule {acc.family_rule})")
    for name in (
        "family",
        "competing",
        "eligible",
        "delta",
        "threshold",
        "accepted",
        "right",
        "coverage",
    ):
        table.add_column(name, justify="left" if name == "family" else "right")
    for f in acc.families:
        table.add_row(
            f.family + (" *" if f.family == acc.family else ""),
            "yes" if f.competing else "no",
            "yes" if f.eligible else "no (constant)",
            f"{f.delta:.4f}",
            "-" if f.threshold is None else f"{f.threshold:.4f}",
            f"{f.accepted}/{f.cases}",
            str(f.correct),
            f"{f.coverage:.3f}",
        )
    out_console.print(table)


def _print(acc: Any, out: str, rejected: int) -> None:
    table = Table(title=f"learned acceptance -> {out}")
    table.add_column("stratum")
    table.add_column("cases", justify="right")
    table.add_column("accepted", justify="right")
    table.add_column("right", justify="right")
    table.add_column("error bound", justify="right")
    for s in acc.strata:
        table.add_row(
            shown(s.stratum), str(s.n), str(s.accepted), str(s.correct), f"{s.error_upper:.3f}"
        )
    table.add_row(
        "all",
        str(acc.calibration_n),
        str(acc.calibration_accepted),
        str(acc.calibration_correct),
        f"{acc.error_upper:.3f}",
    )
    out_console.print(table)
    judged = acc.calibration_n + (acc.selection_n or 0)
    if acc.fitted_n is not None and acc.fitted_n > judged:
        out_console.print(
            f"{judged} of the {acc.fitted_n} labelled cases reach acceptance under "
            "this policy and calibrate it; the model is fitted on all of them"
        )
    if acc.selection_n is not None:
        out_console.print(
            f"family rule split: {acc.selection_n} of the {judged} calibration cases chose "
            f"the score family; the other {acc.calibration_n} tested its threshold (the "
            "figures above, and the guarantee)"
        )
    out_console.print(shown(acc.threshold_reason or ""))
    out_console.print(shown(acc.guarantee()))
    out_console.print(
        f"sha256 {acc.sha256}" + (f"; {rejected} line(s) rejected" if rejected else "")
    )
