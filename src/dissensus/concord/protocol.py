"""The CONCORD protocol: five phases over any mix of agents (``docs/concord.md``).

1. INITIALIZE: every covered agent scores the two anchors (one call each); its scale is
   rescaled so rejected = 0, ideal = 1. Raw and calibrated scores are both kept.
2. PROPOSE + SCORE: one proposal per agent; every agent scores every proposal (one
   call per agent). This is round 1.
3. SELECT: the selection rule (maximin by default) picks the leader.
4. REPAIR: from round 2 on, only the bottleneck (the agent least satisfied by the
   leader) writes one new candidate, seeing every score; every agent scores it. The
   leader is replaced only by a strict improvement of the worst-off score of at least
   the margin.
5. STOP: commit (``certified``) when every covered agent clears the floor, else run the
   next repair round; when the round budget is spent, return ``best_effort`` with the
   shortfall per agent. The floor is a constant of the run: nothing ever changes it.

Choices this module makes:

* **Faults.** An agent call that raises, times out or answers something unusable
  (wrong count, non-number, out-of-range score) is recorded as a fault of that agent
  where it happened; the run goes on. A number is any real number but a ``bool``
  (:func:`~dissensus.concord.scale.real`: a NumPy number counts); one too large for a
  float (``10**400``) is out of range, a fault, never an ``OverflowError`` out of the
  run, and a fault message quotes at most 200 characters of what the agent answered. A
  fault message is one line of at most 500 characters, an exception's text included
  (:func:`~dissensus.concord.scale.exception_line`: an exception whose message cannot
  be read is named by its type, never an error out of the run). A faulted evaluation counts as the rejected
  anchor (calibrated 0, raw ``None``) for selection, and it never clears the floor,
  whatever the floor (0 included): the run certifies only when every covered agent
  really scored the leader at or above it. A faulted agent is in the shortfall with
  score 0 (its gap is the floor). An agent whose anchor call fails stays in the
  negotiating set uncalibrated (all its evaluations are faults, and it is not asked to
  score), so the run ends best-effort rather than certifying without it. No call is ever retried by the protocol (the
  model client's own retries are reported as attempts), which is why no fault can push
  spend past the bound.
* **Equal anchors** answered at run time by an agent that calls no model (a function
  agent: the user's code) raise :class:`~dissensus.errors.ConfigError` naming
  ``agents.<id>.anchors`` before any candidate exists: such an agent has no scale to
  negotiate on. A model's answer is never a configuration error: equal anchors from an
  agent whose ``uses_model`` is true are an anchor fault of that agent, which stays
  uncalibrated (an LLM agent refuses them before, with every anchor answer outside the
  ranges its request's schema asks for: :mod:`dissensus.agents.llm_negotiator`). Finite anchors whose
  span overflows (``ideal - rejected`` is not finite) are an unusable answer instead: an
  anchor fault of that agent, which stays uncalibrated; likewise a score whose
  calibrated value is not finite is a fault of that evaluation.
* **The floor** is compared with the unrounded calibrated value
  (:func:`~dissensus.concord.scale.ratio`), never with the 12-decimal rounding the
  record shows, so rounding cannot lift a score onto the floor. A shortfall's ``gap`` is
  ``floor - score`` rounded to 12 decimals; when the recorded score rounded onto the
  floor (or that gap rounds to 0), ``floor`` minus the unrounded value.
* **Anytime.** Before every agent call the deadline and the cancellation flag are
  checked, and a call in flight is abandoned when either fires. The calls of one phase
  are issued together but start one after another; each checks both again as it starts,
  so a stop during a long sweep (table agents answer without yielding to the loop, and
  each call's view holds every candidate's scores) ends it after the call that is
  running, and the calls not yet started are not made (nor counted in
  ``spent.agent_calls``). The run then returns
  the current leader with its status (``spent.stopped`` says why). Every answer that
  arrived before the stop is recorded (anchor scores, proposals, scores of a sweep);
  an agent whose anchor scores had not arrived is recorded uncalibrated with the fault
  ``not calibrated: the run stopped (<reason>) before its anchor scores arrived``, so a
  stopped run's certificate verifies like any other. Candidates not scored by every
  covered agent when the run stopped are recorded but never lead.
* **Cancelling** (:meth:`Negotiation.cancel`, from any thread) before the run starts
  stops it as it starts; after it has ended it does nothing, as cancelling a finished
  task: the certificate returned stands, and no error is raised in the thread that
  cancelled (the run's event loop may be closed by then).
* **Per-evaluation faults.** A ``score`` answer may hold a
  :class:`~dissensus.concord.agent.ScoreFault` in the place of one outcome: that
  evaluation alone is a fault; a call that raises or answers the wrong shape faults
  every outcome it was asked about.
* **Exits from agent code.** ``SystemExit`` raised by an agent's code (a library
  calling ``sys.exit``) is a fault of that agent, as any exception is;
  ``KeyboardInterrupt`` raised there is Ctrl-C: it cancels the run
  (``spent.stopped: cancelled``). Neither escapes the run.
* **Unreachable models.** :attr:`Negotiation.unreachable` lists the faults of model
  calls that failed to reach the server (a :class:`~dissensus.llm.ModelCallError` of
  kind ``connection``, read from the exception's ``kind``, never from its text), beside
  :attr:`Negotiation.model_calls`; the CLI exits 1 only when they are equal and not 0.
* **Proposals** naming an option already tabled (same id and text) are merged into
  that candidate, and so is a proposal without an id whose text is exactly a tabled
  candidate's (two LLM agents writing the same plan: scoring it twice would spend
  every agent's calls on one outcome). A proposal whose text is a pool option's
  (exactly, else outer white space aside), without an id or, before the option is
  tabled, under an id that is not the option's (another option's, one of its own), is
  that option, tabled under the option's id (noted ``a1's proposal
  is the text of option A; tabled as A``) or merged into it when already tabled,
  whichever agent spoke first: table agents score the option by its id, and an agent
  listed before the option's proposer no longer tabled a copy every agent scored again
  and table agents faulted on. An id that collides with another outcome is replaced by ``C<k>``,
  and a blank id (``""``) is no id: the candidate is named ``C<k>`` (a record whose
  candidate id is empty would read as one without a leader). A new plan (a text that
  is no pool option's) whose text is a tabled candidate's, outer white space aside
  (:func:`~dissensus.concord.controls.plan_text`, the one comparison of plan texts), is
  merged into it whatever id it gives: the same plan under a new name was tabled and
  scored again, every round it was proposed. A pool option proposed under its id is
  matched by id only, as the problem gave it: a pipeline's options come from panel data,
  and two options of one text (``{"1": "Paris", "2": "Paris"}``) are two decisions with
  their own utilities, never merged into each other. A pool option's text under an id
  of no pool option (``{"id": "again2", "text": "Paris"}``) is merged into the candidate
  of that text already tabled, as a new plan is: it was tabled and scored again every
  round it was proposed.
  Both are reported in the round's notes. A new plan whose text is an anchor's (its
  outer white space aside) is a fault of that call, never tabled: anchors are never
  candidates, and the ideal anchor tabled would be certified at 1.0 for every agent
  that scores it as the ideal; a pool option is never faulted so (a pipeline option may
  read as the pipeline's fixed anchor text, and is the panel's decision). A proposal whose text or id is longer than
  :data:`~dissensus.io.limits.MAX_FIELD_CHARS` (32,768 characters; a pool option's
  text excepted) is a fault of that call, never tabled: every later view, and with it
  every model agent's prompt, carries every tabled text, so one runaway answer would be
  paid for in every call after it. Evaluations count agent x candidate scores
  (anchors excluded); model calls count calls to agents whose ``uses_model`` is true.
* **Attempts** are what each model agent's ``attempts()`` reports, the difference over
  the run; an ``attempts()`` that raises or answers something other than a whole number
  counts 0 for that agent: the count is reported beside the run, and the record is
  never lost to it after every call was made.
* Calls within one phase run concurrently; results are always processed in problem
  order, so the record is deterministic for deterministic agents.
"""

