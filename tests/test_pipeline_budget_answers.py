"""Tokens of answers that fail validation are spent: counted, journalled, charged on resume.

A structured call whose answers do not validate (text that is not JSON, an object of
another shape) fails, yet the server answered and billed every one of them. The model
client charged them to its budget but the failed call's error carried no usage, so the
run journalled the call (``model.failed``) with 0 tokens, its case's record said 0
tokens, and a resumed run charged nothing for it: a run stopped by its deadline and
resumed again and again spent its token budget afresh each time. The error now carries
what the call spent, the journal holds it (and, for a call cut off while it re-asks,
the ``model.sent`` of the re-ask holds the answers before it), and a resumed run
charges it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from dissensus.llm import (
    BackendError,
    BackendResponse,
    Budget,
    BudgetExceeded,
    ChatRequest,
    ClientSettings,
    FunctionBackend,
    JsonMode,
    LLMError,
    Message,
    ModelClient,
    StructuredOutputError,
)
from dissensus.llm.base import estimate_tokens
from dissensus.llm.client import prompt_estimate
from dissensus.llm.fakeserver import FakeServer, FaultPlan, ServerSettings
from dissensus.llm.scripted import ScriptedRules
from dissensus.pipeline import load_policy
from dissensus.pipeline.batch import DeadlineReached, execute_run, start_run
from dissensus.pipeline.durable import CaseClient, CaseLog, JournalledClient, replay_spend
from dissensus.store import Journal
from dissensus.store import event_types as ev
from pipeline_cases import panel, write_jsonl, write_policy

FAST = ClientSettings(backoff_base_s=0.0, backoff_max_s=0.0, max_retries=1, max_reasks=2)


class Answer(BaseModel):
    decision: str


def _request() -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content="Which one?")], agent="a1")


def _text(kind: str, pad: int) -> str:
    """An answer of ``kind`` (``valid``, ``text``: not JSON, ``violation``: JSON of another
    shape), ``pad`` characters longer."""
    if kind == "valid":
        return json.dumps({"decision": "1", "note": "x" * pad})
    if kind == "text":
        return "I would pick the first one." + " so" * (pad // 3)
    return json.dumps({"unexpected": "y" * pad})


class _Scripted:
    """A backend answering attempt after attempt from one script, across processes:
    each answer's tokens are what a server counting like ``estimate_tokens`` reports, and
    ``reported`` sums them (the server's own count); ``error`` fails an attempt (500),
    ``hang`` never answers (the caller's deadline cuts the call off)."""

    def __init__(self, script: list[tuple[str, int]]) -> None:
        self.script = list(script)
        self.reported = 0
        self.backend = self._backend()

    @property
    def attempts(self) -> int:
        """Attempts received (in every process)."""
        return len(self.backend.sent)

    def _backend(self) -> FunctionBackend:
        async def handler(request: ChatRequest, mode: JsonMode) -> BackendResponse:
            kind, pad = self.script.pop(0) if self.script else ("valid", 0)
            if kind == "error":
                raise BackendError("500 server_error", kind="server_error", retryable=True)
            if kind == "hang":
                await asyncio.Event().wait()
            text = _text(kind, pad)
            prompt = estimate_tokens(request.prompt_text())
            completion = min(estimate_tokens(text), request.max_tokens or 10**9)
            self.reported += prompt + completion
            return BackendResponse(
                text=text, model="m", prompt_tokens=prompt, completion_tokens=completion
            )

        return FunctionBackend(handler, model_id="m")


def test_a_failed_structured_call_says_what_its_answers_used() -> None:
    server = _Scripted([("text", 0), ("violation", 10), ("text", 5)])
    client = ModelClient(server.backend, settings=FAST)
    with pytest.raises(StructuredOutputError) as caught:
        client.chat_sync(_request(), schema=Answer)
    client.close()
    usage = caught.value.usage
    assert usage is not None
    assert (usage.calls, usage.attempts) == (1, 3)
    assert usage.total_tokens == server.reported > 0
    assert client.usage.total_tokens == server.reported


def test_a_budget_refusal_of_a_re_ask_says_what_the_answers_before_used() -> None:
    server = _Scripted([("text", 0)])
    # Room for the first attempt's worst case: the re-ask (a longer prompt) is refused.
    sent = _request().model_copy(update={"json_schema": Answer.model_json_schema()})
    first = prompt_estimate(sent) + Budget().completion_reserve
    client = ModelClient(server.backend, budget=Budget(max_tokens=first + 5), settings=FAST)
    with pytest.raises(BudgetExceeded) as caught:
        client.chat_sync(_request(), schema=Answer)
    client.close()
    usage = caught.value.usage
    assert usage is not None and usage.attempts == 1
    assert usage.total_tokens == server.reported > 0


OUTCOMES = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["valid", "text", "violation"]), st.integers(0, 3000)),
        st.tuples(st.sampled_from(["error", "hang"]), st.just(0)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(
    script=OUTCOMES,
    max_tokens=st.one_of(st.none(), st.integers(200, 6000)),
    calls=st.integers(1, 3),
)
def test_the_tokens_journalled_are_the_tokens_the_server_reported(
    script: list[tuple[str, int]], max_tokens: int | None, calls: int
) -> None:
    """Whatever the answers (valid, not JSON, of another shape), the failures and the cuts
    (a hang the deadline cuts off, then a resume), the journal holds every token the
    server reported, a resumed run charges them all, each case's usage counts those of
    its calls, and no sequence of resumes is answered with more tokens than the budget."""
    import tempfile

    server = _Scripted(script)
    with tempfile.TemporaryDirectory() as tmp, Journal(Path(tmp) / "j.sqlite") as journal:
        journal.create_run("r", kind="decide", meta={})
        for _ in range(len(script) + 2):  # the first process, then resumes
            budget = Budget(max_tokens=max_tokens)
            replay_spend(journal, "r", budget)
            before = server.reported
            replayed = _tokens(journal, ev.MODEL_CALL)  # answered calls, replayed again

            def client(_: str | None, budget: Budget = budget) -> ModelClient:
                return ModelClient(server.backend, budget=budget, settings=FAST)

            owner = JournalledClient(journal, "r", client)
            case = owner.for_case(CaseLog(journal, "r", 1))

            async def ask(case: CaseClient = case) -> None:
                for _ in range(calls):
                    with contextlib.suppress(LLMError):
                        await case.chat(_request(), schema=Answer)

            try:
                asyncio.run(asyncio.wait_for(ask(), timeout=0.1))
            except TimeoutError:
                continue  # cut off: resume
            # A case that ends counts what its calls were answered with, failed ones too
            # (and a journalled call's usage again when it is replayed).
            assert case.usage.total_tokens == server.reported - before + replayed
            if not server.script:
                break
        charged = Budget()
        total = replay_spend(journal, "r", charged)
        assert total.total_tokens == charged.spent.total_tokens == server.reported
        assert charged.spent.attempts == server.attempts
        assert (
            _tokens(journal, ev.MODEL_FAILED) + _tokens(journal, ev.MODEL_CALL) <= server.reported
        )
        if max_tokens is not None:
            assert server.reported <= max_tokens


def _tokens(journal: Journal, kind: str) -> int:
    """The tokens of the run's events of ``kind`` (``model.call``, ``model.failed``)."""
    usages = [e.payload["usage"] for e in journal.events("r", type=kind)]
    return sum(u["prompt_tokens"] + u["completion_tokens"] for u in usages)


class _CountingServer(FakeServer):
    """The loopback server, counting the tokens it reports in its 200 answers."""

    reported = 0

    async def _write(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        extra: dict[str, str] | None = None,
    ) -> None:
        if status == 200:
            with contextlib.suppress(ValueError, AttributeError):
                usage = json.loads(body).get("usage") or {}
                type(self).reported += int(usage.get("total_tokens", 0))
        await super()._write(writer, status, body, extra)


def _rows(n: int) -> list[dict[str, Any] | str]:
    return [panel(f"c{i}", ["2", "1", "2"]) for i in range(n)]


def test_resumes_after_deadlines_spend_no_more_tokens_than_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reviewer's case, scaled down: every re-ask answer is text, not JSON; each
    process's fifth request hangs until its deadline stops it; the run is resumed until it
    ends. The tokens the server reported stay within ``budget.max_tokens``, and the journal
    holds every one of them."""
    max_tokens = 2500
    path = write_jsonl(tmp_path / "in.jsonl", _rows(12))
    policy = write_policy(
        tmp_path / "p.yaml",
        {"budget": {"max_calls": 1000, "max_tokens": max_tokens}, "concurrency": 1},
    )
    rules = ScriptedRules(default="I would pick the first one.")
    faults = FaultPlan(sequence=[None, None, None, None, "hang"], hang_s=30.0)
    _CountingServer.reported = 0
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(path), load_policy(str(policy))[0], run_id="d", model="openai:m")

        async def run(deadline: float | None) -> None:
            async for _ in execute_run(journal, "d", deadline_s=deadline):
                pass

        for deadline in (1.5, 1.5, 1.5, None):
            with _CountingServer(rules, ServerSettings(faults=faults)) as srv:
                monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
                with contextlib.suppress(DeadlineReached):
                    asyncio.run(run(deadline))
            if journal.get("d", "run/finished") is not None:
                break
        assert journal.get("d", "run/finished") is not None
        assert 0 < _CountingServer.reported <= max_tokens
        charged = Budget()
        assert replay_spend(journal, "d", charged).total_tokens == _CountingServer.reported
