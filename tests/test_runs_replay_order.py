"""A run journalled out of input order is replayed in input order, on both back ends.

Up to 0.1 each case appended its own events when it ended, with up to ``concurrency``
cases in flight, so a case that waited on a model call landed after later cases that
made none (and the cases a crash left undecided, after every case of the resumed run's
first window). A finished run's replay read its records in sequence order, so ``runs
resume --json`` of such a run printed lines 1, 2, 4, 5, 3, ... where ``runs show
--json`` (and the docs: one record a line, in input order) put them in order.

Here runs are rebuilt through the journal's API in the order a 0.1 writer left them (a
run decided by the current code, its cases' events appended again case by case in a
shuffled order, its rejects where they were read), and their replay must give the
records in line order, the same records as ``runs show --json`` and as the run journalled
in order. A property test drives the replay itself over many orders and heap sizes.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.pipeline import batch
from dissensus.pipeline.records import CaseRecord
from dissensus.store import event_types as ev
from dissensus.store.events import Event
from dissensus.store.journal import Journal, NewEvent, open_journal
from pipeline_cases import panel

N = 30
"""Panels of the run (about one in three escalates; lines 7 and 19 are rejected)."""


def _input(path: Path) -> None:
    lines = []
    for i in range(N):
        if i in (6, 18):
            lines.append('{"id": "bad", "outputs": 3}')
        elif i == 11:
            lines.append("")  # a blank line: no case, no reject
        else:
            votes = ["x", "y", "x"] if i % 3 == 0 else ["x", "x", "x"]
            lines.append(json.dumps(panel(f"p{i}", votes)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _window_order(cases: list[str], width: int, seed: int) -> list[str]:
    """The order a 0.1 run with ``width`` cases in flight could finish ``cases`` in: the
    window takes the next case once its first one ended; any case in it may end first."""
    rng = random.Random(seed)
    pending, window, out = list(cases), [], []
    while pending or window:
        while pending and len(window) < width:
            window.append(pending.pop(0))
        done = window.pop(rng.randrange(len(window)))
        out.append(done)
        if window and done != window[0] and rng.random() < 0.5:
            continue  # the first case still waits on its model call
    return out


def _rebuild(
    source: Journal, journal: Journal, run_id: str, order: list[str], *, finish: bool = True
) -> None:
    """Run ``run_id`` of ``source`` appended again to ``journal``, its cases' events case
    by case in ``order`` (a case left out of ``order`` is left out), as 0.1 appended them."""
    info = source.run(run_id)
    assert info is not None
    by_case: dict[str, list[Event]] = {}
    tail: list[Event] = []
    started: Event | None = None
    for event in source.events(run_id):
        if event.type == ev.RUN_STARTED:
            started = event
        elif event.case is not None:
            by_case.setdefault(event.case, []).append(event)
        else:
            tail.append(event)
    assert started is not None
    assert all(e.type == ev.RUN_FINISHED for e in tail), [e.type for e in tail]

    def again(events: list[Event]) -> list[NewEvent]:
        return [NewEvent(e.type, e.payload, e.key, e.case) for e in events]

    journal.create_run(run_id, kind=info.kind, meta=info.meta, first=again([started])[0])
    for case in order:
        journal.append_batch(run_id, again(by_case[case]))
    if finish:
        journal.append_batch(run_id, again(tail))


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _decided(tmp_path: Path, run_id: str) -> tuple[Journal, list[dict[str, Any]]]:
    """A journal (SQLite) holding run ``run_id`` decided in order; its records."""
    path = tmp_path / "panels.jsonl"
    _input(path)
    source = tmp_path / "source.sqlite"
    res = cli("decide", path, "--journal", source, "--run-id", run_id, "--json")
    assert res.code == 3, res.err  # the two rejected lines
    records = _lines(res.out)
    assert [r["line"] for r in records] == sorted(r["line"] for r in records)
    assert len(records) == N - 3
    return open_journal(source, signer=None), records


def _cases(journal: Journal, run_id: str) -> list[str]:
    """The run's cases (decided or rejected lines), in line order."""
    refs = {e.case for e in journal.events(run_id) if e.case is not None}
    return sorted((str(ref) for ref in refs), key=int)


