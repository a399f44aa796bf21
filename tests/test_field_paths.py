"""A field's path reads the same in every message: dotted, as pydantic's locations are
(``agents.1.id``, never ``agents[1].id``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dissensus.concord import load_problem
from dissensus.errors import ConfigError, InputError
from dissensus.guard import guard_votes
from dissensus.types import Vote

PROBLEM = """\
floor: 0.7
anchors:
  rejected: {id: R0, text: leave the region down}
  ideal: {id: I0, text: full recovery}
options: [{id: A, text: fail over}]
agents:
  - {id: ops, kind: table, scores: {R0: 0, I0: 10, A: 6}}
  - {id: ops, kind: table, scores: {R0: 0, I0: 10, A: 8}}
"""


def test_index_paths_are_dotted_as_pydantic_spells_them(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(PROBLEM, encoding="utf-8")
    with pytest.raises(ConfigError) as duplicate:
        load_problem(path)
    assert duplicate.value.field == "agents.1.id"
    assert str(duplicate.value) == f"{path}: field 'agents.1.id': duplicate agent id 'ops' (line 8)"
    # a field pydantic locates inside the same list reads the same way
    path.write_text(PROBLEM.replace("kind: table", "kind: tabel", 1), encoding="utf-8")
    with pytest.raises(ConfigError) as pydantic:
        load_problem(path)
    assert pydantic.value.field is not None and pydantic.value.field.startswith("agents.0.")

    vote = Vote(agent="a", answer="yes", evidence_source="parametric", evidence_present=False)
    with pytest.raises(InputError, match=r"^votes\.0 is a dict, not a Vote$"):
        guard_votes([{"agent": "z"}, vote])  # type: ignore[list-item]
