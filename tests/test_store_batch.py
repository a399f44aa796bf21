"""Group commit: a batch of events is one transaction, chained exactly as single appends.

Also the compact ``case.steps`` event: a case's first steps in one event, and journals
written with one event per step (the layout before it) still read and resume alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.pipeline.durable import COMPACT_STEPS, STEPS_TYPE, CaseLog, case_step, case_steps
from dissensus.pipeline.review import final_records
from dissensus.states import Reading
from dissensus.store import GENESIS, Journal, JournalConflict
from dissensus.store.canonical import canonical, chain_hash, event_hash
from dissensus.store.events import Event, written_event
from dissensus.store.journal import EventLog, NewEvent
from pipeline_cases import panel, write_jsonl, write_policy
from store_backends import BACKENDS, target_for

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
payloads = st.dictionaries(st.text(max_size=6), json_values, max_size=4)


@given(
    payload=payloads,
    key=st.text(min_size=1, max_size=10),
    case=st.none() | st.text(max_size=5),
    seq=st.integers(min_value=0, max_value=10**12),
    run=st.text(min_size=1, max_size=8),
    type=st.text(max_size=8),
    at=st.text(max_size=8),
)
def test_the_spliced_event_hash_is_the_chain_hash(
    payload: dict[str, Any], key: str, case: str | None, seq: int, run: str, type: str, at: str
) -> None:
    """Byte for byte: every field may hold quotes, backslashes, control and non-ASCII
    characters, which the spliced text must quote exactly as ``canonical`` does."""
    body = {
        "run": run,
        "seq": seq,
        "key": key,
        "type": type,
        "case": case,
        "at": at,
        "payload": payload,
    }
    spliced = event_hash(
        GENESIS,
        run=run,
        seq=seq,
        key=key,
        type=type,
        case=case,
        at=at,
        payload_text=canonical(payload),
    )
    assert spliced == chain_hash(GENESIS, body)


@given(
    payload=payloads,
    key=st.text(min_size=1, max_size=10),
    case=st.none() | st.text(max_size=5),
    seq=st.integers(min_value=0, max_value=10**6),
)
def test_a_written_event_equals_the_validated_event(
    payload: dict[str, Any], key: str, case: str | None, seq: int
) -> None:
    fields = {
        "run_id": "r",
        "seq": seq,
        "key": key,
        "type": "t.x",
        "case": case,
        "at": "now",
        "payload": payload,
        "prev_hash": GENESIS,
        "hash": "h",
    }
    fast = written_event(**fields)
    validated = Event(**fields)
    assert fast == validated
    assert fast.model_dump() == validated.model_dump()
    assert fast.model_fields_set == validated.model_fields_set
    assert fast.body() == validated.body()
    assert fast.model_copy(update={"seq": seq + 1}).seq == seq + 1


@settings(max_examples=30, deadline=None)
@given(
    bodies=st.lists(payloads, min_size=1, max_size=12),
    cuts=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=12),
)
def test_batches_of_any_size_chain_like_single_appends(
    bodies: list[dict[str, Any]], cuts: list[int]
) -> None:
    items = [NewEvent("t.x", p, f"k/{i}", str(i % 3)) for i, p in enumerate(bodies)]
    with Journal(":memory:") as journal:
        log: EventLog = journal
        journal.create_run("r", kind="t", meta={})
        start = 0
        for cut in cuts * len(items):
            if start >= len(items):
                break
            got = log.append_batch("r", items[start : start + cut])
            assert [e.key for e in got] == [i.key for i in items[start : start + cut]]
            start += cut
        stored = list(log.read("r"))
        assert [(e.key, e.payload) for e in stored] == [(i.key, i.payload) for i in items]
        prev = GENESIS
        for e in stored:
            assert e.prev_hash == prev and chain_hash(prev, e.body()) == e.hash
            prev = e.hash
        assert log.head("r") == (len(items), prev)
        assert journal.verify("r").ok
        # Appended again: nothing written, the stored events come back.
        again = log.append_batch("r", items)
        assert [e.hash for e in again] == [e.hash for e in stored]
        assert log.head("r").n_events == len(items)


def test_a_batch_is_all_or_nothing() -> None:
    with Journal(":memory:") as journal:
        journal.create_run("r", kind="t", meta={})
        journal.append("r", "t.x", {"v": 1}, key="a")
        batch = [NewEvent("t.x", {"v": 2}, "b"), NewEvent("t.x", {"v": 3}, "a")]
        with pytest.raises(JournalConflict, match="'a'"):
            journal.append_batch("r", batch)
        assert [e.key for e in journal.events("r")] == ["a"]
        with pytest.raises(JournalConflict, match="twice in a batch"):
            journal.append_batch("r", [NewEvent("t.x", {"v": 2}, "b"), NewEvent("t.x", {}, "b")])
        assert journal.head("r").n_events == 1 and journal.verify("r").ok


def test_review_events_in_a_batch_feed_the_review_index() -> None:
    with Journal(":memory:") as journal:
        journal.create_run("r", kind="t", meta={})
        journal.append_batch(
            "r",
            [
                NewEvent("case.steps", {}, "case/1/steps", "1"),
                NewEvent(
                    "review.opened", {"review_id": "r.1", "reason": "why"}, "case/1/review", "1"
                ),
                NewEvent("case.record", {}, "case/1/record", "1"),
            ],
        )
        entries = journal.review_entries(run_id="r", status="open")
        assert entries is not None and [(e.review_id, e.seq) for e in entries] == [("r.1", 1)]
        assert journal.review_index_agrees()


def _panels() -> list[dict[str, Any] | str]:
    return [
        panel("same", ["1", "1", "1"]),
        panel("split", ["1", "2", "1"], reasoning=["Option 1 is right.", "No, option 2.", "One."]),
        panel("values", ["1", "2"], values=[{"safety": 0.9}, {"speed": 0.7}]),
        panel("lone", ["2", "2"]),
    ]


def _old_layout(new: Path, old: Path, run: str, drop_record: str) -> None:
    """``new``'s run rewritten as the layout before ``case.steps`` (one event per step),
    without the record of case ``drop_record`` and what followed its steps."""
    with Journal(new) as src, Journal(old) as dst:
        info = src.run(run)
        assert info is not None
        # Created with its run.started, as a run is: the header is made from it.
        started = next(src.events(run))
        first = (started.type, started.payload, started.key)
        dst.create_run(run, kind=info.kind, meta=info.meta, first=first)
        types = {s: t for t, names in COMPACT_STEPS.items() for s in names}
        for e in src.events(run):
            if e.key == f"case/{drop_record}/record" or e.type == "run.finished":
                continue
            if e.type == STEPS_TYPE:
                # The steps whole again (a thin case.steps leaves out what the review holds).
                steps = case_steps(src.events(run, case=e.case))
                for step in ("input", "reading", "route", "guard"):
                    key = f"case/{e.case}/{step}"
                    if key in steps:
                        dst.append(run, types[step], steps[key], key=key, case=e.case)
                continue
            dst.append(run, e.type, e.payload, key=e.key, case=e.case)


def test_a_journal_with_one_event_per_step_reads_and_resumes(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", _panels())
    policy = write_policy(tmp_path / "p.yaml")
    new, old = tmp_path / "new.sqlite", tmp_path / "old.sqlite"
    res = cli("decide", inp, "--policy", policy, "--journal", new, "--run-id", "R", "--json")
    assert res.code == 0, res.err
    with Journal(new) as j:
        types = [e.type for e in j.events("R")]
        assert types.count(STEPS_TYPE) == 4 and "case.input" not in types
        assert not {"case.route", "case.guard"} & set(types)
    _old_layout(new, old, "R", drop_record="2")
    with Journal(old) as j:
        assert "case.steps" not in {e.type for e in j.events("R")}
        reading = case_step(j, "R", 2, "reading")
        assert reading is not None and Reading.model_validate(reading)
        # A case log finds the per-step events as it finds a case.steps event.
        log = CaseLog(j, "R", 2)
        assert log.stored("input") == case_step(j, "R", 2, "input")
    resumed = cli("runs", "resume", "R", "--journal", old, "--json")
    assert resumed.code == 0, resumed.err
    with Journal(old) as a, Journal(new) as b:
        assert a.verify("R").ok
        assert final_records(a, "R") == final_records(b, "R")
        # The resumed case replayed its journalled steps: nothing of them written again.
        assert not [e for e in a.events("R", case="2") if e.type == STEPS_TYPE]
    assert [json.loads(x)["id"] for x in resumed.out.splitlines()] == [
        "same",
        "split",
        "values",
        "lone",
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_batch_on_each_back_end_chains_and_is_atomic(backend: str, tmp_path: Path) -> None:
    """A block larger than one multi-row INSERT (PostgreSQL: 1,000 rows), then a conflict."""
    items = [NewEvent("t.x", {"i": i, "text": "é%?"}, f"k/{i}", str(i % 7)) for i in range(2_345)]
    with target_for(backend, tmp_path) as target, Journal(target) as journal:
        journal.create_run("r", kind="t", meta={})
        journal.append_batch("r", items[:5])
        journal.append_batch("r", items)  # the first five are already there
        assert journal.head("r").n_events == len(items)
        assert [e.payload for e in journal.read("r", case="3")] == [
            i.payload for i in items if i.case == "3"
        ]
        with pytest.raises(JournalConflict):
            journal.append_batch("r", [NewEvent("t.x", {}, "new"), NewEvent("t.x", {}, "k/0")])
        assert journal.get("r", "new") is None
        report = journal.verify("r")
        assert report.ok and report.n_events == len(items), report.problems
