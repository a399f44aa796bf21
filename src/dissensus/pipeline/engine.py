"""The composed pipeline for one case: read -> route -> guard -> protocol -> record.

1. **Read** the panel (:mod:`dissensus.states`): CA / DA / CD / DD.
2. **Route** it through the policy's defeasible rules (defaults CA->auto,
   DA->auto_explain, DD->seek_context, CD->escalate; built-in rules the policy switches
   on, e.g. ``cd-without-values``; the policy's domain rules). The route is the rule
   engine's alone, and the record names the deciding rule.
3. **Guard** the automatic routes (:mod:`dissensus.guard`): an ``auto`` /
   ``auto_explain`` route commits on the guard's word only when the voters' evidence is
   auditable and independent (invariants 1 and 2 hold, and 3 when a guard calibration
   is configured) and the guard's answer is the panel's. Otherwise the case goes to
   ``seek_context`` with the guard's refusal as the reason. (The guard's check is
   journalled for every case, so a reviewer sees it whatever the route.)
4. **Seek context**: a bounded follow-up (:mod:`dissensus.pipeline.followup`), one more
   reading of the perturbed panel, then acceptance: *learned acceptance* when an
   acceptance file is configured (:mod:`dissensus.pipeline.learned`; also when no
   follow-up could run, on the features the panel has), else the trust regions of
   :mod:`dissensus.pipeline.trust_regions`: commit when the measured rule says the answer
   can be trusted, else escalate with the reason. Learned acceptance judges a case
   once: after the first follow-up round (or without one when none could run), never
   again in a later round, since its threshold holds for one look per case.
5. **Escalate**: CONCORD first when the case has explicit options and role utilities
   (a certificate commits; a shortfall goes to the human with the record), otherwise a
   human-review item holding the panel, the readings, the positions and value profiles
   side by side and any packet. Escalation never blocks: the case ends waiting.
6. **Record**: the final :class:`~dissensus.pipeline.records.CaseRecord`.

Every step is a journalled, memoised step (:mod:`dissensus.pipeline.durable`) with one
pydantic model (:mod:`dissensus.pipeline.steps`), so the same code path resumes a
killed run and a replayed step is validated like a fresh one. A case's steps are
buffered and handed to the run loop with its record (:func:`decide_case_events`), which
appends a block of cases in one transaction; a case that calls a model writes its steps
before the call.

A failed follow-up (a model call that failed, a budget refusal, a case without the
question a re-ask needs) is the case's outcome: the reason says ``re-ask failed: ...``
or ``deliberation failed: ...`` and the case escalates. A fault of the journal is not:
:data:`~dissensus.pipeline.durable.JOURNAL_FAULTS` (a lock held past the busy timeout,
an unreachable database, an unreadable step) raised while a follow-up journals its
calls propagates out of the case, so the run stops unfinished and resumable and the
caller reports the journal's error (exit 1 for a busy or unreachable journal), never
records it as a decision that cannot be retried.

**Failed follow-ups are counted.** A run goes on when some of its model follow-ups
fail (a server that went away mid-run): their cases are decided without them (most
escalate). :func:`followup_tally` counts, from the records, the model follow-ups a run
attempted (live re-asks and DCI deliberations; a recorded re-ask calls no model), those
that failed, how many of those cases went to review and the first failure's cause in
input order; ``run.finished`` journals the counts (``followups``, ``followups_failed``,
present only when not zero), and :meth:`FollowupTally.warning` is the one line a
summary prints (``3 of 10 model follow-ups failed (first: ...); their cases went to
review``).

Choices this module makes: a route action other than the four standard ones
maps as ``concord`` -> escalate with CONCORD, ``deliberate`` -> seek_context with DCI,
anything else -> escalate, with the reason naming the action; a DCI follow-up's packet
goes to the reviewer rather than being committed (deliberation among one model's
participants is not independent evidence); a panel's ``meta.gold`` (labelled data) is
never read. The review item's options are :func:`~dissensus.cases.review_options`: the
panel's ``meta.options`` in its order, then the other decisions the agents gave in
natural order (``2`` before ``10``). The review item's panel is the JSON the case's input step made of it (less
``meta.gold``), not a second serialisation. A fresh record and review item are built without
validating again what the case's steps made (the reading, the route, the guard's step,
the positions, the usage) when every value is already what validation keeps (plain
text and flags, the steps' own model instances); they hold the values, their order and
the set of given fields that validation would give them.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from dissensus.cases import option_ids, review_options
from dissensus.errors import ConfigError, DissensusError
from dissensus.pipeline.acceptors import AcceptInput
from dissensus.pipeline.audit import AUDIT_OPENED, is_audited
from dissensus.pipeline.durable import JOURNAL_FAULTS, CaseClient, CaseLog
from dissensus.pipeline.followup import case_options, live_reask, run_dci
from dissensus.pipeline.gates import AUTO_ACTIONS, guard_step, route_step
from dissensus.pipeline.learned import AcceptanceFigures
from dissensus.pipeline.negotiate import concord_refusal, has_utilities, run_concord
from dissensus.pipeline.records import (
    AgentPosition,
    CaseRecord,
    PipelineAction,
    ReviewItem,
    review_id_for,
)
from dissensus.pipeline.review_form import journal_form
from dissensus.pipeline.runtime import MODEL_ENV, Runtime
from dissensus.pipeline.steps import (
    AcceptanceStep,
    CaseInput,
    ConcordStep,
    DeliberationStep,
    FollowupStep,
    GuardStep,
)
from dissensus.signals import AgentSignal, SecondAnswer, agent_signals, recorded_second_answers
from dissensus.states import Reading, Route, State
from dissensus.store import event_types as ev
from dissensus.store.journal import NewEvent
from dissensus.types import AgentOutput, Panel, Usage, trusted

__all__ = [
    "FollowupCounter",
    "FollowupTally",
    "decide_case",
    "decide_case_events",
    "followup_outcome",
    "followup_tally",
]

_AUTO = AUTO_ACTIONS

M = TypeVar("M", bound=BaseModel)


def _perturbed(panel: Panel, second: dict[str, SecondAnswer]) -> Panel:
    """The panel of the second answers; an answer no panel can hold (a decision with a
    control character, from an option id the input did not check) is an abstention,
    never a failed case."""
    outputs = []
    for out in panel.outputs:
        again = second.get(out.agent)
        reasoning = again.reasoning if again and again.reasoning else out.reasoning
        try:
            answer = AgentOutput(
                agent=out.agent,
                decision=again.decision if again else None,
                reasoning=reasoning,
                values=out.values,
                confidence=out.confidence,
                evidence=out.evidence,
                family=out.family,
            )
        except ValidationError:
            answer = out.model_copy(update={"decision": None, "reasoning": reasoning})
        outputs.append(answer)
    return Panel(id=panel.id, meta={}, outputs=outputs)


@dataclass
class _Case:
    rt: Runtime
    panel: Panel
    line: int
    log: CaseLog
    path: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    input: CaseInput | None = None
    reading: Reading | None = None
    route: Route | None = None
    guard: GuardStep | None = None
    reread: Reading | None = None
    acceptance: AcceptanceStep | None = None
    followup: FollowupStep | None = None
    packet: DeliberationStep | None = None
    concord: ConcordStep | None = None
    figures: AcceptanceFigures | None = None
    """Learned acceptance's figures, once an acceptance file judged the case."""
    _client: CaseClient | None = None

    @property
    def client(self) -> CaseClient:
        """The case's model client, made on first use (most cases call no model)."""
        client = self._client
        if client is None:
            client = self._client = self.rt.client.for_case(self.log)
        return client

    async def astep(
        self, step: str, type: str, model: type[M], compute: Callable[[], Awaitable[M]]
    ) -> M:
        found = self.log.replayed(step, model)
        if found is not None:
            return found
        return self.log.append(step, type, model, await compute())

    def record(self, **fields: Any) -> CaseRecord:
        assert self.reading is not None and self.route is not None
        # The record's fields before CaseRecord validates them (with the caller's).
        base: dict[str, Any] = {
            "id": self.panel.id,
            "line": self.line,
            "state": self.reading.state.value,
            "route": self.route.action,
            "rule": self.route.rule,
            "path": list(self.path),
            "usage": self.usage.model_dump(),
            "acceptance": self.figures.model_dump(mode="json") if self.figures else None,
        }
        base.update(fields)
        if self.figures is None and _plain_record(fields):
            return _trusted_record(base, self.reading.state)
        return CaseRecord.model_validate(base)


