"""The service under hostile input and browsers: bounded work, Host / Origin checks, odd bodies.

Every test here failed before the fix it pins: panels of any size reached the reader on
the event loop; any ``Host`` and any ``Origin`` were served; deep JSON, huge integers
and long review references answered plain-text 500s; a slow body held ``/v1/decide``
past its timeout; a 404 named the journal file; a port in use printed the review URL
before failing.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from dissensus.errors import ConfigError
from dissensus.io.jsonl import Reject, parse_line
from dissensus.io.limits import MAX_AGENTS, MAX_FIELD_CHARS, MAX_PANEL_CHARS
from dissensus.io.views import parse_panel_view
from dissensus.serve import ServeSettings, create_app, library_calls
from dissensus.serve.auth import hash_token, load_tokens
from dissensus.serve.origin import BrowserGuard, allowed_hosts
from dissensus.store import mask_url
from dissensus.types import Panel, VoteCase
from pipeline_cases import panel
from serve_helpers import auth, client_for, escalating, heap_frozen, settings

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


def wide_panel(pid: str, agents: int, reasoning: str = "short") -> dict[str, Any]:
    return {
        "id": pid,
        "outputs": [
            {"agent": f"a{i}", "decision": "1" if i % 2 else "2", "reasoning": reasoning}
            for i in range(agents)
        ],
    }


def wide_case(cid: str, voters: int) -> dict[str, Any]:
    return {
        "id": cid,
        "votes": [
            {
                "agent": f"v{i}",
                "answer": "A",
                "evidence_source": "parametric",
                "evidence_present": False,
            }
            for i in range(voters)
        ],
    }


# -- bounded work: the readers ------------------------------------------------------------


@pytest.mark.parametrize("reader", ["parse_line", "view"])
def test_a_panel_over_the_agent_bound_is_rejected_with_file_line_field(reader: str) -> None:
    line = json.dumps(wide_panel("big", MAX_AGENTS + 1))
    parse = (
        (lambda t: parse_line(Panel, t, file="in.jsonl", line=7))
        if reader == "parse_line"
        else (lambda t: parse_panel_view(t, file="in.jsonl", line=7))
    )
    got = parse(line)
    assert isinstance(got, Reject)
    assert (got.file, got.line, got.field) == ("in.jsonl", 7, "outputs")
    assert f"at most {MAX_AGENTS}" in got.message
    ok = parse(json.dumps(wide_panel("ok", MAX_AGENTS)))
    assert not isinstance(ok, Reject) and len(ok.outputs) == MAX_AGENTS


@pytest.mark.parametrize(
    ("where", "field"),
    [("reasoning", "outputs.1.reasoning"), ("meta", "meta.note.0"), ("id", "id")],
)
def test_a_field_over_the_character_bound_is_rejected_naming_it(where: str, field: str) -> None:
    data = panel("p", ["1", "2"])
    long = "x" * (MAX_FIELD_CHARS + 1)
    if where == "reasoning":
        data["outputs"][1]["reasoning"] = long
    elif where == "meta":
        data["meta"] = {"note": [long]}
    else:
        data["id"] = long
    for got in (
        parse_line(Panel, json.dumps(data), file="f", line=2),
        parse_panel_view(json.dumps(data), file="f", line=2),
    ):
        assert isinstance(got, Reject)
        assert got.field == field
        assert f"at most {MAX_FIELD_CHARS}" in got.message


def test_a_panel_over_the_text_bound_is_rejected() -> None:
    """Each field is within its bound; together they are too much text for one panel."""
    data = wide_panel("t", 16, "z" * 20_000)  # 320,000 characters of reasoning
    assert MAX_PANEL_CHARS < 16 * 20_000
    for got in (
        parse_line(Panel, json.dumps(data), file="f", line=4),
        parse_panel_view(json.dumps(data), file="f", line=4),
    ):
        assert isinstance(got, Reject) and got.field == "<text>"
        assert f"at most {MAX_PANEL_CHARS}" in got.message
    ok = wide_panel("t", 8, "z" * 20_000)
    assert not isinstance(parse_line(Panel, json.dumps(ok), file="f", line=1), Reject)


@pytest.mark.parametrize("model", [Panel, VoteCase])
def test_a_huge_integer_is_a_reject_not_a_traceback(model: type[Any]) -> None:
    for line in (
        '{"id": ' + "9" * 5000 + ', "outputs": []}',
        json.dumps(panel("p", ["1", "1"]))[:-1] + ', "meta": {"k": ' + "9" * 5000 + "}}",
    ):
        got = parse_line(model, line, file="in.jsonl", line=2)
        assert isinstance(got, Reject) and got.field == "<json>"
        assert "4300 digits" in got.message


def test_a_vote_case_over_the_voter_bound_is_rejected() -> None:
    got = parse_line(VoteCase, json.dumps(wide_case("c", MAX_AGENTS + 1)), file="v", line=1)
    assert isinstance(got, Reject) and got.field == "votes"


def test_the_cli_rejects_an_oversized_panel_and_decides_the_rest(tmp_path: Path) -> None:
    from cli_helpers import run_cli

    rows = [panel("a", ["1", "1", "1"]), wide_panel("big", MAX_AGENTS + 1), panel("b", ["2", "2"])]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = run_cli("route", path, "--json")
    assert res.returncode == 3
    assert f"{path}:2: field 'outputs'" in res.stderr
    assert [json.loads(x)["id"] for x in res.stdout.splitlines()] == ["a", "b"]


# -- bounded work: over HTTP ------------------------------------------------------------------


async def test_http_bounds_answer_413_and_422_and_nothing_is_journalled(tmp_path: Path) -> None:
    s = settings(tmp_path, max_agents=8, max_field_chars=1000)
    async with client_for(s) as client:
        for path in ("/v1/decide", "/v1/route"):
            res = await client.post(path, json=wide_panel("w", 9), headers=auth("sub"))
            assert res.status_code == 413, (path, res.text)
            assert res.json()["field"] == "outputs"
            res = await client.post(path, json=wide_panel("w", 3, "y" * 1001), headers=auth("sub"))
            assert res.status_code == 422, (path, res.text)
            assert res.json()["field"] == "outputs.0.reasoning"
        # a list: decide refuses the whole request (nothing journalled), route rejects the item
        res = await client.post(
            "/v1/decide", json=[panel("a", ["1", "1"]), wide_panel("w", 9)], headers=auth("sub")
        )
        assert res.status_code == 413 and res.json()["field"] == "1.outputs"
        assert (await client.get("/v1/runs", headers=auth("sub"))).json() == []
        res = await client.post(
            "/v1/route", json=[panel("a", ["1", "1"]), wide_panel("w", 9)], headers=auth("sub")
        )
        assert res.status_code == 200
        body = res.json()
        assert [r["id"] for r in body["records"]] == ["a"]
        assert body["rejects"][0]["index"] == 1 and body["rejects"][0]["field"] == "outputs"
        res = await client.post("/v1/vote", json=wide_case("c", 9), headers=auth("sub"))
        assert res.status_code == 413 and res.json()["field"] == "votes"
        problem = {"agents": [{"kind": "table", "name": f"n{i}"} for i in range(9)]}
        res = await client.post("/v1/negotiate", json=problem, headers=auth("sub"))
        assert res.status_code == 413 and res.json()["field"] == "agents"


async def test_too_much_text_in_one_panel_is_413(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        for path in ("/v1/route", "/v1/decide"):
            res = await client.post(
                path, json=wide_panel("t", 16, "z" * 20_000), headers=auth("sub")
            )
            assert res.status_code == 413 and res.json()["field"] == "<text>", path


async def test_millions_of_tiny_values_in_meta_are_413_and_nothing_is_journalled(
    tmp_path: Path,
) -> None:
    """8 MB of ``[[[[1]]]]`` in ``meta`` was inside every text bound: 36 s and 2.3 GB of
    memory for the request, and a blocked server on every later read of the case."""
    body = (
        b'{"id":"w","meta":{"x":['
        + b",".join([b"[[[[1]]]]"] * 200_000)
        + b']},"outputs":[{"agent":"a","decision":"1","reasoning":"r"},'
        + b'{"agent":"b","decision":"2","reasoning":"r"}]}'
    )
    async with client_for(settings(tmp_path)) as client:
        for path in ("/v1/route", "/v1/decide"):
            res = await client.post(
                path,
                content=body,
                headers={**auth("sub"), "Content-Type": "application/json"},
            )
            assert res.status_code == 413, (path, res.text)
            assert res.json()["field"] == "<values>", res.text
        runs = await client.get("/v1/runs", headers=auth("sub"))
        assert runs.status_code == 200 and runs.json() == [], runs.text


@pytest.mark.parametrize("body_bytes", [None, 8_000_000])
def test_an_item_over_the_value_bound_is_refused_before_its_model_is_built(
    body_bytes: int | None,
) -> None:
    """Validating 740,000 keys of ``meta`` and writing its line took ~100 times the body's
    size in memory for a record refused anyway; it is counted on the parsed JSON first."""
    from dissensus.io.limits import MAX_PANEL_VALUES, Limits
    from dissensus.serve.http import checked

    built: list[str] = []

    class Spy(Panel):
        @classmethod
        def model_validate(cls, obj: Any, **kwargs: Any) -> Panel:  # type: ignore[override]
            built.append(str(obj.get("id")))
            return Panel.model_validate(obj, **kwargs)

    crowded = panel("big", ["1", "2"])
    crowded["meta"] = {str(i): 0 for i in range(MAX_PANEL_VALUES + 1)}
    items = [panel("a", ["1", "1"]), crowded, {"id": 3}]
    lines: dict[int, str] = {}
    kept, rejects, overruns = checked(Spy, items, Limits(), lines, body_bytes)
    assert "big" not in built and sorted(lines) == [0]
    assert [i for i, _ in kept] == [0] and [r.index for r in rejects] == [2]
    assert [(i, o.field, o.count) for i, o in overruns] == [(1, "<values>", True)]
    assert "JSON values; at most" in overruns[0][1].message


def test_server_bounds_cannot_exceed_the_readers(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        ServeSettings(max_agents=MAX_AGENTS + 1)
    with pytest.raises(ValueError):
        ServeSettings(max_field_chars=MAX_FIELD_CHARS + 1)


async def test_library_calls_leave_the_event_loop_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a route call works, /healthz answers: the call runs in a worker thread.

    The stand-in for ``route`` waits (at most 20 s) for a health check to have been
    answered; run on the event loop it would block that answer and report it never came.
    """
    answered = threading.Event()
    seen: list[bool] = []

    def slow_route(panels: list[Panel], *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        seen.append(answered.wait(20))
        return [{"id": p.id} for p in panels]

    monkeypatch.setattr(library_calls, "route", slow_route)
    import asyncio

    async with client_for(settings(tmp_path)) as client:
        call = asyncio.create_task(
            client.post("/v1/route", json=panel("p", ["1", "1"]), headers=auth("sub"))
        )
        await asyncio.sleep(0)
        health = await client.get("/healthz")
        answered.set()
        assert health.status_code == 200
        assert (await call).json() == {"id": "p"}
    assert seen == [True]


# -- Host, Origin, content type -----------------------------------------------------------------


def local(tmp: Path, **extra: Any) -> ServeSettings:
    """A loopback server without tokens (every caller is the admin ``local``)."""
    return settings(tmp, tokens=None, **extra)


async def test_a_foreign_host_is_refused_even_for_reads(tmp_path: Path) -> None:
    async with client_for(local(tmp_path)) as client:
        res = await client.get("/v1/review", headers={"Host": "attacker.example:8000"})
        assert res.status_code == 403 and res.json()["field"] == "Host"
        res = await client.get("/review", headers={"Host": "attacker.example"})
        assert res.status_code == 403
        for host in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "LOCALHOST"):
            res = await client.get("/v1/review", headers={"Host": host})
            assert res.status_code == 200, host


