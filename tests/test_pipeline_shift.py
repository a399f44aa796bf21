"""The run's label-free shift check: journalled at the end of a run, reported by the summary,
``runs show`` and ``GET /v1/acceptance``; ``on_shift: escalate`` holds the file afterwards."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from dissensus.pipeline.batch import execute_run, start_run
from dissensus.pipeline.shift import SHIFT_EVENT, latest_flag
from dissensus.pipeline.spec import RunSpec
from dissensus.store import Journal
from serve_helpers import auth, client_for, write_tokens
from shift_helpers import build_world

REPO = Path(__file__).resolve().parent.parent
PANELS = REPO / "examples" / "llmbar-swap.jsonl"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_world(tmp_path_factory.mktemp("shift"))


def _run(journal: Journal, panels: Path, policy: Path, run_id: str) -> list[Any]:
    start_run(journal, str(panels), policy, run_id=run_id)

    async def go() -> list[Any]:
        return [r async for r in execute_run(journal, run_id)]

    return asyncio.run(go())


def test_a_run_like_the_calibration_is_not_flagged_and_a_shifted_one_is(
    world: Path, tmp_path: Path
) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        _run(journal, world / "same.jsonl", world / "warn.yaml", "same")
        same = journal.get("same", "run/shift")
        assert same is not None and same.type == SHIFT_EVENT
        assert not same.payload["shifted"] and same.payload["deployed_n"] >= 10
        _run(journal, world / "shifted.jsonl", world / "warn.yaml", "moved")
        moved = journal.get("moved", "run/shift")
        assert moved is not None and moved.payload["shifted"], moved.payload
        assert moved.payload["auc"] > same.payload["auc"]
        # warn: reported, no hold on the file
        flag = latest_flag(journal, moved.payload["file_sha256"])
        assert flag is not None and flag["run_id"] == "moved"
    shown = cli("runs", "show", "moved", "--journal", tmp_path / "j.sqlite")
    assert shown.code == 0 and "New cases look different" in " ".join(shown.out.split())
    data = json.loads(
        cli("runs", "show", "moved", "--journal", tmp_path / "j.sqlite", "--json").out
    )
    assert data["shift"]["shifted"] is True


def test_on_shift_escalate_holds_the_file_for_later_runs(world: Path, tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        before = _run(journal, world / "same.jsonl", world / "hold.yaml", "before")
        assert any(r.basis == "learned" for r in before)
        _run(journal, world / "shifted.jsonl", world / "hold.yaml", "moved")
        after = _run(journal, world / "same.jsonl", world / "hold.yaml", "after")
    assert not any(r.basis == "learned" for r in after)
    held = [r for r in after if "acceptance held" in r.reason]
    assert held and "run moved" in held[0].reason


def test_the_summary_and_the_service_report_the_check(world: Path, tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite"
    done = cli(
        "decide", world / "shifted.jsonl", "--policy", world / "warn.yaml", "--journal", journal
    )
    assert done.code == 0
    words = " ".join(done.out.split())
    assert "At least 80 of every 100 automatic decisions should be right (80% confidence)" in words
    assert "New cases look different from the 150 calibration cases" in words
    # The audits and the monitor, in words, with the number of audits the run opened.
    with Journal(journal) as store:
        run_id = store.runs()[-1].run_id
        opened = sum(1 for e in store.events(run_id) if e.type == "review.audit")
        rate = RunSpec.from_started(
            store.get(run_id, "run/started").payload
        ).policy.acceptance.audit_rate
    if rate > 0:
        assert (
            f"{rate:.0%} of automatic decisions are audited blind ({opened} opened in this run"
            in words
        )
    else:
        assert "audited blind" not in words

    async def ask() -> dict[str, Any]:
        from dissensus.serve import ServeSettings

        settings = ServeSettings(
            journal=str(journal),
            policy=str(world / "warn.yaml"),
            tokens=str(write_tokens(tmp_path / "tokens.txt")),
        )
        async with client_for(settings) as client:
            doc: dict[str, Any] = (await client.get("/v1/acceptance", headers=auth("sub"))).json()
            return doc

    doc = asyncio.run(ask())
    assert doc["file"]["calibration_n"] == 150 and doc["shift"]["shifted"] is True
    assert doc["hold"] is None  # warn: no hold


def test_a_check_of_too_few_cases_is_not_said_to_pass() -> None:
    from dissensus.pipeline.shift import shift_words

    words = shift_words(
        {"auc": 0.5, "p_value": 1.0, "shifted": False, "calibration_n": 326, "deployed_n": 7}
    )
    assert words == "Not checked yet: 7 judged case(s), and the shift check needs at least 10."
    assert "resemble" in shift_words(
        {"auc": 0.5, "p_value": 0.4, "shifted": False, "calibration_n": 326, "deployed_n": 70}
    )
