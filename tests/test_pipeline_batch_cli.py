"""``dissensus decide`` as a batch command: rejects, JSONL records, runs list / export."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from cli_helpers import run_steps
from pipeline_cases import panel, write_jsonl, write_policy


def _verify_export(lines: list[str]) -> bool:
    """An independent check of an export: only hashlib and json, nothing from dissensus."""
    prev = "0" * 64
    for seq, line in enumerate(lines):
        e = json.loads(line)
        body = {k: e[k] for k in ("seq", "key", "type", "at", "payload")}
        body.update(run=e["run_id"], case=e["case"])
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        if (
            e["seq"] != seq
            or e["prev_hash"] != prev
            or hashlib.sha256((prev + text).encode()).hexdigest() != e["hash"]
        ):
            return False
        prev = e["hash"]
    return True


def test_decide_rejects_bad_lines_processes_the_rest_and_exports_a_verifiable_run(
    tmp_path: Path,
) -> None:
    rows = [
        panel("a", ["1", "1", "1"], swap=["1", "1", "1"]),
        '{"id": "b", "outputs": [{"agent": "x", "decision": "1", "reasoning": "r", "confidence": 2}, {"agent": "y", "decision": "1", "reasoning": "r"}]}',
        panel("c", ["1", "2", "2"], swap=["1", "2", "1"]),
    ]
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    pol = write_policy(tmp_path / "p.yaml")
    j = str(tmp_path / "j.sqlite")
    steps = [
        [
            "decide",
            str(inp),
            "--policy",
            str(pol),
            "--journal",
            j,
            "--run-id",
            "B",
            "--json",
            "--rejects",
            str(tmp_path / "rej.jsonl"),
        ],
        ["runs", "list", "--journal", j, "--json"],
        ["runs", "export", "B", "--journal", j, "-o", str(tmp_path / "export.jsonl")],
        [
            "decide",
            str(inp),
            "--policy",
            str(pol),
            "--journal",
            j,
            "--run-id",
            "H",
            "-o",
            str(tmp_path / "h.jsonl"),
        ],
    ]
    proc = run_steps(steps)
    chunks = proc.stdout.split("<<< ")
    assert [int(c.split("\n", 1)[0]) for c in chunks[1:]] == [3, 0, 0, 3], proc.stderr
    records = [json.loads(x) for x in chunks[0].splitlines()]
    assert [r["id"] for r in records] == ["a", "c"]
    assert records[0]["auto"] is True and records[0]["decision"] == "1"
    assert records[1]["auto"] is False and records[1]["decision"] is None
    assert all(isinstance(r["reason"], str) and r["reason"] for r in records)
    rejects = [json.loads(x) for x in (tmp_path / "rej.jsonl").read_text().splitlines()]
    assert [(r["line"], r["field"]) for r in rejects] == [(2, "outputs.0.confidence")]
    assert "in.jsonl:2" in proc.stderr
    runs = [json.loads(x) for x in chunks[1].split("\n", 1)[1].splitlines()]
    assert [(r["run_id"], r["finished"]) for r in runs] == [("B", True)]
    exported = (tmp_path / "export.jsonl").read_text().splitlines()
    assert _verify_export(exported)
    edited = json.loads(exported[1])
    edited["payload"]["forged"] = True
    assert not _verify_export([exported[0], json.dumps(edited), *exported[2:]])
    human = chunks[3].split("\n", 1)[1]
    assert "2 case(s): 1 decided automatically" in human and "waiting for review" in human
    # --output holds the records even without --json; the summary still goes to stdout.
    written = [json.loads(x) for x in (tmp_path / "h.jsonl").read_text().splitlines()]
    assert [(r["id"], r["auto"]) for r in written] == [("a", True), ("c", False)]