async def test_allow_host_adds_names_and_star_turns_the_check_off(tmp_path: Path) -> None:
    async with client_for(local(tmp_path, allow_hosts=("dissensus.internal",))) as client:
        assert (await client.get("/healthz", headers={"Host": "dissensus.internal:80"})).is_success
        assert (await client.get("/healthz", headers={"Host": "other.example"})).status_code == 403
    async with client_for(local(tmp_path, allow_hosts=("*",))) as client:
        assert (await client.get("/healthz", headers={"Host": "other.example"})).is_success


async def test_cross_origin_and_non_json_writes_are_refused(tmp_path: Path) -> None:
    body = json.dumps(escalating("x"))
    async with client_for(local(tmp_path)) as client:
        evil = {"Origin": "https://evil.example", "Content-Type": "application/json"}
        res = await client.post("/v1/decide", content=body, headers=evil)
        assert res.status_code == 403 and res.json()["field"] == "Origin"
        other_port = {"Origin": "http://127.0.0.1:3000", "Content-Type": "application/json"}
        assert (
            await client.post("/v1/decide", content=body, headers=other_port)
        ).status_code == 403
        null = {"Origin": "null", "Content-Type": "application/json"}
        assert (await client.post("/v1/decide", content=body, headers=null)).status_code == 403
        site = {"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}
        assert (await client.post("/v1/decide", content=body, headers=site)).status_code == 403
        for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
            res = await client.post("/v1/decide", content=body, headers={"Content-Type": kind})
            assert res.status_code == 415 and res.json()["field"] == "Content-Type", kind
        res = await client.post("/v1/route", content=body)  # no content type at all
        assert res.status_code == 415
        assert (await client.get("/v1/runs")).json() == []  # nothing was journalled
        same = {"Origin": "http://127.0.0.1", "Content-Type": "application/json; charset=utf-8"}
        res = await client.post("/v1/decide", content=body, headers=same)
        assert res.status_code == 200, res.text
        # a bodyless write (a claim) needs no content type
        rid = res.json()["review_id"]
        assert (await client.post(f"/v1/review/{rid}/claim")).status_code == 200


@pytest.mark.parametrize(
    "twice",
    [
        [("Content-Type", "application/json"), ("Content-Type", "text/plain")],
        [("Origin", "http://127.0.0.1"), ("Origin", "http://evil.example")],
        [("Sec-Fetch-Site", "same-origin"), ("Sec-Fetch-Site", "cross-site")],
        [("Authorization", "Bearer a"), ("Authorization", "Bearer b")],
    ],
)
async def test_a_header_the_checks_read_may_come_only_once(
    tmp_path: Path, twice: list[tuple[str, str]]
) -> None:
    """Which copy counts differs between readers (this guard read the first, and let
    ``application/json`` then ``text/plain`` through): two copies are a 400 naming it."""
    body = json.dumps(escalating("x"))
    headers = list(twice)
    if twice[0][0] != "Content-Type":
        headers.append(("Content-Type", "application/json"))
    async with client_for(local(tmp_path)) as client:
        res = await client.post("/v1/decide", content=body, headers=headers)
        assert res.status_code == 400, res.text
        assert res.json()["field"] == twice[0][0]
        assert (await client.get("/v1/runs")).json() == []  # nothing was journalled


async def test_review_page_forms_get_the_host_and_origin_checks(tmp_path: Path) -> None:
    async with client_for(local(tmp_path)) as client:
        decided = await client.post("/v1/decide", json=escalating("x"))
        rid = decided.json()["review_id"]
        page = await client.get(f"/review/case/{rid}", follow_redirects=True)
        assert page.status_code == 200
        res = await client.post(
            f"/review/case/{rid}/resolve",
            data={"decision": "1", "note": "n", "content_sha256": "0" * 64, "csrf": "x"},
            headers={"Origin": "https://evil.example"},
        )
        assert res.status_code == 403
        res = await client.post(
            f"/review/case/{rid}/resolve",
            data={"decision": "1", "note": "n", "content_sha256": "0" * 64, "csrf": "x"},
            headers={"Host": "attacker.example"},
        )
        assert res.status_code == 403
        show = await client.get(f"/v1/review/{rid}")
        assert show.json()["status"] == "open"


# -- odd bodies, refs, paths ---------------------------------------------------------------------

WRITERS = ("/v1/decide", "/v1/route", "/v1/vote", "/v1/negotiate", "/v1/verify")


@pytest.mark.parametrize("depth", [1_000, 100_000])
async def test_deep_json_is_a_400_naming_depth(tmp_path: Path, depth: int) -> None:
    body = "[" * depth + "]" * depth
    async with client_for(settings(tmp_path)) as client:
        for path in WRITERS:
            res = await client.post(
                path, content=body, headers={**auth("adm"), "Content-Type": "application/json"}
            )
            assert res.status_code == 400, (path, res.text)
            assert res.json()["field"] == "<depth>"
        deep_meta = panel("p", ["1", "1"], meta={"m": json.loads("[" * 70 + "]" * 70)})
        res = await client.post("/v1/decide", json=deep_meta, headers=auth("adm"))
        assert res.status_code in (400, 422), res.text


async def test_huge_integers_are_a_400(tmp_path: Path) -> None:
    body = '{"id": ' + "9" * 5000 + ', "outputs": []}'
    async with client_for(settings(tmp_path)) as client:
        for path in WRITERS:
            res = await client.post(
                path, content=body, headers={**auth("adm"), "Content-Type": "application/json"}
            )
            assert res.status_code == 400, (path, res.text)
            assert res.json()["field"] == "<json>"


async def test_long_review_refs_are_404_not_500(tmp_path: Path) -> None:
    ref = "x." + "1" * 5000
    async with client_for(settings(tmp_path)) as client:
        assert (await client.get(f"/v1/review/{ref}", headers=auth("adm"))).status_code == 404
        assert (
            await client.post(f"/v1/review/{ref}/claim", headers=auth("adm"))
        ).status_code == 404
        resolve = {"decision": "1", "note": "n", "content_sha256": "0" * 64}
        res = await client.post(f"/v1/review/{ref}/resolve", json=resolve, headers=auth("adm"))
        assert res.status_code == 404
        res = await client.post(f"/v1/cases/{ref}/confirm", json={"note": "n"}, headers=auth("adm"))
        assert res.status_code in (400, 404)
        assert res.headers["content-type"].startswith("application/json")


async def test_a_404_does_not_name_the_journal_file(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        for path in ("/v1/runs/nosuch", "/v1/runs/nosuch/verify", "/v1/review/nosuch.1"):
            res = await client.get(path, headers=auth("adm"))
            assert res.status_code == 404, path
            assert str(tmp_path) not in res.text and "journal.sqlite" not in res.text


async def test_an_unexpected_error_is_a_json_500_naming_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"secret detail {tmp_path}")

    monkeypatch.setattr(library_calls, "bound", boom)
    app = create_app(settings(tmp_path))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        res = await client.get("/v1/bound?agents=3&rounds=1", headers=auth("sub"))
    assert res.status_code == 500
    assert res.json() == {"error": "internal error", "field": None}


async def test_a_slow_body_ends_with_the_request_timeout(tmp_path: Path) -> None:
    """A body trickling in is cut off at the timeout (the stand-in client never finishes)."""
    import asyncio

    app = create_app(settings(tmp_path, request_timeout_s=0.2))
    sent: list[dict[str, Any]] = []
    stop = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if not sent:
            sent.append({})
            return {"type": "http.request", "body": b"[", "more_body": True}
        await stop.wait()  # the rest never comes
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
        "path": "/v1/decide",
        "raw_path": b"/v1/decide",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"transfer-encoding", b"chunked"),
            (b"authorization", b"Bearer tok-sub"),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await asyncio.wait_for(app(scope, receive, send), 30)
    stop.set()
    assert out[0]["status"] == 408
    assert json.loads(out[1]["body"])["field"] == "<body>"


