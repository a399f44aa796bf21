"""The review queue listed from the events alone, a page at a time, on both back ends.

A journal's review index is not used when it disagrees with the events and cannot be
rebuilt (a journal an upgrade reached, opened read-only: a PostgreSQL session with
``default_transaction_read_only``, here for real; SQLite's rebuild refused as on a
read-only file system); :func:`list_items` then lists from the events
(:func:`list_items_from_events`), with ``after`` and ``limit`` applied to that stream.

Random journals of several runs (escalations interleaved across runs, runs created at the
same instant or within the same second, run ids not in creation order, items resolved,
reopened and resolved anew, several reasons) are listed both ways. The pages taken from
the events (``limit``, then ``after`` the last item of the page before), put together,
must be the queue the index lists and the one listed in one go, in the queue's order (the
runs as the journal lists them: by creation time, then by id; then the item's place in
its run), no item twice and none lost; and a page after any item, open, resolved or
filtered out, must start right after that item's place, as it does from the index.

Besides SQLite and a PostgreSQL schema (text compared byte by byte, as Python compares
it), the journals are kept in a PostgreSQL database that compares text by language
(ICU ``en-US``, what ``initdb --locale=en_US.UTF-8`` gives): there ``'alpha' < 'Zed'``
and ``'run_b' < 'run-b'``, so runs created at one instant are listed in an order Python's
comparison of their ids does not give. Comparing the ids in Python made the pages taken
from the events lose items there (and repeat others).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.pipeline.review import (
    AlreadyResolved,
    NotUndoable,
    list_items,
    list_items_from_events,
    reopen,
    resolve,
)
from dissensus.store import Journal, JournalReadOnly, clock
from dissensus.store.review_index import ReviewIndex
from store_backends import UNMARK_INDEX, pg_schema, pg_url, raw
from test_review_index import REASONS, _open
from test_review_index import template as template

# Examples of the property in the suite; 15 under DISSENSUS_SOAK=1 (`make test-soak`).
SOAK = os.environ.get("DISSENSUS_SOAK") == "1"

INSTANTS = (
    "2025-03-01T12:00:00.000000+00:00",
    "2025-03-01T12:00:00.400000+00:00",
    "2025-03-01T12:00:01.000000+00:00",
)
"""When a run is created: two runs often share an instant, or a second."""
RUNS = ("run-b", "Zed", "alpha", "run_b")
"""Run ids in none of their creation orders, sorted one way by code point (Python,
SQLite) and another by language (``alpha``, ``run_b``, ``run-b``, ``Zed``)."""
REVIEWERS = ("kim", "lee")
STATUSES = ("open", "resolved", "all")
NEEDLES = (None, "LOW", "conflict", "nothing like it")

READ_ONLY_SESSION = "%20-cdefault_transaction_read_only%3Don"
"""Appended to a target's URL (``?options=-csearch_path...``): a read-only session."""


@dataclass
class Item:
    """What the test knows of one review item (its own model of the queue)."""

    review_id: str
    run_id: str
    seq: int
    reason: str
    resolved_by: str | None = None


@dataclass(frozen=True)
class Filter:
    run_id: str | None
    status: str
    reason: str | None

    def kwargs(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "include_resolved": self.status == "all",
            "resolved_only": self.status == "resolved",
            "reason": self.reason,
        }

    def admits(self, item: Item) -> bool:
        if self.run_id is not None and item.run_id != self.run_id:
            return False
        if self.reason is not None and self.reason.lower() not in item.reason.lower():
            return False
        resolved = item.resolved_by is not None
        return {"open": not resolved, "resolved": resolved, "all": True}[self.status]


@contextmanager
def _clock_at(instant: str) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(clock, "now", lambda: instant)
        yield


def _apply(
    journal: Journal,
    template: dict[str, Any],
    created: dict[str, str],
    ops: list[tuple[Any, ...]],
) -> list[Item]:
    """Apply ``ops`` through the queue's own calls, checking each against the model."""
    items: list[Item] = []
    for op in ops:
        if op[0] == "open":
            run_id, reason = op[1], op[2]
            if journal.run(run_id, missing_ok=True) is None:
                with _clock_at(created[run_id]):
                    journal.create_run(run_id, kind="decide", meta={})
            review_id = _open(journal, template, run_id, reason)
            line = review_id.rpartition(".")[2]
            opened = journal.get(run_id, f"case/{line}/review")
            info = journal.run(run_id)
            assert opened is not None and info is not None
            assert info.created == created[run_id]
            items.append(Item(review_id, run_id, opened.seq, reason))
            continue
        if not items:
            continue
        item, who = items[op[1] % len(items)], op[2]
        if op[0] == "resolve":
            if item.resolved_by is None:
                resolve(journal, item.review_id, decision="1", note="checked", reviewer=who)
                item.resolved_by = who
            else:
                with pytest.raises(AlreadyResolved):
                    resolve(journal, item.review_id, decision="2", note="again", reviewer=who)
        elif item.resolved_by == who:
            reopen(journal, item.review_id, reviewer=who, within_s=10**9)
            item.resolved_by = None
        else:
            with pytest.raises(NotUndoable):
                reopen(journal, item.review_id, reviewer=who, within_s=10**9)
    return items


