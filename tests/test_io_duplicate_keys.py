"""A key written twice in one object of a JSONL line is a reject naming its path.

Every reader of input lines (route, decide, vote, calibrate...) rejects such a line as
a JSON file is refused (``outputs.0.decision: duplicate key``), whichever tier would
have parsed it; the other lines are still read, and the command exits 3.

The fast tiers do not parse a line twice to find out: they compare the keys their
parser built with the keys written (:func:`dissensus.io.jsontext.may_repeat_key`) and
parse again only when the text may hold more. Properties, on JSON text written with
random whitespace around every token and random escapes (``\\"``, ``\\u0022``,
``\\u003a``, surrogate pairs) in keys and strings holding quotes and colons: a repeated
key is always found and named, and no line without one is refused or read differently.
"""

from __future__ import annotations

import copy
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.io import jsontext
from dissensus.io.jsonl import Reject, _parse_reference, model_keys, parse_line
from dissensus.io.jsontext import (
    check_unique_keys,
    count_keys,
    duplicate_key,
    may_repeat_key,
    repeats_key,
)
from dissensus.io.views import PanelView, decode_panel_view, parse_panel_view
from dissensus.types import Panel, VoteCase
from panel_lines import panel_doc
from pipeline_cases import panel, write_jsonl

# Examples in the suite; the full count under DISSENSUS_SOAK=1 (`make test-soak`).
SOAK = os.environ.get("DISSENSUS_SOAK") == "1"

# --- JSON text written by hand: every whitespace and escape a parser accepts -----------

TRICKY = ['"', ":", '":', '" :', '\\":', "\\", "/", " ", "\t", "\n", "a", "\u00e9", "\U0001f600"]
"""Pieces of keys and strings: quotes and colons, as a key's end looks."""
TEXT = st.lists(st.sampled_from(TRICKY), max_size=4).map("".join)
SPACE = ["", "", "", " ", "\t", "  ", " \t "]
LINE_SPACE = [*SPACE, "\n", "\r\n"]


@dataclass
class Obj:
    """A JSON object as written: its pairs in order, a key maybe twice."""

    pairs: list[tuple[str, Any]]


def _object(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Obj]:
    pairs = st.lists(st.tuples(TEXT, children), max_size=4, unique_by=lambda kv: kv[0])
    return pairs.map(Obj)


SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT
TREES = st.recursive(
    SCALARS, lambda c: st.lists(c, max_size=3) | _object(c), max_leaves=12
) | _object(SCALARS)


class Writer:
    """JSON text of a tree, with random whitespace and random escapes."""

    def __init__(self, seed: int, spaces: list[str] = SPACE) -> None:
        self.rnd = random.Random(seed)
        self.spaces = spaces

    def ws(self) -> str:
        return self.rnd.choice(self.spaces)

    def string(self, text: str) -> str:
        out = []
        for ch in text:
            code = ord(ch)
            if code > 0xFFFF:
                hi, lo = divmod(code - 0x10000, 0x400)
                pair = f"\\u{0xD800 + hi:04x}\\u{0xDC00 + lo:04X}"
                out.append(self.rnd.choice([ch, pair]))
                continue
            forms = [f"\\u{code:04x}", f"\\u{code:04X}"]
            if ch == '"':
                forms.append('\\"')
            elif ch == "\\":
                forms.append("\\\\")
            elif ch == "/":
                forms += ["/", "\\/"]
            elif ch == "\n":
                forms.append("\\n")
            elif ch == "\t":
                forms.append("\\t")
            else:
                forms += [ch, ch]
            out.append(self.rnd.choice(forms))
        return '"' + "".join(out) + '"'

    def write(self, value: Any) -> str:
        ws = self.ws
        if isinstance(value, Obj):
            items = [
                f"{ws()}{self.string(k)}{ws()}:{ws()}{self.write(v)}{ws()}" for k, v in value.pairs
            ]
            return "{" + (",".join(items) or ws()) + "}"
        if isinstance(value, list):
            return "[" + (",".join(f"{ws()}{self.write(v)}{ws()}" for v in value) or ws()) + "]"
        if isinstance(value, str):
            return self.string(value)
        return json.dumps(value)


