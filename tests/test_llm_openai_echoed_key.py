"""An answer quoting the API key as it was sent has it replaced before it is used.

A server echoing the request's headers into its completion (a debugging proxy, a
hostile server) put ``Bearer <key>`` into the answer's text and ``model``: the answer
was recorded (``record:``), journalled and shown as it was, key and all.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dissensus.llm import ChatRequest, Message, resolve_model
from dissensus.llm.openai_backend import OpenAIBackend

KEY = "sk-live-ECHOED-0123456789abcdef"


class _Echoing(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        auth = self.headers.get("Authorization", "")
        message = {"role": "assistant", "content": f"I received: {auth}", "refusal": None}
        body = json.dumps(
            {
                "model": f"echo {auth}",
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 4},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def echoing() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Echoing)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_an_echoed_key_is_neither_answered_nor_recorded(
    echoing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", echoing)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    recording = tmp_path / "run.jsonl"
    client = resolve_model(f"record:{recording}:openai:m")
    try:
        response = client.chat_sync(ChatRequest(messages=[Message(role="user", content="hi")]))
    finally:
        client.close()
    assert response.text == "I received: Bearer [REDACTED]"
    assert response.model == "echo Bearer [REDACTED]"
    assert KEY not in recording.read_text(encoding="utf-8")
    assert "Bearer [REDACTED]" in recording.read_text(encoding="utf-8")


@pytest.mark.parametrize("key", ["x", "unused", "sk-short"])
def test_a_short_key_leaves_answers_as_they_are(echoing: str, key: str) -> None:
    backend = OpenAIBackend("m", base_url=echoing, api_key=key)

    async def ask() -> str:
        try:
            answer = await backend.send(
                ChatRequest(messages=[Message(role="user", content="hi")]), json_mode="none"
            )
        finally:
            await backend.aclose()
        return answer.text

    assert asyncio.run(ask()) == f"I received: Bearer {key}"
