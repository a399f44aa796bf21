"""The list of automatic decisions reads only the case records journalled since the last
time it was listed (the runs that changed): a journal of many escalated cases took
seconds per page (every case record's payload read and parsed on each list, 5.8 s at
50,000)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dissensus.store.clock as clock
from dissensus.pipeline.batch import RUN_KIND
from dissensus.serve.journal_adapter import ReviewDesk
from dissensus.store import Journal
from dissensus.store import event_types as ev
from pipeline_cases import panel, write_policy
from serve_helpers import auth, client_for, escalating, login, settings

pytestmark = pytest.mark.anyio


async def _decide(tmp_path: Path, prefix: str) -> None:
    """A decide run of one case committed automatically and one escalated."""
    agree = panel(f"{prefix}-a", ["1", "1", "1"], swap=["1", "1", "1"])
    quiet = write_policy(tmp_path / "no-audits.yaml", {"acceptance": {"audit_rate": 0.0}})
    async with client_for(settings(tmp_path, policy=str(quiet))) as client:
        got = await client.post(
            "/v1/decide", json=[agree, escalating(f"{prefix}-s")], headers=auth("sub")
        )
        assert [r["auto"] for r in got.json()["records"]] == [True, False], got.text


def _expected(journal: Journal) -> list[str]:
    """The list as read from every case record of the decide runs."""
    return [
        f"{e.run_id}.{e.case}"
        for e in journal.events_of_type(ev.CASE_RECORD, kind=RUN_KIND)
        if e.payload.get("auto") and e.payload.get("decision") is not None
    ]


def _counting(monkeypatch: pytest.MonkeyPatch, type: str) -> list[int]:
    """How many runs each read of the events of ``type`` across runs read the events of
    (a full read included, as every run)."""
    reads: list[int] = []
    real, follow = Journal.events_of_type, Journal.follow

    def counted(self: Journal, of: str, **kwargs: Any) -> Iterator[Any]:
        if of == type:
            reads.append(len(self.runs()))
        return real(self, of, **kwargs)

    def followed(self: Journal, of: str, *args: Any, **kwargs: Any) -> Any:
        state = follow(self, of, *args, **kwargs)
        if of == type:
            reads.append(state.read_runs)
        return state

    monkeypatch.setattr(Journal, "events_of_type", counted)
    monkeypatch.setattr(Journal, "follow", followed)
    return reads


async def test_the_automatic_list_reads_only_new_case_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(4):
        await _decide(tmp_path, f"r{i}")
    with Journal(tmp_path / "journal.sqlite") as journal:
        desk = ReviewDesk(journal, claim_ttl_s=60)
        expected = _expected(journal)
        assert len(expected) == 4
        reads = _counting(monkeypatch, ev.CASE_RECORD)
        assert desk.auto_cases() == expected
        assert desk.auto_cases() == expected
        assert reads == [4, 0]  # the second list read no case record
        await _decide(tmp_path, "r4")
        listed = desk.auto_cases()
        assert reads[2:] == [1]  # the new run's
        assert listed == _expected(journal)
        assert desk.auto_cases(audited=True) == _expected(journal)


async def test_a_case_record_journalled_late_with_an_earlier_time_is_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another server's record journalled after the list was read, but timed before the
    newest record read, is still listed (the journal's count says one is missing)."""
    await _decide(tmp_path, "r0")
    with Journal(tmp_path / "journal.sqlite") as journal:
        desk = ReviewDesk(journal, claim_ttl_s=60)
        assert desk.auto_cases() == _expected(journal)
        with monkeypatch.context() as patched:
            patched.setattr(clock, "now", lambda: "2000-01-01T00:00:00.000000+00:00")
            await _decide(tmp_path, "r1")
        expected = _expected(journal)
        assert len(expected) == 2
        assert sorted(desk.auto_cases()) == sorted(expected)


async def test_the_queue_page_reads_each_runs_start_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The acceptance monitor above the queue finds the acceptance files in the runs'
    starts (each holding its file's calibration, 150 kB for the LLMBar one): a queue page
    read every run's start, so each grew with every run journalled. A page now reads only
    the starts journalled since the last one."""
    for i in range(4):
        await _decide(tmp_path, f"r{i}")
    starts = _counting(monkeypatch, ev.RUN_STARTED)
    quiet = tmp_path / "no-audits.yaml"
    async with client_for(settings(tmp_path, policy=str(quiet))) as client:
        await login(client, "rev")
        for _ in range(3):
            assert (await client.get("/review")).status_code == 200
    assert sum(starts) == 4, starts  # every start read once, by the first page


async def test_a_listed_case_the_journal_no_longer_holds_reads_the_list_again(
    tmp_path: Path,
) -> None:
    """A case the desk remembers but the journal no longer holds (a journal restored from
    a backup): the list of automatic decisions answered 404 ("no case ... no run ...")
    until the server restarted; it now reads the journal's records again."""
    await _decide(tmp_path, "r0")
    quiet = tmp_path / "no-audits.yaml"
    async with client_for(settings(tmp_path, policy=str(quiet))) as client:
        await login(client, "rev")
        assert (await client.get("/review?status=automatic")).status_code == 200
        desk = client._transport.app.state.service.desk  # type: ignore[attr-defined]
        with desk._records_lock:
            state = desk._records.state
            desk._records._state = dataclasses.replace(state, values=(*state.values, ("gone", "1")))
        page = await client.get("/review?status=automatic")
        assert page.status_code == 200, page.text[:300]
        assert "gone.1" not in page.text and "r0-a" in page.text
        assert ("gone", "1") not in desk._records.state.values
