"""Assemble the decision packet from a finished (or stopped) deliberation (stage 8).

Pure: the workspace and the run's outcome in, a :class:`DecisionPacket` out.

* **Rationale**: the synthesis text; without a synthesis (early stop, failed act) a
  rationale stating the rule and the numbers that chose the option.
* **Evidence**: grounding attached to the selected option, then the synthesis's.
* **Residual objections**: every tension still open at the end (all of them, not only
  those on the selected option — an open objection to a rival is still dissent).
* **Minority report**: participants whose last ``recommend`` named another option,
  grouped by option, with their words and mean confidence; when nobody recommended,
  the participants whose best score went to another option (a best score shared with
  the selected option is no dissent; one shared by others is grouped under the first
  of them in canonical order).
* **Supporters** of the selected option: its proposer and those who extended it, and
  every participant whose best score (alone or tied) went to it, unless that
  participant's last ``recommend`` named another option, whatever it proposed,
  extended or scored (it is then in the minority report, never on both sides). Ties are read the same whatever order a model wrote
  its scores' keys in.
* **Reopen conditions**: the synthesis's list, plus one per open *blocking* objection
  on the selected option, plus, when the list would otherwise be empty, the score
  margin condition ("reopen if a re-score brings the runner-up within the margin").
* **Mean scores**: an option's mean in the last round that scored it (an option
  eliminated in round 1 keeps its round-1 mean; later rounds score finalists only), and
  none for an option nobody scored (merged, dropped, or a stop before scoring), never
  0.0; the margin reopen condition names a scored rival only, one the last round that
  scored scored (an option eliminated earlier is no rival, whatever its old mean).
* **Next actions**: the synthesis's and the workspace's, de-duplicated; after an early
  stop, resuming the deliberation is the first action.
"""

from __future__ import annotations

from collections.abc import Mapping

from dissensus.dci.acts import ActFamily, RawAct
from dissensus.dci.outranking import CascadeResult
from dissensus.dci.packet import (
    ConvergenceRecord,
    DecisionPacket,
    MinorityPosition,
    Objection,
    OptionSummary,
    ProcessMetrics,
    SelectedOption,
)
from dissensus.dci.selection import mean_scores
from dissensus.dci.task import DCIConfig, Task
from dissensus.dci.workspace import ActRecord, Workspace
from dissensus.types import Usage

__all__ = ["assemble_packet"]

_EPS = 1e-9
"""Scores this close are equal (as in the outranking cascade)."""


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(i.strip() for i in items if i.strip()))


def assemble_packet(
    *,
    task: Task,
    ws: Workspace,
    config: DCIConfig,
    participants: Mapping[str, str],
    status: str,
    detail: str | None,
    path: str,
    selected: str | None,
    conv: ConvergenceRecord | None,
    fallback: CascadeResult | None,
    recommends: Mapping[str, ActRecord],
    synthesis: RawAct | None,
    usage: Usage,
    rounds: int,
    max_prompt_tokens: int,
    last_means: Mapping[str, float] | None = None,
) -> DecisionPacket:
    """Build the packet; never fails on a partial workspace.

    ``last_means``: each option's mean score in the last round that scored it (the
    flow's record); the scores of the workspace (the last round's, perhaps partial)
    take precedence for the options they score."""
    scored = [o for o in ws.options if any(o in row for row in ws.scores.values())]
    means = {**(last_means or {}), **mean_scores(scored, ws.scores)}
    chosen = _selected(ws, selected, path, synthesis, means, fallback, conv, recommends)
    objections = [
        Objection(
            tension=t.id,
            holder=t.holder,
            target=t.target,
            kind=t.kind,
            blocking=t.blocking,
            points=list(t.points),
        )
        for t in ws.open_tensions()
    ]
    # The margin condition's rival is one the last round scored (rounds after the first
    # score the finalists only): never an option eliminated earlier, by its stale mean.
    contenders = {o: means[o] for o in scored} if scored else means
    reopen = _reopen(ws, selected, synthesis, means, contenders, config)
    actions = _dedupe([*(synthesis.next_actions if synthesis else []), *ws.next_actions])
    if status != "complete":
        actions.insert(
            0, f"Run the deliberation again once the cause is fixed: it stopped early ({status})."
        )
    return DecisionPacket(
        task_id=task.id,
        question=task.question,
        status=status,
        status_detail=detail,
        path=path,
        selected=chosen,
        options=[
            OptionSummary(
                id=o.id,
                label=o.label,
                text=o.text,
                proposer=o.proposer,
                status=o.status,
                mean_score=means.get(o.id),
            )
            for o in ws.options.values()
        ],
        residual_objections=objections,
        minority_report=_minority(ws, selected, recommends),
        reopen_conditions=reopen,
        next_actions=actions,
        convergence=conv,
        fallback=fallback,
        scores={k: dict(v) for k, v in ws.scores.items()},
        failures=list(ws.failures),
        metrics=_metrics(ws, usage, rounds, max_prompt_tokens),
        config=config,
        participants=dict(participants),
    )


