"""Journal back ends for the store tests: an SQLite file, and PostgreSQL when
``$DISSENSUS_TEST_PG`` names a server (each test gets its own schema there)."""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

PG_ENV = "DISSENSUS_TEST_PG"
BACKENDS = ["sqlite", "postgres"]


def pg_url() -> str:
    url = os.environ.get(PG_ENV, "")
    if not url:
        pytest.skip(
            f"PostgreSQL back end not tested: ${PG_ENV} is unset (.ci/postgres.sh starts a server)"
        )
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
