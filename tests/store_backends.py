"""Journal back ends for the store tests: an SQLite file, and PostgreSQL when
``$DISSENSUS_TEST_PG`` names a server (each test gets its own schema there).

:class:`ThrowawayPostgres` starts the server the suite uses when ``$DISSENSUS_TEST_PG``
is unset (``conftest.py`` starts it once per test session, before the xdist workers,
which inherit the variable): the distribution's server binaries (the newest
``/usr/lib/postgresql/*/bin``, or ``initdb`` / ``pg_ctl`` on ``PATH``), a data directory
under the temporary folder, a free loopback port, no fsync, trust authentication on
loopback only. PostgreSQL refuses to run as root: as root the server runs as the
``postgres`` user (``runuser``). Everything it made is removed when it stops.
"""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

PG_ENV = "DISSENSUS_TEST_PG"
BACKENDS = ["sqlite", "postgres"]
PG_HINT = "apt-get install postgresql: the suite then starts its own server"
"""What makes the PostgreSQL tests run when no server could be started."""
PG_WHY_ENV = "DISSENSUS_TEST_PG_WHY_NOT"
"""Why the session's server did not start (set by ``conftest.py`` for the workers)."""


def _server_bin() -> Path | None:
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: [int(x) if x.isdigit() else 0 for x in p.parent.parent.name.split(".")],
    )
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThrowawayPostgres:
    """A PostgreSQL server for one test session (see the module docstring)."""

    def __init__(self) -> None:
        self.url: str | None = None
        self.why_not: str | None = None
        self._data: Path | None = None
        self._bin: Path | None = None
        self._runas: list[str] = []

    def start(self) -> str | None:
        """Start the server; its URL, or ``None`` with :attr:`why_not` saying why not."""
        self._bin = _server_bin()
        if self._bin is None:
            self.why_not = "no PostgreSQL server binaries (initdb) on this machine"
            return None
        self._data = Path(tempfile.mkdtemp(prefix="dissensus-pg-"))
        if os.geteuid() == 0:
            if shutil.which("runuser") is None:
                self.why_not = "running as root without runuser to start PostgreSQL as postgres"
                return None
            try:
                shutil.chown(self._data, "postgres", "postgres")
            except (LookupError, OSError) as exc:
                self.why_not = f"running as root and no postgres user to run the server ({exc})"
                return None
            self._runas = ["runuser", "-u", "postgres", "--"]
        port = _free_port()
        data = str(self._data)
        steps = [
            [str(self._bin / "initdb"), "-D", data, "-U", "postgres", "-A", "trust", "--no-sync"],
            [
                str(self._bin / "pg_ctl"), "-D", data, "-l", f"{data}/server.log", "-w", "-t", "60",
                "-o", f"-c listen_addresses=127.0.0.1 -p {port} -k {data} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200",
                "start",
            ],
            [str(self._bin / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
             "dissensus_test"],
        ]  # fmt: skip
        for cmd in steps:
            done = subprocess.run(
                self._runas + cmd, capture_output=True, text=True, timeout=120, check=False
            )
            if done.returncode != 0:
                self.why_not = (
                    f"{Path(cmd[0]).name} failed: {(done.stderr or done.stdout).strip()[:300]}"
                )
                self.stop()
                return None
        self.url = f"postgresql://postgres@127.0.0.1:{port}/dissensus_test"
        return self.url

    def stop(self) -> None:
        """Stop the server (immediately: its data is thrown away) and remove its files."""
        if self._data is None:
            return
        if self._bin is not None and (self._data / "postmaster.pid").exists():
            subprocess.run(
                [*self._runas, str(self._bin / "pg_ctl"), "-D", str(self._data), "-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=60,
                check=False,
            )  # fmt: skip
        shutil.rmtree(self._data, ignore_errors=True)
        self._data = None


def pg_url() -> str:
    url = os.environ.get(PG_ENV, "")
    if not url:
        why = os.environ.get(PG_WHY_ENV) or f"${PG_ENV} is unset"
        pytest.skip(f"PostgreSQL back end not tested: {why} ({PG_HINT})")
    return url


@contextmanager
def pg_schema(url: str) -> Iterator[str]:
    """A fresh schema in the test database; yields a URL whose search_path is that schema."""
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")  # type: ignore[arg-type]
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")  # type: ignore[arg-type]


@contextmanager
def target_for(backend: str, tmp_path: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield str(tmp_path / "journal.sqlite")
        return
    with pg_schema(pg_url()) as url:
        yield url


def raw(target: str, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run SQL (``?`` placeholders) on the journal's database behind its back (tampering)."""
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            cur = conn.execute(sql.replace("?", "%s"), tuple(args))  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description else []
    db = sqlite3.connect(target, isolation_level=None)
    try:
        cur = db.execute(sql, tuple(args))
        return list(cur.fetchall())
    finally:
        db.close()


UNMARK_INDEX = "DELETE FROM dissensus_meta WHERE key = 'review_index_checked'"
"""What an upgrade does to the journal's mark that its review index was checked: removes
it, so the next open compares the index with the events (a journal an older version
wrote, or edited behind its back before the mark was written)."""