_RECORD_TEXT = ("action", "reason")
_RECORD_OPTIONAL_TEXT = ("decision", "basis", "suggestion", "review_id")
_RECORD_FIELDS = frozenset({"auto", *_RECORD_TEXT, *_RECORD_OPTIONAL_TEXT})


def _plain_record(fields: dict[str, Any]) -> bool:
    """Whether the caller's record fields are exact ``str``/``bool`` values (what
    validation keeps), and no others."""
    return (
        fields.keys() <= _RECORD_FIELDS
        and fields["auto"].__class__ is bool
        and _STR.issuperset(map(type, map(fields.__getitem__, _RECORD_TEXT)))
        and _OPTIONAL_STR.issuperset(map(type, map(fields.get, _RECORD_OPTIONAL_TEXT)))
    )


_STR = frozenset({str})
_OPTIONAL_STR = frozenset({str, type(None)})


def _trusted_record(base: dict[str, Any], state: State) -> CaseRecord:
    """``CaseRecord.model_validate(base)`` without validating again what the case's steps
    made (the reading's ``state``, whose value ``base`` holds, the route's action and
    rule, the path, the usage, whose fresh dump ``base`` holds): the same values, the
    same fields set."""
    given = {
        **base,
        "state": state,
        "route": _route_value(base["route"]),
        "usage": trusted(Usage, base["usage"]),
    }
    return _built(CaseRecord, given)


