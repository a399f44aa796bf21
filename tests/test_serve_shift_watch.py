"""The service's shift watch: cases of one-panel runs, checked together off the request path,
hold the acceptance file under ``on_shift: escalate`` for every door afterwards."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from dissensus.pipeline.batch import execute_run, start_run
from dissensus.pipeline.shift import SHIFT_EVENT, latest_flag
from dissensus.pipeline.spec import RunSpec
from dissensus.serve.shift_watch import ShiftWatch
from dissensus.store import Journal
from dissensus.store import event_types as ev
from dissensus.store.errors import JournalBusy
from serve_helpers import auth, heap_frozen, write_tokens
from shift_helpers import build_world


@pytest.fixture(scope="module", autouse=True)
def _frozen() -> Iterator[None]:
    yield from heap_frozen()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_world(tmp_path_factory.mktemp("watch"))


def _lines(path: Path, n: int) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()[:n]


async def _drain(records: AsyncIterator[Any]) -> list[Any]:
    return [r async for r in records]


def _one_panel_runs(journal: Journal, policy: Path, lines: list[str], prefix: str) -> list[Any]:
    """One run per panel, as the one-panel doors make them: the records."""
    records: list[Any] = []
    for i, line in enumerate(lines):
        run_id = f"{prefix}{i}"
        start_run(journal, None, policy, text=line + "\n", run_id=run_id)
        records.extend(asyncio.run(_drain(execute_run(journal, run_id))))
    return records


def test_one_panel_runs_never_check_themselves_but_the_watch_flags_and_holds_them(
    world: Path, tmp_path: Path
) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        _one_panel_runs(journal, world / "hold.yaml", _lines(world / "shifted.jsonl", 30), "p")
        assert not list(journal.events_of_type(SHIFT_EVENT))  # no run judged 10 cases
        judged = journal.count_of_type(ev.CASE_ACCEPTANCE)
        assert judged >= 20
        spec = RunSpec.from_policy(world / "hold.yaml")
        watch = ShiftWatch(journal, spec, every=10)
        assert watch.enabled
        outcome = watch.step()
        assert outcome is not None and outcome["shifted"], outcome
        assert watch.flagged_run is not None
        flag = latest_flag(journal, spec.acceptance["sha256"] if spec.acceptance else None)
        assert flag is not None and flag["run_id"] == watch.flagged_run
        assert flag["across_runs"] == judged and flag["newest_run"] == "p29"
        # The flag's run is a run like any other: finished, verifiable, shown.
        assert journal.run_status(watch.flagged_run) == "finished"
        assert journal.verify(watch.flagged_run).ok
        # Not due again until `every` more cases are judged; then a second flag of the
        # same file journals no second run.
        assert watch.step() is None
        runs_before = len(journal.runs())
        after = _one_panel_runs(journal, world / "hold.yaml", _lines(world / "same.jsonl", 12), "q")
        assert journal.count_of_type(ev.CASE_ACCEPTANCE) - judged >= 10
        # Every run started after the flag carries the hold: nothing commits on learned acceptance.
        assert after and not any(r.basis == "learned" for r in after)
        assert any("acceptance held" in r.reason and watch.flagged_run in r.reason for r in after)
        watch.step()
        assert len(journal.runs()) == runs_before + 12
    shown = cli("runs", "show", flag["run_id"], "--journal", tmp_path / "j.sqlite", "--json")
    assert shown.code == 0 and json.loads(shown.out)["shift"]["shifted"] is True
    verified = cli("runs", "verify", flag["run_id"], "--journal", tmp_path / "j.sqlite")
    assert verified.code == 0, verified.err


def test_a_restarted_watch_journals_no_second_flag_of_a_flagged_file(
    world: Path, tmp_path: Path
) -> None:
    """A restarted server's watch makes the check again (its index is in the journal, not
    in the watch), finds the same shift, and journals no second flag of the file."""
    with Journal(tmp_path / "j.sqlite") as journal:
        _one_panel_runs(journal, world / "hold.yaml", _lines(world / "shifted.jsonl", 30), "p")
        spec = RunSpec.from_policy(world / "hold.yaml")
        watch = ShiftWatch(journal, spec, every=10)
        first = watch.step()
        assert first is not None and first["shifted"] and watch.flagged_run is not None
        runs = len(journal.runs())
        restarted = ShiftWatch(journal, spec, every=10)
        again = restarted.step()
        assert again is not None and again["shifted"] and again["check"] == first["check"]
        assert restarted.flagged_run is None and len(journal.runs()) == runs
        assert [e.run_id for e in journal.events_of_type(SHIFT_EVENT)] == [watch.flagged_run]


def test_cases_like_the_calibration_journal_nothing(world: Path, tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        _one_panel_runs(journal, world / "hold.yaml", _lines(world / "same.jsonl", 40), "s")
        watch = ShiftWatch(journal, RunSpec.from_policy(world / "hold.yaml"), every=10)
        runs = len(journal.runs())
        outcome = watch.step()
        assert outcome is not None and not outcome["shifted"], outcome
        assert watch.flagged_run is None and len(journal.runs()) == runs
        assert not list(journal.events_of_type(SHIFT_EVENT))


def test_no_acceptance_file_or_every_zero_means_no_watch(world: Path, tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        assert not ShiftWatch(journal, RunSpec.from_policy(None)).enabled
        assert not ShiftWatch(journal, RunSpec.from_policy(world / "hold.yaml"), every=0).enabled
        # Fewer than 10 judged cases: no check at all.
        _one_panel_runs(journal, world / "hold.yaml", _lines(world / "shifted.jsonl", 3), "f")
        assert ShiftWatch(journal, RunSpec.from_policy(world / "hold.yaml"), every=1).step() is None


@pytest.mark.anyio
async def test_the_running_service_watches_its_one_panel_requests(
    world: Path, tmp_path: Path
) -> None:
    """Through the service's own lifespan: one-panel requests of shifted cases, the watch
    flags them in the background, and the next request is held."""
    import httpx

    from dissensus.serve import ServeSettings, create_app

    settings = ServeSettings(
        journal=str(tmp_path / "j.sqlite"),
        policy=str(world / "hold.yaml"),
        tokens=str(write_tokens(tmp_path / "tokens.txt")),
        shift_every=10,
        shift_interval_s=0.05,
    )
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client,
    ):
        for line in _lines(world / "shifted.jsonl", 25):
            answer = await client.post("/v1/decide", json=json.loads(line), headers=auth("sub"))
            assert answer.status_code == 200, answer.text
        watch = app.state.service.shift_watch
        for _ in range(1200):  # the check runs in a worker thread: at most a minute
            if watch.flagged_run is not None:
                break
            await asyncio.sleep(0.05)
        assert watch.flagged_run is not None
        line = _lines(world / "same.jsonl", 1)[0]
        record = (
            await client.post("/v1/decide", json=json.loads(line), headers=auth("sub"))
        ).json()
        assert record["basis"] != "learned" and "acceptance held" in record["reason"], record
        status = (await client.get("/v1/acceptance", headers=auth("sub"))).json()
        assert status["hold"]["run_id"] == watch.flagged_run


def test_the_watch_numbers_its_checks_from_the_journal_so_a_restart_goes_on(
    world: Path, tmp_path: Path
) -> None:
    from dissensus.acceptance.shift import check_level

    with Journal(tmp_path / "j.sqlite") as journal:
        _one_panel_runs(journal, world / "warn.yaml", _lines(world / "same.jsonl", 35), "s")
        spec = RunSpec.from_policy(world / "warn.yaml")
        watch = ShiftWatch(journal, spec, every=10)
        first = watch.step()
        # 35 judged cases, one check every 10: the third check, of the first 30 cases.
        assert first is not None and first["check"] == 3 and first["deployed_n"] == 30
        assert first["alpha"] == check_level(0.1, 3) and first["file_alpha"] == 0.1
        # A restarted server goes on from the journal: the same index, the same check.
        again = ShiftWatch(journal, spec, every=10).step()
        assert again == first
        _one_panel_runs(journal, world / "warn.yaml", _lines(world / "same.jsonl", 7), "t")
        # 42 judged: the 40th made check 4 due, of the first 40 cases.
        fourth = watch.step()
        assert fourth is not None and fourth["check"] == 4 and fourth["deployed_n"] == 40
        assert watch.step() is None  # no new multiple: not due
        watch._seen = 0  # due again, but the index is the one checked last: skipped
        assert watch.step() is None and watch._check == 4


def test_no_check_before_every_cases_are_judged_with_the_file(world: Path, tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        _one_panel_runs(journal, world / "hold.yaml", _lines(world / "shifted.jsonl", 15), "f")
        watch = ShiftWatch(journal, RunSpec.from_policy(world / "hold.yaml"), every=20)
        assert watch.step() is None and watch.flagged_run is None


def test_a_check_whose_flag_could_not_be_journalled_is_made_again_at_the_next_count(
    world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal refused the flag (busy): the watch neither forgets the check nor waits
    for `every` more cases; the next count makes the same check and journals the flag."""
    import dissensus.pipeline.shift_watch as watch_module

    with Journal(tmp_path / "j.sqlite") as journal:
        _one_panel_runs(journal, world / "hold.yaml", _lines(world / "shifted.jsonl", 30), "p")
        spec = RunSpec.from_policy(world / "hold.yaml")
        watch = ShiftWatch(journal, spec, every=10)
        real = watch_module.journal_flag

        def busy(*args: Any, **kwargs: Any) -> str:
            raise JournalBusy("the journal is busy")

        monkeypatch.setattr(watch_module, "journal_flag", busy)
        watch._step_logged()  # logged, not raised
        assert watch.flagged_run is None and watch.due()
        monkeypatch.setattr(watch_module, "journal_flag", real)
        outcome = watch.step()
        assert outcome is not None and outcome["shifted"] and watch.flagged_run is not None
        first = latest_flag(journal, spec.acceptance["sha256"] if spec.acceptance else None)
        assert first is not None and first["check"] == outcome["check"]


