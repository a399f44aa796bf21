"""A real server under load: 50 concurrent submitters and 5 concurrent reviewers.

The test starts ``dissensus serve`` (uvicorn) on 127.0.0.1 itself and checks: every
panel has exactly one final record, every review item is resolved exactly once (the
losers of every race get 409), no item is left open, every run's hash chain verifies
(API and CLI), and the server exits promptly on SIGTERM; it prints the time of each phase.

The default run submits 60 panels (3 to 6 s with the server start on two shared cores); ``DISSENSUS_SOAK=1``
(``make test-soak``) runs the full 2,000. On PostgreSQL it runs when ``$DISSENSUS_TEST_PG`` names a database (in a
fresh database of its own on that server, dropped afterwards). The server's journal uses
``DISSENSUS_JOURNAL_SYNC=normal`` (every commit survives a process kill; see the journal).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from dissensus.serve.auth import hash_token
from dissensus.serve.server import SHUTDOWN_ENV
from pipeline_cases import panel, write_policy
from serve_helpers import escalating

REPO = Path(__file__).resolve().parent.parent
SOAK = os.environ.get("DISSENSUS_SOAK") == "1"
PANELS = 2000 if SOAK else 60
CLIENTS = 50
REVIEWERS = 5
LOAD_TIMEOUT_S = 3600 if SOAK else 600
"""The load phase fails rather than hangs past this."""
SHUTDOWN_S = 2
"""The graceful-shutdown time of the shutdown test's server (the default is 5 s; whole
seconds). The run's grace is 1.2 s of it; the test asserts the server stopped within its
own grace (uvicorn logs when its graceful timeout cuts tasks short), not a duration."""
PLAIN = {"verify": False}
"""Client options: the server speaks plain HTTP on loopback, so no client needs a TLS
context (building a verifying one loads the CA bundle, ~30 ms per client)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tokens(path: Path) -> Path:
    lines = [f"{hash_token('tok-sub')} submitter submit", f"{hash_token('tok-adm')} admin admin"]
    lines += [f"{hash_token(f'tok-r{i}')} reviewer{i} review" for i in range(REVIEWERS)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def start_server(
    tmp: Path,
    journal: str,
    *,
    extra_env: dict[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
) -> tuple[subprocess.Popen[bytes], str]:
    """``dissensus serve`` on a free loopback port; returns the process and its base URL
    once the server answers ``/readyz``."""
    proc, base = spawn_server(tmp, journal, extra_env=extra_env, extra_args=extra_args)
    wait_ready(tmp, proc, base)
    return proc, base


def spawn_server(
    tmp: Path,
    journal: str,
    *,
    extra_env: dict[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
    policy: dict[str, Any] | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """``dissensus serve`` started on a free loopback port, not yet waited for
    (:func:`wait_ready`): a test can start its browser meanwhile. ``policy`` is merged
    into the test policy (:func:`pipeline_cases.write_policy`)."""
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "src"),
        "DISSENSUS_JOURNAL_SYNC": "normal",
        **(extra_env or {}),
    }
    cmd = [
        sys.executable, "-m", "dissensus", "serve", "--journal", journal, "--port", str(port),
        "--policy", str(write_policy(tmp / "policy.yaml", policy)), "--tokens", str(_tokens(tmp / "tokens.txt")),
        "--timeout", "300", *extra_args,
    ]  # fmt: skip
    log = open(tmp / "server.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def wait_ready(tmp: Path, proc: subprocess.Popen[bytes], base: str) -> None:
    """Until the server answers ``/readyz`` (its log in the failure when it exits first)."""
    deadline = time.monotonic() + 60
    with httpx.Client(timeout=1, **PLAIN) as probe:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError((tmp / "server.log").read_text(encoding="utf-8"))
            try:
                if probe.get(base + "/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("server did not start")


def stop_server(proc: subprocess.Popen[bytes]) -> float:
    """SIGTERM, then SIGKILL after 20 s; the seconds the server took to exit on SIGTERM
    (``inf`` when it had to be killed)."""
    start = time.monotonic()
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return float("inf")
    return time.monotonic() - start


def _panels(n: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        if i % 2:
            rows.append(escalating(f"p{i}", f"Option 1 is right for case {i}."))
        else:
            rows.append(panel(f"p{i}", ["1", "1", "1"], swap=["1", "1", "1"]))
    return rows


async def _submit(base: str, rows: list[dict[str, Any]], seen: Counter[str]) -> None:
    headers = {"Authorization": "Bearer tok-sub"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=300, **PLAIN) as client:
        i = 0
        while i < len(rows):
            size = 1 if i % 3 == 0 else 4
            chunk = rows[i : i + size]
            res = await client.post("/v1/decide", json=chunk[0] if size == 1 else chunk)
            assert res.status_code == 200, res.text
            records = [res.json()] if size == 1 else res.json()["records"]
            seen.update(r["id"] for r in records)
            i += size


async def _review(base: str, who: int, done: asyncio.Event, outcome: Counter[str]) -> None:
    headers = {"Authorization": f"Bearer tok-r{who}"}
    rng = random.Random(who)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=300, **PLAIN) as client:
        while True:
            items = (await client.get("/v1/review?limit=10")).json()
            if not items:
                if done.is_set():
                    items = (await client.get("/v1/review?limit=10")).json()
                    if not items:
                        return
                await asyncio.sleep(0.05)
                continue
            item = rng.choice(items[: REVIEWERS * 2])
            shown = (await client.get(f"/v1/review/{item['review_id']}")).json()
            if rng.random() < 0.3:
                claim = await client.post(f"/v1/review/{item['review_id']}/claim")
                outcome[f"claim {claim.status_code}"] += 1
                if claim.status_code != 200:
                    continue
            body = {
                "decision": rng.choice(item["options"]),
                "note": f"reviewer {who}",
                "content_sha256": shown["content_sha256"],
            }
            res = await client.post(f"/v1/review/{item['review_id']}/resolve", json=body)
            assert res.status_code in (200, 409), res.text
            outcome[f"resolve {res.status_code}"] += 1


async def _load(base: str, rows: list[dict[str, Any]]) -> tuple[Counter[str], Counter[str]]:
    seen: Counter[str] = Counter()
    outcome: Counter[str] = Counter()
    done = asyncio.Event()
    shares = [rows[i::CLIENTS] for i in range(CLIENTS)]
    reviewers = [asyncio.create_task(_review(base, r, done, outcome)) for r in range(REVIEWERS)]
    await asyncio.gather(*(_submit(base, share, seen) for share in shares))
    done.set()
    await asyncio.gather(*reviewers)
    return seen, outcome


def _journal_targets() -> list[Any]:
    targets: list[Any] = [pytest.param("sqlite", id="sqlite")]
    pg = os.environ.get("DISSENSUS_TEST_PG")
    targets.append(
        pytest.param(
            pg or "postgresql",
            id="postgresql",
            marks=pytest.mark.skipif(
                not pg,
                reason="PostgreSQL not configured: set DISSENSUS_TEST_PG to a postgresql:// URL",
            ),
        )
    )
    return targets


@pytest.mark.slow
@pytest.mark.parametrize("target", _journal_targets())
def test_real_server_under_load(tmp_path: Path, target: str) -> None:
    if target == "sqlite":
        journal = str(tmp_path / "journal.sqlite")
        _load_and_check(tmp_path, journal)
        return
    with _fresh_database(target) as url:
        _load_and_check(tmp_path, url)


@contextmanager
def _fresh_database(url: str) -> Iterator[str]:
    """A database of its own on the server of ``url`` (other tests share ``url``'s)."""
    import psycopg

    name = f"dissensus_serve_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    base, _, _ = url.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _load_and_check(tmp_path: Path, journal: str) -> None:
    rows = _panels(PANELS)
    started = time.monotonic()
    proc, base = start_server(tmp_path, journal)
    try:
        seen, outcome = asyncio.run(asyncio.wait_for(_load(base, rows), LOAD_TIMEOUT_S))
        loaded = time.monotonic()
        admin = {"Authorization": "Bearer tok-adm"}
        final: Counter[str] = Counter()
        with httpx.Client(base_url=base, headers=admin, timeout=60, **PLAIN) as client:
            runs = client.get("/v1/runs").json()
            for run in runs:
                doc = client.get(f"/v1/runs/{run['run_id']}").json()
                assert doc["status"] == "finished"
                final.update(r["id"] for r in doc["records"])
                assert all(r["action"] != "escalate" for r in doc["records"]), (
                    "an escalation was left open"
                )
                report = client.get(f"/v1/runs/{run['run_id']}/verify").json()
                assert report["ok"], report
            resolved = client.get("/v1/review?status=resolved&limit=10000").json()
            assert client.get("/v1/review?status=open").json() == []
        checked = time.monotonic()
    finally:
        stopped_in = stop_server(proc)
    assert math.isfinite(stopped_in), "the server did not stop on SIGTERM (it was killed)"
    expected = {r["id"] for r in rows}
    assert set(seen) == expected and set(seen.values()) == {1}
    assert set(final) == expected and set(final.values()) == {1}
    ids = [x["review_id"] for x in resolved]
    assert len(ids) == len(set(ids)) == PANELS // 2
    assert outcome["resolve 200"] == PANELS // 2
    from dissensus.store import open_journal

    with open_journal(journal) as store:
        per_item = Counter(e.payload["review_id"] for e in store.events_of_type("review.resolved"))
        assert len(per_item) == PANELS // 2 and set(per_item.values()) == {1}
        assert store.review_index_agrees()
    # The CLI's own command, in this process (the server above is the end-to-end start).
    from dissensus.cli import main

    assert main(["runs", "verify", runs[0]["run_id"], "--journal", journal]) == 0
    print(
        f"\nload test ({'postgresql' if journal.startswith('postgres') else 'sqlite'}): "
        f"{PANELS} panels, {CLIENTS} clients, {REVIEWERS} reviewers: "
        f"load {loaded - started:.1f} s, checks {checked - loaded:.1f} s, "
        f"server stopped in {stopped_in:.1f} s, total {time.monotonic() - started:.1f} s"
    )


@pytest.mark.slow
def test_shutdown_ends_event_streams_with_the_runs_final_status(tmp_path: Path) -> None:
    """SIGTERM while a run decides and a client follows it: the run gets a short grace,
    is stopped ``incomplete`` (resumable), the stream ends with that event (not a dropped
    connection) and the server exits before uvicorn's graceful timeout (set to
    ``SHUTDOWN_S`` here: the run's grace is 60% of it, so the test waits less)."""
    journal = str(tmp_path / "journal.sqlite")
    proc, base = start_server(tmp_path, journal, extra_env={SHUTDOWN_ENV: str(SHUTDOWN_S)})
    sub = {"Authorization": "Bearer tok-sub"}
    lines: list[str] = []
    terminated = False
    try:
        started = httpx.post(
            base + "/v1/decide?async=true", json=_panels(1000), headers=sub, timeout=60, **PLAIN
        )
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        with httpx.stream(
            "GET", f"{base}/v1/runs/{run_id}/events", headers=sub, timeout=60, **PLAIN
        ) as stream:
            for line in stream.iter_lines():  # a dropped connection raises here
                lines.append(line)
                if line == "event: record" and not terminated:
                    proc.terminate()  # the run is deciding: stop the server now
                    terminated = True
        proc.wait(timeout=20)
        assert terminated
    finally:
        if proc.poll() is None:
            stop_server(proc)
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert events[-1] in ("incomplete", "finished"), events[-3:]
    # Stopped by its own grace, not cut short by uvicorn's graceful timeout (which logs so at
    # the server's warning level), and ended normally by the SIGTERM it was sent (exit 0
    # after the graceful shutdown), not killed.
    log = (tmp_path / "server.log").read_text(encoding="utf-8", errors="replace")
    assert proc.returncode == 0, log[-2000:]
    assert "graceful shutdown exceeded" not in log, log[-2000:]
    final = json.loads(lines[[i for i, x in enumerate(lines) if x.startswith("data: ")][-1]][6:])
    if events[-1] == "incomplete":
        # Stopped before run.finished: its last block may already be committed (group
        # commit hands a block's records out once it is durable), so every case can be done.
        assert final["done"] <= final["total"] and "runs resume" in final["error"]
    from dissensus.store import open_journal

    with open_journal(journal) as store:
        assert store.verify(run_id).ok
        assert (store.get(run_id, "run/finished") is None) == (events[-1] == "incomplete")
