"""Benchmark of listing the review queue: the review index against reading every event.

A fresh SQLite journal gets ``--items`` review items spread over runs of 4 (copies of
one real escalation, so building the journal does not decide thousands of panels), and
``--resolved`` of them (the oldest, as a working queue resolves them) are resolved with
the queue's own :func:`~dissensus.pipeline.review.resolve`. Then, each timed over
``--repeat`` calls (median):

* **head**: the first 10 open items, what a reviewer's client asks for
  (``GET /v1/review?limit=10``), from :func:`list_items` (review index) and from
  :func:`list_items_from_events` (every ``review.opened`` event and its resolution, the
  way the queue was listed before the index);
* **all open**: every open item, both ways;
* **count**: how many items are open (the review page's count), from the index;
* **search**: the queue searched for text (``/review?q=topic tax``, a quarter of the
  items match), by reading and validating every item (the way the review desk searched
  before) and by :meth:`~dissensus.serve.journal_adapter.ReviewDesk.order` (the review
  index, each item's search text read from its payload once, then remembered): its
  first call on a new desk, and the calls after it (a case page, ``j``, a resolve).

Usage::

    python benchmarks/bench_review_list.py [--items 2000] [--resolved 1500] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("DISSENSUS_JOURNAL_SYNC", "normal")

from dissensus.pipeline import decide, policy_from_dict  # noqa: E402
from dissensus.pipeline.review import (  # noqa: E402
    ReviewStatus,
    find_item,
    list_items,
    list_items_from_events,
    resolve,
    review_entries,
)
from dissensus.serve.journal_adapter import ReviewDesk, question_of  # noqa: E402
from dissensus.store import Journal  # noqa: E402
from pipeline_cases import as_panel, panel  # noqa: E402

POLICY = policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.3}})
PER_RUN = 4
TOPICS = ("tax", "law", "bio", "chem")


def template() -> dict[str, Any]:
    with Journal(":memory:") as journal:
        row = panel(
            "vc",
            ["1", "2", "1"],
            values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
            reasoning=["Option 1 is right."] * 3,
        )
        record = decide(as_panel(row), POLICY, journal=journal, run_id="T")
        assert record.review_id
        line = find_item(journal, record.review_id).item.line
        opened = journal.get("T", f"case/{line}/review")
        stored = journal.get("T", f"case/{line}/record")
        assert opened is not None and stored is not None
        return {"opened": opened.payload, "record": stored.payload}


def build(journal: Journal, items: int, resolved: int) -> list[str]:
    tpl = template()
    ids = []
    for i in range(items):
        run_id, line = f"run{i // PER_RUN:05d}", i % PER_RUN + 1
        review_id = f"{run_id}.{line}"
        if line == 1:
            journal.create_run(run_id, kind="decide", meta={})
        panel = dict(tpl["opened"]["panel"])
        topic = TOPICS[i % len(TOPICS)]
        panel["meta"] = {**panel.get("meta", {}), "question": f"Claim {i}: about topic {topic}?"}
        item = {**tpl["opened"], "review_id": review_id, "run_id": run_id, "line": line}
        item["panel"] = panel
        record = {**tpl["record"], "line": line, "review_id": review_id}
        with journal.transaction(run_id):
            journal.append(run_id, "review.opened", item, key=f"case/{line}/review", case=str(line))
            journal.append(run_id, "case.record", record, key=f"case/{line}/record", case=str(line))
        ids.append(review_id)
    for review_id in ids[:resolved]:
        resolve(journal, review_id, decision="1", note="bench", reviewer="bench")
    return ids


def timed(fn: Callable[[], object], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--resolved", type=int, default=1500)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Journal(Path(tmp) / "j.sqlite") as journal:
        start = time.perf_counter()
        build(journal, args.items, args.resolved)
        print(
            f"journal: {args.items} review items, {args.resolved} resolved "
            f"(built in {time.perf_counter() - start:.1f} s)"
        )

        def head(listing: Callable[..., Iterator[ReviewStatus]]) -> Callable[[], object]:
            return lambda: list(islice(listing(journal), 10))

        def every(listing: Callable[..., Iterator[ReviewStatus]]) -> Callable[[], object]:
            return lambda: list(listing(journal))

        assert [s.item.review_id for s in list_items(journal)] == [
            s.item.review_id for s in list_items_from_events(journal)
        ]
        rows = [
            ("first 10 open", timed(head(list_items_from_events), args.repeat), timed(head(list_items), args.repeat)),
            ("all open", timed(every(list_items_from_events), args.repeat), timed(every(list_items), args.repeat)),
            ("count open", timed(lambda: sum(1 for _ in list_items_from_events(journal)), args.repeat),
             timed(lambda: len(review_entries(journal) or []), args.repeat)),
        ]  # fmt: skip
        print(f"{'listing':<16}{'events (ms)':>14}{'index (ms)':>13}{'speed-up':>10}")
        for name, before, after in rows:
            print(f"{name:<16}{before:>14.1f}{after:>13.2f}{before / after:>9.0f}x")

        def read_all() -> list[str]:
            return [
                s.item.review_id
                for s in list_items(journal, include_resolved=True)
                if "topic tax"
                in " ".join((question_of(s.item.panel) or "", s.item.id, s.item.reason)).lower()
            ]

        desk = ReviewDesk(journal, claim_ttl_s=60)
        start = time.perf_counter()
        found = [e.review_id for e in desk.order(text="topic tax")]
        first = (time.perf_counter() - start) * 1000
        assert found == read_all() and len(found) == (args.items + 3) // 4
        again = timed(lambda: desk.order(text="topic tax"), args.repeat)
        every = timed(read_all, args.repeat)
        print(
            f"{'search':<16}{'items (ms)':>14}{'first (ms)':>13}{'then (ms)':>13}{'speed-up':>10}"
        )
        print(
            f"{'topic tax, all':<16}{every:>14.1f}{first:>13.1f}{again:>13.2f}{every / again:>9.0f}x"
        )


if __name__ == "__main__":
    main()
