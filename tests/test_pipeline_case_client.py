"""A case's client is a ChatClient: ``chat`` asks the run's model, ``for_model(spec)``
another one; the calls are journalled under the same keys as before (the model spec in
the digest) and counted in the case's usage, whichever model answered."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.llm import ChatClient, ModelClient, ScriptedBackend
from dissensus.llm.base import ChatRequest, Message
from dissensus.pipeline.durable import CaseClient, CaseLog, JournalledClient, call_digest
from dissensus.store import event_types as ev
from dissensus.store.journal import Journal


def _client(spec: str | None) -> ModelClient:
    return ModelClient(ScriptedBackend.from_dict({"default": f"answer of {spec}"}, name=str(spec)))


def _request(agent: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content="q")], agent=agent)


def test_the_case_client_has_the_one_chat_signature() -> None:
    def shape(fn: object) -> list[tuple[str, object, object]]:
        params = inspect.signature(fn).parameters.values()  # type: ignore[arg-type]
        return [(p.name, p.kind, p.default) for p in params]

    assert shape(CaseClient.chat) == shape(ChatClient.chat)


@settings(max_examples=10, deadline=None)
@given(st.lists(st.sampled_from([None, "m1", "m2"]), min_size=1, max_size=5))
def test_calls_go_to_their_model_and_count_in_the_case(specs: list[str | None]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, Journal(Path(tmp) / "j.sqlite") as journal:
        journal.create_run("r", kind="decide", meta={})
        owner = JournalledClient(journal, "r", _client)
        case = owner.for_case(CaseLog(journal, "r", 1))

        async def ask() -> list[str]:
            out = []
            for k, spec in enumerate(specs):
                client: ChatClient = case.for_model(spec)
                out.append((await client.chat(_request(f"a{k}"))).text)
            return out

        texts = asyncio.run(ask())
        assert texts == [f"answer of {spec}" for spec in specs]
        assert case.for_model(None) is case
        calls = [e for e in journal.events("r") if e.type == ev.MODEL_CALL]
        assert len(calls) == len(specs)
        for k, (event, spec) in enumerate(zip(calls, specs, strict=True)):
            digest = call_digest(_request(f"a{k}"), None, spec)
            assert event.key == case.calls[k]
            assert event.key.split("/")[-2:] == [digest[:32], "0"]
        assert case.usage.calls == len(specs)
        assert sorted(case.usage_by_agent) == sorted(f"a{k}" for k in range(len(specs)))
        assert case.for_model("m1").usage is case.usage
