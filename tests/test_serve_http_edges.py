"""HTTP edges of the service, through the real app: the error shape of the refusals made
outside the routes (middleware, route matching) on the OpenAI-compatible paths, a body
still arriving at the request timeout, a 405's ``Allow`` header, bodies that are not
UTF-8, and the trailing-slash redirect (its ``Location`` relative: it was built from
the ``Host`` header, port included)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dissensus.serve import create_app
from dissensus.serve.http import ApiError, parse_json
from dissensus.serve.slashes import other_spelling
from pipeline_cases import panel
from serve_helpers import auth, client_for, escalating, heap_frozen, settings

pytestmark = pytest.mark.anyio

CHAT = "/v1/chat/completions"
ASK = {"model": "dissensus-panel", "messages": [{"role": "user", "content": "2+2?"}]}
VOTE_CASE = {
    "id": "q1",
    "votes": [
        {"agent": a, "answer": ans, "evidence_source": "wiki", "evidence_present": True}
        for a, ans in (("a", "yes"), ("b", "yes"), ("c", "no"))
    ],
}


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


def _openai_error(res: httpx.Response, status: int, type_: str, code: str) -> dict[str, Any]:
    """The OpenAI error object of ``res``, checked for status, shape, type and code."""
    assert res.status_code == status, res.text
    assert res.headers["content-type"].startswith("application/json")
    body = res.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) >= {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"]
    assert (error["type"], error["code"]) == (type_, code), error
    return dict(error)


def _service_error(res: httpx.Response, status: int) -> dict[str, Any]:
    assert res.status_code == status, res.text
    body = res.json()
    assert set(body) >= {"error", "field"} and isinstance(body["error"], str), body
    return dict(body)


# -- the rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/chat/completions", True),
        ("/v1/chat/nothing", True),
        ("/v1/models", True),
        ("/v1/models/dissensus-panel", True),
        ("/v1/cases/4f2a9c1e0b7d.1", True),
        ("/v1/cases/4f2a9c1e0b7d.1/confirm", False),  # a review endpoint
        ("/v1/cases/", True),  # no endpoint: the door's 404
        ("/v1/cases/a/b", True),
        ("/v1/cases/../../etc/passwd", True),  # ..%2F..%2Fetc%2Fpasswd, decoded
        ("/v1/cases/a/b/confirm", True),
        ("/v1/cases//confirm", True),
        ("/v1/cases/a/confirm/x", True),
        ("/v1/cases", False),
        ("/v1/casesx/a", False),
        ("/v1/decide", False),
        ("/v1/runs", False),
        ("/v1/modelsx", False),
        ("/v1/chatter", False),
        ("/healthz", False),
        ("/", False),
    ],
)
def test_openai_path_names_the_openai_compatible_endpoints(path: str, expected: bool) -> None:
    from dissensus.serve.limits import openai_path

    assert openai_path(path) is expected


# -- refusals outside the chat route on its paths are OpenAI's -------------------------------


async def test_content_type_refusal_on_a_chat_path_is_openai_shaped(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        plain = {**auth("sub"), "Content-Type": "text/plain"}
        res = await client.post(CHAT, headers=plain, content=json.dumps(ASK))
        error = _openai_error(res, 415, "invalid_request_error", "unsupported_media_type")
        assert error["param"] == "Content-Type"
        # No Content-Type at all, with a body.
        res = await client.post(CHAT, headers=auth("sub"), content=json.dumps(ASK).encode())
        _openai_error(res, 415, "invalid_request_error", "unsupported_media_type")
        # Elsewhere the service keeps its own shape.
        res = await client.post("/v1/decide", headers=plain, content=b"{}")
        assert _service_error(res, 415)["field"] == "Content-Type"


async def test_host_and_origin_refusals_on_chat_paths_are_openai_shaped(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        res = await client.get("/v1/models", headers={**auth("sub"), "Host": "attacker.example"})
        error = _openai_error(res, 403, "permission_error", "forbidden_host")
        assert error["param"] == "Host"
        res = await client.post(
            CHAT, headers={**auth("sub"), "Origin": "https://evil.example"}, json=ASK
        )
        error = _openai_error(res, 403, "permission_error", "forbidden_origin")
        assert error["param"] == "Origin" and "cross-origin" in error["message"]
        res = await client.get(
            "/v1/cases/abc.1", headers={**auth("sub"), "Host": "attacker.example"}
        )
        _openai_error(res, 403, "permission_error", "forbidden_host")
        # The review endpoint under /v1/cases keeps the service's shape.
        res = await client.post(
            "/v1/cases/abc.1/confirm",
            headers={**auth("rev"), "Origin": "https://evil.example"},
            json={"note": "n"},
        )
        assert _service_error(res, 403)["field"] == "Origin"


async def test_body_size_refusals_on_a_chat_path_are_openai_shaped(tmp_path: Path) -> None:
    big = {**ASK, "messages": [{"role": "user", "content": "x" * 3000}]}

    async def chunks() -> AsyncIterator[bytes]:
        data = json.dumps(big).encode()
        for i in range(0, len(data), 256):
            yield data[i : i + 256]

    async with client_for(settings(tmp_path, max_body_bytes=1024)) as client:
        res = await client.post(CHAT, headers=auth("sub"), json=big)  # Content-Length
        error = _openai_error(res, 413, "invalid_request_error", "request_too_large")
        assert error["param"] == "<body>"
        chunked = {**auth("sub"), "Content-Type": "application/json"}
        res = await client.post(CHAT, headers=chunked, content=chunks())
        assert "content-length" not in res.request.headers
        error = _openai_error(res, 413, "invalid_request_error", "request_too_large")
        assert error["param"] == "<body>"
        res = await client.post("/v1/decide", headers=chunked, content=chunks())
        assert _service_error(res, 413)["field"] == "<body>"


async def test_route_matching_refusals_on_chat_paths_are_openai_shaped(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        res = await client.get(CHAT, headers=auth("sub"))
        _openai_error(res, 405, "invalid_request_error", "method_not_allowed")
        res = await client.delete("/v1/models", headers=auth("sub"))
        _openai_error(res, 405, "invalid_request_error", "method_not_allowed")
        res = await client.get("/v1/chat/complete", headers=auth("sub"))
        error = _openai_error(res, 404, "invalid_request_error", "not_found")
        assert error["param"] is None
        # A model not listed: OpenAI's answer to an unknown model.
        res = await client.get("/v1/models/gpt-4o", headers=auth("sub"))
        error = _openai_error(res, 404, "invalid_request_error", "model_not_found")
        assert error["param"] == "model"
        res = await client.delete("/v1/models/dissensus-panel", headers=auth("sub"))
        _openai_error(res, 405, "invalid_request_error", "method_not_allowed")
        res = await client.get("/v1/nothing-here", headers=auth("adm"))
        assert set(_service_error(res, 404)) == {"error", "field"}


async def test_every_unmatched_path_under_v1_cases_is_an_openai_404(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        for path in (
            "/v1/cases/a/b",
            "/v1/cases/..%2F..%2Fetc%2Fpasswd",
            "/v1/cases/a%2Fb/confirm",
            "/v1/cases/abc.1/confirm/more",
            "/v1/cases/",
        ):
            for token in ("sub", "rev"):
                res = await client.get(path, headers=auth(token))
                error = _openai_error(res, 404, "invalid_request_error", "not_found")
                assert error["param"] is None, path
        # A wrong method on one: the door's 405 too.
        res = await client.delete("/v1/cases/abc.1", headers=auth("sub"))
        _openai_error(res, 405, "invalid_request_error", "method_not_allowed")
        # The review endpoint under /v1/cases keeps the service's shape.
        res = await client.get("/v1/cases/abc.1/confirm", headers=auth("rev"))
        assert set(_service_error(res, 405)) == {"error", "field"}
        res = await client.post("/v1/cases/abc.1/confirm", headers=auth("rev"), json={"note": "n"})
        assert set(_service_error(res, 404)) == {"error", "field"}


async def test_timeout_on_a_chat_path_is_an_openai_504(tmp_path: Path) -> None:
    """The body has all arrived; the answer is late: 504 (``server_error``)."""
    app = create_app(settings(tmp_path, request_timeout_s=0.3))

    async def slow(body: Any, **_: Any) -> Any:
        await asyncio.sleep(30)

    app.state.chat.check = lambda body: body  # no panel configured: let the request through
    app.state.chat.acomplete = slow
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        res = await client.post(CHAT, headers=auth("sub"), json=ASK)
    error = _openai_error(res, 504, "server_error", "timeout")
    assert "longer than 0.3 s" in error["message"]


# -- a body still arriving at the timeout is a 408 on every path -------------------------------


async def _trickle(
    app: Any, path: str, body: bytes, sent: int, *, timeout: float = 30
) -> tuple[list[dict[str, Any]], float]:
    """Call ``app`` raw: ``sent`` bytes of ``body`` arrive, the rest never does.
    The messages the app sent and the seconds it took."""
    stall = asyncio.Event()
    given: list[bytes] = []

    async def receive() -> dict[str, Any]:
        if not given:
            given.append(body[:sent])
            return {"type": "http.request", "body": body[:sent], "more_body": True}
        await stall.wait()  # the rest never comes
        return {"type": "http.disconnect"}

    out: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        out.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"authorization", b"Bearer tok-sub"),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    start = time.monotonic()
    await asyncio.wait_for(app(scope, receive, send), timeout)
    stall.set()
    return out, time.monotonic() - start


async def test_a_slow_body_on_a_chat_path_is_408_not_504(tmp_path: Path) -> None:
    app = create_app(settings(tmp_path, request_timeout_s=1.0))
    body = json.dumps(ASK).encode()
    out, _ = await _trickle(app, CHAT, body, 10)
    start, sent = out[0], out[1]
    assert start["status"] == 408
    assert dict(start["headers"])[b"content-type"] == b"application/json"
    error = json.loads(sent["body"])["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "request_timeout",
        "<body>",
    )
    assert "not received within 1 s" in error["message"]


async def test_a_slow_body_on_a_non_exempt_path_gets_at_least_a_second(tmp_path: Path) -> None:
    """``/v1/route`` under a 0.2 s timeout: the body still gets the least body time
    (1 s) and is answered 408 in the service's own shape."""
    app = create_app(settings(tmp_path, request_timeout_s=0.2))
    body = json.dumps(panel("p1", ["1", "2", "1"])).encode()
    out, took = await _trickle(app, "/v1/route", body, 10)
    assert out[0]["status"] == 408
    assert json.loads(out[1]["body"]) == {
        "error": "request body not received within 1 s",
        "field": "<body>",
    }
    assert took >= 0.9


