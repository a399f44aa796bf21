"""CLI command ``dissensus calibrate-acceptance``: fit learned acceptance on labelled cases.

* ``dissensus calibrate-acceptance LABELLED.jsonl --out ACCEPT.json [options]``: panels
  with the gold decision in ``meta.gold`` (every converter writes it there).
* ``dissensus calibrate-acceptance --journal J [--run ID ...] --out ACCEPT.json``: the
  review items humans resolved in a run journal (the reviewer's decision is the gold).

Both sources may be given together; their cases are pooled. A panel without
``meta.gold`` is rejected (reported with its line, exit code 3 after writing the file).
The reading settings (similarity backend, thresholds), the guard's calibration and
options, and the acceptance feature settings come from ``--policy`` when given, so that
``decide`` under the same policy computes the same features.

Choices where the design is silent:

* ``--out`` and ``--rejects`` are checked before anything is read: neither may be a
  file the command reads (the labelled panels, the policy and its guard calibration,
  the journal), nor both the same file. ``--out`` is written atomically (a temporary
  file renamed over it): a failed write leaves the previous file whole.
* **A case counts once.** The guarantee's bound counts every calibration case as an
  independent draw, so a copy would inflate it. In the pooled input (the labelled
  panels in file order, then the journal's cases) a panel id seen before is dropped
  (the first is kept), with one warning per repeated id on stderr, and so is a panel
  identical to an earlier one under another id (everything but the id equal, gold
  included); the summary and the file's ``built_from`` say how many were dropped
  (``duplicates`` with ``--json``). Dropped copies are not rejected lines: the exit code
  is unchanged. The cross-fit folds also keep panels equal but for their id and gold
  (the same case labelled twice, differently) in one fold.
* A feature value that is not finite or exceeds
  :data:`~dissensus.acceptance.features.FEATURE_BOUND` (a user feature's ``NaN``,
  ``inf`` or ``1e308``) is a configuration error naming the panel and the feature (exit
  2, nothing written): the feature's code, not the panel, is at fault, and dropping the
  panel would change the calibration set silently.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from dissensus.cli.app import app
from dissensus.cli.common import (
    check_journal_file,
    check_outputs,
    err_console,
    exit_for,
    number_in,
    out_console,
    print_json,
    shown,
)
from dissensus.errors import InputError
from dissensus.types import Panel

if TYPE_CHECKING:
    from dissensus.io.jsonl import RejectSink

__all__ = ["calibrate_acceptance_cmd"]


def _digest(panel: Panel, *, gold: bool) -> str:
    """sha256 of the panel's content without its id (and, ``gold=False``, its gold)."""
    data = panel.model_dump(mode="json", exclude={"id"})
    if not gold:
        data["meta"] = {k: v for k, v in data.get("meta", {}).items() if k != "gold"}
    body = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def panel_key(panel: Panel) -> str:
    """What makes two labelled cases one for the cross-fit folds: the panel but its id and gold."""
    return _digest(panel, gold=False)


