"""The composed pipeline for one case: read -> guard -> route -> protocol -> record.

1. **Read** the panel (:mod:`dissensus.states`): CA / DA / CD / DD.
2. **Route** it through the policy's defeasible rules (defaults CA->auto,
   DA->auto_explain, DD->seek_context, CD->escalate).
3. **Guard** every automatic route (:mod:`dissensus.guard`): an agreement is committed
   on the guard's word only when the voters' evidence is auditable and independent
   (invariants 1 and 2 hold, and 3 when a guard calibration is configured) and the
   guard's answer is the panel's. Otherwise the case goes to ``seek_context`` with the
   guard's refusal as the reason.
4. **Seek context**: a bounded follow-up (:mod:`dissensus.pipeline.followup`), one more
   reading of the perturbed panel, then acceptance: *learned acceptance* when an
   acceptance file is configured (:mod:`dissensus.pipeline.learned`; also when no
   follow-up could run, on the features the panel has), else the trust regions of
   :mod:`dissensus.pipeline.reliability`: commit when the measured rule says the answer
   can be trusted, else escalate with the reason.
5. **Escalate**: CONCORD first when the case has explicit options and role utilities
   (a certificate commits; a shortfall goes to the human with the record), otherwise a
   human-review item holding the panel, the readings, the positions and value profiles
   side by side and any packet. Escalation never blocks: the case ends waiting.
6. **Record**: the final :class:`~dissensus.pipeline.records.CaseRecord`.

Every step is a journalled, memoised step (:mod:`dissensus.pipeline.durable`), so the
same code path resumes a killed run.

Choices where the design is silent: a route action other than the four standard ones
maps as ``concord`` -> escalate with CONCORD, ``deliberate`` -> seek_context with DCI,
anything else -> escalate, with the reason naming the action; a DCI follow-up's packet
goes to the reviewer rather than being committed (deliberation among one model's
participants is not independent evidence); a panel's ``meta.gold`` (labelled data) is
never read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from dissensus.errors import DissensusError
from dissensus.guard.decision import GuardDecision
from dissensus.pipeline.durable import CaseClient, CaseLog
from dissensus.pipeline.followup import case_options, live_reask, run_dci
from dissensus.pipeline.gates import guard_payload, route_payload
from dissensus.pipeline.learned import learned_payload
from dissensus.pipeline.negotiate import concord_refusal, has_utilities, run_concord
from dissensus.pipeline.records import AgentPosition, CaseRecord, ReviewItem, review_id_for
from dissensus.pipeline.reliability import calibrated_accept
from dissensus.pipeline.runtime import MODEL_ENV, Runtime
from dissensus.pipeline.signals import SecondAnswer, agent_signals, recorded_second_answers
from dissensus.states import Reading
from dissensus.types import AgentOutput, Panel, Usage

__all__ = ["decide_case"]

_AUTO = ("auto", "auto_explain")


def _perturbed(panel: Panel, second: dict[str, SecondAnswer]) -> Panel:
    outputs = []
    for out in panel.outputs:
        again = second.get(out.agent)
        outputs.append(
            AgentOutput(
                agent=out.agent,
                decision=again.decision if again else None,
                reasoning=(again.reasoning if again and again.reasoning else out.reasoning),
                values=out.values,
                confidence=out.confidence,
                evidence=out.evidence,
                family=out.family,
            )
        )
    return Panel(id=panel.id, meta={}, outputs=outputs)


@dataclass
class _Case:
    rt: Runtime
    panel: Panel
    line: int
    log: CaseLog
    client: CaseClient
    path: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    reading: Reading | None = None
    route: dict[str, Any] = field(default_factory=dict)
    guard: dict[str, Any] | None = None
    reread: dict[str, Any] | None = None
    acceptance: dict[str, Any] | None = None
    second: dict[str, SecondAnswer] = field(default_factory=dict)
    packet: dict[str, Any] | None = None
    concord: dict[str, Any] | None = None
    figures: dict[str, Any] | None = None
    """Learned acceptance's figures, once an acceptance file judged the case."""

    async def astep(self, step: str, type: str, compute: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        found = self.log.stored(step)
        if found is not None:
            return found
        return self.log.append(step, type, await compute())

    def record(self, **fields: Any) -> CaseRecord:
        assert self.reading is not None
        base: dict[str, Any] = {
            "id": self.panel.id,
            "line": self.line,
            "state": self.reading.state.value,
            "route": self.route["action"],
            "rule": self.route["rule"],
            "path": list(self.path),
            "usage": self.usage.model_dump(),
            "acceptance": self.figures,
        }
        base.update(fields)
        return CaseRecord.model_validate(base)


async def decide_case(rt: Runtime, panel: Panel, line: int) -> CaseRecord:
    """Decide one case under ``rt`` (resumable: completed steps are replayed from the journal)."""
    log = CaseLog(rt.journal, rt.run_id, line)
    done = log.stored("record")
    if done is not None:
        return CaseRecord.model_validate(done)
    case = _Case(rt, panel, line, log, rt.client.for_case(log))
    log.step("input", "case.input", lambda: {"id": panel.id, "line": line, "panel": panel.model_dump(mode="json")})
    record = await _run(case)
    stored = log.step("record", "case.record", lambda: record.model_dump(mode="json"))
    return CaseRecord.model_validate(stored)


async def _run(case: _Case) -> CaseRecord:
    rt, panel = case.rt, case.panel
    case.reading = Reading.model_validate(
        case.log.step("reading", "case.reading", lambda: rt.read(panel).model_dump(mode="json"))
    )
    reading = case.reading
    case.path.append(f"read:{reading.state.value}")
    case.route = case.log.step("route", "case.route", lambda: route_payload(rt, panel, reading))
    action = str(case.route["action"])
    case.path.append(f"route:{action}")
    case.guard = case.log.step("guard", "case.guard", lambda: guard_payload(rt, panel, reading))
    if action in _AUTO:
        if case.guard["backed"]:
            case.path.append("guard:backed")
            return case.record(
                action=action, decision=reading.decision, auto=True, basis="guard", reason=str(case.guard["reason"])
            )
        case.path.append("guard:refused")
        why = f"{reading.state.value} agreement not accepted on its face: {case.guard['reason']}"
        return await _seek_context(case, why, "reask")
    if action == "seek_context":
        return await _seek_context(case, f"route {action} (rule {case.route['rule']})", None)
    if action == "deliberate":
        return await _seek_context(case, f"route {action} (rule {case.route['rule']})", "dci")
    if action in ("escalate", "concord"):
        return await _escalate(case, f"route {action} (rule {case.route['rule']})")
    return await _escalate(case, f"route names action {action!r}, which the pipeline does not run")


async def _followup_answers(case: _Case, round_: int) -> dict[str, Any]:
    """Second answers for round ``round_``: recorded, live, or unavailable (with why)."""
    rt, sc = case.rt, case.rt.policy.seek_context
    recorded = recorded_second_answers(case.panel) if sc.use_recorded else {}
    if recorded and round_ == 0:
        return {"source": "recorded", "answers": _dump_answers(recorded), "usage": Usage().model_dump()}
    if not rt.can_call_models():
        why = "no recorded re-ask in the panel and no model configured (seek_context.model or $" + MODEL_ENV + ")"
        return {"source": "none", "answers": {}, "usage": Usage().model_dump(), "why": why}
    if not case_options(case.panel):
        return {"source": "none", "answers": {}, "usage": Usage().model_dump(), "why": "the case has no explicit options to re-ask"}
    before = case.client.usage.model_copy()
    try:
        answers = await live_reask(case.panel, case.client, perturbation=sc.perturbation, context=sc.context)
    except (DissensusError, ValueError) as exc:
        return {"source": "none", "answers": {}, "usage": _spent(case, before), "why": f"re-ask failed: {exc}"}
    return {"source": "live", "perturbation": sc.perturbation, "answers": _dump_answers(answers), "usage": _spent(case, before)}


def _spent(case: _Case, before: Usage) -> dict[str, Any]:
    now = case.client.usage
    return Usage(
        calls=now.calls - before.calls,
        attempts=now.attempts - before.attempts,
        prompt_tokens=now.prompt_tokens - before.prompt_tokens,
        completion_tokens=now.completion_tokens - before.completion_tokens,
        cost=now.cost - before.cost,
    ).model_dump()


def _dump_answers(answers: dict[str, SecondAnswer]) -> dict[str, Any]:
    return {agent: a.model_dump(mode="json") for agent, a in sorted(answers.items())}


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
        got = await case.astep(f"followup{round_}", "case.followup", partial(_followup_answers, case, round_))
        case.usage.add(Usage.model_validate(got["usage"]))
        if got["source"] == "none":
            case.path.append("followup:unavailable")
            return await _accept_or_escalate(case, f"{why}; {got['why']}")
        case.path.append(f"followup:{got['source']}")
        case.second = {a: SecondAnswer.model_validate(v) for a, v in got["answers"].items()}
        second = case.second
        case.reread = case.log.step(f"reread{round_}", "case.reading", partial(_reread, case, second))
        case.path.append(f"reread:{case.reread['state']}")
        case.acceptance = case.log.step(f"acceptance{round_}", "case.acceptance", partial(_accept, case, second))
        case.figures = case.acceptance.get("figures") or case.figures
        if case.acceptance["accepted"]:
            case.path.append(f"accept:{case.acceptance['basis']}")
            return case.record(
                action="auto_explain",
                decision=case.acceptance["decision"],
                auto=True,
                basis=case.acceptance["basis"],
                reason=f"{why}; after {got['source']} re-ask: {case.acceptance['reason']}",
            )
        case.path.append("accept:refused")
        last = f"{why}; after {got['source']} re-ask: {case.acceptance['reason']}"
    return await _escalate(case, last)


def _reread(case: _Case, second: dict[str, SecondAnswer]) -> dict[str, Any]:
    data: dict[str, Any] = case.rt.read(_perturbed(case.panel, second)).model_dump(mode="json")
    return data


async def _accept_or_escalate(case: _Case, why: str) -> CaseRecord:
    """No follow-up ran: learned acceptance (when configured) judges the panel as it is."""
    if case.rt.learned is None:
        return await _escalate(case, why)
    case.acceptance = case.log.step("acceptance", "case.acceptance", partial(_accept, case, {}))
    case.figures = case.acceptance.get("figures") or case.figures
    if case.acceptance["accepted"]:
        case.path.append("accept:learned")
        return case.record(
            action="auto_explain",
            decision=case.acceptance["decision"],
            auto=True,
            basis="learned",
            reason=f"{why}; {case.acceptance['reason']}",
        )
    case.path.append("accept:refused")
    return await _escalate(case, f"{why}; {case.acceptance['reason']}")


def _accept(case: _Case, second: dict[str, SecondAnswer]) -> dict[str, Any]:
    acc = case.rt.policy.acceptance
    signals = agent_signals(case.panel, second, acc.markers)
    if case.rt.learned is not None:
        raw = (case.guard or {}).get("decision")
        learned = learned_payload(
            case.rt.learned,
            case.panel,
            reading=case.reading,
            guard=GuardDecision.model_validate(raw) if raw else None,
            second=second,
        )
        learned["signals"] = [s.model_dump(mode="json") for s in signals]
        return learned
    result = calibrated_accept(
        signals,
        case.rt.regions,
        veto_precision=acc.veto_precision,
        min_families=acc.min_families,
        fallback_max_score=acc.fallback_max_score,
    )
    out: dict[str, Any] = result.model_dump(mode="json")
    out["signals"] = [s.model_dump(mode="json") for s in signals]
    return out


async def _deliberate(case: _Case, why: str) -> CaseRecord:
    async def compute() -> dict[str, Any]:
        if not case.rt.can_call_models():
            return {"packet": None, "usage": Usage().model_dump(), "why": "no model configured for the DCI follow-up"}
        before = case.client.usage.model_copy()
        try:
            packet = await run_dci(case.panel, case.client)
        except DissensusError as exc:
            return {"packet": None, "usage": _spent(case, before), "why": f"deliberation failed: {exc}"}
        return {"packet": packet, "usage": _spent(case, before)}

    got = await case.astep("deliberation", "case.packet", compute)
    case.usage.add(Usage.model_validate(got["usage"]))
    if got["packet"] is None:
        case.path.append("followup:unavailable")
        return await _escalate(case, f"{why}; {got['why']}")
    case.packet = got["packet"]
    case.path.append(f"deliberation:{got['packet'].get('path', '?')}")
    status = got["packet"].get("status", "complete")
    if status != "complete":
        # A packet is produced on every path; when the deliberation stopped early, say so.
        detail = got["packet"].get("status_detail") or status
        return await _escalate(case, f"{why}; DCI deliberation stopped early ({status}: {detail}); packet attached for review")
    return await _escalate(case, f"{why}; DCI packet attached for review")


async def _escalate(case: _Case, why: str) -> CaseRecord:
    rt = case.rt
    if rt.policy.concord.enabled and has_utilities(case.panel):
        got = await case.astep("concord", "case.certificate", lambda: run_concord(case.panel, rt.policy.concord))
        case.concord = got
        case.path.append(f"concord:{got['status']}")
        if got["status"] == "certified":
            return case.record(
                action="concord",
                decision=got["decision"],
                auto=True,
                basis="concord_certificate",
                reason=f"{why}; CONCORD certified {got['decision']!r} (every agent at or above the floor)",
            )
        why = f"{why}; CONCORD ended {got['status']}: {got.get('summary', '')}"
    elif rt.policy.concord.enabled and "utilities" in case.panel.meta:
        why = f"{why}; CONCORD not run: {concord_refusal(case.panel)}"
    review_id = review_id_for(rt.run_id, case.line)
    item = case.log.step("review", "review.opened", lambda: _review_item(case, review_id, why).model_dump(mode="json"))
    case.path.append("escalate")
    assert case.reading is not None
    return case.record(
        action="escalate",
        decision=None,
        auto=False,
        basis=None,
        reason=str(item["reason"]),
        suggestion=case.reading.decision,
        review_id=review_id,
    )


def _review_item(case: _Case, review_id: str, why: str) -> ReviewItem:
    assert case.reading is not None
    signals = {s["agent"]: s for s in (case.acceptance or {}).get("signals", [])}
    positions = [
        AgentPosition(
            agent=o.agent,
            family=o.family,
            decision=o.decision,
            second=case.second[o.agent].decision if o.agent in case.second else None,
            stable=signals[o.agent]["stable"] if o.agent in signals else None,
            confidence=o.confidence,
            values=o.values,
            reasoning=o.reasoning,
        )
        for o in case.panel.outputs
    ]
    labels = sorted({o.decision for o in case.panel.outputs if o.decision is not None})
    options = [oid for oid, _ in case_options(case.panel)]
    dims = sorted({k for o in case.panel.outputs for k in (o.values or {})})
    return ReviewItem(
        review_id=review_id,
        run_id=case.rt.run_id,
        line=case.line,
        id=case.panel.id,
        reason=why,
        suggestion=case.reading.decision,
        options=sorted(set(labels) | set(options)),
        positions=positions,
        value_dimensions=dims,
        panel=_public_panel(case.panel),
        reading=case.reading.model_dump(mode="json"),
        reread=case.reread,
        guard=case.guard,
        acceptance=case.acceptance,
        packet=case.packet,
        concord=case.concord,
    )


def _public_panel(panel: Panel) -> dict[str, Any]:
    """The panel as a reviewer sees it (labelled data, ``meta.gold``, is withheld)."""
    data: dict[str, Any] = panel.model_dump(mode="json")
    data["meta"] = {k: v for k, v in data.get("meta", {}).items() if k != "gold"}
    return data