async def test_docs_pages_forbid_framing(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        for path in ("/docs", "/redoc"):
            res = await client.get(path)
            policy = res.headers.get("content-security-policy", "")
            assert "frame-ancestors 'none'" in policy, path
            assert res.headers.get("x-frame-options") == "DENY"


# -- files and start-up ---------------------------------------------------------------------------


def test_a_world_writable_tokens_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens.txt"
    path.write_text(f"{hash_token('t')} me admin\n", encoding="utf-8")
    os.chmod(path, 0o666)
    with pytest.raises(ConfigError, match="writable by every user"):
        load_tokens(path)
    os.chmod(path, 0o640)
    assert len(load_tokens(path)) == 1


def test_a_new_journal_is_private(tmp_path: Path) -> None:
    from dissensus.store import Journal

    old = os.umask(0o022)
    try:
        with Journal(tmp_path / "j.sqlite") as journal:
            journal.create_run("r", kind="decide", meta={})
    finally:
        os.umask(old)
    for name in ("j.sqlite", "j.sqlite-wal", "j.sqlite-shm"):
        path = tmp_path / name
        if path.exists():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, name


@pytest.mark.parametrize("bad", ["../x", "a/b", "x'y", 'x"y', "", ".hidden", "a..b", "a b", "-x"])
def test_run_ids_are_checked_in_one_place(tmp_path: Path, bad: str) -> None:
    from dissensus.store import Journal

    with Journal(":memory:") as journal, pytest.raises(ConfigError, match="invalid run id"):
        journal.create_run(bad, kind="decide", meta={})


def test_decide_run_id_with_a_slash_is_a_usage_error(tmp_path: Path) -> None:
    from cli_helpers import run_cli

    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(panel("a", ["1", "1"])) + "\n", encoding="utf-8")
    res = run_cli(
        "decide", path, "--run-id", "../etc", "--journal", tmp_path / "j.sqlite", "--json"
    )
    assert res.returncode == 2
    assert "invalid run id" in res.stderr and "Traceback" not in res.stderr


