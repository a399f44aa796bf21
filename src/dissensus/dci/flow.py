"""DCI-CF, the convergent flow: eight stages ending in a decision packet (``docs/dci.md``).

1. **Frame** — the first Framer frames the problem (target ``a0``, the question).
2. **Propose** — every participant proposes (or spawns from / extends a task option)
   independently: all see the workspace as it stood before the stage; options are
   canonicalised to ``max_options`` (:mod:`dissensus.dci.selection`): a proposal that
   names an earlier option merges into it, the task's own options never merge.
3. **Challenge and ground**, 4. **revise / extend / admit**, 5. **score and compress**
   to ``finalist_count`` (scores are independent: each participant sees the workspace
   as it stood before the stage, never another's recommendation of the same stage),
   6. **convergence test** — looped at most ``max_rounds`` times;
   every participant speaks once per stage; later rounds deliberate over finalists.
7. **Fallback** — if no round converged: outranking -> minimax -> satisficing -> tie-break
   (:mod:`dissensus.dci.outranking`) over the last round's scores.
8. **Packet** — the first Integrator synthesizes on the selected option; the packet is
   assembled from the workspace (:mod:`dissensus.dci.packet`).

Each act is its own request: batching a stage's acts into one call would let a
participant see the others' acts before speaking (proposals and scores would no longer be
independent) and would blur who said what, so it is not done.

Every utterance is validated (:func:`dissensus.dci.acts.check_act`); an invalid one is
re-asked ``reasks`` times with the problems listed, then logged as a failure — never
repaired. Termination is structural: at most ``(1 + reasks) * (2 + n + 3 n R)`` requests
for ``n`` participants and ``R = max_rounds`` (:func:`request_bound`).

Failures. ``budget_exhausted`` stops the run at once; selection then runs on whatever
exists (the cascade over the scores so far, or the tie-break over the live options) and
the packet says ``status: budget_exhausted``. The scores so far are each participant's
latest row: a stop in a later round's scoring stage keeps, for every participant not
yet asked in it (or whose call the stop ended), its row of the round before (on the
options still in play), so the round-1 scores still decide when round 2's scoring is cut
short; one that failed in it before the stop has no row, as a finished stage leaves it
(when every participant failed, the round scored nothing and the round before decides);
the recommends of those who spoke before the stop count in the packet's supporters and
minority report as their scores do. A stop before the options are canonicalised (in stage 1 or 2, or in a
discussion round of the ablation without DCI-CF) canonicalises them first. A ``model_failure`` is logged per act; if
every participant of a stage fails (a failed call, or answers that never validate: a
model whose answers all break the schema is a failed model, not a complete run) the run
stops with ``status: model_failure``; in the one-speaker stages (frame, synthesize) that is
the framer's or the integrator's failure alone. With ``deadline_s`` set, the run stops when the
wall-clock deadline passes (a request in flight is cancelled), selects over whatever
exists and says ``status: deadline_exceeded``.

Ablations (the DCI paper's Table 7): ``archetypes=False`` gives every participant the neutral
role; ``typed_grammar=False`` drops act names — the stage decides an utterance's effect
(its act is logged as ``untyped``); ``convergent_flow=False`` replaces stages 3-7 with
``max_rounds`` open discussion rounds, one scoring pass and the highest mean score
(path ``unstructured:mean_score``); options proposed in a discussion round are
canonicalised as stage 2's are (merged into a kept option they name, at most
``max_options`` in play), so the ablation scores the same kind of option set.

Choices this module makes: who speaks in each stage (everyone, except the framing
and synthesis duties, and stage 4, where only participants with a stake speak: holders of
open tensions, supporters of options under an open tension, and the integrator; with no
open tension stage 4 is skipped), that later rounds see finalists only, and the derived reopen
conditions (an open blocking objection on the selected option, or the score margin,
become reopen conditions when the synthesis gives none for them).

Participants that misbehave. A participant is outside code: whatever its ``speak`` raises
is that participant's failure, never an error of the run. A pydantic ``ValidationError``
(a function participant returning ``None`` or a partial act) or a reply that is not an
:class:`ActReply` is an ``invalid_output``, re-asked like an answer that does not parse;
any other exception (a ``TimeoutError`` of its own included: only the run's deadline is
``deadline_exceeded``) is a ``model_failure`` of that act, not re-asked, with the
exception's type and text as the problem. ``KeyboardInterrupt``, ``SystemExit`` and
cancellation are not participant failures: they propagate and the run is abandoned; so
do a :class:`~dissensus.errors.ConfigError` (a setting of the run), the journal's own
errors (busy or unreachable under a model call, a key appended again, a journalled step
that no longer reads) and the pipeline run's deadline (``PastDeadline``: the journalled
client sends no attempt once it has passed), which stop the run as before, resumable:
a follow-up cut off by its run's deadline is resumed, never recorded as a deliberation
in which every participant failed. Any other of the
library's :class:`~dissensus.errors.DissensusError` raised under a participant (an
``InputError`` of a library call its code made, a model client's error) is that
participant's ``model_failure``, and the run ends with its packet; the model client's
budget refusal (``BudgetExceeded``) is a ``budget_exhausted``, which stops the run with
its packet.

Arguments. ``task`` (at least one participant, none twice: a task file is held to that,
a :class:`Task` built in code is not), ``agents`` (a sequence of participants with
string ids, none given twice), ``config``, ``policy``, ``meter`` and ``clock`` are
checked before any participant is asked, and ``meter`` is read once then (it must return a :class:`Usage`);
a wrong one is a :class:`ConfigError` naming it. A meter that fails only at the end does
not cost the packet: usage falls back to the flow's own count and ``status_detail`` says
so. Agents whose id no participant of the task has are not asked (as before).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from dissensus.dci.acts import RawAct, act_schema, canonical_target, check_act
from dissensus.dci.archetypes import NEUTRAL, Archetype, archetype
from dissensus.dci.assemble import assemble_packet
from dissensus.dci.outranking import CascadeResult, cascade
from dissensus.dci.packet import ConvergenceRecord, DecisionPacket
from dissensus.dci.participant import ActReply, ActRequest, Participant, ParticipantFailure
from dissensus.dci.prompts import render_prompt, render_system
from dissensus.dci.selection import canonical_merges, compress, convergence, mean_scores
from dissensus.dci.stages import STAGE_ACTS, request_bound, untyped_act
from dissensus.dci.task import DCIConfig, ParticipantSpec, Task
from dissensus.dci.workspace import ActFailure, ActRecord, CompactionPolicy, Workspace, render_view
from dissensus.errors import ConfigError
from dissensus.types import Usage

__all__ = ["CallTrace", "DeliberationResult", "deliberate", "deliberate_sync", "request_bound"]


class CallTrace(BaseModel):
    """One request made to a participant (for cost and compaction measurements)."""

    model_config = ConfigDict(frozen=True)

    stage: str
    round: int
    participant: str
    prompt_chars: int
    outcome: str
    """``ok``, ``invalid``, ``budget_exhausted``, ``model_failure`` or ``invalid_output``."""


class DeliberationResult(BaseModel):
    """The packet plus the full workspace and the request trace behind it."""

    packet: DecisionPacket
    workspace: Workspace
    trace: list[CallTrace]


_MODEL_FAILURES = frozenset({"model_failure", "invalid_act", "invalid_output"})
"""Failure kinds that mean the model gave nothing usable: a call that failed, or answers
that never validated (schema-invalid or invalid acts after every re-ask)."""

_STOPS = frozenset({"budget_exhausted", "deadline_exceeded"})
"""Failure kinds that stop the run: the call they end was cut by the stop, not failed by
its participant (:meth:`_Run.score`)."""

_OUT = frozenset({"merged", "dropped"})
"""Option statuses that take no further part in canonicalisation."""

_CAUSE_CHARS = 300
"""Longest cause a ``model_failure`` detail quotes from the failure that caused it."""


class _Abort(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


_JOURNAL_FAULTS = frozenset(
    {
        "dissensus.store.errors.JournalError",
        "dissensus.store.errors.JournalConflict",
        "dissensus.pipeline.durable.UnreadableStep",
    }
)
"""The journal's own errors (busy, unreachable, a key appended again with another
payload, a journalled step that no longer reads), named by class so that the core
imports no journal: raised under a participant's model call, they are the run's."""

_PAST_DEADLINE = "dissensus.pipeline.durable.PastDeadline"
"""The pipeline run's deadline (the journalled client sends no attempt once it has
passed), named so that the core imports no pipeline: raised under a participant's model
call it is the run's, which stops partial and resumable."""