class Queue:
    """The queue the test expects: its items in the runs' order as the journal's database
    gives it (asked behind the journal's back), then by place in the run."""

    def __init__(self, items: list[Item], run_order: list[str]) -> None:
        rank = {run_id: n for n, run_id in enumerate(run_order)}
        self.key = {i.review_id: (rank[i.run_id], i.seq) for i in items}
        self.items = sorted(items, key=lambda i: self.key[i.review_id])

    def listed(self, f: Filter, after: Item | None = None) -> list[str]:
        floor = None if after is None else self.key[after.review_id]
        return [
            i.review_id
            for i in self.items
            if f.admits(i) and (floor is None or self.key[i.review_id] > floor)
        ]


def _run_order(backend: str, target: str, runs: list[str]) -> list[str]:
    """The runs in the order the database sorts them (creation time, then id): on SQLite,
    which compares text byte by byte, the order of Python's tuples."""
    rows = _query(target, "SELECT run_id, created FROM runs ORDER BY created, run_id")
    order = [str(r[0]) for r in rows]
    assert sorted(order) == sorted(runs)
    if backend == "sqlite":
        assert order == [r for _, r in sorted((str(c), str(r)) for r, c in rows)]
    return order


def _filters(items: list[Item], *, every: bool = False) -> list[Filter]:
    """The listings compared: every run, status and reason with ``every``, else the
    whole queue and one run (the first item's), by status, with and without a reason."""
    runs: list[str | None] = [None]
    runs += sorted({i.run_id for i in items}) if every else [items[0].run_id] if items else []
    needles = NEEDLES if every else NEEDLES[:2]
    return [Filter(*f) for f in product(runs, STATUSES, needles)]


def _ids(rows: Any) -> list[str]:
    return [r.item.review_id for r in rows]


def _dumps(rows: Any) -> list[Any]:
    return [r.model_dump(mode="json") for r in rows]


def _pages(journal: Journal, f: Filter, limit: int) -> list[list[Any]]:
    """The queue a page of ``limit`` at a time, each after the last item of the one before."""
    pages: list[list[Any]] = []
    after: str | None = None
    while True:
        page = _dumps(list_items(journal, limit=limit, after=after, **f.kwargs()))
        assert len(page) <= limit
        if not page:
            return pages
        pages.append(page)
        if len(page) < limit:
            return pages
        after = page[-1]["item"]["review_id"]
        assert len(pages) <= 100, "the pages do not end"


class _Shared:
    """The PostgreSQL targets the examples of this module share, made on first use (a
    schema of the test database, and a database of its own that sorts text by language),
    each with one connection for the SQL run behind the journal's back."""

    stack: ClassVar[ExitStack | None] = None
    urls: ClassVar[dict[str, str]] = {}
    conns: ClassVar[dict[str, Any]] = {}


@pytest.fixture(scope="module", autouse=True)
def _shared_targets() -> Iterator[None]:
    with ExitStack() as stack:
        _Shared.stack = stack
        yield
    _Shared.stack, _Shared.urls, _Shared.conns = None, {}, {}


@contextmanager
def _database_sorting_by_language() -> Iterator[str]:
    """A PostgreSQL database of its own whose text compares by English rules (ICU's
    ``en-US``: letters first, case and punctuation weighing less), as a database made
    with ``initdb --locale=en_US.UTF-8`` does: ``'alpha' < 'Zed'`` there, not in Python."""
    import psycopg

    url = pg_url()
    name = "t_icu_" + uuid.uuid4().hex[:12]
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute(
                f"CREATE DATABASE {name} TEMPLATE template0 "  # type: ignore[arg-type]
                "LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
            )
        except psycopg.Error as exc:
            pytest.skip(
                f"PostgreSQL made no database sorting text by language ({exc}): "
                "needs a server with ICU and a user who may create databases"
            )
    server = url.partition("?")[0].rsplit("/", 1)[0]
    try:
        yield f"{server}/{name}?options=-csearch_path%3Dpublic"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")  # type: ignore[arg-type]


