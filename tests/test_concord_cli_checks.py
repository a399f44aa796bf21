"""``negotiate`` and ``verify``: what the commands refuse, and what they keep when a
part of the run fails."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cli_helpers import cli

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "concord"


@pytest.fixture
def examples(tmp_path: Path) -> Path:
    """A copy of ``examples/concord`` (its files may be written to)."""
    return Path(shutil.copytree(EXAMPLES, tmp_path / "cc"))


@pytest.mark.parametrize("where", ["flag", "file"])
def test_a_recording_that_is_a_function_agents_module_is_refused(
    examples: Path, where: str
) -> None:
    module = examples / "cost_model.py"
    before = module.read_bytes()
    problem = examples / "llm-checkout.yaml"
    if where == "flag":
        spec = f"record:{module}:scripted:{examples / 'llm-checkout.script.yaml'}"
        res = cli("negotiate", problem, "--model", spec)
    else:
        text = problem.read_text(encoding="utf-8").replace(
            "model: scripted:", "model: record:cost_model.py:scripted:"
        )
        problem.write_text(text, encoding="utf-8")
        res = cli("negotiate", problem)
    assert res.code == 2, res.err
    assert "field 'model'" in res.err and "agents[2].score" in res.err, res.err
    assert "refusing to append" in res.err
    assert module.read_bytes() == before and res.out == ""
