"""The request bound of ``docs/dci.md`` counts requests (``usage.calls``); ``--max-calls``
counts attempts, of which the model client may take several per request."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import cli
from dissensus.dci.flow import request_bound
from dissensus.dci.task import load_task
from dissensus.llm.client import ClientSettings

REPO = Path(__file__).resolve().parent.parent
RISK = REPO / "examples" / "dci" / "risk.yaml"
DOCS = (REPO / "docs" / "dci.md").read_text(encoding="utf-8")


def test_a_request_takes_up_to_one_attempt_per_re_ask(tmp_path: Path) -> None:
    script = tmp_path / "broken.yaml"
    script.write_text('rules: []\ndefault: "{not json"\n', encoding="utf-8")
    res = cli("deliberate", RISK, "--model", f"scripted:{script}", "--json")
    usage = json.loads(res.out)["usage"]
    task = load_task(RISK)
    reasks = ClientSettings().max_reasks
    # The framer's request and its re-ask by the flow (reasks: 1), each asked 3 times
    # by the client: the numbers the docs give.
    assert (usage["calls"], usage["attempts"]) == (2, 6)
    assert "makes 2 requests and 6 attempts with the defaults" in DOCS
    assert usage["calls"] == 1 + task.dci.reasks
    assert usage["attempts"] == usage["calls"] * (1 + reasks)
    assert usage["calls"] <= request_bound(len(task.participants), task.dci)
    cut = cli("deliberate", RISK, "--model", f"scripted:{script}", "--json", "--max-calls", "2")
    assert json.loads(cut.out)["status"] == "budget_exhausted"


def test_the_documented_attempt_budget_never_cuts_a_run_short() -> None:
    task = load_task(RISK)
    s = ClientSettings()
    budget = (
        request_bound(len(task.participants), task.dci) * (1 + s.max_reasks) * (1 + s.max_retries)
    )
    formula = "`(1 + reasks) · (2 + n + 3·n·max_rounds) · (1 + max_reasks) · (1 + max_retries)`"
    assert f"A `--max-calls` that never cuts a run short is therefore\n{formula}" in DOCS
    res = cli("deliberate", RISK, "--json", "--max-calls", str(budget))
    assert res.code == 0 and json.loads(res.out)["status"] == "complete", res.err
