"""``runs verify`` names what was done to a run, once: a deleted event is one gap (not a
"sequence gap" line for every later event), only an event whose own row was altered is
"content does not match its hash", and the report is bounded.

Before the fix, deleting event 500 of a 900-event run printed 400 "sequence gap" lines
and ``event 501: content does not match its hash`` (event 501 was hashed against event
499's hash instead of its own stored ``prev_hash``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.store import Journal
from dissensus.store.chain import MAX_PROBLEMS
from dissensus.store.events import NewEvent
from store_backends import raw

N = 900


def _run(target: str) -> None:
    with Journal(target) as j:
        j.create_run("r", kind="test", meta={})
        j.append_batch("r", [NewEvent("e", {"v": i}, f"k{i}") for i in range(N)])
        assert j.verify("r").ok


def _problems(target: str) -> list[str]:
    with Journal(target) as j:
        return j.verify("r").problems


def test_one_deleted_event_is_one_problem(journal_target: str) -> None:
    _run(journal_target)
    raw(journal_target, "DELETE FROM events WHERE run_id = 'r' AND seq = 500")
    assert _problems(journal_target) == [
        "event 500 missing (1 event)",
        f"run header counts {N} events, journal holds {N - 1}",
    ]


def test_a_deleted_range_and_a_deleted_first_event_are_one_problem_each(
    journal_target: str,
) -> None:
    _run(journal_target)
    raw(journal_target, "DELETE FROM events WHERE run_id = 'r' AND seq BETWEEN 100 AND 119")
    raw(journal_target, "DELETE FROM events WHERE run_id = 'r' AND seq = 0")
    assert _problems(journal_target) == [
        "event 0 missing (1 event)",
        "events 100-119 missing (20 events)",
        f"run header counts {N} events, journal holds {N - 21}",
    ]


def test_only_the_altered_event_is_named(journal_target: str) -> None:
    _run(journal_target)
    raw(
        journal_target,
        "UPDATE events SET payload = ? WHERE run_id = 'r' AND seq = 501",
        ('{"v":7}',),
    )
    assert _problems(journal_target) == ["event 501 (k501): content does not match its hash"]


def test_an_altered_event_after_a_gap_is_still_named(journal_target: str) -> None:
    _run(journal_target)
    raw(journal_target, "DELETE FROM events WHERE run_id = 'r' AND seq = 500")
    raw(
        journal_target,
        "UPDATE events SET payload = ? WHERE run_id = 'r' AND seq = 501",
        ('{"v":7}',),
    )
    assert _problems(journal_target) == [
        "event 500 missing (1 event)",
        "event 501 (k501): content does not match its hash",
        f"run header counts {N} events, journal holds {N - 1}",
    ]


def test_the_report_is_bounded(journal_target: str) -> None:
    _run(journal_target)
    raw(journal_target, "UPDATE events SET at = 'x' WHERE run_id = 'r'")
    problems = _problems(journal_target)
    assert len(problems) == MAX_PROBLEMS + 1
    assert problems[0] == "event 0 (k0): content does not match its hash"
    assert problems[-1] == f"and {N - MAX_PROBLEMS} more problems"


def test_runs_verify_prints_one_line_for_one_deleted_event(tmp_path: Path) -> None:
    target = str(tmp_path / "j.sqlite")
    _run(target)
    raw(target, "DELETE FROM events WHERE seq = 500")
    res = cli("runs", "verify", "r", "--journal", target)
    assert res.code == 1
    assert res.err.splitlines() == [
        "run r: FAILED",
        "  event 500 missing (1 event)",
        f"  run header counts {N} events, journal holds {N - 1}",
    ]


@pytest.mark.parametrize("seq", [0, 450, N - 1])
def test_a_forged_link_is_still_caught(journal_target: str, seq: int) -> None:
    """An event rewritten to chain onto another predecessor (hash recomputed) breaks the
    link to the event before it: named as such."""
    from dissensus.store import chain_hash

    _run(journal_target)
    row = raw(
        journal_target,
        "SELECT run_id, seq, key, type, case_ref, at, payload FROM events WHERE seq = ?",
        (seq,),
    )[0]
    body = {"run": row[0], "seq": row[1], "key": row[2], "type": row[3], "case": row[4],
            "at": row[5], "payload": {"v": seq}}  # fmt: skip
    forged_prev = "f" * 64
    raw(
        journal_target,
        "UPDATE events SET prev_hash = ?, hash = ? WHERE seq = ?",
        (forged_prev, chain_hash(forged_prev, body), seq),
    )
    problems = _problems(journal_target)
    assert f"event {seq} (k{seq}): prev_hash does not match the previous event" in problems
    assert not any("content does not match" in p for p in problems if p.startswith(f"event {seq} "))
