"""The service while its journal is down or busy: 503 with ``Retry-After``, never the
journal's location, no traceback, and it recovers when the journal is back.

Before the fix: with PostgreSQL stopped, ``GET /readyz`` (no token) answered
``journal unreachable: journal postgresql://user@host:port/db: ...``; ``GET /v1/runs``
and ``GET /v1/review`` answered 409 "journal the journal: the connection is closed"; a
``POST /v1/decide`` answered a bare 500 ("internal error", the server logging a
traceback of ``_NotStarted`` and dropping the connection) or a 500 naming the URL. On
SQLite a busy journal (another writer holding the lock) was a 409 "journal the journal
is locked ...". The PostgreSQL tests start their own throw-away server (as
``test_store_pg_reconnect.py`` does) so that they can stop and start it.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dissensus.serve import ServeSettings, create_app
from dissensus.store.errors import JournalError, JournalReadOnly
from pg_server import PgServer, free_port, pg_server
from pipeline_cases import panel, write_policy
from serve_helpers import auth, client_for, settings, write_tokens

pytestmark = pytest.mark.anyio

SECRET = "pw-never-shown"
UNREACHABLE = "the journal is unreachable"
BUSY = "the journal is busy"


def _panel(pid: str) -> dict[str, Any]:
    return panel(pid, ["1", "1", "1"], swap=["1", "1", "1"])


def _no_location(text: str, *places: str) -> None:
    assert "postgres" not in text.lower(), text
    assert SECRET not in text, text
    assert "journal the journal" not in text, text
    for place in places:
        assert place not in text, (place, text)


# -- the messages ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "said"),
    [
        (
            "journal postgresql://u:***@db.example:5432/jr?sslmode=require: the connection is closed",
            "the journal: the connection is closed",
        ),
        ("journal /srv/j.sqlite is read-only: attempt", "the journal is read-only: attempt"),
        (
            "cannot open journal /srv/j.sqlite: no such file",
            "cannot open the journal: no such file",
        ),
        ("not a dissensus journal: /srv/j.sqlite: bad", "not a dissensus journal: bad"),
        ("run r1 not found in journal /srv/j.sqlite", "run r1 not found"),
        ("no item r.1 in /srv/j.sqlite", "no item r.1"),
        ("JournalError: journal postgres://u@h/d: gone", "JournalError: the journal: gone"),
        (
            "resolve it with `dissensus review resolve r.1 --journal /srv/j.sqlite`",
            "resolve it with `dissensus review resolve r.1 --journal JOURNAL`",
        ),
        (
            "resume it first (dissensus runs resume r --journal postgres://u@h/d)",
            "resume it first (dissensus runs resume r --journal JOURNAL)",
        ),
    ],
)
def test_scrub_drops_the_location_without_garbling(message: str, said: str) -> None:
    from dissensus.serve.journal_errors import scrub

    assert scrub(message, ["/srv/j.sqlite"]) == said


def test_scrub_keeps_a_shell_quoted_journal_option_whole() -> None:
    from dissensus.serve.journal_errors import scrub

    said = scrub("run: dissensus runs resume r --journal '/srv/my j.sqlite'.", ["/srv/my j.sqlite"])
    assert said == "run: dissensus runs resume r --journal JOURNAL."


# -- SQLite ---------------------------------------------------------------------------


async def test_sqlite_busy_journal_is_503_with_retry_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISSENSUS_JOURNAL_BUSY_TIMEOUT", "0.2")
    s = settings(tmp_path)
    async with client_for(s) as client:
        assert (await client.post("/v1/decide", json=_panel("p0"), headers=auth("sub"))).is_success
        holder = sqlite3.connect(s.journal, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        try:
            for query in ("?async=true", ""):
                res = await client.post(
                    f"/v1/decide{query}", json=_panel("p1"), headers=auth("sub")
                )
                assert res.status_code == 503, res.text
                assert res.headers["retry-after"].isdigit()
                assert BUSY in res.json()["error"]
                _no_location(res.text, s.journal, str(tmp_path))
            # reads are not held up by a writer (WAL)
            assert (await client.get("/v1/runs", headers=auth("sub"))).status_code == 200
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        res = await client.post("/v1/decide", json=_panel("p2"), headers=auth("sub"))
        assert res.status_code == 200, res.text


async def test_sqlite_unreachable_and_read_only_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = settings(tmp_path)
    app = create_app(s)
    journal = app.state.service.journal
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:

        def unreachable(*_: Any, **__: Any) -> Any:
            raise JournalError(f"journal {s.journal}: unable to open database file")

        monkeypatch.setattr(journal, "run", unreachable)
        monkeypatch.setattr(journal, "runs", unreachable)
        for path, headers in (("/readyz", {}), ("/v1/runs", auth("sub"))):
            res = await client.get(path, headers=headers)
            assert res.status_code == 503, (path, res.text)
            assert res.json() == {"error": UNREACHABLE, "field": None}
            assert res.headers["retry-after"].isdigit()

        def read_only(*_: Any, **__: Any) -> Any:
            raise JournalReadOnly(f"journal {s.journal} is read-only: attempt to write")

        monkeypatch.setattr(journal, "runs", read_only)
        res = await client.get("/v1/runs", headers=auth("sub"))
        assert res.status_code == 409, res.text  # not transient: as before
        assert res.json()["error"] == "the journal is read-only: attempt to write"
        assert "retry-after" not in res.headers


# -- PostgreSQL -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[PgServer]:
    yield from pg_server("jdown", SECRET)


def _places(server: PgServer) -> tuple[str, ...]:
    return ("127.0.0.1", str(server.port), "jdown", "postgres://", SECRET)


async def _until_ok(client: httpx.AsyncClient, method: str, url: str, **kw: Any) -> httpx.Response:
    """The service recovers by itself once the database is back (a retry or two)."""
    for _ in range(20):
        res = await client.request(method, url, **kw)
        if res.status_code != 503:
            return res
        time.sleep(0.25)
    return res


async def test_postgres_down_is_503_without_the_url_and_recovers(
    server: PgServer, tmp_path: Path
) -> None:
    s = ServeSettings(
        journal=server.url,
        policy=str(write_policy(tmp_path / "policy.yaml")),
        tokens=str(write_tokens(tmp_path / "tokens.txt")),
    )
    async with client_for(s) as client:
        for query in ("", "?async=true"):  # the run loops hold their connections
            res = await client.post(f"/v1/decide{query}", json=_panel("p0"), headers=auth("sub"))
            assert res.is_success, res.text
        server.stop()
        try:
            answers = []
            for _ in range(3):
                for method, url, body in (
                    ("GET", "/readyz", None),
                    ("GET", "/v1/runs", None),
                    ("GET", "/v1/review?limit=1", None),
                    ("POST", "/v1/decide", _panel("p1")),
                    ("POST", "/v1/decide?async=true", _panel("p2")),
                ):
                    headers = auth("adm") if url != "/readyz" else {}
                    res = await client.request(method, url, json=body, headers=headers)
                    answers.append((url, res.status_code))
                    assert res.status_code == 503, (url, res.text)
                    assert res.headers["retry-after"].isdigit(), url
                    assert UNREACHABLE in res.json()["error"], (url, res.text)
                    _no_location(res.text, *_places(server))
        finally:
            server.start()
        res = await _until_ok(client, "POST", "/v1/decide", json=_panel("p3"), headers=auth("sub"))
        assert res.status_code == 200, res.text
        res = await _until_ok(
            client, "POST", "/v1/decide?async=true", json=_panel("p4"), headers=auth("sub")
        )
        assert res.status_code == 202, res.text
        assert (await client.get("/readyz")).status_code == 200
        assert (await client.get("/v1/runs", headers=auth("sub"))).status_code == 200


def test_the_run_threads_connect_with_the_password(
    server: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Journal.path`` shows the URL's password masked; the run threads' own
    connections are opened with the URL as given, not with the mask."""
    from dissensus.serve.journal_adapter import open_journal
    from dissensus.serve.service import _reopener

    with open_journal(server.url) as journal:
        assert SECRET not in journal.path
        opener = _reopener(journal, server.url)
        assert opener is not None
        seen: list[str] = []
        import dissensus.serve.service as service_module

        def spy(target: str, **kw: Any) -> Any:
            seen.append(target)
            return open_journal(target, **kw)

        monkeypatch.setattr(service_module, "open_journal", spy)
        opener().close()
        assert seen == [server.url]


