"""``runs resume`` and its input: a changed input file is refused; stdin is kept in the journal."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from pathlib import Path

import pytest

from dissensus.errors import InputError
from dissensus.pipeline import execute_run, policy_from_dict, start_run
from dissensus.pipeline.batch import BLOCK_CASES
from dissensus.pipeline.review import final_records
from dissensus.store import Journal
from pipeline_cases import panel

POLICY = policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.3}})
ROWS = [
    panel("a", ["1", "1", "1"], swap=["1", "1", "1"]),
    panel("b", ["1", "2", "2"], swap=["1", "2", "1"]),
]


async def _drain(journal: Journal, run_id: str) -> list[str]:
    return [r.id async for r in execute_run(journal, run_id)]


def test_a_changed_input_file_is_refused_on_resume(tmp_path: Path) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(inp), POLICY, run_id="R")
        inp.write_text(json.dumps(ROWS[0]) + "\n", encoding="utf-8")  # edited before the run ran
        with pytest.raises(InputError, match="changed since the run started"):
            asyncio.run(_drain(journal, "R"))
        inp.unlink()
        with pytest.raises(InputError, match="gone"):
            asyncio.run(_drain(journal, "R"))
        assert journal.get("R", "case/1/record") is None


def test_a_run_read_from_stdin_resumes_from_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(json.dumps(r) + "\n" for r in ROWS)))
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, "-", POLICY, run_id="S")
        monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # stdin is gone when the run resumes
        assert asyncio.run(_drain(journal, "S")) == ["a", "b"]
        assert [r.id for r in final_records(journal, "S")] == ["a", "b"]
        assert journal.verify("S").ok


async def _first_block(journal: Journal, run_id: str) -> str:
    """The run's first record (its first block is then journalled), then the run stops."""
    records = execute_run(journal, run_id)
    try:
        return (await anext(records)).id
    finally:
        await records.aclose()


def test_an_input_file_replaced_between_runs_is_refused_before_any_block(tmp_path: Path) -> None:
    # More lines than a block holds: the check at the end of reading comes after a block
    # of the new content would have been journalled; the hash checked on resume comes first.
    n = BLOCK_CASES * 2 + 176
    inp = tmp_path / "in.jsonl"
    rows = [panel(f"c{i}", ["1", "1", "1"], swap=["1", "1", "1"]) for i in range(n)]
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(inp), POLICY, run_id="R")
        assert asyncio.run(_first_block(journal, "R")) == "c0"  # interrupted after a block
        decided = [e.payload["id"] for e in journal.events("R") if e.type == "case.record"]
        assert 0 < len(decided) < n
        edited = [panel(f"new{i}", ["2", "2", "2"], swap=["2", "2", "2"]) for i in range(n)]
        inp.write_text("".join(json.dumps(r) + "\n" for r in edited), encoding="utf-8")
        with pytest.raises(InputError, match="changed since the run started"):
            asyncio.run(_drain(journal, "R"))
        after = [e.payload["id"] for e in journal.events("R") if e.type == "case.record"]
        assert after == decided  # not one record of the new content