@functools.cache
def _route_value(action: str) -> Any:
    """The record's ``route`` as validation makes it of ``action`` (an :class:`Action`
    member, or the literal)."""
    return _ROUTE.validate_python(action)


_ROUTE: TypeAdapter[Any] = TypeAdapter(PipelineAction)

B = TypeVar("B", bound=BaseModel)


def _built(cls: type[B], given: dict[str, Any]) -> B:
    """What validating ``given`` as ``cls`` holds when every given value is already what
    validation makes of it: the values in field order (a dump writes them in this
    order), the defaults of the fields not given, the given fields as the fields set."""
    order, constants, defaults = _layout(cls)
    values = {
        name: given[name]
        if name in given
        else constants[name]
        if name in constants
        else defaults[name].get_default(call_default_factory=True)
        for name in order
    }
    built = trusted(cls, values)
    _set_fields_set(built, set(given))
    return built


@functools.cache
def _layout(
    cls: type[BaseModel],
) -> tuple[tuple[str, ...], dict[str, Any], dict[str, FieldInfo]]:
    """The field order, the defaults that are immutable constants (what ``get_default``
    returns for them: the value itself), the other optional fields."""
    fields = cls.model_fields
    optional = {n: f for n, f in fields.items() if not f.is_required()}
    constants = {
        n: f.default
        for n, f in optional.items()
        if f.default_factory is None and f.default.__class__ in _CONSTANTS
    }
    return tuple(fields), constants, {n: f for n, f in optional.items() if n not in constants}


_CONSTANTS = frozenset({type(None), bool, int, float, str})


_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__


async def decide_case(rt: Runtime, panel: Panel, line: int) -> CaseRecord:
    """Decide one case under ``rt`` (resumable: completed steps are replayed from the journal).

    The case's events are appended to the run's journal in one batch when it ends."""
    record, events = await decide_case_events(rt, panel, line)
    rt.journal.append_batch(rt.run_id, events)
    return record