def test_a_real_server_answers_503_on_one_connection_without_tracebacks(
    server: PgServer, tmp_path: Path
) -> None:
    """``dissensus serve`` with the database stopped: 30 decides on one keep-alive
    connection are all 503 (none reset), the log holds one line per failure, masked, and
    no traceback."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [
        sys.executable, "-m", "dissensus", "serve", "--journal", server.url, "--port", str(port),
        "--policy", str(write_policy(tmp_path / "policy.yaml")),
        "--tokens", str(write_tokens(tmp_path / "tokens.txt")),
    ]  # fmt: skip
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=30, headers=auth("sub")) as client:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, log_path.read_text(encoding="utf-8")
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.1)
            for query in ("", "?async=true"):
                assert client.post(f"/v1/decide{query}", json=_panel("p0")).is_success
            server.stop()
            try:
                statuses = []
                for i in range(30):
                    query = "?async=true" if i % 2 else ""
                    res = client.post(f"/v1/decide{query}", json=_panel(f"p{i}"))
                    statuses.append(res.status_code)
                    assert res.headers["retry-after"].isdigit()
                    _no_location(res.text, *_places(server))
                assert statuses == [503] * 30, statuses
                res = client.get("/readyz")
                assert res.status_code == 503
                _no_location(res.text, *_places(server))
            finally:
                server.start()
            for _ in range(20):
                res = client.post("/v1/decide", json=_panel("back"))
                if res.status_code == 200:
                    break
                time.sleep(0.25)
            assert res.status_code == 200, res.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log_path.read_text(encoding="utf-8")
    assert "Traceback" not in text, text
    assert "Exception in ASGI" not in text, text
    assert SECRET not in text, text
    assert "the connection is closed" in text or "cannot open" in text or "refused" in text, text
