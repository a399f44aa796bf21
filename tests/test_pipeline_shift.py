"""The run's label-free shift check: journalled at the end of a run, reported by the summary,
``runs show`` and ``GET /v1/acceptance``; ``on_shift: escalate`` holds the file afterwards."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli_helpers import cli
from dissensus.pipeline.batch import execute_run, start_run
from dissensus.pipeline.shift import SHIFT_EVENT, latest_flag
from dissensus.pipeline.spec import RunSpec
from dissensus.states import get_backend
from dissensus.store import Journal
from dissensus.types import Panel
from serve_helpers import auth, client_for, write_tokens

REPO = Path(__file__).resolve().parent.parent
PANELS = REPO / "examples" / "llmbar-swap.jsonl"


def _shifted(row: dict[str, Any]) -> dict[str, Any]:
    """The panel with its agents' answers and reasons made alike: a different population."""
    out = json.loads(json.dumps(row))
    for o in out["outputs"]:
        o["decision"] = "1"
        o["reasoning"] = "Output (a) is better."
        if isinstance(o.get("reask"), dict):
            o["reask"] = {"decision": "1", "reasoning": "Output (a) again."}
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dissensus.acceptance import FeatureSettings, calibrate, save_acceptance
    from dissensus.acceptance.prepare import prepare_cases

    root = tmp_path_factory.mktemp("shift")
    rows = [json.loads(line) for line in PANELS.read_text().splitlines()]
    panels = [Panel.model_validate(r) for r in rows]
    settings = FeatureSettings(similarity="tfidf")
    cases = prepare_cases(panels, settings=settings, backend=get_backend("tfidf"))
    golds = [str(p.meta["gold"]) for p in panels]
    acc = calibrate(cases, golds, target=0.8, delta=0.2, min_accepted=20, settings=settings)
    assert acc.shift_reference is not None
    save_acceptance(acc, root / "A.json")
    for name, on_shift in (("warn.yaml", "warn"), ("hold.yaml", "escalate")):
        (root / name).write_text(
            yaml.safe_dump(
                {
                    "reading": {"similarity": "tfidf"},
                    "routing": {"convergent_disagreement_without_values": "seek_context"},
                    "acceptance": {
                        "model": "A.json",
                        "on_shift": on_shift,
                        "shift_permutations": 39,  # p down to 0.025: enough at alpha 0.1, fast
                    },
                }
            ),
            encoding="utf-8",
        )
    (root / "same.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:60]))
    (root / "shifted.jsonl").write_text("".join(json.dumps(_shifted(r)) + "\n" for r in rows[:60]))
    return root


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
