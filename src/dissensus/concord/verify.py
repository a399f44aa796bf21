"""Verify a CONCORD certificate from its raw numbers (``docs/concord.md``: the record
carries the supporting arithmetic, for audit).

:func:`verify` trusts nothing the record derived: it recomputes, in this order, and
stops at the first violated property, which it names:

1. ``schema``: the record parses, with exactly the certificate's fields, and a top-level
   ``signature`` (which ``negotiate`` adds under ``$DISSENSUS_SIGNING_KEY``), when there
   is one, is written as a signature is (:func:`dissensus.signing.signature_problem`); it
   is then set aside from the recomputation: only a public key checks it
   (:func:`dissensus.signing.document_status`, ``verify --public-key``);
2. ``floor``: floor and margin lie in [0, 1];
3. ``covered``: the negotiating set is a largest component of the recorded graph
   (everyone on a group channel), no agent is listed twice (the bound is computed from
   the set's size), there are at most 256 agents, every covered agent has a standing,
   and every recorded fault names a covered agent in a phase of its round (``propose``
   or ``score`` in round 1, ``repair`` or ``score`` after);
4. ``calibration``: every calibrated score equals ``(raw - rejected) / (ideal -
   rejected)`` from the agent's raw anchors (0 on a fault), every raw score lies within
   the anchors' range, the anchors are distinct and span a finite scale, and an agent
   has both anchor scores or neither (one call answers both);
5. ``worst_off``: every candidate's worst-off score over the covered set;
6. ``selection``: replaying the run: the opening leader under the recorded rule, the
   bottleneck of every repair round (with its tie-break), every round's ``ties`` (the
   ties its selections met, in the protocol's words, and no other), the author and round of every
   repair, and the final leader equal to ``selected``; the candidates listed in the
   order they were tabled, which ties are broken by (the opening proposals in the
   order of their authors in ``covered``, then the repairs round by round); every call the record shows
   answered in exactly one way (each opening proposer, every covered agent, and each
   round's bottleneck: a candidate, a pass note, a merge note naming a candidate tabled
   by then (never one of a later round) or a fault of its phase, none only in the round
   a run stopped in); every faulted score of a calibrated agent
   matched by its trajectory fault (one per outcome, or one for a call that failed as a
   whole) and no other score fault, and none for an uncalibrated agent, never asked;
7. ``margin``: every replacement of the leader is a strict improvement of the worst-off
   score of at least the margin (and every rejected candidate is not); ``accepted`` is
   recorded only on a round whose candidate every covered agent scored;
8. ``stop``: no repair round ran while the leader already cleared the floor, and the
   recorded stop reason is consistent with the record, as the protocol decides it:
   ``floor_cleared`` exactly when the selected candidate clears the floor (a run stopped
   by its deadline, a cancellation or its budget never does: the leader after the last
   completed round did not); ``budget_exhausted`` only with a selection, after the whole
   round budget; ``no_candidate`` only without a selection, after the opening round
   alone; ``deadline`` only with a deadline, which is a finite number >= 0; a
   ``deadline`` or ``cancelled`` stop, which happens at an agent call, before any round
   or in the last round, whose notes say ``run stopped (<reason>) during this round``
   (no other round, and no run that stopped otherwise, has that note);
9. ``scores``: the selected candidate's standing per agent and the top-level worst-off;
10. ``status``: ``certified`` exactly when every covered agent is at or above the floor;
11. ``shortfall``: every agent below the floor with its score and gap, and no other;
12. ``bound``: the bound recomputed from the number of covered agents and the round
    budget (at most 1000), the spend recounted from the record, spend within the
    bound, and ``agent_calls`` at least the calls the record shows were made: one
    anchor call per calibrated agent, one proposal per opening author or proposal
    fault, one scoring call per calibrated agent per sweep it scored in, one repair
    call per repair round that tabled a candidate or recorded a repair fault, and at
    most the bound's model calls (the protocol's calls of any agent); ``messages`` and
    ``hops`` within what the record's exchanges cost along the recorded graph (a sweep
    answer whose every score is a fault may have been a failed call, never delivered,
    so it counts only towards the upper limit). ``attempts`` is checked only to be
    ``>= 0``: a call abandoned at a deadline may have made none, and the client's
    retries have no bound in the record;
13. ``digest``: SHA-256 of the canonical record, and the record as given is exactly
    that record (compared as canonical JSON text, so ``1`` for ``true`` or ``2.0`` for
    ``2`` is an edit, though Python's ``==`` calls them equal).

The floor (``stop``, ``status``, ``shortfall``) is compared with the unrounded
calibrated values recomputed from the raw numbers, as the protocol does; a faulted
score (every score of an uncalibrated agent) never clears it, even a floor of 0.

Choices this module makes:

* **A signature is never read as checked when it was not.** Without a public key a
  signature cannot be checked, yet a verdict that only says ``valid`` reads, to whoever
  holds a signed certificate, as if it had been. So the verdict says what became of the
  signature (:attr:`Verdict.signature`): ``unsigned`` (no ``signature`` field), ``not
  checked (no public key given)`` (one written as a signature is), or ``invalid`` (one
  that is not: a ``schema`` violation, since no key could ever check it), and
  ``verify --public-key`` puts ``signed`` or ``invalid`` there.

The replay uses :mod:`dissensus.concord.reference`, an independent statement of the
rules, not the functions the protocol ran: a bug in either shows as a failed check.
"""