async def decide_case_events(
    rt: Runtime, panel: Panel, line: int
) -> tuple[CaseRecord, list[NewEvent]]:
    """Decide one case under ``rt``; the record and the case's events not yet journalled,
    for the caller to append (the run loop appends a block of cases at once).

    Events that had to be durable earlier (those before a model call, and the calls
    themselves) are already in the journal; a crash before the caller appends the rest
    loses only deterministic steps, which a resumed run computes again."""
    log = CaseLog(rt.journal, rt.run_id, line, fresh=rt.fresh_case(line))
    done = log.replayed("record", CaseRecord)
    if done is not None:
        return done, []
    case = _Case(rt, panel, line, log)
    case.input = log.step("input", ev.CASE_INPUT, CaseInput, lambda: _case_input(panel, line))
    record = await _run(case)
    record = log.step("record", ev.CASE_RECORD, CaseRecord, lambda: record)
    return record, log.take()


def _case_input(panel: Panel, line: int) -> CaseInput:
    """``CaseInput(id=panel.id, line=line, panel=panel)``, without validating again a
    validated panel (validation keeps the instance) and its text id."""
    values = {"id": panel.id, "line": line, "panel": panel}
    if panel.__class__ is Panel and panel.id.__class__ is str and line.__class__ is int:
        return trusted(CaseInput, values)
    return CaseInput.model_validate(values)


async def _run(case: _Case) -> CaseRecord:
    rt, panel = case.rt, case.panel
    reading = case.reading = case.log.step(
        "reading", ev.CASE_READING, Reading, lambda: rt.read(panel)
    )
    case.path.append(f"read:{reading.state.value}")
    route = case.route = case.log.step(
        "route", ev.CASE_ROUTE, Route, lambda: route_step(rt, panel, reading)
    )
    action = route.action
    case.path.append(f"route:{action}")
    guard = case.guard = case.log.step(
        "guard", ev.CASE_GUARD, GuardStep, lambda: guard_step(rt, panel, reading)
    )
    if action in _AUTO:
        if guard.backed:
            case.path.append("guard:backed")
            return await _commit(
                case,
                action=action,
                decision=reading.decision,
                auto=True,
                basis="guard",
                reason=guard.reason,
            )
        case.path.append("guard:refused")
        why = f"{reading.state.value} agreement not accepted on its face: {guard.reason}"
        return await _seek_context(case, why, "reask")
    if action == "seek_context":
        return await _seek_context(case, f"route {action} (rule {route.rule})", None)
    if action == "deliberate":
        return await _seek_context(case, f"route {action} (rule {route.rule})", "dci")
    if action in ("escalate", "concord"):
        return await _escalate(case, f"route {action} (rule {route.rule})")
    # Not reached: Runtime.rules refuses a rule naming an action the pipeline does not run
    # (and a record could not name it).
    raise ConfigError(
        f"route names action {action!r}, which the pipeline does not run", field="routing"
    )


async def _followup_answers(case: _Case, round_: int) -> FollowupStep:
    """Second answers for round ``round_``: recorded, live, or unavailable (with why)."""
    rt, sc = case.rt, case.rt.policy.seek_context
    recorded = recorded_second_answers(case.panel) if sc.use_recorded else {}
    if recorded and round_ == 0:
        return FollowupStep(source="recorded", answers=dict(sorted(recorded.items())))
    if not rt.can_call_models():
        first = "the recorded re-ask was used" if recorded else "no recorded re-ask in the panel"
        why = f"{first} and no model configured (seek_context.model or ${MODEL_ENV})"
        return FollowupStep(source="none", why=why)
    if not case_options(case.panel):
        return FollowupStep(source="none", why="the case has no explicit options to re-ask")
    before = case.client.usage.model_copy()
    try:
        answers, voices = await live_reask(
            case.panel,
            case.client,
            perturbation=sc.perturbation,
            context=sc.context,
            models=sc.models,
            shared=bool(rt.model),
        )
    except JOURNAL_FAULTS:
        raise  # the journal's, not the follow-up's: the run stops, resumable
    except DissensusError as exc:
        return FollowupStep(source="none", usage=_spent(case, before), why=f"re-ask failed: {exc}")
    return FollowupStep(
        source="live",
        perturbation=sc.perturbation,
        answers=dict(sorted(answers.items())),
        voices=voices,
        usage=_spent(case, before),
    )


