"""A run started before a shift check flagged its acceptance file, resumed after it,
under ``on_shift: escalate``: the resume holds the file and says why."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.pipeline import batch
from dissensus.pipeline.audit import run_acceptance
from dissensus.pipeline.batch import execute_run, run_spec, start_run
from dissensus.pipeline.shift import SHIFT_EVENT
from dissensus.store import Journal
from dissensus.store import event_types as ev
from shift_helpers import build_world


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_world(tmp_path_factory.mktemp("shift-resume"))


def _flag(journal: Journal, sha: str) -> None:
    """A flagged shift check of the file ``sha``, journalled as a run of its own."""
    journal.create_run("moved", kind="decide", meta={})
    payload = {"auc": 0.93, "p_value": 1.3e-4, "shifted": True, "alpha": 0.03, "file_sha256": sha}
    journal.append("moved", SHIFT_EVENT, payload, key="run/shift")


def _records(journal: Journal, run_id: str) -> dict[str, dict[str, object]]:
    return {str(e.case): e.payload for e in journal.events(run_id, type=ev.CASE_RECORD)}


def test_a_run_resumed_after_a_flag_commits_nothing_by_learned_acceptance(
    world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run started before the flag went on committing by learned acceptance when
    resumed after it (its journalled specification carried no hold), while any run
    started after the flag committed nothing."""
    path = tmp_path / "j.sqlite"
    with Journal(path) as journal:
        start_run(journal, str(world / "same.jsonl"), world / "hold.yaml", run_id="r")
        monkeypatch.setattr(batch, "BLOCK_CASES", 5)  # records come in blocks of 5

        async def interrupted() -> None:
            async for record in execute_run(journal, "r"):
                if record.basis == "learned":
                    break  # stopped after learned acceptance committed a case

        asyncio.run(interrupted())
        monkeypatch.undo()
        assert journal.run_status("r") != "finished"
        before = _records(journal, "r")
        assert 0 < len(before) < 60
        assert any(p["basis"] == "learned" for p in before.values())
        acceptance = run_spec(journal, "r").acceptance
        assert acceptance is not None and run_spec(journal, "r").shift_hold is None
        _flag(journal, str(acceptance["sha256"]))

    resumed = cli("runs", "resume", "r", "--journal", path, env={"COLUMNS": "200"})
    assert resumed.code == 0, resumed.err

    with Journal(path) as journal:
        assert journal.run_status("r") == "finished"
        after = _records(journal, "r")
        held_event = journal.get("r", "acceptance/held")
        state = run_acceptance(journal, "r")
    assert len(after) == 60
    # The cases journalled before the resume keep their records, automatic ones included.
    assert {case: after[case] for case in before} == before
    new = [p for case, p in after.items() if case not in before]
    assert new and not any(p["basis"] == "learned" for p in new)
    held = [p for p in new if "acceptance held" in str(p["reason"])]
    assert held and all("run moved" in str(p["reason"]) for p in held)
    assert held_event is not None and held_event.type == ev.ACCEPTANCE_HELD
    assert "p = 0.00013" in held_event.payload["hold"]
    assert state is not None and state.held_on_resume and "in run moved" in str(state.held)
    words = " ".join(resumed.out.split())
    assert "Learned acceptance is held after a shift check flagged its file while the run" in words
    assert "in run moved" in words and "commits nothing from the resume on" in words

    data = json.loads(cli("runs", "show", "r", "--journal", path, "--json").out)
    assert "in run moved" in data["acceptance"]["held"]
    assert data["acceptance"]["held_on_resume"] is True


def test_a_second_resume_keeps_the_hold_it_journalled(world: Path, tmp_path: Path) -> None:
    """The hold a resume met is the run's own: a later resume reads it, journals no
    second one, and stays held."""
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(world / "same.jsonl"), world / "hold.yaml", run_id="r")
        acceptance = run_spec(journal, "r").acceptance
        assert acceptance is not None
        _flag(journal, str(acceptance["sha256"]))

        async def two_records() -> None:
            seen = 0
            async for _ in execute_run(journal, "r", deadline_s=None):
                seen += 1
                if seen == 2:
                    break

        asyncio.run(two_records())
        assert journal.get("r", "acceptance/held") is not None

        async def rest() -> list[str]:
            return [r.basis async for r in execute_run(journal, "r")]

        bases = asyncio.run(rest())
        assert "learned" not in bases
        assert journal.count_of_type(ev.ACCEPTANCE_HELD) == 1
