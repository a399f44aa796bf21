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


def test_runs_show_names_both_digests_of_an_acceptance_file(tmp_path: Path) -> None:
    """``runs show`` printed the acceptance file's sha256 of its bytes while its records
    quote ``file_sha256``, the hash the file states of its content: two digests of one
    file, with nothing saying so."""
    examples = Path(__file__).resolve().parents[1] / "examples"
    panels = tmp_path / "in.jsonl"
    lines = (examples / "llmbar-swap.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    panels.write_text("\n".join(lines) + "\n", encoding="utf-8")
    journal = tmp_path / "j.sqlite"
    policy = examples / "llmbar-policy.yaml"
    res = cli("decide", panels, "--journal", journal, "--policy", policy, "--run-id", "r1")
    assert res.code == 0, res.err
    quoted = json.loads(cli("runs", "show", "r1", "--journal", journal, "--json").out)
    (record,) = [r for r in quoted["records"] if r["acceptance"]][:1]
    content = record["acceptance"]["file_sha256"]
    res = cli("runs", "show", "r1", "--journal", journal)
    assert res.code == 0, res.err
    (line,) = [x for x in res.out.splitlines() if "acceptance.model:" in x]
    assert f"(content sha256 {content}, the file_sha256 its records quote)" in line, line
