"""What ``POST /v1/decide`` spends per request beyond the decision: a plain request (no
query string) is answered without the framework's dependency solving, the same as the
documented route answers it; a policy without a shift-checked acceptance file asks the
journal nothing about a run's shift; an address is read only when some check failed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fastapi.routing
import pytest
from starlette.requests import HTTPConnection

from dissensus.serve import origin, throttle
from dissensus.serve.throttle import FailedLogins
from dissensus.store.journal import Journal
from pipeline_cases import panel
from serve_helpers import auth, client_for, settings


def _solves(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths whose request went through FastAPI's dependency solving."""
    seen: list[str] = []
    solve = fastapi.routing.solve_dependencies

    async def counted(*args: Any, **kwargs: Any) -> Any:
        request = kwargs.get("request", args[0] if args else None)
        seen.append(str(request.url.path) if request is not None else "?")
        return await solve(*args, **kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counted)
    return seen


@pytest.mark.anyio
async def test_a_plain_decide_skips_dependency_solving_and_answers_as_the_route_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    solved = _solves(monkeypatch)
    one = panel("p1", ["1", "1", "1"])
    async with client_for(settings(tmp_path)) as client:
        plain = await client.post("/v1/decide", json=one, headers=auth("sub"))
        assert solved == []
        documented = await client.post(
            "/v1/decide?async=false", json={**one, "id": "p2"}, headers=auth("sub")
        )
        assert solved == ["/v1/decide"]
        assert plain.status_code == documented.status_code == 200
        assert plain.headers["content-type"] == documented.headers["content-type"]
        assert plain.headers["cache-control"] == "no-store"
        a, b = plain.json(), documented.json()
        assert a["id"] == "p1" and b["id"] == "p2"
        same = {k for k in a if k not in ("id", "line", "at", "review_id")}
        assert {k: a[k] for k in same if k in b} == {k: b[k] for k in same if k in b}
        assert plain.headers["x-dissensus-run"] != documented.headers["x-dissensus-run"]
        # The refusals are the documented route's, in the same order and words.
        none = await client.post("/v1/decide", json=one)
        assert none.status_code == 401 and none.headers["www-authenticate"] == "Bearer"
        role = await client.post("/v1/decide", json=one, headers=auth("rev"))
        assert role.status_code == 403 and role.json()["field"] == "Authorization"
        bad = await client.post(
            "/v1/decide", content=b"{", headers={**auth("sub"), "content-type": "application/json"}
        )
        assert bad.status_code == 400 and bad.json()["field"] == "<json>"
        # Another method is the documented route's 405, naming what the path takes.
        wrong = await client.get("/v1/decide", headers=auth("sub"))
        assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
        # A query string goes to the documented route, which checks it.
        unknown = await client.post("/v1/decide?asnyc=true", json=one, headers=auth("sub"))
        assert unknown.status_code == 422 and unknown.json()["field"] == "asnyc"
        # The schema documents the one route.
        schema = (await client.get("/openapi.json")).json()
        assert list(schema["paths"]["/v1/decide"]) == ["post"]