from __future__ import annotations

import math
from typing import Final, Literal

from pydantic import BaseModel, ValidationError

from dissensus.canonical import canonical
from dissensus.concord.bounds import compute_bound
from dissensus.concord.controls import MAX_AGENTS, MAX_ROUNDS
from dissensus.concord.protocol import UNCALIBRATED
from dissensus.concord.record import (
    AgentScore,
    CandidateRecord,
    Certificate,
    Evaluation,
    Step,
    canonical_digest,
)
from dissensus.concord.reference import (
    ref_accepts,
    ref_bottleneck,
    ref_bottleneck_tie_notes,
    ref_clears_floor,
    ref_gain,
    ref_in_range,
    ref_ratio,
    ref_rescale,
    ref_select,
    ref_tie_notes,
)
from dissensus.concord.scale import check_anchors
from dissensus.signing import signature_problem
from dissensus.types import JsonObject

__all__ = ["NOT_CHECKED", "PROPERTIES", "SignatureState", "Verdict", "signature_state", "verify"]

PROPERTIES = (
    "schema",
    "floor",
    "covered",
    "calibration",
    "worst_off",
    "selection",
    "margin",
    "stop",
    "scores",
    "status",
    "shortfall",
    "bound",
    "digest",
)


NOT_CHECKED: Final = "not checked (no public key given)"

SignatureState = Literal["unsigned", "not checked (no public key given)", "signed", "invalid"]


def signature_state(data: JsonObject) -> SignatureState:
    """What can be said of a document's ``signature`` field without a key."""
    if "signature" not in data:
        return "unsigned"
    return "invalid" if signature_problem(data["signature"]) is not None else NOT_CHECKED


class Verdict(BaseModel):
    """The outcome of a verification."""

    valid: bool
    violated: str | None = None
    """The first violated property, one of :data:`PROPERTIES`."""
    message: str | None = None
    checked: list[str]
    """Properties checked and found to hold, in order."""
    signature: SignatureState = "unsigned"
    """What became of the certificate's ``signature`` field: ``unsigned`` (none),
    ``not checked (no public key given)`` (written as a signature is, but checked by
    nothing: only ``verify --public-key`` checks one), ``signed`` (it verifies with the
    public key given), ``invalid`` (not written as a signature is, a ``schema``
    violation; or, with a public key, it does not verify)."""


class _Violation(Exception):
    def __init__(self, prop: str, message: str) -> None:
        super().__init__(message)
        self.prop = prop
        self.message = message


def _fail(prop: str, message: str) -> _Violation:
    return _Violation(prop, message)


def verify(data: JsonObject) -> Verdict:
    """Check every property of a certificate (as parsed JSON): its ``signature``, when it
    has one, only for how it is written (no key checks it here; the verdict says so)."""
    state = signature_state(data)
    checked: list[str] = []
    try:
        if state == "invalid":
            raise _fail("schema", f"signature: {signature_problem(data['signature'])}")
        data = {k: v for k, v in data.items() if k != "signature"}
        try:
            cert = Certificate.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise _fail("schema", f"{loc}: {err['msg']}") from exc
        checked.append("schema")
        for prop, check in _CHECKS:
            check(cert)
            checked.append(prop)
            if prop == "selection":
                checked.append("margin")
        if canonical_digest(cert.body()) != cert.digest:
            raise _fail("digest", "the digest does not match the canonical record")
        if not _same_text(cert.body(), _strip(data)):
            raise _fail(
                "digest",
                "the record differs from its canonical form (a value of another JSON type, "
                "such as 1 for true or 2.0 for 2)",
            )
        checked.append("digest")
    except _Violation as v:
        return Verdict(
            valid=False, violated=v.prop, message=v.message, checked=checked, signature=state
        )
    return Verdict(valid=True, checked=checked, signature=state)


