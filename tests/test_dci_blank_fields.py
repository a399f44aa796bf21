"""A task file's blank option id or text, or blank task id, is bad input naming the field.

An option whose text was only spaces was accepted and shown to every participant as
an empty option; a blank task id labelled every output line with an empty id.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dissensus.dci.task import load_task
from dissensus.errors import ConfigError

TASK = """\
id: certs
question: How do we renew the certificates?
options:
  - {id: manual, text: "Renew by hand before the freeze."}
  - {id: managed, text: "Adopt the managed service."}
"""


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('text: "Adopt the managed service."', 'text: "   "', "options.1.text"),
        ('text: "Adopt the managed service."', 'text: "\\t\\n"', "options.1.text"),
        ("{id: manual,", '{id: " ",', "options.0.id"),
        ("id: certs", 'id: "  "', "id"),
    ],
)
def test_a_blank_field_names_the_file_and_field(
    tmp_path: Path, old: str, new: str, field: str
) -> None:
    path = tmp_path / "task.yaml"
    assert old in TASK
    path.write_text(TASK.replace(old, new), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_task(str(path))
    assert caught.value.field == field
    assert "blank" in str(caught.value)


def test_the_task_as_written_loads(tmp_path: Path) -> None:
    path = tmp_path / "task.yaml"
    path.write_text(TASK, encoding="utf-8")
    task = load_task(str(path))
    assert task.id == "certs" and [o.id for o in task.options] == ["manual", "managed"]
