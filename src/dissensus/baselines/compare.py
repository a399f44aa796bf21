"""CONCORD against other decision rules on identical scores (``docs/concord.md``, ``--compare``).

An evaluation over a finished negotiation, so it lives with the baselines it compares
against and above :mod:`dissensus.concord`, which never imports it. The classic rules
(:mod:`dissensus.baselines.decision_rules`) pick among the opening
proposals recorded in a certificate, using the very calibrated scores CONCORD used; the
CONCORD row is the certificate itself. :func:`score_outcome` has every covered agent
score one extra outcome (an arbiter's written plan) and calibrates it against the
anchors recorded in the certificate; those calls are outside the run's bound and a
faulty or out-of-range answer counts 0, as in the protocol, and is recorded as a fault
(in the row's ``note``), never silently. A score is any real number but a ``bool``, as
in the protocol (:func:`dissensus.concord.scale.real`): a NumPy number counts, an
integer too large for a float is out of range, never an ``OverflowError``.

Rules that need a third party (an LLM picking or writing a plan) go through the
:class:`Arbiter` interface; :func:`compare_with` builds every row, the arbiter's
included. The model-backed arbiter is an adapter
(:class:`dissensus.baselines.decision_rules.LLMArbiter`).

Rows are ordered by worst-off score, highest first; ties keep the order
CONCORD, LLM writes, LLM picks, owner decides, best average, majority vote, unanimity;
a rule that committed nothing comes last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from dissensus.baselines.decision_rules import (
    RuleResult,
    best_average,
    first_choice_plurality,
    judge,
    owner_decides,
    unanimity,
)
from dissensus.concord.agent import NegotiationAgent, NegotiationView, Outcome, ScoreFault
from dissensus.concord.record import Certificate, Fault
from dissensus.concord.scale import brief, in_range, real, rescale

__all__ = [
    "RULE_ORDER",
    "Arbiter",
    "compare_rules",
    "compare_with",
    "opening",
    "order_rows",
    "score_outcome",
]

Matrix = Mapping[str, Mapping[str, float]]
"""candidate id -> agent -> calibrated score."""


@runtime_checkable
class Arbiter(Protocol):
    """A third party shown every opening proposal and every calibrated score."""

    async def pick(
        self,
        plans: Sequence[tuple[str, str]],
        matrix: Matrix,
        agents: Sequence[str],
        floor: float,
        problem: str,
    ) -> RuleResult:
        """The "LLM picks a plan" row: one of ``plans`` (id, text), judged on ``matrix``."""
        ...

    async def write(
        self,
        plans: Sequence[tuple[str, str]],
        matrix: Matrix,
        agents: Sequence[str],
        floor: float,
        problem: str,
    ) -> str:
        """The text of a new plan written from the proposals and scores."""
        ...


RULE_ORDER = (
    "CONCORD",
    "LLM writes a plan",
    "LLM picks a plan",
    "Owner decides",
    "Best average",
    "Majority vote",
    "Unanimity required",
)


def opening(cert: Certificate) -> tuple[list[tuple[str, str]], dict[str, dict[str, float]]]:
    """The opening proposals (id, text) and the calibrated score matrix of every candidate."""
    options = [(c.id, c.text) for c in cert.candidates if c.round == 1]
    matrix = {c.id: {a: e.calibrated for a, e in c.scores.items()} for c in cert.candidates}
    return options, matrix


def concord_row(cert: Certificate) -> RuleResult:
    scores = {a: s.calibrated for a, s in cert.scores.items() if s.calibrated is not None}
    row = judge(
        "CONCORD",
        cert.selected.id if cert.selected else None,
        scores if cert.selected else None,
        cert.covered,
        cert.floor,
        note=cert.status,
        empty="no candidate",
    )
    return row


def compare_rules(cert: Certificate, owner: str | None = None) -> list[RuleResult]:
    """CONCORD and the classic rules on the certificate's scores."""
    options, matrix = opening(cert)
    ids = [o for o, _ in options]
    agents = cert.covered
    owner_id = owner if owner is not None else agents[0]
    own = next((c.id for c in cert.candidates if c.round == 1 and c.author == owner_id), None)
    rows = [
        concord_row(cert),
        owner_decides(owner_id, own, matrix, agents, cert.floor),
        best_average(ids, matrix, agents, cert.floor),
        first_choice_plurality(ids, matrix, agents, cert.floor),
        unanimity(ids, matrix, agents, cert.floor),
    ]
    return order_rows(rows)


