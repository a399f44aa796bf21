"""Budgets across deadlines, kills and resumes: an attempt is charged when it is sent.

A hanging model (every answer takes longer than any deadline here) used to let every
resume of a deadline-stopped run send a fresh budget's worth of requests: attempts cut
off by the deadline were never charged. Every attempt is now journalled as it is sent
(``model.sent``), and a resumed run charges the ones that never got a result. Budget
refusals after failed attempts are journalled too, and a refusal's words do not depend
on what happened to be in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.llm.base import BudgetExceeded, ChatRequest, Message
from dissensus.llm.budget import Budget
from dissensus.llm.fakeserver import FakeServer, ServerSettings
from dissensus.llm.scripted import ScriptedRules
from dissensus.pipeline.batch import DeadlineReached, execute_run, start_run
from dissensus.pipeline.durable import CaseLog, JournalledClient, replay_spend
from dissensus.store import Journal
from fault_runner import forked
from pipeline_cases import mixed_batch, write_jsonl, write_policy

HANG_S = 3.0
"""Latency of the hanging model: longer than every deadline of these tests."""


def _live_rows(copies: int) -> list[dict[str, Any]]:
    rows = [r for r in mixed_batch() if isinstance(r, dict)]
    out = []
    for i in range(copies):
        for row in rows:
            out.append({**row, "id": f"{row['id']}-{i}"})
    return out


def _policy(path: Path, max_calls: int, concurrency: int) -> Path:
    return write_policy(
        path,
        {
            "budget": {"max_calls": max_calls},
            "concurrency": concurrency,
            "routing": {"convergent_disagreement_without_values": "seek_context"},
        },
    )


def _hanging_server() -> FakeServer:
    answer = json.dumps({"decision": "1", "reasoning": "slowly"})
    return FakeServer(ScriptedRules(default=answer), ServerSettings(latency_s=HANG_S))


def test_resumes_after_deadlines_never_exceed_the_call_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's case: a hanging model, a deadline, five resumes."""
    max_calls = 1
    path = write_jsonl(tmp_path / "in.jsonl", _live_rows(2))
    policy = _policy(tmp_path / "policy.yaml", max_calls, concurrency=1)
    with _hanging_server() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        journal = Journal(tmp_path / "j.sqlite")
        from dissensus.pipeline import load_policy

        start_run(journal, str(path), load_policy(str(policy))[0], run_id="d", model="openai:m")

        async def run() -> None:
            async for _ in execute_run(journal, "d", deadline_s=0.8):
                pass

        for _ in range(4):
            with contextlib.suppress(DeadlineReached):
                asyncio.run(run())
            if journal.get("d", "run/finished") is not None:
                break
        assert srv.requests_received <= max_calls
        sent = [e for e in journal.events("d") if e.type == "model.sent"]
        assert len(sent) >= srv.requests_received  # every request was journalled first
        # the budget is spent, so a resume decides the rest without the model: it ends
        assert journal.get("d", "run/finished") is not None
        journal.close()


STEP = st.one_of(
    st.tuples(st.just("deadline"), st.sampled_from([0.2, 0.5])),
    st.tuples(st.just("kill"), st.integers(min_value=2, max_value=40)),
)


@settings(
    max_examples=5,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    max_calls=st.integers(min_value=1, max_value=4),
    concurrency=st.integers(min_value=1, max_value=3),
    steps=st.lists(STEP, min_size=1, max_size=3),
)
def test_no_sequence_of_kills_deadlines_and_resumes_exceeds_the_budget(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    max_calls: int,
    concurrency: int,
    steps: list[tuple[str, float]],
) -> None:
    root = tmp_path_factory.mktemp("seq")
    path = write_jsonl(root / "in.jsonl", _live_rows(2))
    policy = _policy(root / "policy.yaml", max_calls, concurrency)
    journal = str(root / "j.sqlite")
    with _hanging_server() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        decide = ["decide", str(path), "--policy", str(policy), "--journal", journal]
        decide += ["--run-id", "s", "--json", "-o", str(root / "out.jsonl"), "--model", "openai:m"]
        resume = ["runs", "resume", "s", "--journal", journal, "--json"]
        resume += ["-o", str(root / "out.jsonl")]
        started = False
        for kind, value in steps:
            argv = resume if started else decide
            if kind == "deadline":
                code = cli(*argv, "--deadline", str(value)).code
            else:
                code = forked([*argv, "--deadline", "0.5"], int(value))
            started = True
            assert code in (0, 1, 3, -9), (kind, value, code)
            assert srv.requests_received <= max_calls, (steps, srv.requests_received)
    with Journal(journal) as j:
        assert j.verify("s").ok


