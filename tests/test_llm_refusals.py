"""A structured answer that is the model's refusal fails the call at once, saying so.

A refusal (``message.refusal``, no content) was taken for an answer without JSON: it was
sent back with a re-ask saying it "did not validate against the required JSON schema",
refused again at the price of another call, twice, and the call failed with "no JSON
object found in the answer".
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from dissensus.llm import ChatRequest, FunctionBackend, Message, ModelClient, StructuredOutputError
from dissensus.llm.base import BackendResponse


class Verdict(BaseModel):
    verdict: str


REQUEST = ChatRequest(messages=[Message(role="user", content="Which is better?")])


def test_a_refusal_is_not_re_asked_and_is_named() -> None:
    backend = FunctionBackend(
        lambda request, mode: BackendResponse(
            text="I'm sorry, I can't help with that.", model="m", refused=True
        )
    )
    with ModelClient(backend) as client, pytest.raises(StructuredOutputError) as caught:
        client.chat_sync(REQUEST, schema=Verdict)
    assert len(backend.sent) == 1
    assert caught.value.attempts == ["I'm sorry, I can't help with that."]
    assert "the model refused to answer" in str(caught.value)
    assert caught.value.usage is not None and caught.value.usage.attempts == 1


def test_an_answer_that_is_no_refusal_is_still_re_asked() -> None:
    answers = ["I'm sorry, I can't help with that.", '{"verdict": "A"}']
    backend = FunctionBackend(
        lambda request, mode: BackendResponse(text=answers[len(backend.sent) - 1], model="m")
    )
    with ModelClient(backend) as client:
        assert client.chat_sync(REQUEST, schema=Verdict).parsed == Verdict(verdict="A")
    assert len(backend.sent) == 2
