"""A PostgreSQL journal URL that can never work is a configuration error (exit 2), one
line naming the journal with its password masked; no part of a password is ever shown;
a statement the server cancels is not reported as lock contention.

Before the fixes: an unencoded ``@`` in the password let libpq quote the password's tail
as a host name (``failed to resolve host 'ssSECRETTAIL@127.0.0.1'``); a malformed URL
(a port out of range, ``sslmode=bogus``, an unclosed ``[``) was exit 1 ("cannot reach",
retry later); a ``statement_timeout`` was "locked by another writer (waited 30 s)".
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from cli_helpers import run_cli
from store_backends import pg_schema, pg_url

pytest.importorskip("psycopg")


def _hostport() -> str:
    parts = urlsplit(pg_url())
    return f"{parts.hostname}:{parts.port}"


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_an_unencoded_at_in_the_password_is_refused_before_connecting() -> None:
    url = f"postgresql://postgres:pa@ssSECRETTAIL@{_hostport()}/fixstore"
    res = run_cli("runs", "list", "--journal", url)
    line = _one_line(res.stderr)
    assert res.returncode == 2, res.stderr
    assert "SECRETTAIL" not in res.stdout + res.stderr
    assert "ssSEC" not in line and "pa@" not in line
    assert "%40" in line and "postgres:***@" in line


def test_a_drivers_error_never_quotes_a_part_of_the_password() -> None:
    """libpq ends the user-info at the first ``@`` and quotes the rest as a host name."""
    from dissensus.store.targets import scrub_secrets

    url = "postgresql://postgres:pa@ssSECRETTAIL@127.0.0.1:5432/db"
    said = "failed to resolve host 'ssSECRETTAIL@127.0.0.1': [Errno -2] Name or service not known"
    assert "SECRETTAIL" not in scrub_secrets(said, url)
    url = "postgresql://u:first%40part@second@h/db"
    for said in ("bad user 'u:first%40part@second'", "host 'second@h'", "pw first@part"):
        shown = scrub_secrets(said, url)
        assert "first" not in shown and "second" not in shown, shown
    # a short piece (under 3 characters) is left: it is no more than a guess
    assert scrub_secrets("host 'ab@h'", "postgresql://u:xy@ab@h/db") == "host 'ab@h'"


@pytest.mark.parametrize(
    "form",
    [
        "postgresql://postgres@{hp_host}:99999/db",
        "postgresql://postgres@{hp_host}:0/db",
        "postgresql://postgres:pw-never-shown@{hp_host}:abc/db",
        "postgresql://postgres:pw-never-shown@{hp}/db?sslmode=bogus",
        "postgresql://postgres@{hp}/db?target_session_attrs=bogus",
        "postgresql://postgres:pw-never-shown@{hp}/db?no_such_option=1",
        "postgresql://postgres:pw-never-shown@[::1:{port}/db",
        "postgresql://postgres:pw%zz@{hp}/db",
    ],
)
def test_a_malformed_url_is_a_configuration_error(form: str) -> None:
    hp = _hostport()
    url = form.format(hp=hp, hp_host=hp.rpartition(":")[0], port=hp.rpartition(":")[2])
    started = time.monotonic()
    for argv in (["review", "list"], ["runs", "list"]):
        res = run_cli(*argv, "--journal", url)
        line = _one_line(res.stderr)
        assert res.returncode == 2, (url, res.stderr)
        assert line.startswith("error: invalid journal URL postgresql://"), line
        assert "pw-never-shown" not in res.stderr and "pw%zz" not in res.stderr
    assert time.monotonic() - started < 10


def test_a_server_that_does_not_answer_is_still_exit_1() -> None:
    from pg_server import free_port

    res = run_cli(
        "review", "list", "--journal", f"postgresql://postgres@127.0.0.1:{free_port()}/db"
    )
    assert res.returncode == 1 and "cannot reach journal" in _one_line(res.stderr)


def test_a_statement_timeout_is_not_lock_contention() -> None:
    with pg_schema(pg_url()) as url:
        assert run_cli("review", "list", "--journal", url).returncode == 0  # schema made
        slow = url + "%20-c%20statement_timeout%3D1"  # appended to the options parameter
        started = time.monotonic()
        res = run_cli("review", "list", "--journal", slow)
        line = _one_line(res.stderr)
    assert res.returncode == 1, res.stderr
    assert "statement_timeout" in line and "cancelled" in line, line
    assert "locked by another writer" not in line and "waited" not in line
    assert time.monotonic() - started < 25


def test_a_cancelled_statement_from_the_backend_names_the_cancel() -> None:
    """Another cause of 57014 (an administrator's pg_cancel_backend) is named as such."""
    import threading

    import psycopg

    from dissensus.store import Journal, JournalBusy, JournalError

    with pg_schema(pg_url()) as url, Journal(url) as journal:
        backend = journal._backend  # type: ignore[attr-defined]
        pid = backend._db.info.backend_pid

        def cancel() -> None:
            time.sleep(0.5)
            with psycopg.connect(pg_url(), autocommit=True) as conn:
                conn.execute("SELECT pg_cancel_backend(%s)", (pid,))

        thread = threading.Thread(target=cancel)
        thread.start()
        try:
            with pytest.raises(JournalError) as caught, backend.errors():
                backend.rows("SELECT pg_sleep(5)")
        finally:
            thread.join()
    assert not isinstance(caught.value, JournalBusy)
    assert "cancelled the statement" in str(caught.value)
    assert "waited" not in str(caught.value)


def test_a_password_with_an_unencoded_question_mark_is_scrubbed_as_libpq_reads_it() -> None:
    """libpq's user-info runs to the first ``@`` before any ``/`` (a ``?`` or ``#`` in it
    belongs to the password); urlsplit's ends at the ``?``."""
    from dissensus.store.targets import scrub_secrets

    for sep in "?#":
        url = f"postgresql://postgres:pa{sep}ssSECRET%zz@127.0.0.1:5432/db"
        said = f'invalid percent-encoded token: "pa{sep}ssSECRET%zz"'
        assert "SECRET" not in scrub_secrets(said, url)


@pytest.mark.parametrize(
    "key", ["pass%77ord", "%70assword", "%70%61%73%73%77%6F%72%64", "ssl%70assword", "PASS%57ORD"]
)
def test_a_password_given_as_a_percent_encoded_query_key_is_masked(key: str) -> None:
    """libpq decodes a query parameter's name before matching it, so ``?pass%77ord=`` is
    the password: masked and scrubbed as ``?password=`` is."""
    from dissensus.store.targets import mask_url, scrub_secrets

    url = f"postgresql://u@127.0.0.1:5432/db?sslmode=disable&{key}=Secr3tValue&application_name=x"
    assert mask_url(url) == (
        f"postgresql://u@127.0.0.1:5432/db?sslmode=disable&{key}=***&application_name=x"
    )
    said = f"connection failed for {url}: password Secr3tValue rejected"
    assert "Secr3t" not in scrub_secrets(said, url)
    other = "postgresql://u@127.0.0.1:5432/db?pass%78ord=shown"  # not a password key
    assert mask_url(other) == other


def test_no_command_prints_a_password_given_as_an_encoded_query_key(tmp_path: Path) -> None:
    """The run's header line, the review hint and the "already exists ... resume it with"
    error name the journal with the password (``?pass%77ord=``) masked."""
    from pipeline_cases import write_jsonl, write_policy
    from serve_helpers import escalating

    with pg_schema(pg_url()) as base:
        url = f"{base}&pass%77ord=Secr3tValue"
        panels = write_jsonl(tmp_path / "in.jsonl", [escalating("p1")])
        policy = write_policy(tmp_path / "policy.yaml")
        decide = ["decide", panels, "--journal", url, "--policy", policy, "--run-id", "enc"]
        first = run_cli(*decide)
        assert first.returncode == 0, first.stderr
        assert "pass%77ord=***" in first.stdout + first.stderr
        again = run_cli(*decide)
        assert again.returncode == 2 and "already exists" in again.stderr, again.stderr
        listed = run_cli("review", "list", "--journal", url)
        assert listed.returncode == 0, listed.stderr
        for res in (first, again, listed):
            assert "Secr3t" not in res.stdout + res.stderr
