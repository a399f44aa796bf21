"""A server's error message is passed on cut to a bounded length, and scrubbed first.

A server answering 500 with a body of tens of megabytes had the whole body scrubbed of
the key (tens of seconds of CPU, after the attempt's deadline, with the event loop
serving nothing else) and put whole into the error, the failures list and the journal.
The message is now cut to ``MAX_SERVER_MESSAGE_CHARS`` characters, and a key standing
across the cut leaves no piece of itself behind.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.llm.openai_backend import MAX_SERVER_MESSAGE_CHARS, SECRET_RUN, OpenAIBackend
from llm_helpers import key_echoing, refused

KEY = "sk-proj-SECRET-AAAA-1234567890"


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def _echoing(message_of: Callable[[str], str]) -> Iterator[str]:
    return _serve(key_echoing(500, message_of))


@pytest.fixture
def huge_error() -> Iterator[str]:
    # 8 MB of text with the key at the start, the middle and the end.
    yield from _echoing(
        lambda key: f"{key} " + "A" * 4_000_000 + f" {key} " + "B" * 4_000_000 + key
    )


def test_a_huge_error_body_is_cut_and_scrubbed_in_time(huge_error: str) -> None:
    backend = OpenAIBackend("m", base_url=huge_error, api_key=KEY, timeout_s=30)

    started = time.perf_counter()
    error = refused(backend)
    elapsed = time.perf_counter() - started

    assert error.kind == "server_error" and error.status == 500
    assert len(str(error)) < MAX_SERVER_MESSAGE_CHARS + 200
    # The body is read only up to its first 64 KiB (ERROR_BODY_BYTES), and says so.
    assert str(error).endswith("not read further)")
    assert str(error).startswith("HTTP 500: Error code: 500 - ")
    assert "SECRET" not in str(error)
    # Scrubbing the whole 8 MB took about four seconds; the head takes milliseconds.
    assert elapsed < 2.5, elapsed


@settings(max_examples=60, deadline=None)
@given(offset=st.integers(0, 3 * len(KEY) + 20), encoded=st.booleans())
def test_a_key_standing_across_the_cut_leaves_no_piece(offset: int, encoded: bool) -> None:
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key=KEY)
    quoted = "".join(f"%{ord(c):02X}" for c in KEY) if encoded else KEY
    filler = "x" * (MAX_SERVER_MESSAGE_CHARS - offset)
    text = filler + quoted + " tail " + "y" * 5000

    shown = backend._server_text(text)

    assert shown.startswith(filler[:100])
    assert len(shown) <= MAX_SERVER_MESSAGE_CHARS + 60
    windows = {KEY[i : i + SECRET_RUN].lower() for i in range(len(KEY) - SECRET_RUN + 1)}
    assert not any(w in shown.lower() for w in windows)
    assert "SECRET" not in shown and "%53%45%43" not in shown.upper()


def test_a_short_error_message_is_passed_on_whole() -> None:
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key=KEY)
    text = json.dumps({"error": "model overloaded " + "z" * (MAX_SERVER_MESSAGE_CHARS - 100)})
    assert backend._server_text(text) == text
