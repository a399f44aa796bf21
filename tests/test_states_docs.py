"""The examples in docs/states.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dissensus.states import RuleSet, State

DOC = Path(__file__).resolve().parent.parent / "docs" / "states.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_rules_example_loads_and_routes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (yaml_text,) = blocks("yaml")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml_text, encoding="utf-8")
    rules = RuleSet.load(path)
    assert {r.id for r in rules.rules} >= {"legal-review", "risky-divergent", "trusted-source"}
    assert next(r for r in rules.rules if r.id == "default-CD").action == "concord"

    (python_text,) = blocks("python")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"print": lambda *args: namespace.setdefault("printed", args)}
    exec(compile(python_text, str(DOC), "exec"), namespace)
    state, action, rule, defeated = namespace["printed"]  # type: ignore[misc]
    assert isinstance(state, State)
    assert (action, rule) == ("escalate", "legal-review")
    assert f"default-{state.value}" in defeated
