"""Benchmark of ``POST /v1/chat/completions``: what the panel door adds over its slowest member.

Set-up, one machine: ``--members`` loopback OpenAI-compatible members
(:class:`dissensus.llm.fakeserver.FakeServer`, each answering after a fixed ``--latency``
seconds), each in a process of its own; ``dissensus serve`` (uvicorn, one process, fresh SQLite
journal, tfidf reading) with those members as its ``panel:``; the clients in this process.
Every request is fanned out to every member, decided by the pipeline and journalled (the
members agree, the case goes through the guard and the follow-up and ends in the review
queue: the longest path a request without a model-backed follow-up takes).

* **added latency**: one client, sequential requests; p50 and p99 of the endpoint's
  latency minus the slowest member's fixed latency ``L``, and minus the p50 of a direct
  request to one member (the same HTTP client, so the transport's own cost cancels);
* **throughput**: ``C`` concurrent clients, each sending requests back to back; requests
  per second against the ideal ``C / L`` (every request waits at least ``L``), for each
  ``C`` of ``--concurrency``. Measured two ways:

  - **from a simultaneous start** (``--rounds`` requests per client, the wall time until
    the last one is answered): all ``C`` first requests arrive at once and queue behind
    each other for the server's CPU, and the last client ends that much later, so with
    few rounds the figure is dominated by the start;
  - **steady state** (``--steady-s`` seconds of the same load): the mean latency of the
    requests sent after the first third of that time, when the start's queue has
    spread out; the rate is ``C`` / that mean (a closed loop: each client always has one
    request waiting), the ratio ``L`` / that mean.

* **the door alone**: the same figures for the library call (:class:`dissensus.panels.PanelChat`,
  in this process, journal in a fresh SQLite file) over in-process members that answer
  after ``L`` (an ``asyncio.sleep``, no HTTP on either side): fan-out, decision and
  journal, without the cost of the HTTP client to the members and of the HTTP server;
* **CPU per request** of the server, of the member servers and of this client process
  (``/proc/PID/stat``, ``time.process_time``), after the warm-up (imports, first
  connections), for the sequential requests and each ``C``; and what that CPU allows:
  one server process runs Python on one core at a time, so it serves at most
  1 / (server CPU per request) requests per second, and the machine at most
  cores / (the three processes' CPU per request).

Targets: p50 added ≤ 10 ms; throughput ≥ 0.9 of ``C / L``.

The panel's ``member_concurrency`` (calls in flight per member across requests, 16 by
default) is set to the largest ``C`` measured, in both the library call and the server's
policy: with the default, 32 concurrent requests would queue half their member calls
behind the limit by design, and the throughput would measure the policy's cap (about
0.5 of ``C / L``), not the door.

With ``--repeat N`` the whole measurement runs ``N`` times (a fresh server and journal
each time) and ends with every headline figure's median, minimum and maximum over the
repetitions, with the load average each one ended at.

Usage::

    python benchmarks/bench_chat.py [--members 5] [--latency 0.25] [--requests 60] [--concurrency 4 16 32] [--steady-s 5] [--repeat 3]
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
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("DISSENSUS_JOURNAL_SYNC", "normal")

from spread import Figures, summary  # noqa: E402

from dissensus.llm.base import BackendResponse, ChatRequest, JsonMode  # noqa: E402
from dissensus.panels import Members, PanelChat  # noqa: E402
from dissensus.pipeline.policy import policy_from_dict  # noqa: E402
from dissensus.serve.auth import hash_token  # noqa: E402
from dissensus.store import Journal  # noqa: E402

TOKEN = "bench-token"
ANSWER = '{"reasoning": "Tom had 3 apples and bought 4 more: 3 + 4 = 7.", "answer": "7"}'
QUESTION = "Tom has 3 apples and buys 4 more. How many apples does he have?"

MEMBER_SCRIPT = """
import sys
from dissensus.llm.fakeserver import FakeServer, ServerSettings
from dissensus.llm.scripted import ScriptedRules
latency, answer = float(sys.argv[1]), sys.argv[2]
server = FakeServer(ScriptedRules(default=answer), ServerSettings(latency_s=latency)).start()
print(server.base_url, flush=True)
sys.stdin.read()
server.stop()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_members(n: int, latency: float) -> tuple[list[subprocess.Popen[str]], list[str]]:
    """``n`` member servers, each a process of its own (as separate hosts would be: no
    member waits for another's share of one interpreter), and their base URLs."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", MEMBER_SCRIPT, str(latency), ANSWER],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    urls = []
    for proc in procs:
        assert proc.stdout is not None
        urls.append(proc.stdout.readline().strip())
    return procs, urls


def stop_members(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.close()
    for proc in procs:
        proc.wait(timeout=30)


def write_policy(tmp: Path, urls: list[str], latency: float, concurrency: int) -> Path:
    members = [
        {"name": f"m{i}", "model": "openai:fake-model", "base_url": url, "family": f"f{i}"}
        for i, url in enumerate(urls)
    ]
    policy = {
        "reading": {"similarity": "tfidf"},
        "panel": {
            "answer": "number",
            "members": members,
            "attempt_timeout_s": latency + 30,
            "deadline_s": latency + 60,
            "member_concurrency": concurrency,
        },
    }
    path = tmp / "policy.yaml"
    path.write_text(json.dumps(policy), encoding="utf-8")  # JSON is YAML
    return path


def start_server(tmp: Path, policy: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    tokens = tmp / "tokens.txt"
    tokens.write_text(f"{hash_token(TOKEN)} bench submit\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "dissensus", "serve", "--journal", str(tmp / "serve.sqlite"), "--port", str(port),
           "--policy", str(policy), "--tokens", str(tokens), "--timeout", "600"]  # fmt: skip
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


BODY = {"model": "panel", "messages": [{"role": "user", "content": QUESTION}]}
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


async def one(client: httpx.AsyncClient, url: str) -> float:
    started = time.perf_counter()
    response = await client.post(url, json=BODY, headers=HEADERS)
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise SystemExit(f"{url}: {response.status_code} {response.text[:300]}")
    return elapsed


async def sequential(url: str, n: int) -> list[float]:
    async with httpx.AsyncClient(timeout=600) as client:
        await one(client, url)  # warm-up: connection, first run
        return [await one(client, url) for _ in range(n)]


async def steady(call: Callable[[], Awaitable[float]], clients: int, seconds: float) -> float:
    """Steady-state ratio to ``C / L`` over ``L`` = 1: the mean latency of the requests
    ``clients`` back-to-back senders start after the first third of ``seconds`` (see the
    module docstring); the caller divides ``L`` by it."""
    started = time.perf_counter()
    since, until = started + seconds / 3, started + seconds
    kept: list[float] = []

    async def worker() -> None:
        while (now := time.perf_counter()) < until:
            elapsed = await call()
            if now >= since:
                kept.append(elapsed)

    await asyncio.gather(*(worker() for _ in range(clients)))
    return statistics.mean(kept)


async def steady_http(url: str, clients: int, seconds: float) -> float:
    """:func:`steady` against the endpoint, over ``clients`` pooled connections."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        await asyncio.gather(*(one(client, url) for _ in range(clients)))  # warm-up
        return await steady(lambda: one(client, url), clients, seconds)


