"""Small helpers that were written more than once, now one each: the rejects file of
``dissensus route`` and ``dissensus guard`` (:func:`dissensus.cli.common.reject_sink`),
the bracket count that bounds a text's nesting before its value is walked (the JSONL
reader, its fast tier, the MCP server and both HTTP doors:
:func:`dissensus.io.jsontext.opening_brackets`), and the ``send`` that notes a started
response in the service's body and time limits."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.cli.common import reject_sink
from dissensus.errors import DissensusError
from dissensus.io.jsonl import Reject
from dissensus.io.jsontext import json_depth, opening_brackets
from dissensus.serve.limits import _StartWatch


def test_a_rejects_file_that_cannot_be_written_is_one_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "rejects.jsonl"
    with pytest.raises(DissensusError) as refused:
        reject_sink(str(missing))
    assert str(refused.value).startswith(f"cannot write the rejects file {missing}: ")
    written = tmp_path / "rejects.jsonl"
    with reject_sink(str(written)) as sink:
        sink.add(Reject(file="in.jsonl", line=3, field="id", message="missing", raw="{}"))
    assert sink.count == 1 and json.loads(written.read_text())["line"] == 3


_JSON = st.recursive(
    st.none() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(_JSON)
def test_the_bracket_count_bounds_the_depth(value: object) -> None:
    text = json.dumps(value)
    assert opening_brackets(text) >= json_depth(value)
    assert opening_brackets("[{") == 2 and opening_brackets('"a"') == 0


def test_the_send_notes_only_a_started_response() -> None:
    sent: list[object] = []

    async def send(msg: dict[str, object]) -> None:
        sent.append(msg["type"])

    async def run() -> tuple[bool, bool]:
        watch = _StartWatch(send)
        await watch({"type": "http.response.trailers"})
        before = watch.started
        await watch({"type": "http.response.start", "status": 200})
        return before, watch.started

    assert asyncio.run(run()) == (False, True)
    assert sent == ["http.response.trailers", "http.response.start"]
