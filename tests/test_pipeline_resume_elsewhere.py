"""A run resumed from another directory reads the model files its ``--model`` named.

``--model scripted:FILE`` (or ``$DISSENSUS_MODEL``) names FILE relative to the working
directory of ``decide``; the run journals the spec with the path made absolute, so a
``runs resume`` from elsewhere asks the same model and ends with the records of an
uninterrupted run (it read FILE relative to its own directory, failed every follow-up
and sent the cases to review with ``re-ask failed``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import cli
from pipeline_cases import crash_script, panel, write_jsonl, write_policy

ROWS = [panel(f"p{i}", ["2", "1", "2"]) for i in range(300)]


def _records(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines()]


@pytest.mark.parametrize("via", ["--model", "DISSENSUS_MODEL"])
def test_a_run_resumed_elsewhere_asks_the_model_its_decide_named(tmp_path: Path, via: str) -> None:
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    crash_script(here / "script.yaml")
    write_jsonl(here / "in.jsonl", ROWS)
    write_policy(here / "policy.yaml", {"budget": {"max_calls": 100000}})
    journal = tmp_path / "j.sqlite"

    def decide(run_id: str, *extra: str) -> list[dict[str, object]]:
        model = ["--model", "scripted:script.yaml"] if via == "--model" else []
        env = {"DISSENSUS_MODEL": "scripted:script.yaml"} if via != "--model" else {}
        res = cli("decide", "in.jsonl", "--policy", "policy.yaml", "--journal", journal,
                  "--run-id", run_id, "--json", *model, *extra, cwd=here, env=env)  # fmt: skip
        assert res.code in (0, 1), res.err
        return _records(res.out)

    whole = decide("W")
    assert not any("re-ask failed" in str(r["reason"]) for r in whole)
    partial = decide("R", "--deadline", "0.05")
    assert len(partial) < len(ROWS)
    res = cli("runs", "resume", "R", "--journal", journal, "--json", cwd=elsewhere,
              env={"DISSENSUS_MODEL": None})  # fmt: skip
    assert res.code == 0, res.err
    resumed = _records(res.out)
    assert not any("re-ask failed" in str(r["reason"]) for r in resumed)
    strip = [{k: v for k, v in r.items() if k != "review_id"} for r in whole]
    assert [{k: v for k, v in r.items() if k != "review_id"} for r in resumed] == strip


def test_a_run_whose_model_file_is_gone_is_not_resumed_into_failed_followups(
    tmp_path: Path,
) -> None:
    """``runs resume`` of an unfinished run whose ``scripted:`` file is gone exits 2 naming
    the spec, before anything runs (it finished the run with every follow-up failed and
    its cases in review, for good); with the file back it ends as an uninterrupted run."""
    script = crash_script(tmp_path / "script.yaml")
    inp = write_jsonl(tmp_path / "in.jsonl", ROWS)
    policy = write_policy(tmp_path / "policy.yaml", {"budget": {"max_calls": 100000}})
    journal = tmp_path / "j.sqlite"
    args = ("--policy", policy, "--journal", journal, "--json", "--model", f"scripted:{script}")
    res = cli("decide", inp, "--run-id", "W", *args)
    assert res.code == 0, res.err
    whole = _records(res.out)
    res = cli("decide", inp, "--run-id", "R", *args, "--deadline", "0.05")
    assert res.code == 1, res.err
    kept = script.read_bytes()
    script.unlink()
    res = cli("runs", "resume", "R", "--journal", journal, "--json")
    assert res.code == 2, res.err
    assert "cannot resume run R" in res.err and str(script) in res.err, res.err
    assert res.out == ""
    script.write_bytes(kept)
    res = cli("runs", "resume", "R", "--journal", journal, "--json")
    assert res.code == 0, res.err
    strip = [{k: v for k, v in r.items() if k != "review_id"} for r in whole]
    assert [{k: v for k, v in r.items() if k != "review_id"} for r in _records(res.out)] == strip
