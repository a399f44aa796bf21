"""Malformed messages to ``dissensus mcp`` are answered, never dropped without a word.

The SDK's stdio reader dropped a line that is not a valid JSON-RPC message (a DEBUG log
line only), and took a request whose id is neither a string nor an integer for a
notification, which it never answers: the client waited forever. The server's reader
refuses them first: a JSON-RPC error under the request's id (``id: null`` when none can
be read), one line on stderr, and a valid message passed on as it came.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_cases import panel

pytest.importorskip("mcp")

ROOT = Path(__file__).resolve().parents[1]
INIT = {"protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}  # fmt: skip


def _answer(line: str) -> tuple[Any, int] | None:
    """The id and code the server answers ``line`` with (``None``: passed on, or dropped)."""
    from dissensus.integrations.mcp.messages import _refusal

    refusal = _refusal(line + "\n")
    answer = refusal.answer() if refusal is not None else None
    return None if answer is None else (answer.id, answer.error.code)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


BIG = "1" + "0" * 5000
REFUSED = [
    ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}', (1, -32602)),
    ('{"id":3,"method":"tools/list"}', (3, -32600)),
    ('{"jsonrpc":"2.0","id":4,"method":"tools/list",', (None, -32700)),
    ("", None),  # a blank line: no message
    ("not json", (None, -32700)),
    ('{"jsonrpc":"2.0","id":8.5,"method":"tools/list"}', (None, -32600)),
    ('{"jsonrpc":"2.0","id":1e2,"method":"tools/list"}', (None, -32600)),
    ('{"jsonrpc":"2.0","id":{},"method":"tools/list"}', (None, -32600)),
    ('{"jsonrpc":"2.0","id":null,"method":"tools/list"}', (None, -32600)),
    ('{"jsonrpc":"2.0","id":true,"method":"tools/list"}', (None, -32600)),
    (f'{{"jsonrpc":"2.0","id":{BIG},"method":"tools/list"}}', (None, -32600)),
    ('[{"jsonrpc":"2.0","id":9,"method":"tools/list"}]', (None, -32600)),
    ("[]", (None, -32600)),
    ("5", (None, -32600)),
    ('{"jsonrpc":"2.0","id":6}', (6, -32600)),
    ('{"jsonrpc":"2.0","id":6,"method":5}', (6, -32600)),
    ('{"jsonrpc":"2.0","id":"s","method":"x","params":"p"}', ("s", -32602)),
    ('{"jsonrpc":"1.0","id":6,"method":"x"}', (6, -32600)),
    (f'{{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{{"a":{BIG}}}}}', (10, -32602)),
    (f'{{"jsonrpc":"2.0","id":11,"method":"x","params":{{"a":{_nested(67)}}}}}', (11, -32602)),
    (f'{{"jsonrpc":"2.0","id":12,"method":"x","params":{{"a":{_nested(250)}}}}}', (12, -32602)),
    (f'{{"jsonrpc":"2.0","id":13,"method":"x","more":{_nested(250)}}}', (13, -32600)),
    (f'{{"jsonrpc":"2.0","id":14,"method":"x","params":{{"a":{_nested(5000)}}}}}', (None, -32600)),
    # a key written twice: the SDK would keep the last value
    (
        '{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"route",'
        '"arguments":{"panels":[{"id":"k","outputs":[{"agent":"a","decision":"1",'
        '"decision":"2","reasoning":"r"}]}]}}}',
        (15, -32602),
    ),
    ('{"jsonrpc":"2.0","id":16,"id":17,"method":"tools/list"}', (17, -32602)),
    # what waits for no answer: dropped (stderr only)
    ('{"jsonrpc":"2.0","method":"notifications/x","params":[1]}', None),
    ('{"method":"notifications/initialized"}', None),
    ('{"jsonrpc":"2.0","id":3,"result":[]}', None),
]
SERVED = [
    '{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
    '{"jsonrpc":"2.0","id":"x","method":"tools/list","params":null}',
    '  {"jsonrpc":"2.0","id":-1,"method":"no/such","params":{}}  ',
    f'{{"jsonrpc":"2.0","id":11,"method":"x","params":{{"a":{_nested(66)}}}}}',
    f'{{"jsonrpc":"2.0","id":13,"method":"x","more":{_nested(150)}}}',  # the SDK ignores it
    '{"jsonrpc":"2.0","method":"notifications/initialized"}',
    '{"jsonrpc":"2.0","id":3,"result":{}}',
    '{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"m"}}',
    '{"jsonrpc":"2.0","id":18,"method":"x","params":{"a":"k\\":v","b":{"a":1}}}',
]


@pytest.mark.parametrize(("line", "expected"), REFUSED)
def test_what_the_sdk_would_drop_is_answered_under_its_id(line: str, expected: Any) -> None:
    from dissensus.integrations.mcp.messages import _refusal

    assert _answer(line) == expected, line
    if line:
        refusal = _refusal(line + "\n")
        assert refusal is not None
        logged = refusal.log_line(answered=True)
        assert logged.startswith("error: ") and logged.count("\n") == 1, logged
        assert len(logged) < 300 and BIG not in logged, logged


@pytest.mark.parametrize("line", SERVED)
def test_a_valid_message_is_passed_on(line: str) -> None:
    from dissensus.integrations.mcp.messages import _refusal

    assert _refusal(line + "\n") is None


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=12,
)  # fmt: skip
_MEMBERS = {
    "jsonrpc": st.sampled_from(["2.0", "2", 2.0, None]),
    "id": st.one_of(
        st.integers(),
        st.text(max_size=4),
        st.floats(allow_nan=False),
        st.none(),
        st.booleans(),
        st.just({}),
        st.just([1]),
    ),
    "method": st.one_of(st.text(max_size=6), st.integers(), st.none()),
    "params": st.one_of(st.dictionaries(st.text(max_size=4), _JSON, max_size=3), _JSON),
    "result": _JSON,
    "error": st.one_of(st.fixed_dictionaries({"code": st.integers(), "message": st.text()}), _JSON),
}


@st.composite
def _messages(draw: st.DrawFn) -> str:
    """A message line: some of the members, each valid or not, or any JSON at all."""
    if draw(st.integers(0, 9)) == 0:
        return json.dumps(draw(_JSON))
    kept = draw(st.lists(st.sampled_from(sorted(_MEMBERS)), unique=True))
    return json.dumps({name: draw(_MEMBERS[name]) for name in kept})


@given(_messages())
@settings(max_examples=400)
def test_nothing_passed_on_is_dropped_or_misread_by_the_sdk(line: str) -> None:
    """Whatever the reader passes on, the SDK reads as the message it is: it validates,
    and a line with an ``id`` and a method is a request (the SDK took ``"id": 8.5`` for
    a notification, never answered); a request refused is answered."""
    from mcp.types import JSONRPCNotification, jsonrpc_message_adapter

    from dissensus.integrations.mcp.messages import _refusal

    refusal = _refusal(line + "\n")
    data = json.loads(line)
    if refusal is None:
        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
        assert not (isinstance(message, JSONRPCNotification) and "id" in data), line
    elif isinstance(data, dict) and "id" in data and "method" in data:
        answer = refusal.answer()
        assert answer is not None, line
        readable = isinstance(data["id"], int | str) and not isinstance(data["id"], bool)
        assert answer.id == (data["id"] if readable else None), line


def _read_messages(stream: IO[bytes], wanted: int, *, timeout: float) -> list[Any]:
    """The JSON-RPC messages a server wrote to ``stream`` (its stdout pipe), in order, once
    ``wanted`` of them are read, or when ``timeout`` seconds pass with nothing new (a
    request left unanswered) or the pipe ends; read off the descriptor, as
    ``test_integrations_mcp_bounds._read_answers`` does."""
    fd = stream.fileno()
    messages: list[Any] = []
    pending = b""
    while len(messages) < wanted:
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            break
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        messages += [json.loads(line) for line in lines if line.strip()]
    return messages


def test_dissensus_mcp_answers_every_malformed_request(tmp_path: Path) -> None:
    """The reviewer's session: ids 1, 3 and 4, an id of 8.5, ``{}`` or ``null``, a batch
    and an integer of 5,001 digits were not answered and stderr said nothing; each is
    answered (``id: null`` where no id can be read), with one stderr line each, and the
    call after them still is."""
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INIT}),
        '{"jsonrpc":"2.0","method":"notifications/initialized"}',
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}',
        '{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":5}}',
        '{"id":3,"method":"tools/list"}',
        '{"jsonrpc":"2.0","id":4,"method":"tools/list",',
        '{"jsonrpc":"2.0","id":8.5,"method":"tools/list"}',
        '{"jsonrpc":"2.0","id":{},"method":"tools/list"}',
        '{"jsonrpc":"2.0","id":null,"method":"tools/list"}',
        '[{"jsonrpc":"2.0","id":9,"method":"tools/list"}]',
        '{"jsonrpc":"2.0","method":"notifications/cancelled","params":[1]}',
        '{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"bound",'
        f'"arguments":{{"agents":{BIG},"rounds":1}}}}}}',
        '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"bound",'
        '"arguments":{"agents":2,"rounds":1}}}',
    ]
    server = subprocess.Popen(
        [sys.executable, "-m", "dissensus", "mcp", "--journal", "j.sqlite"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, cwd=tmp_path,
    )  # fmt: skip
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(("\n".join(lines) + "\n").encode())
    server.stdin.flush()
    messages = _read_messages(server.stdout, 11, timeout=240)  # generous: a loaded host
    if len(messages) < 11:
        server.kill()
    server.stdin.close()
    server.wait(timeout=60)
    assert server.stderr is not None
    err = server.stderr.read().decode()
    server.stdout.close()
    server.stderr.close()
    codes = [(m["id"], m["error"]["code"]) for m in messages if "error" in m]
    assert codes == [(1, -32602), (2, -32602), (3, -32600), (None, -32700), (None, -32600),
                     (None, -32600), (None, -32600), (None, -32600), (10, -32602)], messages  # fmt: skip
    assert messages[-1]["id"] == 5 and not messages[-1]["result"]["isError"], messages[-1]
    assert (
        "Invalid params: an integer of more than 4300 digits at params.arguments.agents"
        in (messages[-2]["error"]["message"])
    )
    logged = err.splitlines()
    assert len(logged) == 9, err  # the SDK answered id 2 itself
    assert "error: request '1': 'params' must be an object: answered as invalid parameters" in err
    assert "error: notification 'notifications/cancelled': 'params' must be an object: dropped" in (
        err
    )
    assert "with id null" in err and BIG not in err and 'tools/list",' not in err


async def _deep_route(tmp_path: Path) -> Any:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.shared.exceptions import MCPError

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "dissensus", "mcp"], cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    deep: Any = []
    for _ in range(250):
        deep = [deep]
    call = {"panels": [{**panel("deep", ["1", "1"]), "meta": {"a": deep}}], "similarity": "tfidf"}
    errlog = (tmp_path / "stderr.txt").open("w", encoding="utf-8")
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        with pytest.raises(MCPError) as refused:
            await session.call_tool("route", call)
        after = await session.call_tool("bound", {"agents": 2, "rounds": 1})
    errlog.close()
    return refused.value, after


def test_the_sdk_client_is_answered_on_a_message_nested_too_deep(tmp_path: Path) -> None:
    """The official client's ``call_tool`` hung on ``route`` with a ``meta`` nested 250
    levels (the SDK's reader dropped the message): it gets ``Invalid params`` naming the
    path, and the server serves on."""
    error, after = asyncio.run(asyncio.wait_for(_deep_route(tmp_path), timeout=120))
    assert error.error.code == -32602, error
    assert "JSON nested deeper than 68 levels at params.arguments.panels.0.meta.a" in str(error)
    assert not after.is_error
    logged = (tmp_path / "stderr.txt").read_text(encoding="utf-8")
    assert "answered as invalid parameters (-32602)" in logged, logged


def test_a_refusal_with_no_server_serving_says_it_was_not_answered(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Outside a serving server (no write stream to answer on) the stderr line says the
    request was not answered, rather than that it was."""
    from dissensus.integrations.mcp.transport import _refused

    assert _refused('{"id":3,"method":"tools/list"}\n')
    assert not _refused('{"jsonrpc":"2.0","id":3,"method":"tools/list"}\n')
    assert capsys.readouterr().err == (
        "error: request '3': 'jsonrpc' must be \"2.0\": not answered (the server is not serving)\n"
    )


def test_a_key_written_twice_is_refused_naming_its_path() -> None:
    """The SDK keeps the last of two values of one key: a doubled ``decision`` made a
    split panel unanimous through MCP while ``dissensus route`` rejected the line."""
    from dissensus.integrations.mcp.messages import _refusal

    line = (
        '{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"route",'
        '"arguments":{"panels":[{"id":"k","outputs":[{"agent":"a","decision":"1",'
        '"decision":"2","reasoning":"r"}]}]}}}'
    )
    refusal = _refusal(line + "\n")
    assert refusal is not None and refusal.ident == 15
    assert refusal.why == "params.arguments.panels.0.outputs.0.decision: duplicate key"
