"""``negotiate`` and ``verify``: what the commands refuse, and what they keep when a
part of the run fails."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.concord import verify

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


@pytest.mark.parametrize(
    ("script", "why"),
    [
        ('rules: []\ndefault: "{not json"\n', "no valid PickReply"),
        ("rules:\n  - {match: {stage: concord.nothing}, json: {id: x}}\n", "no rule matches"),
    ],
)
def test_an_arbiter_that_fails_leaves_the_certificate(
    tmp_path: Path, script: str, why: str
) -> None:
    (tmp_path / "arbiter.yaml").write_text(script, encoding="utf-8")
    model = f"scripted:{tmp_path / 'arbiter.yaml'}"
    out = tmp_path / "cert.json"
    problem = EXAMPLES / "incident.yaml"
    res = cli("negotiate", problem, "--compare", "--json", "--model", model, "--out", out)
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["comparison"] is None and doc["certificate"]["status"] == "certified"
    assert verify(doc["certificate"]).valid
    assert json.loads(out.read_text(encoding="utf-8")) == doc["certificate"]
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("the comparison failed: "), res.err
    assert why in lines[0] and lines[0].endswith("the certificate stands")
    human = cli("negotiate", problem, "--compare", "--model", model, env={"COLUMNS": "200"})
    assert human.code == 0 and "CONCORD certified" in human.out
    assert "Comparison on identical scores" not in human.out
    assert human.err.startswith("the comparison failed: ")