def _strip(data: JsonObject) -> JsonObject:
    return {k: v for k, v in data.items() if k != "digest"}


def _same_text(body: JsonObject, given: JsonObject) -> bool:
    """Whether ``given`` is ``body`` to the letter: the same canonical JSON text."""
    try:
        return canonical(body) == canonical(given)
    except (TypeError, ValueError):  # a value JSON cannot carry (NaN, infinity)
        return False


def _check_floor(cert: Certificate) -> None:
    if not 0.0 <= cert.floor <= 1.0:
        raise _fail("floor", f"floor {cert.floor} is outside [0, 1]")
    if not 0.0 <= cert.margin <= 1.0:
        raise _fail("floor", f"margin {cert.margin} is outside [0, 1]")


def _check_covered(cert: Certificate) -> None:
    for name, listed in (("covered", cert.covered), ("unknown", cert.unknown)):
        if len(set(listed)) != len(listed):
            raise _fail("covered", f"{name} lists an agent more than once")
    if len(cert.covered) + len(cert.unknown) > MAX_AGENTS:
        raise _fail("covered", f"more than {MAX_AGENTS} agents")
    _check_fault_names(cert)
    if set(cert.scores) != set(cert.covered):
        raise _fail("covered", "the agents with a standing are not the covered set")
    if set(cert.covered) & set(cert.unknown):
        raise _fail("covered", "an agent is both covered and unknown")
    if not cert.covered:
        raise _fail("covered", "the covered set is empty")
    if (cert.budget.topology == "graph") != (cert.budget.edges is not None):
        raise _fail("covered", f"topology {cert.budget.topology} does not match the recorded edges")
    agents = set(cert.covered) | set(cert.unknown)
    for i, edge in enumerate(cert.budget.edges or []):
        if len(edge) != 2 or not set(edge) <= agents:
            raise _fail("covered", f"edge {i} {edge} is not a pair of known agents")
    if cert.budget.edges is None:
        if cert.unknown:
            raise _fail("covered", "a group channel covers every agent, yet some are unknown")
        return
    import networkx as nx  # imported on first use: it costs ~0.3 s at start-up

    graph: nx.Graph = nx.Graph()
    graph.add_nodes_from(cert.covered + cert.unknown)
    graph.add_edges_from(tuple(e) for e in cert.budget.edges)
    components = [set(c) for c in nx.connected_components(graph)]
    largest = max(len(c) for c in components)
    if set(cert.covered) not in [c for c in components if len(c) == largest]:
        raise _fail("covered", "the covered set is not a largest connected component of the graph")


def _check_fault_names(cert: Certificate) -> None:
    """Only covered agents are ever asked anything, each in a phase of its round."""
    covered = set(cert.covered)
    for step in cert.trajectory:
        phases = {"propose", "score"} if step.round == 1 else {"repair", "score"}
        for fault in step.faults:
            if fault.agent not in covered:
                raise _fail(
                    "covered", f"round {step.round}: a fault names {fault.agent}, not covered"
                )
            if fault.phase not in phases:
                raise _fail("covered", f"round {step.round}: a fault in phase {fault.phase!r}")


def _check_calibration(cert: Certificate) -> None:
    for agent, standing in cert.scores.items():
        rej, ideal = standing.anchors.rejected, standing.anchors.ideal
        calibrated = rej is not None and ideal is not None
        if (rej is None) != (ideal is None):
            # one anchor call answers both anchors or neither
            raise _fail("calibration", f"agent {agent} has one anchor score without the other")
        if calibrated:
            assert rej is not None and ideal is not None
            why = check_anchors(rej, ideal)
            if why is not None:
                raise _fail("calibration", f"agent {agent}: {why}")
        elif standing.fault is None:
            raise _fail("calibration", f"agent {agent} has no anchor scores and no fault")
        if calibrated and standing.fault is not None:
            raise _fail("calibration", f"agent {agent} has anchor scores and an anchor fault")
        for cand in cert.candidates:
            ev = cand.scores.get(agent)
            if ev is None:
                continue
            where = f"candidate {cand.id}, agent {agent}"
            if ev.fault is not None or ev.raw is None:
                if ev.fault is None or ev.raw is not None or ev.calibrated != 0.0:
                    raise _fail(
                        "calibration",
                        f"{where}: a faulted score must have no raw value and count 0",
                    )
                continue
            if not calibrated:
                raise _fail("calibration", f"{where}: scored although the agent is not calibrated")
            assert rej is not None and ideal is not None
            if not ref_in_range(ev.raw, rej, ideal):
                raise _fail("calibration", f"{where}: raw {ev.raw} is outside the anchors' range")
            try:
                expected = ref_rescale(ev.raw, rej, ideal)
            except ValueError as exc:
                raise _fail("calibration", f"{where}: {exc}") from None
            if ev.calibrated != expected:
                raise _fail(
                    "calibration",
                    f"{where}: calibrated {ev.calibrated} != {expected} from raw {ev.raw}",
                )
    known = set(cert.covered)
    for cand in cert.candidates:
        stray = set(cand.scores) - known
        if stray:
            raise _fail(
                "calibration",
                f"candidate {cand.id} holds scores of uncovered agents {sorted(stray)}",
            )