_BUDGET_REFUSED = "dissensus.llm.base.BudgetExceeded"
"""The model client's refusal of a call over its budget (named, not imported: the core
imports no model client)."""


def _names(exc: BaseException) -> set[str]:
    return {f"{c.__module__}.{c.__qualname__}" for c in type(exc).__mro__}


def _runs_own(exc: Exception) -> bool:
    """Whether an exception raised under a participant is the run's, not the
    participant's: a :class:`ConfigError` (a setting of the run), a journal fault or the
    pipeline run's deadline.
    Any other, the library's other errors included, is the participant's failure."""
    names = _names(exc)
    return isinstance(exc, ConfigError) or bool(names & _JOURNAL_FAULTS) or _PAST_DEADLINE in names


def _as_failure(exc: Exception) -> ParticipantFailure:
    """A participant's exception as the failure it stands for: a
    :class:`ParticipantFailure` as it is; a reply that does not validate as an act
    (``ValidationError``) an ``invalid_output``, re-asked; the model client's budget
    refusal a ``budget_exhausted`` (the run stops, with its packet); any other exception
    (the library's own :class:`~dissensus.errors.DissensusError` included) a
    ``model_failure`` of that participant, never an error of the run."""
    if isinstance(exc, ParticipantFailure):
        return exc
    if _BUDGET_REFUSED in _names(exc):
        return ParticipantFailure("budget_exhausted", str(exc))
    if isinstance(exc, ValidationError):
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "reply"
        return ParticipantFailure(
            "invalid_output", f"the reply is not a valid act: {where}: {first['msg']}"
        )
    text = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
    return ParticipantFailure("model_failure", f"the participant raised {text}")


