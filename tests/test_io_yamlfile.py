"""The YAML loader names the line of a character YAML does not allow."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.errors import ConfigError
from dissensus.io.yamlfile import load_yaml_text

REPO = Path(__file__).resolve().parents[1]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.lists(st.sampled_from(["a: 1", 'b: "é…"', "c: [x, y]", "# note", ""]), max_size=6),
    st.sampled_from(["\n", "\r\n", "\r"]),
    st.sampled_from(["\x00", "\x07", "\x1b"]),
)
def test_a_refused_character_names_its_line(lines: list[str], end: str, bad: str) -> None:
    """A NUL byte (or another control character) was 'invalid YAML' without a line: the
    reader refuses it before parsing. Its line is named, counted as YAML counts lines
    (a non-ASCII text before it included), and the character."""
    text = end.join([*lines, f"z: x{bad}y"]) + end
    with pytest.raises(ConfigError) as info:
        load_yaml_text(text, file="f.yaml")
    message = str(info.value)
    assert f"invalid YAML at line {len(lines) + 1}: " in message, message
    assert f"(U+{ord(bad):04X})" in message


def test_a_nul_in_a_task_or_problem_file_is_one_line_naming_it(tmp_path: Path) -> None:
    task = (REPO / "examples" / "dci" / "routine.yaml").read_text(encoding="utf-8")
    problem = (REPO / "examples" / "concord" / "incident.yaml").read_text(encoding="utf-8")
    for command, text in (("deliberate", task), ("negotiate", problem)):
        lines = text.splitlines()
        lines[1] += "\x00"
        path = tmp_path / f"{command}.yaml"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        res = cli(command, path)
        assert res.code == 2, res.err
        line = res.err.strip()
        assert line.startswith(f"error: {path}: invalid YAML at line 2: "), res.err
        assert line.endswith("characters are not allowed (U+0000)") and "\n" not in line


@pytest.mark.parametrize(
    ("text", "field", "line"),
    [
        ("question: q\noptions:\n  - id: a\n    text: A\n    text: B\n", "options.0.text", 5),
        ("a: 1\nb: 2\na: 3\n", "a", 3),
        ("x: &A {k: 1}\ny: [*A, {k: 1, k: 2}]\n", "y.1.k", 2),
        ("- [1, {b: {c: 1, c: 2}}]\n", "0.1.b.c", 1),
        ("acceptance:\n  min_families: 2\n  min_families: 1\n", "acceptance.min_families", 3),
    ],
)
def test_a_duplicate_key_names_its_path_and_line(text: str, field: str, line: int) -> None:
    with pytest.raises(ConfigError) as caught:
        load_yaml_text(text, file="f.yaml")
    key = field.rpartition(".")[2]
    assert (caught.value.field, caught.value.line) == (field, line)
    assert str(caught.value) == f"f.yaml: field {field!r}: duplicate key {key!r} (line {line})"


@pytest.mark.parametrize(
    ("command", "text", "field"),
    [
        (
            "deliberate",
            "question: q\noptions:\n  - id: a\n    text: A\n    text: B\n",
            "options.0.text",
        ),
        ("negotiate", "agents: 2\nagents: 3\n", "agents"),
    ],
)
def test_every_file_names_the_duplicate_keys_path(
    tmp_path: Path, command: str, text: str, field: str
) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text(text, encoding="utf-8")
    res = cli(command, path)
    assert res.code == 2
    assert f"field {field!r}: duplicate key" in res.err, res.err


@pytest.mark.parametrize(
    ("text", "field", "line"),
    [
        ("a: &x\n  k: 1\n  k: 2\nb: *x\n", "a.k", 3),
        ("defaults: &d\n  model: m\n  model: n\nmembers:\n  - *d\n  - *d\n", "defaults.model", 3),
        ("a: &x\n  - k: 1\n    k: 2\nb:\n  c: *x\n", "a.0.k", 3),
        ("x: &a {k: 1}\ny:\n  <<: *a\n  k: 2\n  k: 3\n", "y.k", 5),
    ],
)
def test_a_duplicate_in_an_anchored_mapping_is_named_where_it_is_written(
    text: str, field: str, line: int
) -> None:
    """The key was named by the last alias that repeats its mapping (``b.k``)."""
    with pytest.raises(ConfigError) as info:
        load_yaml_text(text, file="f.yaml")
    assert info.value.field == field
    assert str(info.value).endswith(f"(line {line})"), str(info.value)


@pytest.mark.parametrize(
    ("text", "field", "line"),
    [
        ("a:\n  b: 1\na.b: .nan\n", "a.b", 3),
        ("a.b: 1\na:\n  b: .inf\n", "a.b", 3),
        ("c:\n  x: 1\n  'a.b': .nan\n", "c.a.b", 3),
        ("a: {b: {c: .inf}}\n", "a.b.c", 1),
        ("a:\n  - 1\n  - .nan\n", "a.1", 3),
    ],
)
def test_a_non_finite_number_names_the_line_of_its_own_key(
    text: str, field: str, line: int
) -> None:
    """A key holding a ``.`` was split in two to find its line (``a.b: .nan`` on line
    3 was said to be on line 2, where ``a:`` holds ``b: 1``)."""
    with pytest.raises(ConfigError) as info:
        load_yaml_text(text, file="f.yaml")
    assert info.value.field == field
    assert str(info.value).endswith(f"(line {line})"), str(info.value)


def test_a_long_key_cut_in_an_error_still_names_its_line() -> None:
    """An error cuts a key of more than 64 characters (``xxx…``); the line it is written
    on is still found from the cut key (it was lost with the cut)."""
    from dissensus.io.yamlfile import yaml_line_of
    from dissensus.types import field_segment

    long = "x" * 80
    text = f"a: 1\nb:\n  c: 2\n  {long}: 3\n{long}y: 4\n"
    assert yaml_line_of(text, f"b.{field_segment(long)}") == 4
    assert yaml_line_of(text, field_segment(long + "y")) == 5
    assert yaml_line_of(text, "b." + "x" * 10 + "\u2026") == 2  # no key cut so: the parent