def _vector(cert: Certificate, cand: CandidateRecord) -> list[float] | None:
    if any(a not in cand.scores for a in cert.covered):
        return None
    return [cand.scores[a].calibrated for a in cert.covered]


def _exact(cert: Certificate, cand: CandidateRecord | None) -> list[float | None] | None:
    """The unrounded calibrated scores of ``cand`` (``None`` in the place of a fault),
    what the floor is compared with; ``None`` when not every covered agent scored it."""
    if cand is None or any(a not in cand.scores for a in cert.covered):
        return None
    out: list[float | None] = []
    for agent in cert.covered:
        ev = cand.scores[agent]
        anchors = cert.scores[agent].anchors
        if ev.raw is None or anchors.rejected is None or anchors.ideal is None:
            out.append(None)
        else:  # the calibration check has passed: this is a finite number
            out.append(ref_ratio(ev.raw, anchors.rejected, anchors.ideal))
    return out


def _clears(cert: Certificate, cand: CandidateRecord | None) -> bool:
    """Whether every covered agent really scored ``cand`` at or above the floor: a
    faulted score (every score of an uncalibrated agent) never clears it, even at 0."""
    exact = _exact(cert, cand)
    if exact is None or any(x is None for x in exact):
        return False
    return ref_clears_floor([x for x in exact if x is not None], cert.floor)


def _check_worst(cert: Certificate) -> None:
    for cand in cert.candidates:
        vec = _vector(cert, cand)
        expected = min(vec) if vec else None
        if cand.worst_off != expected:
            raise _fail(
                "worst_off", f"candidate {cand.id}: worst-off {cand.worst_off} != {expected}"
            )


