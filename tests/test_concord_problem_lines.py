"""A bad CONCORD problem file is one error line naming the file, the field and the line
the field is written on, whether the file itself, an agent's module or an agent's
anchors at run time is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.concord.problem import load_problem
from dissensus.errors import ConfigError

BASE = """\
floor: 0.7
anchors:
  rejected: {id: R0, text: "no"}
  ideal: {id: I0, text: "yes"}
options:
  - {id: A, text: "plan a"}
agents:
  - {id: x, kind: table, scores: {R0: 0, I0: 10, A: 8}}
  - {id: y, kind: table, scores: {R0: 0, I0: 10, A: 6}}
"""


@pytest.mark.parametrize(
    ("old", "new", "field", "line"),
    [
        ("floor: 0.7", "floor: 1e400", "floor", 1),
        ("floor: 0.7", "floor: 0.7\nrounds: 100000000000000000000000", "rounds", 2),
        ("I0: 10, A: 8", "I0: 10, A: 1e400", "agents.0.scores.A", 8),
        ("id: y,", "id: x,", "agents.1.id", 9),
        ("{R0: 0, I0: 10, A: 8}", "[1, 2]", "agents.0.scores", 8),
        ("{id: A, text", "{id: 5, text", "options.0.id", 6),
        ('ideal: {id: I0, text: "yes"}', 'ideal: {id: I0, text: "  "}', "anchors.ideal.text", 4),
    ],
)
def test_a_bad_field_names_its_line(
    tmp_path: Path, old: str, new: str, field: str, line: int
) -> None:
    path = tmp_path / "problem.yaml"
    path.write_text(BASE.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_problem(path)
    assert (caught.value.field, caught.value.line) == (field, line)
    result = cli("negotiate", path)
    assert result.code == 2
    (said,) = [x for x in result.err.splitlines() if x.strip()]
    assert str(path) in said and repr(field) in said and said.endswith(f"(line {line})")


def test_an_agents_module_and_its_run_time_anchors_name_their_lines(tmp_path: Path) -> None:
    (tmp_path / "fnmod.py").write_text("def flat(o, v):\n    return 1.0\n", encoding="utf-8")
    path = tmp_path / "problem.yaml"
    text = BASE + '  - id: z\n    kind: function\n    score: "fnmod:nope"\n'
    path.write_text(text, encoding="utf-8")
    result = cli("negotiate", path)
    assert result.code == 2
    assert "'agents.2.score'" in result.err and result.err.rstrip().endswith("(line 12)")
    path.write_text(text.replace("fnmod:nope", "fnmod:flat"), encoding="utf-8")
    result = cli("negotiate", path)
    assert result.code == 2
    assert "'agents.z.anchors'" in result.err and result.err.rstrip().endswith("(line 10)")


@pytest.mark.parametrize("agent", ["0", "7", "db.primary"])
def test_run_time_anchors_of_an_agent_named_by_digits_or_dots_name_its_line(
    tmp_path: Path, agent: str
) -> None:
    """A run-time error names the agent by its id: an id of digits is not read as a place
    in ``agents`` (``agents.0.anchors`` of agent '0' listed third), nor is an id holding
    a dot cut at it; the line is the agent's own."""
    (tmp_path / "fnmod.py").write_text("def flat(o, v):\n    return 1.0\n", encoding="utf-8")
    path = tmp_path / "problem.yaml"
    text = BASE + f'  - id: "{agent}"\n    kind: function\n    score: "fnmod:flat"\n'
    path.write_text(text, encoding="utf-8")
    result = cli("negotiate", path)
    assert result.code == 2
    assert f"'agents.{agent}.anchors'" in result.err
    assert result.err.rstrip().endswith("(line 10)"), result.err