def test_a_zombie_holder_of_a_run_lock_is_gone(tmp_path: Path) -> None:
    import subprocess
    import sys

    from dissensus.store import Journal

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        # wait for it to exit without reaping it: it stays a zombie
        for _ in range(2000):
            with open(f"/proc/{child.pid}/stat", "rb") as handle:
                if handle.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    break
            threading.Event().wait(0.005)
        with Journal(tmp_path / "j.sqlite") as journal:
            journal.create_run("r", kind="decide", meta={})
            assert journal.acquire_run_lock("r", pid=child.pid) is None
            holder = journal.acquire_run_lock("r")
            assert holder is None  # the zombie's lock was taken over
    finally:
        child.wait()


def test_serve_on_a_busy_port_fails_before_printing(tmp_path: Path) -> None:
    from cli_helpers import run_cli

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        res = run_cli(
            "serve", "--journal", tmp_path / "j.sqlite", "--port", str(port), env=dict(os.environ)
        )
    assert res.returncode == 2, res.stderr
    assert "review page" not in res.stderr and "http://" not in res.stderr
    assert "cannot listen" in res.stderr


def test_serve_with_a_bad_shutdown_time_fails_before_printing_or_opening(tmp_path: Path) -> None:
    """An unreadable ``$DISSENSUS_SERVE_SHUTDOWN_S`` is a one-line error before the banner,
    and the journal is not created."""
    from cli_helpers import run_cli
    from dissensus.serve.server import SHUTDOWN_ENV

    journal = tmp_path / "j.sqlite"
    for bad in ("abc", "0"):
        env = {**os.environ, SHUTDOWN_ENV: bad}
        res = run_cli("serve", "--journal", journal, "--port", "0", env=env)
        assert res.returncode == 2, res.stderr
        assert SHUTDOWN_ENV in res.stderr and repr(bad) in res.stderr
        assert "review page" not in res.stderr and "http://" not in res.stderr
        assert not journal.exists()