# -- a 405 names the allowed methods ------------------------------------------------------------


async def test_a_405_carries_allow(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        res = await client.get(CHAT, headers=auth("sub"))
        assert res.status_code == 405 and res.headers["allow"] == "POST"
        res = await client.put("/v1/decide", headers=auth("sub"), json={})
        assert _service_error(res, 405)["field"] is None
        assert res.headers["allow"] == "POST"
        res = await client.post("/v1/models", headers=auth("sub"), json={})
        assert res.status_code == 405 and res.headers["allow"] == "GET, HEAD"


async def test_allow_names_every_method_of_the_path(tmp_path: Path) -> None:
    """Two routes on one path (``POST`` and ``DELETE`` of a claim, ``GET`` and ``POST`` of
    the login page): ``Allow`` used to name the first route's methods only. ``HEAD`` is
    answered wherever ``GET`` is (:mod:`dissensus.serve.head`)."""
    async with client_for(settings(tmp_path)) as client:
        res = await client.get("/v1/review/r.1/claim", headers=auth("rev"))
        assert _service_error(res, 405)["field"] is None
        assert res.headers["allow"] == "POST, DELETE"
        res = await client.head("/v1/review/r.1/claim", headers=auth("rev"))
        assert res.status_code == 405 and res.headers["allow"] == "POST, DELETE"
        res = await client.put("/review/login", json={})
        assert res.status_code == 405 and res.headers["allow"] == "GET, HEAD, POST"
        res = await client.delete("/review/login")
        assert res.status_code == 405 and res.headers["allow"] == "GET, HEAD, POST"
        res = await client.get("/v1/decide", headers=auth("sub"))
        assert res.status_code == 405 and res.headers["allow"] == "POST"
        # The static files answer for themselves.
        res = await client.post("/review/static/review.js", json={})
        assert res.status_code == 405 and res.headers["allow"] == "GET, HEAD"


async def test_every_405_names_the_methods_its_path_takes(tmp_path: Path) -> None:
    """For every route: a method none of the path's routes takes is 405, and ``Allow``
    names what the routes of that path take (``HEAD`` with ``GET``)."""
    import re

    from fastapi.routing import APIRoute

    app = create_app(settings(tmp_path))
    by_path: dict[str, set[str]] = {}

    def leaves(routes: Any) -> Iterator[APIRoute]:
        for route in routes:
            if isinstance(route, APIRoute):
                yield route
            elif hasattr(route, "original_router"):  # an included router
                yield from leaves(route.original_router.routes)

    for route in leaves(app.routes):
        by_path.setdefault(route.path, set()).update(route.methods)
    assert "/v1/review/{review_id}/claim" in by_path and len(by_path) > 20
    order = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        for template, methods in by_path.items():
            path = re.sub(r"\{[^}]+\}", "x.1", template)
            allowed = methods | ({"HEAD"} if "GET" in methods else set())
            unused = next(m for m in ("PATCH", "PUT", "DELETE", "POST") if m not in allowed)
            res = await client.request(unused, path, json={}, headers=auth("adm"))
            assert res.status_code == 405, (template, unused, res.status_code)
            assert res.headers["allow"] == ", ".join(m for m in order if m in allowed), template


# -- a body must be UTF-8 ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "field"),
    [("utf-16", "<encoding>"), ("utf-32", "<encoding>"), ("utf-16-le", "<json>")],
)
async def test_a_body_not_in_utf8_is_a_400(tmp_path: Path, encoding: str, field: str) -> None:
    """UTF-16 and UTF-32 (which ``json.loads`` accepts in bytes) are refused; without a
    byte order mark their bytes are valid UTF-8 but not JSON."""
    headers = {**auth("sub"), "Content-Type": "application/json"}
    data = json.dumps(panel("p1", ["1", "2", "1"])).encode(encoding)
    async with client_for(settings(tmp_path)) as client:
        res = await client.post("/v1/decide", headers=headers, content=data)
        assert _service_error(res, 400)["field"] == field
        res = await client.post(
            "/v1/vote", headers=headers, content=json.dumps(VOTE_CASE).encode(encoding)
        )
        assert _service_error(res, 400)["field"] == field
        assert (await client.get("/v1/runs", headers=auth("adm"))).json() == []


