"""``deliberate`` says what stopped a run, not the first thing that went wrong in it.

The ``error: the deliberation stopped early (budget_exhausted): ...`` line quoted the
packet's first failure, whatever it was: a participant's invalid act in stage 2, after
which the run went on, was printed as the reason the budget ran out. The line now
quotes the packet's status detail, which names what stopped the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from cli_helpers import cli
from test_dci_defects import _GOOD

RISK = Path(__file__).resolve().parent.parent / "examples" / "dci" / "risk.yaml"


def test_the_stop_line_names_the_budget_not_an_earlier_invalid_act(tmp_path: Path) -> None:
    invalid = {"act": "propose", "target": "o99", "text": "x", "option": "y"}
    rules = [{"match": {"agent": "explorer", "stage": "dci.propose"}, "json": invalid}, *_GOOD]
    script = tmp_path / "rules.yaml"
    script.write_text(yaml.safe_dump({"rules": rules}), encoding="utf-8")
    args = ["deliberate", str(RISK), "--model", f"scripted:{script}", "--max-calls", "10"]
    result = cli(*args, "--json")
    assert result.code == 1, result.err
    packet = json.loads(result.out)["packet"]
    assert packet["status"] == "budget_exhausted"
    assert packet["failures"][0]["kind"] == "invalid_act"  # the run went on after it
    (line,) = [x for x in result.err.splitlines() if x.startswith("error:")]
    assert line.startswith("error: the deliberation stopped early (budget_exhausted): ")
    assert "budget" in line.split("): ", 1)[1] and "o99" not in line
    human = cli(*args)
    assert human.code == 1 and line in human.err