# -- properties ---------------------------------------------------------------------------------


_NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-", min_size=1, max_size=20)


def _guarded(
    hosts: frozenset[str] | None, method: str, headers: dict[str, str] | list[tuple[str, str]]
) -> tuple[int, bool]:
    """(status, whether the app behind the guard ran) of one request (``headers`` as a
    list: a name may repeat)."""
    import asyncio

    ran: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        ran.append(True)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    out: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        out.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {
        "type": "http",
        "method": method,
        "path": "/v1/decide",
        "headers": [
            (k.lower().encode(), v.encode())
            for k, v in (headers.items() if isinstance(headers, dict) else headers)
        ],
    }
    asyncio.run(BrowserGuard(app, hosts)(scope, receive, send))
    return int(out[0]["status"]), bool(ran)


@hypothesis_settings(max_examples=60, deadline=None)
@given(name=_NAME, port=st.integers(min_value=1, max_value=65535))
def test_only_the_servers_names_pass_the_host_check(name: str, port: int) -> None:
    hosts = allowed_hosts("127.0.0.1", (), loopback=True)
    status, ran = _guarded(hosts, "GET", {"Host": f"{name}:{port}"})
    assert ran == (name in ("127.0.0.1", "localhost")) == (status == 200)


@hypothesis_settings(max_examples=100, deadline=None)
@given(
    name=st.sampled_from(["[::1]", "localhost", "127.0.0.1"]),
    after=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789.-:[]", max_size=20),
)
def test_after_a_servers_name_only_a_port_may_follow(name: str, after: str) -> None:
    """``[::1]evil.example`` is not ``[::1]``: after the name only ``:digits`` may follow."""
    hosts = allowed_hosts("127.0.0.1", (), loopback=True)
    status, ran = _guarded(hosts, "GET", {"Host": name + after})
    port = after == "" or (after.startswith(":") and after[1:].isdigit())
    assert ran == port == (status == 200), (name + after, status)


