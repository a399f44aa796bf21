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
