"""A thin ``case.steps``: what the case's review item holds is journalled once.

An escalated case without a model call leaves its reading, guard check and panel out of
``case.steps`` (the review item holds them); every reader gets the same steps back.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.pipeline import decide
from dissensus.pipeline.compact import IN_REVIEW, case_step, case_steps, fold
from dissensus.pipeline.durable import CaseLog
from dissensus.pipeline.review import final_records
from dissensus.store import event_types as ev
from dissensus.store.canonical import canonical
from dissensus.store.journal import Journal, NewEvent
from dissensus.types import Panel
from pipeline_cases import panel, write_jsonl, write_policy


def _escalated(tmp_path: Path, meta: dict[str, Any] | None = None) -> tuple[Path, Panel]:
    data = panel("split", ["1", "2", "1"], meta=meta)
    given_panel = Panel.model_validate(data)
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        record = decide(given_panel, journal=journal, run_id="R")
    assert record.action == "escalate"
    return path, given_panel


def test_an_escalated_case_journals_its_steps_once_and_reads_them_whole(tmp_path: Path) -> None:
    path, given_panel = _escalated(tmp_path, meta={"gold": "1", "note": "n"})
    with Journal(path) as journal:
        events = list(journal.events("R", case="1"))
        steps = next(e for e in events if e.type == ev.CASE_STEPS)
        review = next(e for e in events if e.type == ev.REVIEW_OPENED)
        assert steps.payload[IN_REVIEW] == ["guard", "input", "reading"]
        assert set(steps.payload) == {"input", "route", IN_REVIEW}
        assert steps.payload["input"] == {"id": "split", "line": 1, "gold": "1"}
        # The reviewer's panel has no gold; the case's input has it back, whole.
        assert "gold" not in review.payload["panel"]["meta"]
        entered = case_step(journal, "R", 1, "input")
        assert entered is not None
        assert Panel.model_validate(entered["panel"]) == given_panel
        assert entered["panel"]["meta"]["gold"] == "1"
        for name in ("reading", "guard"):
            assert case_step(journal, "R", 1, name) == review.payload[name]
        whole = case_steps(events)
        assert whole["case/1/input"] == entered
        assert whole["case/1/reading"] == review.payload["reading"]
        # What a case log replays is the same.
        log = CaseLog(journal, "R", 1)
        assert log.stored("input") == entered and log.stored("route") == steps.payload["route"]
        assert journal.verify("R").ok


def test_a_panel_without_gold_keeps_no_gold_key(tmp_path: Path) -> None:
    path, given_panel = _escalated(tmp_path)
    with Journal(path) as journal:
        steps = journal.get("R", "case/1/steps")
        assert steps is not None and steps.payload["input"] == {"id": "split", "line": 1}
        entered = case_step(journal, "R", 1, "input")
        assert entered is not None and "gold" not in entered["panel"]["meta"]
        assert Panel.model_validate(entered["panel"]) == given_panel


def test_a_thin_case_resumes_to_the_same_records(tmp_path: Path) -> None:
    """The run killed after its cases' steps (the records and run.finished never
    written): the resumed run replays the thin steps and writes none of them again."""
    rows = [
        panel("split", ["1", "2", "1"]),
        panel("same", ["1", "1", "1"]),
        panel("gold", ["2", "1"], meta={"gold": "2"}),
    ]
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    policy = write_policy(tmp_path / "p.yaml")
    full, cut = tmp_path / "full.sqlite", tmp_path / "cut.sqlite"
    done = cli("decide", inp, "--policy", policy, "--journal", full, "--run-id", "R", "--json")
    assert done.code == 0, done.err
    with Journal(full) as src, Journal(cut) as dst:
        info = src.run("R")
        assert info is not None
        assert any(IN_REVIEW in e.payload for e in src.events("R", type=ev.CASE_STEPS))
        kept = [
            NewEvent(e.type, e.payload, e.key, e.case)
            for e in src.events("R")
            if e.type not in (ev.CASE_RECORD, ev.RUN_FINISHED)
        ]
        # Created with its run.started, as a run is: the header is made from it.
        first = (kept[0].type, kept[0].payload, kept[0].key)
        dst.create_run("R", kind=info.kind, meta=info.meta, first=first)
        dst.append_batch("R", kept)
        before = dst.head("R").n_events
    resumed = cli("runs", "resume", "R", "--journal", cut, "--json")
    assert resumed.code == 0, resumed.err
    with Journal(cut) as a, Journal(full) as b:
        assert a.verify("R").ok
        assert final_records(a, "R") == final_records(b, "R")
        written = [e.type for e in a.events("R")][before:]
        assert ev.CASE_STEPS not in written and ev.REVIEW_OPENED not in written


def test_a_thin_case_is_a_third_smaller(tmp_path: Path) -> None:
    path, _ = _escalated(tmp_path)
    with Journal(path) as journal:
        events = list(journal.events("R", case="1"))
    thin = sum(len(canonical(e.payload)) for e in events)
    whole = case_steps(events)
    steps = {k.rpartition("/")[2]: v for k, v in whole.items() if not k.endswith("/steps")}
    folded = {n: steps[n] for n in ("input", "reading", "route", "guard")}
    before = thin - len(canonical(events[0].payload)) + len(canonical(folded))
    assert events[0].type == ev.CASE_STEPS
    assert thin < 0.75 * before


json_leaf = st.none() | st.booleans() | st.integers() | st.text(max_size=4)
json_obj = st.dictionaries(st.text(max_size=4), json_leaf, max_size=3)


@settings(max_examples=200, deadline=None)
@given(
    reading=json_obj,
    guard=json_obj,
    route=json_obj,
    meta=json_obj,
    gold=st.none() | st.just("absent") | json_leaf,
    share=st.lists(st.booleans(), min_size=4, max_size=4),
    review_first=st.booleans(),
)
def test_folding_then_reading_gives_every_step_back(
    reading: dict[str, Any],
    guard: dict[str, Any],
    route: dict[str, Any],
    meta: dict[str, Any],
    gold: Any,
    share: list[bool],
    review_first: bool,
) -> None:
    """Whatever the review item holds (equal steps or not, a panel with or without gold,
    or another panel), the folded events read back as the unfolded ones."""
    meta = {k: v for k, v in meta.items() if k != "gold"}
    if gold != "absent":
        meta["gold"] = gold
    panel_json = {"id": "p", "meta": meta, "outputs": []}
    shown = copy.deepcopy(panel_json)
    shown["meta"] = {k: v for k, v in meta.items() if k != "gold"}
    if not share[2]:
        shown["id"] = "other"
    steps = {
        "input": {"id": "p", "line": 3, "panel": panel_json},
        "reading": reading,
        "route": route,
        "guard": guard,
    }
    item = {
        "review_id": "R.3",
        "reading": reading if share[0] else {**reading, "x": 1},
        "guard": copy.deepcopy(guard) if share[1] else None,
        "panel": shown if share[3] or share[2] else None,
    }
    types = {"input": ev.CASE_INPUT, "reading": ev.CASE_READING}
    types.update(route=ev.CASE_ROUTE, guard=ev.CASE_GUARD)
    review = NewEvent(ev.REVIEW_OPENED, item, "case/3/review", "3")
    plain = [NewEvent(types[n], p, f"case/3/{n}", "3") for n, p in steps.items()]
    events = [review, *plain] if review_first else [*plain, review]
    folded = fold(events, "3")
    assert [e.type for e in folded].count(ev.CASE_STEPS) == 1 and len(folded) == 2
    # The journal stores the canonical text; read back from it.
    stored = [NewEvent(e.type, json.loads(canonical(e.payload)), e.key, e.case) for e in folded]
    back = case_steps(stored)
    for name, payload in steps.items():
        assert back[f"case/3/{name}"] == payload
