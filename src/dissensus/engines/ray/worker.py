"""A decide worker (:class:`_Decider`, a Ray actor as :class:`_DecideWorker`): it builds
the run's specification once and decides blocks of input lines against a throw-away
in-memory journal seeded with what the real journal holds, each block on its own
allowance (a fresh :class:`_BlockBudget`, which the driver can stop), and hands back the
block's records, rejects, events and spend. Workers never write the journal."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from dissensus.engines.blocks import block_lines
from dissensus.engines.ray.charge import _SPEND_EVENTS, _case_charge
from dissensus.engines.ray.cluster import _ray
from dissensus.engines.ray.fault import _Fault, _maybe_die
from dissensus.engines.ray.messages import (
    _Allowance,
    _block_of,
    _BlockResult,
    _CaseResult,
    _Charge,
    _EventText,
    _loop_deadline,
    _Monitor,
    _rss_mb,
    _Stopped,
    _WorkItem,
)
from dissensus.io.jsonl import Reject, blank_line, parse_line
from dissensus.llm.base import BudgetExceeded
from dissensus.llm.budget import Budget, Reservation
from dissensus.types import JsonObject, Panel


class _BlockBudget(Budget):
    """A block's allowance on a worker, which the driver can stop (:meth:`stop`).

    A refusal says it is the block's share that is spent, and names the run's own limit
    (``run_calls``, ``run_tokens``): a block gets a share of what is left (the budget
    left over the blocks in flight), so a block needing more than its share is refused
    while the run's budget still has room, and "all 15 attempts allowed are spent" under
    ``max_calls: 60`` read as a wrong count."""

    run_calls: int | None = None
    run_tokens: int | None = None

    def reserve(self, *, model: str, prompt_tokens: int, completion_tokens: int) -> Reservation:
        try:
            return super().reserve(
                model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
            )
        except BudgetExceeded as exc:
            limits = [
                f"{name} {limit}"
                for name, limit in (("max_calls", self.run_calls), ("max_tokens", self.run_tokens))
                if limit is not None
            ]
            if not limits or str(exc).startswith("cost"):
                raise
            raise BudgetExceeded(
                f"{exc} (this Ray block's share of the run's {', '.join(limits)}, which "
                "the blocks decided at once share)",
                attempts=exc.attempts,
            ) from None

    def stop(self) -> tuple[int, int]:
        """Refuse every attempt from now on; ``(attempts, tokens)``: those sent and those
        in flight, the latter at what they reserved (their worst case)."""
        with self._lock:
            calls_r, tokens_r, _ = self._reserved
            attempts = self._spent.attempts + int(calls_r)
            tokens = self._spent.total_tokens + int(tokens_r)
            # At the limit: every further reservation is refused (calls and tokens).
            self.max_calls = attempts
            self.max_tokens = tokens
        return attempts, tokens


class _Decider:
    """One Ray worker of a decide run: loads the run's specification once, decides blocks."""

    def __init__(
        self,
        run_id: str,
        spec: JsonObject,
        fault: _Fault | None,
        monitor: _Monitor | None = None,
    ) -> None:
        from dissensus.acceptance.monitor import MonitorStep
        from dissensus.llm.budget import Budget
        from dissensus.pipeline.spec import RunSpec

        self.run_id = run_id
        self.spec = RunSpec.from_started(spec)
        self.policy = self.spec.policy
        monitor = monitor or _Monitor(verdicts={}, journalled=[])
        self.monitor = {
            name: MonitorStep.model_validate(step) for name, step in monitor["verdicts"].items()
        }
        """The acceptance monitor's verdicts as the driver read them from the run's journal
        (:func:`_monitor_of`; none: no audits), for every block's runtime."""
        self.journalled = monitor["journalled"]
        """The run's journalled suspensions, seeded into every block's journal."""
        done = {event["key"] for event in self.journalled}
        self.suspensions = [
            key
            for key in (f"acceptance/suspended/{n}" for n, s in self.monitor.items() if s.suspended)
            if key not in done
        ]
        """The keys of the ``acceptance.suspended`` events a block may journal (the
        suspended strata's the run has not journalled): handed back with the first case
        settled after each."""
        self.budget = Budget(max_calls=0, max_tokens=0)  # each block brings its allowance
        self.fault = fault
        self._guard = threading.Lock()  # the block's budget against a stop (:meth:`stop`)
        self.stopped = False
        self.budgets: dict[str, _BlockBudget] = {}
        """The budgets of the last blocks this worker started, by reservation key."""
        self._backend: Any = None
        self._clients: dict[str | None, Any] = {}
        self._loop = asyncio.new_event_loop()

    def backend(self) -> Any:
        if self._backend is None:
            from dissensus.states import get_backend

            self._backend = get_backend(
                self.policy.reading.similarity, allow_code=self.policy.allow_code or None
            )
        return self._backend

    def client(self, spec: str | None = None) -> Any:
        """The worker's client of model spec ``spec`` (``None``: the run's model), drawing
        from the current block's allowance (:meth:`_allow`)."""
        if spec not in self._clients:
            from dissensus.llm.resolve import resolve_model

            self._clients[spec] = resolve_model(spec or self.spec.model, budget=self.budget)
        return self._clients[spec]

    def _allow(self, allowance: _Allowance, reservation: str | None) -> None:
        """A fresh budget holding the block's allowance, for every client of the worker
        (nothing at all once the worker is stopped: :meth:`stop`)."""
        with self._guard:
            if self.stopped:
                budget = _BlockBudget(max_calls=0, max_tokens=0)
            else:
                budget = _BlockBudget(max_calls=allowance["calls"], max_tokens=allowance["tokens"])
                limits = self.policy.budget
                budget.run_calls, budget.run_tokens = limits.max_calls, limits.max_tokens
            if reservation is not None:
                self.budgets[reservation] = budget
                while len(self.budgets) > _KEPT_BUDGETS:
                    del self.budgets[next(iter(self.budgets))]
            self.budget = budget
            for client in self._clients.values():
                client.budget = budget

    def stop(self) -> _Stopped:
        """Stop spending for good: no attempt is sent from now on, by the block being
        decided or any block after it; what each block started here had sent or has in
        flight (the driver abandons them: :meth:`_Flight.abandon`). Called from a thread
        of its own (the actor's ``control`` group) while a block may be deciding."""
        with self._guard:
            self.stopped = True
            spent = {key: budget.stop() for key, budget in self.budgets.items()}
        return _Stopped(restarted=_restarted_here(), spent=spent)

    def decide(self, raw: str) -> bytes:
        """One block (a :class:`_WorkItem` as JSON text): its pickled :class:`_BlockResult`."""
        import pickle

        result = self._loop.run_until_complete(self._block(json.loads(raw)))
        return pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)

    async def _block(self, item: _WorkItem) -> _BlockResult:
        from dissensus.pipeline.durable import PastDeadline
        from dissensus.pipeline.engine import decide_case_events
        from dissensus.pipeline.executors import prefetched
        from dissensus.pipeline.runtime import Runtime
        from dissensus.store.canonical import canonical
        from dissensus.store.journal import Journal

        cpu = time.process_time()
        block = _block_of(item["block"])
        _maybe_die(self.fault, block.index)
        self._allow(item["allowance"], item.get("reservation"))
        memory = Journal(":memory:")
        memory.create_run(self.run_id, kind="decide", meta={})
        for event in (*self.journalled, *item["seed"]):
            memory.append(
                self.run_id, event["type"], event["payload"], key=event["key"], case=event["case"]
            )
        rt = Runtime(
            self.spec,
            memory,
            self.run_id,
            backend_factory=self.backend,
            client_factory=self.client,  # the worker's clients, on the block's allowance
            stop_at=_loop_deadline(item.get("deadline")),
            monitor=self.monitor,  # the driver's: this journal holds no audit
        )
        parsed = (
            (parse_line(Panel, text, file=item["name"], line=number), number)
            for number, text in block_lines(block)
            if not blank_line(text, number)
        )
        cases: list[_CaseResult] = []
        charges: list[_Charge] = []
        # What each case charges matters to a block with a reservation only (abandon).
        charging = item.get("reservation") is not None
        seeded = {e["key"] for e in item["seed"] if e["type"] in _SPEND_EVENTS}
        unsent = list(self.suspensions)
        window: list[tuple[int, asyncio.Task[Any]]] = []

        async def settle(number: int, task: asyncio.Task[Any]) -> None:
            record, pending = await task
            # A suspension a case journalled (run-wide, as a local run journals it before
            # the case's own events), then what the case wrote before its model calls,
            # and the calls (journalled in the throw-away journal), then the rest of its
            # events, never journalled here.
            # Each payload travels as its canonical text only, made here on the worker:
            # the driver stores and hashes it as it is and parses it once.
            written = (
                *_journalled(memory, self.run_id, unsent),
                *memory.events(self.run_id, case=str(number)),
                *pending,
            )
            events: list[_EventText] = [
                (e.key, e.type, e.case, canonical(e.payload)) for e in written
            ]
            # The record travels as its event's payload when it is that payload (as it
            # is, unless a replayed record's dump differs), not a second time.
            dump = record.model_dump(mode="json")
            key = f"case/{number}/record"
            same = any(e.key == key and e.payload == dump for e in written)
            cases.append(_CaseResult(number, None if same else dump, None, events))
            if charging:
                attempts, tokens = _case_charge(written, seeded)
                if attempts or tokens:
                    charges.append(_Charge(number, attempts, tokens))

        late = False
        try:
            for panel, number in prefetched(rt, parsed):
                if isinstance(panel, Reject):
                    cases.append(_CaseResult(number, None, panel.model_dump(mode="json"), []))
                    continue
                window.append((number, asyncio.create_task(decide_case_events(rt, panel, number))))
                if len(window) >= self.policy.concurrency:
                    await settle(*window.pop(0))
            while window:
                await settle(*window.pop(0))
        except PastDeadline:  # an attempt would have started after the run's deadline
            late = True
            cases, charges = [], []
        finally:
            for _, task in window:
                task.cancel()
            memory.close()
        cases.sort(key=lambda c: c.line)  # rejects were listed before cases in flight
        spent = self.budget.spent
        return _BlockResult(
            block.index,
            cases,
            _rss_mb(),
            time.process_time() - cpu,
            spent.attempts,
            spent.total_tokens,
            tuple(sorted(charges)),
            late,
        )


def _journalled(journal: Any, run_id: str, keys: list[str]) -> list[Any]:
    """The events of ``keys`` that ``journal`` holds now, taken out of ``keys`` (each is
    handed back once per block)."""
    found = [e for e in (journal.get(run_id, key) for key in keys) if e is not None]
    for event in found:
        keys.remove(event.key)
    return found


class _DecideWorker:
    """A :class:`_Decider` as a Ray actor. Its methods are synchronous (Ray would make an
    actor with a coroutine method an asyncio actor, whose loop is already running when
    the decider runs its own)."""

    def __init__(self, *args: Any) -> None:
        self.decider = _Decider(*args)

    def decide(self, raw: str) -> bytes:
        return self.decider.decide(raw)

    def stop(self) -> _Stopped:
        return self.decider.stop()


_KEPT_BUDGETS = 4
"""Budgets of the last blocks a worker started that it keeps for :meth:`_Decider.stop`
(the driver has at most :data:`_DEPTH` blocks in flight on a worker)."""


def _restarted_here() -> bool:
    """Whether Ray restarted the worker this runs in (unknown: True)."""
    try:
        return bool(_ray().get_runtime_context().was_current_actor_reconstructed)
    except Exception:
        return True
