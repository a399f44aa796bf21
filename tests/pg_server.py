"""A throw-away PostgreSQL server a test can stop, start and restart (``initdb`` and
``pg_ctl`` in a temporary directory, as ``.ci/postgres.sh`` does), for the tests of what a
database outage does; skipped where the server binaries are missing."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["PgServer", "free_port", "pg_server"]


def _bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


def free_port() -> int:
    """A loopback port nothing listens on (at the moment of asking)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgServer:
    """A throw-away PostgreSQL server holding one database, reached with a password that
    its trust authentication never checks (so a test can look for it in what is shown)."""

    def __init__(self, bin_dir: Path, *, database: str, password: str) -> None:
        self.bin = bin_dir
        self.database = database
        self.password = password
        self.data = Path(tempfile.mkdtemp(prefix=f"dissensus-pg-{database}."))
        self.port = free_port()
        self.runas: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.data, "postgres", "postgres")
            self.runas = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        self.start()
        self.createdb(database)

    @property
    def url(self) -> str:
        return f"postgresql://postgres:{self.password}@127.0.0.1:{self.port}/{self.database}"

    def createdb(self, name: str) -> None:
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self.runas, str(self.bin / tool), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def _ctl(self, *args: str) -> None:
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.data} -c fsync=off"
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.data / "log"), "-w", "-o", options, *args
        )

    def start(self) -> None:
        self._ctl("start")

    def restart(self) -> None:
        self._ctl("restart", "-m", "fast")

    def stop(self) -> None:
        self._ctl("stop", "-m", "immediate")


def pg_server(database: str, password: str) -> Iterator[PgServer]:
    """Body of a module-scoped fixture: the server, stopped and removed after the module."""
    pytest.importorskip("psycopg")
    bin_dir = _bin()
    if bin_dir is None or (shutil.which("runuser") is None and os.geteuid() == 0):
        pytest.skip("PostgreSQL server binaries not found")
    srv = PgServer(bin_dir, database=database, password=password)
    try:
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(srv.data, ignore_errors=True)
