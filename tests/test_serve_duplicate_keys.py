"""A key written twice in one JSON object of a request body is refused naming its path,
on every route that takes a body and on the chat door, as a JSONL line of the command
line is: the last value was kept, so ``{"decision": "1", "decision": "2"}`` made a split
panel unanimous over HTTP while ``dissensus decide`` rejected the same record."""

from __future__ import annotations

from pathlib import Path

import pytest

from serve_helpers import auth, client_for, settings

SPLIT = (
    '{"id": "k", "outputs": [{"agent": "a", "decision": "1", "decision": "2", "reasoning": "r"},'
    ' {"agent": "b", "decision": "2", "reasoning": "s"}]}'
)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/decide", SPLIT, "outputs.0.decision"),
        ("/v1/decide", f"[{SPLIT}]", "0.outputs.0.decision"),
        ("/v1/route", SPLIT, "outputs.0.decision"),
        # A byte order mark is dropped, never the check (it made the check parse fail).
        ("/v1/decide", "\ufeff" + SPLIT, "outputs.0.decision"),
        ("/v1/route", "\ufeff" + SPLIT, "outputs.0.decision"),
    ],
)
async def test_a_body_with_a_key_written_twice_is_refused_naming_it(
    tmp_path: Path, path: str, body: str, field: str
) -> None:
    async with client_for(settings(tmp_path)) as client:
        headers = {**auth("adm"), "Content-Type": "application/json"}
        refused = await client.post(path, content=body.encode(), headers=headers)
        assert refused.status_code == 400, refused.text
        assert refused.json() == {"error": f"{field}: duplicate key", "field": field}
        # The same record without the repeat is served.
        fine = body.replace('"decision": "1", ', "")
        served = await client.post(path, content=fine.encode(), headers=headers)
        assert served.status_code == 200, served.text


def test_the_chat_door_refuses_a_key_written_twice_as_openai_would_name_it() -> None:
    from dissensus.panels.shapes import ChatError
    from dissensus.serve.chat import _json

    raw = b'{"model": "m", "model": "n", "messages": [{"role": "user", "content": "hi"}]}'
    with pytest.raises(ChatError) as refused:
        _json(raw)
    assert (refused.value.status, refused.value.param) == (400, "model")
    assert refused.value.message == "model: duplicate key"
    assert _json(raw.replace(b'"model": "n", ', b""))["model"] == "m"


SURROGATE_KEY = '{"id": "k", "\\ud800": 1, "\\ud800": 2}'
"""A key holding a lone surrogate (``\\ud800`` in the JSON text), written twice."""


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/v1/decide", "/v1/route", "/v1/vote"])
async def test_a_key_no_text_can_hold_written_twice_is_named_escaped(
    tmp_path: Path, path: str
) -> None:
    """The refusal named the key as it was, a lone surrogate, which no UTF-8 answer can
    carry: the service answered 500 ("internal error") and logged a traceback."""
    async with client_for(settings(tmp_path)) as client:
        headers = {**auth("adm"), "Content-Type": "application/json"}
        refused = await client.post(path, content=SURROGATE_KEY.encode(), headers=headers)
        assert refused.status_code == 400, refused.text
        assert refused.json() == {"error": "\\ud800: duplicate key", "field": "\\ud800"}


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["/v1/decide", "/v1/route"])
async def test_a_bad_key_of_the_outer_object_is_named_by_the_root(
    tmp_path: Path, path: str
) -> None:
    """A key holding a lone surrogate in the body's own object was answered with the
    reason as the field (``"field": "key not valid Unicode text"``) and the rest of it
    as the error; a key deeper in was named by the object holding it."""
    body = (
        '{"id": "k", "outputs": [{"agent": "a", "decision": "1"},'
        ' {"agent": "b", "decision": "2"}], "\\ud800": 1}'
    )
    async with client_for(settings(tmp_path)) as client:
        headers = {**auth("adm"), "Content-Type": "application/json"}
        refused = await client.post(path, content=body.encode(), headers=headers)
        assert refused.status_code == 422, refused.text
        assert refused.json() == {
            "error": "key not valid Unicode text: a lone surrogate (U+D800) at character 1",
            "field": "<root>",
        }
