"""CLI command ``dissensus calibrate-acceptance``: fit learned acceptance on labelled cases.

* ``dissensus calibrate-acceptance LABELLED.jsonl --out ACCEPT.json [options]``: panels
  with the gold decision in ``meta.gold`` (every converter writes it there).
* ``dissensus calibrate-acceptance --journal J [--run ID ...] --out ACCEPT.json``: the
  review items humans resolved in a run journal (the reviewer's decision is the gold).

Both sources may be given together; their cases are pooled. ``LABELLED`` may be ``-``
(standard input, read once: the cases are kept for the fit). A panel without
``meta.gold``, or whose gold is not a label (:func:`dissensus.types.gold_label`: a list,
an object, an empty or blank string), is rejected naming ``meta.gold`` (reported with its line,
exit code 3 after writing the file); a gold is read as a decision is (``2.0`` ->
``"2"``), so it matches the decisions whatever JSON type either was written with. With
``--strata FIELD``, a case whose ``meta.FIELD`` is a list or an object is rejected naming
that field (a journal's case by the journal and its line;
:func:`dissensus.acceptance.calibrate.stratum_of` reads the other values).
The reading settings (similarity backend, thresholds), the guard's calibration and
options, and the acceptance feature settings come from ``--policy`` when given, so that
``decide`` under the same policy computes the same features.

Choices where the design is silent:

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
  is unchanged. The cross-fit folds also keep panels equal but for their id and gold
  (the same case labelled twice, differently) in one fold.
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

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

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
from dissensus.errors import ConfigError, InputError
from dissensus.types import Panel, gold_label

if TYPE_CHECKING:
    from dissensus.acceptance import FeatureSettings
    from dissensus.acceptance.prepare import GuardInputs
    from dissensus.io.jsonl import RejectSink
    from dissensus.pipeline.labels import JournalCase, JournalCases
    from dissensus.pipeline.policy import Policy
    from dissensus.pipeline.spec import RunSpec
    from dissensus.store.journal import Journal

__all__ = ["calibrate_acceptance_cmd"]


def _squeezed(value: Any) -> Any:
    """``value`` with every string in it (not the keys) stripped and its runs of
    whitespace collapsed to one space: texts that differ only in whitespace compare equal."""
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, list):
        return [_squeezed(v) for v in value]
    if isinstance(value, dict):
        return {k: _squeezed(v) for k, v in value.items()}
    return value


def _digest(panel: Panel, *, gold: bool) -> str:
    """sha256 of the panel's content without its id (and, ``gold=False``, its gold; with
    it, the gold as it is read, so that ``2`` and ``"2"`` are one gold); every text is
    compared with its whitespace collapsed (:func:`_squeezed`)."""
    data = _squeezed(panel.model_dump(mode="json", exclude={"id"}))
    meta = {k: v for k, v in data.get("meta", {}).items() if k != "gold"}
    if gold and "gold" in panel.meta:
        try:
            meta["gold"] = gold_label(panel.meta)
        except ValueError:
            meta["gold"] = panel.meta["gold"]
    data["meta"] = meta
    body = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def panel_key(panel: Panel) -> str:
    """What makes two labelled cases one for the cross-fit folds: the panel but its id and gold."""
    return _digest(panel, gold=False)


def _read_digest(panel: Panel, strata: str | None, whole_meta: bool) -> str:
    """sha256 of what calibration reads of ``panel`` with its gold: its outputs, its case
    (question and options), its stratum; all of ``meta`` when ``whole_meta`` (user
    features may read any of it). Texts are compared with their whitespace collapsed."""
    from dissensus.cases import CaseSpec

    if whole_meta:
        return _digest(panel, gold=True)
    try:
        gold: Any = gold_label(panel.meta)
    except ValueError:
        gold = panel.meta.get("gold")
    data = _squeezed(
        {
            "outputs": [o.model_dump(mode="json") for o in panel.outputs],
            "case": CaseSpec.from_panel(panel).model_dump(mode="json"),
            "stratum": panel.meta.get(strata) if strata else None,
            "gold": gold,
        }
    )
    body = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def _judged_once(
    panels: list[Panel], judged: list[bool], strata: str | None, whole_meta: bool
) -> tuple[list[bool], int]:
    """``judged`` with every near copy of an earlier judged case unjudged (module
    docstring), and how many were."""
    seen: dict[str, str] = {}
    out = list(judged)
    near = 0
    for k, panel in enumerate(panels):
        if not out[k]:
            continue
        key = _read_digest(panel, strata, whole_meta)
        first = seen.get(key)
        if first is None:
            seen[key] = panel.id
            continue
        out[k] = False
        near += 1
        err_console.print(
            f"warning: panel {quoted(panel.id)} equals panel {quoted(first)} in everything "
            "acceptance reads: fitted on, counted once among the calibration cases",
            soft_wrap=True,
        )
    return out, near


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
                    f"warning: panel id {quoted(panel.id)} appears more than once ({where}): "
                    "only its first labelled case is calibrated on"
                )
            return False
        content = _digest(panel, gold=True)
        first = self.contents.get(content)
        if first is not None:
            self.dropped += 1
            err_console.print(
                f"warning: panel {quoted(panel.id)} ({where}) is a copy of panel "
                f"{quoted(first)}: not calibrated on twice"
            )
            return False
        self.ids.add(panel.id)
        self.contents[content] = panel.id
        return True


def _say_too_few(n: int, *, target: float, delta: float, min_accepted: int) -> None:
    """Warn when ``n`` calibration cases are fewer than any threshold must accept to be
    tested: the file accepts nothing whatever the scores (a stratified calibration is
    refused for this before fitting: :func:`~dissensus.acceptance.calibrate.check_strata`)."""
    from dissensus.acceptance.bound import fewest_tested

    needed = max(min_accepted, fewest_tested(target, delta))
    if n < needed:
        err_console.print(
            f"warning: {n} calibration case(s) reach acceptance, fewer than the {needed} a "
            f"threshold must accept to be tested (target {target:g}, delta {delta:g}, min "
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


def _refusal(panel: Panel, strata: str | None) -> tuple[str, str] | None:
    """``(field, message)`` when ``panel`` is no labelled case: its gold is missing or not
    a label, or its stratum value is not one (``strata``: the strata field)."""
    from dissensus.acceptance.calibrate import stratum_refusal

    try:
        gold = gold_label(panel.meta)
    except ValueError as exc:
        return "meta.gold", str(exc)
    if gold is None:
        return "meta.gold", "no gold decision: not a labelled case"
    if strata:
        why = stratum_refusal(panel.meta, strata)
        if why is not None:
            return f"meta.{strata}", why
    return None


def _labelled_panels(
    path: str, sink: RejectSink, once: _Once, strata: str | None
) -> list[tuple[Panel, str]]:
    """The labelled panels of ``path`` (``-``: standard input) with their gold decisions;
    every other line is rejected into ``sink``."""
    from dissensus.io.jsonl import Reject, open_text, read_numbered_models

    panels: list[tuple[Panel, str]] = []
    try:
        with open_text(path) as handle:
            for line, text, item in read_numbered_models(Panel, handle, file=path):
                if isinstance(item, Reject):
                    sink.add(item)
                    continue
                refused = _refusal(item, strata)
                if refused is not None:
                    raw = text.rstrip("\r\n").removeprefix("\ufeff")
                    sink.add(
                        Reject(file=path, line=line, field=refused[0], message=refused[1], raw=raw)
                    )
                    continue
                if once.keep(item, f"line {line}"):
                    panels.append((item, gold_label(item.meta) or ""))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    return panels


def _journal_cases(
    journal: str, run: list[str] | None, settings: FeatureSettings, guard: GuardInputs
) -> JournalCases:
    """The journal's labelled cases (of ``run`` when given), every run holding one checked
    to have read and guarded as ``--policy`` does (:func:`_check_run`, module docstring)."""
    from dissensus.pipeline.labels import labelled_from_journal
    from dissensus.store.journal import Journal

    with Journal(journal) as jr:
        unknown = sorted(set(run or ()) - {r.run_id for r in jr.runs()})
        if unknown:
            raise InputError(
                f"--run: no run {', '.join(map(repr, unknown))} in the journal {journal}"
            )
        found = labelled_from_journal(jr, run or None)
        # A case's review id is its run's id, a dot and its line.
        for run_id in dict.fromkeys(c.review_id.rpartition(".")[0] for c in found.cases):
            _check_run(jr, run_id, settings, guard)
    return found


def _check_run(jr: Journal, run_id: str, settings: FeatureSettings, guard: GuardInputs) -> None:
    """Refuse the command (a :class:`ConfigError` naming the run and the policy's field)
    when run ``run_id`` read or guarded otherwise than ``--policy`` (``settings``, the
    records the file will hold; ``guard``, its loaded guard inputs): the cases' readings
    and guard decisions are the run's own, and the file says ``--policy``'s. The
    comparison is the one a run's specification makes with the file
    (:func:`~dissensus.pipeline.spec.calibration_difference`). A run whose ``run.started``
    records no policy is not compared."""
    from dissensus.pipeline.spec import RunSpec, calibration_difference

    started = jr.get(run_id, "run/started")
    if started is None or not isinstance(started.payload.get("policy"), dict):
        return
    where = f"run {quoted(run_id)}"
    try:
        spec = RunSpec.from_started(started.payload)
    except ConfigError as exc:
        raise ConfigError(exc.message, file=where, field=exc.field) from None
    policy, sha256 = _run_guard(spec, guard, settings)
    differs = calibration_difference(settings.model_dump(mode="json"), policy, sha256)
    if differs is None:
        return
    if differs.field.startswith("reading."):
        said = f"the run read with {differs.policy}, --policy reads with {differs.recorded}"
    elif differs.field == "guard.enabled":
        said = f"the run's guard was {differs.policy}, --policy's is {differs.recorded}"
    elif differs.field == "guard.calibration":
        said = f"the run's guard calibration was {differs.policy}, --policy's is {differs.recorded}"
    else:
        said = f"the run's guard used {differs.policy}, --policy's uses {differs.recorded}"
    raise ConfigError(
        f"{said}; calibrate with the policy the runs used", file=where, field=differs.field
    )


def _run_guard(
    spec: RunSpec, guard: GuardInputs, settings: FeatureSettings
) -> tuple[Policy, str | None]:
    """The run's policy and the sha256 of its guard calibration as the comparison reads
    them: the file's sha256 the run's specification holds; for a calibration journalled
    without one (a journal from before specifications held their files' digests, a
    calibration given to ``decide()`` as an object), ``--policy``'s sha256 when its content
    is ``--policy``'s calibration, else the sha256 of the journalled content (which no
    file of ``--policy`` matches)."""
    policy = spec.policy
    sha256 = spec.digests().get("guard.calibration")
    if spec.guard_calibration is None or sha256 is not None:
        return policy, sha256
    if guard.calibration is not None and spec.guard_calibration == guard.calibration:
        sha256 = settings.guard.calibration_sha256 if settings.guard is not None else None
    else:
        content = spec.guard_calibration.model_dump_json().encode("utf-8")
        sha256 = hashlib.sha256(content).hexdigest()
    name = f"{policy.guard.calibration or 'an object'} as journalled"
    return policy.model_copy(
        update={"guard": policy.guard.model_copy(update={"calibration": name})}
    ), sha256


def _strata_kept(
    journal: str, found: JournalCases, sink: RejectSink, strata: str | None
) -> list[JournalCase]:
    """The journal's cases kept: a case whose stratum value is not a label is rejected
    into ``sink`` (named by the journal and the case's line)."""
    from dissensus.acceptance.calibrate import stratum_refusal
    from dissensus.io.jsonl import Reject

    kept = []
    for case in found.cases:
        why = stratum_refusal(case.panel.meta, strata) if strata else None
        if why is None:
            kept.append(case)
            continue
        line = case.review_id.rpartition(".")[2]
        sink.add(
            Reject(
                file=journal,
                line=int(line) if line.isdigit() else 0,
                field=f"meta.{strata}",
                message=f"review {case.review_id}: {why}",
            )
        )
    return kept


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
    from dissensus.acceptance import FeatureSettings, calibrate, save_acceptance, stratum_of
    from dissensus.acceptance.calibrate import MISSING_STRATUM
    from dissensus.acceptance.fit import single_gold
    from dissensus.acceptance.prepare import (
        GuardInputs,
        calibrated_settings,
        candidates_for,
        load_user_features,
        prepare_cases,
    )
    from dissensus.io.jsonl import RejectSink
    from dissensus.pipeline import load_policy, policy_guard_calibration
    from dissensus.pipeline.gates import judged_by_acceptance, second_answers_under
    from dissensus.pipeline.spec import file_sha256
    from dissensus.states import Thresholds, get_backend, read_panels

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
    )
    # Every run whose cases are calibrated on read and guarded as --policy, checked
    # before anything is written (module docstring).
    found = _journal_cases(journal, run, settings, guard) if journal is not None else None
    cases: list[Any] = []
    golds: list[str] = []
    judged: list[bool] = []
    groups: list[str] = []
    keys: list[str] = []
    sources: list[str] = []
    once = _Once()
    read: list[Panel] = []  # the panels of the cases, in order
    with RejectSink(rejects) as sink:
        if labelled is not None:
            pairs = _labelled_panels(labelled, sink, once, strata)
            panels = [p for p, _ in pairs]
            read += panels
            dropped = once.dropped
            readings = read_panels(panels, backend, thresholds)
            judged += judged_by_acceptance(policy, panels, readings, guard.calibration)
            cases += prepare_cases(
                panels,
                settings=settings,
                backend=backend,
                guard=guard,
                readings=readings,
                reask=second_answers_under(policy),
            )
            golds += [g for _, g in pairs]
            keys += [panel_key(p) for p in panels]
            groups += [str(stratum_of(p.meta, strata)) for p in panels] if strata else []
            sources.append(
                f"{'standard input' if labelled == '-' else labelled} ({len(panels)} labelled panels"
                + (f"; {dropped} repeated panel(s) dropped" if dropped else "")
                + ")"
            )
        journalled = (
            _strata_kept(journal, found, sink, strata)
            if journal is not None and found is not None
            else []
        )
        rejected = sink.count
    if journal is not None and found is not None:
        user = load_user_features(settings.user) if settings.user else None
        before = once.dropped
        kept = [c for c in journalled if once.keep(c.panel, f"review {c.review_id}")]
        read += [c.panel for c in kept]
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
            f"{journal} ({len(found.cases) - found.confirmed} resolved reviews, "
            f"{found.confirmed} audited automatic decisions; "
            f"{found.outside_options} outside the options excluded"
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
    judged, near = _judged_once(read, judged, strata, whole_meta=bool(settings.user))
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
    one = single_gold([g for g, j in zip(golds, judged, strict=True) if j])
    if one is not None:
        _say_one_gold(one, sum(judged))
    if saved.threshold is None and not any(f.competing for f in saved.families):
        # Every competing family is constant on the calibration cases: nothing to rank with.
        err_console.print(
            f"warning: the file accepts nothing: {saved.threshold_reason}", soft_wrap=True
        )
    elif saved.threshold is None and len({s.stratum for s in saved.strata}) < 2:
        # One stratum is no stratification: check_strata leaves it to this warning.
        _say_too_few(saved.calibration_n, target=target, delta=delta, min_accepted=min_accepted)
    summary = {
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
        "rejected": rejected,
        "duplicates": once.dropped,
        "near_copies": near,
        "single_gold": one,
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
        if near:
            out_console.print(
                f"{near} near copies counted once among the calibration cases (fitted on)"
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