def _request() -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content="q")], agent="a1")


class _Refusing:
    """A model client whose call times out twice, then the budget refuses the retry."""

    def __init__(self) -> None:
        self.usage = None

    async def chat(self, request: ChatRequest, *, schema: Any = None) -> Any:
        raise BudgetExceeded(
            "call budget exhausted: all 2 attempts allowed are spent or in flight",
            attempts=["timeout: no answer in 60 s", "timeout: no answer in 60 s"],
        )

    async def aclose(self) -> None:
        return None


def test_a_budget_refusal_after_timeouts_is_journalled_with_its_attempts(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        journal.create_run("r", kind="decide", meta={})
        owner = JournalledClient(journal, "r", lambda _: _Refusing())  # type: ignore[arg-type,return-value]
        case = owner.for_case(CaseLog(journal, "r", 1))
        with pytest.raises(BudgetExceeded):
            asyncio.run(case.chat(_request()))
        failed = [e for e in journal.events("r") if e.type == "model.failed"]
        assert [e.payload["outcome"] for e in failed] == ["budget"]
        assert failed[0].payload["usage"]["attempts"] == 2
        assert case.usage.attempts == 2  # the case's record shows them
        budget = Budget(max_calls=10)
        assert replay_spend(journal, "r", budget).attempts == 2
        assert budget.spent.attempts == 2


def test_attempts_sent_without_a_result_are_charged_on_resume(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        journal.create_run("r", kind="decide", meta={})
        for n in range(3):  # three attempts of one call went out; the process then died
            journal.append(
                "r", "model.sent", {"call": "call/1/x/0", "n": n}, key=f"sent/call/1/x/0/{n}"
            )
        budget = Budget(max_calls=10)
        assert replay_spend(journal, "r", budget).attempts == 3
        assert budget.spent.attempts == 3


def test_refusal_words_do_not_depend_on_what_is_in_flight() -> None:
    idle, busy = Budget(max_calls=3), Budget(max_calls=3)
    for _ in range(3):
        r = idle.reserve(model="m", prompt_tokens=0, completion_tokens=0)
        idle.settle(r, model="m", prompt_tokens=0, completion_tokens=0)
    busy.reserve(model="m", prompt_tokens=0, completion_tokens=0)  # one in flight
    r = busy.reserve(model="m", prompt_tokens=0, completion_tokens=0)
    busy.settle(r, model="m", prompt_tokens=0, completion_tokens=0)
    busy.reserve(model="m", prompt_tokens=0, completion_tokens=0)
    messages = []
    for budget in (idle, busy):
        with pytest.raises(BudgetExceeded) as refused:
            budget.reserve(model="m", prompt_tokens=0, completion_tokens=0)
        messages.append(str(refused.value))
    assert messages[0] == messages[1]
    tokens = []
    for spent in (0, 50):
        budget = Budget(max_tokens=100)
        if spent:
            r = budget.reserve(model="m", prompt_tokens=spent, completion_tokens=0)
            budget.settle(r, model="m", prompt_tokens=spent, completion_tokens=0)
        with pytest.raises(BudgetExceeded) as refused:
            budget.reserve(model="m", prompt_tokens=80, completion_tokens=30)
        tokens.append(str(refused.value))
    assert tokens[0] == tokens[1]
