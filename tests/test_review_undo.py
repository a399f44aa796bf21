"""Undoing a resolution: a ``review.reopened`` event, never an edit, in the library, CLI and API."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import run_cli
from dissensus.pipeline import decide, policy_from_dict
from dissensus.pipeline.review import (
    REVIEWER_ENV,
    AlreadyResolved,
    NotUndoable,
    final_records,
    find_item,
    list_items,
    list_items_from_events,
    reopen,
    resolve,
)
from dissensus.store import Journal
from pipeline_cases import as_panel, panel
from serve_helpers import auth, client_for, csrf_of, escalating, login
from serve_helpers import settings as serve_settings

POLICY = policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.3}})


def _escalated(journal: Journal, run_id: str) -> str:
    row = panel(
        "vc",
        ["1", "2", "1"],
        values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
        reasoning=["Option 1 is right."] * 3,
    )
    record = decide(as_panel(row), POLICY, journal=journal, run_id=run_id)
    assert record.review_id
    return record.review_id


def test_undo_reopens_and_the_case_can_be_resolved_anew(journal_target: str) -> None:
    with Journal(journal_target) as journal:
        rid = _escalated(journal, "r")
        escalation = final_records(journal, "r")[0]
        resolve(journal, rid, decision="2", note="first", reviewer="kim")
        with pytest.raises(NotUndoable, match="only they"):
            reopen(journal, rid, reviewer="lee", within_s=300)
        late = datetime.now(UTC) + timedelta(seconds=301)
        with pytest.raises(NotUndoable, match="undone for 300 s"):
            reopen(journal, rid, reviewer="kim", within_s=300, now=late)
        event = reopen(journal, rid, reviewer="kim", within_s=300)
        assert event.type == "review.reopened" and event.payload["decision"] == "2"
        assert find_item(journal, rid).resolution is None
        assert final_records(journal, "r") == [escalation]
        with pytest.raises(NotUndoable, match="is open"):
            reopen(journal, rid, reviewer="kim", within_s=300)
        record = resolve(journal, rid, decision="1", note="second", reviewer="lee")
        assert final_records(journal, "r") == [record]
        # The integrations' review path reads the standing record, not the undone one.
        from dissensus.integrations._review import resolved_record

        assert resolved_record(journal, find_item(journal, rid)) == record
        with pytest.raises(AlreadyResolved, match="by lee"):
            resolve(journal, rid, decision="2", note="third", reviewer="kim")
        types = [e.type for e in journal.events("r") if e.type.startswith(("review.", "case.res"))]
        assert types == [
            "review.opened",
            "review.resolved",
            "case.resolved",
            "review.reopened",
            "review.resolved",
            "case.resolved",
        ]
        assert journal.verify("r").ok and journal.review_index_agrees()
        assert [s.item.review_id for s in list_items(journal)] == []
        reopen(journal, rid, reviewer="lee", within_s=300)
        assert [s.item.review_id for s in list_items(journal)] == [rid]
        assert journal.rebuild_review_index() == 1 and journal.review_index_agrees()
        assert [s.item.review_id for s in list_items(journal)] == [rid]


@settings(max_examples=25)
@given(ops=st.lists(st.sampled_from(["resolve-1", "resolve-2", "undo"]), max_size=7))
def test_index_events_and_records_agree_after_any_resolve_undo_sequence(
    tmp_path_factory: pytest.TempPathFactory, ops: list[str]
) -> None:
    path = tmp_path_factory.mktemp("undo") / "j.sqlite"
    with Journal(path) as journal:
        rid = _escalated(journal, "r")
        standing: str | None = None
        for op in ops:
            if op == "undo":
                if standing is None:
                    with pytest.raises(NotUndoable):
                        reopen(journal, rid, reviewer="kim", within_s=300)
                else:
                    reopen(journal, rid, reviewer="kim", within_s=300)
                    standing = None
            elif standing is None:
                standing = op[-1]
                resolve(journal, rid, decision=standing, note="n", reviewer="kim")
            else:
                with pytest.raises(AlreadyResolved):
                    resolve(journal, rid, decision=op[-1], note="n", reviewer="kim")
        by_index = list(list_items(journal, include_resolved=True))
        by_events = list(list_items_from_events(journal, include_resolved=True))
        assert by_index == by_events
        got = by_index[0].resolution
        assert (got.decision if got else None) == standing
        record = final_records(journal, "r")[0]
        assert record.decision == (standing or record.decision)
        assert record.action == ("human" if standing else "escalate")
        assert journal.review_index_agrees() and journal.verify("r").ok
    # A journal opened afresh (index rebuilt from the events if it disagreed) lists the same.
    with Journal(path) as journal:
        assert list(list_items(journal, include_resolved=True)) == by_index


def test_cli_undo(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        rid = _escalated(journal, "r")
    env = {**{k: v for k, v in os.environ.items() if k != REVIEWER_ENV}, REVIEWER_ENV: "kim"}
    done = run_cli(
        "review", "resolve", rid, "--decision", "2", "--note", "n", "--journal", path, env=env
    )
    assert done.returncode == 0, done.stderr
    other = run_cli("review", "undo", rid, "--reviewer", "lee", "--journal", path, env=env)
    assert other.returncode == 1 and "only they can undo" in other.stderr
    late = run_cli("review", "undo", rid, "--within", "0", "--journal", path, env=env)
    assert late.returncode == 1 and "can be undone for 0 s" in late.stderr
    ok = run_cli("review", "undo", rid, "--journal", path, "--json", env=env)
    assert ok.returncode == 0, ok.stderr
    assert '"status": "open"' in ok.stdout
    with Journal(path) as journal:
        assert find_item(journal, rid).resolution is None


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_api_undo_is_the_token_holders(tmp_path: Path, anyio_backend: str) -> None:
    async with client_for(serve_settings(tmp_path, undo_window_s=120)) as client:
        rid = (await client.post("/v1/decide", json=escalating("u"), headers=auth("sub"))).json()[
            "review_id"
        ]
        shown = (await client.get(f"/v1/review/{rid}", headers=auth("rev"))).json()
        body = {"decision": "2", "note": "n", "content_sha256": shown["content_sha256"]}
        assert (
            await client.post(f"/v1/review/{rid}/resolve", json=body, headers=auth("rev"))
        ).status_code == 200
        other = await client.post(f"/v1/review/{rid}/undo", headers=auth("rev2"))
        assert other.status_code == 409 and "only they" in other.json()["error"]
        mine = await client.post(f"/v1/review/{rid}/undo", headers=auth("rev"))
        assert mine.status_code == 200 and mine.json()["status"] == "open"
        again = (await client.get(f"/v1/review/{rid}", headers=auth("rev"))).json()
        assert again["status"] == "open"
        assert [h["type"] for h in again["history"]][-2:] == ["review.resolved", "review.reopened"]


def test_an_undone_resolution_is_no_label_and_the_new_one_is(journal_target: str) -> None:
    """Calibration from the journal reads the resolutions that stand: an undone one was
    withdrawn (it used to be a label, and the first of two for one panel: the
    correction was dropped as a repeat)."""
    from dissensus.pipeline.labels import labelled_from_journal

    with Journal(journal_target) as journal:
        rid = _escalated(journal, "r")
        resolve(journal, rid, decision="2", note="first", reviewer="kim")
        reopen(journal, rid, reviewer="kim", within_s=300)
        assert labelled_from_journal(journal).cases == []
        resolve(journal, rid, decision="1", note="second look", reviewer="kim")
        found = labelled_from_journal(journal)
    assert [(c.review_id, c.gold) for c in found.cases] == [(rid, "1")]


def test_a_reopened_case_can_be_claimed_until_it_is_resolved_again(journal_target: str) -> None:
    """The claim's closed check means "resolved now": the first resolution stays in the
    chain after an undo, and used to refuse every claim on the reopened case."""
    from dissensus.pipeline.review import claim, claim_next

    with Journal(journal_target) as journal:
        rid = _escalated(journal, "r")
        resolve(journal, rid, decision="2", note="first", reviewer="kim")
        with pytest.raises(AlreadyResolved, match="by kim"):
            claim(journal, rid, "lee", ttl=60)
        reopen(journal, rid, reviewer="kim", within_s=300)
        assert claim(journal, rid, "lee", ttl=60).who == "lee"
        journal.release_claim(rid, "lee")
        got = claim_next(journal, "lee", ttl=60)
        assert got is not None and got.item.review_id == rid
        resolve(journal, rid, decision="1", note="second", reviewer="lee")
        with pytest.raises(AlreadyResolved, match="by lee"):
            claim(journal, rid, "kim", ttl=60)
        assert claim_next(journal, "kim", ttl=60) is None
        reopen(journal, rid, reviewer="lee", within_s=300)
        assert claim(journal, rid, "kim", ttl=60).who == "kim"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_api_claims_a_case_reopened_by_undo(
    tmp_path: Path, journal_target: str, anyio_backend: str
) -> None:
    s = serve_settings(tmp_path, journal=journal_target, undo_window_s=120)
    async with client_for(s) as client:
        rid = (await client.post("/v1/decide", json=escalating("u"), headers=auth("sub"))).json()[
            "review_id"
        ]
        shown = (await client.get(f"/v1/review/{rid}", headers=auth("rev"))).json()
        body = {"decision": "2", "note": "n", "content_sha256": shown["content_sha256"]}
        done = await client.post(f"/v1/review/{rid}/resolve", json=body, headers=auth("rev"))
        assert done.status_code == 200
        undone = await client.post(f"/v1/review/{rid}/undo", headers=auth("rev"))
        assert undone.status_code == 200 and undone.json()["status"] == "open"
        # The page's claim button (the c key) goes the same way.
        await login(client, "rev2")
        page = await client.get(f"/review/case/{rid}")
        button = await client.post(f"/review/case/{rid}/claim", data={"csrf": csrf_of(page.text)})
        assert button.status_code == 303, button.text
        held = (await client.get(f"/v1/review/{rid}", headers=auth("rev"))).json()["claim"]
        assert held["reviewer"] == "rev2-name"
        claimed = await client.post(f"/v1/review/{rid}/claim", headers=auth("rev2"))
        assert claimed.status_code == 200, claimed.text
        assert claimed.json()["reviewer"] == "rev2-name"
        taken = await client.post(f"/v1/review/{rid}/claim", headers=auth("rev"))
        assert taken.status_code == 409 and taken.json()["claimed_by"] == "rev2-name"
        again = await client.post(f"/v1/review/{rid}/resolve", json=body, headers=auth("rev2"))
        assert again.status_code == 200
        late = await client.post(f"/v1/review/{rid}/claim", headers=auth("rev"))
        assert late.status_code == 409 and late.json()["resolved_by"] == "rev2-name"
