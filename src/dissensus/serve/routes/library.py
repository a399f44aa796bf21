"""The library calls over HTTP: route, vote, negotiate, verify, bound
(:mod:`dissensus.serve.library_calls`, each the CLI command of the same name).

Choices this module makes:

* Every number in a query is finite: ``inf``, ``nan`` and ``1e309`` (which reads as
  infinity) are 422 naming the parameter, as the CLI refuses them in its options (an
  infinite ``deadline`` would otherwise reach the certificate, which JSON cannot hold).
* ``vote``'s ``verifier`` names an agent the way ``dissensus vote --verifier`` does: a
  name that did not vote in a case is not an error (one name serves a whole list of
  cases, whose voters differ); that case falls back to the unweighted majority and its
  ``reason`` says "verifier NAME did not vote".
* ``bound`` takes 1 to :data:`~dissensus.concord.controls.MAX_AGENTS` agents and 0 to
  :data:`~dissensus.concord.controls.MAX_ROUNDS` rounds, the ranges of ``dissensus bound``
  and the MCP tool ``bound`` (one source of the limits); outside them it is 422 naming
  the parameter.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool

from dissensus.concord.bounds import Bound
from dissensus.concord.controls import MAX_AGENTS, MAX_ROUNDS
from dissensus.concord.record import Certificate
from dissensus.concord.verify import Verdict
from dissensus.guard import GuardThresholds
from dissensus.guard.decision import GuardDecision
from dissensus.outputs import RouteRecord
from dissensus.serve import library_calls
from dissensus.serve.api_schema import AUTHED, BODY, RouteAnswer, VoteAnswer, answer, refusals
from dissensus.serve.auth import Principal
from dissensus.serve.http import (
    PANELS_BODY,
    ApiError,
    checked,
    items_of,
    json_body,
    known_query,
    limits_of,
    refuse_overrun,
    require,
    service_of,
    single_or_422,
    with_overruns,
)
from dissensus.types import Panel, VoteCase

__all__ = ["router"]

router = APIRouter(dependencies=[Depends(known_query)])
submit = Depends(require("submit"))
review = Depends(require("review"))


@router.post(
    "/v1/route",
    tags=["library"],
    openapi_extra=PANELS_BODY,
    responses={
        **refusals(*AUTHED, *BODY, 504),
        200: answer(
            RouteRecord | RouteAnswer,
            "One panel: its route record (as `dissensus route --json`); a list: the "
            "records and the rejected items.",
        ),
    },
)
async def route(
    request: Request,
    _: Principal = submit,
    similarity: str | None = Query(None, description="tfidf or minilm (default: the policy's)."),
    theta_s: float | None = Query(
        None,
        ge=-1.0,
        le=1.0,
        allow_inf_nan=False,
        description="Default: the policy's, when the backend is the policy's; else the "
        "backend's calibrated default.",
    ),
    theta_a: float | None = Query(
        None, gt=0.0, le=1.0, allow_inf_nan=False, description="Default: the policy's."
    ),
) -> Any:
    """Read and route panels with the default rules (``dissensus route --json``)."""
    service = service_of(request)
    items, single = items_of(await json_body(request), service.settings.max_panels, "panel")
    good, rejects, overruns = await run_in_threadpool(checked, Panel, items, limits_of(service))
    if single:
        refuse_overrun(overruns, single=True)
        single_or_422(rejects)
    rejects = with_overruns(rejects, overruns)
    reading = service.policy.reading
    backend = library_calls.backend_for(similarity or reading.similarity)
    theta_s, theta_a = library_calls.route_thresholds(
        reading, backend.name, theta_s=theta_s, theta_a=theta_a
    )
    records = (
        await run_in_threadpool(
            library_calls.route,
            [p for _, p in good],
            backend,
            theta_s=theta_s,
            theta_a=theta_a,
        )
        if good
        else []
    )
    if single:
        return records[0]
    return {"records": records, "rejects": rejects, "rejected": len(rejects)}


@router.post(
    "/v1/vote",
    tags=["library"],
    responses={
        **refusals(*AUTHED, *BODY, 409, 504, said={409: "A strict vote refusal."}),
        200: answer(
            GuardDecision | VoteAnswer,
            "One vote case: its guarded decision (as `dissensus vote --json`); a list: "
            "the decisions and the rejected items.",
        ),
    },
)
async def vote(
    request: Request,
    _: Principal = submit,
    beta: float = Query(1.5, ge=0.0, allow_inf_nan=False),
    strict: bool = Query(False),
    verifier: str | None = Query(None),
    decompose: bool = Query(True),
    max_fallback_agreement: float = Query(0.85, ge=0.0, le=1.0, allow_inf_nan=False),
) -> Any:
    """Guarded decisions of vote cases (``dissensus vote --json``)."""
    service = service_of(request)
    items, single = items_of(await json_body(request), service.settings.max_panels, "vote case")
    good, rejects, overruns = await run_in_threadpool(checked, VoteCase, items, limits_of(service))
    if single:
        refuse_overrun(overruns, single=True)
        single_or_422(rejects)
    rejects = with_overruns(rejects, overruns)
    settings = GuardThresholds(max_fallback_agreement=max_fallback_agreement, decompose=decompose)
    decisions = await run_in_threadpool(
        library_calls.vote,
        [c for _, c in good],
        service.guard_calibration,
        beta=beta,
        strict=strict,
        verifier=verifier,
        settings=settings,
    )
    out = [d.model_dump(mode="json") for d in decisions]
    if single:
        return out[0]
    return {"decisions": out, "rejects": rejects, "rejected": len(rejects)}


@router.post(
    "/v1/negotiate",
    tags=["library"],
    responses={
        **refusals(*AUTHED, *BODY, 504),
        200: answer(Certificate, "The CONCORD certificate (`dissensus negotiate --json`)."),
    },
)
async def negotiate(
    request: Request,
    _: Principal = submit,
    deadline: float | None = Query(
        None, ge=0.0, allow_inf_nan=False, description="Seconds (finite, at least 0)."
    ),
    rule: str | None = Query(None),
) -> Any:
    """Negotiate with CONCORD on a problem document (``dissensus negotiate --json``)."""
    body = await json_body(request)
    cert = await library_calls.negotiate(
        body, deadline=deadline, rule=rule, max_agents=service_of(request).settings.max_agents
    )
    return cert.model_dump(mode="json")


@router.post(
    "/v1/verify",
    tags=["library"],
    responses={
        **refusals(*AUTHED, *BODY, 504),
        200: answer(Verdict, "The certificate recomputed (`dissensus verify --json`)."),
    },
)
async def verify(request: Request, _: Principal = submit) -> Any:
    """Recompute a CONCORD certificate (``valid`` false names the first violated property)."""
    body = await json_body(request)
    if not isinstance(body, dict):
        raise ApiError(422, "a certificate is a JSON object", "<root>")
    verdict = await run_in_threadpool(library_calls.verify, body)
    return verdict.model_dump(mode="json")


@router.get(
    "/v1/bound",
    tags=["library"],
    response_model=Bound,
    responses=refusals(*AUTHED, 422, 504),
)
async def bound(
    _: Principal = submit,
    agents: int = Query(
        ..., ge=1, le=MAX_AGENTS, description=f"Negotiating agents (1 to {MAX_AGENTS})."
    ),
    rounds: int = Query(
        ..., ge=0, le=MAX_ROUNDS, description=f"Repair rounds (0 to {MAX_ROUNDS})."
    ),
) -> Bound:
    """The worst-case cost of a CONCORD run (``dissensus bound --json``), for the agents and
    rounds ``dissensus bound`` and a problem file take (422 naming the parameter outside them)."""
    return await run_in_threadpool(library_calls.bound, agents, rounds)
