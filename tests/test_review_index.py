"""The review index lists the queue exactly as the hash chain does, on both back ends.

Random sequences of opens (escalations in several runs, with several reasons), claims and
resolves (including refused ones: a second resolve, a resolve against another reviewer's
claim) are applied through the queue's own calls; after each sequence every listing
(:func:`list_items` by status, run and reason) must equal the one derived from the
``review.*`` events alone (:func:`list_items_from_events`), and so must the index after
it is rebuilt, after it is dropped behind the journal's back, and after it is edited in a
journal not marked as checked at its schema revision (one an upgrade reached).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dissensus.errors import DissensusError
from dissensus.pipeline import decide, policy_from_dict
from dissensus.pipeline.review import (
    claim,
    find_item,
    list_items,
    list_items_from_events,
    resolve,
)
from dissensus.store import Journal, JournalReadOnly
from dissensus.store.review_index import ReviewIndex
from pipeline_cases import as_panel, panel
from store_backends import UNMARK_INDEX, pg_schema, pg_url, raw, target_for

POLICY = policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.3}})
RUNS = ["run-a", "run-b", "run-c"]
REASONS = ["value conflict between agents", "Low agreement", "CONCORD ended: no deal"]
REVIEWERS = ["kim", "lee"]


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    """The events of one real escalation, to copy (deciding every case would be slow)."""
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
        assert opened is not None and opened.type == "review.opened" and stored is not None
        return {"opened": opened.payload, "record": stored.payload}


def _open(journal: Journal, template: dict[str, Any], run_id: str, reason: str) -> str:
    journal.create_run(run_id, kind="decide", meta={})
    info = journal.run(run_id)
    assert info is not None
    line = info.n_events + 1  # a fresh line number in this run
    review_id = f"{run_id}.{line}"
    record = {**template["record"], "line": line, "review_id": review_id, "reason": reason}
    item = {
        **template["opened"],
        "review_id": review_id,
        "run_id": run_id,
        "line": line,
        "reason": reason,
    }
    with journal.transaction(run_id):
        journal.append(run_id, "review.opened", item, key=f"case/{line}/review", case=str(line))
        journal.append(run_id, "case.record", record, key=f"case/{line}/record", case=str(line))
    return review_id


def _listings(journal: Journal, listing: Any) -> dict[tuple[Any, ...], list[Any]]:
    out = {}
    for run_id in [None, *RUNS]:
        if run_id is not None and journal.run(run_id, missing_ok=True) is None:
            continue
        for status in ("open", "resolved", "all"):
            for reason in (None, "conflict", "LOW", "nothing like it"):
                rows = listing(
                    journal,
                    run_id=run_id,
                    include_resolved=status == "all",
                    resolved_only=status == "resolved",
                    reason=reason,
                )
                out[(run_id, status, reason)] = [r.model_dump(mode="json") for r in rows]
    return out


def _agree(
    journal: Journal, expected: dict[tuple[Any, ...], list[Any]] | None = None
) -> dict[tuple[Any, ...], list[Any]]:
    """Every listing from the index equals the one from the events (``expected``: the
    listings of these same events, computed before); returns the listings."""
    assert journal.review_index_agrees()
    if expected is None:
        expected = _listings(journal, list_items_from_events)
    got = _listings(journal, list_items)
    assert got == expected
    for limit in (1, 2):
        for status in ("open", "resolved", "all"):
            for reason in (None, "LOW"):
                limited = list_items(
                    journal,
                    include_resolved=status == "all",
                    resolved_only=status == "resolved",
                    reason=reason,
                    limit=limit,
                )
                want = expected[(None, status, reason)][:limit]
                assert [r.model_dump(mode="json") for r in limited] == want
    return got


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("open"), st.sampled_from(RUNS), st.sampled_from(REASONS)),
        st.tuples(st.just("claim"), st.integers(0, 20), st.sampled_from(REVIEWERS)),
        st.tuples(st.just("resolve"), st.integers(0, 20), st.sampled_from(REVIEWERS)),
    ),
    min_size=1,
    max_size=14,
)


class _Shared:
    """The PostgreSQL schema the examples of this module share (made on first use), and
    one connection to it for the SQL run behind the journal's back (a connection costs
    the server a new backend: more than the statements it would run)."""

    stack: ExitStack | None = None
    url: str | None = None
    conn: Any = None


def _behind_its_back(target: str, sql: str) -> None:
    """:func:`raw` SQL on ``target``, on the shared connection when it is the module's schema."""
    if target == _Shared.url and _Shared.conn is not None:
        _Shared.conn.execute(sql)
    else:
        raw(target, sql)


@pytest.fixture(scope="module", autouse=True)
def _one_schema_per_module() -> Iterator[None]:
    with ExitStack() as stack:
        _Shared.stack = stack
        yield
    _Shared.stack = _Shared.url = _Shared.conn = None


EMPTIED = ("events", "runs", "claims", "review_index", "run_locks")
"""The tables an example writes; emptied before the next (the schema itself stays)."""


