"""A run decides only the input its journalled sha256 covers.

``run.started`` journals the input file's sha256, and the file is read again as the run
decides it. Lines appended after the run started (after its resume checked the hash)
used to be decided, and the finished run held records its journalled hash did not
cover; now the bytes are hashed as they are read and a file that read otherwise stops
the run at the end of its input, before ``run.finished``, as an input that changed. A
file whose content changes from one read to the next (``/proc/self/status``) used to
start a run that could never be decided nor resumed; now it is refused before the run
is created.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import dissensus.pipeline.batch as batch
from cli_helpers import cli
from dissensus.errors import InputError
from dissensus.pipeline import execute_run, policy_from_dict, start_run
from dissensus.store import Journal
from pipeline_cases import panel

POLICY = policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.3}})
ROWS = [
    panel("a", ["1", "1", "1"], swap=["1", "1", "1"]),
    panel("b", ["1", "2", "2"], swap=["1", "2", "1"]),
]


async def _drain(journal: Journal, run_id: str) -> list[str]:
    return [r.id async for r in execute_run(journal, run_id)]


def test_lines_appended_once_the_run_read_its_hash_stop_it_unfinished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    original = batch.input_lines

    def then_appended(source: Any) -> tuple[str, list[str] | None]:
        found = original(source)  # the hash is checked: the file is as the run started
        with open(inp, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(panel("late", ["1", "1", "1"])) + "\n")
        return found

    monkeypatch.setattr(batch, "input_lines", then_appended)
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(inp), POLICY, run_id="R")
        with pytest.raises(InputError, match="changed since the run started"):
            asyncio.run(_drain(journal, "R"))
        assert journal.get("R", "run/finished") is None
        assert journal.verify("R").ok


def test_an_unchanged_file_finishes_its_run(tmp_path: Path) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(inp), POLICY, run_id="R")
        assert asyncio.run(_drain(journal, "R")) == ["a", "b"]
        assert journal.get("R", "run/finished") is not None


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_a_file_that_changes_as_it_is_read_starts_no_run(tmp_path: Path) -> None:
    j = tmp_path / "q.sqlite"
    for _ in range(3):
        res = cli("decide", "/proc/self/status", "--journal", j)
        assert res.code == 2, res.err
        assert res.err.startswith("error: /proc/self/status: reading it gave "), res.err
        assert "copy it to a file first" in res.err
    with Journal(j) as journal:
        assert journal.runs() == []
