"""JSON files (calibration, acceptance, certificate, converter sources) are read strictly.

:func:`dissensus.io.jsontext.load_json_file` refuses a duplicate key, a non-finite number,
an integer too long to convert and nesting deeper than 64 levels, naming the file and
the field; every command reading such a file exits 2 with that one line. JSONL lines
keep their per-line rejects, from the same checks.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import Result, cli
from dissensus.errors import ConfigError
from dissensus.io.jsonl import Reject, parse_line
from dissensus.io.jsontext import MAX_DEPTH, JsonTextError, check_json_value, load_json_file
from dissensus.types import VoteCase
from pipeline_cases import panel, write_jsonl, write_policy
from test_convert_cli import _write_tiny
from test_guard_cli import _labelled_lines

REPO = Path(__file__).resolve().parent.parent
HUGE = "9" * 5000


def _refused(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_json_file(path, what="calibration")
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"cases": ' + HUGE + "}", "field 'cases': an integer of more than 4300 digits"),
        ('{"a": [1, {"b": -' + HUGE + "}]}", "field 'a.1.b': an integer of more than 4300"),
        (HUGE, "field '<root>': an integer of more than 4300"),
        ('{"floor": 0.1, "x": 1, "floor": 0.7}', "field 'floor': duplicate key"),
        ('{"s": [{"k": 1}, {"k": 2, "k": 3}]}', "field 's.1.k': duplicate key"),
        ('{"a": {"b": 1, "b": 2}, "a": 3}', "field 'a': duplicate key"),
        ('{"beta_star": NaN}', "field 'beta_star': must be a finite number"),
        ('{"s": [{"v": -Infinity}]}', "field 's.0.v': must be a finite number"),
        ('{"v": 1e999}', "field 'v': must be a finite number"),
        ('{"v": 1' + "0" * 400 + ".5}", "field 'v': must be a finite number"),
        ('{"t": "\\ud800"}', "field 't'"),
        ('{"a": ' + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "}", "nested deeper than 64"),
        ("[" * 100_000 + "]" * 100_000, "nested deeper than 64"),
        ('{"a": 1,}', "invalid JSON"),
    ],
)
def test_a_json_file_is_read_strictly(tmp_path: Path, text: str, needle: str) -> None:
    assert needle in _refused(tmp_path / "f.json", text)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 400), st.integers(-5, 400), st.booleans())
def test_every_literal_python_reads_as_infinity_is_refused(
    digits: int, exponent: int, fraction: bool
) -> None:
    """Whatever its spelling (many digits, a small exponent, both): a literal that
    overflows is refused naming its path, one that does not is read."""
    literal = "9" * digits + (".5" if fraction else "") + (f"e{exponent}" if exponent else "")
    text = '{"v": [1, ' + literal + "]}"
    data = json.loads(text)
    if isinstance(data["v"][1], int) or math.isfinite(data["v"][1]):  # an integer is exact
        check_json_value(data, text)
    else:
        with pytest.raises(JsonTextError, match="must be a finite number") as info:
            check_json_value(data, text)
        assert info.value.field == "v.1"


def test_a_valid_json_file_is_read_as_json_loads_reads_it(tmp_path: Path) -> None:
    doc = {"a": [1, 2.5, None, True, "é"], "big": int("9" * 4300), "n": {"m": {}}}
    path = tmp_path / "ok.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(doc).encode())  # a BOM is skipped
    assert load_json_file(path) == doc


def test_jsonl_lines_keep_their_rejects() -> None:
    """The line reader goes through the same checks, with its own fields."""
    vote = {"agent": "a", "answer": "x", "evidence_source": "kb", "evidence_present": True}
    case = {"id": "c", "votes": [vote, {**vote, "agent": "b"}]}
    line = json.dumps(case)
    huge = parse_line(VoteCase, line.replace('"c"', HUGE), file="v", line=3)
    assert getattr(huge, "field", None) == "<json>"
    deep = parse_line(VoteCase, line.replace('"c"', "[" * 70 + "]" * 70), file="v", line=1)
    assert getattr(deep, "field", None) == "<depth>"
    assert getattr(parse_line(VoteCase, "[1]", file="v", line=1), "field", None) == "<root>"
    dup = parse_line(
        VoteCase, line.replace('{"id": "c"', '{"id": "d", "id": "c"'), file="v", line=1
    )
    assert isinstance(dup, Reject)  # as a file's: no reader picks one of the two values
    assert (dup.file, dup.line, dup.field, dup.message) == ("v", 1, "id", "duplicate key")


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    st.lists(
        st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", '"\\ud800"', "1"]),
        min_size=1,
        max_size=6,
    ),
    st.booleans(),
)
def test_a_line_with_several_bad_values_names_the_first(bad: list[str], nested: bool) -> None:
    """A line holding NaN, Infinity and 1e400 in w, x and y was rejected naming y, the
    last: the walk popped the values in reverse. The first in the line's order is named,
    in an object's keys and a list's items alike, by the line reader and a file's."""
    keys = [f"k{i}" for i in range(len(bad))]
    body = ", ".join(f'"{k}": {v}' for k, v in zip(keys, bad, strict=True))
    inner = "{" + body + "}" if not nested else "[" + ", ".join(bad) + "]"
    votes = [
        {"agent": a, "answer": "x", "evidence_source": "kb", "evidence_present": True} for a in "ab"
    ]
    line = json.dumps({"id": "c", "votes": votes, "meta": {"m": None}})
    line = line.replace('"m": null', f'"m": {inner}')
    got = parse_line(VoteCase, line, file="v", line=1)
    first = next((i for i, v in enumerate(bad) if v != "1"), None)
    if first is None:
        assert isinstance(got, VoteCase)
        return
    assert isinstance(got, Reject)
    assert got.field == (f"meta.m.{first}" if nested else f"meta.m.k{first}"), (line, got)