def _objects(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Obj]]:
    """The objects of a tree in document order, with their paths."""
    out: list[tuple[tuple[Any, ...], Obj]] = []
    if isinstance(value, Obj):
        out.append((path, value))
        for k, v in value.pairs:
            out += _objects(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _objects(v, (*path, i))
    return out


def _dotted(path: tuple[Any, ...], key: str) -> str:
    """A path as the reject names it (as :class:`jsontext._Strict` joins it)."""
    out = ""
    for part in (*path, key):
        out = f"{out}.{part}" if out else str(part)
    return out


def _truth(raw: str) -> bool:
    """Whether an object of ``raw`` holds a key twice, by a parser of its own."""
    found = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found.append(len({k for k, _ in pairs}) != len(pairs))
        return dict(pairs)

    json.loads(raw, object_pairs_hook=hook)
    return any(found)


def _inject(tree: Any, data: st.DataObject) -> str:
    """Write one key of one object of ``tree`` twice (in place); the path it is named by."""
    path, obj = data.draw(st.sampled_from(_objects(tree)))
    if obj.pairs and data.draw(st.booleans()):
        key, value = data.draw(st.sampled_from(obj.pairs))
        value = data.draw(st.sampled_from([copy.deepcopy(value), 7, "zz"]))
    else:
        key, value = data.draw(TEXT), None
        if any(k == key for k, _ in obj.pairs):
            value = 7
        else:
            obj.pairs.append((key, "first"))
    obj.pairs.insert(data.draw(st.integers(0, len(obj.pairs))), (key, value))
    return _dotted(path, key)


@settings(max_examples=1500 if SOAK else 400, deadline=None, derandomize=True)
@given(tree=TREES, seed=st.integers(0, 2**32), inject=st.booleans(), data=st.data())
def test_a_repeated_key_is_always_found_and_no_other_text_is_refused(
    tree: Any, seed: int, inject: bool, data: st.DataObject
) -> None:
    named = _inject(tree, data) if inject and _objects(tree) else None
    raw = Writer(seed, LINE_SPACE).write(tree)
    parsed = json.loads(raw)
    assert _truth(raw) is (named is not None)
    keys = count_keys(parsed)
    event(f"repeated: {named is not None}; counted: {not may_repeat_key(raw, keys)}")
    if named is None:
        assert not repeats_key(raw, keys)
        assert duplicate_key(raw) is None
        check_unique_keys(parsed, raw)
        return
    assert may_repeat_key(raw, keys) and repeats_key(raw, keys)
    error = duplicate_key(raw)
    assert error is not None and (error.field, error.message) == (named, "duplicate key")
    with pytest.raises(jsontext.JsonTextError) as info:
        check_unique_keys(parsed, raw)
    assert info.value.field == named


def test_whitespace_and_escaped_quotes_around_colons_are_counted_as_the_parser_reads_them() -> None:
    cases = {
        '{"a" :1,"a"\t: 2}': True,
        '{"a"\n:1,"b" \r\n :{"a":1}}': False,
        '{"a":"\\": \\":","b":1}': False,  # more ": than keys, none repeated
        '{"a\\":":1,"a\\u0022:":2}': True,  # the same key, escaped two ways
        '{"\\u0061":1,"a":2}': True,
        '{"a":{"b":1},"c":{"b":1}}': False,  # one key in two objects is no repeat
    }
    for raw, twice in cases.items():
        assert repeats_key(raw, count_keys(json.loads(raw))) is twice, raw


# --- the tiers of the line reader ---------------------------------------------------------


def _votes_doc() -> dict[str, Any]:
    vote = {"agent": "a", "answer": "1", "evidence_source": "kb", "evidence_present": True}
    return {
        "id": "c",
        "gold": "1",
        "meta": {"k": [1, {"m": "x"}]},
        "votes": [vote, {**vote, "agent": "b", "confidence": 0.5, "family": None}],
    }


def _tree(value: Any) -> Any:
    if isinstance(value, dict):
        return Obj([(k, _tree(v)) for k, v in value.items()])
    if isinstance(value, list):
        return [_tree(v) for v in value]
    return value


@st.composite
def _record(draw: st.DrawFn) -> tuple[type[Panel] | type[VoteCase], dict[str, Any]]:
    """A valid panel or vote case with tricky text, explicit defaults and extra fields."""
    if draw(st.booleans()):
        return VoteCase, _votes_doc()
    doc = panel_doc()
    first, second = doc["outputs"]
    for out in doc["outputs"]:
        out["reasoning"] = draw(TEXT)
    doc["meta"][draw(TEXT)] = draw(TEXT)
    if draw(st.booleans()):  # fields at their defaults, written
        second.update(confidence=None, family=None, values=None, evidence=None, reask=None)
        first["evidence"][0]["present"] = True
    if draw(st.booleans()):  # extra fields, one named as a panel field
        first[draw(st.sampled_from(["meta", "note"]))] = {"k": {"j": draw(TEXT)}, "l": [{}]}
        doc["extra"] = {draw(TEXT): [1, {"x": None}]}
    if draw(st.booleans()):
        doc["meta"]["nested"] = {"a": {"b": [{"c": 1}]}}
    if draw(st.booleans()):
        doc["meta"] = {}
    return Panel, doc


@settings(max_examples=800 if SOAK else 200, deadline=None, derandomize=True)
@given(record=_record(), seed=st.integers(0, 2**32), inject=st.booleans(), data=st.data())
def test_every_tier_rejects_a_repeated_key_and_reads_every_other_line_as_before(
    record: tuple[type[Panel] | type[VoteCase], dict[str, Any]],
    seed: int,
    inject: bool,
    data: st.DataObject,
) -> None:
    model, doc = record
    tree = _tree(doc)
    named = _inject(tree, data) if inject else None
    line = Writer(seed).write(tree)
    want = _parse_reference(model, line, file="in.jsonl", line=5)
    counted = not may_repeat_key(line, count_keys(json.loads(line)))
    event(f"repeated: {named is not None}; counted: {counted}")
    got = parse_line(model, line + "\n", file="in.jsonl", line=5)
    views = [parse_panel_view(line + "\n", file="in.jsonl", line=5)] if model is Panel else []
    if named is not None:
        assert isinstance(want, Reject)
        assert (want.file, want.line, want.field, want.message) == (
            "in.jsonl",
            5,
            named,
            "duplicate key",
        )
        assert got == want
        assert all(view == want for view in views)
        return
    assert isinstance(want, model), want
    assert isinstance(got, model) and repr(got) == repr(want)
    assert model_keys(got) == count_keys(json.loads(line))  # exact for the models read
    for view in views:
        assert not isinstance(view, Reject)
        assert view.id == want.id and [o.decision for o in view.outputs] == [
            o.decision
            for o in want.outputs  # type: ignore[union-attr]
        ]


def test_a_field_written_at_its_default_costs_the_view_tier_a_second_parse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The view cannot tell ``"confidence": null`` from a missing confidence: such a line
    is parsed again to look for a repeated key, and is still read as a view."""
    again: list[str] = []
    exact = jsontext.duplicate_key
    monkeypatch.setattr(jsontext, "duplicate_key", lambda raw: again.append(raw) or exact(raw))
    doc = panel_doc()
    del doc["outputs"][0]["evidence"][0]["present"]
    assert isinstance(decode_panel_view(json.dumps(doc)), PanelView)
    assert again == []
    for default in ({"confidence": None}, {"evidence": [{"source": "s", "present": True}]}):
        written = copy.deepcopy(doc)
        written["outputs"][1].update(default)
        line = json.dumps(written)
        assert isinstance(decode_panel_view(line), PanelView)
        assert again == [line]
        again.clear()
        twice = line.replace('"agent": "b"', '"agent": "b", "agent": "b"')
        assert decode_panel_view(twice) is None
        reject = parse_panel_view(twice, file="f", line=1)
        assert isinstance(reject, Reject) and reject.field == "outputs.1.agent"
        again.clear()


def test_ordinary_lines_are_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Colons in the text, spaces around them: the counts settle it without a second parse."""

    def never(raw: str) -> None:
        raise AssertionError("parsed again")

    monkeypatch.setattr(jsontext, "duplicate_key", never)
    doc = panel_doc()
    del doc["outputs"][0]["evidence"][0]["present"]  # at its default: see the test above
    doc["outputs"][0]["reasoning"] = 'Step 1: option "1" is right: it says so.'
    doc["meta"]["when"] = "12:30"
    for separators in ((", ", ": "), (",", ":"), (" , ", " : ")):
        line = json.dumps(doc, separators=separators)
        assert isinstance(parse_line(Panel, line, file="f", line=1), Panel)
        assert not isinstance(parse_panel_view(line, file="f", line=1), Reject)
    votes = json.dumps(_votes_doc())
    assert isinstance(parse_line(VoteCase, votes, file="f", line=1), VoteCase)


# --- the commands ---------------------------------------------------------------------------

DOUBLED_DECISION = (
    '{"id":"k","outputs":[{"agent":"a","decision":"1","decision":"2","reasoning":"r"},'
    '{"agent":"b","decision":"2","reasoning":"s"}]}'
)
DOUBLED_GOLD = (
    '{"id":"k2","meta":{"gold":"1","gold":"2"},"outputs":[{"agent":"a","decision":"1",'
    '"reasoning":"r"},{"agent":"b","decision":"2","reasoning":"s"}]}'
)


def _rejected(err: str, path: Path) -> list[str]:
    return [x for x in err.splitlines() if x.startswith(f"rejected {path}:")]


@pytest.mark.parametrize("command", ["route", "decide", "calibrate-thresholds"])
def test_panel_readers_reject_the_line_and_read_the_others(tmp_path: Path, command: str) -> None:
    src = write_jsonl(
        tmp_path / "dup.jsonl", [DOUBLED_DECISION, DOUBLED_GOLD, panel("g", ["1", "1"])]
    )
    extra: list[str | Path] = {
        "route": ["--json"],
        "decide": ["--json", "--journal", tmp_path / "j.sqlite"],
        "calibrate-thresholds": ["--quantile", "0.5"],
    }[command]
    res = cli(command, src, "--similarity", "tfidf", *extra)
    assert res.code == 3, res.err
    assert _rejected(res.err, src) == [
        f"rejected {src}:1: field 'outputs.0.decision': duplicate key",
        f"rejected {src}:2: field 'meta.gold': duplicate key",
    ]
    if command != "calibrate-thresholds":
        records = [json.loads(x) for x in res.out.splitlines() if x.startswith("{")]
        assert [(r["id"], r["line"]) for r in records] == [("g", 3)]


def test_vote_case_readers_reject_the_line_and_read_the_others(tmp_path: Path) -> None:
    doc = _votes_doc()
    good = json.dumps(doc)
    twice = good.replace('"gold": "1"', '"gold": "2", "gold": "1"', 1)
    assert twice != good
    src = write_jsonl(tmp_path / "votes.jsonl", [twice, good])
    for args in (["vote", src, "--json"], ["calibrate", src, "--out", tmp_path / "cal.json"]):
        res = cli(*args)
        assert res.code == 3, res.err
        assert _rejected(res.err, src) == [f"rejected {src}:1: field 'gold': duplicate key"]
    res = cli("vote", src, "--json")
    assert [json.loads(x)["line"] for x in res.out.splitlines()] == [2]