@pytest.mark.parametrize(
    "host", ["[::1]evil.example", "[::1]evil.example:80", "[::1].x", "localhost:evil", "[::1"]
)
def test_a_host_with_more_than_a_port_after_its_name_is_foreign(host: str) -> None:
    hosts = allowed_hosts("127.0.0.1", (), loopback=True)
    assert _guarded(hosts, "GET", {"Host": host}) == (403, False)


@pytest.mark.parametrize("check", [True, False])
def test_a_request_with_two_host_headers_is_refused(check: bool) -> None:
    hosts = allowed_hosts("127.0.0.1", (), loopback=True) if check else None
    for pair in (["127.0.0.1:8000", "attacker.example"], ["127.0.0.1", "127.0.0.1"]):
        sent = [("Host", pair[0]), ("Accept", "*/*"), ("Host", pair[1])]
        assert _guarded(hosts, "GET", sent) == (400, False), pair
    assert _guarded(hosts, "GET", [("Host", "127.0.0.1:8000")]) == (200, True)


@hypothesis_settings(max_examples=60, deadline=None)
@given(
    origin_host=_NAME,
    scheme=st.sampled_from(["http", "https"]),
    port=st.integers(min_value=1, max_value=65535),
)
def test_a_write_from_any_other_origin_never_reaches_the_app(
    origin_host: str, scheme: str, port: int
) -> None:
    hosts = allowed_hosts("127.0.0.1", (), loopback=True)
    own = "127.0.0.1:8000"
    origin = f"{scheme}://{origin_host}:{port}"
    headers = {"Host": own, "Origin": origin, "Content-Type": "application/json"}
    status, ran = _guarded(hosts, "POST", headers)
    same = origin.lower() in (f"http://{own}", f"https://{own}")
    assert ran == same
    assert status == (200 if same else 403)


@hypothesis_settings(max_examples=100, deadline=None)
@given(
    password=st.text(
        alphabet=st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="/@?#%:[]"),
        min_size=4,
        max_size=30,
    )
)
def test_a_masked_url_never_shows_its_password(password: str) -> None:
    url = f"postgresql://dissensus:{password}@db.example:5432/journal"
    assert password not in mask_url(url).replace("dissensus", "").replace("db.example", "").replace(
        "journal", ""
    )