@pytest.mark.parametrize(
    ("name", "held"),
    [("window", None), ("shuffled", 4), ("shuffled-small-heap", 1)],
)
def test_a_run_journalled_out_of_order_is_replayed_in_input_order(
    journal_target: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    held: int | None,
) -> None:
    target = journal_target
    source, expected = _decided(tmp_path, "old")
    with source, open_journal(target, signer=None) as journal:
        cases = _cases(source, "old")
        if name == "window":
            order = _window_order(cases, 4, seed=7)
        else:
            order = list(cases)
            random.Random(11).shuffle(order)
        assert order != cases
        _rebuild(source, journal, "old", order)
        seq_lines = [int(str(e.case)) for e in journal.events("old", type=ev.CASE_RECORD)]
    assert seq_lines != sorted(seq_lines)  # the journal is out of input order
    # Small parts, so the replay's reads (and a heap's size) run over several pages.
    monkeypatch.setattr(batch, "REPLAY_PART", 5)
    monkeypatch.setattr(batch, "REPLAY_REFS", 3, raising=False)
    if held is not None:
        monkeypatch.setattr(batch, "REPLAY_HELD", held, raising=False)
    assert cli("runs", "verify", "old", "--journal", target).code == 0
    resumed = cli("runs", "resume", "old", "--journal", target, "--json")
    assert resumed.code == 3, resumed.err  # the rejects, reported again
    records = _lines(resumed.out)
    assert [r["line"] for r in records] == sorted(seq_lines)
    assert records == expected
    assert resumed.err.index("jsonl:7:") < resumed.err.index("jsonl:19:")
    shown = cli("runs", "show", "old", "--journal", target, "--json")
    assert shown.code == 0, shown.err
    assert records == json.loads(shown.out)["records"]


def test_a_partial_run_journalled_out_of_order_resumes_in_input_order(
    journal_target: str,
    tmp_path: Path,
) -> None:
    """A 0.1 run stopped with cases in flight (the cases after them journalled), resumed
    and then replayed: both give the records in input order."""
    target = journal_target
    source, expected = _decided(tmp_path, "part")
    with source, open_journal(target, signer=None) as journal:
        cases = _cases(source, "part")
        order = _window_order(cases, 4, seed=3)
        cut = order[: len(order) // 2]
        # Cases the crash left in flight: the cut holds cases past them.
        assert max(cut, key=int) != str(len(cut))
        _rebuild(source, journal, "part", cut, finish=False)
    resumed = cli("runs", "resume", "part", "--journal", target, "--json")
    assert resumed.code == 3, resumed.err
    assert _lines(resumed.out) == expected
    replayed = cli("runs", "resume", "part", "--journal", target, "--json")
    assert replayed.code == 3, replayed.err
    assert _lines(replayed.out) == expected
    shown = cli("runs", "show", "part", "--journal", target, "--json")
    assert json.loads(shown.out)["records"] == expected


def _record(line: int) -> dict[str, Any]:
    return {
        "id": f"p{line}",
        "line": line,
        "action": "escalate",
        "decision": None,
        "auto": False,
        "reason": "the agents disagree",
        "state": "CA",
        "route": "auto",
        "rule": "default-CA",
        "path": ["read:CA", "escalate"],
    }


class _Events:
    """The reads :func:`batch._replay` makes, over records held in a list in sequence
    order (seq ``i`` for the ``i``-th), none rejected; how many records it read."""

    def __init__(self, lines: list[int]) -> None:
        self.stored = [
            Event(
                run_id="r",
                seq=i,
                key=f"case/{line}/record",
                type=ev.CASE_RECORD,
                case=str(line),
                at="2026-01-01T00:00:00Z",
                payload=_record(line),
                prev_hash="",
                hash="",
            )
            for i, line in enumerate(lines)
        ]
        self.read = 0

    def events(self, run_id: str, *, type: str) -> Iterator[Event]:
        assert type == ev.INPUT_REJECTED
        return iter(())

    def events_after(self, run_id: str, after: int, limit: int, *, type: str) -> list[Event]:
        part = [e for e in self.stored if e.seq > after][:limit]
        self.read += len(part)
        return part

    def refs_after(
        self, run_id: str, after: int, limit: int, *, type: str
    ) -> list[tuple[int, str | None]]:
        return [(e.seq, e.case) for e in self.stored if e.seq > after][:limit]

    def events_at(self, refs: list[tuple[str, int]]) -> dict[tuple[str, int], Event]:
        assert len(refs) <= batch.REPLAY_HELD
        self.read += len(refs)
        return {(run_id, seq): self.stored[seq] for run_id, seq in refs}


def _out_by(lines: list[int]) -> int:
    """How many records come, in sequence order, before one of a smaller line (the most
    a heap must hold back to put ``lines`` in order)."""
    return max((sum(1 for x in lines[:i] if x > y) for i, y in enumerate(lines)), default=0)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(
    lines=st.lists(st.integers(1, 400), unique=True, max_size=60),
    held=st.integers(1, 12),
    part=st.integers(1, 9),
    refs=st.integers(1, 9),
)
def test_the_replay_hands_out_any_order_in_line_order(
    lines: list[int], held: int, part: int, refs: int
) -> None:
    """Whatever order the records were journalled in and whatever the heap's size, the
    replay hands each record out once, in line order; a run in order, or out of it by
    less than the heap, is read once, records and all."""
    source = _Events(lines)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(batch, "REPLAY_HELD", held, raising=False)
        patch.setattr(batch, "REPLAY_PART", part)
        patch.setattr(batch, "REPLAY_REFS", refs, raising=False)
        out = list(batch._replay(cast(Journal, source), "r", None))
    assert [r.line for r in out] == sorted(lines)
    assert out == [CaseRecord.model_validate(_record(x)) for x in sorted(lines)]
    if _out_by(lines) <= held:
        assert source.read == len(lines)
