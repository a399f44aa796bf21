"""Resume refuses a run whose journal does not verify, and a policy's relative
``record:`` file may not leave the policy's directory."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from dissensus.cli import main
from dissensus.errors import ConfigError
from dissensus.pipeline.policy import relative_model_spec
from pipeline_cases import mixed_batch, write_jsonl, write_policy


def test_resume_refuses_a_run_whose_chain_does_not_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_jsonl(tmp_path / "in.jsonl", [r for r in mixed_batch() if isinstance(r, dict)][:3])
    write_policy(tmp_path / "policy.yaml")
    journal = str(tmp_path / "j.sqlite")
    argv = ["decide", str(tmp_path / "in.jsonl"), "--policy", str(tmp_path / "policy.yaml")]
    assert main([*argv, "--journal", journal, "--run-id", "r", "--json"]) in (0, 3)
    db = sqlite3.connect(journal)
    payload = db.execute("SELECT payload FROM events WHERE run_id = 'r' AND seq = 1").fetchone()[0]
    edited = json.loads(payload)
    edited["tampered"] = True
    db.execute(
        "UPDATE events SET payload = ? WHERE run_id = 'r' AND seq = 1",
        (json.dumps(edited, sort_keys=True, separators=(",", ":")),),
    )
    db.commit()
    db.close()
    capsys.readouterr()
    assert main(["runs", "resume", "r", "--journal", journal]) == 2
    err = capsys.readouterr().err
    assert "does not verify" in err and len(err.strip().splitlines()) == 1


def test_a_relative_record_file_stays_beside_the_policy(tmp_path: Path) -> None:
    inside = relative_model_spec("record:calls.jsonl:scripted:s.yaml", tmp_path)
    assert inside == f"record:{tmp_path / 'calls.jsonl'}:scripted:{tmp_path / 's.yaml'}"
    with pytest.raises(ConfigError, match="leaves the policy's directory"):
        relative_model_spec("record:../../etc/x.jsonl:scripted:s.yaml", tmp_path)
    absolute = relative_model_spec("record:/tmp/calls.jsonl:scripted:s.yaml", tmp_path)
    assert absolute.startswith("record:/tmp/calls.jsonl:")
