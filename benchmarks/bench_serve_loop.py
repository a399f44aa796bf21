"""The service's event loop during a MiniLM run, and how fast SIGTERM stops the server.

Starts ``dissensus serve --policy examples/llmbar-policy.yaml`` (MiniLM, learned
acceptance) on a loopback port, submits the bundled LLMBar panels (``--panels``, default
300) with ``POST /v1/decide?async=true``, and while the run decides asks ``/healthz``
every 20 ms: it prints the latency's median, 99th percentile and maximum (the target is
under 100 ms, since the run decides on a thread of its own). Then it sends SIGTERM while
the run is still deciding, prints the seconds the server took to exit (documented: within
the graceful-shutdown time, 5 s by default) and checks that the run was left
``incomplete`` and verifies (resumable with ``dissensus runs resume``).

Usage: ``python benchmarks/bench_serve_loop.py [--panels N] [--seconds S]``. Figures on a
loaded machine say more about the machine than the server: check the load average it
prints first.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DISSENSUS = str(Path(sys.executable).parent / "dissensus")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        data: bytes = response.read()
        return data


def _post(url: str, body: bytes) -> dict[str, object]:
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        data: dict[str, object] = json.loads(response.read())
        return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--panels", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=15.0, help="sampling time before SIGTERM")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with open(ROOT / "examples" / "llmbar-swap.jsonl", encoding="utf-8") as handle:
        rows = [json.loads(line) for _, line in zip(range(args.panels), handle, strict=False)]
    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-loop-"))
    port = _port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            DISSENSUS,
            "serve",
            "--policy",
            str(ROOT / "examples" / "llmbar-policy.yaml"),
            "--journal",
            str(tmp / "journal.sqlite"),
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            try:
                _get(base + "/healthz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        started = _post(base + "/v1/decide?async=true", json.dumps(rows).encode())
        run_id = str(started["run_id"])
        latencies: list[float] = []
        worst_at = 0.0
        begin = time.monotonic()
        end = begin + args.seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            _get(base + "/healthz")
            latencies.append((time.perf_counter() - t0) * 1000)
            if latencies[-1] >= max(latencies):
                worst_at = time.monotonic() - begin
            time.sleep(0.02)
        doc = json.loads(_get(f"{base}/v1/runs/{run_id}"))
        done_before = doc["done"]
        term = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        stopped_in = time.monotonic() - term
    finally:
        if proc.poll() is None:
            proc.kill()
    ordered = sorted(latencies)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    print(
        f"/healthz during the run: {len(ordered)} requests, median "
        f"{statistics.median(ordered):.1f} ms, p99 {p99:.1f} ms, max {ordered[-1]:.1f} ms "
        f"({worst_at:.1f} s into the run); {sum(x > 100 for x in ordered)} over 100 ms"
    )
    print(f"cases decided when SIGTERM was sent: {done_before} of {len(rows)}")
    print(f"server exited {stopped_in:.2f} s after SIGTERM (exit code {proc.returncode})")
    shown = subprocess.run(
        [DISSENSUS, "runs", "verify", run_id, "--journal", str(tmp / "journal.sqlite")],
        capture_output=True,
        text=True,
        check=False,
    )
    print(f"runs verify: {shown.stdout.strip() or shown.stderr.strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
