"""Model calls under a run's deadline (``decide`` / ``runs resume --deadline``).

A call in flight when the deadline passes is cancelled at once: one attempt, journalled
(``model.sent``) and charged, never retried in that invocation; a resume makes the call
again, so a call cut off by N invocations has N attempts (bounded by the run's budget).
An attempt that would start once the deadline has passed (the event loop was held past
it: in a fresh process, the first live call imports the model SDK, about a second) is
not started at all: nothing is sent, journalled or charged, and the run stops as the
deadline says. Before, such an attempt was journalled as sent and charged on every
resume though the server never saw it, so a run resumed with a short deadline spent its
budget on requests never made and ended escalated ("call budget exhausted").
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.llm.fakeserver import FakeServer, ServerSettings
from dissensus.llm.scripted import ScriptedRules
from dissensus.pipeline import runtime
from dissensus.store import Journal
from pipeline_cases import panel, write_jsonl, write_policy

SLOW_S = 3.0
"""Latency of the model: longer than the deadline (1 s)."""
CALLS = 2
"""Live calls of the case (the shared model's two voices), hence its budget here."""


def _setup(root: Path, max_calls: int) -> tuple[Path, Path]:
    inp = write_jsonl(root / "in.jsonl", [panel("live", ["1", "1", "1"])])
    policy = write_policy(
        root / "p.yaml",
        {
            "routing": {"convergent_disagreement_without_values": "seek_context"},
            "budget": {"max_calls": max_calls},
        },
    )
    return inp, policy


def _server() -> FakeServer:
    answer = json.dumps({"decision": "1", "reasoning": "slowly"})
    return FakeServer(ScriptedRules(default=answer), ServerSettings(latency_s=SLOW_S))


def _sent(journal: Path) -> Counter[str]:
    """Attempts journalled as sent (``model.sent``), per call."""
    with Journal(journal) as j:
        return Counter(str(e.payload["call"]) for e in j.events("d") if e.type == "model.sent")


def _invocations(inp: Path, policy: Path, journal: Path, n: int) -> None:
    """``decide --deadline 1`` then ``runs resume --deadline 1``, ``n`` invocations in all:
    each stops at its deadline, partial (exit 1)."""
    for i in range(n):
        if i == 0:
            res = cli("decide", inp, "--policy", policy, "--journal", journal, "--run-id", "d",
                      "--model", "openai:m", "--deadline", "1", "--json")  # fmt: skip
        else:
            res = cli("runs", "resume", "d", "--journal", journal, "--deadline", "1", "--json")
        assert res.code == 1, res.err
        assert "deadline of 1 s reached" in res.err, res.err


def _finish(srv: FakeServer, journal: Path) -> dict[str, object]:
    """Resume without a deadline, the model quick again: the case's record."""
    srv.settings.latency_s = 0.0
    res = cli("runs", "resume", "d", "--journal", journal, "--json")
    assert res.code == 0, res.err
    (record,) = [json.loads(line) for line in res.out.splitlines()]
    return record


def test_a_call_cut_off_by_the_deadline_is_one_attempt_per_invocation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inp, policy = _setup(tmp_path, 100)
    journal = tmp_path / "j.sqlite"
    with _server() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        pytest.importorskip("openai")  # imported now: every call starts well before the deadline
        _invocations(inp, policy, journal, 3)
        # At most one attempt per call and invocation (never retried), every request
        # journalled before it left (one cut off while it left counts, unseen by the server).
        sent = _sent(journal)
        assert len(sent) == CALLS and max(sent.values()) <= 3, sent
        assert srv.requests_received <= sum(sent.values()), sent
        record = _finish(srv, journal)
    assert "followup:live" in record["path"], record  # type: ignore[operator]


def test_an_attempt_the_deadline_has_passed_is_never_sent_nor_charged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inp, policy = _setup(tmp_path, CALLS)
    make = runtime.Runtime._make_client

    def slow_start(self: runtime.Runtime, spec: str | None) -> object:
        # What importing the model SDK costs a fresh process, on the event loop's thread.
        time.sleep(1.2)
        return make(self, spec)

    monkeypatch.setattr(runtime.Runtime, "_make_client", slow_start)
    journal = tmp_path / "j.sqlite"
    with _server() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        _invocations(inp, policy, journal, 3)
        # The deadline had passed when each attempt would have started: none was sent.
        assert srv.requests_received == 0
        assert _sent(journal) == Counter()
        monkeypatch.setattr(runtime.Runtime, "_make_client", make)
        record = _finish(srv, journal)
    # The budget (two calls) was not spent on attempts never made: the re-ask was made.
    assert "followup:live" in record["path"], record  # type: ignore[operator]
    assert record["usage"]["attempts"] == CALLS, record  # type: ignore[index]
