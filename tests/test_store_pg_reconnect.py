"""A PostgreSQL journal survives a database restart (it reconnects, /readyz recovers), and
a reviewer losing a claim race is told who won.

The test starts its own throw-away server (``initdb`` + ``pg_ctl`` in a temporary
directory, as ``.ci/postgres.sh`` does) so that it can restart it; it is skipped where
the server binaries are missing. Before the fix every statement after the restart
failed with "the connection is closed" until the process was restarted.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.store import Journal
from pg_server import PgServer, free_port, pg_server

pytest.importorskip("psycopg")

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server() -> Iterator[PgServer]:
    yield from pg_server("journal", "pw-never-shown")


def test_the_journal_reconnects_after_a_restart(server: PgServer) -> None:
    with Journal(server.url) as journal:
        journal.create_run("before", kind="decide", meta={})
        assert journal.acquire_run_lock("before") is None
        server.restart()
        # the first write after the restart reconnects and succeeds
        journal.append("before", "note", {"n": 1}, key="note/1")
        server.restart()
        # so does the first read
        assert journal.run("before") is not None
        journal.create_run("after", kind="decide", meta={})
        assert {r.run_id for r in journal.runs()} >= {"before", "after"}
        # the run lock held before the restart is held again on the new connection
        with Journal(server.url) as other:
            holder = other.acquire_run_lock("before", pid=os.getpid() + 1)
            assert holder is not None
        journal.release_run_lock("before")


async def test_readyz_recovers_by_itself_after_a_restart(server: PgServer, tmp_path: Path) -> None:
    from dissensus.serve import ServeSettings, create_app

    app = create_app(ServeSettings(journal=server.url))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        assert (await client.get("/readyz")).status_code == 200
        server.restart()
        answers = []
        for _ in range(3):
            res = await client.get("/readyz")
            answers.append(res.status_code)
            if res.status_code == 200:
                break
            time.sleep(0.5)
        assert answers[-1] == 200, answers
        assert "pw-never-shown" not in res.text
        listed = await client.get("/v1/runs")
        assert listed.status_code == 200


def _hold_claim_then_commit(url: str, review_id: str, who: str, *, insert: bool) -> Any:
    """Another session takes ``review_id``'s claim row (insert or lock) and commits a claim
    for ``who`` a moment later, in a thread; returns the thread once the row is held."""
    import psycopg

    conn = psycopg.connect(url.replace(":pw-never-shown", ""), autocommit=False)
    later = "9999-01-01T00:00:00.000000+00:00"
    if insert:
        conn.execute(
            "INSERT INTO claims (review_id, run_id, who, claimed_at, expires) "
            "VALUES (%s, 'r', %s, '2000-01-01', %s)",
            (review_id, who, later),
        )
    else:
        conn.execute("SELECT * FROM claims WHERE review_id = %s FOR UPDATE", (review_id,))
        conn.execute(
            "UPDATE claims SET who = %s, expires = %s WHERE review_id = %s", (who, later, review_id)
        )

    def finish() -> None:
        time.sleep(0.3)
        conn.commit()
        conn.close()

    thread = threading.Thread(target=finish)
    thread.start()
    return thread


@pytest.mark.parametrize("insert", [True, False])
def test_a_claim_loser_is_told_who_won(server: PgServer, insert: bool) -> None:
    from dissensus.store import ClaimConflict

    review_id = f"r.{10 if insert else 11}"
    with Journal(server.url) as journal:
        journal.create_run("r", kind="decide", meta={})
        if not insert:  # an expired claim of someone else: the row exists
            journal.claim(review_id, "carol", 0.001, run_id="r")
        thread = _hold_claim_then_commit(server.url, review_id, "alice", insert=insert)
        try:
            with pytest.raises(ClaimConflict) as lost:
                journal.claim(review_id, "bob", 60, run_id="r")
        finally:
            thread.join()
    assert lost.value.holder == "alice"


def test_no_command_prints_the_journal_password(
    server: PgServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command that names the journal shows its URL with the password masked."""
    from cli_helpers import run_cli
    from dissensus.serve import server as serve_server
    from pipeline_cases import write_policy
    from serve_helpers import escalating

    secret = "pw-never-shown"
    url = server.url.replace("/journal", "/masked")
    server.createdb("masked")
    policy = write_policy(tmp_path / "policy.yaml")
    panels = tmp_path / "in.jsonl"
    panels.write_text(json.dumps(escalating("p1")) + "\n", encoding="utf-8")
    monkeypatch.setattr(serve_server, "serve", lambda *a, **k: None)
    env = dict(os.environ)
    commands = [
        ["decide", panels, "--journal", url, "--policy", policy, "--run-id", "r1"],
        ["decide", panels, "--journal", url, "--policy", policy, "--run-id", "r1"],  # exists
        ["runs", "list", "--journal", url],
        ["runs", "show", "r1", "--journal", url],
        ["runs", "show", "nosuch", "--journal", url],
        ["runs", "verify", "r1", "--journal", url],
        ["runs", "resume", "r1", "--journal", url],
        ["review", "list", "--journal", url],
        ["review", "show", "nosuch.1", "--journal", url],
        ["serve", "--journal", url, "--port", "0"],
    ]
    printed = []
    for argv in commands:
        res = run_cli(*argv, env=env)
        printed.append((argv[:2], res.returncode))
        assert secret not in res.stdout + res.stderr, argv
    assert any(code == 0 for _, code in printed)
    res = run_cli("serve", "--journal", url, "--port", "0", env=env)
    assert "postgresql://postgres:***@127.0.0.1" in res.stderr


