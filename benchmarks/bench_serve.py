"""Benchmark of ``dissensus serve``: decisions per second over HTTP against in-process.

One run, one machine, the same panels (tfidf reading, no model; half of them escalate
to the review queue, half commit automatically):

* **in-process, per panel**: :func:`dissensus.pipeline.adecide` (one run per panel, as a
  single-panel request makes) from ``--clients`` concurrent tasks into a fresh SQLite
  journal, decisions/s;
* **in-process, batch**: :func:`dissensus.pipeline.start_run` + :func:`execute_run` over
  a JSONL file into a fresh SQLite journal (what ``dissensus decide`` does), decisions/s;
* **HTTP**: ``dissensus serve`` (uvicorn, one process) on 127.0.0.1 with a fresh journal;
  ``--clients`` concurrent clients post (a) one panel per request (compared with the
  per-panel in-process figure), (b) ``--list-size`` panels per request (compared with
  the batch); decisions/s and the ratio. The clients run in the benchmark's process on
  the same machine, so their CPU counts against the service;
* **latency**: one client, sequential single-panel ``POST /v1/decide``: p50 / p99;
* **memory**: the server's peak RSS (``VmHWM``) after ``--decisions`` decisions in total.

With ``--postgres URL`` (a server the benchmark may create databases on, e.g. the one
``.ci/postgres.sh`` starts) the three journals are fresh PostgreSQL databases instead,
dropped at the end; ``--run-loops N`` then sets the server's run loops
(``dissensus.serve.runs.RUN_LOOPS_POSTGRES``, 4 by default) for an A/B of that choice.

With ``--repeat N`` the whole measurement runs ``N`` times (fresh journals and server each
time) and ends with every figure's median, minimum and maximum (:mod:`spread`): the
in-process and HTTP figures of one repetition are measured minutes apart on a shared
machine, so a ratio is read against its spread.

Both sides use ``DISSENSUS_JOURNAL_SYNC=normal`` unless it is set (every commit survives
a process kill; see the journal), so the figures compare the service, not the disk.

Usage::

    python benchmarks/bench_serve.py [--panels 400] [--clients 16] [--list-size 25] [--decisions 10000] [--repeat 3]
    python benchmarks/bench_serve.py --postgres "$DISSENSUS_TEST_PG" [--run-loops 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("DISSENSUS_JOURNAL_SYNC", "normal")

from spread import Figures, summary  # noqa: E402

from dissensus.pipeline import adecide, execute_run, load_policy, start_run  # noqa: E402
from dissensus.serve.auth import hash_token  # noqa: E402
from dissensus.store import Journal  # noqa: E402
from dissensus.types import Panel  # noqa: E402

POLICY = """reading: {similarity: tfidf, theta_s: 0.3}
routing: {convergent_disagreement_without_values: seek_context}
acceptance: {min_families: 2}
concurrency: 4
"""
TOKEN = "bench-token"
RUN_LOOPS_SERVER = """import sys
import dissensus.serve.runs as runs
runs.RUN_LOOPS_POSTGRES = int(sys.argv[1])
from dissensus.cli import main
raise SystemExit(main(sys.argv[2:]))
"""


def panels(n: int) -> list[dict[str, Any]]:
    options = [
        {"id": "1", "text": "Refunds are issued within 30 days."},
        {"id": "2", "text": "We like refunds."},
    ]
    out = []
    for i in range(n):
        escalate = i % 2 == 1
        decisions = ["1", "2", "1"] if escalate else ["1", "1", "1"]
        outputs = []
        for j, d in enumerate(decisions):
            o: dict[str, Any] = {
                "agent": f"a{j + 1}",
                "decision": d,
                "family": f"fam{j + 1}",
                "reasoning": f"Option {d} states the refund window clearly for case {i}, agent {j + 1}.",
            }
            if escalate:
                o["values"] = {"accuracy": 0.9 - 0.3 * j, "tone": 0.1 + 0.3 * j}
            else:
                o["swap_decision"] = d
                o["swap_reasoning"] = f"Again option {d} is the one that states the window."
            outputs.append(o)
        out.append(
            {
                "id": f"case-{i}",
                "meta": {"question": "Which reply states the refund policy?", "options": options},
                "outputs": outputs,
            }
        )
    return out


class Journals:
    """Where each measurement journals: fresh SQLite files in ``tmp``, or fresh databases
    on the PostgreSQL server of ``admin_url`` (dropped by :meth:`drop`)."""

    def __init__(self, tmp: Path, admin_url: str | None) -> None:
        self.tmp = tmp
        self.admin_url = admin_url
        self.created: list[str] = []

    def target(self, name: str) -> str:
        if self.admin_url is None:
            return str(self.tmp / f"{name}.sqlite")
        import psycopg

        db = f"bench_serve_{os.getpid()}_{name.replace('-', '_')}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}"')
            conn.execute(f'CREATE DATABASE "{db}"')
        self.created.append(db)
        parts = urlsplit(self.admin_url)
        return urlunsplit(parts._replace(path="/" + db))

    def drop(self) -> None:
        if self.admin_url is None:
            return
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            for db in self.created:
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def in_process(rows: list[dict[str, Any]], journals: Journals, policy_file: Path) -> float:
    path = journals.tmp / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    policy, policy_dir = load_policy(policy_file)
    journal = Journal(journals.target("inprocess"))

    async def run() -> int:
        info = start_run(
            journal, str(path), policy, policy_file=str(policy_file), policy_dir=policy_dir
        )
        return sum([1 async for _ in execute_run(journal, info.run_id)])

    start = time.perf_counter()
    n = asyncio.run(run())
    elapsed = time.perf_counter() - start
    journal.close()
    assert n == len(rows)
    return n / elapsed


def in_process_per_panel(
    rows: list[dict[str, Any]], journals: Journals, policy_file: Path, clients: int
) -> float:
    policy, policy_dir = load_policy(policy_file)
    journal = Journal(journals.target("per-panel"))
    todo = [Panel.model_validate(r) for r in rows]

    async def worker() -> int:
        n = 0
        while todo:
            await adecide(todo.pop(), policy, journal=journal, policy_dir=policy_dir)
            n += 1
        return n

    async def run() -> int:
        return sum(await asyncio.gather(*(worker() for _ in range(clients))))

    start = time.perf_counter()
    n = asyncio.run(run())
    elapsed = time.perf_counter() - start
    journal.close()
    assert n == len(rows)
    return n / elapsed


def start_server(
    journals: Journals, policy_file: Path, run_loops: int | None
) -> tuple[subprocess.Popen[bytes], str]:
    tmp = journals.tmp
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    tokens = tmp / "tokens.txt"
    tokens.write_text(f"{hash_token(TOKEN)} bench admin\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    args = ["serve", "--journal", journals.target("serve"), "--port", str(port),
            "--policy", str(policy_file), "--tokens", str(tokens), "--timeout", "600"]  # fmt: skip
    cmd = [sys.executable, "-m", "dissensus", *args]
    if run_loops is not None:
        cmd = [sys.executable, "-c", RUN_LOOPS_SERVER, str(run_loops), *args]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                return proc, base
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not start")


class Connection:
    """A minimal keep-alive HTTP/1.1 client: the load generator must cost less than httpx.

    Requests are encoded once; responses are read by ``Content-Length`` and only their
    status is checked, so the clients' CPU (same machine) stays small beside the server's.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, base: str) -> Connection:
        host, port = base.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer)

    async def post(self, request: bytes) -> int:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await self.reader.readexactly(length)
        return status

    def close(self) -> None:
        self.writer.close()