def _check_replay(cert: Certificate) -> None:
    by_id = {c.id: c for c in cert.candidates}
    if len(by_id) != len(cert.candidates):
        raise _fail("selection", "duplicate candidate ids")
    steps = cert.trajectory
    rule, floor, margin = cert.budget.rule, cert.floor, cert.margin
    vecs = {c.id: _vector(cert, c) for c in cert.candidates}
    opening = [c for c in cert.candidates if c.round == 1]
    covered = set(cert.covered)
    for c in cert.candidates:
        if c.author not in covered:
            raise _fail("selection", f"candidate {c.id} has an author outside the covered set")
    if len({c.author for c in opening}) != len(opening):
        raise _fail("selection", "an agent tabled more than one opening proposal")
    _check_order(cert, opening)
    if not steps:
        if cert.candidates or cert.selected is not None:
            raise _fail("selection", "candidates or a selection without a trajectory")
        return
    if steps[0].round != 1:
        raise _fail("selection", "the trajectory does not open with round 1")
    eligible = [(c.id, v) for c in opening if (v := vecs[c.id]) is not None]
    # what the rule reads as clearing the floor: the unrounded scores, a fault never
    clearing = {c.id for c in cert.candidates if _clears(cert, c)}
    leader = ref_select(eligible, rule, floor, clearing) if eligible else None
    first = steps[0]
    _expect_ties(first, ref_tie_notes(eligible, rule, floor, clearing) if eligible else [])
    if (first.improvement, first.bottleneck, first.candidate, first.accepted) != (None,) * 4:
        raise _fail("selection", "round 1 (the opening) records a repair")
    _expect_step(cert, 0, leader, vecs)
    repairs = [c for c in cert.candidates if c.round != 1]
    repair_ids = [s.candidate for s in steps[1:] if s.candidate is not None]
    if [c.id for c in repairs] != repair_ids:
        raise _fail("selection", "the repaired candidates do not match the trajectory")
    for k, step in enumerate(steps[1:], start=1):
        if step.round != k + 1:
            raise _fail(
                "selection", f"trajectory step {k} has round {step.round}, expected {k + 1}"
            )
        lead_vec = vecs.get(leader) if leader is not None else None
        if lead_vec is None or leader is None:
            raise _fail("stop", f"round {step.round} ran without a leader")
        if _clears(cert, by_id[leader]):
            raise _fail(
                "stop", f"round {step.round} ran although leader {leader} cleared the floor"
            )
        standing = dict(zip(cert.covered, lead_vec, strict=True))
        expected_b = ref_bottleneck(standing, cert.covered)
        ties = ref_bottleneck_tie_notes(standing, cert.covered)
        if step.bottleneck != expected_b:
            raise _fail(
                "selection", f"round {step.round}: bottleneck {step.bottleneck} != {expected_b}"
            )
        vec = vecs[step.candidate] if step.candidate is not None else None
        gain = ref_gain(min(lead_vec), min(vec)) if vec is not None else None
        if step.improvement != gain:
            raise _fail(
                "margin", f"round {step.round}: improvement {step.improvement} != recomputed {gain}"
            )
        if step.accepted is not None and vec is None:
            raise _fail(
                "margin",
                f"round {step.round}: accepted is {step.accepted}, yet no fully scored "
                "candidate was tabled in that round",
            )
        if step.candidate is not None:
            cand = by_id[step.candidate]
            if cand.author != expected_b or cand.round != step.round:
                raise _fail(
                    "selection",
                    f"round {step.round}: candidate {cand.id} not written by the bottleneck in that round",
                )
            vec = vecs[cand.id]
            if vec is not None:
                lead_worst = min(lead_vec)
                qualified = [
                    (c.id, v)
                    for c in cert.candidates
                    if c.round <= step.round
                    and (v := vecs[c.id]) is not None
                    and ref_accepts(lead_worst, min(v), margin)
                ]
                new_leader = ref_select(qualified, rule, floor, clearing) if qualified else leader
                if qualified:
                    ties += ref_tie_notes(qualified, rule, floor, clearing)
                if step.accepted != (new_leader == cand.id):
                    raise _fail(
                        "margin",
                        f"round {step.round}: candidate {cand.id} acceptance does not follow the margin rule",
                    )
                if new_leader != leader and new_leader is not None:
                    new_vec = vecs[new_leader]
                    assert new_vec is not None
                    if not ref_accepts(lead_worst, min(new_vec), margin):
                        raise _fail(
                            "margin",
                            f"round {step.round}: replacement is not an improvement of at least {margin}",
                        )
                leader = new_leader
        _expect_ties(step, ties)
        _expect_step(cert, k, leader, vecs)
    _check_outcomes(cert)
    final = cert.selected.id if cert.selected else None
    if final != leader:
        raise _fail("selection", f"selected {final} but the replay leads to {leader}")
    if cert.selected is not None:
        cand = by_id[cert.selected.id]
        if (cand.text, cand.author, cand.round) != (
            cert.selected.text,
            cert.selected.author,
            cert.selected.round,
        ):
            raise _fail("selection", "the selected candidate differs from its record")


def _check_order(cert: Certificate, opening: list[CandidateRecord]) -> None:
    """The candidates are listed as the protocol tabled them: the opening proposals in the order of their authors in ``covered``, then the
    repairs round by round (the earliest tabled candidate wins a tie, so the order is
    part of the replay). Ids are not checked beyond being distinct: a certificate an
    earlier version wrote may hold an empty one."""
    rounds = [c.round for c in cert.candidates]
    if rounds != sorted(rounds):
        raise _fail("selection", "the candidates are not listed in the order of their rounds")
    place = {agent: k for k, agent in enumerate(cert.covered)}
    authors = [place[c.author] for c in opening]
    if authors != sorted(authors):
        raise _fail(
            "selection",
            "the opening proposals are not listed in the order of their authors in covered",
        )


