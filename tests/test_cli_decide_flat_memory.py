"""``decide`` and ``runs resume`` hold the same memory whatever the run's size.

They used to keep every record of the run (for the summary, and a second time for a
deadline's summary), every panel id, and, as a run started or resumed, every journalled
record (to find the resolved ones); a finished run's replay sorted all its records in
memory: about 2.8 KB per panel, so 100,000 panels peaked near 400 MB and the resume of
a run stopped at 39% near 1 GB. Now the summary is counters, records go out as they
come, and only a 16-byte digest of each panel id stays (for the duplicate warnings).

Measured with :mod:`tracemalloc` (the peak of Python's allocations during the command)
for N and 4N panels under the fast offline policy (TF-IDF): the growth from N to 4N,
per extra panel, is a small fraction of one record.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from dissensus.cli.decide import run_and_report
from dissensus.pipeline import batch, start_run
from dissensus.pipeline.batch import check_resumable
from dissensus.store import Journal, log
from pipeline_cases import panel, write_jsonl

N = 120
PER_PANEL_LIMIT = 1000
"""Bytes of peak growth allowed per extra panel: what stays per case is a panel id's
digest in a set (about 90 bytes); one record is about 2,800, and the old command grew by
2,400 to 4,400 per panel here."""


def _rows(n: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        decisions: list[str | None] = ["1", "1", "2", "1", "2"] if i % 3 else ["1"] * 5
        reasoning = [
            f"Case {i}: agent {k} reads option {d} as stating the refund window, clause {i % 17}."
            for k, d in enumerate(decisions)
        ]
        rows.append(panel(f"p{i}", decisions, reasoning=reasoning))
    return rows


def _peak(tmp_path: Path, n: int, mode: str) -> int:
    """Peak traced bytes of ``run_and_report`` deciding ``n`` panels (``human``,
    ``json``), or replaying the finished run (``replay``), after verifying its journal
    as ``runs resume`` does (``resume``)."""
    where = tmp_path / f"{mode}-{n}"
    where.mkdir()
    inp = write_jsonl(where / "in.jsonl", list(_rows(n)))
    with Journal(where / "j.sqlite") as journal:
        start_run(journal, str(inp), None, similarity="tfidf", run_id="R", lock=True)
        if mode in ("replay", "resume"):
            first = str(where / "first.jsonl")
            assert (
                run_and_report(journal, "R", json_out=True, output=first, rejects=None, total=None)
                == 0
            )
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            if mode == "resume":
                check_resumable(journal, "R")  # the whole chain is read and checked
            code = run_and_report(
                journal,
                "R",
                json_out=mode == "json",
                output=str(where / "out.jsonl"),
                rejects=None,
                total=None,
            )
            peak = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
    assert code == 0
    lines = (where / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == n
    return peak


@pytest.mark.parametrize("mode", ["human", "json", "replay", "resume"])
def test_peak_memory_does_not_grow_with_the_run(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    # The run loop holds one block of cases (up to BLOCK_CASES) before it commits them,
    # a finished run's replay reads REPLAY_PART records at a time and a verification
    # PAGE events: bounded, but as large as these runs at their defaults.
    monkeypatch.setattr(batch, "BLOCK_CASES", 16)
    monkeypatch.setattr(batch, "REPLAY_PART", 16, raising=False)
    monkeypatch.setattr(log, "PAGE", 64, raising=False)
    # A first small run loads every module and fills the caches that last (not counted).
    _peak(tmp_path, 8, mode)
    small = _peak(tmp_path, N, mode)
    large = _peak(tmp_path, 4 * N, mode)
    capsys.readouterr()
    per_panel = (large - small) / (3 * N)
    assert per_panel < PER_PANEL_LIMIT, (small, large, per_panel)
