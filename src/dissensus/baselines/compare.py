"""CONCORD against other decision rules on identical scores (``docs/concord.md``, ``--compare``).

An evaluation over a finished negotiation, so it lives with the baselines it compares
against and above :mod:`dissensus.concord`, which never imports it. The classic rules
(:mod:`dissensus.baselines.decision_rules`) pick among the opening
proposals recorded in a certificate, using the very calibrated scores CONCORD used; the
CONCORD row is the certificate itself. :func:`score_outcome` has every covered agent
score one extra outcome (an arbiter's written plan) and calibrates it against the
anchors recorded in the certificate; those calls are outside the run's bound and a
faulty or out-of-range answer counts 0, as in the protocol, and is recorded as a fault
(in the row's ``note``), never silently, as one line of at most 500 characters as the
protocol's faults are (an exception's text or a message may be a whole page, or a
``__str__`` that raises). A score is any real number but a ``bool``, as
in the protocol (:func:`dissensus.concord.scale.real`): a NumPy number counts, an
integer too large for a float is out of range, never an ``OverflowError``.

Rules that need a third party (an LLM picking or writing a plan) go through the
:class:`Arbiter` interface; :func:`compare_with` builds every row, the arbiter's
included. The model-backed arbiter is an adapter
(:class:`dissensus.baselines.decision_rules.LLMArbiter`).

Each row's agents below the floor are read as CONCORD reads its own (the unrounded
calibrated scores, recomputed from the certificate's raw numbers: :func:`exact_scores`;
a faulted score never clears the floor, even 0), so a row never says "clears the floor
for all" of a pick the certificate itself shows below it.

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
from dissensus.concord.scale import (
    DIGITS,
    brief,
    exception_line,
    fault_line,
    in_range,
    ratio,
    real,
)

__all__ = [
    "RULE_ORDER",
    "Arbiter",
    "compare_rules",
    "compare_with",
    "exact_scores",
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


def _exact(raw: float | None, rejected: float | None, ideal: float | None) -> float | None:
    if raw is None or rejected is None or ideal is None:
        return None
    try:
        return ratio(raw, rejected, ideal)
    except ValueError:
        return None


def exact_scores(cert: Certificate) -> dict[str, dict[str, float | None]]:
    """Every candidate's unrounded calibrated scores, recomputed from the raw numbers and
    the agents' anchors as ``verify`` does (``None`` for a faulted evaluation): what the
    floor is compared with."""
    return {
        c.id: {
            a: None if e.fault is not None else _exact(e.raw, *_anchors(cert, a))
            for a, e in c.scores.items()
        }
        for c in cert.candidates
    }


def _anchors(cert: Certificate, agent: str) -> tuple[float | None, float | None]:
    score = cert.scores.get(agent)
    return (None, None) if score is None else (score.anchors.rejected, score.anchors.ideal)


def concord_row(cert: Certificate) -> RuleResult:
    scores = {a: s.calibrated for a, s in cert.scores.items() if s.calibrated is not None}
    selected = cert.selected.id if cert.selected else None
    row = judge(
        "CONCORD",
        selected,
        scores if cert.selected else None,
        cert.covered,
        cert.floor,
        note=cert.status,
        empty="no candidate",
        exact=exact_scores(cert).get(selected, {}) if selected is not None else None,
    )
    return row


def _owner_proposal(cert: Certificate, owner: str) -> str | None:
    """The opening candidate ``owner`` proposed: the one it tabled, or the one its
    proposal merged into (the same plan tabled first by another agent, which the
    round's notes record as the verifier reads them); ``None`` if it proposed none."""
    opening_cands = [c for c in cert.candidates if c.round == 1]
    tabled = next((c.id for c in opening_cands if c.author == owner), None)
    if tabled is not None:
        return tabled
    notes = [n for step in cert.trajectory if step.round == 1 for n in step.notes]
    return next(
        (
            c.id
            for c in opening_cands
            if f"{owner} proposed {c.id}, already tabled by {c.author}; merged" in notes
        ),
        None,
    )


def compare_rules(cert: Certificate, owner: str | None = None) -> list[RuleResult]:
    """CONCORD and the classic rules on the certificate's scores (each pick's agents
    below the floor read from the unrounded scores, a fault never clearing it)."""
    options, matrix = opening(cert)
    exact = exact_scores(cert)
    ids = [o for o, _ in options]
    agents = cert.covered
    owner_id = owner if owner is not None else agents[0]
    own = _owner_proposal(cert, owner_id)
    rows = [
        concord_row(cert),
        owner_decides(owner_id, own, matrix, agents, cert.floor, exact=exact),
        best_average(ids, matrix, agents, cert.floor, exact=exact),
        first_choice_plurality(ids, matrix, agents, cert.floor, exact=exact),
        unanimity(ids, matrix, agents, cert.floor, exact=exact),
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
    exact: dict[str, float | None] | None = None,
) -> dict[str, float]:
    """Calibrated score of one extra outcome by every covered agent.

    A missing agent, an agent without anchors, a failed call or an unusable answer
    scores 0 (as a faulted evaluation does in the protocol) and, when ``faults`` is
    given, is appended to it naming the agent and the reason. ``exact``, when given,
    receives every agent's unrounded score (``None`` for a fault): what the floor is
    compared with.
    """
    outcome = Outcome(id="written", text=text)
    result: dict[str, float] = {}
    unrounded: dict[str, float | None] = {} if exact is None else exact

    def fault(agent_id: str, message: str) -> None:
        result[agent_id] = 0.0
        unrounded[agent_id] = None
        if faults is not None:
            faults.append(Fault(agent=agent_id, phase="score", message=fault_line(message)))

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
            fault(agent_id, exception_line(exc))
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
        value = ratio(number, anchors.rejected, anchors.ideal)
        result[agent_id] = round(value, DIGITS) + 0.0
        unrounded[agent_id] = value
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
    exact = exact_scores(cert)
    picked = await arbiter.pick(options, matrix, cert.covered, cert.floor, problem)
    if picked.selected is not None and picked.selected in matrix:  # the floor as CONCORD's
        picked = judge(
            picked.strategy,
            picked.selected,
            matrix[picked.selected],
            cert.covered,
            cert.floor,
            note=picked.note,
            text=picked.text,
            exact=exact[picked.selected],
        )
    rows.append(picked)
    text = await arbiter.write(options, matrix, cert.covered, cert.floor, problem)
    faults: list[Fault] = []
    unrounded: dict[str, float | None] = {}
    scores = await score_outcome(agents, cert, text, faults, unrounded)
    written = judge(
        "LLM writes a plan",
        "written",
        scores,
        cert.covered,
        cert.floor,
        text=text,
        exact=unrounded,
    )
    rows.append(_with_faults(written, faults))
    return order_rows(rows)