def _check_outcomes(cert: Certificate) -> None:
    """Every call the record shows was answered in exactly one way, as the protocol
    records it: each opening proposer (each covered agent) and each round's bottleneck
    tabled a candidate, passed, merged into a tabled one or faulted (none of them only in
    a round the run stopped in), and every faulted score of a calibrated agent is
    matched by its fault in the trajectory (one per outcome, or one for a call that
    failed as a whole), while an uncalibrated agent, never asked, has none."""
    calibrated = {
        a
        for a, st in cert.scores.items()
        if st.anchors.rejected is not None and st.anchors.ideal is not None
    }
    for step in cert.trajectory:
        stopped = any(n.startswith("run stopped (") for n in step.notes)
        cands = [c for c in cert.candidates if c.round == step.round]
        if step.round == 1:
            askees = list(cert.covered)
        else:
            assert step.bottleneck is not None  # the replay checked every bottleneck
            askees = [step.bottleneck]
            stray = [f.agent for f in step.faults if f.phase == "repair"]
            if any(a != step.bottleneck for a in stray):
                raise _fail("selection", f"round {step.round}: a repair fault of another agent")
        phase = "propose" if step.round == 1 else "repair"
        for agent in askees:
            # a merge names a candidate tabled by then: never one of a later round
            merges = [
                f"{agent} proposed {c.id}, already tabled by {c.author}; merged"
                for c in cert.candidates
                if c.round <= step.round
            ]
            answers = (
                sum(1 for c in cands if c.author == agent)
                + sum(1 for f in step.faults if f.agent == agent and f.phase == phase)
                + step.notes.count(f"{agent} passed")
                + sum(1 for n in step.notes if n in merges)
            )
            if answers > 1 or (answers == 0 and not stopped):
                raise _fail(
                    "selection",
                    f"round {step.round}: {agent} was asked once, yet the record shows "
                    f"{answers} answers (a candidate, a pass, a merge or a {phase} fault)",
                )
        for agent in cert.covered:
            evals = [c.scores[agent] for c in cands if agent in c.scores]
            got = [e.fault for e in evals if e.fault is not None]
            said = [f.message for f in step.faults if f.agent == agent and f.phase == "score"]
            if agent not in calibrated:
                fine = not said and all(m == UNCALIBRATED for m in got)
            else:
                whole = len(said) == 1 and len(got) == len(evals) and set(got) == set(said)
                fine = said == got or whole
            if not fine:
                raise _fail(
                    "selection",
                    f"round {step.round}: the score faults of {agent} in the trajectory "
                    "do not match its faulted scores",
                )


def _expect_ties(step: Step, expected: list[str]) -> None:
    """A round's recorded ties are the ones its selections met, in the words the
    protocol reports them (the bottleneck's first, then the leader's)."""
    if step.ties != expected:
        raise _fail(
            "selection",
            f"round {step.round}: ties {step.ties} != recomputed {expected}",
        )


def _expect_step(
    cert: Certificate, k: int, leader: str | None, vecs: dict[str, list[float] | None]
) -> None:
    step = cert.trajectory[k]
    if step.leader != leader:
        raise _fail("selection", f"round {step.round}: leader {step.leader} != replayed {leader}")
    vec = vecs.get(leader) if leader is not None else None
    worst = min(vec) if vec else None
    if step.worst_off != worst:
        raise _fail("selection", f"round {step.round}: worst-off {step.worst_off} != {worst}")


def _check_stop(cert: Certificate) -> None:
    stopped = cert.spent.stopped
    deadline = cert.budget.deadline_s
    if deadline is not None and not (math.isfinite(deadline) and deadline >= 0):
        raise _fail("stop", f"deadline_s {deadline} is not a finite number >= 0")
    sel = cert.selected
    cand = next((c for c in cert.candidates if sel and c.id == sel.id), None)
    cleared = _clears(cert, cand)
    repairs = len(cert.trajectory) - 1 if cert.trajectory else 0
    if stopped == "floor_cleared" and not cleared:
        raise _fail(
            "stop", "stopped for a cleared floor, yet the selected candidate does not clear it"
        )
    if cleared and stopped != "floor_cleared":
        # the protocol stops as soon as the leader clears the floor, before any other
        # call: a deadline, a cancellation or the budget never ends a run it cleared
        raise _fail(
            "stop", f"the selected candidate clears the floor, yet the run stopped: {stopped}"
        )
    if stopped == "budget_exhausted" and sel is None:
        raise _fail("stop", "budget exhausted without a selected candidate")
    if stopped == "budget_exhausted" and repairs != cert.budget.rounds:
        raise _fail(
            "stop", f"budget exhausted after {repairs} of {cert.budget.rounds} repair rounds"
        )
    if stopped == "no_candidate" and (sel is not None or len(cert.trajectory) != 1):
        raise _fail("stop", "no_candidate needs no selection and the opening round alone")
    if stopped == "deadline" and deadline is None:
        raise _fail("stop", "stopped at the deadline, yet no deadline was set")
    # a deadline or a cancellation stops the run at an agent call: in the calibration
    # (no round recorded) or in the last round, which says so; nothing else does
    steps = cert.trajectory
    for step in steps:
        notes = [n for n in step.notes if n.startswith("run stopped (")]
        halted = stopped in ("deadline", "cancelled") and step is steps[-1]
        want = [f"run stopped ({stopped}) during this round"] if halted else []
        if notes != want:
            raise _fail(
                "stop",
                f"round {step.round}: notes {notes} do not match the stop reason {stopped}",
            )
    if repairs > cert.budget.rounds:
        raise _fail("stop", f"{repairs} repair rounds exceed the budget of {cert.budget.rounds}")


