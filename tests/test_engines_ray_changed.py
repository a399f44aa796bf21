"""A Ray run's input file edited after the driver planned its blocks: the block whose
bytes changed stops the run with a local run's error (exit 2 on the command line), no
``run.finished``, no record of the edited line; put back, the run resumes to the
records of a local run. Also when the edited block was complete in the journal and is
replayed from it (a resume).

Starts a local Ray instance: run with ``DISSENSUS_TEST_RAY=1`` (``make test-ray``)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from dissensus.engines.ray import executor, flight
from dissensus.errors import InputError
from dissensus.pipeline import execute_run
from dissensus.pipeline.batch import FINISHED_KEY
from dissensus.store import Event, Journal
from test_engines_ray import (
    POLICY,
    REPO,
    _case_events,
    _collect,
    _ray_run,
    _start,
    panels,
    pytestmark,
    ray_instance,
)

__all__ = ["panels", "pytestmark", "ray_instance"]  # the fixtures and the gate

_EDITED_LINE = 30
"""A line of the second block (25 lines a block): ``runs resume`` finds the first
complete in the journal."""


def _edited(data: bytes, line: int) -> tuple[bytes, str]:
    """``data`` with the id of line ``line`` changed in place (the size kept), and that id."""
    lines = data.splitlines(keepends=True)
    panel = json.loads(lines[line - 1])
    new_id = "Z" + panel["id"][1:]
    lines[line - 1] = lines[line - 1].replace(
        f'"id":"{panel["id"]}"'.encode(), f'"id":"{new_id}"'.encode(), 1
    )
    edited = b"".join(lines)
    assert len(edited) == len(data) and edited != data
    return edited, new_id


def _edit_after_planning(monkeypatch: pytest.MonkeyPatch, path: Path, line: int) -> str:
    """Edit line ``line`` of ``path`` once the driver planned its blocks; the new id."""
    edited, new_id = _edited(path.read_bytes(), line)
    plan = executor._plan

    def plan_then_edit(ctx: Any, lines_per_block: int) -> Any:
        blocks = plan(ctx, lines_per_block)
        path.write_bytes(edited)
        return blocks

    monkeypatch.setattr(executor, "_plan", plan_then_edit)
    return new_id


@pytest.fixture
def copied(panels: Path, tmp_path: Path) -> Path:
    path = tmp_path / "in" / "panels.jsonl"
    path.parent.mkdir()
    shutil.copy(panels, path)
    return path


def _local(path: Path) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    journal = Journal(":memory:")
    _start(journal, path, "R")
    rejects: list[str] = []
    records = asyncio.run(
        _collect(execute_run(journal, "R", on_reject=lambda r: rejects.append(r.describe())))
    )
    return records, rejects, _case_events(journal)


def _spy_sends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The indexes of the blocks the driver sends, as it sends them."""
    sent: list[int] = []
    send = flight._send

    def spy(actor: Any, text: str) -> Any:
        sent.append(json.loads(text)["block"]["index"])
        return send(actor, text)

    monkeypatch.setattr(flight, "_send", spy)
    return sent


def _records_ids(journal: Journal) -> set[str]:
    return {str(e.payload.get("id")) for e in journal.events("R", type="case.record")}


