"""The human review queue: escalate -> list -> show -> resolve -> the case resumes with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import run_cli
from dissensus.errors import DissensusError, InputError
from dissensus.pipeline import decide, policy_from_dict
from dissensus.pipeline.review import final_records, find_item, list_items, resolve
from dissensus.store import Journal
from pipeline_cases import as_panel, panel, write_jsonl, write_policy

POLICY = policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.3}})


def _escalated(journal: Journal, run_id: str) -> str:
    row = panel("vc", ["1", "2", "1"], values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}], reasoning=["Option 1 is right."] * 3)
    record = decide(as_panel(row), POLICY, journal=journal, run_id=run_id)
    assert record.action == "escalate" and record.review_id
    return record.review_id


def test_resolution_round_trip(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite")
    review_id = _escalated(journal, "run1")
    assert [s.item.review_id for s in list_items(journal)] == [review_id]
    status = find_item(journal, review_id)
    assert status.resolution is None and status.item.options == ["1", "2"]

    record = resolve(journal, review_id, decision="2", note="policy says 2", reviewer="kim")
    assert (record.action, record.decision, record.auto, record.basis) == ("human", "2", False, "human")
    assert record.resolution is not None and record.resolution.note == "policy says 2"
    assert record.path[-1] == "human:resolved"

    assert list(list_items(journal)) == []
    assert [s.resolution.decision for s in list_items(journal, include_resolved=True) if s.resolution] == ["2"]
    assert [r.decision for r in final_records(journal, "run1")] == ["2"]
    assert journal.verify("run1").ok
    types = [e.type for e in journal.events("run1")]
    assert types[-2:] == ["review.resolved", "case.resolved"]
    with pytest.raises(DissensusError, match="already resolved"):
        resolve(journal, review_id, decision="1", note="again")
    journal.close()


def test_unknown_or_malformed_review_ids_are_input_errors(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite")
    _escalated(journal, "run1")
    for bad in ("nodot", "run1.x", "nope.1", "run1.99"):
        with pytest.raises(InputError):
            find_item(journal, bad)
    journal.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args)


def test_cli_review_list_show_resolve(tmp_path: Path) -> None:
    """One batch through the CLI: the escalated case never blocks the others; a human resolves it."""
    rows = [
        panel("vc", ["1", "2", "1"], values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}], reasoning=["Option 1 is right."] * 3),
        panel("ok", ["1", "1", "1"], swap=["1", "1", "1"]),
    ]
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    pol = write_policy(tmp_path / "policy.yaml")
    journal = str(tmp_path / "j.sqlite")
    script = (
        "import sys; from dissensus.cli import main\n"
        "for argv in [a.split('\\x1f') for a in sys.argv[1:]]:\n"
        "    print('<<<', main(argv), flush=True)\n"
    )
    # Several commands in one interpreter: the CLI's import cost is paid once.
    steps = [
        ["decide", str(inp), "--policy", str(pol), "--journal", journal, "--run-id", "R", "--json"],
        ["review", "list", "--journal", journal, "--json"],
        ["review", "show", "R.1", "--journal", journal],
        ["review", "resolve", "R.1", "--decision", "2", "--note", "checked the contract", "--journal", journal],
        ["review", "list", "--journal", journal],
        ["runs", "show", "R", "--journal", journal, "--json"],
        ["runs", "verify", "R", "--journal", journal],
    ]
    proc = subprocess.run(
        [sys.executable, "-c", script, *["\x1f".join(s) for s in steps]], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    chunks = proc.stdout.split("<<< ")
    codes = [int(c.split("\n", 1)[0]) for c in chunks[1:]]
    assert codes == [0] * len(steps)
    outputs = [chunks[0]] + [c.split("\n", 1)[1] if "\n" in c else "" for c in chunks[1:]]
    decided = [json.loads(line) for line in outputs[0].splitlines()]
    assert [(d["id"], d["action"], d["auto"]) for d in decided] == [("vc", "escalate", False), ("ok", "auto_explain", True)]
    assert all({"id", "action", "decision", "auto", "reason"} <= set(d) for d in decided)
    listed = [json.loads(line) for line in outputs[1].splitlines()]
    assert [(x["review_id"], x["status"]) for x in listed] == [("R.1", "open")]
    shown = outputs[2]
    assert "why escalated" in shown and "a1" in shown and "a2" in shown
    assert "resolved R.1" in outputs[3]
    assert "no review items open" in outputs[4]
    run = json.loads(outputs[5])
    assert [r["decision"] for r in run["records"]] == ["2", "1"] and run["finished"]
    assert "OK" in outputs[6]


def test_review_show_says_when_the_packet_came_from_a_failed_deliberation(tmp_path: Path) -> None:
    (tmp_path / "none.yaml").write_text("rules: []\n", encoding="utf-8")  # every model call fails
    policy = policy_from_dict(
        {
            "reading": {"similarity": "tfidf", "theta_s": 0.3},
            "routing": {"convergent_disagreement_without_values": "seek_context"},
            "seek_context": {"followup": "dci", "model": f"scripted:{tmp_path / 'none.yaml'}"},
        }
    )
    journal = Journal(tmp_path / "j.sqlite")
    record = decide(as_panel(panel("d", ["1", "2", "2"])), policy, journal=journal, run_id="R")
    journal.close()
    assert record.review_id == "R.1"
    proc = _cli("review", "show", "R.1", "--journal", str(tmp_path / "j.sqlite"))
    assert proc.returncode == 0, proc.stderr
    flat = " ".join(proc.stdout.split())
    assert "DCI packet: path fallback:" in flat
    assert "packet status: model_failure" in flat


def test_cli_resolve_flags_a_decision_outside_the_options(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.sqlite")
    review_id = _escalated(journal, "R")
    journal.close()
    proc = _cli("review", "resolve", review_id, "--decision", "7", "--note", "typo?", "--journal", str(tmp_path / "j.sqlite"))
    assert proc.returncode == 0, proc.stderr
    assert "'7' is none of the case's options (1, 2)" in " ".join(proc.stderr.split())
    with Journal(tmp_path / "j.sqlite") as j:
        event = j.get("R", "review/1/resolved")
        assert event is not None and event.payload["outside_options"] is True
