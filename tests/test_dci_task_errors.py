"""Deliberation task files and the prompts built from them.

An error in a task file named the file and the field but not the line it is written on
(``risk.yaml: field 'options.1.text': an option's text must not be blank``), where
problem and policy files name it; in a long task file the reader had to count.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dissensus.dci.task import load_task
from dissensus.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "field", "line"),
    [
        (
            "question: Pick one\noptions:\n  - {id: a, text: A}\n  - {id: b, text: ' '}\n",
            "options.1.text",
            4,
        ),
        (
            "question: Pick one\nparticipants:\n  - {id: f, archetype: Framer}\n"
            "  - id: g\n    archetype: Wizard\n",
            "participants.1.archetype",
            5,
        ),
        ("question: Pick one\n\ndci:\n  max_rounds: 0\n", "dci.max_rounds", 4),
        (
            "id: x\nquestion: Pick one\noptions:\n  - {id: a, text: A}\n  - {id: a, text: B}\n",
            "options.1.id",
            5,
        ),
        ("question: q\n\n\ncolour: red\n", "colour", 4),
    ],
)
def test_a_task_file_error_names_the_line_of_its_field(
    tmp_path: Path, text: str, field: str, line: int
) -> None:
    path = tmp_path / "task.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_task(path)
    exc = caught.value
    assert exc.field == field
    assert exc.line == line
    assert str(exc).startswith(f"{path}: field {field!r}: ")
    assert str(exc).endswith(f"(line {line})")
