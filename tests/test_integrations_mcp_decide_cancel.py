"""An MCP ``decide`` call the client cancels still finishes its runs (docs/integrations.md):
the client reads them from the journal rather than sending the call again.

The first panel's run is held (in the worker thread that decides it) until the client
has cancelled the call; no assertion rests on a time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline_cases import panel

WAIT_S = 60.0
"""A bound on every wait (the events come at once; never a time asserted on)."""


def _panels() -> list[dict[str, Any]]:
    return [
        panel(
            f"p{i}",
            ["1", "1", "1"],
            evidence=[[{"source": f"kb:{k}"}] for k in range(3)],
            reasoning=["Option 1 states the refund window of 30 days."] * 3,
        )
        for i in range(2)
    ]


def _hold_first_run(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """``(in_run, release)``: the first run announces itself and waits for ``release``."""
    from dissensus.integrations.mcp import tools_decide

    in_run, release = threading.Event(), threading.Event()
    execute = tools_decide.execute_run

    async def held(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        if not in_run.is_set():
            in_run.set()
            assert release.wait(WAIT_S)
        async for record in execute(*args, **kwargs):
            yield record

    monkeypatch.setattr(tools_decide, "execute_run", held)
    return in_run, release


async def _cancelled_call(
    tmp: Path, in_run: threading.Event, release: threading.Event
) -> list[Any]:
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server
    from dissensus.outputs import run_summaries
    from dissensus.store import Journal

    policy = tmp / "policy.yaml"
    policy.write_text(yaml.safe_dump({"reading": {"similarity": "tfidf"}}), encoding="utf-8")
    journal = tmp / "j.sqlite"
    async with Client(build_server(journal=str(journal), policy=str(policy), root=tmp)) as client:
        call = asyncio.create_task(client.call_tool("decide", {"panels": _panels()}))
        assert await asyncio.to_thread(in_run.wait, WAIT_S)
        call.cancel()  # the client sends notifications/cancelled for it
        with pytest.raises(asyncio.CancelledError):
            await call
        release.set()
        for _ in range(int(WAIT_S / 0.05)):
            with Journal(journal) as store:
                runs = run_summaries(store)
            if len(runs) == 2 and all(r.status == "finished" for r in runs):
                return runs
            await asyncio.sleep(0.05)
    raise AssertionError("the cancelled call's runs did not finish")


def test_a_cancelled_decide_still_finishes_and_journals_its_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mcp")
    in_run, release = _hold_first_run(monkeypatch)
    runs = asyncio.run(asyncio.wait_for(_cancelled_call(tmp_path, in_run, release), 300))
    from dissensus.pipeline.review import final_records
    from dissensus.store import Journal

    # Oldest first, one run per panel in the call's order, each with its record: what the
    # client reads instead of sending the call again.
    with Journal(tmp_path / "j.sqlite") as store:
        records = [final_records(store, r.run_id) for r in runs]
    assert [[(c.id, c.action) for c in rs] for rs in records] == [
        [("p0", "auto")],
        [("p1", "auto")],
    ]
