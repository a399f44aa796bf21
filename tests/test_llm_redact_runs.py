"""A key quoted in part or in another case is scrubbed too: no run of ``SECRET_RUN``
consecutive characters of a secret, in any case, is left in an error's text, whether the
text comes from ``redact`` or from a member's failure the chat door reports."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.llm.openai_backend import SECRET_RUN, OpenAIBackend, redact
from llm_helpers import key_echoing, refused

KEY = "sk-proj-SECRET-AAAA-1234567890"
KEY_CHARS = st.characters(min_codepoint=0x21, max_codepoint=0x7E)  # a key's: printable ASCII


def _windows(secret: str) -> set[str]:
    return {secret[i : i + SECRET_RUN].lower() for i in range(len(secret) - SECRET_RUN + 1)}


def _holds_a_run(text: str, secret: str) -> bool:
    lowered = text.lower()
    return any(w in lowered for w in _windows(secret))


def _any_case(piece: str, flips: list[bool]) -> str:
    return "".join(c.upper() if flip else c.lower() for c, flip in zip(piece, flips, strict=False))


@settings(max_examples=300, deadline=None)
@given(
    secret=st.text(KEY_CHARS, min_size=16, max_size=60),
    before=st.text(max_size=30),
    after=st.text(max_size=30),
    span=st.tuples(st.integers(0, 60), st.integers(SECRET_RUN, 60)),
    flips=st.lists(st.booleans(), min_size=60, max_size=60),
)
def test_no_run_of_a_secret_is_left_in_any_case(
    secret: str, before: str, after: str, span: tuple[int, int], flips: list[bool]
) -> None:
    start = span[0] % (len(secret) - SECRET_RUN + 1)
    piece = secret[start : start + span[1]]
    text = before + _any_case(piece, flips) + after
    out = redact(text, (secret,))
    assert "[REDACTED]" in out
    assert not _holds_a_run(out, secret)


@given(text=st.text(st.sampled_from("acdefx .:'"), max_size=80))
def test_text_without_a_run_of_the_secret_keeps_its_words(text: str) -> None:
    """Only what holds a piece of the key is replaced: text sharing no run with it (nor a
    bearer token or ``sk-`` key) is left as it was."""
    assert redact(text, ("0123456789-0123456789",)) == text


def test_a_lower_cased_or_partial_key_is_redacted() -> None:
    text = f"Incorrect API key provided: {KEY}. Also lower: {KEY.lower()} mid{KEY[3:]}"
    out = redact(text, (KEY,))
    assert out == ("Incorrect API key provided: [REDACTED]. Also lower: [REDACTED] mid[REDACTED]")
    assert redact("key 1234567890ab here", ("zz1234567890abzz",)) == "key [REDACTED] here"
    assert redact("key 234567890ab here", ("zz1234567890abzz",)) == "key 234567890ab here"


def _quoted(key: str) -> str:
    """The key whole, lower-cased and without its prefix."""
    return f"Incorrect API key provided: {key}. Also lower: {key.lower()} mid{key[3:]}"


@pytest.fixture(params=[401, 400])
def quoting(request: pytest.FixtureRequest) -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), key_echoing(request.param, _quoted))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_a_server_quoting_the_key_in_part_leaves_no_run_of_it_in_the_error(
    quoting: str,
) -> None:
    backend = OpenAIBackend("m", base_url=quoting, api_key=KEY)

    error = refused(backend)
    assert error.kind == "client_error"
    if error.status == 401:  # the server's message is not shown at all
        assert "the server refused the API key" in str(error)
    else:
        assert "Incorrect API key provided" in str(error)
    assert not _holds_a_run(str(error), KEY)
    assert "SECRET" not in str(error)