def test_mask_url_hides_every_password() -> None:
    from dissensus.store import mask_url

    assert mask_url("postgresql://u:p%40ss@h:5/db?x=1") == "postgresql://u:***@h:5/db?x=1"
    assert mask_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert mask_url("postgres://:only@[::1]:5432/db") == "postgres://:***@[::1]:5432/db"
    assert mask_url("journal.sqlite") == "journal.sqlite"
    assert "zz" not in mask_url("postgresql://u:zz@h:notaport/db")
    # libpq's query-parameter forms
    assert mask_url("postgresql://u@h/db?password=Right9&sslmode=off") == (
        "postgresql://u@h/db?password=***&sslmode=off"
    )
    assert "K3y" not in mask_url("postgresql://u:pw@h/db?sslpassword=K3y&PASSWORD=Right9")
    assert "Right9" not in mask_url("postgresql://u:pw@h/db?sslpassword=K3y&PASSWORD=Right9")


@given(
    secret=st.text(alphabet="abcXYZ0189!$%*_-", min_size=4, max_size=12),
    form=st.sampled_from(["userinfo", "query", "sslquery"]),
    noise=st.sampled_from(["", "invalid URI: {url}", 'invalid token: "{secret}"', "x {quoted}"]),
)
def test_a_drivers_error_text_never_keeps_the_urls_secret(
    secret: str, form: str, noise: str
) -> None:
    """What a driver says about a URL (quoting it whole, a part, the decoded password) is
    shown only once the URL's secrets are out of it (scrub_secrets)."""
    from urllib.parse import quote, unquote

    from dissensus.store.targets import scrub_secrets

    raw = quote(secret, safe="!$*_-")
    url = {
        "userinfo": f"postgresql://user:{raw}@127.0.0.1:5432/db",
        "query": f"postgresql://user@127.0.0.1:5432/db?password={raw}",
        "sslquery": f"postgresql://user@127.0.0.1/db?sslmode=require&sslpassword={raw}",
    }[form]
    text = noise.format(url=url, secret=raw, quoted=unquote(raw)) + f" at {url}"
    shown = scrub_secrets(text, url)
    assert secret not in shown and raw not in shown


def test_decide_cut_off_by_the_database_names_the_run_to_resume(
    server: PgServer, tmp_path: Path
) -> None:
    """The database going away mid-run: one line naming the error and the resume command
    (exit 1), the password never shown; once the database is back the resume finishes it."""
    from pipeline_cases import panel

    panels = tmp_path / "in.jsonl"
    rows = [panel(f"p{i}", ["x", "y", "x"][: 2 + i % 2]) for i in range(4000)]
    panels.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    cmd = [
        "decide",
        str(panels),
        "--journal",
        server.url,
        "--similarity",
        "tfidf",
        "--run-id",
        "cut",
    ]
    proc = subprocess.Popen([sys.executable, "-m", "dissensus", *cmd], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:  # until the run has cases in the journal
            with Journal(server.url) as journal:
                info = journal.run("cut", missing_ok=True)
            if (info is not None and info.n_events > 50) or proc.poll() is not None:
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        server.stop()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        server.start()
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "resume it with dissensus runs resume cut --journal postgresql://postgres@" in err
    assert "pw-never-shown" not in err
    from cli_helpers import run_cli

    # The command as printed, pasted as it is: libpq takes the password from $PGPASSWORD.
    command = shlex.split(err.strip().split("resume it with ", 1)[1])
    assert command[:4] == ["dissensus", "runs", "resume", "cut"]
    resumed = run_cli(*command[1:], "--json", env={**env, "PGPASSWORD": "pw-never-shown"})
    assert resumed.returncode == 0, resumed.stderr
    assert len(resumed.stdout.splitlines()) == 4000


def test_an_unreachable_database_is_a_failure_and_a_refusing_one_a_setting(
    server: PgServer,
) -> None:
    """No server answering is an outage (exit 1, retry later); a server that answers and
    refuses (a database that does not exist) is a setting to fix (exit 2)."""
    from cli_helpers import run_cli

    down = f"postgresql://postgres:pw-never-shown@127.0.0.1:{free_port()}/journal"
    res = run_cli("runs", "list", "--journal", down)
    assert res.returncode == 1 and "cannot reach journal" in res.stderr, res.stderr
    missing = server.url.replace("/journal", "/no_such_database")
    res = run_cli("runs", "list", "--journal", missing)
    assert res.returncode == 2 and "cannot open journal" in res.stderr, res.stderr
    assert "pw-never-shown" not in res.stderr
