"""A run held mid-run by its shift check restarts its executor from the committed
frontier; the cases in flight then are decided again, their journalled model calls
replayed. The run's model-call budget holds across that restart, and across an
interruption and resume too: the run never spends more than ``budget.max_calls``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dissensus.llm.budget import Budget
from dissensus.pipeline import batch, shift_in_run
from dissensus.pipeline.batch import execute_run, start_run
from dissensus.pipeline.durable import replay_spend
from dissensus.store import Journal
from dissensus.store import event_types as ev
from pipeline_cases import write_script
from shift_helpers import PANELS, build_world, shifted


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shift world, with panels that need a live re-ask among shifted ones, and a
    policy holding on a shift whose re-asks ask a scripted model under a budget."""
    root = build_world(tmp_path_factory.mktemp("in-run-budget"))
    rows = [json.loads(line) for line in PANELS.read_text(encoding="utf-8").splitlines()]
    mix = []
    for i in range(60):
        # Shifted cases (alike: the check flags them) with the calibration panels between,
        # some of which disagree and are re-asked live.
        row = shifted(rows[i % len(rows)]) if i % 3 else dict(rows[i % len(rows)])
        row["id"] = f"m{i}"
        mix.append(json.dumps(row))
    (root / "mix.jsonl").write_text("".join(line + "\n" for line in mix), encoding="utf-8")
    script = write_script(root / "script.yaml", {}, default="1")
    hold = yaml.safe_load((root / "hold.yaml").read_text(encoding="utf-8"))
    hold["seek_context"] = {"use_recorded": False, "model": f"scripted:{script}"}
    (root / "hold-live.yaml").write_text(yaml.safe_dump(hold), encoding="utf-8")
    return root


def _policy(world: Path, root: Path, max_calls: int) -> Path:
    policy = yaml.safe_load((world / "hold-live.yaml").read_text(encoding="utf-8"))
    policy["acceptance"]["model"] = str(world / "A.json")
    policy["budget"] = {"max_calls": max_calls}
    path = root / "policy.yaml"
    path.write_text(yaml.safe_dump(policy), encoding="utf-8")
    return path


def _decide(journal: Journal, run_id: str, stop_after: int | None = None) -> list[Any]:
    async def go() -> list[Any]:
        out = []
        async for record in execute_run(journal, run_id):
            out.append(record)
            if stop_after is not None and len(out) >= stop_after:
                break
        return out

    return asyncio.run(go())


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    max_calls=st.integers(min_value=1, max_value=40),
    block=st.integers(min_value=1, max_value=16),
    stop_after=st.one_of(st.none(), st.integers(min_value=1, max_value=59)),
)
@example(max_calls=40, block=16, stop_after=None)
@example(max_calls=5, block=4, stop_after=20)
def test_the_budget_holds_across_the_restart_of_a_hold_mid_run(
    world: Path,
    tmp_path_factory: pytest.TempPathFactory,
    max_calls: int,
    block: int,
    stop_after: int | None,
) -> None:
    root = tmp_path_factory.mktemp("run")
    policy = _policy(world, root, max_calls)
    with pytest.MonkeyPatch.context() as patch, Journal(root / "j.sqlite") as journal:
        patch.setattr(shift_in_run, "FIRST", 10)
        patch.setattr(batch, "BLOCK_CASES", block)
        start_run(journal, str(world / "mix.jsonl"), policy, run_id="r")
        if stop_after is not None:
            _decide(journal, "r", stop_after)
        records = _decide(journal, "r")
        assert [r.line for r in records] == list(range(1, 61))
        spent = replay_spend(journal, "r", Budget())
        assert spent.attempts <= max_calls, spent
        calls = list(journal.events("r", type=ev.MODEL_CALL))
        assert calls, "no case was re-asked: the test would prove nothing"
        assert len(calls) <= max_calls
        hold = journal.get("r", "acceptance/held")
        assert hold is not None  # the shifted cases flagged the file
        if stop_after is None:
            # A hold mid-run (no resume to make it at the end): the restart happened.
            assert "within_run" in hold.payload
