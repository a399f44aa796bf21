"""A run abandoned while its journal cannot be written ends with one error, not two.

The disk filling mid-run is the case: the command's ``--output`` file fails to take a
record (``ENOSPC``), so the command stops reading the run loop, and the run loop, as it
is closed, cannot release the run's lock either (the journal is on the same full disk).
The lock release on the way out must not raise over what stopped the run: before, the
event loop printed "an error occurred during closing of asynchronous generator" and a
traceback under the command's one error line. The run then resumes to the records of a
run never stopped.
"""

from __future__ import annotations

import asyncio
import errno
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dissensus.pipeline import Policy, execute_run, start_run
from dissensus.pipeline.batch import BLOCK_CASES
from dissensus.pipeline.review import final_records
from dissensus.store import Journal
from dissensus.store.errors import JournalError
from gc_helpers import heap_frozen
from pipeline_cases import panel, write_jsonl


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    """The collection after each case walks only what this module makes (gc_helpers)."""
    yield from heap_frozen()


def _panels(tmp_path: Path) -> Path:
    rows: list[dict[str, Any] | str] = [
        panel(f"p{i}", ["1", "1", "2"] if i % 3 else ["2", "2", "2"])
        for i in range(BLOCK_CASES + 40)
    ]
    return write_jsonl(tmp_path / "in.jsonl", rows)


def test_a_run_abandoned_on_a_full_disk_closes_quietly_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inp = _panels(tmp_path)
    reports: list[dict[str, Any]] = []
    with Journal(tmp_path / "j.sqlite") as journal, Journal(tmp_path / "b.sqlite") as base:
        start_run(journal, str(inp), Policy(), run_id="r", similarity="tfidf", lock=True)

        def disk_full(*_args: object, **_kwargs: object) -> None:
            raise JournalError(f"journal {journal.path}: database or disk is full")

        async def main() -> None:
            loop = asyncio.get_running_loop()
            loop.set_exception_handler(lambda _loop, context: reports.append(context))
            async for _record in execute_run(journal, "r"):
                # The first block is committed; the disk is full from here on.
                monkeypatch.setattr(journal, "release_run_lock", disk_full)
                raise OSError(errno.ENOSPC, "No space left on device")

        with pytest.raises(OSError, match="No space left"):
            asyncio.run(main())
        gc.collect()
        assert reports == [], [(r.get("message"), r.get("exception")) for r in reports]
        monkeypatch.undo()
        assert journal.verify("r").ok
        # The disk has room again: the run resumes to an uninterrupted run's records.

        async def drain(j: Journal) -> int:
            return sum([1 async for _ in execute_run(j, "r")])

        assert asyncio.run(drain(journal)) == BLOCK_CASES + 40
        start_run(base, str(inp), Policy(), run_id="r", similarity="tfidf")
        assert asyncio.run(drain(base)) == BLOCK_CASES + 40
        assert final_records(journal, "r") == final_records(base, "r")
        assert journal.verify("r").ok
