"""Chat-completion bodies whose answer cannot be read, from a member's server on loopback.

* A first choice that is not an object, or holds no ``message`` object, is no chat
  completion: a retryable ``malformed_response``, never an empty answer (an abstention
  counted toward ``min_answers``). A message whose content is ``null`` (only
  ``tool_calls``) is an empty answer.
* The tokens such a body's ``usage`` reports are counted: in the response's ``usage``
  and the request's budget, as an answer's are.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from dissensus.llm.base import BackendError, BackendResponse, ChatRequest, Message
from dissensus.llm.function import FunctionBackend
from dissensus.llm.openai_backend import OpenAIBackend
from dissensus.panels import ChatError, Members, PanelChat
from dissensus.pipeline.policy import policy_from_dict
from dissensus.store.journal import Journal

ASK = {"model": "m", "messages": [{"role": "user", "content": "How many apples?"}]}


@contextmanager
def serving(body: dict[str, Any]) -> Iterator[tuple[str, list[int]]]:
    """A loopback server answering every chat completion with ``body``: its base URL and
    the number of requests it was sent (one item, counted)."""
    hits = [0]
    raw = json.dumps(body).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            hits[0] += 1
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", hits
    finally:
        httpd.shutdown()
        httpd.server_close()


def _send(url: str) -> BackendResponse:
    backend = OpenAIBackend("m", base_url=url, api_key="sk-test", timeout_s=5)

    async def go() -> BackendResponse:
        try:
            request = ChatRequest(messages=[Message(role="user", content="How many?")])
            return await backend.send(request, json_mode="none")
        finally:
            await backend.aclose()

    return asyncio.run(go())


USAGE = {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107}


@pytest.mark.parametrize(
    "choice",
    [
        "The answer is 7.",
        ["The answer is 7."],
        7,
        None,
        {"finish_reason": "stop"},
        {"message": "The answer is 7.", "finish_reason": "stop"},
        {"message": None, "finish_reason": "stop"},
    ],
)
def test_a_choice_or_message_that_is_no_object_is_a_retryable_malformed_response(
    choice: Any,
) -> None:
    with (
        serving({"choices": [choice], "usage": USAGE}) as (url, _),
        pytest.raises(BackendError) as info,
    ):
        _send(url)
    assert (info.value.kind, info.value.retryable) == ("malformed_response", True)
    assert "is not an object" in str(info.value)


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "content": ""},
        {"role": "assistant", "content": None},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
    ],
)
def test_a_message_with_empty_or_null_content_is_an_empty_answer(message: Any) -> None:
    body = {"choices": [{"message": message, "finish_reason": "stop"}], "usage": USAGE}
    with serving(body) as (url, _):
        got = _send(url)
    assert (got.text, got.refused, got.prompt_tokens, got.completion_tokens) == ("", False, 100, 7)


def _answering(text: str) -> FunctionBackend:
    return FunctionBackend(
        lambda request, mode: BackendResponse(
            text=text, model="f", prompt_tokens=5, completion_tokens=5, finish_reason="stop"
        )
    )


def _failing() -> FunctionBackend:
    def fail(request: Any, mode: Any) -> BackendResponse:
        raise BackendError("broken", kind="client_error", retryable=False)

    return FunctionBackend(fail)


def _complete(tmp_path: Path, backends: dict[str, Any], **panel: Any) -> Any:
    section = {
        "answer": "number",
        "members": [{"name": n, "model": "scripted:x", "family": f"f{n}"} for n in backends],
        **panel,
    }
    policy = policy_from_dict({"reading": {"similarity": "tfidf"}, "panel": section})
    with Journal(str(tmp_path / "j.sqlite")) as journal:
        chat = PanelChat(policy, journal=journal, members=Members(policy.panel, backends))
        try:
            return chat.complete(ASK)
        finally:
            chat.close()


def test_a_member_whose_choice_is_a_bare_string_fails_after_its_retries(tmp_path: Path) -> None:
    with serving({"choices": ["The answer is 7."]}) as (url, hits):
        bare = OpenAIBackend("m", base_url=url, api_key="sk-test", timeout_s=5)
        with pytest.raises(ChatError) as info:
            _complete(
                tmp_path,
                {"a": bare, "b": _failing(), "c": _answering("The answer is 7.")},
                min_answers=2,
                max_retries=1,
            )
    assert (info.value.status, info.value.code) == (502, "panel_unavailable")
    assert "malformed_response" in str(info.value)
    assert hits[0] == 2  # the first attempt and its retry


def test_the_tokens_a_body_without_choices_reports_are_in_the_usage(tmp_path: Path) -> None:
    with serving({"choices": [], "usage": USAGE}) as (url, hits):
        empty = OpenAIBackend("m", base_url=url, api_key="sk-test", timeout_s=5)
        done = _complete(
            tmp_path,
            {"a": empty, "b": _answering("The answer is 7."), "c": _answering("7")},
            max_retries=1,
        )
    assert hits[0] == 2
    report = next(m for m in done.dissensus.members if m.name == "a")
    assert report.status == "failed" and "empty_choices" in (report.why or "")
    # Two answers of 5 + 5 tokens, and each of the failed member's two attempts' 100 + 7.
    assert done.usage.prompt_tokens == 2 * 5 + 2 * 100
    assert done.usage.completion_tokens == 2 * 5 + 2 * 7
