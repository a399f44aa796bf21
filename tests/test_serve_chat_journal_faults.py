"""The panel door when its journal fails: a busy or unreachable journal is a ``503`` with
``Retry-After`` that never names the journal, and a commit whose acknowledgement was
lost is answered from what the journal holds.

Before: ``POST /v1/chat/completions`` with another writer holding the journal's lock
answered ``500`` ``decide_failed`` "the pipeline failed: journal PATH-OR-URL is locked
by another writer ...", and :meth:`PanelChat.acomplete` raised that 500. A commit that
went through but whose acknowledgement was lost (the connection dropped right after the
server's COMMIT) was a 500 on the chat door (a client's retry made a second case) and a
``503`` "the journal is unreachable" on ``POST /v1/decide``, whose run then read
``finished`` with that error.

Members answer in-process (every one the sum of the numbers in the question), the
journal is real (SQLite, and PostgreSQL when ``$DISSENSUS_TEST_PG`` names a server);
another connection holds its write lock.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from adding_members import body as _body
from adding_members import members as _members
from adding_members import section as _section
from dissensus.panels import ChatError, PanelChat
from dissensus.pipeline import CaseRecord
from dissensus.pipeline.policy import policy_from_dict
from dissensus.serve import ServeSettings, create_app
from dissensus.store.journal import Journal
from serve_helpers import auth, write_tokens

pytestmark = pytest.mark.anyio

BUSY_TIMEOUT_S = "0.3"


@contextmanager
def _lock_held(target: str) -> Iterator[None]:
    """Another connection holds the journal's write lock (SQLite: ``BEGIN IMMEDIATE``;
    PostgreSQL: the events table locked against every writer)."""
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target) as conn:
            conn.execute("LOCK TABLE events IN EXCLUSIVE MODE")
            try:
                yield
            finally:
                conn.rollback()
        return
    holder = sqlite3.connect(target, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def _places(target: str) -> list[str]:
    """What of the journal's location must not reach a client."""
    if target.startswith("postgresql://"):
        return ["postgres", "127.0.0.1", target.rsplit("/", 1)[-1].split("?")[0]]
    return [target, str(Path(target).parent)]


def _no_location(text: str, target: str) -> None:
    for place in _places(target):
        assert place not in text, (place, text)
    assert "journal the journal" not in text, text


def _app(root: Path, target: str) -> Any:
    write_tokens(root / "tokens.txt")
    (root / "script.yaml").write_text("default: '0'\n", encoding="utf-8")
    (root / "policy.json").write_text(
        json.dumps({"reading": {"similarity": "tfidf"}, "panel": _section("scripted:script.yaml")}),
        encoding="utf-8",
    )
    settings = ServeSettings(
        journal=target, policy=str(root / "policy.json"), tokens=str(root / "tokens.txt")
    )
    app = create_app(settings)
    app.state.chat.members = _members()  # the scripted members replaced, in this process
    return app


@contextmanager
def _served(root: Path, target: str) -> Iterator[tuple[Any, httpx.AsyncClient]]:
    app = _app(root, target)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")
    try:
        yield app, client
    finally:
        app.state.chat.close()
        app.state.service.journal.close()


def _runs(target: str) -> int:
    with Journal(target) as journal:
        return len(journal.runs())


# -- a busy journal ---------------------------------------------------------------------