def order_rows(rows: Sequence[RuleResult]) -> list[RuleResult]:
    def key(row: RuleResult) -> tuple[int, float, int]:
        rank = RULE_ORDER.index(row.strategy) if row.strategy in RULE_ORDER else len(RULE_ORDER)
        if row.worst_off is None:
            return (1, 0.0, rank)
        return (0, -row.worst_off, rank)

    return sorted(rows, key=key)


async def score_outcome(
    agents: Mapping[str, NegotiationAgent],
    cert: Certificate,
    text: str,
    faults: list[Fault] | None = None,
) -> dict[str, float]:
    """Calibrated score of one extra outcome by every covered agent.

    A missing agent, an agent without anchors, a failed call or an unusable answer
    scores 0 (as a faulted evaluation does in the protocol) and, when ``faults`` is
    given, is appended to it naming the agent and the reason.
    """
    outcome = Outcome(id="written", text=text)
    result: dict[str, float] = {}

    def fault(agent_id: str, message: str) -> None:
        result[agent_id] = 0.0
        if faults is not None:
            faults.append(Fault(agent=agent_id, phase="score", message=message))

    for agent_id in cert.covered:
        anchors = cert.scores[agent_id].anchors
        agent = agents.get(agent_id)
        if agent is None:
            fault(agent_id, "no such agent to score the written plan")
            continue
        if anchors.rejected is None or anchors.ideal is None:
            fault(agent_id, "not calibrated (anchor scores missing)")
            continue
        view = NegotiationView(
            agent=agent_id,
            phase="score",
            round=0,
            floor=cert.floor,
            margin=cert.margin,
            agents=list(cert.covered),
        )
        try:
            (raw,) = await agent.score([outcome], view)
        except (Exception, SystemExit) as exc:  # an agent's failure scores 0, as in the protocol
            fault(agent_id, f"{type(exc).__name__}: {exc}")
            continue
        if isinstance(raw, ScoreFault):  # the agent could not score the written plan
            fault(agent_id, raw.message)
            continue
        number = real(raw)
        if number is None or not in_range(number, anchors.rejected, anchors.ideal):
            fault(
                agent_id,
                f"score {brief(raw)} of the written plan is unusable or outside the anchors' range",
            )
            continue
        result[agent_id] = rescale(number, anchors.rejected, anchors.ideal)
    return result


def _with_faults(row: RuleResult, faults: Sequence[Fault]) -> RuleResult:
    if not faults:
        return row
    said = "; ".join(f"fault of {f.agent}: {f.message}" for f in faults)
    return row.model_copy(update={"note": f"{row.note}; {said}" if row.note else said})


async def compare_with(
    cert: Certificate,
    agents: Mapping[str, NegotiationAgent],
    *,
    owner: str | None = None,
    arbiter: Arbiter | None = None,
    problem: str = "",
) -> list[RuleResult]:
    """Every comparison row: the classic rules, and the arbiter's two rows when given.

    The arbiter's written plan is scored by every covered agent (:func:`score_outcome`);
    faults of that scoring are named in the row's ``note``.
    """
    rows = compare_rules(cert, owner)
    if arbiter is None:
        return rows
    options, matrix = opening(cert)
    rows.append(await arbiter.pick(options, matrix, cert.covered, cert.floor, problem))
    text = await arbiter.write(options, matrix, cert.covered, cert.floor, problem)
    faults: list[Fault] = []
    scores = await score_outcome(agents, cert, text, faults)
    written = judge("LLM writes a plan", "written", scores, cert.covered, cert.floor, text=text)
    rows.append(_with_faults(written, faults))
    return order_rows(rows)