@pytest.mark.anyio
async def test_the_plain_route_stands_for_the_route_the_app_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain request's ``route`` is the route the app gives a request with a query
    string, and where FastAPI copies an included router's routes into the app, that copy
    (the router's own route was taken, which the app does not serve)."""
    import httpx
    from fastapi import FastAPI

    from dissensus.serve import create_app
    from dissensus.serve.routes import decide as decide_routes

    given: list[object] = []
    service_of = decide_routes.service_of

    def spied(request: Any) -> Any:
        given.append(request.scope["route"])
        return service_of(request)

    monkeypatch.setattr(decide_routes, "service_of", spied)
    served = create_app(settings(tmp_path))
    transport = httpx.ASGITransport(app=served)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        for path, pid in (("/v1/decide?async=false", "p1"), ("/v1/decide", "p2")):
            res = await client.post(path, json=panel(pid, ["1", "1"]), headers=auth("sub"))
            assert res.status_code == 200, res.text
    plain = served.router.routes[0]
    assert isinstance(plain, decide_routes._PlainDecide)
    assert given and all(route is plain.documented for route in given)
    # A FastAPI that copies the routes of a router it includes into the app.
    app = FastAPI()
    original = next(
        r for r in decide_routes.router.routes if getattr(r, "path", "") == "/v1/decide"
    )
    assert isinstance(original, fastapi.routing.APIRoute)
    copy = fastapi.routing.APIRoute(original.path, original.endpoint, methods=["POST"])
    app.router.routes.append(copy)
    decide_routes.install_plain(app)
    installed = app.router.routes[0]
    assert isinstance(installed, decide_routes._PlainDecide) and installed.documented is copy


@pytest.mark.anyio
async def test_a_run_without_a_shift_checked_acceptance_file_asks_no_shift(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    get = Journal.get

    def spied(self: Journal, run_id: str, key: str) -> Any:
        asked.append(key)
        return get(self, run_id, key)

    monkeypatch.setattr(Journal, "get", spied)
    async with client_for(settings(tmp_path)) as client:
        res = await client.post(
            "/v1/decide", json=panel("p1", ["1", "1", "1"]), headers=auth("sub")
        )
        assert res.status_code == 200, res.text
        run = await client.post(
            "/v1/decide", json=[panel("p2", ["1", "1", "1"])], headers=auth("sub")
        )
        assert run.status_code == 200 and json.loads(run.text)["shift"] is None
    assert "run/shift" not in asked


def test_no_failed_check_reads_no_address(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    logins = FailedLogins(3, clock=lambda: now[0])

    def unread(host: str | None) -> str:
        raise AssertionError(f"address {host} read")

    monkeypatch.setattr(throttle, "address_key", unread)
    assert logins.retry_after("127.0.0.1") is None
    monkeypatch.undo()
    for _ in range(3):
        logins.failed("127.0.0.1")
    assert logins.retry_after("127.0.0.1") is not None
    assert logins.retry_after("127.0.0.2") is None
    now[0] += throttle.WINDOW_S + 1  # the failures leave the window: the address is forgotten
    assert logins.retry_after("127.0.0.1") is None
    assert len(logins) == 0


@pytest.mark.anyio
async def test_a_bearer_request_reads_its_address_only_when_some_check_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's address was read on every request with a bearer token; only its
    parsing was skipped while no check had failed."""
    from dissensus.serve import service as service_module

    read: list[str | None] = []
    peer_of = throttle.peer_of

    def counted(scope: Any) -> str | None:
        read.append(peer := peer_of(scope))
        return peer

    monkeypatch.setattr(service_module, "peer_of", counted)
    async with client_for(settings(tmp_path)) as client:
        for _ in range(2):
            assert (await client.get("/v1/runs?limit=1", headers=auth("sub"))).status_code == 200
        assert read == []
        assert (await client.get("/v1/runs?limit=1", headers=auth("guess"))).status_code == 401
        assert len(read) == 1  # the failure is counted under the address
        assert (await client.get("/v1/runs?limit=1", headers=auth("sub"))).status_code == 200
        assert len(read) == 2 and read[0] == read[1]  # a failure lately: the address is read


@pytest.mark.anyio
async def test_a_plain_decide_parses_no_empty_query_and_no_bare_content_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unparsed(self: HTTPConnection) -> Any:
        raise AssertionError("the query was parsed")

    class NoParser:
        def __init__(self) -> None:
            raise AssertionError("the Content-Type was parsed")

    async with client_for(settings(tmp_path)) as client:
        with monkeypatch.context() as patched:
            patched.setattr(HTTPConnection, "query_params", property(unparsed))
            patched.setattr(origin, "Message", NoParser)
            res = await client.post(
                "/v1/decide", json=panel("p1", ["1", "1", "1"]), headers=auth("sub")
            )
            assert res.status_code == 200, res.text
        # A Content-Type with parameters is still read by the parser, quotes and all.
        for value, status in [
            ("application/json; charset=utf-8", 200),
            ('application/json; x=";charset=latin1"', 200),
            ("application/json; charset=latin1", 415),
            ("application/json; charset=utf-8; charset=utf-8", 415),
        ]:
            res = await client.post(
                "/v1/decide",
                content=json.dumps(panel(f"p-{status}-{len(value)}", ["1", "1", "1"])),
                headers={**auth("sub"), "content-type": value},
            )
            assert res.status_code == status, (value, res.text)