from __future__ import annotations

import asyncio
import math
import numbers
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from dissensus.concord.agent import (
    NegotiationAgent,
    NegotiationView,
    Outcome,
    ScoredCandidate,
    ScoreFault,
)
from dissensus.concord.bounds import compute_bound
from dissensus.concord.controls import check_arguments, check_controls, plan_text, same_name
from dissensus.concord.record import (
    AgentScore,
    Anchors,
    CandidateRecord,
    Certificate,
    Evaluation,
    Fault,
    RunControls,
    Selected,
    Shortfall,
    Spent,
    Step,
    Stop,
)
from dissensus.concord.rules import (
    SelectionRule,
    accepts,
    bottleneck,
    clears_floor,
    improvement,
    select,
)
from dissensus.concord.scale import (
    DIGITS,
    brief,
    check_anchors,
    exception_line,
    fault_line,
    in_range,
    ratio,
    real,
    shortfall_gap,
)
from dissensus.concord.topology import Regime
from dissensus.errors import ConfigError
from dissensus.io.limits import MAX_FIELD_CHARS

__all__ = ["Negotiation", "negotiate", "negotiate_sync"]

T = TypeVar("T")
Phase = Literal["anchors", "propose", "score", "repair"]
UNCALIBRATED = "not calibrated (anchor scores missing)"


class _Halt(Exception):
    def __init__(self, reason: Stop) -> None:
        super().__init__(reason)
        self.reason: Stop = reason


class _AgentExit(Exception):
    """``SystemExit`` raised by agent code, held as an ordinary exception (a fault)."""

    def __init__(self, code: object) -> None:
        try:
            said = str(code)
        except Exception:  # an exit code whose own text raises
            said = brief(code)
        super().__init__(f"SystemExit: {said}")


class _AgentInterrupt(Exception):
    """``KeyboardInterrupt`` raised by agent code: the run is cancelled, as by Ctrl-C."""


def _fault_text(exc: BaseException) -> str:
    if isinstance(exc, _AgentExit):
        return fault_line(str(exc))
    return exception_line(exc)