def _spent(case: _Case, before: Usage) -> Usage:
    now = case.client.usage
    return Usage(
        calls=now.calls - before.calls,
        attempts=now.attempts - before.attempts,
        prompt_tokens=now.prompt_tokens - before.prompt_tokens,
        completion_tokens=now.completion_tokens - before.completion_tokens,
        cost=now.cost - before.cost,
    )


async def _seek_context(case: _Case, why: str, kind: str | None) -> CaseRecord:
    sc = case.rt.policy.seek_context
    followup = kind if kind == "dci" else sc.followup
    if kind == "reask" and sc.followup == "dci":
        followup = "dci"
    case.path.append("seek_context")
    if followup == "none" or sc.max_followups == 0:
        return await _accept_or_escalate(case, f"{why}; no follow-up configured")
    if followup == "dci":
        return await _deliberate(case, why)
    last = why
    for round_ in range(sc.max_followups):
        got = await case.astep(
            f"followup{round_}",
            ev.CASE_FOLLOWUP,
            FollowupStep,
            partial(_followup_answers, case, round_),
        )
        case.usage.add(got.usage)
        if got.source == "none":
            case.path.append("followup:unavailable")
            if case.acceptance is not None:
                # Acceptance already judged this case after an earlier round: no second look.
                return await _escalate(case, f"{last}; no further follow-up: {got.why}")
            return await _accept_or_escalate(case, f"{why}; {got.why}")
        case.path.append(f"followup:{got.source}")
        case.followup = got
        reread = case.reread = case.log.step(
            f"reread{round_}", ev.CASE_READING, Reading, partial(_reread, case, got)
        )
        case.path.append(f"reread:{reread.state.value}")
        acc = case.acceptance = case.log.step(
            f"acceptance{round_}", ev.CASE_ACCEPTANCE, AcceptanceStep, partial(_accept, case, got)
        )
        case.figures = acc.figures or case.figures
        if acc.accepted:
            case.path.append(f"accept:{acc.basis}")
            return await _commit(
                case,
                action="auto_explain",
                decision=acc.decision,
                auto=True,
                basis=acc.basis,
                reason=f"{why}; after {got.source} re-ask: {acc.reason}",
            )
        case.path.append("accept:refused")
        last = f"{why}; after {got.source} re-ask: {acc.reason}"
        if case.rt.learned is not None:
            # Learned acceptance scores a case once, on the features it was calibrated
            # with (one re-ask); another round would be a second look at the same case.
            break
    return await _escalate(case, last)


async def _commit(case: _Case, **fields: Any) -> CaseRecord:
    """An automatic commit: unless the acceptance monitor has suspended the case's
    stratum (then it escalates, naming the suspension), record it and, for the seeded
    audit share, open a blind audit item."""
    rt = case.rt
    if rt.learned is not None:
        from dissensus.acceptance.monitor import MonitorStep, case_stratum

        stratum = case_stratum(rt.acceptance, case.panel.meta)
        state = case.log.step(
            "monitor",
            ev.CASE_MONITOR,
            MonitorStep,
            lambda: rt.monitor_state(stratum),
        )
        if state.suspended:
            case.path.append("accept:suspended")
            rt.journal_suspension(state)
            return await _escalate(case, f"{fields['reason']}; {state.reason()}")
    record = case.record(**fields)
    if is_audited(
        rt.policy.acceptance.audit_seed, rt.run_id, case.line, rt.policy.acceptance.audit_rate
    ):
        case.log.step(
            "audit",
            AUDIT_OPENED,
            ReviewItem,
            lambda: _audit_item(case, record),
            json_fields=_JSON_FIELDS,
            form=journal_form,
        )
    return record