@contextmanager
def _fresh(backend: str, tmp_path: Path) -> Iterator[str]:
    """An empty journal target: a new SQLite file, or the module's PostgreSQL schema with
    its tables emptied (creating and dropping a schema per example costs more than the
    example's own work)."""
    if backend == "postgres":
        if _Shared.url is None:
            import psycopg

            assert _Shared.stack is not None
            _Shared.url = _Shared.stack.enter_context(pg_schema(pg_url()))
            _Shared.conn = _Shared.stack.enter_context(
                psycopg.connect(_Shared.url, autocommit=True)
            )
        else:
            _behind_its_back(_Shared.url, "; ".join(f"DELETE FROM {t}" for t in EMPTIED))
        yield _Shared.url
        return
    folder = tmp_path / uuid.uuid4().hex[:8]
    folder.mkdir()
    with target_for(backend, folder) as target:
        yield target


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS)
def test_the_index_lists_what_the_events_say(
    backend: str, tmp_path: Path, template: dict[str, Any], ops: list[tuple[Any, ...]]
) -> None:
    with _fresh(backend, tmp_path) as target:
        with Journal(target) as journal:
            opened: list[str] = []
            for op in ops:
                if op[0] == "open":
                    opened.append(_open(journal, template, op[1], op[2]))
                    continue
                if not opened:
                    continue
                review_id = opened[op[1] % len(opened)]
                try:
                    if op[0] == "claim":
                        claim(journal, review_id, op[2], ttl=60)
                    else:
                        resolve(journal, review_id, decision="1", note="checked", reviewer=op[2])
                except DissensusError:
                    pass  # already resolved, or claimed by the other reviewer: nothing written
            before = _agree(journal)
            assert journal.rebuild_review_index() == len(opened)
            assert _listings(journal, list_items) == before

        # An index behind its events (a journal an upgrade reached: written by an older
        # version, or edited, with no mark of a check at this revision) is rebuilt on
        # opening. The events are untouched: the listings must be those from before.
        _behind_its_back(target, "DELETE FROM review_index WHERE resolved_seq IS NOT NULL")
        _behind_its_back(target, "UPDATE review_index SET resolved_seq = NULL")
        _behind_its_back(target, UNMARK_INDEX)
        with Journal(target) as journal:
            assert _agree(journal, before) == before


def test_a_journal_without_the_index_gets_it_from_its_events(
    tmp_path: Path, template: dict[str, Any]
) -> None:
    target = str(tmp_path / "old.sqlite")
    with Journal(target) as journal:
        first = _open(journal, template, "run-a", REASONS[0])
        second = _open(journal, template, "run-b", REASONS[1])
        resolve(journal, first, decision="2", note="older journal", reviewer="kim")
    raw(target, "DROP TABLE review_index")  # as a journal of an older version
    with Journal(target) as journal:
        _agree(journal)
        assert [s.item.review_id for s in list_items(journal)] == [second]
        assert [s.item.review_id for s in list_items(journal, resolved_only=True)] == [first]


def test_a_read_only_journal_with_a_stale_index_lists_from_the_events(
    tmp_path: Path, template: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = str(tmp_path / "ro.sqlite")
    with Journal(target) as journal:
        review_id = _open(journal, template, "run-a", REASONS[0])
    raw(target, "DELETE FROM review_index")
    raw(target, UNMARK_INDEX)  # as a journal of an older version

    def read_only(self: ReviewIndex) -> int:
        raise JournalReadOnly("the journal is read-only")

    monkeypatch.setattr(ReviewIndex, "rebuild", read_only)
    with Journal(target) as journal:
        assert not journal.review_index_agrees()
        assert journal.review_entries() is None
        assert [s.item.review_id for s in list_items(journal)] == [review_id]
        assert _listings(journal, list_items) == _listings(journal, list_items_from_events)


def test_the_check_on_open_reads_each_cases_events_by_its_index(
    tmp_path: Path, template: dict[str, Any]
) -> None:
    """The check made on every open joins each opened item with its case's events through
    ``events_case``: through the primary key it read every later event of the run for every
    item, and a journal of 2,398 reviews took 26 s to open (0.03 s now)."""
    import sqlite3

    target = str(tmp_path / "j.sqlite")
    with Journal(target) as journal:
        _open(journal, template, "r1", "a")
        seen: list[tuple[str, list[Any]]] = []
        backend = journal._review._backend  # type: ignore[attr-defined]
        rows = backend.rows

        def spy(sql: str, args: Any = ()) -> Any:
            seen.append((sql, list(args)))
            return rows(sql, args)

        backend.rows = spy
        try:
            journal._review.differences(thorough=False)  # type: ignore[attr-defined]
        finally:
            backend.rows = rows
    sql, args = next((q, a) for q, a in seen if "LEFT JOIN events r" in q)
    with sqlite3.connect(target) as db:
        plan = [row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + sql, args)]
    assert any(step.startswith("SEARCH r USING INDEX events_case") for step in plan), plan


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_nul_escape_in_an_item_never_stops_the_index_check(
    backend: str, tmp_path: Path, template: dict[str, Any]
) -> None:
    """PostgreSQL's JSON types refuse "\\u0000" anywhere in a text: an item whose panel holds
    one (an agent's reasoning, a meta field), beside the text "\\u0000" spelled out, is
    checked, verified and rebuilt like any other."""
    nul = json.loads(json.dumps(template))
    panel_of = nul["opened"]["panel"]
    panel_of["outputs"][0]["reasoning"] = "a\x00b\x00\x00c"
    panel_of["meta"] = {"question": "q\x00?", "spelled": "\\u0000 and \\\x00"}
    with _fresh(backend, tmp_path) as target:
        with Journal(target) as journal:
            review_id = _open(journal, nul, "run-a", REASONS[0])
            before = _agree(journal)
            assert journal.verify("run-a").ok
        _behind_its_back(target, "DELETE FROM review_index")
        _behind_its_back(target, UNMARK_INDEX)
        with Journal(target) as journal:  # rebuilt on opening, from the events
            assert _agree(journal, before) == before
            assert [s.item.review_id for s in list_items(journal)] == [review_id]
            # The chain holds; what verification reports is the rebuild, as for any item.
            report = journal.verify("run-a")
            assert report.problems == [
                f"review index row of '{review_id}' differed from the events (rebuilt from the events)"
            ]
