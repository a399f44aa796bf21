"""A re-ask's answers stand on their own: one that does not parse is an abstention.

An agent whose model never answered JSON (``no json here``) failed the whole re-ask: the
other agents' valid answers were dropped, the case went to review as
``followup:unavailable`` and ``decide`` exited 1 (every follow-up failed). Such an answer
is an abstention with its ``fault``, as for an answer naming no option, and the others
are kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from dissensus.pipeline import decide, policy_from_dict
from dissensus.pipeline.steps import FollowupStep
from dissensus.signals import SecondAnswer
from dissensus.store import Journal
from pipeline_cases import as_panel, panel

VALID = {"decision": "1", "reasoning": "Option 1 states the window."}


def _policy(seek_context: dict[str, Any]) -> Any:
    return policy_from_dict(
        {
            "reading": {"similarity": "tfidf", "theta_s": 0.3},
            "seek_context": {"use_recorded": False, **seek_context},
        }
    )


def _followup(journal: Journal) -> FollowupStep:
    event = journal.get("r", "case/1/followup0")
    assert event is not None
    return FollowupStep.model_validate(event.payload)


def _script(path: Path, answer: str) -> str:
    path.write_text(yaml.safe_dump({"default": answer}), encoding="utf-8")
    return f"scripted:{path}"


def test_one_agents_unparsed_answer_is_its_abstention_and_the_others_stand(
    tmp_path: Path,
) -> None:
    models = {
        "a1": _script(tmp_path / "a1.yaml", json.dumps(VALID)),
        "a2": _script(tmp_path / "a2.yaml", json.dumps({**VALID, "decision": "2"})),
        "a3": _script(tmp_path / "a3.yaml", "no json here"),
    }
    journal = Journal(":memory:")
    record = decide(
        as_panel(panel("p", ["1", "1", "1"])),
        _policy({"models": models}),
        journal=journal,
        run_id="r",
    )
    assert "followup:live" in record.path and "followup:unavailable" not in record.path
    assert "re-ask failed" not in record.reason
    answers = _followup(journal).answers
    assert [answers["a1"].decision, answers["a2"].decision] == ["1", "2"]
    assert answers["a1"].fault is None and answers["a2"].fault is None
    unparsed: SecondAnswer = answers["a3"]
    assert unparsed.decision is None
    assert unparsed.fault is not None and "no json here" in unparsed.fault
    # The model that answered, as for a parsed answer (the client's model id).
    assert unparsed.model == "scripted:a3.yaml" and unparsed.family is not None


def test_the_cli_keeps_the_other_agents_answers_and_exits_0(tmp_path: Path) -> None:
    """The reviewer's command: an agent's model answering ``no json here`` made ``decide``
    exit 1 (every follow-up failed) and dropped the other agents' answers."""
    from cli_helpers import cli
    from pipeline_cases import write_jsonl, write_policy

    models = {
        "a1": _script(tmp_path / "a1.yaml", json.dumps(VALID)),
        "a2": _script(tmp_path / "a2.yaml", json.dumps(VALID)),
        "a3": _script(tmp_path / "a3.yaml", "no json here"),
    }
    rows: list[dict[str, Any] | str] = [panel("p", ["1", "1", "1"])]
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    pol = write_policy(tmp_path / "p.yaml", {"seek_context": {"models": models}})
    journal = str(tmp_path / "j.sqlite")
    result = cli("decide", str(inp), "--policy", str(pol), "--journal", journal, "--json")
    assert result.code == 0, result.err
    (record,) = [json.loads(line) for line in result.out.splitlines() if line.strip()]
    assert "followup:live" in record["path"]