def test_nan_infinity_and_an_overflow_name_the_first_field() -> None:
    line = '{"id": "c", "votes": [], "meta": {"w": NaN, "x": Infinity, "y": 1e400}}'
    got = parse_line(VoteCase, line, file="v", line=1)
    assert isinstance(got, Reject) and got.field == "meta.w", got
    assert "got nan" in got.message


def _one_line(res: Result, *needles: str) -> None:
    assert res.code == 2, res.err
    assert res.err.startswith("error: ") and len(res.err.strip().splitlines()) == 1, res.err
    assert "Traceback" not in res.err
    for needle in needles:
        assert needle in res.err, res.err


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("json-files")
    labelled = root / "labelled.jsonl"
    labelled.write_text("\n".join(_labelled_lines()) + "\n")
    cal = root / "cal.json"
    assert cli("calibrate", labelled, "--out", cal).code == 0
    cert = root / "cert.json"
    res = cli("negotiate", REPO / "examples" / "concord" / "incident.yaml", "--json", "--out", cert)
    assert res.code == 0, res.err
    assert cli("verify", cert).code == 0
    return {"root": root, "labelled": labelled, "cal": cal, "cert": cert}


def _with_text(path: Path, old: str, new: str, name: str) -> Path:
    text = path.read_text(encoding="utf-8")
    assert old in text
    out = path.with_name(name)
    out.write_text(text.replace(old, new, 1), encoding="utf-8")
    return out


def test_vote_calibration(files: dict[str, Path]) -> None:
    cal, labelled = files["cal"], files["labelled"]
    assert cli("vote", labelled, "--calibration", cal).code == 0
    huge = cal.with_name("huge.json")
    huge.write_text('{"cases": ' + HUGE + "}")
    _one_line(cli("vote", labelled, "--calibration", huge), str(huge), "'cases'", "4300 digits")
    doc = json.loads(cal.read_text())
    first = next(iter(doc))
    text = cal.read_text()
    dup = cal.with_name("dup.json")
    dup.write_text(text.replace("{", "{" + f"{json.dumps(first)}: {json.dumps(doc[first])}, ", 1))
    _one_line(cli("vote", labelled, "--calibration", dup), str(dup), f"'{first}'", "duplicate key")
    assert isinstance(doc["beta_star"], float)
    doc["beta_star"] = float("nan")
    nan = cal.with_name("nan.json")
    nan.write_text(json.dumps(doc))  # json.dumps writes NaN
    _one_line(cli("vote", labelled, "--calibration", nan), "'beta_star'", "finite")


