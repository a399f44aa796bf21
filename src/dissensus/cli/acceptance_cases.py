"""The labelled cases ``dissensus calibrate-acceptance`` calibrates on, read and counted once.

:func:`gather` reads them: the labelled panels of a file (or standard input) and the
cases a journal's reviewers resolved, every run of the journal checked to have read and
guarded as ``--policy`` does (:func:`check_run`); a repeated panel id or a copy is dropped
(:class:`Once`), and :func:`judged_once` counts a near copy once among the calibration
cases. The choices are the command's (:mod:`dissensus.cli.acceptance`).

Choices this module makes:

* **A gold among the options.** A labelled panel whose case has options (``meta.options``,
  or LLMBar's ``output_1`` / ``output_2``) and whose gold is none of them is rejected
  naming ``meta.gold`` (``'3' is none of the case's options``), as a gold that is no
  label is, while the other lines calibrate: calibrated on, it counted every answer
  wrong, whatever the panel decided. A case without options (a free answer) keeps any
  gold. A journal's case the reviewer decided outside the options is excluded already
  (:mod:`dissensus.pipeline.labels`).
* **One definition of a case.** :func:`panel_key`, which makes the cross-fit folds,
  and :func:`judged_once`, which counts near copies once, hash the same thing
  (:func:`_read_digest`): what acceptance reads of a panel (its outputs, its case's
  question and options, its stratum; all of ``meta`` with user features), the fold key
  without the gold. A panel differing from another only in a ``meta`` key nothing
  reads (a batch number, a source tag) falls in the other's fold: were the keys the
  whole panel, it would be scored "out of fold" by a model fitted on its copy while
  the bound counted the two once, and the figures would overstate the precision.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from dissensus.cli.common import err_console, open_input, quoted
from dissensus.errors import ConfigError, InputError
from dissensus.types import Panel, gold_label

if TYPE_CHECKING:
    from dissensus.acceptance import FeatureSettings
    from dissensus.acceptance.prepare import GuardInputs
    from dissensus.io.jsonl import RejectSink
    from dissensus.pipeline.labels import JournalCase, JournalCases
    from dissensus.pipeline.policy import Policy
    from dissensus.pipeline.spec import RunSpec
    from dissensus.states import SimilarityBackend, Thresholds
    from dissensus.store.journal import Journal

__all__ = [
    "Gathered",
    "Once",
    "PolicyInputs",
    "check_run",
    "gather",
    "journal_cases",
    "judged_once",
    "panel_key",
]


@dataclass(frozen=True)
class PolicyInputs:
    """What ``--policy`` and the feature options make of a case: how it is read and
    guarded, and the feature settings the acceptance file records."""

    policy: Policy
    backend: SimilarityBackend
    thresholds: Thresholds
    guard: GuardInputs
    settings: FeatureSettings


@dataclass
class Gathered:
    """The cases calibrated on, in order (the labelled panels, then the journal's), each
    list one entry a case (``groups`` only with ``--strata``)."""

    once: Once
    cases: list[Any] = field(default_factory=list)
    golds: list[str] = field(default_factory=list)
    judged: list[bool] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    read: list[Panel] = field(default_factory=list)  # the panels of the cases, in order
    rejected: int = 0


def gather(
    inputs: PolicyInputs,
    *,
    labelled: str | None,
    journal: str | None,
    run: list[str] | None,
    strata: str | None,
    rejects: str | None,
) -> Gathered:
    """The labelled cases of ``labelled`` and of ``journal`` (its runs ``run``), every
    other line rejected into ``rejects``."""
    from dissensus.io.jsonl import RejectSink

    # Every run whose cases are calibrated on read and guarded as --policy, checked
    # before anything is written (:mod:`dissensus.cli.acceptance`).
    found = (
        journal_cases(journal, run, inputs.settings, inputs.guard) if journal is not None else None
    )
    got = Gathered(once=Once())
    with ExitStack() as stack:
        # The input first: one refused whole (gzip piped in) leaves --rejects as it was.
        source = stack.enter_context(open_input(labelled)) if labelled is not None else None
        sink = stack.enter_context(RejectSink(rejects))
        if labelled is not None and source is not None:
            _add_labelled(got, labelled, source, sink, inputs, strata)
        journalled = (
            _strata_kept(journal, found, sink, strata)
            if journal is not None and found is not None
            else []
        )
        got.rejected = sink.count
    if journal is not None and found is not None:
        _add_journalled(got, journal, found, journalled, inputs, strata)
    return got


def _add_labelled(
    got: Gathered,
    labelled: str,
    source: IO[str],
    sink: RejectSink,
    inputs: PolicyInputs,
    strata: str | None,
) -> None:
    """Add the labelled panels of ``labelled`` (opened: ``source``) to ``got``, read and
    guarded as a run would."""
    from dissensus.acceptance import stratum_of
    from dissensus.acceptance.prepare import prepare_cases
    from dissensus.pipeline.gates import judged_by_acceptance, second_answers_under
    from dissensus.states import read_panels

    policy, guard = inputs.policy, inputs.guard
    once = got.once
    pairs = _labelled_panels(source, labelled, sink, once, strata)
    panels = [p for p, _ in pairs]
    got.read += panels
    dropped = once.dropped
    readings = read_panels(panels, inputs.backend, inputs.thresholds)
    got.judged += judged_by_acceptance(policy, panels, readings, guard.calibration)
    got.cases += prepare_cases(
        panels,
        settings=inputs.settings,
        backend=inputs.backend,
        guard=guard,
        readings=readings,
        reask=second_answers_under(policy),
    )
    got.golds += [g for _, g in pairs]
    whole_meta = bool(inputs.settings.user)
    got.keys += [panel_key(p, strata, whole_meta) for p in panels]
    got.groups += [str(stratum_of(p.meta, strata)) for p in panels] if strata else []
    got.sources.append(
        f"{'standard input' if labelled == '-' else labelled} ({len(panels)} labelled panels"
        + (f"; {dropped} repeated panel(s) dropped" if dropped else "")
        + ")"
    )


def _add_journalled(
    got: Gathered,
    journal: str,
    found: JournalCases,
    journalled: list[JournalCase],
    inputs: PolicyInputs,
    strata: str | None,
) -> None:
    """Add the journal's cases ``journalled`` (of ``found``) to ``got``, as they were read
    and guarded in their runs."""
    from dissensus.acceptance import stratum_of
    from dissensus.acceptance.prepare import candidates_for, load_user_features
    from dissensus.pipeline.gates import judged_by_acceptance

    settings, once = inputs.settings, got.once
    user = load_user_features(settings.user) if settings.user else None
    before = once.dropped
    kept = [c for c in journalled if once.keep(c.panel, f"review {c.review_id}")]
    got.read += [c.panel for c in kept]
    got.judged += judged_by_acceptance(
        inputs.policy, [c.panel for c in kept], [c.reading for c in kept], inputs.guard.calibration
    )
    for case in kept:
        got.cases.append(
            candidates_for(
                case.panel,
                reading=case.reading,
                guard=case.guard,
                second=case.second,
                settings=settings,
                sim_backend=inputs.backend,
                user=user,
            )
        )
        got.golds.append(case.gold)
        got.keys.append(panel_key(case.panel, strata, bool(settings.user)))
        if strata:
            got.groups.append(str(stratum_of(case.panel.meta, strata)))
    repeated = once.dropped - before
    got.sources.append(
        f"{journal} ({len(found.cases) - found.confirmed} resolved reviews, "
        f"{found.confirmed} audited automatic decisions; "
        f"{found.outside_options} outside the options excluded"
        + (f"; {repeated} repeated panel(s) dropped" if repeated else "")
        + ")"
    )


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


def panel_key(panel: Panel, strata: str | None = None, whole_meta: bool = False) -> str:
    """What makes two labelled cases one for the cross-fit folds: what acceptance reads of
    the panel (:func:`_read_digest`, the digest :func:`judged_once` compares) but its gold.
    A ``meta`` key nothing reads (a batch number, a source tag) does not make a near copy
    another case: it shares its original's fold, so neither is scored by a model fitted
    on the other."""
    return _read_digest(panel, strata, whole_meta, gold=False)


def _read_digest(panel: Panel, strata: str | None, whole_meta: bool, *, gold: bool = True) -> str:
    """sha256 of what calibration reads of ``panel``: its outputs, its case (question and
    options), its stratum and (``gold``) its gold; all of ``meta`` when ``whole_meta``
    (user features may read any of it). Texts are compared with their whitespace
    collapsed."""
    from dissensus.cases import CaseSpec

    if whole_meta:
        return _digest(panel, gold=gold)
    label: Any = None
    if gold:
        try:
            label = gold_label(panel.meta)
        except ValueError:
            label = panel.meta.get("gold")
    data = _squeezed(
        {
            "outputs": [o.model_dump(mode="json") for o in panel.outputs],
            "case": CaseSpec.from_panel(panel).model_dump(mode="json"),
            "stratum": panel.meta.get(strata) if strata else None,
            "gold": label,
        }
    )
    body = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def judged_once(
    panels: list[Panel], judged: list[bool], strata: str | None, whole_meta: bool
) -> tuple[list[bool], int]:
    """``judged`` with every near copy of an earlier judged case unjudged
    (:mod:`dissensus.cli.acceptance`), and how many were."""
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


class Once:
    """Keeps the first of every panel id and of every panel content (:mod:`dissensus.cli.acceptance`)."""

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


def _refusal(panel: Panel, strata: str | None) -> tuple[str, str] | None:
    """``(field, message)`` when ``panel`` is no labelled case: its gold is missing, not
    a label, or none of the case's options (when it has options), or its stratum value
    is not a label (``strata``: the strata field)."""
    from dissensus.acceptance.calibrate import stratum_refusal
    from dissensus.cases import option_ids

    try:
        gold = gold_label(panel.meta)
    except ValueError as exc:
        return "meta.gold", str(exc)
    if gold is None:
        return "meta.gold", "no gold decision: not a labelled case"
    options = option_ids(panel.meta)
    if options and gold not in options:
        return "meta.gold", f"{quoted(gold)} is none of the case's options"
    if strata:
        why = stratum_refusal(panel.meta, strata)
        if why is not None:
            return f"meta.{strata}", why
    return None


def _labelled_panels(
    handle: IO[str], path: str, sink: RejectSink, once: Once, strata: str | None
) -> list[tuple[Panel, str]]:
    """The labelled panels of ``handle`` (``path``, ``-``: standard input, opened by
    :func:`~dissensus.cli.common.open_input` before the rejects file) with their gold
    decisions; every other line is rejected into ``sink``."""
    from dissensus.io.jsonl import Reject, read_numbered_models

    panels: list[tuple[Panel, str]] = []
    try:
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


def journal_cases(
    journal: str, run: list[str] | None, settings: FeatureSettings, guard: GuardInputs
) -> JournalCases:
    """The journal's labelled cases (of ``run`` when given), every run holding one checked
    to have read and guarded as ``--policy`` does (:func:`check_run`,
    :mod:`dissensus.cli.acceptance`)."""
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
            check_run(jr, run_id, settings, guard)
    return found


def check_run(jr: Journal, run_id: str, settings: FeatureSettings, guard: GuardInputs) -> None:
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
