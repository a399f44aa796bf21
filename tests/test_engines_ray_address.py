"""``--engine ray --ray-address A`` where no cluster can be joined: a setting to fix (exit
2, naming ``ray_address``), checked before ``decide`` creates its run, as every other
setting is. It was exit 1 with Ray's message (or a traceback for a ``ray://`` address
without Ray's client), and it left an incomplete run nothing named.

No Ray instance is started: the addresses are ones Ray refuses at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

REPO = Path(__file__).resolve().parent.parent
SWAP = REPO / "examples" / "llmbar-swap.jsonl"


def _dissensus(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run(
        [sys.executable, "-m", "dissensus", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _addresses() -> list[str]:
    from ray._private.utils import get_ray_client_dependency_error

    out = []
    if get_ray_client_dependency_error() is not None:  # without Ray's client: refused at once
        out.append("ray://127.0.0.1:9")
    if not Path("/tmp/ray/ray_current_cluster").exists():  # no cluster here for "auto"
        out.append("auto")
    return out


@pytest.mark.parametrize("address", _addresses())
def test_a_cluster_that_cannot_be_joined_is_exit_2_and_creates_no_run(
    tmp_path: Path, address: str
) -> None:
    journal = tmp_path / "j.sqlite"
    got = _dissensus(
        "decide", str(SWAP), "--engine", "ray", "--ray-address", address,
        "--journal", str(journal), cwd=tmp_path,
    )  # fmt: skip
    assert got.returncode == 2, got.stderr
    (line,) = got.stderr.strip().splitlines()
    assert "field 'ray_address'" in line and f"cannot join the Ray cluster at {address!r}" in line
    assert "Traceback" not in got.stderr
    assert not journal.exists()
    routed = _dissensus(
        "route", str(SWAP), "--similarity", "tfidf", "--engine", "ray", "--ray-address", address,
        cwd=tmp_path,
    )  # fmt: skip
    assert routed.returncode == 2 and "cannot join the Ray cluster" in routed.stderr


def _closed_port() -> int:
    """A loopback port where nothing listens (bound, then closed)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_host_and_port_where_nothing_listens_is_exit_2_at_once(tmp_path: Path) -> None:
    """Ray retried such an address for minutes (``Failed to connect to GCS``): the
    driver tries a connection first and refuses it (the subprocess's timeout bounds it)."""
    address = f"127.0.0.1:{_closed_port()}"
    journal = tmp_path / "j.sqlite"
    got = _dissensus(
        "decide", str(SWAP), "--engine", "ray", "--ray-address", address,
        "--journal", str(journal), cwd=tmp_path,
    )  # fmt: skip
    assert got.returncode == 2, got.stderr[-2000:]
    (line,) = got.stderr.strip().splitlines()
    assert "field 'ray_address'" in line and f"cannot join the Ray cluster at {address!r}" in line
    assert "--ray-address" in line
    assert not journal.exists()
    routed = _dissensus(
        "route", str(SWAP), "--similarity", "tfidf", "--engine", "ray", "--ray-address", address,
        cwd=tmp_path,
    )  # fmt: skip
    assert routed.returncode == 2 and "cannot join the Ray cluster" in routed.stderr