async def concurrent(url: str, clients: int, each: int, meter: Meter | None = None) -> float:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        await asyncio.gather(*(one(client, url) for _ in range(clients)))  # warm-up

        async def worker() -> None:
            for _ in range(each):
                await one(client, url)

        if meter is not None:
            meter.start()
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        rate = clients * each / (time.perf_counter() - started)
        if meter is not None:
            meter.stop(clients * each)
        return rate


class Meter:
    """CPU seconds per request of the server, the member servers and this client process."""

    def __init__(self, server: int, members: list[int]) -> None:
        self.pids = {"server": [server], "members": members}
        self.per_request: dict[str, float] = {}
        self._start: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        now = {name: sum(cpu_seconds(pid) for pid in pids) for name, pids in self.pids.items()}
        now["client"] = time.process_time()
        return now

    def start(self) -> None:
        self._start = self._now()

    def stop(self, requests: int) -> None:
        now = self._now()
        self.per_request = {k: (now[k] - self._start[k]) / requests for k in now}

    def line(self) -> str:
        parts = ", ".join(f"{k} {v * 1000:5.1f}" for k, v in self.per_request.items())
        return f"CPU ms per request: {parts}"


class Sleeper:
    """An in-process member answering after a fixed latency."""

    provider = "bench"

    def __init__(self, latency: float) -> None:
        self.model_id = "sleeper"
        self.latency = latency

    async def send(self, request: ChatRequest, *, json_mode: JsonMode) -> BackendResponse:
        await asyncio.sleep(self.latency)
        return BackendResponse(text=ANSWER, model="sleeper", prompt_tokens=20, completion_tokens=20)

    async def aclose(self) -> None:
        return None


