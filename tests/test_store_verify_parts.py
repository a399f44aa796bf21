"""A verification reads a run's events in parts and finds what reading them whole finds.

``Journal.verify`` (``runs verify``, and ``runs resume`` before it resumes) used to read
every event of the run in one query, so verifying a long run held all of it in memory
(the resume of a 100,000-panel run stopped at 39% peaked near 1 GB). The events are now
read :data:`~dissensus.store.log.PAGE` at a time, each part after the last one's
stored sequence number. Here every single tamper of ``test_store_tamper`` (an edit of any
field, sequence numbers edited into text among them, a deletion, a swap, an insertion)
gets the same report read in parts of 1, 2 or 3 events as read whole.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.store import Journal, log
from dissensus.store.chain import VerifyReport
from dissensus.store.events import Event
from test_store_tamper import _apply, _build, _db, tamper


def _report(j: object, part: int) -> VerifyReport:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(log, "PAGE", part)
        return j.verify("r")  # type: ignore[attr-defined,no-any-return]


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 8),
    op=st.one_of(tamper, st.tuples(st.just("text seq"), st.integers(0, 50), st.just(""))),
    part=st.integers(1, 3),
)
def test_a_verification_in_parts_reports_what_one_read_reports(
    n: int, op: tuple[str, int, str], part: int
) -> None:
    j = _build(n)
    if op[0] == "text seq":  # a sequence number edited into text (SQLite keeps it)
        _db(j).execute(
            "UPDATE events SET seq = ? WHERE run_id = 'r' AND seq = ?",
            (f"x{op[1]}", op[1] % (n + 1)),
        )
    else:
        _apply(j, op, n + 1)
    whole = _report(j, 10_000)
    parts = _report(j, part)
    assert parts == whole, op
    assert not whole.ok
    j.close()


def test_an_untouched_run_verifies_in_parts() -> None:
    j = _build(7)
    assert _report(j, 2) == _report(j, 10_000)
    assert _report(j, 2).ok and _report(j, 2).n_events == 8
    j.close()


def test_a_run_appended_to_while_it_is_verified_verifies(
    journal_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events appended between the pages (a reviewer resolving while the run is checked)
    are read on to the header as it stands at the end, not reported as a damaged run."""
    monkeypatch.setattr(log, "PAGE", 2)
    with Journal(journal_target) as j, Journal(journal_target) as other:
        j.create_run("r", kind="test", meta={})
        for i in range(6):
            j.append("r", "e", {"v": i}, key=f"k{i}")
        late: list[int] = []

        def each(event: Event) -> None:
            if len(late) < 3 and event.seq % 2 == 1:  # after pages 1, 2 and 3
                other.append("r", "e", {"v": 100 + len(late)}, key=f"late{len(late)}")
                late.append(event.seq)

        report = j.verify("r", each=each)
        assert late == [1, 3, 5]
        assert report.problems == [] and report.ok
        assert report.n_events == 9 == j.run("r").n_events  # type: ignore[union-attr]


def test_a_sequence_number_held_twice_at_a_page_boundary_is_found() -> None:
    """A row repeating the sequence number a page ends on (possible once the table's key
    is dropped) is not skipped by the next page's ``seq >`` unnoticed: the run's rows
    are counted too."""
    j = _build(5)
    db = _db(j)
    db.executescript(
        "CREATE TABLE loose AS SELECT * FROM events;"
        "DROP TABLE events;"
        "ALTER TABLE loose RENAME TO events;"
    )
    db.execute(
        "INSERT INTO events SELECT run_id, seq, 'forged', type, case_ref, at, payload,"
        " prev_hash, hash FROM events WHERE run_id = 'r' AND seq = 1"
    )
    for part in (2, 10_000):
        report = _report(j, part)
        assert not report.ok, part
    assert any("held twice" in p for p in _report(j, 2).problems)
    j.close()
