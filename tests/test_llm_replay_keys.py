"""A recording line's key must be the digest of its own request.

Answers are found by the key a line stores, not by the request it shows: a line whose
request was edited (or whose key another tool wrote) answered the request it no longer
shows, and the request it shows was a miss.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from dissensus.errors import ConfigError
from dissensus.llm import ChatRequest, Message
from dissensus.llm.replay import ReplayBackend, canonical_request, request_key


def _ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], agent="a", seed=3)


def _line(key: str, request: ChatRequest, text: str) -> str:
    body = {
        "key": key,
        "request": canonical_request(request),
        "response": {"text": text, "model": "m"},
    }
    return json.dumps(body)


def test_a_line_whose_request_was_edited_is_refused_naming_file_and_line(tmp_path: Path) -> None:
    asked, shown = _ask("Is option 1 better?"), _ask("Is option 2 better?")
    rec = tmp_path / "edited.jsonl"
    rec.write_text(
        _line(request_key(shown), shown, "no")
        + "\n"
        + _line(request_key(asked), shown, "yes")
        + "\n"
    )
    with pytest.raises(ConfigError) as caught:
        ReplayBackend.from_file(rec)
    assert caught.value.file == str(rec) and caught.value.field == "key"
    assert "line 2: its key is not the SHA-256 of its request" in str(caught.value)


def test_a_line_as_the_recorder_writes_it_replays(tmp_path: Path) -> None:
    asked = _ask("Is option 1 better?")
    rec = tmp_path / "good.jsonl"
    rec.write_text(_line(request_key(asked), asked, "yes") + "\n")
    backend = ReplayBackend.from_file(rec)
    assert asyncio.run(backend.send(asked, json_mode="none")).text == "yes"