class _Once:
    """Keeps the first of every panel id and of every panel content (module docstring)."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.contents: dict[str, str] = {}
        self.warned: set[str] = set()
        self.dropped = 0

    def keep(self, panel: Panel, where: str) -> bool:
        if panel.id in self.ids:
            self.dropped += 1
            if panel.id not in self.warned:
                self.warned.add(panel.id)
                err_console.print(
                    f"warning: panel id {shown(panel.id)!r} appears more than once ({where}): "
                    "only its first labelled case is calibrated on"
                )
            return False
        content = _digest(panel, gold=True)
        first = self.contents.get(content)
        if first is not None:
            self.dropped += 1
            err_console.print(
                f"warning: panel {shown(panel.id)!r} ({where}) is a copy of panel "
                f"{shown(first)!r}: not calibrated on twice"
            )
            return False
        self.ids.add(panel.id)
        self.contents[content] = panel.id
        return True


def _labelled_panels(path: str, sink: RejectSink, once: _Once) -> list[Panel]:
    from dissensus.io.jsonl import Reject, open_text, read_models

    panels: list[Panel] = []
    try:
        with open_text(path) as handle:
            for line, item in enumerate(read_models(Panel, handle, file=path), start=1):
                if isinstance(item, Reject):
                    sink.add(item)
                    continue
                if item.meta.get("gold") is None:
                    sink.add(
                        Reject(
                            file=path,
                            line=line,
                            field="meta.gold",
                            message="no gold decision: not a labelled case",
                        )
                    )
                    continue
                if once.keep(item, f"line {line}"):
                    panels.append(item)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    return panels


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
            help="How the family is chosen: bonferroni (each at delta/F, most accepted) or split.",
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
    if labelled is None and journal is None:
        raise typer.BadParameter("give LABELLED.jsonl, --journal J, or both")
    if family_rule not in ("bonferroni", "split"):
        raise typer.BadParameter(f"--family-rule is bonferroni or split, got {family_rule!r}")
    from dissensus.acceptance.families import FAMILIES

    for name in family or []:
        if name not in FAMILIES:
            raise typer.BadParameter(f"--family is one of {', '.join(FAMILIES)}, got {name!r}")
    if labelled is not None and not Path(labelled).is_file():
        raise typer.BadParameter(f"file not found: {labelled}")
    if journal is not None:
        check_journal_file(journal, must_exist=True)
    reads = {"LABELLED": labelled, "--policy": policy_path, "--journal": journal}
    check_outputs({"--out": out, "--rejects": rejects}, reads=reads)
    from dissensus.acceptance import FeatureSettings, calibrate, save_acceptance, stratum_of
    from dissensus.acceptance.calibrate import MISSING_STRATUM
    from dissensus.acceptance.prepare import (
        GuardInputs,
        candidates_for,
        load_user_features,
        prepare_cases,
    )
    from dissensus.io.jsonl import RejectSink
    from dissensus.pipeline import load_policy, policy_guard_calibration
    from dissensus.pipeline.gates import judged_by_acceptance
    from dissensus.states import Thresholds, get_backend, read_panels

    policy, policy_dir = load_policy(policy_path)
    if policy.guard.calibration:  # read below: not an output either
        named = Path(policy.guard.calibration)
        where = named if named.is_absolute() or policy_dir is None else policy_dir / named
        check_outputs({"--out": out, "--rejects": rejects}, reads={"guard.calibration": str(where)})
    # The guard features as decide computes them: the policy's guard calibration and options.
    guard = GuardInputs.from_policy(
        policy, policy_guard_calibration(policy, policy_dir, policy_path)
    )
    # The optional features are chosen here and recorded in the file, which decide
    # follows; the margin score counts the policy's own marker lexicon.
    lexicon = policy.acceptance.markers
    settings = FeatureSettings(
        similarity=policy.reading.similarity,
        reasoning=reasoning,
        markers={"concession": list(lexicon.concession), "grounding": list(lexicon.grounding)}
        if markers
        else None,
        user=list(feature or []),
    )
    backend = get_backend(policy.reading.similarity)
    thresholds = Thresholds.for_model(backend.name, policy.reading.theta_s, policy.reading.theta_a)
    cases: list[Any] = []
    golds: list[str] = []
    judged: list[bool] = []
    groups: list[str] = []
    keys: list[str] = []
    sources: list[str] = []
    once = _Once()
    with RejectSink(rejects) as sink:
        if labelled is not None:
            panels = _labelled_panels(labelled, sink, once)
            dropped = once.dropped
            readings = read_panels(panels, backend, thresholds)
            judged += judged_by_acceptance(policy, panels, readings, guard.calibration)
            cases += prepare_cases(
                panels, settings=settings, backend=backend, guard=guard, readings=readings
            )
            golds += [str(p.meta["gold"]) for p in panels]
            keys += [panel_key(p) for p in panels]
            groups += [str(stratum_of(p.meta, strata)) for p in panels] if strata else []
            sources.append(
                f"{labelled} ({len(panels)} labelled panels"
                + (f"; {dropped} repeated panel(s) dropped" if dropped else "")
                + ")"
            )
        rejected = sink.count
    if journal is not None:
        from dissensus.pipeline.labels import labelled_from_journal
        from dissensus.store.journal import Journal

        with Journal(journal) as jr:
            unknown = sorted(set(run or ()) - {r.run_id for r in jr.runs()})
            if unknown:
                raise InputError(
                    f"--run: no run {', '.join(map(repr, unknown))} in the journal {journal}"
                )
            found = labelled_from_journal(jr, run or None)
        user = load_user_features(settings.user) if settings.user else None
        before = once.dropped
        kept = [c for c in found.cases if once.keep(c.panel, f"review {c.review_id}")]
        judged += judged_by_acceptance(
            policy, [c.panel for c in kept], [c.reading for c in kept], guard.calibration
        )
        for case in kept:
            cases.append(
                candidates_for(
                    case.panel,
                    reading=case.reading,
                    guard=case.guard,
                    second=case.second,
                    settings=settings,
                    sim_backend=backend,
                    user=user,
                )
            )
            golds.append(case.gold)
            keys.append(panel_key(case.panel))
            if strata:
                groups.append(str(stratum_of(case.panel.meta, strata)))
        repeated = once.dropped - before
        sources.append(
            f"{journal} ({len(found.cases) - found.confirmed} resolved reviews, {found.confirmed} audited "
            f"automatic decisions; {found.outside_options} outside the options excluded"
            + (f"; {repeated} repeated panel(s) dropped" if repeated else "")
            + ")"
        )
    if not cases:
        raise InputError("no labelled cases to calibrate on")
    if strata and all(g == MISSING_STRATUM for g in groups):
        raise InputError(
            f"--strata {strata}: none of the {len(cases)} labelled cases has it in its meta "
            f"(a case without it is in stratum {MISSING_STRATUM!r}; with none, one stratum "
            "is no stratification)"
        )
    if not any(judged):
        raise InputError(
            f"none of the {len(cases)} labelled cases reaches acceptance under this policy: "
            "its routing and guard decide them all (escalate, or commit on the guard's word)"
        )
    acc = calibrate(
        cases,
        golds,
        target=target,
        delta=delta,
        min_accepted=min_accepted,
        strata=groups if strata else None,
        strata_field=strata,
        settings=settings,
        built_from=sources,
        description="learned acceptance fitted by dissensus calibrate-acceptance",
        family=list(family) if family else None,
        rule="split" if family_rule == "split" else "bonferroni",
        judged=judged,
        keys=keys,
    )
    saved = save_acceptance(acc, out)
    summary = {
        "out": out,
        "calibration_n": saved.calibration_n,
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
        "rejected": rejected,
        "duplicates": once.dropped,
    }
    if json_out:
        print_json(summary)
    else:
        if explain:
            _print_families(saved)
        _print(saved, out, rejected)
        if once.dropped:
            out_console.print(
                f"{once.dropped} repeated panel(s) dropped: each case is calibrated on once"
            )
    raise typer.Exit(code=exit_for(rejected))


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
        table.add_row(s.stratum, str(s.n), str(s.accepted), str(s.correct), f"{s.error_upper:.3f}")
    table.add_row(
        "all",
        str(acc.calibration_n),
        str(acc.calibration_accepted),
        str(acc.calibration_correct),
        f"{acc.error_upper:.3f}",
    )
    out_console.print(table)
    if acc.fitted_n is not None and acc.fitted_n > acc.calibration_n:
        out_console.print(
            f"{acc.calibration_n} of the {acc.fitted_n} labelled cases reach acceptance under "
            "this policy and calibrate it; the model is fitted on all of them"
        )
    out_console.print(acc.threshold_reason)
    out_console.print(acc.guarantee())
    out_console.print(
        f"sha256 {acc.sha256}" + (f"; {rejected} line(s) rejected" if rejected else "")
    )
