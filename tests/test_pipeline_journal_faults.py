"""A journal fault during a follow-up stops the run; it never becomes a case's outcome.

A model call in a follow-up (a live re-ask, a DCI deliberation) appends to the journal
before, during and after the call (``model.spend``, ``model.sent``, ``model.call``). When
one of those appends fails (here: a real second writer holds SQLite's write lock past a
tiny busy timeout), the failure is the journal's, not the model's: the run must stop
unfinished with exit 1 (a transient failure, resumable), and the resumed run must end
with the records of an uninterrupted run. It used to be caught as a failed follow-up
(``re-ask failed: journal ... is locked by another writer``), the case escalated for
good and the run finished with exit 0.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from dissensus.cli import journals
from dissensus.pipeline.batch import is_finished
from dissensus.store import Journal
from dissensus.store import event_types as ev
from dissensus.store.errors import JournalBusy
from pipeline_cases import (
    CRASH_ANSWERS,
    agent_models,
    crash_script,
    panel,
    write_jsonl,
    write_policy,
)

RUN = "R"

DCI_SCRIPT = """
rules:
  - match: {stage: dci.frame}
    json: {act: frame, target: a0, text: "Frame: choose the reply that states the refund policy."}
  - match: {stage: dci.propose}
    json: {act: extend, target: o1, text: "o1 states the window.", option: "State the 30-day window."}
  - match: {stage: dci.challenge}
    json: {act: challenge, target: o2, text: "o2 states no policy.", blocking: false}
  - match: {stage: dci.revise}
    json: {act: clarify, target: a0, text: "The question asks for the policy itself."}
  - match: {stage: dci.score}
    json: {act: recommend, target: o1, text: "o1 answers.", scores: {o1: 0.9, o2: 0.1}, confidence: 0.8}
  - match: {stage: dci.synthesize}
    json: {act: synthesize, target: o1, text: "We select o1.", reopen_conditions: ["x"], next_actions: ["reply"]}
default: '{"act": "clarify", "target": "a0", "text": "noted"}'
"""


def _rows() -> list[dict[str, Any]]:
    return [
        panel("plain", ["1", "1", "1"], swap=["1", "1", "1"]),
        panel("live-1", ["2", "1", "2"]),
        panel("live-2", ["1", "1", "1"]),
        panel("live-3", ["2", "1", "2"]),
    ]


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _lock_after(journal: Path, event_type: str, nth: int) -> tuple[list[sqlite3.Connection], Any]:
    """A hook that, after the ``nth`` event of ``event_type`` the CLI's journal appends,
    takes the journal's write lock on a connection of its own and keeps it."""
    held: list[sqlite3.Connection] = []
    seen = [0]

    def hook(event: Any) -> None:
        if event.type != event_type or held:
            return
        seen[0] += 1
        if seen[0] == nth:
            db = sqlite3.connect(journal, isolation_level=None)
            db.execute("BEGIN IMMEDIATE")
            held.append(db)

    return held, hook


def _release(held: list[sqlite3.Connection]) -> None:
    for db in held:
        if db.in_transaction:
            db.execute("ROLLBACK")


def _release_on_first_busy(monkeypatch: pytest.MonkeyPatch, held: list[sqlite3.Connection]) -> None:
    """The other writer ends its transaction right after the run's writer gave up
    waiting: the lock was transient, so only the one append failed."""
    from dissensus.store.sqlite import SQLiteBackend

    original = SQLiteBackend.errors

    @contextmanager
    def errors(self: SQLiteBackend) -> Iterator[None]:
        try:
            with original(self):
                yield
        except JournalBusy:
            _release(held)
            raise

    monkeypatch.setattr(SQLiteBackend, "errors", errors)


@pytest.mark.parametrize(
    ("event_type", "nth", "what"),
    [
        (ev.CASE_STEPS, 2, "model.spend"),
        (ev.MODEL_SPEND, 1, "model.sent (inside the model client)"),
        (ev.MODEL_SENT, 1, "model.call"),
        (ev.MODEL_CALL, 2, "a later call's model.spend"),
    ],
)
@pytest.mark.parametrize("followup", ["agents", "shared", "dci"])
def test_a_busy_journal_during_a_reask_stops_the_run_and_resume_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, event_type: str, nth: int, what: str,
    followup: str,
) -> None:  # fmt: skip
    inp = write_jsonl(tmp_path / "in.jsonl", list(_rows()))
    model: list[str] = []
    if followup == "agents":
        models = agent_models(tmp_path / "m", CRASH_ANSWERS)
        extra: dict[str, Any] = {"seek_context": {"use_recorded": False, "models": models}}
    elif followup == "shared":
        extra = {"seek_context": {"use_recorded": False}}
        model = ["--model", f"scripted:{crash_script(tmp_path / 's.yaml')}"]
    else:
        (tmp_path / "dci.yaml").write_text(DCI_SCRIPT, encoding="utf-8")
        extra = {"seek_context": {"use_recorded": False, "followup": "dci"}}
        model = ["--model", f"scripted:{tmp_path / 'dci.yaml'}"]
    pol = write_policy(tmp_path / "p.yaml", {**extra, "concurrency": 1})

    def decide(name: str) -> tuple[Any, Path]:
        out = tmp_path / f"{name}.jsonl"
        argv = ["decide", str(inp), "--policy", str(pol), "--journal", str(tmp_path / f"{name}.sqlite"),
                "--run-id", RUN, "--json", "-o", str(out), *model]  # fmt: skip
        return cli(*argv), out

    plain, plain_out = decide("plain")
    assert plain.code == 0, plain.err
    expected = _records(plain_out)
    assert not any("failed" in r["reason"] for r in expected)

    journal = tmp_path / "busy.sqlite"
    held, hook = _lock_after(journal, event_type, nth)
    monkeypatch.setattr(journals, "JOURNAL_HOOKS", [hook])
    monkeypatch.setenv("DISSENSUS_JOURNAL_BUSY_TIMEOUT", "0.01")
    _release_on_first_busy(monkeypatch, held)
    try:
        busy, busy_out = decide("busy")
    finally:
        _release(held)
        for db in held:
            db.close()
    monkeypatch.setattr(journals, "JOURNAL_HOOKS", [])
    monkeypatch.delenv("DISSENSUS_JOURNAL_BUSY_TIMEOUT")
    assert held, f"the lock was never taken (before {what})"
    assert busy.code == 1, (what, busy.out, busy.err)
    assert "is locked by another writer" in busy.err and "runs resume" in busy.err
    with Journal(journal) as j:
        assert not is_finished(j, RUN)
        for e in j.events(RUN):
            assert "locked" not in json.dumps(e.payload), (what, e.key)

    resumed = cli("runs", "resume", RUN, "--journal", str(journal), "--json", "-o", str(busy_out))
    assert resumed.code == 0, resumed.err
    assert _records(busy_out) == expected
    with Journal(journal) as j:
        assert is_finished(j, RUN) and j.verify(RUN).ok
