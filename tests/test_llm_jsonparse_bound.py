"""The span scan reads a bounded number of characters whatever the answer's length.

An answer of 4 MiB of opening brackets (as much as the OpenAI backend reads) took about
a minute of CPU to find no JSON in, within a budget linear in its length, after the
attempt's deadline and with the event loop serving nothing else. The scan now stops at
``SCAN_STEPS_MAX`` characters read; answers up to one panel field are scanned as before.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dissensus.llm.jsonparse as jp
from dissensus.io.limits import MAX_FIELD_CHARS
from dissensus.llm import ChatRequest, ClientSettings, FunctionBackend, Message, ModelClient
from dissensus.llm.base import StructuredOutputError
from dissensus.llm.jsonparse import JSONExtractError, extract_json


class _Counting(str):
    reads = 0

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int):
            _Counting.reads += 1
        return str.__getitem__(self, key)


def test_a_long_answer_of_brackets_is_scanned_within_the_fixed_budget() -> None:
    _Counting.reads = 0
    text = "[" * 200_000 + ' {"decision": "B"}'
    list(jp._balanced_spans(_Counting(text)))
    assert _Counting.reads <= jp.SCAN_STEPS_MAX


def test_the_fixed_budget_leaves_a_field_long_answer_as_it_was() -> None:
    assert jp.SCAN_STEPS_PER_CHAR * MAX_FIELD_CHARS + jp.SCAN_STEPS_BASE <= jp.SCAN_STEPS_MAX


@pytest.mark.parametrize("unit", ["[", "{", '{"', "[" * 200 + "x" + "]" * 200])
def test_four_mebibytes_of_hostile_text_take_seconds_not_minutes(unit: str) -> None:
    text = unit * (4 * 1024 * 1024 // len(unit))
    started = time.perf_counter()
    with pytest.raises(JSONExtractError):
        extract_json(text)
    assert time.perf_counter() - started < 15  # it took 30 to 70 seconds


def test_the_client_fails_such_an_answer_quickly() -> None:
    from pydantic import BaseModel

    class Verdict(BaseModel):
        decision: str

    answer = "[" * (4 * 1024 * 1024)
    client = ModelClient(
        FunctionBackend(lambda request, mode: answer), settings=ClientSettings(max_reasks=0)
    )
    started = time.perf_counter()
    with pytest.raises(StructuredOutputError):
        client.chat_sync(ChatRequest(messages=[Message(role="user", content="q")]), schema=Verdict)
    client.close()
    assert time.perf_counter() - started < 15


@settings(max_examples=200, deadline=None)
@given(
    before=st.text(alphabet="ab ,:.\n", max_size=60),
    value=st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=4),
    trailing=st.booleans(),
)
def test_answers_with_and_without_trailing_commas_are_read(
    before: str, value: dict[str, Any], trailing: bool
) -> None:
    body = json.dumps(value)
    if trailing and value:
        body = body[:-1] + ",}"
    assert extract_json(f"{before} {body} done") == value