def _stopped_fault(reason: Stop) -> str:
    return f"not calibrated: the run stopped ({reason}) before its anchor scores arrived"


@dataclass
class _Cand:
    id: str
    text: str
    author: str
    round: int
    scores: dict[str, Evaluation] = field(default_factory=dict)
    exact: dict[str, float] = field(default_factory=dict)
    """The unrounded calibrated values (0 on a fault): what the floor is compared with."""


class Negotiation:
    """One CONCORD run over ``agents`` (problem order is the tie-break order)."""

    def __init__(
        self,
        agents: Sequence[NegotiationAgent],
        *,
        rejected: Outcome,
        ideal: Outcome,
        floor: float,
        margin: float = 0.01,
        rounds: int = 6,
        rule: SelectionRule = "maximin",
        options: Sequence[Outcome] = (),
        problem: str = "",
        edges: Sequence[tuple[str, str]] | None = None,
        deadline_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_arguments(
            agents=agents,
            rejected=rejected,
            ideal=ideal,
            options=options,
            rule=rule,
            problem=problem,
            edges=edges,
            clock=clock,
        )
        self._order = [a.id for a in agents]
        check_controls(
            floor=floor,
            margin=margin,
            rounds=rounds,
            agents=self._order,
            edges=edges,
            deadline_s=deadline_s,
        )
        self._agents = {a.id: a for a in agents}
        self._rejected = rejected
        self._ideal = ideal
        # Plain float and int (a NumPy scalar given is kept out of the record).
        self.floor = float(floor)
        self.margin = float(margin)
        self._rounds = int(rounds)
        self._rule: SelectionRule = rule
        self._options = list(options)
        self._problem = problem
        self._edges = None if edges is None else [(a, b) for a, b in edges]
        self._regime = Regime(self._order, self._edges)
        self._deadline_s = None if deadline_s is None else float(deadline_s)
        self._clock = clock
        self._started = 0.0
        self._cancelled = False
        self._cancel_event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ended = False
        # cancel() from another thread against the run attaching and leaving its loop
        self._control = threading.RLock()
        self.bound = compute_bound(len(self._regime.covered), self._rounds)
        # run state
        self._anchors: dict[str, Anchors] = {}
        self._anchor_fault: dict[str, str] = {}
        self._cands: list[_Cand] = []
        self._leader: str | None = None
        self._steps: list[Step] = []
        self._agent_calls = 0
        self._model_calls = 0
        self._messages = 0
        self._hops = 0
        self._repair_rounds = 0
        self._attempts_at_start: dict[str, int] = {}
        self._unreachable: list[str] = []

    @property
    def model_calls(self) -> int:
        """Calls made so far to agents whose ``uses_model`` is true."""
        return self._model_calls

    @property
    def unreachable(self) -> list[str]:
        """Faults of the model calls that failed to reach the server (an exception of
        ``kind`` ``connection``, as :class:`~dissensus.llm.ModelCallError` carries)."""
        return list(self._unreachable)

    # ------------------------------------------------------------------ control
    def cancel(self) -> None:
        """Stop the run at the next opportunity; it returns the current leader (thread-safe).

        Before the run starts, the run stops as it starts; after it has ended, nothing
        happens (its certificate stands), whatever the thread."""
        with self._control:
            if self._ended:
                return
            self._cancelled = True
            loop, event = self._loop, self._cancel_event
            if loop is None or event is None:
                return
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:
                # a loop closed under a run that never ended (its task dropped): no
                # run is left to stop
                if not loop.is_closed():
                    raise

    def _remaining(self) -> float | None:
        if self._deadline_s is None:
            return None
        return self._deadline_s - (self._clock() - self._started)

    def _check_halt(self) -> None:
        if self._cancelled:
            raise _Halt("cancelled")
        remaining = self._remaining()
        if remaining is not None and remaining <= 0:
            raise _Halt("deadline")

    async def _invoke(
        self, agent: NegotiationAgent, make: Callable[[], Awaitable[T]]
    ) -> tuple[T | None, str | None]:
        """One agent call: (result, None) or (None, fault). Raises _Halt on deadline/cancel."""
        self._check_halt()
        remaining = self._remaining()
        limits = [x for x in (agent.timeout, remaining) if x is not None]
        wait = min(limits) if limits else None
        deadline_binds = remaining is not None and (
            agent.timeout is None or remaining <= agent.timeout
        )
        assert self._cancel_event is not None

        async def guarded() -> T:
            # The calls of a phase start one after another on the loop: a stop that came
            # while the earlier ones ran (their answers, or building their views, can
            # take a while) is seen before this one is made, and it is not made.
            self._check_halt()
            self._agent_calls += 1
            if agent.uses_model:
                self._model_calls += 1
            # SystemExit and KeyboardInterrupt would escape the event loop from a task.
            try:
                return await make()
            except SystemExit as exc:
                raise _AgentExit(exc.code) from None
            except KeyboardInterrupt:
                raise _AgentInterrupt() from None

        task: asyncio.Future[T] = asyncio.ensure_future(guarded())
        stopper: asyncio.Future[Any] = asyncio.ensure_future(self._cancel_event.wait())
        waiting: set[asyncio.Future[Any]] = {task, stopper}
        done, _ = await asyncio.wait(waiting, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        if task in done:
            if task.cancelled():
                return None, "call cancelled"
            exc = task.exception()
            if isinstance(exc, _Halt):  # the stop came before the call was made
                raise exc
            if isinstance(exc, _AgentInterrupt):
                self.cancel()
                raise _Halt("cancelled")
            if exc is not None:
                fault = _fault_text(exc)
                if agent.uses_model and getattr(exc, "kind", None) == "connection":
                    self._unreachable.append(fault)
                return None, fault
            return task.result(), None
        task.cancel()
        self._check_halt()
        if deadline_binds or agent.timeout is None:
            # the deadline was the binding limit (its timer may fire a hair early)
            raise _Halt("deadline")
        return None, f"timed out after {agent.timeout:g}s"

    async def _each(
        self, ids: Sequence[str], make: Callable[[str], Awaitable[Any]]
    ) -> tuple[list[Any], _Halt | None]:
        """Run ``make`` for every id concurrently: the results (a :class:`_Halt` in the
        place of a call the stop abandoned or never made) and the halt, if any. The
        caller records what arrived, then raises the halt."""
        results = await asyncio.gather(*(make(i) for i in ids), return_exceptions=True)
        halt: _Halt | None = None
        for res in results:
            if isinstance(res, _Halt):
                halt = halt or res
            elif isinstance(res, BaseException):  # a protocol bug: after all settled
                raise res
        return list(results), halt

    # ------------------------------------------------------------------ views
    def _view(self, agent: str, phase: Phase, round_no: int) -> NegotiationView:
        covered = self._regime.covered
        return NegotiationView(
            agent=agent,
            phase=phase,
            round=round_no,
            problem=self._problem,
            floor=self.floor,
            margin=self.margin,
            agents=list(covered),
            candidates=[
                ScoredCandidate(
                    id=c.id,
                    text=c.text,
                    author=c.author,
                    round=c.round,
                    scores={a: e.calibrated for a, e in c.scores.items()},
                    worst_off=self._worst(c),
                )
                for c in self._cands
            ],
            leader=self._leader,
            options=self._options,
            tabled=[c.id for c in self._cands],
            rejected=self._rejected,
            ideal=self._ideal,
        )

    def _broadcast(self, source: str) -> None:
        messages, hops = self._regime.broadcast(source)
        self._messages += messages
        self._hops = max(self._hops, hops)

    # ------------------------------------------------------------------ state helpers
    def _vector(self, cand: _Cand) -> list[float] | None:
        covered = self._regime.covered
        if any(a not in cand.scores for a in covered):
            return None
        return [cand.scores[a].calibrated for a in covered]

    def _exact(self, cand: _Cand) -> list[float | None] | None:
        """The unrounded calibrated scores of ``cand`` (``None`` in the place of a fault);
        ``None`` when not every covered agent scored it."""
        covered = self._regime.covered
        if any(a not in cand.scores for a in covered):
            return None
        return [cand.exact.get(a) for a in covered]

    def _worst(self, cand: _Cand) -> float | None:
        vec = self._vector(cand)
        return min(vec) if vec else None

    def _cand(self, cid: str | None) -> _Cand | None:
        return next((c for c in self._cands if c.id == cid), None)

    def _table(
        self, outcome: Outcome, author: str, round_no: int, notes: list[str]
    ) -> _Cand | None:
        """Add ``outcome`` as a candidate; ``None`` when it merged into an existing one."""
        taken = {c.id for c in self._cands} | {self._rejected.id, self._ideal.id}
        pool = {o.id: o for o in self._options if o.id}
        # a blank id ("", "  ", or one that shows as nothing) is no id: named C<k>; an id
        # that reads as a taken one or a pool option's (fullwidth, an invisible mark) is
        # that one: merged when it is its text, else renamed C<k>, never a second plan
        # of the same name
        cid = outcome.id if outcome.id is not None and same_name(outcome.id) else None
        if cid is not None and cid not in taken and cid not in pool:
            seen = same_name(cid)
            named = sorted(t for t in taken | set(pool) if t is not None)
            cid = next((t for t in named if same_name(t) == seen), cid)
        # A pool option's id names that option: table agents score it by its id. Its
        # text (outer white space aside) is the option, tabled under its own text;
        # another plan under its id would be scored as the option: renamed C<k>, or
        # merged into a candidate of its text, as a plan under an id of its own is.
        option_of_id = pool.get(cid) if cid is not None else None
        is_option = option_of_id is not None and (
            plan_text(option_of_id.text) == plan_text(outcome.text)
        )
        reserved = option_of_id is not None and not is_option
        if option_of_id is not None and is_option and self._cand(cid) is None:
            outcome = option_of_id
        adopted = False
        if not is_option:
            # The text of a pool option (outer white space aside: a model's newline
            # writes no other plan) under no id, or under an id that is not the
            # option's (another option's, one of its own): that option (which table
            # agents score by its id), tabled or merged as if proposed by its id,
            # whoever spoke first; under any other name it would be a candidate no
            # table agent can score, and the option tabled again when proposed.
            option = next((o for o in self._options if o.text == outcome.text and o.id), None)
            if option is None:
                wanted = plan_text(outcome.text)
                option = next(
                    (o for o in self._options if o.id and plan_text(o.text) == wanted), None
                )
            held = self._cand(option.id) if option is not None else None
            if option is not None and (held is None or held.text == option.text):
                cid, adopted, outcome = option.id, held is None, option
                reserved = False
        existing = self._cand(cid) if cid is not None else None
        if existing is not None and existing.text == outcome.text:
            notes.append(
                f"{author} proposed {existing.id}, already tabled by {existing.author}; merged"
            )
            return None
        if self._pooled(outcome):
            # A pool option's text: options are told apart by id (a pipeline's options
            # come from panel data, and two options of one text are two decisions whose
            # utilities differ), so a proposal under a pool option's own id is that
            # option; under no id, or an id of its own ("again2" for "Paris"), it is the
            # candidate of that text already tabled, not a copy scored again each round.
            # (that text exactly first, then outer white space aside, as a new plan's)
            same = next((c for c in self._cands if c.text == outcome.text), None)
            same = same or self._same_plan(outcome)
            same = None if is_option else same
        else:
            same = self._same_plan(outcome)
        if same is not None:
            # A new plan with the text of a candidate already tabled (its outer white
            # space aside), under no id or another one: the same proposal (two LLM
            # agents writing one plan, an agent renaming the leader), not a second
            # candidate to score again. The note is the one a merge by id makes, which
            # every verifier reads.
            notes.append(f"{author} proposed {same.id}, already tabled by {same.author}; merged")
            return None
        if cid is None or cid in taken or reserved:
            # C<k> reads as no taken id either (a fullwidth "Ｃ2" of an earlier proposal)
            names = {same_name(t) for t in taken | set(pool) if t is not None}
            k = len(self._cands) + 1
            while f"C{k}" in names:
                k += 1
            if cid is not None:
                notes.append(f"id {cid!r} of {author}'s candidate is taken; renamed C{k}")
            cid = f"C{k}"
        if adopted:
            notes.append(f"{author}'s proposal is the text of option {cid}; tabled as {cid}")
        cand = _Cand(id=cid, text=outcome.text, author=author, round=round_no)
        self._cands.append(cand)
        self._broadcast(author)
        return cand

    # ------------------------------------------------------------------ phases
    async def _calibrate(self) -> None:
        anchors = [self._rejected, self._ideal]

        async def one(agent_id: str) -> tuple[Any, str | None]:
            agent = self._agents[agent_id]
            return await self._invoke(
                agent, lambda: agent.score(anchors, self._view(agent_id, "anchors", 0))
            )

        results, halt = await self._each(self._regime.covered, one)
        for agent_id, result in zip(self._regime.covered, results, strict=True):
            if isinstance(result, _Halt):  # no answer before the stop: see _certificate
                continue
            value, fault = result
            raw = _numbers(value, 2) if fault is None else None
            if fault is None and raw is None:
                fault = _score_fault(value) or (
                    f"expected two finite numbers for the anchors, got {brief(value)}"
                )
            if raw is None:
                self._anchors[agent_id] = Anchors(rejected=None, ideal=None)
                self._anchor_fault[agent_id] = fault or UNCALIBRATED
                continue
            why = check_anchors(raw[0], raw[1])
            if why is not None and raw[0] == raw[1] and not self._agents[agent_id].uses_model:
                raise ConfigError(f"agent {agent_id!r}: {why}", field=f"agents.{agent_id}.anchors")
            if why is not None:  # an unusable answer: a fault of this agent, the run goes on
                self._anchors[agent_id] = Anchors(rejected=None, ideal=None)
                self._anchor_fault[agent_id] = f"unusable anchor scores {raw!r}: {why}"
                continue
            self._anchors[agent_id] = Anchors(rejected=raw[0], ideal=raw[1])
            self._broadcast(agent_id)
        if halt is not None:
            raise halt

    async def _sweep(self, cands: Sequence[_Cand], round_no: int, faults: list[Fault]) -> None:
        """Every covered agent scores ``cands`` (one call each); faults go to ``faults``.
        On a stop, the answers that arrived are recorded before the halt is raised."""
        outcomes = [Outcome(id=c.id, text=c.text) for c in cands]

        async def one(agent_id: str) -> tuple[Any, str | None]:
            if agent_id in self._anchor_fault:
                return None, UNCALIBRATED
            agent = self._agents[agent_id]
            return await self._invoke(
                agent, lambda: agent.score(outcomes, self._view(agent_id, "score", round_no))
            )

        results, halt = await self._each(self._regime.covered, one)
        for agent_id, result in zip(self._regime.covered, results, strict=True):
            if isinstance(result, _Halt):  # no answer before the stop: no evaluation
                continue
            value, fault = result
            raws = _scores(value, len(cands)) if fault is None else None
            if fault is None and raws is None:
                fault = f"expected {len(cands)} numbers, got {brief(value)}"
            if fault is not None:
                if fault != UNCALIBRATED:
                    faults.append(Fault(agent=agent_id, phase="score", message=fault))
                for cand in cands:
                    cand.scores[agent_id] = Evaluation(raw=None, calibrated=0.0, fault=fault)
                continue
            assert raws is not None
            self._broadcast(agent_id)
            anchors = self._anchors[agent_id]
            assert anchors.rejected is not None and anchors.ideal is not None
            for cand, raw in zip(cands, raws, strict=True):
                msg = None
                if isinstance(raw, ScoreFault):
                    msg = fault_line(raw.message) or f"no score for {cand.id}"
                elif not in_range(raw, anchors.rejected, anchors.ideal):
                    msg = f"score {raw!r} of {cand.id} is outside the anchors' range [{anchors.rejected:g}, {anchors.ideal:g}]"
                else:
                    try:
                        exact = ratio(raw, anchors.rejected, anchors.ideal)
                    except ValueError as exc:
                        msg = f"{exc} (of {cand.id})"
                if msg is not None:
                    faults.append(Fault(agent=agent_id, phase="score", message=msg))
                    cand.scores[agent_id] = Evaluation(raw=None, calibrated=0.0, fault=msg)
                    continue
                cand.scores[agent_id] = Evaluation(raw=raw, calibrated=round(exact, DIGITS) + 0.0)
                cand.exact[agent_id] = exact
        if halt is not None:
            raise halt

    async def _opening(self, step: Step) -> None:
        async def one(agent_id: str) -> tuple[Any, str | None]:
            agent = self._agents[agent_id]
            return await self._invoke(
                agent, lambda: agent.propose(self._view(agent_id, "propose", 1))
            )

        results, halt = await self._each(self._regime.covered, one)
        fresh: list[_Cand] = []
        for agent_id, result in zip(self._regime.covered, results, strict=True):
            if isinstance(result, _Halt):  # no proposal before the stop
                continue
            outcome, fault = self._written(*result)
            if fault is not None:
                step.faults.append(Fault(agent=agent_id, phase="propose", message=fault))
            if outcome is None:
                if fault is None:
                    step.notes.append(f"{agent_id} passed")
                continue
            cand = self._table(outcome, agent_id, 1, step.notes)
            if cand is not None:
                fresh.append(cand)
        if halt is not None:  # the proposals that arrived stay tabled, unscored
            raise halt
        if fresh:
            await self._sweep(fresh, 1, step.faults)
        eligible = [(c.id, v) for c in self._cands if (v := self._vector(c)) is not None]
        if eligible:
            self._leader, tie = select(eligible, self._rule, self.floor, self._clearing())
            if tie:
                step.ties.append(tie)

    async def _repair(self, step: Step, round_no: int) -> None:
        leader = self._cand(self._leader)
        assert leader is not None
        lead_vec = self._vector(leader)
        assert lead_vec is not None
        agent_id, tie = bottleneck(
            dict(zip(self._regime.covered, lead_vec, strict=True)), self._regime.covered
        )
        step.bottleneck = agent_id
        if tie:
            step.ties.append(tie)
        agent = self._agents[agent_id]
        value, fault = await self._invoke(
            agent, lambda: agent.repair(self._view(agent_id, "repair", round_no))
        )
        outcome, fault = self._written(value, fault)
        if fault is not None:
            step.faults.append(Fault(agent=agent_id, phase="repair", message=fault))
        if outcome is None:
            if fault is None:
                step.notes.append(f"{agent_id} passed")
            return
        cand = self._table(outcome, agent_id, round_no, step.notes)
        if cand is None:
            return
        step.candidate = cand.id
        await self._sweep([cand], round_no, step.faults)
        new_worst = self._worst(cand)
        if new_worst is None:
            return
        lead_worst = min(lead_vec)
        step.improvement = improvement(lead_worst, new_worst)
        qualified = [
            (c.id, v)
            for c in self._cands
            if (v := self._vector(c)) is not None and accepts(lead_worst, min(v), self.margin)
        ]
        if qualified:
            self._leader, tie = select(qualified, self._rule, self.floor, self._clearing())
            if tie:
                step.ties.append(tie)
        step.accepted = self._leader == cand.id

    def _same_plan(self, outcome: Outcome) -> _Cand | None:
        """The first tabled candidate whose text is ``outcome``'s, outer white space aside."""
        wanted = plan_text(outcome.text)
        return next((c for c in self._cands if plan_text(c.text) == wanted), None)

    def _pooled(self, outcome: Outcome) -> bool:
        """Whether ``outcome`` is the text of a pool option: the problem gave it, so it is
        matched by id as the problem's options are, never faulted as an anchor's text
        (a pipeline option may read as its fixed anchor) nor over a length bound."""
        return any(o.text == outcome.text for o in self._options)

    def _written(self, value: object, fault: str | None) -> tuple[Outcome | None, str | None]:
        """A proposal or repair as the protocol tables it: an outcome, a pass, or a fault
        (an anchor's text, its outer white space aside; a text or id longer than
        :data:`MAX_FIELD_CHARS`), unless it is a pool option's, which the problem gave."""
        outcome, fault = _outcome(value, fault)
        if outcome is None or self._pooled(outcome):
            return outcome, fault
        for name, anchor in (("rejected", self._rejected), ("ideal", self._ideal)):
            if plan_text(outcome.text) == plan_text(anchor.text):
                return None, (
                    f"the proposal is the text of the {name} anchor {anchor.id}; "
                    "anchors are never candidates; not tabled"
                )
        for name, part in (("text", outcome.text), ("id", outcome.id or "")):
            if len(part) > MAX_FIELD_CHARS:
                return None, (
                    f"the proposal's {name} is {len(part):,} characters long, over the "
                    f"{MAX_FIELD_CHARS:,} one plan may hold; not tabled"
                )
        return outcome, None

    def _clears(self, cand: _Cand | None) -> bool:
        """Whether every covered agent really scored ``cand`` at or above the floor: a
        faulted evaluation (an uncalibrated agent's included) never clears it, whatever
        the floor, even 0."""
        vec = self._exact(cand) if cand else None
        if vec is None or any(x is None for x in vec):
            return False
        return clears_floor([x for x in vec if x is not None], self.floor)

    def _clearing(self) -> set[str]:
        """The candidates every covered agent really scored at or above the floor: what
        the selection rule reads as clearing it (never the rounded scores)."""
        return {c.id for c in self._cands if self._clears(c)}

    def _leader_clears(self) -> bool:
        return self._clears(self._cand(self._leader))

    def _close_step(self, step: Step) -> None:
        cand = self._cand(self._leader)
        step.leader = self._leader
        step.worst_off = self._worst(cand) if cand else None
        self._steps.append(step)

    async def run(self) -> Certificate:
        """Run the protocol and return its certificate (never raises on agent faults).

        A negotiation runs once: its counts, candidates and steps are that run's, so a
        second :meth:`run` (after the first, or while it runs) is a :class:`ConfigError`;
        build another :class:`Negotiation` for another run."""
        with self._control:
            if self._ended or self._loop is not None:
                raise ConfigError(
                    "a Negotiation runs once: build a new one for another run", field="run"
                )
            self._loop = asyncio.get_running_loop()
            self._cancel_event = asyncio.Event()
            if self._cancelled:
                self._cancel_event.set()
        try:
            return await self._run()
        finally:  # before the loop can close: a later cancel() has no loop to reach
            with self._control:
                self._ended = True
                self._loop = None

    async def _run(self) -> Certificate:
        self._started = self._clock()
        self._attempts_at_start = {a: _attempts(self._agents[a]) for a in self._regime.covered}
        stopped: Stop | None = None
        step: Step | None = None
        try:
            await self._calibrate()
            step = Step(round=1, leader=None, worst_off=None)
            await self._opening(step)
            self._close_step(step)
            step = None
            for r in range(1, self._rounds + 1):
                if self._leader is None or self._leader_clears():
                    break
                self._repair_rounds = r
                step = Step(round=r + 1, leader=None, worst_off=None)
                await self._repair(step, r + 1)
                self._close_step(step)
                step = None
        except _Halt as halt:
            stopped = halt.reason
            if step is not None:
                step.notes.append(f"run stopped ({halt.reason}) during this round")
                self._close_step(step)
        if stopped is None:
            if self._leader is None:
                stopped = "no_candidate"
            elif self._leader_clears():
                stopped = "floor_cleared"
            else:
                stopped = "budget_exhausted"
        return self._certificate(stopped)

    def run_sync(self) -> Certificate:
        """Synchronous twin of :meth:`run`."""
        return asyncio.run(self.run())

    # ------------------------------------------------------------------ record
    def _certificate(self, stopped: Stop) -> Certificate:
        covered = self._regime.covered
        leader = self._cand(self._leader)
        lead_vec = self._vector(leader) if leader else None
        certified = self._clears(leader)
        scores: dict[str, AgentScore] = {}
        shortfall: list[Shortfall] = []
        for agent_id in covered:
            ev = leader.scores.get(agent_id) if leader else None
            scores[agent_id] = AgentScore(
                calibrated=ev.calibrated if ev else None,
                raw=ev.raw if ev else None,
                anchors=self._anchors.get(agent_id, Anchors(rejected=None, ideal=None)),
                # an agent whose anchor scores never arrived (the run stopped first)
                fault=self._anchor_fault.get(agent_id)
                or (None if agent_id in self._anchors else _stopped_fault(stopped)),
            )
            exact = leader.exact.get(agent_id) if leader and ev else None
            # the unrounded value: rounding never lifts it; a fault never clears
            if exact is None or exact < self.floor:
                value = ev.calibrated if ev else 0.0
                shortfall.append(
                    Shortfall(
                        agent=agent_id,
                        score=value,
                        gap=shortfall_gap(self.floor, value, 0.0 if exact is None else exact),
                    )
                )
        attempts = sum(
            max(0, _attempts(self._agents[a]) - self._attempts_at_start.get(a, 0))
            for a in covered
            if self._agents[a].uses_model
        )
        evaluations = sum(len(c.scores) for c in self._cands)
        bound = self.bound
        spent = Spent(
            rounds=self._repair_rounds,
            candidates=len(self._cands),
            evaluations=evaluations,
            model_calls=self._model_calls,
            attempts=attempts,
            agent_calls=self._agent_calls,
            messages=self._messages,
            hops=self._hops,
            stopped=stopped,
            within_bound=(
                self._repair_rounds <= bound.rounds
                and len(self._cands) <= bound.candidates
                and evaluations <= bound.evaluations
                and self._model_calls <= bound.model_calls
            ),
        )
        cert = Certificate(
            status="certified" if certified else "best_effort",
            selected=Selected(
                id=leader.id, text=leader.text, author=leader.author, round=leader.round
            )
            if leader
            else None,
            scores=scores,
            worst_off=min(lead_vec) if lead_vec else None,
            floor=self.floor,
            margin=self.margin,
            budget=RunControls(
                rounds=self._rounds,
                rule=self._rule,
                deadline_s=self._deadline_s,
                topology="group" if self._edges is None else "graph",
                edges=None if self._edges is None else [[a, b] for a, b in self._edges],
            ),
            bound=bound,
            spent=spent,
            trajectory=self._steps,
            shortfall=shortfall,
            covered=list(covered),
            unknown=list(self._regime.unknown),
            candidates=[
                CandidateRecord(
                    id=c.id,
                    text=c.text,
                    author=c.author,
                    round=c.round,
                    scores={a: c.scores[a] for a in covered if a in c.scores},
                    worst_off=self._worst(c),
                )
                for c in self._cands
            ],
        )
        return cert.sealed()


def _attempts(agent: NegotiationAgent) -> int:
    """The model attempts ``agent`` reports, or 0 when its ``attempts()`` raises or answers
    something other than a whole number: a count reported beside the run, never a
    reason to lose the run's record after its calls were made."""
    try:
        value = agent.attempts()
    except Exception:  # agent code, as any of its answers
        return 0
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return 0
    return max(0, int(value))


def _numbers(value: object, count: int, *, finite: bool = True) -> list[float] | None:
    """``value`` as ``count`` floats (each a real number: :func:`~dissensus.concord.scale.real`),
    or ``None`` when it is not that."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence) or len(value) != count:
        return None
    out: list[float] = []
    for item in value:
        number = real(item)
        if number is None or (finite and not math.isfinite(number)):
            return None
        out.append(number)
    return out


def _scores(value: object, count: int) -> list[float | ScoreFault] | None:
    """``value`` as ``count`` scores (numbers, finite or not, or :class:`ScoreFault`),
    or ``None`` when it is not that."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence) or len(value) != count:
        return None
    out: list[float | ScoreFault] = []
    for item in value:
        number = real(item)
        if isinstance(item, ScoreFault):
            out.append(item)
        elif number is None:
            return None
        else:
            out.append(number)
    return out


def _score_fault(value: object) -> str | None:
    """The message of the first :class:`ScoreFault` in an anchor answer, if any."""
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        for item in value:
            if isinstance(item, ScoreFault):
                return fault_line(item.message) or "no anchor score"
    return None


def _outcome(value: object, fault: str | None) -> tuple[Outcome | None, str | None]:
    if fault is not None:
        return None, fault
    if value is None or isinstance(value, Outcome):
        return value, None
    return None, f"expected an outcome or a pass, got {type(value).__name__}"


async def negotiate(
    agents: Sequence[NegotiationAgent],
    *,
    rejected: Outcome,
    ideal: Outcome,
    floor: float,
    margin: float = 0.01,
    rounds: int = 6,
    rule: SelectionRule = "maximin",
    options: Sequence[Outcome] = (),
    problem: str = "",
    edges: Sequence[tuple[str, str]] | None = None,
    deadline_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Certificate:
    """Run CONCORD over ``agents`` (the arguments as :class:`Negotiation`'s).

    An argument of the wrong kind or value is a :class:`ConfigError` naming it, raised
    before any agent is called."""
    return await Negotiation(
        agents,
        rejected=rejected,
        ideal=ideal,
        floor=floor,
        margin=margin,
        rounds=rounds,
        rule=rule,
        options=options,
        problem=problem,
        edges=edges,
        deadline_s=deadline_s,
        clock=clock,
    ).run()


def negotiate_sync(
    agents: Sequence[NegotiationAgent],
    *,
    rejected: Outcome,
    ideal: Outcome,
    floor: float,
    margin: float = 0.01,
    rounds: int = 6,
    rule: SelectionRule = "maximin",
    options: Sequence[Outcome] = (),
    problem: str = "",
    edges: Sequence[tuple[str, str]] | None = None,
    deadline_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Certificate:
    """Synchronous twin of :func:`negotiate`."""
    return Negotiation(
        agents,
        rejected=rejected,
        ideal=ideal,
        floor=floor,
        margin=margin,
        rounds=rounds,
        rule=rule,
        options=options,
        problem=problem,
        edges=edges,
        deadline_s=deadline_s,
        clock=clock,
    ).run_sync()
