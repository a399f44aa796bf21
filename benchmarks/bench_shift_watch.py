"""Benchmark of the shift watch's check at many judged cases: reading on against reading all.

A fresh journal gets ``--cases`` one-case runs, as the one-panel doors make them (one
run per request): copies of one real run of ``examples/llmbar-swap.jsonl``'s first
panel decided with ``examples/llmbar-policy.yaml`` (its learned acceptance judges it,
so each run holds one judged case with its feature vector), its ``run.started``
payload cut down to a few fields (the real one holds the acceptance file's
calibration: 150 kB a run). Then ``--every`` more runs are journalled before each check
and, each timed over ``--repeat`` checks (median):

* **before**: what a check read before the watch kept its cases: the journal's count
  of judged cases and every judged case (:func:`judged_vectors`), then the check;
* **after, first**: a watch's first check (nothing kept yet: every judged case read);
* **after**: a check of a watch that checked before (:class:`JudgedCases` reads on
  from its last read), the same check;
* **the read alone**, both ways, without the check;
* **GET /v1/acceptance** (:func:`acceptance_status`, its acceptance monitor included),
  reading all and reading on, once each.

Usage::

    python benchmarks/bench_shift_watch.py [--cases 100000] [--every 100] [--repeat 5]
        [--journal postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("DISSENSUS_JOURNAL_SYNC", "normal")

from dissensus.pipeline.batch import execute_run, start_run  # noqa: E402
from dissensus.pipeline.shift import WATCH_SHARE, check_vectors, watch_index  # noqa: E402
from dissensus.pipeline.shift_watch import WINDOW, JudgedCases, judged_vectors  # noqa: E402
from dissensus.pipeline.spec import RunSpec  # noqa: E402
from dissensus.serve.acceptance import acceptance_status  # noqa: E402
from dissensus.store import Journal  # noqa: E402
from dissensus.store import event_types as ev  # noqa: E402
from dissensus.store.journal import NewEvent  # noqa: E402

POLICY = ROOT / "examples" / "llmbar-policy.yaml"
PANELS = ROOT / "examples" / "llmbar-swap.jsonl"
BLOCK = 1000
"""Runs journalled per transaction while the journal is built."""


def template(spec: RunSpec) -> list[NewEvent]:
    """The events of one real one-case run, its start cut down."""
    line = PANELS.read_text(encoding="utf-8").splitlines()[0]
    with Journal(":memory:") as journal:
        start_run(journal, None, spec, text=line + "\n", run_id="real")

        async def go() -> None:
            async for _ in execute_run(journal, "real"):
                pass

        asyncio.run(go())
        events = list(journal.events("real"))
    assert any(e.type == ev.CASE_ACCEPTANCE and e.payload.get("vector") for e in events)
    out = []
    for e in events:
        payload = e.payload
        if e.type == ev.RUN_STARTED:
            payload = {k: v for k, v in payload.items() if k in ("via", "kind", "version")}
        out.append(NewEvent(e.type, payload, e.key, e.case))
    return out


def journal_runs(journal: Journal, events: list[NewEvent], first: int, n: int) -> None:
    """``n`` one-case runs, ``first`` on, each a copy of ``events``."""
    for start in range(first, first + n, BLOCK):
        with journal.transaction():
            for i in range(start, min(first + n, start + BLOCK)):
                head = events[0]
                run_id = f"r{i:07d}"
                journal.create_run(
                    run_id, kind="decide", meta={}, first=(head.type, head.payload, head.key)
                )
                journal.append_batch(run_id, events[1:])


def old_check(journal: Journal, spec: RunSpec, every: int) -> Any:
    """A check as the watch made it before: count, every judged case read, the check."""
    acceptance = spec.acceptance
    assert acceptance is not None
    journal.count_of_type(ev.CASE_ACCEPTANCE)
    judged = judged_vectors(journal, acceptance["sha256"], window=None)
    index = watch_index(len(judged), every)
    return _check(spec, judged[: index * every][-WINDOW:], index)


def new_check(journal: Journal, spec: RunSpec, cases: JudgedCases, every: int) -> Any:
    """The same check, its cases read on from the last read."""
    acceptance = spec.acceptance
    assert acceptance is not None
    journal.count_of_type(ev.CASE_ACCEPTANCE)
    judged = cases.read(journal, acceptance["sha256"])
    index = watch_index(len(judged), every)
    return _check(spec, judged.vectors(index * every), index)


def _check(spec: RunSpec, window: list[tuple[dict[str, float], str]], index: int) -> Any:
    assert spec.acceptance is not None
    return check_vectors(
        spec.acceptance,
        [v for v, _ in window],
        alpha=spec.policy.acceptance.shift_alpha,
        check=index,
        share=WATCH_SHARE,
    )


def timed(
    journal: Journal, events: list[NewEvent], next_run: list[int], every: int, repeat: int,
    check: Callable[[], Any],
) -> tuple[float, Any]:  # fmt: skip
    """Median seconds of ``check`` with ``every`` new runs journalled before each."""
    times, result = [], None
    for _ in range(repeat):
        journal_runs(journal, events, next_run[0], every)
        next_run[0] += every
        t0 = time.perf_counter()
        result = check()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--journal", default=None, help="a postgresql:// URL (default: SQLite)")
    args = parser.parse_args()
    spec = RunSpec.from_policy(POLICY)
    events = template(spec)
    with tempfile.TemporaryDirectory() as tmp:
        target = args.journal or str(Path(tmp) / "journal.sqlite")
        with Journal(target) as journal:
            t0 = time.perf_counter()
            journal_runs(journal, events, 0, args.cases)
            built = time.perf_counter() - t0
            print(
                f"journal: {args.cases} one-case runs of {len(events)} events each "
                f"({'PostgreSQL' if args.journal else 'SQLite'}), built in {built:.0f} s"
            )
            nxt = [args.cases]
            every, repeat = args.every, args.repeat
            before, old = timed(
                journal, events, nxt, every, repeat, lambda: old_check(journal, spec, every)
            )
            print(f"check, every judged case read (before): {before:.3f} s")
            first, _ = timed(
                journal, events, nxt, every, 1,
                lambda: new_check(journal, spec, JudgedCases(), every),
            )  # fmt: skip
            print(f"check, a watch's first (nothing kept): {first:.3f} s")
            cases = JudgedCases()
            new_check(journal, spec, cases, every)
            after, new = timed(
                journal, events, nxt, every, repeat, lambda: new_check(journal, spec, cases, every)
            )
            print(f"check, read on from the last ({every} new cases): {after:.3f} s")
            sha = spec.acceptance["sha256"] if spec.acceptance else None
            read_all, _ = timed(
                journal, events, nxt, every, repeat, lambda: judged_vectors(journal, sha, None)
            )
            read_on, _ = timed(
                journal, events, nxt, every, repeat, lambda: cases.read(journal, sha)
            )
            print(f"the read alone: every judged case {read_all:.3f} s, read on {read_on:.3f} s")
            assert new_check(journal, spec, cases, every) == old_check(journal, spec, every)
            status_all, _ = timed(
                journal, events, nxt, every, 1,
                lambda: acceptance_status(journal, spec, every=every),
            )  # fmt: skip
            status_on, _ = timed(
                journal, events, nxt, every, 1,
                lambda: acceptance_status(journal, spec, every=every, cases=cases),
            )  # fmt: skip
            print(
                f"GET /v1/acceptance: every judged case read {status_all:.3f} s, "
                f"read on {status_on:.3f} s"
            )
            del old, new
        if args.journal:
            with Journal(target) as journal, journal.transaction():
                journal._backend.exec("DELETE FROM events")
                journal._backend.exec("DELETE FROM runs")


if __name__ == "__main__":
    main()
