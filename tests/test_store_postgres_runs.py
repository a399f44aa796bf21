"""`decide`, `runs verify`, `runs export` and `runs resume` against a PostgreSQL journal
give what they give on SQLite: same records, same events, a chain that verifies, and a
run killed with SIGKILL resumes to the uninterrupted result."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dissensus.cli import main
from dissensus.pipeline.review import final_records
from dissensus.store import Journal, canonical, chain_hash
from fault_runner import install
from pipeline_cases import crash_script, mixed_batch, write_jsonl, write_policy
from store_backends import pg_schema, pg_url


@pytest.fixture
def pg() -> Iterator[str]:
    with pg_schema(pg_url()) as url:
        yield url


def _child(argv: list[str], kill_after: int | None) -> None:
    if kill_after is not None:
        install(kill_after, signal.SIGKILL)
    os._exit(main(argv))


def _forked(argv: list[str], kill_after: int | None = None) -> int | None:
    proc = multiprocessing.get_context("fork").Process(target=_child, args=(argv, kill_after))
    proc.start()
    proc.join(timeout=300)
    return proc.exitcode


def _decide(root: Path, journal: str, run: str) -> list[str]:
    return [
        "decide", str(root / "in.jsonl"), "--policy", str(root / "policy.yaml"), "--journal", journal,
        "--run-id", run, "--json", "-o", str(root / f"{run}.jsonl"),
        "--model", f"scripted:{root / 'script.yaml'}",
    ]  # fmt: skip


def _records(journal: str, run: str) -> list[dict[str, Any]]:
    with Journal(journal) as j:
        return [r.model_dump(mode="json") for r in final_records(j, run)]


def test_decide_verify_export_resume_on_postgresql(tmp_path: Path, pg: str) -> None:
    write_jsonl(tmp_path / "in.jsonl", mixed_batch())
    crash_script(tmp_path / "script.yaml")
    write_policy(tmp_path / "policy.yaml")
    lite = str(tmp_path / "j.sqlite")

    assert _forked(_decide(tmp_path, lite, "whole")) == 3  # the batch holds one bad line
    assert _forked(_decide(tmp_path, pg, "whole")) == 3
    assert _records(pg, "whole") == _records(lite, "whole")
    with Journal(pg) as j:
        assert j.verify("whole").ok and j.verify("whole").finished
        pg_types = [(e.key, e.type) for e in j.events("whole")]
    with Journal(lite) as j:
        assert pg_types == [(e.key, e.type) for e in j.events("whole")]

    export = tmp_path / "export.jsonl"
    assert _forked(["runs", "export", "whole", "--journal", pg, "-o", str(export)]) == 0
    prev = "0" * 64
    for line in export.read_text(encoding="utf-8").splitlines():  # verifiable with sha256 alone
        e = json.loads(line)
        body = {k: e[k] for k in ("seq", "key", "type", "case", "at", "payload")} | {
            "run": e["run_id"]
        }
        assert e["prev_hash"] == prev and chain_hash(prev, body) == e["hash"]
        prev = e["hash"]
    # PostgreSQL gives back every case's payload exactly as SQLite does (JSONB reorders keys
    # and may rewrite numbers: the canonical texts must still agree).
    export_lite = tmp_path / "export-lite.jsonl"
    assert _forked(["runs", "export", "whole", "--journal", lite, "-o", str(export_lite)]) == 0

    def case_payloads(path: Path) -> dict[str, str]:
        events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        return {e["key"]: canonical(e["payload"]) for e in events if e["key"].startswith("case/")}

    from_pg = case_payloads(export)
    assert from_pg and from_pg == case_payloads(export_lite)

    killed = _forked(_decide(tmp_path, pg, "killed"), 9)
    assert killed == -signal.SIGKILL
    with Journal(pg) as j:
        assert j.verify("killed").ok and not j.verify("killed").finished
    resumed = _forked(
        ["runs", "resume", "killed", "--journal", pg, "--json", "-o", str(tmp_path / "r.jsonl")]
    )
    assert resumed == 3
    assert _records(pg, "killed") == [
        {**r, "review_id": r["review_id"].replace("whole.", "killed.") if r["review_id"] else None}
        for r in _records(pg, "whole")
    ]
    with Journal(pg) as j:
        assert j.verify("killed").ok and j.verify("killed").finished
