"""The request body the OpenAI-compatible backend sends: JSON bytes written once by
``orjson`` and sent by the SDK as they are, the same document the SDK's own writer made;
a body ``orjson`` cannot write is left to the SDK."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from dissensus.llm import OpenAIBackend
from dissensus.llm.base import ChatRequest, Message

ANSWER = b'{"choices": [{"message": {"role": "assistant", "content": "7"}}]}'


async def _sent(request: ChatRequest, handed: list[Any]) -> bytes:
    """The raw body a loopback server received for ``request``; ``handed`` gets what the
    backend handed the SDK as the body."""
    bodies: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        bodies.append(await reader.readexactly(length))
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(ANSWER)).encode()
            + b"\r\n\r\n"
            + ANSWER
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    backend = OpenAIBackend("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
    options = backend._options

    def noting(client: Any, body: Any, headers: Any) -> Any:
        handed.append(body)
        return options(client, body, headers)

    backend._options = noting  # type: ignore[method-assign]
    try:
        got = await backend.send(request, json_mode="none")
    finally:
        await backend.aclose()
        server.close()
        await server.wait_closed()
    assert got.text == "7"
    return bodies[0]


def test_the_body_is_json_bytes_of_the_same_document() -> None:
    text = "Tom a 3 pommes déjà ✓ — combien ?"
    request = ChatRequest(
        messages=[Message(role="user", content=text)], temperature=0.5, seed=7, max_tokens=5
    )
    handed: list[Any] = []
    raw = asyncio.run(_sent(request, handed))
    expected = {
        "model": "m",
        "messages": [{"role": "user", "content": text}],
        "temperature": 0.5,
        "seed": 7,
        "max_tokens": 5,
    }
    assert json.loads(raw) == expected
    assert text.encode() in raw  # UTF-8, compact, as the SDK's own writer sends it
    assert b", " not in raw and b": " not in raw
    assert isinstance(handed[0], bytes) and handed[0] == raw


@pytest.mark.parametrize("seed", [2**70, -(2**70)])
def test_a_body_orjson_cannot_write_is_written_by_the_sdk(seed: int) -> None:
    request = ChatRequest(messages=[Message(role="user", content="q")], seed=seed)
    handed: list[Any] = []
    raw = asyncio.run(_sent(request, handed))
    assert json.loads(raw)["seed"] == seed
    assert isinstance(handed[0], dict)


@pytest.mark.parametrize("temperature", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_number_is_left_to_the_sdk_which_refuses_it(temperature: float) -> None:
    """``orjson`` writes ``NaN`` and the infinities as ``null``, which the server would
    read as "no temperature": the body goes to the SDK's writer, which refuses it."""
    from dissensus.llm.openai_backend import _encoded

    body = {"model": "m", "messages": [{"role": "user", "content": "null"}]}
    assert isinstance(_encoded(body), bytes)  # a null in the text alone: still bytes
    assert _encoded({**body, "temperature": temperature}) == {**body, "temperature": temperature}
    request = ChatRequest(messages=[Message(role="user", content="q")], temperature=temperature)
    with pytest.raises(Exception, match="JSON compliant"):
        asyncio.run(_sent(request, []))


def test_the_public_post_of_another_release_is_given_the_body_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the SDK has no options to copy (another release), ``client.post`` is given
    the body as a dict for its own writer: a release before bytes bodies would send bytes
    as a JSON string."""
    handed: list[Any] = []
    monkeypatch.setattr(OpenAIBackend, "_options", lambda self, c, b, h: (None, object))

    async def post(self: Any, path: str, **kwargs: Any) -> Any:
        handed.append(kwargs["body"])
        raise RuntimeError("stop")

    from openai import AsyncOpenAI

    monkeypatch.setattr(AsyncOpenAI, "post", post)
    backend = OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api_key="unused")
    request = ChatRequest(messages=[Message(role="user", content="q")])
    with pytest.raises(Exception):  # noqa: B017 - the stop above, however it is wrapped
        asyncio.run(backend.send(request, json_mode="none"))
    assert handed and isinstance(handed[0], dict) and handed[0]["model"] == "m"
