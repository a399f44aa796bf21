"""JSON written for people or files carries no raw character a terminal acts on.

JSON's own escaping stops at U+001F, so ``--json`` output, ``runs export`` and the
``--output`` files passed DEL, the C1 controls (U+009B is a terminal's CSI, U+009D its
OSC) and the bidi and zero-width characters of an agent's text through raw: a panel id
could clear the screen of whoever ran ``decide --json`` or ``runs export``, or reorder
what they read. Every such text now writes them as ``\\u`` escapes
(:func:`dissensus.quoting.json_shown`): still valid JSON, decoding to the same value.
The journal's own text (hashed) is not changed.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.cli.common import print_json
from dissensus.io import fastjson
from dissensus.io.jsonl import Reject, write_jsonl_line
from dissensus.quoting import HIDDEN_IN_JSON, INVISIBLE, json_shown
from pipeline_cases import panel, write_jsonl

HOSTILE_ID = "\u009b2J\u009d8;;http://evil\u009cX\u2066\u202eabc\x7f\u200b\U000e0061"

# Text drawn from everywhere, with the characters that matter drawn often.
_HIDDEN = st.sampled_from(
    [
        "\x7f",
        "\x80",
        "\x9b",
        "\x9d",
        "\x9f",
        "\u00ad",
        "\u061c",
        "\u200b",
        "\u200d",
        "\u2028",
        "\u2029",
        "\u202e",
        "\u2066",
        "\ufeff",
        "\ufe0f",
        "\U000e0001",
        "\U000e0061",
        "\U000e01ef",
        "\U0001d173",
        "\\",
        '"',
        "\n",
        "\x1b",
    ]
)
_TEXT = st.lists(st.one_of(_HIDDEN, st.characters()), max_size=12).map("".join)
_JSON: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)
_OBJECT = st.dictionaries(_TEXT, _JSON, max_size=5)


def _no_raw(text: str) -> None:
    assert HIDDEN_IN_JSON.search(text) is None, ascii(text)
    # Every character of INVISIBLE a JSON text holds raw is its own whitespace.
    assert {c for c in INVISIBLE.findall(text)} <= {"\n"}, ascii(text)


def test_the_set_is_invisible_but_the_c0_controls() -> None:
    for code in range(0x110000):
        char = chr(code)
        hidden = HIDDEN_IN_JSON.match(char) is not None
        assert hidden == (INVISIBLE.match(char) is not None and code >= 0x20), hex(code)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(value=_JSON, indent=st.sampled_from([None, 2]))
def test_shown_json_decodes_to_the_same_value_with_nothing_raw(
    value: Any, indent: int | None
) -> None:
    text = json_shown(json.dumps(value, ensure_ascii=False, indent=indent))
    assert json.loads(text) == value
    _no_raw(text)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(record=_OBJECT)
def test_every_writer_of_json_lines_escapes(record: dict[str, Any]) -> None:
    handle = io.StringIO()
    write_jsonl_line(handle, record)
    for text in (handle.getvalue(), fastjson.dumps(record), fastjson.dumps_line(record)):
        assert text.count("\n") <= 1
        assert json.loads(text) == record
        _no_raw(text)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(record=_OBJECT)
def test_print_json_escapes(record: dict[str, Any]) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_json(record)
    text = out.getvalue()
    assert json.loads(text) == record
    _no_raw(text)


def test_a_model_line_is_escaped_and_reads_back() -> None:
    reject = Reject(file=HOSTILE_ID, line=3, field=HOSTILE_ID, message="bad", raw=HOSTILE_ID)
    handle = io.StringIO()
    write_jsonl_line(handle, reject)
    text = handle.getvalue()
    _no_raw(text)
    assert "\\u009b2J\\u009d8" in text and "\\udb40\\udc61" in text
    assert Reject.model_validate_json(text) == reject


def test_text_without_such_characters_is_returned_as_it_is() -> None:
    for text in ('{"a":"plain"}', '{"a":"caf\u00e9 \u4e2d \U0001f600"}', "[\n  1\n]"):
        assert json_shown(text) is text


def test_commands_write_json_escaped_and_the_journal_keeps_the_value(tmp_path: Path) -> None:
    same = "Option 1 states the refund window clearly."
    inp = write_jsonl(
        tmp_path / "in.jsonl", [panel(HOSTILE_ID, ["1", "2"], reasoning=[same, same])]
    )
    policy = tmp_path / "pol.yaml"
    policy.write_text("reading:\n  similarity: tfidf\n", encoding="utf-8")
    journal = tmp_path / "j.db"
    out = tmp_path / "out.jsonl"

    res = cli("decide", inp, "--policy", policy, "--journal", journal, "--json", "--output", out)
    assert res.code == 0, res.err
    outputs = {"decide --output": out.read_text(encoding="utf-8")}
    res = cli("decide", inp, "--policy", policy, "--journal", journal, "--json")
    assert res.code == 0, res.err
    outputs["decide --json"] = res.out
    run_id = json.loads(res.out.splitlines()[0])["review_id"].split(".")[0]
    for args in (
        ("runs", "show", run_id, "--json"),
        ("runs", "list", "--json"),
        ("runs", "export", run_id),
        ("review", "list", "--json"),
    ):
        res = cli(*args, "--journal", journal)
        assert res.code == 0, (args, res.err)
        outputs[" ".join(args[:2])] = res.out
    res = cli("route", inp, "--similarity", "tfidf", "--json")
    assert res.code == 0, res.err
    outputs["route --json"] = res.out

    for name, text in outputs.items():
        _no_raw(text)
        if name == "runs list":  # runs, not cases: no panel id
            continue
        assert "\\u009b2J\\u009d8;;http://evil\\u009cX\\u2066\\u202eabc" in text, name
    for name in ("decide --output", "decide --json", "review list", "route --json"):
        first = json.loads(outputs[name].splitlines()[0])
        assert first["id"] == HOSTILE_ID, name
    assert any(
        HOSTILE_ID in json.dumps(json.loads(line), ensure_ascii=False)
        for line in outputs["runs export"].splitlines()
    )
    # The journal holds the value as it came (its text is hashed): the run still verifies.
    res = cli("runs", "verify", run_id, "--journal", journal)
    assert res.code == 0, res.err + res.out
