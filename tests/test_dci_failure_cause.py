"""A deliberation stopped by its model's failure says which model failed and how.

A DCI follow-up whose model failed said only ``model_failure: every participant failed
in stage frame (round 0): its only participant, framer`` in the CLI's error, the
record's reason and ``review show``; the cause (``gpt-4o-mini: call failed after 4
attempt(s): 500 server_error ...``) was only inside the packet's ``failures``. The
packet's ``status_detail`` now quotes the failure that stopped it, as a failed re-ask's
reason does.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.agents.deliberator import deliberate_with_model
from dissensus.dci.task import load_task
from dissensus.llm import ModelClient, ScriptedBackend
from dissensus.llm.fakeserver import FakeServer, FaultPlan, ServerSettings
from dissensus.llm.scripted import ScriptedRules
from pipeline_cases import panel, write_jsonl, write_policy
from test_dci_defects import _GOOD

RISK = load_task(Path(__file__).resolve().parent.parent / "examples" / "dci" / "risk.yaml")


@pytest.mark.parametrize(
    ("stage", "rule", "cause"),
    [
        ("frame", {"response": "not json"}, "no JSON object found"),
        ("propose", {"response": "not json"}, "no JSON object found"),
        ("synthesize", {"response": "not json"}, "no JSON object found"),
    ],
)
def test_the_detail_of_a_model_failure_quotes_its_cause(
    stage: str, rule: dict[str, object], cause: str
) -> None:
    rules = [{"match": {"stage": f"dci.{stage}"}, **rule}, *_GOOD]
    client = ModelClient(ScriptedBackend.from_dict({"rules": rules}))
    _, result = asyncio.run(deliberate_with_model(RISK, client))
    packet = result.packet
    assert packet.status == "model_failure"
    detail = packet.status_detail or ""
    assert detail.startswith(f"every participant failed in stage {stage} (round ")
    first = next(f for f in packet.failures if f.stage == stage)
    assert cause in first.problems[0]
    # The first failure's problem, with the model that failed, is in the detail.
    assert first.problems[0][:60] in detail and "scripted:" in detail
    if stage == "propose":  # several participants: the first one is named
        assert f"(first, {first.speaker}: " in detail


def test_a_failed_dci_follow_up_names_the_model_and_its_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reviewer's case: every answer of the loopback server is a 500."""
    rules = ScriptedRules(default="ok")
    settings = ServerSettings(faults=FaultPlan(rate=1.0, kinds=["server_error"]))
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("p", ["2", "1", "2"])])
    pol = write_policy(
        tmp_path / "p.yaml",
        {"seek_context": {"followup": "dci"}, "budget": {"max_calls": 50}},
    )
    journal = str(tmp_path / "j.sqlite")
    with FakeServer(rules, settings) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        args = ["decide", str(inp), "--policy", str(pol), "--journal", journal, "--json"]
        result = cli(*args, "--model", "openai:gpt-4o-mini")
    cause = "gpt-4o-mini: call failed after 4 attempt(s): 500 server_error"
    assert result.code == 1
    assert cause in result.err, result.err
    (record,) = [json.loads(line) for line in result.out.splitlines() if line.strip()]
    assert "DCI deliberation stopped early (model_failure: " in record["reason"]
    assert cause in record["reason"]
    shown = cli("review", "show", record["review_id"], "--journal", journal)
    assert shown.code == 0, shown.err
    assert cause in shown.out