def _check_scores(cert: Certificate) -> None:
    sel = cert.selected
    cand = next((c for c in cert.candidates if sel and c.id == sel.id), None)
    for agent, standing in cert.scores.items():
        ev = cand.scores.get(agent) if cand else None
        want = (ev.calibrated, ev.raw) if ev else (None, None)
        if (standing.calibrated, standing.raw) != want:
            raise _fail("scores", f"agent {agent}: {_score_difference(standing, ev)}")
    vec = _vector(cert, cand) if cand else None
    if cert.worst_off != (min(vec) if vec else None):
        raise _fail("scores", f"worst-off {cert.worst_off} is not the selected candidate's")


def _score_difference(standing: AgentScore, ev: Evaluation | None) -> str:
    """What differs between an agent's standing and its score of the selected candidate
    (``ev``, ``None`` when it has none): the calibrated score, else the raw one, each
    shown in full (``repr``: two numbers that differ never read the same)."""
    if ev is None:
        return f"standing {standing.calibrated!r}, but the selected candidate has no score of it"
    for part, mine, theirs in (
        ("calibrated", standing.calibrated, ev.calibrated),
        ("raw", standing.raw, ev.raw),
    ):
        if mine != theirs:
            return (
                f"standing {part} score {mine!r} differs from the selected candidate's {theirs!r}"
            )
    return "standing differs from the selected candidate's score"


def _check_status(cert: Certificate) -> None:
    sel = cert.selected
    cand = next((c for c in cert.candidates if sel and c.id == sel.id), None)
    certified = _clears(cert, cand)
    if (cert.status == "certified") != certified:
        raise _fail(
            "status", f"status {cert.status} but every covered agent >= floor is {certified}"
        )


def _check_shortfall(cert: Certificate) -> None:
    sel = cert.selected
    cand = next((c for c in cert.candidates if sel and c.id == sel.id), None)
    exact = _exact(cert, cand)
    expected = []
    for i, agent in enumerate(cert.covered):
        score = cert.scores[agent].calibrated
        value = score if score is not None else 0.0
        # no score, or a fault (``None``), never clears the floor, even a floor of 0
        unrounded = exact[i] if exact is not None and score is not None else None
        if unrounded is None or unrounded < cert.floor:
            gap = round(cert.floor - value, 12)
            low = 0.0 if unrounded is None else unrounded
            expected.append((agent, value, gap if gap > 0 else cert.floor - low))
    got = [(s.agent, s.score, s.gap) for s in cert.shortfall]
    if got != expected:
        raise _fail("shortfall", f"shortfall {got} != recomputed {expected}")


def _check_bound(cert: Certificate) -> None:
    if cert.budget.rounds < 0:
        raise _fail("bound", f"round budget {cert.budget.rounds} is negative")
    if cert.budget.rounds > MAX_ROUNDS:
        raise _fail("bound", f"round budget {cert.budget.rounds} exceeds {MAX_ROUNDS}")
    negative = [
        n
        for n, v in cert.spent.model_dump().items()
        if isinstance(v, int) and not isinstance(v, bool) and v < 0
    ]
    if negative:
        raise _fail("bound", f"negative spend: {', '.join(negative)}")
    bound = compute_bound(len(cert.covered), cert.budget.rounds)
    if bound != cert.bound:
        raise _fail("bound", f"bound {cert.bound.model_dump()} != recomputed {bound.model_dump()}")
    spent = cert.spent
    evaluations = sum(len(c.scores) for c in cert.candidates)
    repairs = len(cert.trajectory) - 1 if cert.trajectory else 0
    recount = {"candidates": len(cert.candidates), "evaluations": evaluations, "rounds": repairs}
    for name, value in recount.items():
        if getattr(spent, name) != value:
            raise _fail(
                "bound", f"spent {name} {getattr(spent, name)} != {value} recounted from the record"
            )
    within = all(
        getattr(spent, n) <= getattr(bound, n)
        for n in ("rounds", "candidates", "evaluations", "model_calls")
    )
    if not within:
        raise _fail("bound", "spend exceeds the bound")
    if spent.within_bound != within:
        raise _fail("bound", "within_bound does not match the reconciliation")
    if spent.model_calls > spent.agent_calls:
        raise _fail("bound", "more model calls than agent calls")
    needed = _calls_made(cert)
    if spent.agent_calls < needed:
        raise _fail(
            "bound", f"agent_calls {spent.agent_calls} < {needed} calls the record shows were made"
        )
    if spent.agent_calls > bound.model_calls:
        raise _fail(
            "bound",
            f"agent_calls {spent.agent_calls} > {bound.model_calls}, the most calls a run "
            "of this size makes",
        )
    _check_relays(cert)


