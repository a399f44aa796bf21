"""The non-journalled endpoints as calls into the library: route, vote, negotiate, verify, bound.

Each function is what the CLI command of the same name does for one request, on the
same models, returning the same JSON (``--json``) records; the CLI's own formatting
helpers are not imported (nothing imports the CLI), and a test pins that the records
are identical. ``route``, ``negotiate`` and ``verify`` are :mod:`dissensus.calls`', the
copy the MCP server calls too, with the service's :class:`~dissensus.calls.DoorOptions`
(no function agents, at most ``--max-agents`` agents), so the two doors refuse the same
mistake with the same field and message.

Choices this module makes (all about what a remote caller may make the
server do):

* ``route`` uses the default routing rules (``dissensus route`` without ``--rules``) and
  the server policy's similarity backend unless the request names ``tfidf`` or
  ``minilm``; ``module:function`` backends are refused (they import code). Its
  thresholds are the request's, else the policy's (:func:`route_thresholds`: the
  policy's ``theta_s`` only with the policy's backend, by the one rule every door's
  similarity override follows, :meth:`~dissensus.pipeline.policy.ReadingSettings.with_similarity`).
* ``negotiate`` runs table and LLM agents only: function agents name Python code to
  import and are refused with their field (``agents.N.kind``); a ``model`` in the
  problem is refused too
  (it could name a file on the server); LLM agents use ``$DISSENSUS_MODEL`` of the
  server, within its budgets.
* ``vote`` takes its calibration from the server policy's ``guard.calibration``.
* ``negotiate`` takes at most the server's agents per panel (``--max-agents``); its
  problem is parsed in a worker thread. Its deadline is a finite number of seconds, at
  least 0, as ``negotiate --deadline`` requires: the certificate records it, and JSON
  holds no infinity. The negotiation is bounded by its deadline and the model's budgets.
* **The negotiation runs off the server's loop**: in a worker thread, on an event loop
  of its own (:func:`~dissensus.agents.off_loop.negotiate_off_loop`, as the MCP
  ``negotiate`` tool's; the model client, when there are LLM agents, is made and closed
  there too). Table agents answer without ever waiting, and each call's view
  holds every candidate's scores, so a large problem is seconds of CPU between two
  awaits: on the server's loop it held ``/healthz`` and every other request, and its
  own ``--timeout``, until it yielded. A caller that stops waiting (the request's
  ``--timeout``, a client gone, the server shutting down) cancels the negotiation
  (:meth:`~dissensus.concord.protocol.Negotiation.cancel`, thread-safe): a thread cannot
  be killed, so the run stops at its next agent call (at most one call's work later)
  and its certificate, ``cancelled``, is dropped. The caller does not wait for the thread
  to end; its answer (504) is not delayed by it.
"""

from __future__ import annotations

from dissensus import calls
from dissensus.calls import TooManyAgents
from dissensus.concord.bounds import Bound, compute_bound
from dissensus.concord.record import Certificate
from dissensus.concord.verify import Verdict
from dissensus.errors import ConfigError
from dissensus.guard import GuardThresholds, ReliabilityFit, guard_case
from dissensus.guard.decision import GuardDecision
from dissensus.io.limits import MAX_AGENTS
from dissensus.outputs import RouteRecord
from dissensus.pipeline.policy import ReadingSettings
from dissensus.states.similarity import SimilarityBackend, backend_key, get_backend
from dissensus.types import JsonObject, Panel, VoteCase

__all__ = [
    "ROUTE_BACKENDS",
    "TooManyAgents",
    "bound",
    "negotiate",
    "route",
    "route_thresholds",
    "verify",
    "vote",
]


ROUTE_BACKENDS = ("tfidf", "minilm")
"""Similarity backends a request may name."""


_BACKENDS: dict[str, SimilarityBackend] = {}


def backend_for(name: str) -> SimilarityBackend:
    """A shared instance of a named backend (any name of ``tfidf`` or ``minilm``)."""
    calls.refuse_code_backend(name)
    name = backend_key(name) if backend_key(name) in ROUTE_BACKENDS else name
    if name not in ROUTE_BACKENDS:
        raise ConfigError(
            f"unknown similarity backend {name!r}; expected one of {', '.join(ROUTE_BACKENDS)}",
            field="similarity",
        )
    if name not in _BACKENDS:
        _BACKENDS[name] = get_backend(name)
    return _BACKENDS[name]


def route_thresholds(
    reading: ReadingSettings, backend: str, *, theta_s: float | None, theta_a: float | None
) -> tuple[float | None, float]:
    """The thresholds a route request reads with: the request's, else the policy's read
    with ``backend`` (:meth:`~dissensus.pipeline.policy.ReadingSettings.with_similarity`,
    the rule ``decide --similarity`` follows: ``theta_s`` only when the request reads
    with the policy's backend, a similarity threshold being the backend's own; otherwise
    that backend's calibrated default)."""
    read = reading.with_similarity(backend)
    return (
        read.theta_s if theta_s is None else theta_s,
        read.theta_a if theta_a is None else theta_a,
    )


def route(
    panels: list[Panel], backend: SimilarityBackend, *, theta_s: float | None, theta_a: float | None
) -> list[RouteRecord]:
    """Read and route panels with the default rules (``dissensus route --json``;
    :func:`dissensus.calls.route`)."""
    return calls.route(panels, backend, theta_s=theta_s, theta_a=theta_a)


def vote(
    cases: list[VoteCase],
    calibration: ReliabilityFit | None,
    *,
    beta: float,
    strict: bool,
    verifier: str | None,
    settings: GuardThresholds,
) -> list[GuardDecision]:
    """Guarded decisions (``dissensus vote --json``); a strict refusal raises."""
    return [
        guard_case(c, calibration, beta=beta, strict=strict, verifier=verifier, settings=settings)
        for c in cases
    ]


async def negotiate(
    data: object, *, deadline: float | None, rule: str | None, max_agents: int = MAX_AGENTS
) -> Certificate:
    """Run CONCORD on a problem document (``dissensus negotiate --json``), with at most
    ``max_agents`` agents (413) and no function agents (:func:`dissensus.calls.negotiate`)."""
    options = calls.DoorOptions(allow_functions=False, max_agents=max_agents)
    return await calls.negotiate(data, deadline=deadline, rule=rule, options=options)


def verify(data: JsonObject) -> Verdict:
    """Recompute a certificate (``dissensus verify --json``); accepts ``negotiate --compare``
    output (:func:`dissensus.calls.verify`)."""
    return calls.verify(data)


def bound(agents: int, rounds: int) -> Bound:
    """The CONCORD cost bound (``dissensus bound --json``)."""
    return compute_bound(agents, rounds)