BACKENDS = ["sqlite", "postgres", "postgres-by-language"]
EMPTIED = ("events", "runs", "claims", "review_index", "run_locks")
"""The tables an example writes; emptied before the next (the database itself stays)."""


@contextmanager
def _fresh(backend: str, tmp_path: Path) -> Iterator[str]:
    """An empty journal target: a new SQLite file, or the module's PostgreSQL schema or
    database with its tables emptied (making one per example costs more than its work)."""
    if backend == "sqlite":
        folder = tmp_path / uuid.uuid4().hex[:8]
        folder.mkdir()
        yield str(folder / "journal.sqlite")
        return
    import psycopg

    url = _Shared.urls.get(backend)
    if url is None:
        assert _Shared.stack is not None
        made = pg_schema(pg_url()) if backend == "postgres" else _database_sorting_by_language()
        url = _Shared.urls[backend] = _Shared.stack.enter_context(made)
        _Shared.conns[backend] = _Shared.stack.enter_context(psycopg.connect(url, autocommit=True))
        with Journal(url):
            pass  # its tables
    _query(url, "; ".join(f"DELETE FROM {t}" for t in EMPTIED))
    yield url


def _query(target: str, sql: str) -> list[tuple[Any, ...]]:
    """:func:`raw` SQL on ``target``, on the shared connection when it is one of the module's."""
    for backend, url in _Shared.urls.items():
        if url == target:
            cur = _Shared.conns[backend].execute(sql)
            return list(cur.fetchall()) if cur.description else []
    return raw(target, sql)


@contextmanager
def _untrusted(target: str) -> Iterator[Journal]:
    """The journal opened so that its review index cannot be used: the index no longer
    agrees with the events, the journal is marked unchecked (as after an upgrade) and it
    cannot be written, so the index is not rebuilt: a PostgreSQL session that is
    read-only, an SQLite rebuild refused as on a read-only file system."""
    _query(target, "DELETE FROM review_index")
    _query(target, UNMARK_INDEX)

    def read_only(self: ReviewIndex) -> int:
        raise JournalReadOnly("the journal is read-only")

    with pytest.MonkeyPatch.context() as mp:
        if target.startswith("postgresql://"):
            target += READ_ONLY_SESSION
        else:
            mp.setattr(ReviewIndex, "rebuild", read_only)
        with Journal(target) as journal:
            assert journal.review_entries() is None
            yield journal