def test_a_block_edited_after_planning_stops_the_run_and_resumes_once_put_back(
    ray_instance: Any, copied: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records, rejects, events = _local(copied)
    original = copied.read_bytes()
    journal = Journal(tmp_path / "j.sqlite")
    _start(journal, copied, "R")
    new_id = _edit_after_planning(monkeypatch, copied, _EDITED_LINE)
    sent = _spy_sends(monkeypatch)
    with pytest.raises(InputError) as caught:
        _ray_run(journal, copied)
    assert str(caught.value) == f"the run's input file changed since the run started: {copied}"
    assert sent.count(1) == 1  # a worker's error is not a death: the block is not sent again
    assert journal.get("R", FINISHED_KEY) is None
    assert new_id not in _records_ids(journal)
    assert journal.verify("R").ok

    monkeypatch.undo()
    copied.write_bytes(original)
    got, got_rejects = _ray_run(journal, copied)
    assert got == records and got_rejects == rejects
    assert journal.get("R", FINISHED_KEY) is not None
    assert _case_events(journal) == events
    assert journal.verify("R").ok


def test_a_file_edited_before_planning_is_refused_before_any_block_is_sent(
    ray_instance: Any, copied: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = Journal(tmp_path / "j.sqlite")
    _start(journal, copied, "R")
    edited, _ = _edited(copied.read_bytes(), _EDITED_LINE)
    plan = executor.plan_blocks

    def edit_then_plan(path: str, lines_per_block: int, sha256: str | None = None) -> Any:
        copied.write_bytes(edited)  # after the run loop checked the file, as it plans
        return plan(path, lines_per_block, sha256)

    monkeypatch.setattr(executor, "plan_blocks", edit_then_plan)
    sent = _spy_sends(monkeypatch)
    with pytest.raises(InputError, match="input file changed since the run started"):
        _ray_run(journal, copied)
    assert sent == [] and journal.get("R", FINISHED_KEY) is None


class _DriverKilled(Exception):
    pass


def test_a_complete_block_edited_after_planning_stops_the_resumed_run(
    ray_instance: Any, copied: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records, rejects, events = _local(copied)
    original = copied.read_bytes()
    path = tmp_path / "j.sqlite"
    count = [0]

    def die_late(event: Event) -> None:
        count[0] += 1
        if count[0] == 600:  # once the first two blocks are journalled
            raise _DriverKilled

    journal = Journal(path, after_append=die_late)
    _start(journal, copied, "R")
    with pytest.raises(_DriverKilled):
        _ray_run(journal, copied)
    journal.close()
    journal = Journal(path)
    assert journal.get("R", "case/50/record") is not None  # block 1 (26-50) is complete

    new_id = _edit_after_planning(monkeypatch, copied, _EDITED_LINE)
    with pytest.raises(InputError, match="input file changed since the run started"):
        _ray_run(journal, copied)
    assert journal.get("R", FINISHED_KEY) is None
    assert new_id not in _records_ids(journal)

    monkeypatch.undo()
    copied.write_bytes(original)
    got, got_rejects = _ray_run(journal, copied)
    assert got == records and got_rejects == rejects
    assert _case_events(journal) == events
    assert journal.verify("R").ok


def test_the_command_line_stops_an_edited_ray_run_with_the_local_error_and_exit_2(
    ray_instance: Any,
    copied: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dissensus.cli import main

    pol = tmp_path / "policy.yaml"
    pol.write_text(
        POLICY.read_text(encoding="utf-8").replace("model: llmbar-accept.json", "model: null"),
        encoding="utf-8",
    )
    shutil.copy(REPO / "examples" / "llmbar-reliability.json", tmp_path / "llmbar-reliability.json")
    decide = ["decide", str(copied), "--policy", str(pol), "--similarity", "tfidf"]
    outs = {}
    for engine in ("local", "ray"):
        out = tmp_path / f"{engine}.jsonl"
        common = ["--json", "--output", str(out), "--journal", str(tmp_path / f"{engine}.sqlite")]
        if engine == "local":
            assert main([*decide, *common, "--run-id", "C"]) == 3  # the bad lines: rejects
        else:
            original = copied.read_bytes()
            _edit_after_planning(monkeypatch, copied, 2)
            ray = [*common, "--engine", "ray", "--workers", "2"]
            capsys.readouterr()
            assert main([*decide, *ray, "--run-id", "C"]) == 2
            err = capsys.readouterr().err
            error = f"error: the run's input file changed since the run started: {copied}"
            assert err.splitlines()[0] == error, err
            assert "Traceback" not in err and "RayTaskError" not in err
            monkeypatch.undo()
            copied.write_bytes(original)
            assert main(["runs", "resume", "C", *ray]) == 3
        outs[engine] = out.read_text(encoding="utf-8")
    assert outs["ray"] == outs["local"]
    assert main(["runs", "verify", "C", "--journal", str(tmp_path / "ray.sqlite")]) == 0


def test_an_input_removed_after_planning_stops_the_run_in_one_line_and_resumes_once_back(
    ray_instance: Any, copied: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that cannot open the file (removed after the driver planned its blocks)
    stops the run with one line naming the file (an InputError, as a local run's), not
    Ray's traceback of the worker's FileNotFoundError; put back, the run resumes."""
    original = copied.read_bytes()
    plan = executor._plan

    def plan_then_remove(ctx: Any, lines_per_block: int) -> Any:
        blocks = plan(ctx, lines_per_block)
        copied.unlink()
        return blocks

    monkeypatch.setattr(executor, "_plan", plan_then_remove)
    journal = Journal(tmp_path / "j.sqlite")
    _start(journal, copied, "R")
    with pytest.raises(InputError) as caught:
        _ray_run(journal, copied, "R")
    said = str(caught.value)
    assert said == f"the run's input file cannot be read: {copied} (No such file or directory)"
    assert journal.get("R", FINISHED_KEY) is None and journal.verify("R").ok
    monkeypatch.undo()
    copied.write_bytes(original)
    _ray_run(journal, copied, "R")
    assert journal.get("R", FINISHED_KEY) is not None and journal.verify("R").ok
    journal.close()


def test_a_worker_s_other_error_is_one_line_naming_its_type() -> None:
    """An error of the worker not of dissensus's own reaches the command line as one line
    (its type and first line), without Ray's traceback, pid or colour codes."""
    failed = flight.WorkerFailed(ValueError("bad value\n  File 'x.py', line 3"))
    assert str(failed) == "a Ray worker failed: ValueError: bad value"
    assert str(flight.WorkerFailed(None)) == "a Ray worker failed: unknown error"