def _relay_costs(cert: Certificate) -> dict[str, tuple[int, int]]:
    """Per covered agent: (messages, hops) of delivering one exchange from it to every
    other covered agent, along shortest paths of the recorded graph (one hop each on a
    group channel)."""
    covered = cert.covered
    if cert.budget.edges is None:
        others = len(covered) - 1
        return {a: (others, 1 if others else 0) for a in covered}
    import networkx as nx  # imported on first use: it costs ~0.3 s at start-up

    inside = set(covered)
    graph: nx.Graph = nx.Graph()
    graph.add_nodes_from(covered)
    graph.add_edges_from(tuple(e) for e in cert.budget.edges if set(e) <= inside)
    distance = dict(nx.all_pairs_shortest_path_length(graph))
    costs: dict[str, tuple[int, int]] = {}
    for a in covered:
        paths = [distance[a][b] for b in covered if b != a]
        costs[a] = (sum(paths), max(paths)) if paths else (0, 0)
    return costs


def _check_relays(cert: Certificate) -> None:
    """``messages`` and ``hops`` within what the record's exchanges cost: an anchor answer
    per calibrated agent, a candidate per author, and a scoring answer per agent and
    sweep. A sweep answer whose every score is a fault may have been a whole failed call
    (never delivered) or per-outcome faults (delivered), so it counts only towards the
    upper limit."""
    calibrated = [
        a
        for a in cert.covered
        if cert.scores[a].anchors.rejected is not None and cert.scores[a].anchors.ideal is not None
    ]
    sure = calibrated + [c.author for c in cert.candidates]
    maybe: list[str] = []
    opening = [c for c in cert.candidates if c.round == 1]
    sweeps = [opening] + [[c] for c in cert.candidates if c.round != 1]
    for sweep in sweeps:
        for a in calibrated:
            answered = [c.scores[a] for c in sweep if a in c.scores]
            if any(ev.raw is not None for ev in answered):
                sure.append(a)
            elif answered:
                maybe.append(a)
    costs = _relay_costs(cert)
    low = sum(costs[a][0] for a in sure if a in costs)
    high = low + sum(costs[a][0] for a in maybe if a in costs)
    spent = cert.spent
    if not low <= spent.messages <= high:
        raise _fail(
            "bound",
            f"spent messages {spent.messages} is not what the record's exchanges cost "
            f"({low} to {high})",
        )
    hops_low = max((costs[a][1] for a in sure if a in costs), default=0)
    hops_high = max((costs[a][1] for a in sure + maybe if a in costs), default=0)
    if not hops_low <= spent.hops <= hops_high:
        raise _fail(
            "bound",
            f"spent hops {spent.hops} is not the longest relay of the record's exchanges "
            f"({hops_low} to {hops_high})",
        )


def _calls_made(cert: Certificate) -> int:
    """The fewest agent calls that produce the record: every answer in it came from a
    call (a calibrated agent is asked in every sweep; an uncalibrated one never is)."""
    calibrated = {
        a
        for a, st in cert.scores.items()
        if st.anchors.rejected is not None and st.anchors.ideal is not None
    }
    calls = len(calibrated)
    if not cert.trajectory:
        return calls
    opening = [c for c in cert.candidates if c.round == 1]
    proposers = {c.author for c in opening}
    proposers |= {f.agent for f in cert.trajectory[0].faults if f.phase == "propose"}
    calls += len(proposers)
    calls += len({a for c in opening for a in c.scores if a in calibrated})
    by_id = {c.id: c for c in cert.candidates}
    for step in cert.trajectory[1:]:
        if step.candidate is not None or any(f.phase == "repair" for f in step.faults):
            calls += 1
        cand = by_id.get(step.candidate) if step.candidate is not None else None
        if cand is not None:
            calls += len({a for a in cand.scores if a in calibrated})
    return calls


_CHECKS = (
    ("floor", _check_floor),
    ("covered", _check_covered),
    ("calibration", _check_calibration),
    ("worst_off", _check_worst),
    ("selection", _check_replay),
    ("stop", _check_stop),
    ("scores", _check_scores),
    ("status", _check_status),
    ("shortfall", _check_shortfall),
    ("bound", _check_bound),
)
