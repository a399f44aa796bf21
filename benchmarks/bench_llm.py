"""Benchmark of the model client: throughput against a fixed-latency server, and overhead.

1. Throughput. The loopback server (``dissensus fake-llm``, in its own process so it
   does not share the interpreter lock) answers every request after ``L`` seconds.
   ``N`` calls at concurrency ``C`` can at best run at ``C / L`` calls a second. The
   benchmark reports the achieved rate as a ratio to ``C / L`` (target >= 0.9) for the
   client, and for raw ``AsyncOpenAI`` calls under an ``asyncio.Semaphore(C)`` in the same
   process as the baseline.
2. Overhead. ``ModelClient.chat`` over an in-process backend that answers at once,
   against calling that backend's ``send`` directly: the difference per call is the
   client's own cost (budget, usage, semaphore, span, request copy), in microseconds;
   also with a pydantic schema (extraction and validation included).
3. Peak memory: ``tracemalloc`` peak of the overhead runs and the process's max RSS.

Usage: ``python benchmarks/bench_llm.py [--n 960] [--concurrency 16] [--latency 0.5]``
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from pydantic import BaseModel

from dissensus.llm import (
    BackendResponse,
    Budget,
    ChatRequest,
    ClientSettings,
    JsonMode,
    Message,
    ModelClient,
    OpenAIBackend,
)


class Verdict(BaseModel):
    verdict: str
    score: int


class InstantBackend:
    """Answers at once: isolates the client's own cost."""

    provider = "bench"
    model_id = "instant"

    async def send(self, request: ChatRequest, *, json_mode: JsonMode) -> BackendResponse:
        return BackendResponse(
            text='{"verdict": "A", "score": 1}',
            model="instant",
            prompt_tokens=5,
            completion_tokens=9,
        )

    async def aclose(self) -> None:
        return None


def request(i: int) -> ChatRequest:
    return ChatRequest(
        messages=[Message(role="user", content=f"item {i}")], agent=f"a{i % 5}", stage="bench"
    )


def start_server(latency: float, script: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dissensus",
            "fake-llm",
            "--port",
            "0",
            "--script",
            str(script),
            "--latency",
            str(latency),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"fake-llm did not start: {line!r}")
    return proc, line.split()[-1]


async def raw_sdk(base_url: str, n: int, concurrency: int) -> float:
    from openai import AsyncOpenAI

    sdk = AsyncOpenAI(api_key="unused", base_url=base_url, max_retries=0, timeout=60)
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            await sdk.chat.completions.create(
                model="fake-model", messages=[{"role": "user", "content": f"item {i}"}]
            )

    await one(-1)  # warm-up: platform headers, first connection
    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    elapsed = time.perf_counter() - start
    await sdk.close()
    return elapsed


async def via_client(base_url: str, n: int, concurrency: int) -> tuple[float, int]:
    backend = OpenAIBackend("fake-model", base_url=base_url, api_key="unused", timeout_s=60)
    settings = ClientSettings(concurrency=concurrency)
    async with ModelClient(backend, settings=settings, budget=Budget(max_calls=n + 10)) as client:
        await client.chat(request(-1))
        start = time.perf_counter()
        await asyncio.gather(*(client.chat(request(i)) for i in range(n)))
        elapsed = time.perf_counter() - start
        attempts = client.usage.attempts
    return elapsed, attempts


async def overhead(n: int, structured: bool) -> tuple[float, float]:
    backend = InstantBackend()
    client = ModelClient(backend, budget=Budget(max_calls=10 * n, max_tokens=10**9))
    schema = Verdict if structured else None
    reqs = [request(i) for i in range(n)]
    start = time.perf_counter()
    for r in reqs:
        await backend.send(r, json_mode="none")
    base = time.perf_counter() - start
    start = time.perf_counter()
    for r in reqs:
        await client.chat(r, schema=schema)
    full = time.perf_counter() - start
    await client.aclose()
    return base, full


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=960, help="calls in the throughput runs")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--latency",
        type=float,
        default=0.5,
        help="server latency in seconds (model calls take longer)",
    )
    parser.add_argument("--overhead-n", type=int, default=5000, help="calls in the overhead runs")
    args = parser.parse_args()
    n, c, lat = args.n, args.concurrency, args.latency
    ideal = c / lat

    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "rules.yaml"
        script.write_text('default: "ok"\n')
        proc, base_url = start_server(lat, script)
        try:
            raw_s = asyncio.run(raw_sdk(base_url, n, c))
            client_s, attempts = asyncio.run(via_client(base_url, n, c))
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    print(f"throughput: N={n} calls, C={c}, L={lat}s, ideal C/L = {ideal:.1f} calls/s")
    print(f"  raw AsyncOpenAI : {n / raw_s:8.1f} calls/s  ratio to C/L = {n / raw_s / ideal:.3f}")
    print(
        f"  ModelClient     : {n / client_s:8.1f} calls/s  ratio to C/L = {n / client_s / ideal:.3f}"
        f"  (attempts {attempts})"
    )
    print(f"  ModelClient / raw SDK throughput = {raw_s / client_s:.3f}")

    tracemalloc.start()
    for structured in (False, True):
        base, full = asyncio.run(overhead(args.overhead_n, structured))
        per_call_us = (full - base) / args.overhead_n * 1e6
        label = "with schema " if structured else "plain       "
        print(
            f"overhead {label}: {per_call_us:8.1f} us/call over a direct backend.send "
            f"({base / args.overhead_n * 1e6:.2f} us), ratio {full / base:.1f}x, n={args.overhead_n}"
        )
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"peak traced memory (overhead runs): {peak / 1e6:.2f} MB")
    print(
        f"max RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MB"
    )


if __name__ == "__main__":
    main()