async def test_a_busy_journal_is_503_journal_busy_without_its_location(
    journal_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    monkeypatch.setenv("DISSENSUS_JOURNAL_BUSY_TIMEOUT", BUSY_TIMEOUT_S)
    with _served(tmp_path, journal_target) as (_, client):
        async with client:
            with _lock_held(journal_target), caplog.at_level("WARNING", "dissensus.serve"):
                res = await client.post("/v1/chat/completions", json=_body(), headers=auth("sub"))
            assert res.status_code == 503, res.text
            assert res.headers["retry-after"].isdigit()
            assert res.headers["x-should-retry"] == "true"
            error = res.json()["error"]
            assert error["code"] == "journal_busy"
            assert error["type"] == "server_error"
            assert "the journal is busy" in error["message"]
            _no_location(res.text, journal_target)
            # The detail is the server log's: the store's own sentence, once.
            logged = [r.getMessage() for r in caplog.records if r.name == "dissensus.serve"]
            assert any("JournalBusy" in line and "locked" in line for line in logged), logged
            # Nothing journalled; once the lock is free the same request is answered.
            assert _runs(journal_target) == 0
            res = await client.post("/v1/chat/completions", json=_body(), headers=auth("sub"))
            assert res.status_code == 200, res.text
            assert res.json()["dissensus"]["suggestion"] == "7"


async def test_the_library_call_raises_a_503_chat_error_with_a_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISSENSUS_JOURNAL_BUSY_TIMEOUT", BUSY_TIMEOUT_S)
    target = str(tmp_path / "journal.sqlite")
    policy = policy_from_dict({"reading": {"similarity": "tfidf"}, "panel": _section()})
    with Journal(target) as journal:
        chat = PanelChat(policy, journal=journal, members=_members())
        try:
            with _lock_held(target), pytest.raises(ChatError) as raised:
                await chat.acomplete(_body())
            done = await chat.acomplete(_body())
        finally:
            await chat.aclose()
    error = raised.value
    assert (error.status, error.code, error.type) == (503, "journal_busy", "server_error")
    assert target not in error.message and str(tmp_path) not in error.message
    # The store's own error (naming the journal) is the cause, for the library's user.
    assert target in str(error.__cause__)
    assert done.dissensus.suggestion == "7"


async def test_a_read_only_journal_is_a_500_that_does_not_name_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal fault that is no outage (read-only: not transient) stays a ``500``
    ``decide_failed``, its message without the journal's path."""
    from dissensus.store.sqlite import SQLiteBackend

    def read_only(backend: Any) -> None:
        raise sqlite3.OperationalError("attempt to write a readonly database")

    target = str(tmp_path / "journal.sqlite")
    with _served(tmp_path, target) as (_, client):
        async with client:
            monkeypatch.setattr(SQLiteBackend, "commit", read_only)
            res = await client.post("/v1/chat/completions", json=_body(), headers=auth("sub"))
    assert res.status_code == 500, res.text
    error = res.json()["error"]
    assert error["code"] == "decide_failed"
    assert "the journal is read-only" in error["message"]
    _no_location(res.text, target)


@pytest.mark.parametrize(
    ("fault", "code", "said"),
    [
        ("JournalError", "journal_unavailable", "the journal is unreachable"),
        ("JournalBusy", "journal_busy", "the journal is busy"),
    ],
)
async def test_a_case_looked_up_on_a_busy_or_unreachable_journal_is_the_doors_503(
    journal_target: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: Any,
    fault: str,
    code: str,
    said: str,
) -> None:
    """``GET /v1/cases/{id}`` when the journal cannot be read answers as the chat route
    does: ``503`` ``journal_unavailable`` / ``journal_busy``, ``Retry-After``,
    ``x-should-retry: true``, a fixed message without the journal's location, the detail
    in the server's log (before: ``code`` ``unavailable`` and no ``x-should-retry``);
    the library call raises that ``ChatError``. Its other refusals stay the door's."""
    from dissensus.store import errors

    with _served(tmp_path, journal_target) as (app, client):
        async with client:
            res = await client.post("/v1/chat/completions", json=_body(), headers=auth("sub"))
            case_id = res.json()["dissensus"]["case_id"]
            with monkeypatch.context() as patched:

                def run(self: Journal, run_id: str, **_: Any) -> Any:
                    raise getattr(errors, fault)(f"journal {self.path}: connection lost")

                patched.setattr(Journal, "run", run)
                with caplog.at_level("WARNING", "dissensus.serve"):
                    res = await client.get(f"/v1/cases/{case_id}", headers=auth("sub"))
                with pytest.raises(ChatError) as raised:
                    await app.state.chat.acase(case_id)
            assert res.status_code == 503, res.text
            assert res.headers["retry-after"].isdigit()
            assert res.headers["x-should-retry"] == "true"
            error = res.json()["error"]
            assert (error["code"], error["type"]) == (code, "server_error"), error
            assert error["message"].startswith(said), error
            _no_location(res.text, journal_target)
            logged = [r.getMessage() for r in caplog.records if r.name == "dissensus.serve"]
            assert any(fault in line and "connection lost" in line for line in logged), logged
            assert (raised.value.status, raised.value.code) == (503, code)
            assert isinstance(raised.value.__cause__, errors.JournalError)
            # The journal back: the case; an unknown case and a missing token are the door's.
            res = await client.get(f"/v1/cases/{case_id}", headers=auth("sub"))
            assert res.status_code == 200, res.text
            assert res.json()["case_id"] == case_id
            res = await client.get(f"/v1/cases/{case_id}0", headers=auth("sub"))
            assert res.status_code == 404, res.text
            assert res.json()["error"]["code"] == "unknown_case"
            assert res.json()["error"]["type"] == "invalid_request_error"
            res = await client.get(f"/v1/cases/{case_id}")
            assert res.status_code == 401, res.text
            assert res.headers["www-authenticate"] == "Bearer"
            assert res.json()["error"]["code"] == "invalid_api_key"
            assert res.json()["error"]["type"] == "authentication_error"


# -- a commit whose acknowledgement is lost ----------------------------------------------


class _Faults:
    """Faults injected into the real journal: the next commit goes through, then fails
    as a connection lost at that moment fails (the driver's error, which the store
    translates; :meth:`arm` can pick a later commit, and one that does not go through);
    with ``reads_fail``, reads of the journal then fail too, until :meth:`heal`; with
    ``locks_fail`` giving back a run's lock fails too (as writes fail in an outage),
    until :meth:`heal` (:meth:`heal_reads` leaves a journal that can be read and not
    written); with ``opens_fail`` so does opening a new connection (a run loop's).

    A lock's release fails where a real one meets the database, the DELETE of its row
    (:meth:`RunLocks.release`), never before :meth:`Journal.release_run_lock` forgets a
    deferred run it registered: that part is the journal object's bookkeeping, asks the
    database nothing and cannot fail in an outage. A release refused before it (as this
    injection first did) left a chat case's run registered as not created yet on the
    door's journal object after its commit went through, so every read of it there found
    nothing: ``GET /v1/cases/{id}`` answered ``404`` after the journal was back, which
    no real outage does."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        target: str,
        reads_fail: bool,
        *,
        locks_fail: bool = False,
        opens_fail: bool = False,
    ) -> None:
        self.armed = False
        self.skip = 0
        self.through = True
        self.down = False
        self.locks_down = False
        self.opens_down = False
        self.lost = 0
        self._reads_fail = reads_fail
        self._locks_fail = locks_fail
        self._opens_fail = opens_fail
        if target.startswith("postgresql://"):
            import psycopg

            from dissensus.store.postgres import PostgresBackend as backend

            error: type[Exception] = psycopg.OperationalError
            said = "consuming input failed: server closed the connection unexpectedly"
        else:
            from dissensus.store.sqlite import SQLiteBackend as backend  # type: ignore[assignment]

            error, said = sqlite3.OperationalError, "disk I/O error"
        from dissensus.serve import service
        from dissensus.store.errors import JournalError
        from dissensus.store.locks import RunLocks

        real_commit = backend.commit
        real_get = Journal.get
        real_release = RunLocks.release
        real_open = service.open_journal
        faults = self

        def commit(self: Any) -> None:
            if not faults.armed or faults.skip:
                faults.skip -= 1 if faults.armed else 0
                real_commit(self)
                return
            if faults.through:
                real_commit(self)
            faults.armed = False
            faults.lost += 1
            faults.down = faults._reads_fail
            faults.locks_down = faults._locks_fail
            faults.opens_down = faults._opens_fail
            raise error(said)

        def get(self: Journal, run_id: str, key: str) -> Any:
            if faults.down:
                raise JournalError(f"journal {self.path}: {said}")
            return real_get(self, run_id, key)

        def release(self: RunLocks, run_id: str, pid: int | None = None) -> None:
            if faults.locks_down:
                faults.refused += 1
                raise JournalError(f"journal {target}: {said}")
            real_release(self, run_id, pid)
            faults.given.append(run_id)

        def open_journal(target: str, **kwargs: Any) -> Journal:
            if faults.opens_down:
                raise JournalError(f"journal {target}: {said}")
            return real_open(target, **kwargs)

        self.refused = 0
        self.given: list[str] = []
        """Runs whose lock was given back (once the journal took it)."""
        monkeypatch.setattr(backend, "commit", commit)
        monkeypatch.setattr(Journal, "get", get)
        monkeypatch.setattr(RunLocks, "release", release)
        monkeypatch.setattr(service, "open_journal", open_journal)

    def arm(self, *, skip: int = 0, through: bool = True) -> None:
        """The commit after the next ``skip`` fails; ``through``: it went through first
        (its acknowledgement lost), else it did not (rolled back)."""
        self.armed, self.skip, self.through = True, skip, through

    def heal_reads(self) -> None:
        """The journal can be read again (not yet written)."""
        self.down = False

    def heal(self) -> None:
        self.down = self.locks_down = self.opens_down = False


def _decide_panel(pid: str) -> dict[str, Any]:
    from pipeline_cases import panel

    return panel(pid, ["1", "1", "1"], swap=["1", "1", "1"])


async def test_a_chat_case_whose_commit_acknowledgement_is_lost_is_answered(
    journal_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit went through: the journal holds the case, so the request is answered
    with it (before: a 500, and a client's retry made a second case)."""
    faults = _Faults(monkeypatch, journal_target, reads_fail=False)
    with _served(tmp_path, journal_target) as (_, client):
        async with client:
            faults.arm()
            res = await client.post("/v1/chat/completions", json=_body(), headers=auth("sub"))
            assert faults.lost == 1
            assert res.status_code == 200, res.text
            done = res.json()["dissensus"]
            assert done["suggestion"] == "7"
            case = await client.get(f"/v1/cases/{done['case_id']}", headers=auth("sub"))
            assert case.status_code == 200, case.text
            assert case.json()["record"]["suggestion"] == "7"
    assert _runs(journal_target) == 1  # one case, journalled once


@pytest.mark.parametrize("locks_fail", [False, True], ids=["locks-given", "locks-refused"])
async def test_a_chat_case_whose_outcome_cannot_be_told_names_the_case(
    journal_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, locks_fail: bool
) -> None:
    """The journal still unreachable when the door looks: a 503 that says the case may be
    journalled and names it, never the journal; asking for the case then answers it,
    also when the outage refuses every lock's release: the case's run was created by its
    one commit, without a lock, so nothing of its release asks the journal (a release
    refused before the journal object forgot the run it had registered left the case
    unknown to the door, ``404`` after the journal was back: see :class:`_Faults`)."""
    faults = _Faults(monkeypatch, journal_target, reads_fail=True, locks_fail=locks_fail)
    with _served(tmp_path, journal_target) as (_, client):
        async with client:
            faults.arm()
            res = await client.post("/v1/chat/completions", json=_body(), headers=auth("sub"))
            assert res.status_code == 503, res.text
            assert res.headers["retry-after"].isdigit()
            assert res.headers["x-should-retry"] == "false"  # a retry may make a second case
            body = res.json()
            assert body["error"]["code"] == "journal_unavailable_case_unknown"
            case_id = body["dissensus"]["case_id"]
            assert f"GET /v1/cases/{case_id}" in body["error"]["message"]
            _no_location(res.text, journal_target)
            assert faults.refused == 0  # nothing asked the journal to give a lock back
            faults.heal()
            case = await client.get(f"/v1/cases/{case_id}", headers=auth("sub"))
            assert case.status_code == 200, case.text
            assert case.json()["record"]["suggestion"] == "7"


async def test_a_decide_run_whose_commit_acknowledgement_is_lost_is_answered(
    journal_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``POST /v1/decide``, one panel and a list: the journal holds the finished run, so
    the answer is its records, and the run's status carries no error (before: 503 "the
    journal is unreachable", and the run ``finished`` with that error)."""
    from serve_helpers import client_for, settings

    faults = _Faults(monkeypatch, journal_target, reads_fail=False)
    async with client_for(settings(tmp_path, journal=journal_target)) as client:
        faults.arm()
        res = await client.post("/v1/decide", json=_decide_panel("p1"), headers=auth("sub"))
        assert faults.lost == 1
        assert res.status_code == 200, res.text
        assert res.json()["id"] == "p1"
        run_id = res.headers["x-dissensus-run"]
        faults.arm()
        batch = [_decide_panel("p2"), _decide_panel("p3"), {"id": "bad"}]
        res = await client.post("/v1/decide", json=batch, headers=auth("sub"))
        assert faults.lost == 2
        assert res.status_code == 200, res.text
        answer = res.json()
        assert answer["status"] == "finished"
        assert [r["id"] for r in answer["records"]] == ["p2", "p3"]
        assert [r["index"] for r in answer["rejects"]] == [2]
        for run in (run_id, answer["run_id"]):
            doc = (await client.get(f"/v1/runs/{run}", headers=auth("sub"))).json()
            assert (doc["status"], doc["error"]) == ("finished", None), doc


async def test_a_decide_run_whose_outcome_cannot_be_told_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal still unreachable when the server looks: 503 with ``Retry-After``
    naming the run to look up; once it is back the run reads finished, without error."""
    from serve_helpers import client_for, settings

    target = str(tmp_path / "journal.sqlite")
    faults = _Faults(monkeypatch, target, reads_fail=True)
    async with client_for(settings(tmp_path, journal=target)) as client:
        faults.arm()
        res = await client.post("/v1/decide", json=_decide_panel("p1"), headers=auth("sub"))
        assert res.status_code == 503, res.text
        assert res.headers["retry-after"].isdigit()
        run_id = res.json()["run_id"]
        assert f"may be journalled all the same: GET /v1/runs/{run_id}" in res.json()["error"]
        _no_location(res.text, target)
        faults.heal()
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        assert (doc["status"], doc["error"], doc["done"]) == ("finished", None, 1), doc


async def _ended(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    """The run's document once it is no longer ``running`` (at most 60 s)."""
    import asyncio

    for _ in range(600):
        doc: dict[str, Any] = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        if doc.get("status") != "running":
            return doc
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run_id} still running: {doc}")


async def test_an_async_decide_run_whose_start_acknowledgement_is_lost_is_started(
    journal_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``POST /v1/decide?async=true``: the run's start (its one commit before the answer)
    went through, only its acknowledgement was lost. The run exists, so the answer is the
    usual ``202`` naming it, and the run is decided: it ends ``finished``, without error,
    its lock released, once in the journal (before: ``503`` "the journal is unreachable",
    and the run stayed undecided, on SQLite ``running`` under this process's lock)."""
    from serve_helpers import client_for, settings

    faults = _Faults(monkeypatch, journal_target, reads_fail=False)
    async with client_for(settings(tmp_path, journal=journal_target)) as client:
        faults.arm()
        batch = [_decide_panel("p1"), {"id": "bad"}]
        res = await client.post("/v1/decide?async=true", json=batch, headers=auth("sub"))
        assert faults.lost == 1
        assert res.status_code == 202, res.text
        started = res.json()
        run_id = started["run_id"]
        assert started["status"] == "running"
        assert started["links"]["run"] == f"/v1/runs/{run_id}"
        doc = await _ended(client, run_id)
        assert (doc["status"], doc["error"], doc["done"], doc["rejected"]) == (
            "finished",
            None,
            1,
            1,
        ), doc
        assert [r["id"] for r in doc["records"]] == ["p1"]
    with Journal(journal_target) as journal:
        assert [r.run_id for r in journal.runs()] == [run_id]
        assert journal.run_lock_holder(run_id) is None


async def test_an_async_decide_run_whose_start_cannot_be_told_names_the_run(
    journal_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal still unreachable when the server looks (giving back the run's lock
    fails too): ``503`` with ``Retry-After`` naming the run to poll before submitting
    again, never the journal's location. Once the journal is back the run reads
    ``incomplete`` (journalled, not decided), its lock given back at that look, so
    ``dissensus runs resume`` takes it; its error says how (before: the lock stayed
    held by the server's process, and the command was refused while it ran)."""
    from dissensus.pipeline import execute_run
    from serve_helpers import client_for, settings

    faults = _Faults(monkeypatch, journal_target, reads_fail=True, locks_fail=True)
    async with client_for(settings(tmp_path, journal=journal_target)) as client:
        faults.arm()
        res = await client.post(
            "/v1/decide?async=true", json=[_decide_panel("p1")], headers=auth("sub")
        )
        assert res.status_code == 503, res.text
        assert res.headers["retry-after"].isdigit()
        body = res.json()
        run_id = body["run_id"]
        assert f"poll GET /v1/runs/{run_id} before submitting again" in body["error"]
        assert "the journal is unreachable" in body["error"]
        _no_location(res.text, journal_target)
        faults.heal()
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        assert (doc["status"], doc["done"]) == ("incomplete", 0), doc
        assert f"dissensus runs resume {run_id}" in doc["error"]
        _no_location(json.dumps(doc), journal_target)
    with Journal(journal_target) as journal:
        assert [r.run_id for r in journal.runs()] == [run_id]
        assert journal.run_lock_holder(run_id) is None
        records = [r async for r in execute_run(journal, run_id)]  # as runs resume does
        assert [r.id for r in records] == ["p1"]


def _resume(target: str, run_id: str) -> subprocess.CompletedProcess[str]:
    """``dissensus runs resume`` in a process of its own (the server's lock is not its)."""
    return subprocess.run(
        [sys.executable, "-m", "dissensus", "runs", "resume", run_id, "--journal", target],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _holder_pid(target: str, run_id: str) -> int | None:
    with Journal(target) as journal:
        holder = journal.run_lock_holder(run_id)
    return None if holder is None else holder.pid


async def test_an_async_decide_run_whose_lock_the_journal_refuses_is_running_until_given_back(
    journal_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal can be read again but not written: the lock the run's start took
    cannot be given back yet, so the run reads ``running`` (as its lock says) with an
    error saying it cannot be resumed until then, never ``resume with`` (before: it read
    ``incomplete ... resume with: dissensus runs resume ID``, and that command was refused,
    ``run ID is being resumed by pid N``, for as long as the server ran). Once the
    journal takes writes, the next look gives the lock back: ``incomplete``, and
    ``dissensus runs resume`` in another process decides the run."""
    from dissensus.serve import run_faults
    from serve_helpers import client_for, settings

    monkeypatch.setattr(run_faults, "GIVE_BACK_EVERY", 3600.0)  # only a look gives it back here
    faults = _Faults(monkeypatch, journal_target, reads_fail=True, locks_fail=True)
    async with client_for(settings(tmp_path, journal=journal_target)) as client:
        faults.arm()
        res = await client.post(
            "/v1/decide?async=true", json=[_decide_panel("p1")], headers=auth("sub")
        )
        assert res.status_code == 503, res.text
        run_id = res.json()["run_id"]
        assert faults.refused == 1
        assert "running: it was, and this server still holds its lock" in res.json()["error"]
        faults.heal_reads()
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        assert (doc["status"], doc["done"]) == ("running", 0), doc
        assert f"cannot be resumed: poll GET /v1/runs/{run_id}" in doc["error"]
        assert "dissensus runs resume" not in doc["error"]
        _no_location(json.dumps(doc), journal_target)
        events = await client.get(f"/v1/runs/{run_id}/events", headers=auth("sub"))
        assert events.text.startswith("event: running\n"), events.text
        assert "cannot be resumed" in events.text
        assert faults.refused == 3  # given back again at each look
        if not journal_target.startswith("postgresql://"):
            assert _holder_pid(journal_target, run_id) == os.getpid()
        faults.heal()
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        assert (doc["status"], doc["done"]) == ("incomplete", 0), doc
        assert f"dissensus runs resume {run_id}" in doc["error"]
        assert run_id in faults.given
        assert _holder_pid(journal_target, run_id) is None
        resumed = await asyncio.to_thread(_resume, journal_target, run_id)
        assert resumed.returncode == 0, resumed.stderr
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        assert (doc["status"], doc["done"], doc["error"]) == ("finished", 1, None), doc


async def test_a_lock_the_journal_refused_is_given_back_once_it_is_back_unasked(
    journal_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nobody asks for the run: the server gives its lock back all the same, within
    moments of the journal's return (tried again every ``GIVE_BACK_EVERY`` seconds)."""
    from dissensus.serve import run_faults
    from serve_helpers import client_for, settings

    monkeypatch.setattr(run_faults, "GIVE_BACK_EVERY", 0.02)
    faults = _Faults(monkeypatch, journal_target, reads_fail=True, locks_fail=True)
    async with client_for(settings(tmp_path, journal=journal_target)) as client:
        faults.arm()
        res = await client.post(
            "/v1/decide?async=true", json=[_decide_panel("p1")], headers=auth("sub")
        )
        assert res.status_code == 503, res.text
        run_id = res.json()["run_id"]
        await asyncio.sleep(0.15)
        assert faults.refused > 1  # tried again while the journal was down
        faults.heal()
        for _ in range(500):
            if run_id in faults.given:
                break
            await asyncio.sleep(0.02)
        assert faults.given == [run_id]
        assert _holder_pid(journal_target, run_id) is None
        refused = faults.refused
        await asyncio.sleep(0.15)
        assert (faults.refused, faults.given) == (refused, [run_id])  # and tried no more


async def _stopped(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    """The run's document once it no longer decides: not ``running``, or ``running``
    only as a run this server stopped and still holds the lock of (at most 60 s)."""
    for _ in range(600):
        doc: dict[str, Any] = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        if doc.get("status") != "running" or "cannot be resumed" in (doc.get("error") or ""):
            return doc
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run_id} still running: {doc}")


def _resumable(doc: dict[str, Any], run_id: str) -> None:
    """A run stopped by the journal that holds it: ``incomplete``, its error giving the
    resume command (the journal masked), not a resubmission."""
    assert doc["status"] == "incomplete", doc
    assert f"dissensus runs resume {run_id} --journal JOURNAL" in doc["error"], doc
    assert "not by submitting it again" in doc["error"], doc


async def test_an_async_decide_run_resumed_without_a_connection_gives_its_lock_back(
    journal_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start's acknowledgement was lost and the journal holds the run, so it is
    decided from its start on a new connection; that cannot be opened, nor the lock
    given back: the run stops, journalled (its start), so it reads ``running`` while
    the server holds its lock, then ``incomplete`` with the resume command (before:
    ``failed``, the journal's error, which invites submitting it again: a second run).
    Once the journal is back the lock its start took is given back and ``dissensus runs
    resume`` in another process decides the run (before: the lock was never released,
    the command refused while the server ran)."""
    from serve_helpers import client_for, settings

    faults = _Faults(
        monkeypatch, journal_target, reads_fail=False, locks_fail=True, opens_fail=True
    )
    async with client_for(settings(tmp_path, journal=journal_target)) as client:
        faults.arm()
        res = await client.post(
            "/v1/decide?async=true", json=[_decide_panel("p1")], headers=auth("sub")
        )
        assert res.status_code == 202, res.text
        run_id = res.json()["run_id"]
        doc = await _stopped(client, run_id)
        assert (doc["status"], doc["done"]) == ("running", 0), doc
        assert "dissensus runs resume" not in doc["error"], doc
        assert faults.refused >= 1
        if not journal_target.startswith("postgresql://"):
            assert _holder_pid(journal_target, run_id) == os.getpid()
        faults.heal()
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        _resumable(doc, run_id)
        assert doc["error"].startswith("the journal is unreachable"), doc
        assert run_id in faults.given
        assert _holder_pid(journal_target, run_id) is None
        resumed = await asyncio.to_thread(_resume, journal_target, run_id)
        assert resumed.returncode == 0, resumed.stderr
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        assert (doc["status"], doc["done"], doc["error"]) == ("finished", 1, None), doc


def _panels(n: int) -> list[dict[str, Any]]:
    return [_decide_panel(f"p{i}") for i in range(1, n + 1)]


async def test_a_decide_run_stopped_part_way_by_the_journal_is_resumable_not_resubmitted(
    journal_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``POST /v1/decide`` (waiting): the run's first case is committed (which creates
    the run), the second case's commit fails and the outage refuses the lock's release
    too. The journal holds the run, resumable, so the ``503`` says so without
    ``Retry-After`` and gives the resume command (before: ``failed`` with ``Retry-After``
    "the journal is unreachable", which a client follows by submitting the panels again:
    a second run deciding them again). The run reads ``running`` while the server holds
    its lock, ``incomplete`` once the journal takes it, and ``dissensus runs resume``
    finishes it: one run, every panel decided once."""
    from dissensus.pipeline import batch
    from serve_helpers import client_for, settings

    monkeypatch.setattr(batch, "BLOCK_CASES", 1)  # one commit per case
    faults = _Faults(monkeypatch, journal_target, reads_fail=False, locks_fail=True)
    async with client_for(settings(tmp_path, journal=journal_target)) as client:
        faults.arm(skip=1, through=False)
        res = await client.post("/v1/decide", json=_panels(3), headers=auth("sub"))
        assert faults.lost == 1
        assert res.status_code == 503, res.text
        assert "retry-after" not in res.headers
        run_id = res.json()["run_id"]
        error = res.json()["error"]
        assert error.startswith(f"run {run_id}: the journal is unreachable"), error
        assert (
            f"dissensus runs resume {run_id} --journal JOURNAL once GET /v1/runs/{run_id}" in error
        )
        assert "not by submitting it again" in error
        _no_location(res.text, journal_target)
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        assert (doc["status"], doc["done"]) == ("running", 1), doc  # its lock still held
        faults.heal()
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        _resumable(doc, run_id)
        assert (doc["done"], doc["total"]) == (1, 3), doc
        _no_location(json.dumps(doc), journal_target)
        events = await client.get(f"/v1/runs/{run_id}/events", headers=auth("sub"))
        assert "event: incomplete\n" in events.text, events.text
        resumed = await asyncio.to_thread(_resume, journal_target, run_id)
        assert resumed.returncode == 0, resumed.stderr
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        assert (doc["status"], doc["done"], doc["error"]) == ("finished", 3, None), doc
    assert _runs(journal_target) == 1


async def test_an_async_decide_run_stopped_part_way_by_the_journal_is_resumable(
    journal_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``POST /v1/decide?async=true``: its start was acknowledged, so when a later commit
    fails and the journal cannot be read either, the server still knows the run is
    journalled: ``incomplete``, resumable, its event stream's last event saying so
    (before: ``failed`` "the journal is unreachable; the run may be journalled all the
    same", read by a client as a run to submit again)."""
    from dissensus.pipeline import batch
    from serve_helpers import client_for, settings

    monkeypatch.setattr(batch, "BLOCK_CASES", 1)
    faults = _Faults(monkeypatch, journal_target, reads_fail=True)
    async with client_for(settings(tmp_path, journal=journal_target)) as client:
        faults.arm(skip=2, through=False)  # the start, the first case, then the second
        res = await client.post("/v1/decide?async=true", json=_panels(3), headers=auth("sub"))
        assert res.status_code == 202, res.text
        run_id = res.json()["run_id"]
        events = await client.get(f"/v1/runs/{run_id}/events", headers=auth("sub"))
        last = events.text.strip().split("\n\n")[-1]
        assert last.startswith("event: incomplete\n"), events.text
        assert f"dissensus runs resume {run_id} --journal JOURNAL" in last
        assert faults.lost == 1
        faults.heal()
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        _resumable(doc, run_id)
        assert doc["done"] == 1, doc
        resumed = await asyncio.to_thread(_resume, journal_target, run_id)
        assert resumed.returncode == 0, resumed.stderr
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        assert (doc["status"], doc["done"], doc["error"]) == ("finished", 3, None), doc
    assert _runs(journal_target) == 1


async def test_a_decide_run_whose_stop_cannot_be_told_reads_resumable_once_the_journal_is_back(
    journal_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``POST /v1/decide`` (waiting): its first commit (the run, its first case) went
    through, its acknowledgement lost, and the journal cannot be read: the server cannot
    tell whether anything was journalled, so the ``503`` says the run may be and names
    it. Once the journal is back the run reads ``incomplete`` with the resume command,
    not ``failed`` (before: ``failed`` "the journal is unreachable", so a client
    submitted it again); the lock its creation took is given back, so ``dissensus runs
    resume`` finishes it."""
    from dissensus.pipeline import batch
    from serve_helpers import client_for, settings

    monkeypatch.setattr(batch, "BLOCK_CASES", 1)
    faults = _Faults(monkeypatch, journal_target, reads_fail=True)
    async with client_for(settings(tmp_path, journal=journal_target)) as client:
        faults.arm()
        res = await client.post("/v1/decide", json=_panels(3), headers=auth("sub"))
        assert res.status_code == 503, res.text
        run_id = res.json()["run_id"]
        assert f"may be journalled all the same: GET /v1/runs/{run_id}" in res.json()["error"]
        faults.heal()
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        _resumable(doc, run_id)
        assert doc["done"] == 1, doc
        assert _holder_pid(journal_target, run_id) is None
        resumed = await asyncio.to_thread(_resume, journal_target, run_id)
        assert resumed.returncode == 0, resumed.stderr
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        assert (doc["status"], doc["done"], doc["error"]) == ("finished", 3, None), doc
    assert _runs(journal_target) == 1


async def test_a_decide_run_the_journal_never_held_stays_failed_and_safe_to_send_again(
    journal_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``POST /v1/decide`` (waiting) whose first commit fails without going through: the
    journal, read again, holds nothing of it, so the ``503`` keeps ``Retry-After`` and
    the run reads ``failed``: submitting it again is safe, and makes the only run."""
    from serve_helpers import client_for, settings

    faults = _Faults(monkeypatch, journal_target, reads_fail=False)
    async with client_for(settings(tmp_path, journal=journal_target)) as client:
        faults.arm(through=False)
        res = await client.post("/v1/decide", json=_panels(2), headers=auth("sub"))
        assert res.status_code == 503, res.text
        assert res.headers["retry-after"].isdigit()
        run_id = res.json()["run_id"]
        assert res.json()["error"] == f"run {run_id} failed: the journal is unreachable"
        doc = (await client.get(f"/v1/runs/{run_id}", headers=auth("sub"))).json()
        assert (doc["status"], doc["error"]) == ("failed", "the journal is unreachable"), doc
        res = await client.post("/v1/decide", json=_panels(2), headers=auth("sub"))
        assert res.status_code == 200, res.text
    assert _runs(journal_target) == 1


async def test_an_async_decide_run_the_journal_does_not_hold_is_503_without_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start failed and the journal, read again, holds no such run: nothing was
    journalled, the ``503`` is the plain one (submitting again is safe)."""
    from dissensus.store.sqlite import SQLiteBackend
    from serve_helpers import client_for, settings

    def down(backend: Any) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    target = str(tmp_path / "journal.sqlite")
    async with client_for(settings(tmp_path, journal=target)) as client:
        monkeypatch.setattr(SQLiteBackend, "commit", down)
        res = await client.post(
            "/v1/decide?async=true", json=[_decide_panel("p1")], headers=auth("sub")
        )
        monkeypatch.undo()
        assert res.status_code == 503, res.text
        assert res.headers["retry-after"].isdigit()
        assert res.json() == {"error": "the journal is unreachable", "field": None}
        assert (await client.get("/v1/runs", headers=auth("sub"))).json() == []


async def test_an_async_decide_run_never_journalled_whose_start_cannot_be_told_is_404(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start's commit did not go through and the journal cannot be read either: the
    ``503`` names the run all the same; once the journal is back, the run and its events
    are ``404`` (it was not journalled: submitting again is safe), as the ``503`` said."""
    from dissensus.store.errors import JournalError
    from dissensus.store.sqlite import SQLiteBackend
    from serve_helpers import client_for, settings

    def down(backend: Any) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    def unreadable(self: Journal, run_id: str, key: str) -> Any:
        raise JournalError(f"journal {self.path}: disk I/O error")

    target = str(tmp_path / "journal.sqlite")
    async with client_for(settings(tmp_path, journal=target)) as client:
        monkeypatch.setattr(SQLiteBackend, "commit", down)
        monkeypatch.setattr(Journal, "get", unreadable)
        res = await client.post(
            "/v1/decide?async=true", json=[_decide_panel("p1")], headers=auth("sub")
        )
        monkeypatch.undo()
        assert res.status_code == 503, res.text
        run_id = res.json()["run_id"]
        assert f"GET /v1/runs/{run_id} before submitting again (404: it was not" in res.text
        for path in (f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/events"):
            res = await client.get(path, headers=auth("sub"))
            assert res.status_code == 404, (path, res.text)
            assert res.json()["field"] == "run_id"
        assert (await client.get("/v1/runs", headers=auth("sub"))).json() == []


async def test_a_keyed_request_after_a_fault_is_never_answered_with_another_requests_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas on one journal, one key, two questions. Replica A journals its case
    in the window between B's check of the key and B's commit, then another writer holds
    the lock, so B's commit meets a real busy timeout: B's look at the journal after the
    fault finds the key's case, and it is A's. B was answered 200 with A's case (its
    suggestion 7) beside its own members' reports (30); it is now the ``422`` of a key
    used with another request, as when nothing failed. The same question under the key
    is answered with the journalled case."""
    import os
    import subprocess
    import sys

    from dissensus.store.sqlite import SQLiteBackend

    monkeypatch.setenv("DISSENSUS_JOURNAL_BUSY_TIMEOUT", BUSY_TIMEOUT_S)
    target = str(tmp_path / "j.sqlite")
    policy = policy_from_dict({"reading": {"similarity": "tfidf"}, "panel": _section()})
    real_begin = SQLiteBackend.begin
    armed: dict[str, Any] = {}
    here = Path(__file__).resolve().parent

    def replica_a(question: str) -> None:
        """Replica A: another process on the same journal, the same key."""
        script = (
            "import asyncio, sys\n"
            "from adding_members import body, members, section\n"
            "from dissensus.panels import PanelChat\n"
            "from dissensus.pipeline.policy import policy_from_dict\n"
            "from dissensus.store.journal import Journal\n"
            "async def main():\n"
            "    policy = policy_from_dict({'reading': {'similarity': 'tfidf'}, 'panel': section()})\n"
            "    with Journal(sys.argv[1]) as journal:\n"
            "        chat = PanelChat(policy, journal=journal, members=members())\n"
            "        await chat.acomplete(body(sys.argv[2]), idempotency_key='K')\n"
            "        await chat.aclose()\n"
            "asyncio.run(main())\n"
        )
        path = os.pathsep.join([str(here), *sys.path])
        done = subprocess.run(
            [sys.executable, "-c", script, target, question],
            env={**os.environ, "PYTHONPATH": path},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]

    def begin(self: SQLiteBackend) -> Any:
        if self is armed.get("backend") and "holder" not in armed:
            replica_a(armed["question"])
            holder = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
            holder.execute("BEGIN IMMEDIATE")
            armed["holder"] = holder
        return real_begin(self)

    monkeypatch.setattr(SQLiteBackend, "begin", begin)
    for question, expected in (("What is 3 plus 4 ?", 422), ("What is 10 plus 20 ?", 200)):
        armed.clear()
        target = str(tmp_path / f"j-{expected}.sqlite")
        Journal(target).close()
        with Journal(target) as jb:
            armed["backend"] = jb._backend
            armed["question"] = question
            b = PanelChat(policy, journal=jb, members=_members())
            try:
                if expected == 422:
                    with pytest.raises(ChatError) as refused:
                        await b.acomplete(_body("What is 10 plus 20 ?"), idempotency_key="K")
                    assert refused.value.status == 422
                    assert refused.value.code == "idempotency_key_reused"
                else:  # A asked the same question: its case is the key's, answered as such
                    done = await b.acomplete(_body("What is 10 plus 20 ?"), idempotency_key="K")
                    assert "30" in (done.dissensus.suggestion or done.choices[0].message.content)
                    assert all(m.decision == "30" for m in done.dissensus.members)
            finally:
                armed["holder"].execute("ROLLBACK")
                armed["holder"].close()
                await b.aclose()
        with Journal(target) as j:
            assert len(j.runs()) == 1


async def test_a_follower_woken_while_the_server_looks_at_the_journal_gets_the_final_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run fails on the journal after handing over a record; its follower, woken by
    that record, comes back while the server reads the journal again (a slow client, a
    slow journal). It waits for the run's final event (``incomplete``, its error saying
    how to resume) and gets it (before: the run's status had already turned ``failed``
    before that read, so the follower ended its stream there, without a final event)."""
    import time

    from dissensus.serve import runs
    from dissensus.serve.runs import Runner
    from dissensus.store.errors import JournalError
    from serve_helpers import client_for, settings

    async with client_for(settings(tmp_path)) as client:
        res = await client.post("/v1/decide", json=_decide_panel("p1"), headers=auth("sub"))
        assert res.status_code == 200, res.text
        record = CaseRecord.model_validate(res.json())
        runner: Runner = client._transport.app.state.service.runner  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()
        looking = asyncio.Event()
        real_held = runs._held

        async def off_loop(self: Runner, state: Any, text: str, extra: Any, on_reject: Any,
                           on_record: Any, *, resume: bool = False) -> None:  # fmt: skip
            state.started.set_result(None)
            await asyncio.sleep(0)
            on_record(record)
            raise JournalError("journal somewhere: connection lost")

        def held(journal: Any, run_id: str) -> Any:
            loop.call_soon_threadsafe(looking.set)
            time.sleep(0.3)  # the journal answers slowly
            return real_held(journal, run_id)

        monkeypatch.setattr(Runner, "_off_loop", off_loop)
        monkeypatch.setattr(runs, "_held", held)
        state = await runner.start([json.dumps(_decide_panel("p2"))], submitted_by="sub")
        kinds: list[str] = []
        async for part in runner.follow(state.run_id):
            kinds.extend(kind for kind, _ in part)
            if kinds == ["record"]:
                await looking.wait()  # the follower comes back while the server looks
        assert kinds == ["record", "incomplete"], kinds