def test_the_service_states_the_guarantee_without_rounding_up(world: Path, tmp_path: Path) -> None:
    """``GET /v1/acceptance`` words a file at ``delta`` 0.004 and target 0.995 as the
    CLI does: "99.5 of every 100" at "99.6% confidence", never "100 of every 100" at
    "100% confidence", a certainty no finite calibration gives."""
    from dissensus.serve.acceptance import acceptance_status

    spec = RunSpec.from_policy(world / "warn.yaml")
    assert spec.acceptance is not None
    edited = {**spec.acceptance, "delta": 0.004, "target_precision": 0.995}
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        status = acceptance_status(journal, spec.model_copy(update={"acceptance": edited}))
    assert status.guarantee is not None
    assert status.guarantee.startswith(
        "At least 99.5 of every 100 automatic decisions should be right (99.6% confidence)"
    )


def test_get_acceptance_reads_on_from_the_watch_and_finds_what_a_full_read_finds(
    world: Path, tmp_path: Path
) -> None:
    """``GET /v1/acceptance`` reads the judged cases on from the service's last read (the
    shift watch's): another process's run is read alone, and after a restore that
    leaves as many judged cases as before, the answer is a full read's, not the old
    cases'."""
    from fastapi.testclient import TestClient

    from dissensus.serve import ServeSettings, create_app
    from dissensus.serve.acceptance import acceptance_status
    from store_backends import raw

    target = str(tmp_path / "j.sqlite")
    policy = world / "warn.yaml"
    spec = RunSpec.from_policy(policy)
    same, shifted = _lines(world / "same.jsonl", 11), _lines(world / "shifted.jsonl", 1)
    with Journal(target) as journal:  # ten cases in one run: the cheapest to make
        start_run(
            journal, None, policy, text="".join(f"{line}\n" for line in same[:10]), run_id="a"
        )
        asyncio.run(_drain(execute_run(journal, "a")))
    backup = raw(target, "SELECT * FROM runs"), raw(target, "SELECT * FROM events")
    settings = ServeSettings(
        journal=target,
        policy=str(policy),
        tokens=str(write_tokens(tmp_path / "tokens.txt")),
        shift_every=0,  # no watch stepping on its own: only the requests read
    )

    def full() -> Any:
        with Journal(target) as journal:
            return acceptance_status(journal, spec, every=0).model_dump(mode="json")["shift"]

    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:

        def status() -> Any:
            answer = client.get("/v1/acceptance", headers=auth("sub"))
            assert answer.status_code == 200, answer.text
            return answer.json()["shift"]

        follower = client.app.state.service.shift_watch.cases._follower  # type: ignore[attr-defined]
        first = status()
        assert first == full() and first["deployed_n"] == 10
        with Journal(target) as other:  # another process's runs
            _one_panel_runs(other, policy, same[10:], "b")
        assert status() == full() and status()["deployed_n"] == 11
        # (the second read of the two above found nothing new)
        assert follower.state.read_runs == 0
        with Journal(target) as other:  # restored, then as many cases judged again
            with sqlite3.connect(target) as db:  # one transaction
                db.execute("DELETE FROM events")
                db.execute("DELETE FROM runs")
                for table, rows in zip(("runs", "events"), backup, strict=True):
                    marks = ", ".join("?" * len(rows[0]))
                    db.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
            db.close()
            _one_panel_runs(other, policy, shifted, "c")
            assert other.count_of_type(ev.CASE_ACCEPTANCE) == 11
        after = status()
        assert after == full() and after["deployed_n"] == 11
        assert follower.state.read_runs == 1  # the new run, not the one restored
