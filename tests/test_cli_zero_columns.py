"""``COLUMNS=0`` (a shell that cannot tell its terminal's width) is read as unset: tables,
messages and ``--help`` are printed, never a console zero columns wide that prints nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import cli


def _panels(tmp_path: Path) -> Path:
    rows = [
        {
            "id": f"p{i}",
            "outputs": [
                {"agent": "a", "decision": "yes", "reasoning": "the logs show the fault"},
                {"agent": "b", "decision": "yes" if i % 2 else "no", "reasoning": "it holds"},
            ],
        }
        for i in range(3)
    ]
    path = tmp_path / "panels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("columns", ["0", "00"])
def test_zero_columns_still_prints_the_table_and_help(tmp_path: Path, columns: str) -> None:
    panels = _panels(tmp_path)
    routed = cli("route", panels, "--similarity", "tfidf", env={"COLUMNS": columns})
    assert routed.code == 0, routed.err
    assert "p0" in routed.out and "summary" in routed.out

    journal = tmp_path / "j.sqlite"
    decided = cli(
        "decide", panels, "--journal", journal, "--similarity", "tfidf", env={"COLUMNS": columns}
    )
    assert decided.code == 0, decided.err
    assert decided.out.startswith("run "), decided.out  # the run id a resume needs
    listed = cli("runs", "list", "--journal", journal, env={"COLUMNS": columns})
    assert listed.code == 0 and "decide" in listed.out, listed

    helped = cli("route", "--help", env={"COLUMNS": columns})
    assert helped.code == 0 and "Usage" in helped.out, helped
