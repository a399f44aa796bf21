"""A panel of loopback OpenAI-compatible members with faults: partial panels and abstentions.

Members are :class:`~dissensus.llm.fakeserver.FakeServer` instances: one healthy, one that
answers 429 first, one that hangs past the attempt deadline, one whose bodies are broken
JSON, one that answers text without a JSON object. The door decides the panel of the
members that spoke, reports every member's fate, and journals a run that verifies.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")  # imported now, not inside a member's first attempt deadline

from dissensus.llm.fakeserver import FakeServer, FaultPlan, ServerSettings
from dissensus.llm.scripted import ScriptedRules
from dissensus.panels import ChatError, PanelChat
from dissensus.pipeline.durable import case_step
from dissensus.pipeline.policy import policy_from_dict
from dissensus.pipeline.steps import CaseInput
from dissensus.store.journal import Journal

YES = {"decision": "Yes", "reasoning": "The statement holds for every case we checked."}
NO = {"decision": "no", "reasoning": "One counterexample is enough to refute it."}


def _server(answer: Any, **faults: Any) -> FakeServer:
    plan = FaultPlan(retry_after="0", **faults)
    return FakeServer(ScriptedRules(default=answer), ServerSettings(faults=plan)).start()


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, FakeServer]]:
    with ExitStack() as stack:
        made = {
            "healthy": _server(YES),
            "limited": _server(YES, sequence=["rate_limit"]),
            "dissent": _server(NO),
            "hanging": _server(YES, rate=1.0, kinds=["hang"], hang_s=6.0),
            "broken": _server(YES, rate=1.0, kinds=["truncated"]),
            "rambling": _server("I would rather not commit to an answer today."),
        }
        for server in made.values():
            stack.callback(server.stop)
        yield made


def _chat(servers: dict[str, FakeServer], journal: Journal, **panel: Any) -> PanelChat:
    members = [
        {"name": name, "model": "openai:fake-model", "base_url": s.base_url, "family": name}
        for name, s in servers.items()
    ]
    section = {
        "answer": "structured",
        "options": ["yes", "no"],
        "members": members,
        "attempt_timeout_s": 1.5,
        "max_retries": 2,  # a first attempt slowed by a loaded machine still leaves a retry
        **panel,
    }
    policy = policy_from_dict({"reading": {"similarity": "tfidf"}, "panel": section})
    return PanelChat(policy, journal=journal)


ASK = {"model": "m", "messages": [{"role": "user", "content": "Does the claim hold?"}]}


@pytest.mark.slow
def test_partial_panel_with_abstentions_is_decided_and_journalled(
    servers: dict[str, FakeServer], tmp_path: Path
) -> None:
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        chat = _chat(servers, journal)
        try:
            done = chat.complete(ASK)
        finally:
            chat.close()
        ext = done.dissensus
        fate = {m.name: (m.status, m.decision) for m in ext.members}
        assert fate == {
            "healthy": ("answered", "yes"),
            "limited": ("answered", "yes"),
            "dissent": ("answered", "no"),
            "hanging": ("failed", None),
            "broken": ("failed", None),
            "rambling": ("abstained", None),
        }
        why = {m.name: m.why or "" for m in ext.members}
        assert "timeout" in why["hanging"]
        assert "malformed" in why["broken"] or "JSON" in why["broken"]
        assert {m.name: m.attempts for m in ext.members}["limited"] >= 2
        report = journal.verify(ext.run_id)
        assert report.ok, report.problems
        panel = CaseInput.model_validate(case_step(journal, ext.run_id, 1, "input")).panel
    # The failed members stay in the panel as abstentions without reasoning; who failed
    # and why is in the panel's meta, so the journal says it too.
    by_agent = {o.agent: o for o in panel.outputs}
    assert by_agent["hanging"].decision is None and by_agent["hanging"].reasoning == ""
    assert by_agent["rambling"].reasoning.startswith("I would rather")
    statuses = {m["name"]: m["status"] for m in panel.meta["members"]}
    assert statuses["broken"] == "failed"
    assert ext.status in ("committed", "escalated")


def test_too_few_answers_is_a_502_naming_each_failure(
    servers: dict[str, FakeServer], tmp_path: Path
) -> None:
    failing = _server(YES, rate=1.0, kinds=["server_error"])
    chosen = {"healthy": servers["healthy"], "failing": failing, "broken": servers["broken"]}
    try:
        with Journal(str(tmp_path / "j.sqlite")) as journal:
            chat = _chat(chosen, journal)
            try:
                with pytest.raises(ChatError) as caught:
                    chat.complete(ASK)
            finally:
                chat.close()
            assert journal.runs() == []
    finally:
        failing.stop()
    assert caught.value.status == 502 and caught.value.code == "panel_unavailable"
    assert "failing:" in caught.value.message and "broken:" in caught.value.message


def test_deadline_cancels_members_still_running(
    servers: dict[str, FakeServer], tmp_path: Path
) -> None:
    chosen = {k: servers[k] for k in ("healthy", "dissent", "hanging")}
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        chat = _chat(chosen, journal, attempt_timeout_s=30.0, deadline_s=10.0, min_answers=1)
        try:
            done = chat.complete(ASK)
        finally:
            chat.close()
    hanging = next(m for m in done.dissensus.members if m.name == "hanging")
    assert hanging.status == "failed" and "deadline" in (hanging.why or "")


def test_token_budget_of_a_request_refuses_members(
    servers: dict[str, FakeServer], tmp_path: Path
) -> None:
    chosen = {k: servers[k] for k in ("healthy", "dissent", "limited")}
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        chat = _chat(chosen, journal, request_max_tokens=1, min_answers=1)
        try:
            with pytest.raises(ChatError) as caught:
                chat.complete(ASK)
        finally:
            chat.close()
    assert caught.value.status == 502
    assert "budget" in caught.value.message.lower()
