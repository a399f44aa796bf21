"""Follow-ups that failed mid-run are counted, not silent.

A model server that goes away in the middle of a run fails the follow-ups of the cases
after it (``re-ask failed: ...``): they are decided without them, and the run still
ends with exit 0 unless every follow-up failed. The run's counts say how many failed:
``run.finished`` journals ``followups`` and ``followups_failed``, and
:func:`~dissensus.pipeline.engine.followup_tally` gives the summary's one line
(``N of M model follow-up(s) failed (first: <cause>); their cases went to review``).
Here a scripted model answers the questions of some cases and has no rule for the others
(a non-retryable ``no_rule`` failure), as a server that stops answering would.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from dissensus.pipeline import RunSpec, execute_run, start_run
from dissensus.pipeline.batch import FINISHED_KEY
from dissensus.pipeline.engine import FollowupTally, followup_tally
from dissensus.store import Journal
from pipeline_cases import panel, write_jsonl, write_policy


def _case(pid: str, question: str, decisions: list[str | None]) -> dict[str, Any]:
    return panel(pid, decisions, meta={"question": question})


def _script(path: Path) -> Path:
    rules = [
        {
            "match": {"contains": "answered"},
            "json": {"decision": "1", "reasoning": "Option 1 states the window."},
        }
    ]
    path.write_text(yaml.safe_dump({"rules": rules}), encoding="utf-8")  # no default
    return path


def test_failed_follow_ups_are_counted_in_the_run_and_its_warning(tmp_path: Path) -> None:
    rows = [
        _case("ok-1", "Which reply is answered well?", ["2", "1", "2"]),
        _case("gone-1", "Which reply is better?", ["2", "1", "2"]),
        _case("recorded", "Which reply?", ["1", "1", "1"]),
        _case("ok-2", "Which reply is answered best?", ["1", "2", "1"]),
        _case("gone-2", "Which reply now?", ["1", "2", "2"]),
    ]
    rows[2] = panel("recorded", ["1", "2", "1"], swap=["1", "2", "1"])
    inp = write_jsonl(tmp_path / "in.jsonl", list(rows))
    pol = write_policy(tmp_path / "p.yaml")
    spec = RunSpec.from_policy(pol, model=f"scripted:{_script(tmp_path / 's.yaml')}")
    with Journal(tmp_path / "j.sqlite") as journal:
        run_id = start_run(journal, str(inp), spec).run_id

        async def drain() -> list[Any]:
            return [r async for r in execute_run(journal, run_id)]

        records = asyncio.run(drain())
        finished = journal.get(run_id, FINISHED_KEY)
    assert finished is not None
    failed = [r for r in records if "re-ask failed" in r.reason]
    assert [r.id for r in failed] == ["gone-1", "gone-2"]
    assert finished.payload["followups"] == 4
    assert finished.payload["followups_failed"] == 2
    tally = followup_tally(records)
    assert (tally.attempted, tally.failed, tally.to_review) == (4, 2, 2)
    assert tally.every_one_failed() is None
    cause = tally.first
    assert cause is not None and cause == failed[0].reason.split("re-ask failed: ")[1]
    assert "no rule matches" in cause
    assert tally.warning() == (
        f"2 of 4 model follow-up(s) failed (first: {cause}); their cases went to review"
    )


def test_a_run_without_failures_says_nothing_and_journals_no_new_counts(tmp_path: Path) -> None:
    assert FollowupTally().warning() is None
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("r", ["1", "2", "1"], swap=["1", "2", "1"])])
    spec = RunSpec.from_policy(write_policy(tmp_path / "p.yaml"))
    with Journal(tmp_path / "j.sqlite") as journal:
        run_id = start_run(journal, str(inp), spec).run_id

        async def drain() -> list[Any]:
            return [r async for r in execute_run(journal, run_id)]

        records = asyncio.run(drain())
        finished = journal.get(run_id, FINISHED_KEY)
    assert finished is not None
    assert "followups" not in finished.payload and "followups_failed" not in finished.payload
    assert followup_tally(records).warning() is None


def test_every_follow_up_failing_for_one_cause_is_told_apart() -> None:
    tally = FollowupTally(attempted=2, failed=2, to_review=1, causes=("connection error",))
    assert tally.every_one_failed() == "connection error"
    assert tally.warning() == (
        "2 of 2 model follow-up(s) failed (first: connection error); "
        "1 of their cases went to review"
    )


def test_decide_says_so_in_one_warning_line_and_its_summary(tmp_path: Path, capsys: Any) -> None:
    """Exit 0 (not every follow-up failed), but a ``warning:`` line on stderr and the count
    in the summary: a model server going away mid-run was silent."""
    from dissensus.cli import main

    rows = [
        _case("ok-1", "Which reply is answered well?", ["2", "1", "2"]),
        _case("gone-1", "Which reply is better?", ["2", "1", "2"]),
    ]
    inp = write_jsonl(tmp_path / "in.jsonl", list(rows))
    pol = write_policy(tmp_path / "p.yaml")
    model = f"scripted:{_script(tmp_path / 's.yaml')}"
    args = ["decide", str(inp), "--policy", str(pol), "--journal", str(tmp_path / "j.sqlite")]
    assert main([*args, "--model", model]) == 0
    got = capsys.readouterr()
    warnings = [line for line in got.err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, got.err
    assert warnings[0].startswith("warning: 1 of 2 model follow-up(s) failed (first: ")
    assert warnings[0].endswith("their cases went to review"), warnings
    assert ", 1 model follow-up(s) failed" in got.out, got.out
