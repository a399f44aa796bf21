"""The MCP ``negotiate`` tool runs CONCORD off the server's event loop, and stops when
the client cancels the call.

Before the fix the negotiation ran on the server's loop: table agents answer without
awaiting, and each call's view holds every candidate's scores, so a problem of 256
agents and 300 options held every other call of the server (a ``route``) for seconds
at a time, until it yielded. Now it runs in a worker thread on a loop of its own, as
``POST /v1/negotiate`` does, and a ``notifications/cancelled`` stops it at its next
agent call.

No assertion rests on a time. The first agent call of the heavy negotiation waits (in
whatever thread runs it) for the ``route`` call to be answered: on the server's loop
that call could not be answered until the wait gave up, and the test sees the wait
ended unanswered. The server runs in process (:class:`mcp.client.Client`), so the
negotiation's certificate is read where it is made.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from mcp_helpers import tool_data
from pipeline_cases import panel

GATE_S = 60.0
"""How long the first agent call waits for the ``route`` answer (a bound, not a time
the test asserts on: the answer comes at once, or, on the server's loop, never)."""


def heavy_problem(agents: int = 256, options: int = 300, seed: int = 7) -> dict[str, Any]:
    """Table agents with random scores and a floor none can clear: seconds of CPU per
    sweep, and a thousand rounds of them."""
    rng = random.Random(seed)
    ids = [f"O{i}" for i in range(options)]
    return {
        "problem": "p",
        "floor": 0.99,
        "rounds": 1000,
        "anchors": {"rejected": {"id": "R0", "text": "r"}, "ideal": {"id": "I0", "text": "i"}},
        "options": [{"id": o, "text": f"option {o}"} for o in ids],
        "agents": [
            {
                "id": f"a{k}",
                "kind": "table",
                "scores": {"R0": 0, "I0": 100, **{o: rng.randint(0, 99) for o in ids}},
            }
            for k in range(agents)
        ],
    }


class _Probe:
    """The first table-agent call announces itself and waits for ``answered``; every
    certificate (or exception) of a run is kept."""

    def __init__(self) -> None:
        self.in_call = threading.Event()
        self.answered = threading.Event()
        self.seen_answered: list[bool] = []
        self.ended = threading.Event()
        self.outcomes: list[Any] = []
        self._lock = threading.Lock()

    def patch(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from dissensus.concord.protocol import Negotiation
        from dissensus.concord.table import TableAgent

        score, run = TableAgent.score, Negotiation.run
        probe = self

        async def gated(self: TableAgent, outcomes: Sequence[Any], view: Any) -> Any:
            with probe._lock:
                first = not probe.in_call.is_set()
                probe.in_call.set()
            if first:  # blocks whatever loop runs the negotiation, as a long sweep does
                probe.seen_answered.append(probe.answered.wait(GATE_S))
            return await score(self, outcomes, view)

        async def kept(self: Negotiation) -> Any:
            try:
                cert = await run(self)
            except BaseException as exc:
                probe.outcomes.append(exc)
                probe.ended.set()
                raise
            probe.outcomes.append(cert)
            probe.ended.set()
            return cert

        monkeypatch.setattr(TableAgent, "score", gated)
        monkeypatch.setattr(Negotiation, "run", kept)


async def _session(tmp: Path, probe: _Probe) -> tuple[Any, bool]:
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    agree = panel("p-agree", ["1", "1", "1"], reasoning=["Option 1 is right."] * 3)
    async with Client(build_server(journal=str(tmp / "j.sqlite"), root=tmp)) as client:
        heavy = asyncio.create_task(client.call_tool("negotiate", {"problem": heavy_problem()}))
        assert await asyncio.to_thread(probe.in_call.wait, GATE_S + 60)
        try:
            routed = await client.call_tool("route", {"panels": [agree], "similarity": "tfidf"})
        finally:
            probe.answered.set()
        running = not heavy.done() and not probe.ended.is_set()
        heavy.cancel()  # the client sends notifications/cancelled for it
        with pytest.raises(asyncio.CancelledError):
            await heavy
        return routed, running


def test_a_cheap_call_is_answered_while_a_heavy_negotiation_runs_and_a_cancel_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mcp")
    probe = _Probe()
    probe.patch(monkeypatch)
    routed, running = asyncio.run(asyncio.wait_for(_session(tmp_path, probe), timeout=300))
    (record,) = tool_data(routed)
    assert record["id"] == "p-agree" and record["action"] == "auto"
    # route was answered while the negotiation's first agent call was still in progress
    assert probe.seen_answered == [True]
    assert running  # and the negotiation was still running when it was answered
    # the cancelled call stopped the negotiation (left alone, it runs for minutes)
    assert probe.ended.wait(120)
    (cert,) = probe.outcomes
    assert cert.spent.stopped == "cancelled", cert
    assert cert.status == "best_effort"


def test_a_negotiation_off_the_loop_answers_its_certificate(tmp_path: Path) -> None:
    """The tool's answer is the certificate, as before (``negotiate --json``)."""
    pytest.importorskip("mcp")
    from mcp.client import Client

    from dissensus.integrations.mcp import build_server

    async def go() -> Any:
        async with Client(build_server(journal=str(tmp_path / "j.sqlite"), root=tmp_path)) as c:
            return await c.call_tool("negotiate", {"problem": heavy_problem(3, 4), "deadline": 60})

    cert = tool_data(asyncio.run(asyncio.wait_for(go(), timeout=120)))
    assert cert["status"] in ("certified", "best_effort")
    assert cert["spent"]["stopped"] in ("budget_exhausted", "floor_cleared")
    assert cert["budget"]["deadline_s"] == 60