def library(
    tmp: Path, n: int, latency: float, requests: int, rounds: int, cs: list[int], seconds: float
) -> tuple[list[float], dict[int, float], dict[int, float], float]:
    """The library call's sequential latencies, rates per ``C`` (from a simultaneous
    start), steady-state mean latencies per ``C`` and CPU ms per sequential request."""
    members = [{"name": f"m{i}", "model": "scripted:unused", "family": f"f{i}"} for i in range(n)]
    policy = policy_from_dict({"reading": {"similarity": "tfidf"}, "panel": {"answer": "number"}})
    settings = policy.panel.model_validate(
        {"answer": "number", "members": members, "member_concurrency": max(cs)}
    )
    policy = policy.model_copy(update={"panel": settings})
    journal = Journal(str(tmp / "library.sqlite"))
    sleepers = Members(settings, {m["name"]: Sleeper(latency) for m in members})
    chat = PanelChat(policy, journal=journal, members=sleepers)

    async def timed() -> float:
        started = time.perf_counter()
        await chat.acomplete(BODY)
        return time.perf_counter() - started

    cpu_ms: list[float] = []

    async def run() -> tuple[list[float], dict[int, float], dict[int, float]]:
        await timed()
        cpu0 = time.process_time()
        seq = [await timed() for _ in range(requests)]
        cpu_ms.append((time.process_time() - cpu0) / requests * 1000)
        rates: dict[int, float] = {}
        for c in cs:

            async def worker() -> None:
                for _ in range(rounds):
                    await timed()

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(c)))
            rates[c] = c * rounds / (time.perf_counter() - started)
        steadies = {c: await steady(timed, c, seconds) for c in cs} if seconds > 0 else {}
        return seq, rates, steadies

    try:
        seq, rates, steadies = asyncio.run(run())
    finally:
        chat.close()
        journal.close()
    return seq, rates, steadies, cpu_ms[0]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(
    title: str,
    lat: float,
    seq: list[float],
    rates: dict[int, float],
    steadies: dict[int, float],
    cpu_lines: dict[int, str] | None = None,
) -> None:
    p50, p99 = pct(seq, 0.5), pct(seq, 0.99)
    lines = cpu_lines or {}
    print(title)
    print(f"  sequential ({len(seq)}): p50 {p50 * 1000:7.1f} ms, p99 {p99 * 1000:7.1f} ms")
    print(
        f"  added over L:      p50 {(p50 - lat) * 1000:7.1f} ms, p99 {(p99 - lat) * 1000:7.1f} ms"
    )
    print(
        f"  C =   1 sequential: {1 / statistics.mean(seq):7.1f} requests/s; C/L = {1 / lat:7.1f}; "
        f"ratio {lat / statistics.mean(seq):5.2f}" + (f"; {lines[1]}" if 1 in lines else "")
    )
    for c, rate in rates.items():
        ideal = c / lat
        print(
            f"  C = {c:3d} concurrent: {rate:7.1f} requests/s; C/L = {ideal:7.1f}; "
            f"ratio {rate / ideal:5.2f}" + (f"; {lines[c]}" if c in lines else "")
        )
    for c, mean in steadies.items():
        print(
            f"  C = {c:3d} steady state: {c / mean:7.1f} requests/s; C/L = {c / lat:7.1f}; "
            f"ratio {lat / mean:5.2f}; mean latency {mean * 1000:7.1f} ms"
        )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(args: argparse.Namespace, tmp: Path) -> Figures:
    """One repetition: the library call, then the endpoint; prints its full report."""
    lat = args.latency
    lib_seq, lib_rates, lib_steady, lib_cpu = library(
        tmp, args.members, lat, args.requests, args.rounds, args.concurrency, args.steady_s
    )
    members, urls = start_members(args.members, lat)
    cpu: dict[int, dict[str, float]] = {}
    try:
        proc, base = start_server(tmp, write_policy(tmp, urls, lat, max(args.concurrency)))
        try:
            chat = base + "/v1/chat/completions"
            direct = asyncio.run(sequential(urls[0] + "/chat/completions", args.requests))
            asyncio.run(sequential(chat, 2))  # warm-up: imports, first connections
            meter = Meter(proc.pid, [m.pid for m in members])
            meter.start()
            seq = asyncio.run(sequential(chat, args.requests))
            meter.stop(args.requests + 1)
            cpu_lines = {1: meter.line()}
            cpu[1] = dict(meter.per_request)
            rates: dict[int, float] = {}
            for c in args.concurrency:
                rates[c] = asyncio.run(concurrent(chat, c, args.rounds, meter))
                cpu_lines[c] = meter.line()
                cpu[c] = dict(meter.per_request)
            steadies = {
                c: asyncio.run(steady_http(chat, c, args.steady_s))
                for c in (args.concurrency if args.steady_s > 0 else [])
            }
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    finally:
        stop_members(members)
    d50 = statistics.median(direct)
    print(
        f"members: {args.members}, fixed latency L = {lat * 1000:.0f} ms; "
        f"journal sync {os.environ['DISSENSUS_JOURNAL_SYNC']}; {os.cpu_count()} CPUs"
    )
    print(f"library call: CPU per sequential request {lib_cpu:.1f} ms")
    report("library call (PanelChat), in-process members:", lat, lib_seq, lib_rates, lib_steady)
    report("HTTP endpoint, loopback member servers:", lat, seq, rates, steadies, cpu_lines)
    print(
        f"  direct request to one member: p50 {d50 * 1000:7.1f} ms; "
        f"endpoint p50 added over it: {(pct(seq, 0.5) - d50) * 1000:7.1f} ms"
    )
    cores = os.cpu_count() or 1
    print(f"  CPU bound ({cores} cores; the server's Python runs on one core at a time):")
    for c, per in cpu.items():
        ideal = 0.9 * c / lat
        total = sum(per.values())
        print(
            f"    C = {c:3d}: 0.9 C/L = {ideal:6.1f} requests/s needs {ideal * per['server']:4.2f} "
            f"server cores (of 1) and {ideal * total:4.2f} machine cores (of {cores}); "
            f"CPU allows at most {min(1 / per['server'], cores / total):6.1f} requests/s"
        )
    load = os.getloadavg()
    print(f"  load average: {' '.join(f'{x:.2f}' for x in load)}")
    figures: Figures = {
        "library CPU ms per request": lib_cpu,
        "library added p50 ms": (pct(lib_seq, 0.5) - lat) * 1000,
        "library ratio C=1": lat / statistics.mean(lib_seq),
        **{f"library ratio C={c}": r * lat / c for c, r in lib_rates.items()},
        "endpoint added p50 ms": (pct(seq, 0.5) - lat) * 1000,
        "endpoint added p99 ms": (pct(seq, 0.99) - lat) * 1000,
        "endpoint added p50 over a direct member request, ms": (pct(seq, 0.5) - d50) * 1000,
        "endpoint ratio C=1": lat / statistics.mean(seq),
        **{f"endpoint ratio C={c}": r * lat / c for c, r in rates.items()},
        **{f"library steady ratio C={c}": lat / m for c, m in lib_steady.items()},
        **{f"endpoint steady ratio C={c}": lat / m for c, m in steadies.items()},
        **{f"server CPU ms per request C={c}": per["server"] * 1000 for c, per in cpu.items()},
        "load average (1 min)": load[0],
    }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.25, help="Each member's latency, s.")
    parser.add_argument("--requests", type=int, default=60, help="Sequential requests.")
    parser.add_argument("--rounds", type=int, default=4, help="Requests per concurrent client.")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 16, 32])
    parser.add_argument(
        "--steady-s", type=float, default=5.0, help="Seconds of each steady-state run (0: none)."
    )
    parser.add_argument("--repeat", type=int, default=1, help="Repetitions (spread printed).")
    args = parser.parse_args()
    runs: list[Figures] = []
    for i in range(args.repeat):
        if args.repeat > 1:
            print(f"--- repetition {i + 1} of {args.repeat}")
        with tempfile.TemporaryDirectory() as name:
            runs.append(measure(args, Path(name)))
    if args.repeat > 1:
        summary(runs)


if __name__ == "__main__":
    main()