def _audit_item(case: _Case, record: CaseRecord) -> ReviewItem:
    """The blind audit item: the review item without the committed answer or suggestion."""
    from dissensus.acceptance.monitor import case_stratum

    item = _review_item(
        case, review_id_for(case.rt.run_id, case.line), "audit of an automatic decision"
    )
    acc = case.rt.acceptance
    blank = {"decision": None}
    return item.model_copy(
        update={
            "suggestion": None,
            "acceptance": None,
            "reading": item.reading.model_copy(update=blank),
            "reread": item.reread.model_copy(update=blank) if item.reread else None,
            "guard": None,
            "audit": True,
            "stratum": case_stratum(acc, case.panel.meta) if acc else None,
            "acceptance_sha256": acc.get("sha256") if acc else None,
        }
    )


def _reread(case: _Case, got: FollowupStep) -> Reading:
    return case.rt.read(_perturbed(case.panel, got.answers))


async def _accept_or_escalate(case: _Case, why: str) -> CaseRecord:
    """No follow-up ran: learned acceptance (when configured) judges the panel as it is."""
    if case.rt.learned is None:
        return await _escalate(case, why)
    acc = case.acceptance = case.log.step(
        "acceptance",
        ev.CASE_ACCEPTANCE,
        AcceptanceStep,
        partial(_accept, case, FollowupStep(source="none")),
    )
    case.figures = acc.figures or case.figures
    if acc.accepted:
        case.path.append("accept:learned")
        return await _commit(
            case,
            action="auto_explain",
            decision=acc.decision,
            auto=True,
            basis="learned",
            reason=f"{why}; {acc.reason}",
        )
    case.path.append("accept:refused")
    return await _escalate(case, f"{why}; {acc.reason}")


def _accept(case: _Case, got: FollowupStep) -> AcceptanceStep:
    """The run's acceptor (:mod:`dissensus.pipeline.acceptors`) judges the case once, on
    the signals journalled with its verdict."""
    acc = case.rt.policy.acceptance
    signals = agent_signals(case.panel, got.answers, acc.markers, got.voices)
    return case.rt.acceptor.judge(AcceptInput(case.panel, case.reading, got.answers, signals))


async def _deliberate(case: _Case, why: str) -> CaseRecord:
    async def compute() -> DeliberationStep:
        if not case.rt.can_call_models():
            return DeliberationStep(why="no model configured for the DCI follow-up")
        before = case.client.usage.model_copy()
        try:
            packet = await run_dci(case.panel, case.client)
        except JOURNAL_FAULTS:
            raise  # the journal's, not the deliberation's: the run stops, resumable
        except DissensusError as exc:
            return DeliberationStep(usage=_spent(case, before), why=f"deliberation failed: {exc}")
        return DeliberationStep(packet=packet, usage=_spent(case, before))

    got = await case.astep("deliberation", ev.CASE_PACKET, DeliberationStep, compute)
    case.usage.add(got.usage)
    packet = got.packet
    if packet is None:
        case.path.append("followup:unavailable")
        return await _escalate(case, f"{why}; {got.why}")
    case.packet = got
    case.path.append(f"deliberation:{packet.path}")
    if packet.status != "complete":
        # A packet is produced on every path; when the deliberation stopped early, say so.
        detail = packet.status_detail or packet.status
        return await _escalate(
            case,
            f"{why}; DCI deliberation stopped early ({packet.status}: {detail}); packet attached for review",
        )
    return await _escalate(case, f"{why}; DCI packet attached for review")