def encode(path: str, body: object) -> bytes:
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


async def over_http(base: str, rows: list[dict[str, Any]], clients: int, size: int) -> float:
    requests = [
        encode("/v1/decide", rows[i] if size == 1 else rows[i : i + size])
        for i in range(0, len(rows), size)
    ]
    requests.reverse()
    done = 0

    async def client() -> None:
        nonlocal done
        conn = await Connection.open(base)
        try:
            while requests:
                status = await conn.post(requests.pop())
                if status != 200:
                    raise SystemExit(f"decide answered {status}")
                done += 1
        finally:
            conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - start
    assert done == len(range(0, len(rows), size))
    return len(rows) / elapsed


async def latency(base: str, rows: list[dict[str, Any]]) -> list[float]:
    out = []
    conn = await Connection.open(base)
    try:
        for row in rows:
            request = encode("/v1/decide", row)
            start = time.perf_counter()
            status = await conn.post(request)
            out.append(time.perf_counter() - start)
            if status != 200:
                raise SystemExit(f"decide answered {status}")
    finally:
        conn.close()
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return -1


def measure(args: argparse.Namespace, rows: list[dict[str, Any]]) -> Figures:
    """One repetition: fresh journals and server; prints its report, returns its figures."""
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        policy_file = tmp / "policy.yaml"
        policy_file.write_text(POLICY, encoding="utf-8")
        journals = Journals(tmp, args.postgres)
        try:
            per_panel = in_process_per_panel(rows, journals, policy_file, args.clients)
            base_rate = in_process(rows, journals, policy_file)
            proc, base = start_server(journals, policy_file, args.run_loops)
        except BaseException:
            journals.drop()
            raise
        try:
            asyncio.run(over_http(base, panels(20), 4, 1))  # warm-up (imports, first run)
            cpu0 = cpu_seconds(proc.pid)
            me0 = cpu_seconds(os.getpid())
            single = asyncio.run(over_http(base, rows, args.clients, 1))
            cpu1 = cpu_seconds(proc.pid)
            client_cpu = (cpu_seconds(os.getpid()) - me0) / len(rows)
            listed = asyncio.run(over_http(base, rows, args.clients, args.list_size))
            cpu2 = cpu_seconds(proc.pid)
            lat = asyncio.run(latency(base, rows[: args.latency_requests]))
            served = 20 + 2 * len(rows) + len(lat)
            rest = max(0, args.decisions - served)
            if rest:
                asyncio.run(over_http(base, panels(rest), args.clients, 100))
            rss = peak_rss_kib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            journals.drop()
    lat.sort()
    p50 = statistics.median(lat)
    p99 = lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))]
    where = (
        f"PostgreSQL, {args.run_loops or 'default'} run loop(s)"
        if args.postgres
        else f"SQLite, sync {os.environ['DISSENSUS_JOURNAL_SYNC']}"
    )
    single_cpu = (cpu1 - cpu0) / len(rows) * 1000
    listed_cpu = (cpu2 - cpu1) / len(rows) * 1000
    print(f"panels per measurement: {len(rows)} (tfidf, no model; half escalate); journal {where}")
    print(f"in-process adecide, {args.clients} tasks, 1 panel/run:  {per_panel:8.1f} decisions/s")
    print(f"in-process execute_run, 1 run:                {base_rate:8.1f} decisions/s")
    print(
        f"HTTP, {args.clients} clients, 1 panel/request:          {single:8.1f} decisions/s  ratio {single / per_panel:.2f} to adecide, {single / base_rate:.2f} to execute_run"
    )
    print(
        f"HTTP, {args.clients} clients, {args.list_size} panels/request:        {listed:8.1f} decisions/s  ratio {listed / base_rate:.2f} to execute_run"
    )
    print(
        f"server CPU per decision: {single_cpu:.1f} ms (1 panel/request), "
        f"{listed_cpu:.1f} ms ({args.list_size} panels/request); "
        f"load generator CPU per request {client_cpu * 1000:.1f} ms"
    )
    print(
        f"single-panel decide latency ({len(lat)} sequential requests): p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"
    )
    print(f"server peak RSS after {max(args.decisions, served)} decisions: {rss / 1024:.1f} MiB")
    load = os.getloadavg()[0]
    print(f"load average (1 min) at the end: {load:.2f}")
    return {
        "in-process adecide, decisions/s": per_panel,
        "in-process execute_run, decisions/s": base_rate,
        "HTTP 1 panel/request, decisions/s": single,
        "HTTP 1 panel/request, ratio to adecide": single / per_panel,
        f"HTTP {args.list_size} panels/request, decisions/s": listed,
        f"HTTP {args.list_size} panels/request, ratio to execute_run": listed / base_rate,
        "server CPU ms per decision, 1 panel/request": single_cpu,
        f"server CPU ms per decision, {args.list_size} panels/request": listed_cpu,
        "single-panel latency p50 ms": p50 * 1000,
        "single-panel latency p99 ms": p99 * 1000,
        "load average (1 min)": load,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--panels", type=int, default=400, help="Panels per throughput measurement."
    )
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--list-size", type=int, default=25)
    parser.add_argument("--latency-requests", type=int, default=200)
    parser.add_argument(
        "--decisions", type=int, default=10_000, help="Decisions before the peak RSS is read."
    )
    parser.add_argument(
        "--postgres", default=None, help="Journal on fresh databases of this PostgreSQL server."
    )
    parser.add_argument(
        "--run-loops", type=int, default=None, help="The server's run loops (with --postgres)."
    )
    parser.add_argument("--repeat", type=int, default=1, help="Repetitions (spread printed).")
    args = parser.parse_args()
    if args.run_loops is not None and args.postgres is None:
        parser.error("--run-loops needs --postgres (an SQLite journal has one run loop)")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    rows = panels(args.panels)
    runs: list[Figures] = []
    for i in range(args.repeat):
        if args.repeat > 1:
            print(f"--- repetition {i + 1} of {args.repeat}")
        runs.append(measure(args, rows))
    if args.repeat > 1:
        summary(runs)


if __name__ == "__main__":
    main()
