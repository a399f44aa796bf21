"""Append throughput of the run journal: SQLite and PostgreSQL, one and several writers.

Every configuration appends ``--events`` events with a payload the size of a typical
``case.reading`` (about 600 bytes of canonical JSON), each append its own committed
transaction (what the pipeline does), and reports appends per second:

* SQLite, ``synchronous=FULL`` (the default) and ``NORMAL`` (``$DISSENSUS_JOURNAL_SYNC``),
  a file in ``--dir`` (default: a temporary directory);
* PostgreSQL at ``--pg URL`` (default ``$DISSENSUS_TEST_PG``; skipped when neither is set),
  as the server is configured (``scripts/ci-postgres.sh`` runs it with ``fsync=off``,
  so its figures are an upper bound for a durable server);
* ``--writers`` processes appending at once, to one run (their appends serialise on the
  run's lock) and to one run each.

Every run is verified after it is written. Usage::

    python benchmarks/bench_journal.py [--events 2000] [--writers 4] [--pg URL] [--dir DIR]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from dissensus.store import Journal

PAYLOAD: dict[str, Any] = {
    "state": "DA",
    "agreement": 0.6667,
    "mean_similarity": 0.4123,
    "decisions": {"a1": "1", "a2": "2", "a3": "1"},
    "similarities": [[1.0, 0.41, 0.39], [0.41, 1.0, 0.44], [0.39, 0.44, 1.0]],
    "model": "tfidf",
    "reasoning": ["Output (a) follows the instruction and stays on topic. " * 2] * 3,
}


def _append(target: str, run_id: str, n: int, tag: str, sync: str | None) -> None:
    with Journal(target, synchronous=sync) as j:
        for i in range(n):
            j.append(run_id, "case.reading", {**PAYLOAD, "i": i}, key=f"{tag}/{i}", case=str(i))


def _worker(target: str, run_id: str, n: int, tag: str, barrier: Any, spans: Any) -> None:
    """Open the journal, wait for every writer, append; report (start, end) wall times."""
    with Journal(target) as j:
        barrier.wait()
        start = time.time()
        for i in range(n):
            j.append(run_id, "case.reading", {**PAYLOAD, "i": i}, key=f"{tag}/{i}", case=str(i))
        spans.put((start, time.time()))


def _one(target: str, n: int, sync: str | None = None) -> float:
    run_id = "bench-" + uuid.uuid4().hex[:8]
    with Journal(target, synchronous=sync) as j:
        j.create_run(run_id, kind="bench", meta={})
    start = time.perf_counter()
    _append(target, run_id, n, "w", sync)
    rate = n / (time.perf_counter() - start)
    with Journal(target) as j:
        assert j.verify(run_id).ok
    return rate


def _many(target: str, n: int, writers: int, *, shared: bool) -> float:
    runs = ["bench-" + uuid.uuid4().hex[:8] for _ in range(1 if shared else writers)]
    with Journal(target) as j:
        for run_id in runs:
            j.create_run(run_id, kind="bench", meta={})
    per = n // writers
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(writers)
    spans = ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker, args=(target, runs[0 if shared else w], per, f"w{w}", barrier, spans)
        )
        for w in range(writers)
    ]
    for p in procs:
        p.start()
    got = [spans.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    assert all(p.exitcode == 0 for p in procs)
    # Process start-up and imports are not counted: from the first append to the last.
    elapsed = max(end for _, end in got) - min(start for start, _ in got)
    with Journal(target) as j:
        for run_id in runs:
            assert j.verify(run_id).ok
    return per * writers / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--pg", default=os.environ.get("DISSENSUS_TEST_PG", ""))
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    rows: list[tuple[str, str, float]] = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        full = str(Path(tmp) / "full.sqlite")
        normal = str(Path(tmp) / "normal.sqlite")
        rows.append(("sqlite synchronous=FULL", "1 writer", _one(full, args.events, "full")))
        rows.append(("sqlite synchronous=NORMAL", "1 writer", _one(normal, args.events, "normal")))
        rows.append(
            (
                "sqlite synchronous=FULL",
                f"{args.writers} writers, 1 run",
                _many(full, args.events, args.writers, shared=True),
            )
        )
        rows.append(
            (
                "sqlite synchronous=FULL",
                f"{args.writers} writers, {args.writers} runs",
                _many(full, args.events, args.writers, shared=False),
            )
        )
    if args.pg:
        rows.append(("postgresql", "1 writer", _one(args.pg, args.events)))
        rows.append(
            (
                "postgresql",
                f"{args.writers} writers, 1 run",
                _many(args.pg, args.events, args.writers, shared=True),
            )
        )
        rows.append(
            (
                "postgresql",
                f"{args.writers} writers, {args.writers} runs",
                _many(args.pg, args.events, args.writers, shared=False),
            )
        )
    else:
        print("postgresql: skipped (no --pg URL and $DISSENSUS_TEST_PG unset)")
    print(f"journal appends/s ({args.events} events per configuration, {os.cpu_count()} CPUs)")
    for backend, writers, rate in rows:
        print(f"  {backend:<27} {writers:<20} {rate:>9.0f} appends/s")


if __name__ == "__main__":
    main()