def _selected(
    ws: Workspace,
    selected: str | None,
    path: str,
    synthesis: RawAct | None,
    means: Mapping[str, float],
    fallback: CascadeResult | None,
    conv: ConvergenceRecord | None,
    recommends: Mapping[str, ActRecord],
) -> SelectedOption | None:
    if selected is None:
        return None
    option = ws.options[selected]
    if synthesis is not None:
        rationale = synthesis.text
    else:
        mean = f"mean score {means[selected]:.2f}" if selected in means else "no scores were given"
        how = {"converged": "it led the finalists by the convergence margin"}.get(
            path, f"the rule {path} chose it"
        )
        if fallback is not None and path.startswith("fallback:"):
            how += (
                " ("
                + "; ".join(f"{s.rule}: {', '.join(s.candidates_out)}" for s in fallback.steps)
                + ")"
            )
        rationale = f"Selected because {how}; {mean}. No synthesis was written."
    evidence = _dedupe([*option.evidence, *(synthesis.evidence if synthesis else [])])
    return SelectedOption(
        id=option.id,
        label=option.label,
        text=option.text,
        rationale=rationale,
        evidence=evidence,
        mean_score=means.get(selected),
        supporters=sorted(
            p
            for p in set(option.supporters)
            | {p for p, row in ws.scores.items() if selected in _tops(row)}
            # one whose last recommend named another option is its minority, not our
            # support, whatever it proposed, extended or scored
            if p not in recommends or recommends[p].target == selected
        ),
    )


def _tops(row: Mapping[str, float]) -> list[str]:
    """The options ``row`` scores highest (several when tied), by option number
    (canonical order), never in the order the row's keys were written."""
    if not row:
        return []
    best = max(row.values())
    return sorted((o for o, v in row.items() if v >= best - _EPS), key=_option_order)


def _option_order(option_id: str) -> tuple[int, str]:
    digits = option_id[1:]
    return (int(digits), option_id) if digits.isdigit() else (1 << 62, option_id)


def _minority(
    ws: Workspace, selected: str | None, recommends: Mapping[str, ActRecord]
) -> list[MinorityPosition]:
    groups: dict[str, list[ActRecord]] = {}
    for speaker in sorted(recommends):
        record = recommends[speaker]
        if record.target != selected:
            groups.setdefault(record.target, []).append(record)
    positions: list[MinorityPosition] = []
    for option_id, records in groups.items():
        option = ws.options.get(option_id)
        confs = [r.confidence for r in records if r.confidence is not None]
        positions.append(
            MinorityPosition(
                option=option_id,
                option_text=option.text if option else option_id,
                holders=[r.speaker for r in records],
                rationale=" / ".join(f"{r.speaker}: {r.text}" for r in records),
                confidence=sum(confs) / len(confs) if confs else None,
            )
        )
    if positions or recommends:
        return positions
    by_top: dict[str, list[str]] = {}
    for speaker, row in sorted(ws.scores.items()):
        tops = _tops(row)
        if tops and selected not in tops:  # a tie with the selected option is no dissent
            by_top.setdefault(tops[0], []).append(speaker)
    return [
        MinorityPosition(
            option=o,
            option_text=ws.options[o].text if o in ws.options else o,
            holders=h,
            rationale=f"scored {o} highest ({', '.join(h)})",
        )
        for o, h in by_top.items()
    ]


def _reopen(
    ws: Workspace,
    selected: str | None,
    synthesis: RawAct | None,
    means: Mapping[str, float],
    contenders: Mapping[str, float],
    config: DCIConfig,
) -> list[str]:
    conditions = list(synthesis.reopen_conditions) if synthesis else []
    for t in ws.open_tensions():
        if t.blocking and t.target == selected:
            conditions.append(
                f"Reopen if {t.holder}'s blocking objection {t.id} is borne out: {' '.join(t.points[-1].split())[:240]}"
            )
    if not conditions and selected is not None:
        rivals = sorted(((m, o) for o, m in contenders.items() if o != selected), reverse=True)
        if rivals:
            conditions.append(
                f"Reopen if a re-score brings {rivals[0][1]} within {config.convergence_margin:.2f} of {selected} "
                f"(now {means.get(selected, 0.0):.2f} vs {rivals[0][0]:.2f})."
            )
        else:
            conditions.append(
                f"Reopen if new evidence undermines {selected}: it was selected without a scored rival."
            )
    return _dedupe(conditions)


def _metrics(ws: Workspace, usage: Usage, rounds: int, max_prompt_tokens: int) -> ProcessMetrics:
    families = {f.value: 0 for f in ActFamily}
    for act in ws.acts:
        families[act.family] = families.get(act.family, 0) + 1
    return ProcessMetrics(
        acts_by_family=families,
        acts_total=len(ws.acts),
        act_failures=len(ws.failures),
        rounds=rounds,
        calls=usage.calls,
        attempts=usage.attempts,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        total_tokens=usage.total_tokens,
        max_prompt_tokens=max_prompt_tokens,
    )
