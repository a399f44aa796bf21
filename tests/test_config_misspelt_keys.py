"""A required key spelt wrong in a configuration file is named as the user wrote it.

Every configuration file refuses unknown keys, but where the misspelt key is a required
one the first error was only the missing field (``field 'rules.0.condition': Field
required``): the message now also names the key the file holds in its place, when one
is spelt close to it (difflib's ratio at least 0.6).
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.concord.problem import load_problem
from dissensus.dci.task import load_task
from dissensus.errors import ConfigError
from dissensus.pipeline.policy import load_policy
from dissensus.quoting import misspelling
from dissensus.states.routing import RuleSet

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _refused(load: object, path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load(path)  # type: ignore[operator]
    return str(info.value)


def test_a_rules_file_names_a_misspelt_required_key(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text('rules:\n  - id: ca\n    conditon: state == "CA"\n    action: commit\n')
    message = _refused(RuleSet.load, path)
    assert "rules.0.condition" in message
    assert "(is 'conditon' a misspelling of 'condition'?)" in message


def test_a_problem_file_names_a_misspelt_floor_and_anchor(tmp_path: Path) -> None:
    text = (EXAMPLES / "concord" / "incident.yaml").read_text()
    assert "\nfloor:" in text
    path = tmp_path / "p.yaml"
    path.write_text(text.replace("\nfloor:", "\nflor:"))
    assert "(is 'flor' a misspelling of 'floor'?)" in _refused(load_problem, path)
    path.write_text(text.replace("anchors:", "anchor:"))
    assert "(is 'anchor' a misspelling of 'anchors'?)" in _refused(load_problem, path)


def test_a_task_file_names_a_misspelt_question(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("questoin: Which option?\n")
    message = _refused(load_task, path)
    assert "a task needs a question (is 'questoin' a misspelling of 'question'?)" in message


def test_a_policy_names_a_misspelt_key_where_one_is_required(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("panel:\n  members:\n    - {nme: a, model: 'scripted:x'}\n")
    message = _refused(load_policy, path)
    assert "'nme' a misspelling of 'name'" in message, message


def test_an_unrelated_unknown_key_is_not_called_a_misspelling(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n  - id: z\n    zzz: 1\n    action: commit\n")
    message = _refused(RuleSet.load, path)
    assert "Field required" in message
    assert "misspelling" not in message


@given(st.text(alphabet="abcdefghij_", min_size=3, max_size=12), st.data())
def test_a_hint_only_names_a_given_unknown_key(name: str, data: st.DataObject) -> None:
    keys = data.draw(st.lists(st.text(alphabet="abcdefghij_", max_size=12), max_size=5))
    hint = misspelling(name, keys, known=[name])
    if hint:
        named = hint.split("'")[1]
        assert named in keys
        assert named != name
        assert difflib.SequenceMatcher(None, named, name).ratio() >= 0.6
    else:
        assert all(k == name or difflib.SequenceMatcher(None, k, name).ratio() < 0.6 for k in keys)
