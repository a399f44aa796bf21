"""Benchmark of a review desk page with nothing new: what its followers read and keep.

An SQLite journal (``--journal``, built when it holds no run) gets ``--runs`` runs of
the decide kind, each holding a start naming a small acceptance file, one automatically
committed case record and one review item (copies of a few fields, so building it
decides no panel). A desk (:class:`~dissensus.serve.journal_adapter.ReviewDesk`) and a
shift watch's judged cases (:class:`~dissensus.pipeline.shift_watch.JudgedCases`) on the
same journal object then read it once (the first page), and each of ``--repeat`` pages
with nothing new is timed (median, CPU seconds of the process and wall seconds):

* **followers**: the reads of the four followers a queue page and the shift watch make
  (the automatic decisions, the runs' acceptance files, the review items' search texts,
  the judged cases);
* **page**: the queue page's calls that read them
  (:meth:`~dissensus.serve.journal_adapter.ReviewDesk.auto_cases` and
  :meth:`~dissensus.serve.journal_adapter.ReviewDesk.acceptance_files`);
* **one new run**: the four followers' reads after another connection journalled one
  more run (the run's writing not timed).

Then the memory the four followers keep (``tracemalloc``, after a first read by a new
desk and watch on a journal object of their own, so the runs' heads they share are
counted), in all and per run, and after another connection journalled one more run and
they read it.

Usage::

    python benchmarks/bench_desk_follow.py [--runs 20000] [--repeat 20] [--journal FILE]

An SQLite ``--journal`` given is copied (SQLite's backup API) and the copy read and
written: the file itself is only built, when it holds no run. A PostgreSQL one
(``postgresql://...``) is read and written as it is (each run of the benchmark adds
``--repeat`` runs to it).
"""

from __future__ import annotations

import argparse
import gc
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("DISSENSUS_JOURNAL_SYNC", "normal")

from dissensus.pipeline.batch import RUN_KIND  # noqa: E402
from dissensus.pipeline.shift_watch import JudgedCases  # noqa: E402
from dissensus.serve.journal_adapter import ReviewDesk  # noqa: E402
from dissensus.store import Journal  # noqa: E402
from dissensus.store import event_types as ev  # noqa: E402
from dissensus.store.journal import NewEvent  # noqa: E402

BLOCK = 1000
"""Runs journalled per transaction while the journal is built."""

ACCEPTANCE = {"sha256": "a" * 64, "target_precision": 0.9, "delta": 0.05}


def build(journal: Journal, runs: int, first: int = 0) -> None:
    """``runs`` decide runs of one automatic decision and one review item each, numbered
    from ``first``."""
    for start in range(first, first + runs, BLOCK):
        with journal.transaction():
            for i in range(start, min(first + runs, start + BLOCK)):
                run_id = f"r{i:07d}"
                started = {"kind": RUN_KIND, "via": "bench", "acceptance": ACCEPTANCE}
                journal.create_run(
                    run_id, kind=RUN_KIND, meta={}, first=(ev.RUN_STARTED, started, "start")
                )
                review = {
                    "review_id": f"{run_id}.2",
                    "id": f"c{i}",
                    "reason": "split",
                    "panel": {"meta": {"question": f"question {i % 7}"}},
                }
                record = {"id": f"c{i}", "auto": True, "decision": "1"}
                journal.append_batch(
                    run_id,
                    [
                        NewEvent(ev.CASE_RECORD, record, "case/1/record", "1"),
                        NewEvent(ev.REVIEW_OPENED, review, "case/2/review", "2"),
                    ],
                )


def followers(desk: ReviewDesk, cases: JudgedCases) -> Callable[[], Any]:
    """The four followers' reads, as a page and the shift watch make them."""

    def read() -> Any:
        journal = desk.journal
        return (
            desk._records.read(journal),
            desk._files.read(journal),
            desk._opened.read(journal),
            cases.read(journal, ACCEPTANCE["sha256"]),
        )

    return read


def page(desk: ReviewDesk) -> Callable[[], Any]:
    def read() -> Any:
        return desk.auto_cases(audited=True), desk.acceptance_files()

    return read


def timed(
    call: Callable[[], Any], repeat: int, before: Callable[[int], Any] | None = None
) -> tuple[float, float]:
    """Median CPU and wall seconds of ``call`` (``before(i)`` run untimed before the
    ``i``-th)."""
    cpu, wall = [], []
    for i in range(repeat):
        if before is not None:
            before(i)
        c0, w0 = time.process_time(), time.perf_counter()
        call()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return statistics.median(cpu), statistics.median(wall)


def kept_bytes(path: str, other: Journal, first: int) -> tuple[int, int]:
    """Bytes a new desk's and watch's followers keep after their first read of a journal
    object of their own (whose shared heads are theirs alone), and after another
    connection journalled one more run (numbered ``first``) and they read it."""
    with Journal(path) as journal:
        gc.collect()
        tracemalloc.start()
        desk, cases = ReviewDesk(journal, claim_ttl_s=60), JudgedCases()
        read = followers(desk, cases)
        read()
        gc.collect()
        size = tracemalloc.get_traced_memory()[0]
        build(other, 1, first)
        read()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        del desk, cases, read
    return size, after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--journal", help="an SQLite file or a PostgreSQL URL (built when empty)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "desk.sqlite")
        source = args.journal or path
        with Journal(source) as journal:
            if journal.run("r0000000", missing_ok=True) is None:
                t0 = time.perf_counter()
                build(journal, args.runs)
                print(f"built {args.runs} runs in {time.perf_counter() - t0:.1f} s")
        if source.startswith("postgresql://"):
            path = source  # read and written as it is
        elif source != path:
            with sqlite3.connect(source) as src, sqlite3.connect(path) as dst:
                src.backup(dst)
            src.close()
            dst.close()
        with Journal(path) as journal, Journal(path) as other:
            runs = len(journal._backend.values("SELECT run_id FROM runs"))
            desk, cases = ReviewDesk(journal, claim_ttl_s=60), JudgedCases()
            t0 = time.perf_counter()
            followers(desk, cases)()
            print(
                f"{runs} runs; first read of the four followers: {time.perf_counter() - t0:.2f} s"
            )
            cpu, wall = timed(followers(desk, cases), args.repeat)
            print(
                f"nothing new, four followers: {cpu * 1000:.2f} ms CPU, {wall * 1000:.2f} ms wall"
            )
            cpu, wall = timed(page(desk), args.repeat)
            print(
                "nothing new, auto_cases + acceptance_files: "
                f"{cpu * 1000:.2f} ms CPU, {wall * 1000:.2f} ms wall"
            )
            cpu, wall = timed(
                followers(desk, cases), args.repeat, lambda i: build(other, 1, runs + i)
            )
            print(
                f"one new run (another connection), four followers: {cpu * 1000:.2f} ms CPU, "
                f"{wall * 1000:.2f} ms wall"
            )
            size, after = kept_bytes(path, other, runs + args.repeat)
            print(f"kept by the four followers: {size / 1e6:.1f} MB, {size / runs:.0f} bytes a run")
            print(f"kept after one new run (another connection): {after / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
