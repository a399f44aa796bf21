"""The desk's memory of the journal's case records (the list of automatic decisions)
stays the journal's: events read since the newest one come in run order, not time
order (a resumed earlier run, another server's late run), and a journal restored from
a backup holds other records under the same count."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from hypothesis import given, seed
from hypothesis import settings as settings_h
from hypothesis import strategies as st

from dissensus.pipeline.batch import RUN_KIND
from dissensus.serve.journal_adapter import ReviewDesk
from dissensus.store import event_types as ev
from dissensus.store.events import Event


@dataclass
class _Journal:
    """The part of a journal the list reads: events of one type, in run then sequence
    order, as :meth:`dissensus.store.Journal.events_of_type` gives them."""

    created: dict[str, str] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)

    def add(self, run_id: str, at: str, tag: str = "") -> None:
        self.created.setdefault(run_id, at)
        seq = 1 + sum(1 for e in self.events if e.run_id == run_id)
        self.events.append(
            Event(
                run_id=run_id, seq=seq, key=f"case/{seq}/record", type=ev.CASE_RECORD,
                case=str(seq), at=at, payload={"auto": True, "decision": "yes"},
                prev_hash="", hash=f"{run_id}.{seq}.{at}{tag}",
            )
        )  # fmt: skip

    def run(self, run_id: str, *, missing_ok: bool = False) -> Any:
        if run_id not in self.created:
            return None
        return SimpleNamespace(created=self.created[run_id], kind=RUN_KIND)

    def events_of_type(self, type: str, *, since: str | None = None, **_: Any) -> Iterator[Event]:
        order = sorted(self.events, key=lambda e: (self.created[e.run_id], e.run_id, e.seq))
        return iter([e for e in order if e.type == type and (since is None or e.at >= since)])

    def count_of_type(self, type: str) -> int:
        return sum(1 for e in self.events if e.type == type)

    def event_at(self, run_id: str, seq: int) -> Event | None:
        return next((e for e in self.events if (e.run_id, e.seq) == (run_id, seq)), None)

    def expected(self) -> list[str]:
        return [f"{e.run_id}.{e.case}" for e in self.events_of_type(ev.CASE_RECORD)]


def _desk(journal: _Journal) -> ReviewDesk:
    return ReviewDesk(journal, claim_ttl_s=60)  # type: ignore[arg-type]


def test_a_resumed_run_and_a_late_run_lose_no_case() -> None:
    """Run A (created first) is resumed after B was listed, and run C is journalled late
    with a time before B's: the record read at B's time came after A's newer one and was
    counted twice, so the count matched and C's records were never listed."""
    journal = _Journal()
    journal.add("A", "t1")
    journal.add("B", "t2")
    desk = _desk(journal)
    assert desk.auto_cases() == journal.expected()
    journal.add("A", "t3")  # resumed
    journal.add("C", "t0")  # another server's, its clock behind
    assert desk.auto_cases() == journal.expected() == ["C.1", "A.1", "A.2", "B.1"]
    assert desk.auto_cases() == journal.expected()


def test_a_journal_restored_with_as_many_records_is_read_again() -> None:
    """A journal restored from a backup, then as many records journalled again: the count
    matched, and the list named cases of runs the journal no longer holds."""
    journal = _Journal()
    journal.add("X1", "t1")
    journal.add("X1", "t2")
    desk = _desk(journal)
    assert desk.auto_cases() == ["X1.1", "X1.2"]
    journal.created, journal.events = {}, []
    journal.add("Y1", "t3")
    journal.add("Y1", "t4")
    assert desk.auto_cases() == ["Y1.1", "Y1.2"]
    journal.events[-1] = journal.events[-1].model_copy(update={"hash": "other"})
    assert desk.auto_cases() == ["Y1.1", "Y1.2"]


_STEP = st.tuples(st.sampled_from("ABCD"), st.integers(0, 9), st.booleans())


@seed(20261206)
@settings_h(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.lists(_STEP, max_size=4), min_size=1, max_size=6))
def test_the_list_is_the_journals_whatever_the_order(batches: list[list[Any]]) -> None:
    """Records journalled in batches with any run and time (ties included), the list read
    between batches: every list is the journal's."""
    journal = _Journal()
    desk = _desk(journal)
    for batch in batches:
        for run_id, at, _ in batch:
            journal.add(run_id, f"t{at}")
        assert desk.auto_cases() == journal.expected()