def test_verify_certificate(files: dict[str, Path]) -> None:
    cert = files["cert"]
    doc = json.loads(cert.read_text())
    assert "floor" in doc
    twice = cert.with_name("twice.json")
    twice.write_text(
        json.dumps({"floor": 0.1, **{k: v for k, v in doc.items() if k != "floor"}})[:-1]
        + f', "floor": {json.dumps(doc["floor"])}}}'
    )
    for args in ([], ["--json"]):
        res = cli("verify", twice, *args)
        _one_line(res, str(twice), "'floor'", "duplicate key")
        assert res.out == ""
    huge = _with_text(cert, '"floor": ', '"floor": ' + HUGE + ", " + '"x": ', "huge.json")
    for args in ([], ["--json"]):
        _one_line(cli("verify", huge, *args), str(huge), "'floor'", "4300 digits")


def test_decide_acceptance(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "p.jsonl", [panel("a", ["1", "1"])])
    policy = write_policy(tmp_path / "policy.yaml")
    j = tmp_path / "j.sqlite"
    for name, text, needle in (
        ("huge.json", '{"format": "x", "n": ' + HUGE + "}", "'n'"),
        ("dup.json", '{"format": "a", "format": "b"}', "'format': duplicate key"),
        ("nan.json", '{"format": "a", "threshold": NaN}', "'threshold'"),
    ):
        acc = tmp_path / name
        acc.write_text(text)
        res = cli("decide", inp, "--policy", policy, "--journal", j, "--acceptance", acc)
        _one_line(res, str(acc), needle)
    assert not j.exists() or j.stat().st_size == 0 or cli("runs", "list", "--journal", j).out == ""


def test_convert_sources(tmp_path: Path) -> None:
    item = {"id": "1", "context": "c", "statement": "s", "label": {"e": ["a1"], "n": ["a2"]}}
    vari = tmp_path / "vari.json"
    vari.write_text('{"1": ' + json.dumps(item)[:-1] + ', "n": ' + HUGE + "}}")
    _one_line(cli("convert", "varierrnli", vari), str(vari), "'1.n'", "4300 digits")
    vari.write_text('{"1": ' + json.dumps(item) + ', "1": ' + json.dumps(item) + "}")
    _one_line(cli("convert", "varierrnli", vari), str(vari), "'1': duplicate key")
    root = _write_tiny(tmp_path / "llmbar", ["1", "2"])
    dataset = root / "Tiny" / "dataset.json"
    assert cli("convert", "llmbar", root, "--out", tmp_path / "ok.jsonl").code == 0
    dataset.write_text(dataset.read_text().replace('"label": 1', '"label": ' + HUGE, 1))
    _one_line(cli("convert", "llmbar", root), str(dataset), "'0.label'", "4300 digits")
    zero = tmp_path / "zero"
    zero.mkdir()
    (zero / "a.json").write_text("[]")
    (zero / "b.json").write_text('[{"output": ["x"], "answer": NaN}]')
    _one_line(cli("convert", "zeroeval", zero), str(zero / "b.json"), "'0.answer'", "finite")


@pytest.mark.parametrize("setting", ["guard.calibration", "acceptance.calibration"])
@pytest.mark.parametrize(
    ("text", "needle"),
    [('{"a": 1, "a": 2}', "duplicate key"), ('{"a": NaN}', "must be a finite number")],
)
def test_the_policys_calibration_files_are_read_strictly(
    tmp_path: Path, setting: str, text: str, needle: str
) -> None:
    """The guard and reliability calibrations a policy names: strict JSON, one line, exit 2,
    no run created."""
    from cli_helpers import cli
    from dissensus.store import Journal
    from pipeline_cases import panel, write_jsonl

    (tmp_path / "cal.json").write_text(text, encoding="utf-8")
    section, key = setting.split(".")
    policy = tmp_path / "p.yaml"
    policy.write_text(f"reading: {{similarity: tfidf}}\n{section}:\n  {key}: cal.json\n")
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("p1", ["1", "1"])])
    res = cli("decide", inp, "--policy", policy, "--journal", tmp_path / "j.sqlite")
    assert res.code == 2, res.err
    assert res.err.startswith("error: ") and res.err.count("\n") == 1
    assert needle in res.err and "cal.json" in res.err
    if (tmp_path / "j.sqlite").exists():
        with Journal(tmp_path / "j.sqlite") as j:
            assert list(j.runs()) == []