async def _escalate(case: _Case, why: str) -> CaseRecord:
    rt = case.rt
    if rt.policy.concord.enabled and has_utilities(case.panel):
        got = await case.astep(
            "concord",
            ev.CASE_CERTIFICATE,
            ConcordStep,
            lambda: run_concord(case.panel, rt.policy.concord),
        )
        case.concord = got
        case.path.append(f"concord:{got.status}")
        if got.status == "certified":
            return case.record(
                action="concord",
                decision=got.decision,
                auto=True,
                basis="concord_certificate",
                reason=f"{why}; CONCORD certified {got.decision!r} (every agent at or above the floor)",
            )
        why = f"{why}; CONCORD ended {got.status}: {got.summary}"
    elif rt.policy.concord.enabled and "utilities" in case.panel.meta:
        why = f"{why}; CONCORD not run: {concord_refusal(case.panel)}"
    review_id = review_id_for(rt.run_id, case.line)
    item = case.log.step(
        "review",
        ev.REVIEW_OPENED,
        ReviewItem,
        lambda: _review_item(case, review_id, why),
        json_fields=_JSON_FIELDS,
        form=journal_form,
    )
    case.path.append("escalate")
    assert case.reading is not None
    return case.record(
        action="escalate",
        decision=None,
        auto=False,
        basis=None,
        reason=item.reason,
        suggestion=case.reading.decision,
        review_id=review_id,
    )


def _review_item(case: _Case, review_id: str, why: str) -> ReviewItem:
    assert case.reading is not None
    signals = {s.agent: s for s in (case.acceptance.signals if case.acceptance else [])}
    second = case.followup.answers if case.followup else {}
    positions = [_position(o, second, signals) for o in case.panel.outputs]
    labels = [o.decision for o in case.panel.outputs if o.decision is not None]
    dims = sorted({k for o in case.panel.outputs for k in (o.values or {})})
    given = {
        "review_id": review_id,
        "run_id": case.rt.run_id,
        "line": case.line,
        "id": case.panel.id,
        "reason": why,
        "suggestion": case.reading.decision,
        "options": review_options(option_ids(case.panel.meta), labels),
        "positions": positions,
        "value_dimensions": dims,
        "panel": _public_panel(case),
        "reading": case.reading,
        "reread": case.reread,
        "guard": case.guard,
        "acceptance": case.acceptance,
        "packet": case.packet.packet if case.packet else None,
        "concord": case.concord,
    }
    return _built(ReviewItem, given) if _plain_review(given) else ReviewItem(**given)


_POSITION = frozenset({AgentPosition})

_REVIEW_STEPS: dict[str, type[BaseModel]] = {
    "reread": Reading,
    "guard": GuardStep,
    "acceptance": AcceptanceStep,
    "concord": ConcordStep,
}


def _plain_review(given: dict[str, Any]) -> bool:
    """Whether a review item's values are what validating them keeps: text, the case's
    steps as instances of their models, validated positions."""
    return (
        given["reading"].__class__ is Reading
        and all(
            given[name] is None or given[name].__class__ is cls
            for name, cls in _REVIEW_STEPS.items()
        )
        and given["packet"] is None
        and given["panel"].__class__ is dict
        and all(given[name].__class__ is str for name in ("review_id", "run_id", "id", "reason"))
        and (given["suggestion"] is None or given["suggestion"].__class__ is str)
        and given["line"].__class__ is int
        and _POSITION.issuperset(map(type, given["positions"]))
        and _STR.issuperset(map(type, given["options"]))
        and _STR.issuperset(map(type, given["value_dimensions"]))
    )


def _position(
    o: AgentOutput, second: dict[str, SecondAnswer], signals: dict[str, AgentSignal]
) -> AgentPosition:
    values = {
        "agent": o.agent,
        "family": o.family,
        "decision": o.decision,
        "second": second[o.agent].decision if o.agent in second else None,
        "stable": signals[o.agent].stable if o.agent in signals else None,
        "confidence": o.confidence,
        "values": o.values,
        "reasoning": o.reasoning,
    }
    # A validated output's fields, a validated answer's decision and a signal's flag are
    # valid position fields: no second validation.
    valid = o.__class__ is AgentOutput and (o.values is None or o.values.__class__ is dict)
    return trusted(AgentPosition, values) if valid else AgentPosition(**values)


