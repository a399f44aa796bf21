"""A structured answer the server ended early is never read from an object inside it.

An answer cut at the completion cap (``finish_reason`` ``length``) or stopped by a
content filter is incomplete: the object its model was writing is not closed, so the
first balanced ``{...}`` inside it is a piece of the answer (a draft, a quoted
example), not the answer. It is read from what closed before the cut (the whole text,
a closed code fence, an outermost object that closes before prose the cap cut off) or
re-asked, as ``docs/llm.md`` says.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from dissensus.llm import (
    ChatRequest,
    FunctionBackend,
    Message,
    ModelClient,
    OpenAIBackend,
    StructuredOutputError,
)
from dissensus.llm.base import BackendResponse
from dissensus.llm.fakeserver import FakeServer, ServerSettings
from dissensus.llm.jsonparse import JSONExtractError, extract_json
from dissensus.llm.scripted import parse_script


class Verdict(BaseModel):
    verdict: str


# The model's final verdict is A; a draft of B comes first and the cap cuts the answer.
ANSWER = '{"draft": {"verdict": "B"}, "verdict": "A", "why": "the reasons, at length, are these'
REQUEST = ChatRequest(messages=[Message(role="user", content="Which is better?")])


def test_an_answer_cut_at_the_cap_is_not_read_from_an_inner_object() -> None:
    script = parse_script({"default": ANSWER + ' and more."}'})
    with FakeServer(script, ServerSettings()) as srv:
        backend = OpenAIBackend("fake-model", base_url=srv.base_url, api_key="k")
        with ModelClient(backend) as client, pytest.raises(StructuredOutputError) as caught:
            client.chat_sync(REQUEST.model_copy(update={"max_tokens": 20}), schema=Verdict)
    err = caught.value
    assert len(err.attempts) == 3  # asked, then re-asked twice: never "B"
    assert all("cut off at the completion cap" in e for e in err.errors)


@pytest.mark.parametrize("finish", ["length", "content_filter"])
def test_a_whole_answer_cut_short_is_read_and_a_partial_one_re_asked(finish: str) -> None:
    answers = [ANSWER, '{"verdict": "A"}']
    sent: list[ChatRequest] = []

    def handler(request: ChatRequest, mode: str) -> BackendResponse:
        sent.append(request)
        return BackendResponse(text=answers[len(sent) - 1], model="m", finish_reason=finish)

    with ModelClient(FunctionBackend(handler)) as client:
        response = client.chat_sync(REQUEST, schema=Verdict)
    assert response.parsed == Verdict(verdict="A")
    assert response.raw == answers
    assert f"finish_reason '{finish}'" in sent[1].messages[-1].content


def test_an_answer_that_stopped_is_still_searched() -> None:
    backend = FunctionBackend(
        lambda request, mode: BackendResponse(
            text='Sure: {"verdict": "A"} hope it helps', model="m", finish_reason="stop"
        )
    )
    with ModelClient(backend) as client:
        assert client.chat_sync(REQUEST, schema=Verdict).parsed == Verdict(verdict="A")


# An object, then prose the cap cut off; a closed fence, then prose the cap cut off.
OBJECT_THEN_PROSE = '{"verdict": "A"}\n\nExplanation: A is better because the reasons are'
FENCE_THEN_PROSE = 'Here is my verdict:\n```json\n{"verdict": "A"}\n```\nI chose A because'


@pytest.mark.parametrize("finish", ["length", "content_filter"])
@pytest.mark.parametrize("text", [OBJECT_THEN_PROSE, FENCE_THEN_PROSE])
def test_a_closed_answer_followed_by_cut_prose_is_read_at_once(text: str, finish: str) -> None:
    sent: list[ChatRequest] = []

    def handler(request: ChatRequest, mode: str) -> BackendResponse:
        sent.append(request)
        return BackendResponse(text=text, model="m", finish_reason=finish)

    with ModelClient(FunctionBackend(handler)) as client:
        response = client.chat_sync(REQUEST, schema=Verdict)
    assert response.parsed == Verdict(verdict="A")
    assert len(sent) == 1  # not re-asked
    assert response.raw == [text]


def test_a_closed_object_followed_by_prose_is_read_through_the_server() -> None:
    script = parse_script({"default": OBJECT_THEN_PROSE + " many, and long."})
    with FakeServer(script, ServerSettings()) as srv:
        backend = OpenAIBackend("fake-model", base_url=srv.base_url, api_key="k")
        with ModelClient(backend) as client:
            response = client.chat_sync(
                REQUEST.model_copy(update={"max_tokens": 12}), schema=Verdict
            )
    assert response.parsed == Verdict(verdict="A")
    assert response.attempts == 1


@pytest.mark.parametrize(
    "text",
    [
        ANSWER,
        # A closed fence inside an outermost value that never closes.
        '{"why": "as in\n```json\n{"verdict": "B"}\n```\n", "verdict": "A", "more": "',
        # A closed object after an outermost value that never closes.
        '[{"verdict": "A"}, {"verdict": "B"}, {"verd',
        'Sure [my draft: {"verdict": "B"} and then',
    ],
)
def test_nothing_inside_an_unclosed_outer_value_is_read_when_cut_short(text: str) -> None:
    with pytest.raises(JSONExtractError):
        extract_json(text, cut_short=True)
    extract_json(text)  # read from inside when the answer stopped: the cut is what differs


def test_no_prefix_of_one_object_is_read_as_its_inner_object() -> None:
    whole = '{"draft": {"verdict": "B"}, "verdict": "A", "why": "```{\\"verdict\\": \\"C\\"}```"}'
    assert extract_json(whole, cut_short=True)["verdict"] == "A"
    for end in range(len(whole)):
        with pytest.raises(JSONExtractError):
            extract_json(whole[:end] + " and then", cut_short=True)


def test_the_first_outermost_value_that_closes_is_read_when_cut_short() -> None:
    text = 'See [1] and {"verdict": "A"} then {"verdict": "B", "why": "'
    assert extract_json(text, cut_short=True) == {"verdict": "A"}