OPEN = st.tuples(st.just("open"), st.sampled_from(RUNS), st.sampled_from(REASONS))
OPS = st.builds(
    lambda first, rest: [first, *rest],  # an item at least: else the index has nothing to miss
    OPEN,
    st.lists(
        st.one_of(
            OPEN,
            st.tuples(st.just("resolve"), st.integers(0, 20), st.sampled_from(REVIEWERS)),
            st.tuples(st.just("reopen"), st.integers(0, 20), st.sampled_from(REVIEWERS)),
        ),
        max_size=11,
    ),
)
CREATED = st.fixed_dictionaries({run: st.sampled_from(INSTANTS) for run in RUNS})


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@settings(
    max_examples=15 if SOAK else 6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(created=CREATED, ops=OPS)
def test_pages_from_the_events_are_the_queue_the_index_lists(
    backend: str,
    tmp_path: Path,
    template: dict[str, Any],
    created: dict[str, str],
    ops: list[tuple[Any, ...]],
) -> None:
    with _fresh(backend, tmp_path) as target:
        with Journal(target) as journal:
            items = _apply(journal, template, created, ops)
            queue = Queue(items, _run_order(backend, target, list({i.run_id for i in items})))
            filters = _filters(items)
            assert journal.review_entries() is not None
            indexed: dict[Filter, list[Any]] = {}
            indexed_after: dict[tuple[Filter, str], list[str]] = {}
            for f in filters:
                indexed[f] = _dumps(list_items(journal, **f.kwargs()))
                assert [r["item"]["review_id"] for r in indexed[f]] == queue.listed(f)
                assert _dumps(list_items_from_events(journal, **f.kwargs())) == indexed[f]
                for x in items:
                    indexed_after[(f, x.review_id)] = _ids(
                        list_items(journal, after=x.review_id, **f.kwargs())
                    )
                    assert indexed_after[(f, x.review_id)] == queue.listed(f, x)

        with _untrusted(target) as journal:
            for f in filters:
                whole = _dumps(list_items(journal, **f.kwargs()))
                assert whole == indexed[f]
                for limit in (1, 2, 3):
                    joined = [row for page in _pages(journal, f, limit) for row in page]
                    assert joined == whole, (f, limit)
                for x in items:  # open, resolved or filtered out: the page starts after it
                    got = _ids(list_items(journal, after=x.review_id, **f.kwargs()))
                    assert got == indexed_after[(f, x.review_id)], (f, x.review_id)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_listing_from_the_events_pages_like_the_index(
    backend: str, tmp_path: Path, template: dict[str, Any]
) -> None:
    """One journal, every run, status and reason: three runs created at one instant (in
    the order of their ids, as the database compares them), escalations interleaved,
    items resolved, reopened and resolved anew."""
    created = dict.fromkeys(RUNS, INSTANTS[0]) | {"alpha": INSTANTS[1]}
    ops: list[tuple[Any, ...]] = [("open", RUNS[n % 4], REASONS[n % 3]) for n in range(12)]
    ops += [("resolve", 0, "kim"), ("resolve", 5, "lee"), ("resolve", 6, "kim")]
    ops += [("reopen", 5, "lee"), ("resolve", 11, "kim"), ("reopen", 0, "kim")]
    ops += [("resolve", 0, "lee"), ("resolve", 3, "lee")]
    with _fresh(backend, tmp_path) as target:
        with Journal(target) as journal:
            items = _apply(journal, template, created, ops)
            order = _run_order(backend, target, list(RUNS))
            assert order[-1] == "alpha"  # created last
            if backend != "postgres":  # the test database's collation is the server's
                by_language = backend == "postgres-by-language"
                assert order[:3] == ["run_b", "run-b", "Zed"] if by_language else sorted(order[:3])
            queue = Queue(items, order)
            filters = _filters(items, every=True)
            indexed = {f: _dumps(list_items(journal, **f.kwargs())) for f in filters}
        with _untrusted(target) as journal:
            for f in filters:
                whole = _dumps(list_items(journal, **f.kwargs()))
                assert whole == indexed[f]
                assert [r["item"]["review_id"] for r in whole] == queue.listed(f)
                for limit in (1, 3):
                    joined = [row for page in _pages(journal, f, limit) for row in page]
                    assert joined == whole, (f, limit)
                for x in items:
                    got = _ids(list_items(journal, after=x.review_id, **f.kwargs()))
                    assert got == queue.listed(f, x), (f, x.review_id)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("all_items", [False, True], ids=["open", "all"])
def test_review_list_pages_from_the_events(
    backend: str, tmp_path: Path, template: dict[str, Any], all_items: bool
) -> None:
    """``review list --limit N --after ID --json`` on a journal whose index cannot be used:
    the pages, each after the last id of the one before, are the whole queue the index
    listed, each but the last naming the next page's command; and ``--after`` a resolved
    item, which the page of open items does not show, starts right after it."""
    created = {"run-b": INSTANTS[0], "Zed": INSTANTS[0], "alpha": INSTANTS[0], "run_b": INSTANTS[1]}
    ops: list[tuple[Any, ...]] = [("open", RUNS[n % 4], REASONS[n % 3]) for n in range(9)]
    ops += [("resolve", 1, "kim"), ("resolve", 4, "kim"), ("reopen", 4, "kim")]
    scope = ["--all"] if all_items else []
    with _fresh(backend, tmp_path) as target:
        with Journal(target) as journal:
            items = _apply(journal, template, created, ops)
            queue = Queue(items, _run_order(backend, target, list(RUNS)))
        whole = cli("review", "list", "--json", *scope, "--journal", target)
        assert whole.code == 0, whole.err
        everything = [json.loads(line) for line in whole.out.splitlines()]
        status = "all" if all_items else "open"
        assert [e["review_id"] for e in everything] == queue.listed(Filter(None, status, None))

        with _untrusted(target) as journal:
            source = target if backend == "sqlite" else target + READ_ONLY_SESSION
            pages: list[list[Any]] = []
            after: list[str] = []
            while True:
                res = cli(
                    "review", "list", "--json", *scope, "--limit", "2", *after, "--journal", source
                )
                assert res.code == 0, res.err
                page = [json.loads(line) for line in res.out.splitlines()]
                pages.append(page)
                assert 1 <= len(page) <= 2
                if not res.err:
                    break
                last = page[-1]["review_id"]
                assert f"more items after {last}" in res.err and f"--after {last}" in res.err
                after = ["--after", last]
            assert [e for page in pages for e in page] == everything
            assert len(pages) == (len(everything) + 1) // 2

            resolved = next(i for i in queue.items if i.resolved_by is not None)
            res = cli(
                "review", "list", "--json", "--after", resolved.review_id, "--journal", source
            )
            assert res.code == 0, res.err
            assert [json.loads(line)["review_id"] for line in res.out.splitlines()] == (
                queue.listed(Filter(None, "open", None), resolved)
            )
