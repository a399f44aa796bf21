"""``runs show`` prints a budget without a token limit as words, never Python's ``None``
(before: ``budget 200 calls / None tokens``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import cli
from pipeline_cases import panel, write_policy


@pytest.mark.parametrize(
    ("budget", "shown"),
    [
        ({}, "budget 200 calls / no token limit"),
        ({"max_tokens": 5000}, "budget 200 calls / 5000 tokens"),
        ({"max_calls": None, "max_tokens": None}, "budget no call limit / no token limit"),
    ],
)
def test_runs_show_names_a_missing_limit_in_words(
    tmp_path: Path, budget: dict[str, int | None], shown: str
) -> None:
    policy = write_policy(tmp_path / "policy.yaml", {"budget": budget} if budget else None)
    panels = tmp_path / "in.jsonl"
    panels.write_text(json.dumps(panel("p1", ["x", "y", "x"])) + "\n", encoding="utf-8")
    journal = tmp_path / "j.sqlite"
    res = cli("decide", panels, "--journal", journal, "--policy", policy, "--run-id", "r1")
    assert res.code == 0, res.err
    res = cli("runs", "show", "r1", "--journal", journal)
    assert res.code == 0, res.err
    assert shown in res.out, res.out
    assert "None" not in res.out