_JSON_FIELDS = ("panel",)
"""The review item's fields that hold JSON (journalled as they are)."""


# The JSON of ReviewItem.panel (see there).
def _public_panel(case: _Case) -> dict[str, Any]:
    """The panel as a reviewer sees it (labelled data, ``meta.gold``, is withheld)."""
    panel = case.panel
    given = case.log.dumped(case.input) if case.input is not None else None
    if given is not None and panel.__class__ is Panel:
        # The panel's JSON as the case's input step made it (the same dump), shared.
        data: dict[str, Any] = dict(given["panel"])
    else:
        data = panel.model_dump(mode="json")  # the JSON the review item keeps
    data["meta"] = {k: v for k, v in data.get("meta", {}).items() if k != "gold"}
    return data


_FAILED = re.compile(
    r"(?:re-ask|deliberation) failed: (.+)$"
    r"|DCI deliberation stopped early \((model_failure: .+)\); packet attached for review$"
)
"""A model follow-up that failed, in a record's reason: a re-ask or a deliberation that
raised, or a DCI packet that ended because every participant of a stage failed."""
_FAILED_MARKS = (" failed: ", "DCI deliberation stopped early (")


def followup_outcome(record: CaseRecord) -> tuple[bool, str | None]:
    """Whether the case attempted a model follow-up (a live re-ask or a DCI
    deliberation), and the cause when it failed."""
    reason = record.reason
    # Every match of _FAILED holds one of these: most reasons are not searched.
    match = (
        _FAILED.search(reason) if _FAILED_MARKS[0] in reason or _FAILED_MARKS[1] in reason else None
    )
    if match:
        return True, match.group(1) or match.group(2)
    attempted = any(
        step == "followup:live" or step.startswith("deliberation:") for step in record.path
    )
    return attempted, None


@dataclass(frozen=True)
class FollowupTally:
    """A run's model follow-ups: attempted, failed, the failed cases sent to review,
    each failure's cause (the first in input order first)."""

    attempted: int = 0
    failed: int = 0
    to_review: int = 0
    causes: tuple[str, ...] = ()
    """Distinct causes, in the order their first case comes in the input."""

    @property
    def first(self) -> str | None:
        """The first failure's cause (``None``: none failed)."""
        return self.causes[0] if self.causes else None

    def every_one_failed(self) -> str | None:
        """The one cause when every attempted follow-up failed for it, else ``None``."""
        if self.failed and self.failed == self.attempted and len(self.causes) == 1:
            return self.causes[0]
        return None

    def warning(self) -> str | None:
        """The one line saying that some follow-ups failed (``None``: none did)."""
        if not self.failed:
            return None
        went = (
            "their cases went to review"
            if self.to_review == self.failed
            else f"{self.to_review} of their cases went to review"
        )
        return (
            f"{self.failed} of {self.attempted} model follow-up(s) failed "
            f"(first: {self.first}); {went}"
        )


class FollowupCounter:
    """:func:`followup_tally` one record at a time (given in input order), holding counts
    and the distinct causes, never the records: what a run's summary keeps as it goes."""

    def __init__(self) -> None:
        self.attempted = self.failed = self.to_review = 0
        self.causes: dict[str, None] = {}

    def add(self, record: CaseRecord) -> None:
        tried, cause = followup_outcome(record)
        self.attempted += tried
        if cause is not None:
            self.failed += 1
            self.to_review += record.action == "escalate"
            self.causes.setdefault(cause)

    @property
    def tally(self) -> FollowupTally:
        return FollowupTally(self.attempted, self.failed, self.to_review, tuple(self.causes))


def followup_tally(records: Iterable[CaseRecord]) -> FollowupTally:
    """Count the model follow-ups of ``records`` (in input order)."""
    counter = FollowupCounter()
    for record in sorted(records, key=lambda r: r.line):
        counter.add(record)
    return counter.tally