async def test_a_utf8_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    headers = {**auth("sub"), "Content-Type": "application/json"}
    data = json.dumps(VOTE_CASE).encode()
    async with client_for(settings(tmp_path)) as client:
        plain = await client.post("/v1/vote", headers=headers, content=data)
        marked = await client.post("/v1/vote", headers=headers, content=b"\xef\xbb\xbf" + data)
    assert plain.status_code == marked.status_code == 200
    assert marked.json() == plain.json()


def test_parse_json_keeps_its_guards() -> None:
    assert parse_json(b'\xef\xbb\xbf{"a": [1]}') == {"a": [1]}
    for raw, field in (
        (b"\xef\xbb\xbf", "<json>"),  # a mark and nothing else
        (b"\xef\xbb\xbf\xef\xbb\xbf{}", "<json>"),  # one mark only
        (b'{"a": "\xff"}', "<encoding>"),
        (b"[" * 100 + b"]" * 100, "<depth>"),
        (b"[" + b"9" * 5000 + b"]", "<json>"),
    ):
        with pytest.raises(ApiError) as caught:
            parse_json(raw)
        assert (caught.value.status, caught.value.field) == (400, field), raw[:20]


# -- trailing slashes -----------------------------------------------------------------------


async def test_a_trailing_slash_redirects_to_a_relative_location(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        for host in ("localhost:1", "127.0.0.1:9", "[::1]:65535"):
            res = await client.get("/v1/runs/", headers={**auth("sub"), "Host": host})
            assert res.status_code == 307 and res.headers["location"] == "/v1/runs", host
        cases = {
            "/v1/review/?status=open&limit=2": "/v1/review?status=open&limit=2",
            "/review/": "/review",
            "/healthz/": "/healthz",
            "/v1/models/": "/v1/models",  # the list, not an unknown model named ""
        }
        for path, location in cases.items():
            res = await client.get(path, headers=auth("adm"))
            assert (res.status_code, res.headers["location"]) == (307, location), path
        # A write keeps its method and body (307); it is redirected before the route runs.
        res = await client.post("/v1/decide/", headers=auth("sub"), json=[])
        assert (res.status_code, res.headers["location"]) == (307, "/v1/decide")
        # Followed, it lands on the resource, on the host the client asked.
        res = await client.get("/v1/runs/", headers=auth("sub"), follow_redirects=True)
        assert res.status_code == 200 and str(res.url) == "http://127.0.0.1/v1/runs"
        # Unknown paths stay 404s, in the shape of their path.
        res = await client.get("//v1/runs/", headers=auth("sub"))
        assert set(_service_error(res, 404)) == {"error", "field"}
        res = await client.get("/v1/chat/complete/", headers=auth("sub"))
        _openai_error(res, 404, "invalid_request_error", "not_found")


def test_a_slash_redirect_never_leaves_the_host() -> None:
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route, Router

    async def ok(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    router = Router([Route("/{anything:path}", ok), Route("/a\\b", ok)])

    def scope(path: str, query: bytes = b"") -> dict[str, Any]:
        return {
            "type": "http",
            "method": "GET",
            "path": path,
            "root_path": "",
            "query_string": query,
        }

    # "//evil.example" is another host to a browser: no redirect there.
    assert other_spelling(router, scope("//evil.example/")) is None
    assert other_spelling(router, scope("///")) is None
    # A backslash (read as "/" by browsers) is encoded; so is what a path cannot hold.
    assert other_spelling(router, scope("/a\\b/")) == "/a%5Cb"
    assert other_spelling(router, scope("/a b/", b"q=1")) == "/a%20b?q=1"


async def test_an_unknown_run_is_a_404_naming_the_field_that_names_it(tmp_path: Path) -> None:
    """``/v1/runs/{run_id}`` of a malformed or unknown id, and ``/v1/review?run=`` of an
    unknown run: the 404's ``field`` names where the run was named (it was null, while
    the message said ``field 'run_id'``)."""
    async with client_for(settings(tmp_path)) as client:
        for path in ("/v1/runs/..bad", "/v1/runs/abc", "/v1/runs/abc/verify"):
            res = await client.get(path, headers=auth("sub"))
            assert res.status_code == 404 and res.json()["field"] == "run_id", (path, res.text)
        res = await client.get("/v1/review?run=abc", headers=auth("rev"))
        assert res.status_code == 404 and res.json()["field"] == "run", res.text


# -- the API's answers carry case content and were cacheable ---------------------------------


async def test_every_v1_answer_is_no_store_and_nosniff(tmp_path: Path) -> None:
    """``GET /v1/review/{id}`` (a case's question, options and reasoning) had no
    ``Cache-Control`` while the review pages send ``no-store``: every ``/v1`` answer,
    refusals included, is ``no-store`` and ``nosniff``; an event stream keeps its own
    ``Cache-Control`` (once); the static files and ``/healthz`` are left alone."""
    agree = panel("c2", ["1", "1", "1"], swap=["1", "1", "1"])
    async with client_for(settings(tmp_path)) as client:
        run = (await client.post("/v1/decide", json=[escalating("c1")], headers=auth("sub"))).json()
        review_id = run["records"][0]["review_id"]
        answers = {
            "decide": await client.post("/v1/decide", json=agree, headers=auth("sub")),
            "case": await client.get(f"/v1/review/{review_id}", headers=auth("rev")),
            "queue": await client.get("/v1/review", headers=auth("rev")),
            "run": await client.get(f"/v1/runs/{run['run_id']}", headers=auth("sub")),
            "head": await client.head(f"/v1/review/{review_id}", headers=auth("rev")),
            "models": await client.get("/v1/models", headers=auth("sub")),
            "stale": await client.post(
                f"/v1/review/{review_id}/resolve",
                json={"decision": "1", "note": "n", "content_sha256": "0" * 64},
                headers=auth("rev"),
            ),
            "no token": await client.get(f"/v1/review/{review_id}"),
            "foreign host": await client.get(
                f"/v1/review/{review_id}", headers={**auth("rev"), "Host": "evil.example"}
            ),
            "unknown": await client.get("/v1/nothing", headers=auth("rev")),
            "405": await client.put("/v1/decide", json={}, headers=auth("sub")),
        }
        statuses = {name: res.status_code for name, res in answers.items()}
        assert statuses == {
            "decide": 200,
            "case": 200,
            "queue": 200,
            "run": 200,
            "head": 200,
            "models": 200,
            "stale": 409,
            "no token": 401,
            "foreign host": 403,
            "unknown": 404,
            "405": 405,
        }, statuses
        for name, res in answers.items():
            assert res.headers.get("cache-control") == "no-store", name
            assert res.headers.get("x-content-type-options") == "nosniff", name
        stream = await client.get(f"/v1/runs/{run['run_id']}/events", headers=auth("sub"))
        assert stream.status_code == 200 and "event: finished" in stream.text
        assert stream.headers.get_list("cache-control") == ["no-store"]
        assert stream.headers["x-content-type-options"] == "nosniff"
        for path in ("/healthz", "/review/static/review.css"):
            res = await client.get(path)
            assert res.status_code == 200 and "cache-control" not in res.headers, path
