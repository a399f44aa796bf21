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
