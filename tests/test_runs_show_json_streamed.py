"""``runs show --json`` writes its records as a second pass reads them: the same document,
character for character, as the whole document printed at once, on both back ends, with
human resolutions, a reopening and a resolution whose ``case.resolved`` is missing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.cli import common
from dissensus.cli.common import print_json, print_json_listing
from dissensus.pipeline import review
from dissensus.pipeline.review import final_records, reopen, resolve
from dissensus.store import event_types as ev
from dissensus.store.journal import open_journal
from pipeline_cases import panel
from store_backends import BACKENDS, raw, target_for

_text = st.text(
    st.characters(codec="utf-8") | st.sampled_from(["\u202e", "\x9b", "\U000e0041", "\n"]),
    max_size=6,
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _text | st.tuples(st.integers()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=12,
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    obj=st.dictionaries(_text, _json, max_size=4),
    key=_text,
    items=st.lists(_json, max_size=4),
)
def test_a_listing_written_as_it_comes_is_the_whole_document(
    capsys: pytest.CaptureFixture[str], obj: dict[str, Any], key: str, items: list[Any]
) -> None:
    obj.pop(key, None)
    print_json({**obj, key: items})
    whole = capsys.readouterr().out
    for write in (common.LISTING_WRITE, 10):  # one write at the end, and many
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(common, "LISTING_WRITE", write)
            print_json_listing(obj, key, iter(items))
        assert capsys.readouterr().out == whole


@pytest.fixture(params=BACKENDS)
def reviewed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A journal whose run ``r`` escalated some cases: two resolved, one of them then
    reopened, one resolved with its ``case.resolved`` event deleted afterwards."""
    lines = []
    for i in range(24):
        votes = ["x", "y", "z"] if i % 3 == 0 else ["x", "x", "x"]
        lines.append(json.dumps(panel(f"p{i}", votes)))
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with target_for(request.param, tmp_path) as journal:
        res = cli("decide", tmp_path / "in.jsonl", "--journal", journal, "--run-id", "r")
        assert res.code in (0, 1), res.err
        with open_journal(journal) as store:
            opened = [e.case for e in store.events("r", type=ev.REVIEW_OPENED)]
            assert len(opened) >= 4
            for case in opened[:3]:
                resolve(store, f"r.{case}", decision="x", note="checked", reviewer="ana")
            reopen(store, f"r.{opened[1]}", reviewer="ana", within_s=3600)
        raw(
            journal,
            "DELETE FROM events WHERE run_id = 'r' AND key = ?",
            (f"case/{opened[2]}/resolved",),
        )
        yield journal


def test_the_records_are_the_runs_final_records_in_line_order(
    reviewed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(review, "RECORDS_PART", 5)  # parts end anywhere in the run
    with monkeypatch.context() as patch:  # handed out as read, never settled whole

        def whole(*args: object) -> object:
            raise AssertionError("the records were settled in memory")

        patch.setattr(review, "final_records", whole)
        shown = cli("runs", "show", "r", "--journal", reviewed, "--json")
    assert shown.code == 0, shown.err
    assert "does not verify" in shown.err  # the deleted event
    data = json.loads(shown.out)
    with open_journal(reviewed) as store:
        final = [r.model_dump(mode="json") for r in final_records(store, "r")]
    assert data["records"] == final
    assert [r["line"] for r in final] == sorted(r["line"] for r in final)
    assert sum(1 for r in final if r.get("resolution")) == 2
    assert list(data) == [
        "run",
        "verified",
        "spec",
        "shift",
        "acceptance",
        "events",
        "finished",
        "records",
    ]
    assert shown.out == json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def test_a_resolved_case_whose_record_key_holds_another_type_is_still_shown(
    reviewed: str,
) -> None:
    """The event under a resolved case's ``case/N/record`` key edited into another type:
    the records are those :func:`final_records` gives (the case's human record among
    them), as the whole document showed them, not the case left out."""
    with open_journal(reviewed) as store:
        case = next(e.case for e in store.events("r", type=ev.CASE_RESOLVED))
    raw(
        reviewed,
        "UPDATE events SET type = 'case.note' WHERE run_id = 'r' AND key = ?",
        (f"case/{case}/record",),
    )
    shown = cli("runs", "show", "r", "--journal", reviewed, "--json")
    assert shown.code == 0, shown.err
    with open_journal(reviewed) as store:
        final = [r.model_dump(mode="json") for r in final_records(store, "r")]
    records = json.loads(shown.out)["records"]
    assert records == final
    assert any(r["line"] == int(str(case)) and r.get("resolution") for r in records)


def test_records_settled_in_memory_are_those_the_pass_met(reviewed: str) -> None:
    """Records out of line order (settled in memory): an event appended after the pass
    is not shown, as the in-order reading and the counts of the pass leave it out."""
    raw(reviewed, "UPDATE events SET key = 'moved' WHERE run_id = 'r' AND key = 'case/5/record'")
    with open_journal(reviewed) as store:
        passed = review.RecordsInOrder()
        for event in store.events("r"):
            passed.add(event)
        met = [r.model_dump(mode="json") for r in final_records(store, "r")]
        late = next(iter(store.events("r", type=ev.CASE_RECORD))).payload
        store.append("r", "case.record", {**late, "line": 999, "id": "late"}, key="case/999/record")
        shown = [r.model_dump(mode="json") for r in passed.records(store, "r")]
    assert shown == met
    assert all(r["id"] != "late" for r in shown)
