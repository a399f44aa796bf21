"""A CONCORD negotiation off the caller's event loop, for the servers (``dissensus serve``'s
``POST /v1/negotiate``, the MCP ``negotiate`` tool).

Table agents answer without ever waiting, and each call's view holds every candidate's
scores, so a large problem is seconds of CPU between two awaits: on a server's loop it
held every other request of that server until it yielded. :func:`negotiate_off_loop`
runs the negotiation in a worker thread, on an event loop of its own
(:func:`asyncio.run`); the model client, when there are LLM agents, is made and closed
there too. The agents are built there as well (:func:`~dissensus.agents.assembly.build_agents`).

Choices this module makes:

* **A caller that stops waiting** (its task cancelled: a request's timeout, a client
  gone or cancelling, the server shutting down) cancels the negotiation
  (:meth:`~dissensus.concord.protocol.Negotiation.cancel`, thread-safe), even before
  it has started: a thread cannot be killed, so the run stops at its next agent call
  (at most one call's work later) and its certificate, ``cancelled``, is dropped. The
  caller does not wait for the thread to end: its cancellation is not delayed by it.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from dissensus.agents.assembly import build_agents
from dissensus.concord.problem import Problem, negotiation_for
from dissensus.concord.protocol import Negotiation
from dissensus.concord.record import Certificate
from dissensus.concord.rules import SelectionRule

if TYPE_CHECKING:
    from dissensus.llm import ModelClient

__all__ = ["negotiate_off_loop"]


async def negotiate_off_loop(
    problem: Problem,
    *,
    model: str | None,
    deadline: float | None,
    rule: SelectionRule | None,
    base_dir: str | Path | None = None,
    threaded: bool = False,
) -> Certificate:
    """Run CONCORD on ``problem`` in a worker thread; LLM agents use the model ``model``
    (a spec, resolved there). ``base_dir`` and ``threaded`` are
    :func:`~dissensus.agents.assembly.build_agents`'. Cancelling the awaiting task
    cancels the negotiation."""
    stop = _Stop()
    run = _Run(problem, model, deadline, rule, base_dir, threaded, stop)
    try:
        return await asyncio.to_thread(run.in_thread)
    finally:  # the caller stopped waiting (or the run ended): stop the run at its next call
        stop.cancel()


class _Stop:
    """A cancellation handed to a negotiation running in another thread, which may be
    requested before the negotiation exists (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._run: Negotiation | None = None

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._run is not None:
                self._run.cancel()

    def attach(self, run: Negotiation) -> None:
        """Hand cancellations to ``run`` (one requested already is handed at once)."""
        with self._lock:
            self._run = run
            if self._cancelled:
                run.cancel()

    def detach(self) -> None:
        """The run ended: a later cancellation has nothing to stop."""
        with self._lock:
            self._run = None


class _Run:
    """One negotiation's arguments, run on an event loop of the (worker) thread."""

    def __init__(
        self,
        problem: Problem,
        model: str | None,
        deadline: float | None,
        rule: SelectionRule | None,
        base_dir: str | Path | None,
        threaded: bool,
        stop: _Stop,
    ) -> None:
        self.problem, self.model, self.deadline, self.rule = problem, model, deadline, rule
        self.base_dir, self.threaded, self.stop = base_dir, threaded, stop

    def in_thread(self) -> Certificate:
        return asyncio.run(self._negotiate())

    async def _negotiate(self) -> Certificate:
        client: ModelClient | None = None
        if self.model is not None:
            from dissensus.llm import resolve_model

            client = resolve_model(self.model)
        try:
            agents = build_agents(
                self.problem, base_dir=self.base_dir, client=client, threaded=self.threaded
            )
            run = negotiation_for(self.problem, agents, deadline_s=self.deadline, rule=self.rule)
            self.stop.attach(run)
            try:
                return await run.run()
            finally:
                self.stop.detach()
        finally:
            if client is not None:
                await client.aclose()
