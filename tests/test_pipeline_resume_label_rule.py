"""A run journalled with a routing rule that compares a decision with a number
(``decision == 1``, written before such a rule was refused at load) is resumed to its
end: the refusal applies when a policy file is loaded, not to the journalled copy, which
keeps its meaning (the test never holds, so the rule never fires)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.pipeline.batch import start_run
from dissensus.states import conditions
from dissensus.store import Journal
from pipeline_cases import panel, write_jsonl, write_policy

ROWS = [panel("p1", ["1", "1", "1"]), panel("p2", ["1", "2", "2"])]
RULE = {"id": "pick-one", "condition": "decision == 1", "action": "escalate", "priority": 10}


def _records(out: str) -> list[dict[str, object]]:
    return [
        {k: v for k, v in json.loads(line).items() if k != "review_id"} for line in out.splitlines()
    ]


def test_a_run_journalled_with_a_number_label_rule_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", ROWS)
    ruled = write_policy(tmp_path / "ruled.yaml", {"routing": {"rules": [RULE]}})
    plain = write_policy(tmp_path / "plain.yaml")
    journal = tmp_path / "j.sqlite"
    res = cli("decide", inp, "--policy", ruled, "--journal", journal, "--json")
    assert res.code == 2 and "rules.0.condition" in res.err, res.err
    # journalled as a version without the refusal did: the run's start, no case decided
    with monkeypatch.context() as patched:
        patched.setattr(conditions._Parser, "check_label", lambda *args: None)
        with Journal(journal) as j:
            start_run(j, str(inp), str(ruled), run_id="R")
    res = cli("runs", "resume", "R", "--journal", journal, "--json")
    assert res.code in (0, 1), res.err
    resumed = _records(res.out)
    assert [r["id"] for r in resumed] == ["p1", "p2"]
    res = cli("decide", inp, "--policy", plain, "--journal", tmp_path / "k.sqlite", "--json")
    assert res.code in (0, 1), res.err
    assert resumed == _records(res.out)  # the rule never fired, as it never did


def test_a_spec_built_directly_with_a_number_label_rule_is_refused() -> None:
    """``RunSpec(policy=...)`` with a rule ``decision == 1`` was accepted and the rule
    never fired; it is refused as loading that policy is, naming the rule's condition,
    while the spec read back from a journal keeps the rule (it resumes, above)."""
    from dissensus.errors import ConfigError
    from dissensus.pipeline import Policy, RunSpec

    policy = Policy.model_validate({"routing": {"rules": [RULE]}})
    with pytest.raises(ConfigError) as refused:
        RunSpec(policy=policy)
    assert refused.value.field == "routing.rules.0.condition", refused.value
    with pytest.raises(ConfigError):
        RunSpec.model_validate({"policy": policy})
    journalled = RunSpec().started_fields() | {"policy": policy.model_dump(mode="json")}
    spec = RunSpec.from_started(journalled)
    assert spec.policy.routing.rules_document()["rules"][0]["id"] == "pick-one"
    fine = {**RULE, "condition": 'decision == "1"'}
    assert RunSpec(policy=Policy.model_validate({"routing": {"rules": [fine]}})).policy
