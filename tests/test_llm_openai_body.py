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