class _Seat:
    def __init__(self, spec: ParticipantSpec, agent: Participant, arch: Archetype) -> None:
        self.spec = spec
        self.agent = agent
        self.arch = arch


class _Run:
    def __init__(
        self,
        task: Task,
        seats: list[_Seat],
        config: DCIConfig,
        policy: CompactionPolicy | None,
        meter: Callable[[], Usage] | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.task = task
        self.seats = seats
        self.cfg = config
        self.policy = policy
        self.meter = meter
        self.meter_start = _read_meter(meter).model_copy() if meter else Usage()
        self.ws = Workspace(
            question=task.question, context=task.context, criteria=list(task.criteria)
        )
        self.trace: list[CallTrace] = []
        self.usage = Usage()
        self.status = "complete"
        self.detail: str | None = None
        self.rounds = 0
        self.means: dict[str, float] = {}
        self.last_means: dict[str, float] = {}
        """Each option's mean score in the last round that scored it (the packet's)."""
        self.recommends: dict[str, ActRecord] = {}
        self.conv: ConvergenceRecord | None = None
        self.fallback: CascadeResult | None = None
        self.path = "fallback:no_options"
        self.selected: str | None = None
        self.synthesis: RawAct | None = None
        self.last_raw: RawAct | None = None
        self.frozen_view: str | None = None
        self.snapshot: Workspace | None = None
        """The workspace as it was before the stage in progress, when that stage's acts
        are independent (scoring): each speaker's view is rendered from it."""
        self.clock = clock
        self.stop_at = clock() + config.deadline_s if config.deadline_s is not None else None

    def remaining(self) -> float | None:
        return None if self.stop_at is None else self.stop_at - self.clock()

    def check_deadline(self) -> None:
        left = self.remaining()
        if left is not None and left <= 0:
            raise _Abort("deadline_exceeded", f"the deadline of {self.cfg.deadline_s:g}s passed")

    # ------------------------------------------------------------ speaking
    async def speak(
        self, seat: _Seat, stage: str, round_: int, *, required_target: str | None = None
    ) -> ActRecord | None:
        typed = self.cfg.typed_grammar
        allowed = STAGE_ACTS[stage]
        live = self.ws.live_options()
        schema = (
            act_schema(
                allowed,
                known_targets=self.ws.known_targets(),
                live_options=live,
                required_target=required_target,
            )
            if typed
            else None
        )
        feedback: tuple[str, ...] = ()
        for _ in range(1 + self.cfg.reasks):
            self.check_deadline()
            # Stage 2 proposals are independent: everyone sees the workspace as it was
            # before it; so are stage 5 scores (the snapshot taken before the stage).
            view = self.frozen_view or render_view(
                self.snapshot or self.ws,
                participants=len(self.seats),
                viewer=seat.spec.id,
                policy=self.policy,
                full_transcript=self.cfg.full_transcript,
                means=self.means,
            )
            request = ActRequest(
                participant=seat.spec.id,
                archetype=seat.arch.name,
                stage=stage,
                round=round_,
                system=render_system(seat.spec.id, seat.arch),
                prompt=render_prompt(
                    stage=stage,
                    question=self.task.question,
                    context=self.task.context,
                    criteria=self.task.criteria,
                    view=view,
                    allowed=sorted(allowed),
                    arch=seat.arch,
                    typed=typed,
                    full_context=stage in ("frame", "propose"),
                    feedback=feedback,
                    live_options=live,
                ),
                allowed_acts=tuple(sorted(allowed)),
                typed=typed,
                feedback=feedback,
                response_schema=schema,
            )
            chars = len(request.system) + len(request.prompt)
            timer = asyncio.timeout(self.remaining())
            try:
                async with timer:
                    reply = await seat.agent.speak(request)
                if not isinstance(reply, ActReply):
                    raise ParticipantFailure(
                        "invalid_output",
                        f"expected an ActReply, got {type(reply).__name__}",
                    )
            except TimeoutError as exc:
                if not timer.expired():  # the participant's own timeout, not the deadline
                    failure = _as_failure(exc)
                    self._trace(stage, round_, seat, chars, failure.kind)
                    self._fail(seat, stage, round_, failure.kind, [str(failure)])
                    return None
                self._trace(stage, round_, seat, chars, "deadline_exceeded")
                self._fail(
                    seat,
                    stage,
                    round_,
                    "deadline_exceeded",
                    ["the request was cancelled at the deadline"],
                )
                raise _Abort(
                    "deadline_exceeded", f"the deadline of {self.cfg.deadline_s:g}s passed"
                ) from None
            except Exception as exc:  # BaseException (Ctrl-C, exit, cancellation) propagates
                if _runs_own(exc):
                    # A setting of the run, or the journal busy or unreachable under a
                    # model call: the run's, not the participant's. It stops the run as
                    # before, resumable; it is never a failure that sends a case to review.
                    raise
                failure = _as_failure(exc)
                self.usage.add(failure.usage)
                self._trace(stage, round_, seat, chars, failure.kind)
                if failure.kind == "invalid_output":
                    feedback = (str(failure),)
                    continue
                self._fail(seat, stage, round_, failure.kind, [str(failure)])
                if failure.kind == "budget_exhausted":
                    raise _Abort("budget_exhausted", str(failure)) from None
                return None
            record = self._accept(seat, stage, round_, reply, allowed, live, required_target)
            if isinstance(record, ActRecord):
                self._trace(stage, round_, seat, chars, "ok")
                return record
            self._trace(stage, round_, seat, chars, "invalid")
            feedback = tuple(record)
        self._fail(seat, stage, round_, "invalid_act", list(feedback))
        return None

    def _accept(
        self,
        seat: _Seat,
        stage: str,
        round_: int,
        reply: ActReply,
        allowed: frozenset[str],
        live: list[str],
        required_target: str | None,
    ) -> ActRecord | list[str]:
        self.usage.add(reply.usage)
        # Validated, required-target-checked and applied on one and the same id.
        raw = canonical_target(reply.act)
        if not self.cfg.typed_grammar:
            act = untyped_act(stage, raw)
            raw = raw.model_copy(
                update={"act": act, "blocking": raw.blocking and act == "challenge"}
            )
            allowed = frozenset({act})
        problems = check_act(
            raw,
            allowed=allowed,
            known_targets=self.ws.known_targets(),
            live_options=frozenset(live),
        )
        if required_target is not None and raw.target != required_target:
            problems.append(f"this act must target {required_target}")
        if problems:
            return problems
        self.last_raw = raw
        record = self.ws.apply(
            seat.spec.id, raw, stage=stage, round_=round_, typed=self.cfg.typed_grammar
        )
        if raw.act == "recommend":
            # Recorded now, not when the stage ends: a stage cut short (budget, deadline)
            # keeps the recommends of those who spoke, as it keeps their scores.
            self.recommends[seat.spec.id] = record
        return record

    def _trace(self, stage: str, round_: int, seat: _Seat, chars: int, outcome: str) -> None:
        self.trace.append(
            CallTrace(
                stage=stage,
                round=round_,
                participant=seat.spec.id,
                prompt_chars=chars,
                outcome=outcome,
            )
        )

    def _fail(self, seat: _Seat, stage: str, round_: int, kind: str, problems: list[str]) -> None:
        self.ws.failures.append(
            ActFailure(
                speaker=seat.spec.id, stage=stage, round=round_, kind=kind, problems=problems
            )
        )

    def revise_speakers(self) -> set[str]:
        """Who has a stake in stage 4: tension holders, supporters of challenged options, the integrator."""
        opened = self.ws.open_tensions()
        if not opened:
            return set()
        ids = {t.holder for t in opened}
        for t in opened:
            option = self.ws.options.get(t.target)
            if option is not None:
                ids.update(option.supporters)
        ids.add(self.duty("Integrator", last=True).spec.id)
        return ids

    async def stage_all(
        self, stage: str, round_: int, *, only: set[str] | None = None
    ) -> list[ActRecord]:
        records: list[ActRecord] = []
        failed = 0
        first = len(self.ws.failures)
        seats = [s for s in self.seats if only is None or s.spec.id in only]
        for seat in seats:
            before = len(self.ws.failures)
            record = await self.speak(seat, stage, round_)
            if record is not None:
                records.append(record)
            elif any(f.kind in _MODEL_FAILURES for f in self.ws.failures[before:]):
                failed += 1
        if seats and failed == len(seats):
            raise _Abort(
                "model_failure",
                f"every participant failed in stage {stage} (round {round_})"
                f"{self._cause(first, named=True)}",
            )
        return records

    def _cause(self, since: int, *, named: bool) -> str:
        """`` (CAUSE)``: the first model failure journalled from ``since`` on (the model
        and its fault, as the failed call said them), naming its speaker when ``named``;
        empty when there is none."""
        for failure in self.ws.failures[since:]:
            if failure.kind in _MODEL_FAILURES and failure.problems:
                problem = " ".join(failure.problems[0].split())
                if len(problem) > _CAUSE_CHARS:
                    problem = problem[: _CAUSE_CHARS - 3] + "..."
                who = f"first, {failure.speaker}: " if named else ""
                return f" ({who}{problem})"
        return ""

    async def speak_duty(
        self, seat: _Seat, stage: str, round_: int, *, required_target: str | None = None
    ) -> ActRecord | None:
        """A one-speaker stage (frame, synthesize): its only participant failing is every
        participant of the stage failing, so the run stops with ``model_failure`` as
        :meth:`stage_all` would."""
        before = len(self.ws.failures)
        record = await self.speak(seat, stage, round_, required_target=required_target)
        if record is None and any(f.kind in _MODEL_FAILURES for f in self.ws.failures[before:]):
            raise _Abort(
                "model_failure",
                f"every participant failed in stage {stage} (round {round_}): "
                f"its only participant, {seat.spec.id}{self._cause(before, named=False)}",
            )
        return record

    def duty(self, name: str, *, last: bool) -> _Seat:
        if self.cfg.archetypes:
            for seat in self.seats:
                if seat.arch.name == name:
                    return seat
        return self.seats[-1] if last else self.seats[0]

    # -------------------------------------------------------------- stages
    async def run(self) -> None:
        for option in self.task.options:
            self.ws.add_option(option.text, proposer="task", label=option.id)
        try:
            await self.speak_duty(self.duty("Framer", last=False), "frame", 0)
            self.frozen_view = render_view(
                self.ws,
                participants=len(self.seats),
                policy=self.policy,
                full_transcript=self.cfg.full_transcript,
            )
            await self.stage_all("propose", 0)
            self.frozen_view = None
            self.canonicalise()
            if not self.ws.live_options():
                self.detail = self.detail or "no option was proposed"
                return
            if self.cfg.convergent_flow:
                await self.converge()
            else:
                await self.unstructured()
            await self.synthesize()
        except _Abort as abort:
            self.status = abort.kind
            self.detail = str(abort)
            if self.selected is None:
                # A stop in stage 2 (or in a discussion round) comes before the options
                # proposed so far are canonicalised: they are now, so selection and the
                # packet see at most max_options in play, copies merged, as ever.
                self.canonicalise()
                self.select_now()

    def canonicalise(self) -> None:
        """Stage 2: proposals naming a kept option merge into it; the task's own options
        are never merged (:func:`~dissensus.dci.selection.canonical_merges`); at most
        ``max_options`` stay in play. Options already merged or dropped take no part
        (the ablation without DCI-CF canonicalises again after each discussion round)."""
        options = self.ws.options
        fixed = {o.id for o in options.values() if o.proposer == "task"}
        in_play = [(o.id, o.text) for o in options.values() if o.status not in _OUT]
        merges = canonical_merges(in_play, fixed)
        for option_id, keeper_id in merges.items():
            option, keeper = options[option_id], options[keeper_id]
            option.status, option.merged_into = "merged", keeper.id
            keeper.supporters.extend(s for s in option.supporters if s not in keeper.supporters)
        for option_id in self.ws.live_options()[self.cfg.max_options :]:
            self.ws.options[option_id].status = "dropped"

    async def score(self, round_: int) -> dict[str, dict[str, float]]:
        earlier, self.ws.scores = self.ws.scores, {}
        first = len(self.ws.failures)
        # Scores are independent: nobody sees another's recommendation of this stage.
        self.snapshot = self.ws.model_copy(deep=True)
        try:
            # each recommend is recorded as it is accepted (_accept)
            await self.stage_all("score", round_)
        except _Abort as abort:
            # Stopped before every participant scored: one not yet asked in this round
            # (or whose call the stop itself ended) keeps its row of the round before, on
            # the options still in play, so that selection runs on the latest scores,
            # never on none. One that failed in this round before the stop has no row, as
            # a finished round leaves it; when every participant failed, the round scored
            # nothing and the round before decides.
            failed = (
                set()
                if abort.kind == "model_failure"
                else {f.speaker for f in self.ws.failures[first:] if f.kind not in _STOPS}
            )
            live = self.ws.live_options()
            kept = {
                speaker: {o: row[o] for o in live if o in row}
                for speaker, row in earlier.items()
                if speaker not in self.ws.scores and speaker not in failed
            }
            rows = {**{p: r for p, r in kept.items() if r}, **self.ws.scores}
            self.ws.scores = {s.spec.id: rows[s.spec.id] for s in self.seats if s.spec.id in rows}
            raise
        finally:
            self.snapshot = None
        self.means = mean_scores(self.ws.live_options(), self.ws.scores)
        for option_id, mean in self.means.items():
            if any(option_id in row for row in self.ws.scores.values()):
                self.last_means[option_id] = mean
        return dict(self.ws.scores)

    async def converge(self) -> None:
        for round_ in range(1, self.cfg.max_rounds + 1):
            self.rounds = round_
            await self.stage_all("challenge", round_)
            await self.stage_all("revise", round_, only=self.revise_speakers())
            scores = await self.score(round_)
            live = self.ws.live_options()
            finalists = compress(live, scores, self.cfg.finalist_count)
            for option_id in live:
                self.ws.options[option_id].status = (
                    "finalist" if option_id in finalists else "eliminated"
                )
            test = convergence(
                finalists, scores, self.ws.open_blocking_by_target(), self.cfg.convergence_margin
            )
            self.conv = ConvergenceRecord(
                converged=test.converged,
                top=test.top,
                margin=test.margin,
                required_margin=self.cfg.convergence_margin,
                blocking_tensions=test.blocking_tensions,
            )
            if test.converged and test.top is not None:
                self.choose(test.top, "converged")
                return
        self.run_cascade()

    async def unstructured(self) -> None:
        for round_ in range(1, self.cfg.max_rounds + 1):
            self.rounds = round_
            await self.stage_all("discuss", round_)
            # Options proposed in the discussion are held to stage 2's rules: one that
            # names a kept option merges into it, at most max_options stay in play.
            self.canonicalise()
        scores = await self.score(self.rounds)
        best = compress(self.ws.live_options(), scores, 1)
        if best:
            self.choose(best[0], "unstructured:mean_score")

    def run_cascade(self) -> None:
        live = self.ws.live_options()
        self.fallback = cascade(
            live,
            self.ws.scores,
            concordance_threshold=self.cfg.concordance_threshold,
            discordance_threshold=self.cfg.discordance_threshold,
            satisficing_level=self.cfg.satisficing_level,
        )
        if self.fallback.selected is not None:
            self.choose(self.fallback.selected, f"fallback:{self.fallback.rule}")

    def select_now(self) -> None:
        """Selection after an early stop: the cascade over whatever exists."""
        if self.ws.live_options():
            self.run_cascade()

    def choose(self, option_id: str, path: str) -> None:
        self.selected, self.path = option_id, path
        self.ws.options[option_id].status = "selected"

    async def synthesize(self) -> None:
        if self.selected is None:
            return
        seat = self.duty("Integrator", last=True)
        record = await self.speak_duty(
            seat, "synthesize", self.rounds, required_target=self.selected
        )
        if record is not None:
            self.synthesis = self.last_raw

    def packet(self) -> DecisionPacket:
        usage: Usage | None = None
        meter_note = ""
        if self.meter is not None:
            try:
                usage = _read_meter(self.meter) - self.meter_start
            except ConfigError as exc:  # the run's acts are kept: its packet is still due
                meter_note = f"{exc}; usage is the flow's own count"
        if usage is None:
            usage = self.usage.model_copy()
            usage.calls = usage.calls or len(self.trace)
            usage.attempts = usage.attempts or len(self.trace)
        detail = self.detail
        if detail is None and self.ws.failures:
            detail = f"{len(self.ws.failures)} utterance(s) failed and were not counted as acts (see failures)"
        if meter_note:
            detail = f"{detail}; {meter_note}" if detail else meter_note
        return assemble_packet(
            task=self.task,
            ws=self.ws,
            config=self.cfg,
            participants={s.spec.id: s.arch.name for s in self.seats},
            status=self.status,
            detail=detail,
            path=self.path,
            selected=self.selected,
            conv=self.conv,
            fallback=self.fallback,
            recommends=self.recommends,
            synthesis=self.synthesis,
            usage=usage,
            rounds=self.rounds,
            max_prompt_tokens=max(((t.prompt_chars + 3) // 4 for t in self.trace), default=0),
            last_means=self.last_means,
        )


def _read_meter(meter: Callable[[], Usage]) -> Usage:
    """``meter()``, or :class:`ConfigError` naming ``meter`` when it raises or returns
    anything but a :class:`Usage`."""
    try:
        value = meter()
    except Exception as exc:
        raise ConfigError(f"the meter raised {type(exc).__name__}: {exc}", field="meter") from exc
    if not isinstance(value, Usage):
        raise ConfigError(
            f"the meter must return a Usage, got {type(value).__name__}", field="meter"
        )
    return value


def _check_call(
    task: object,
    agents: object,
    config: object,
    policy: object,
    meter: object,
    clock: object,
) -> None:
    """Refuse an argument of the wrong kind with a :class:`ConfigError` naming it, before
    any participant is asked (a type check per argument and per agent)."""
    if not isinstance(task, Task):
        raise ConfigError(f"expected a Task (load_task), got {type(task).__name__}", field="task")
    if isinstance(agents, str | bytes) or not isinstance(agents, Sequence):
        raise ConfigError(
            f"expected a sequence of participants, got {type(agents).__name__}", field="agents"
        )
    seen: set[str] = set()
    for i, agent in enumerate(agents):
        if not isinstance(agent, Participant):
            raise ConfigError(
                f"expected a participant (an id and async speak), got {type(agent).__name__}",
                field=f"agents.{i}",
            )
        if not isinstance(agent.id, str):
            raise ConfigError(
                f"a participant id is a string, got {type(agent.id).__name__}",
                field=f"agents.{i}.id",
            )
        if agent.id in seen:
            raise ConfigError(f"participant id {agent.id!r} is given twice", field=f"agents.{i}.id")
        seen.add(agent.id)
    if config is not None and not isinstance(config, DCIConfig):
        raise ConfigError(f"expected a DCIConfig, got {type(config).__name__}", field="config")
    if policy is not None and not isinstance(policy, CompactionPolicy):
        raise ConfigError(
            f"expected a CompactionPolicy, got {type(policy).__name__}", field="policy"
        )
    if meter is not None and not callable(meter):
        raise ConfigError(f"expected a callable, got {type(meter).__name__}", field="meter")
    if not callable(clock):
        raise ConfigError(f"expected a callable, got {type(clock).__name__}", field="clock")


def _seats(task: Task, agents: Sequence[Participant], config: DCIConfig) -> list[_Seat]:
    by_id = {a.id: a for a in agents}
    if not task.participants:  # a task file cannot say so; a Task built in code can
        raise ConfigError("at least one participant is needed", field="participants")
    seats: list[_Seat] = []
    for i, spec in enumerate(task.participants):
        if any(seat.spec.id == spec.id for seat in seats):
            raise ConfigError(f"duplicate participant id {spec.id!r}", field=f"participants.{i}.id")
        agent = by_id.get(spec.id)
        if agent is None:
            raise ConfigError(
                f"no agent given for participant {spec.id!r}", field=f"participants.{i}.id"
            )
        arch = (
            archetype(spec.archetype, field=f"participants.{i}.archetype")
            if config.archetypes
            else NEUTRAL
        )
        if spec.preferred_acts is not None and config.archetypes:
            arch = arch.model_copy(update={"preferred_acts": tuple(spec.preferred_acts)})
        seats.append(_Seat(spec, agent, arch))
    return seats


async def deliberate(
    task: Task,
    agents: Sequence[Participant],
    *,
    config: DCIConfig | None = None,
    policy: CompactionPolicy | None = None,
    meter: Callable[[], Usage] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> DeliberationResult:
    """Run DCI-CF on ``task`` with ``agents`` (matched to ``task.participants`` by id).

    ``config`` defaults to ``task.dci``; ``meter`` (e.g. ``lambda: client.usage``) lets
    the packet report the model client's own counts, re-asks and retries included.
    Always returns a packet; raises only :class:`ConfigError`, naming the argument, for
    a bad panel or an argument of the wrong kind (checked before any participant is
    asked). A participant that raises (the library's own errors included, say an
    ``InputError`` of a library call its code made) or replies with something that is
    not an act fails as a :class:`ParticipantFailure` would; Ctrl-C, ``SystemExit``,
    cancellation, a :class:`ConfigError` and the journal's own errors (busy or
    unreachable under a model call) propagate.
    """
    _check_call(task, agents, config, policy, meter, clock)
    cfg = config or task.dci
    run = _Run(task, _seats(task, agents, cfg), cfg, policy, meter, clock)
    await run.run()
    return DeliberationResult(packet=run.packet(), workspace=run.ws, trace=run.trace)


def deliberate_sync(
    task: Task,
    agents: Sequence[Participant],
    *,
    config: DCIConfig | None = None,
    policy: CompactionPolicy | None = None,
    meter: Callable[[], Usage] | None = None,
) -> DeliberationResult:
    """Synchronous twin of :func:`deliberate`."""
    return asyncio.run(deliberate(task, agents, config=config, policy=policy, meter=meter))
