"""A deadline holds while a window of panels is embedded.

The traces of 64 panels are embedded together before they are decided. That used to be
one call on the event loop's thread, which the deadline could not stop:
``decide p300.jsonl --deadline 3`` with MiniLM ran 21 s. Now a window is embedded in
calls of at most ``EMBED_CHUNK`` texts and none starts after the deadline, so a run
stops within the call in progress. The embedding here sleeps in proportion to its texts
(a call of 32 texts takes longer than the whole deadline), so a run stopped on time has
embedded at most one call's texts of a window of 192. The stopped run resumes to the
records of a run never stopped.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import slow_embed
from cli_helpers import cli
from dissensus.pipeline import DeadlineReached, execute_run, policy_from_dict, start_run
from dissensus.pipeline.executors import PREFETCH
from dissensus.pipeline.records import CaseRecord
from dissensus.pipeline.review import final_records
from dissensus.pipeline.runtime import EMBED_CHUNK
from dissensus.states.similarity import Vectors, cosine_matrix, normalise_rows
from dissensus.store import Journal
from dissensus.store import event_types as ev
from pipeline_cases import panel, write_jsonl, write_policy


def _panels(n: int) -> list[dict[str, Any] | str]:
    return [
        panel(f"p{i}", ["1", "1", str(1 + i % 2)],
              reasoning=[f"Option {1 + (i + k) % 2} states the window, reason {i}.{k}." for k in range(3)])
        for i in range(n)
    ]  # fmt: skip


class SlowPerText:
    """An embedding backend whose calls take ``delay`` seconds per text."""

    name = "slow-per-text"

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.embedded: list[str] = []

    def embed(self, texts: Sequence[str]) -> Vectors:
        time.sleep(self.delay * len(texts))
        self.embedded.extend(texts)
        rows = np.array([[1.0, float(len(t) % 7), 0.5] for t in texts], dtype=np.float32)
        return normalise_rows(rows.reshape(len(texts), 3))

    def matrix(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        return cosine_matrix(self.embed(texts))


def _run(journal: Journal, backend: SlowPerText, deadline: float | None) -> list[CaseRecord]:
    async def go() -> list[CaseRecord]:
        records = execute_run(journal, "R", backend=lambda: backend, deadline_s=deadline)
        return [r async for r in records]

    return asyncio.run(go())


def test_a_deadline_stops_a_run_within_one_call_of_its_embedding(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", _panels(PREFETCH))
    texts = 3 * PREFETCH
    policy = policy_from_dict({"reading": {"similarity": "tfidf", "theta_s": 0.5}})
    slow = SlowPerText(delay=0.4 / EMBED_CHUNK)  # a call: 0.4 s, twice the deadline
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(inp), policy, run_id="R")
        with pytest.raises(DeadlineReached, match=r"deadline of 0\.2 s reached"):
            _run(journal, slow, deadline=0.2)
        assert len(slow.embedded) <= EMBED_CHUNK < texts
        assert [e.type for e in journal.events("R")][-1] == ev.RUN_STOPPED
        assert journal.run_status("R") == "incomplete"
        resumed = _run(journal, SlowPerText(delay=0.0), deadline=None)
    with Journal(tmp_path / "base.sqlite") as base:
        start_run(base, str(inp), policy, run_id="R")
        assert resumed == _run(base, SlowPerText(delay=0.0), deadline=None)
        assert len(resumed) == PREFETCH


def test_decide_with_a_deadline_stops_while_embedding_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", _panels(PREFETCH + 6))
    pol = write_policy(
        tmp_path / "p.yaml",
        {"reading": {"similarity": "slow_embed:per_text", "theta_s": 0.5}, "allow_code": True},
    )
    monkeypatch.setenv("DISSENSUS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(slow_embed, "PER_TEXT_S", [0.4 / EMBED_CHUNK])
    slow_embed.PER_TEXT.clear()

    def decide(name: str, *extra: str) -> Any:
        return cli("decide", inp, "--policy", pol, "--journal", tmp_path / name, "--run-id", "R",
                   "--json", *extra)  # fmt: skip

    stopped = decide("j.sqlite", "--deadline", "0.2")
    assert stopped.code == 1, stopped.err
    assert "deadline of 0.2 s reached after 0 case(s)" in stopped.err
    assert len(slow_embed.PER_TEXT) <= EMBED_CHUNK
    slow_embed.PER_TEXT_S[0] = 0.0
    resumed = cli("runs", "resume", "R", "--journal", tmp_path / "j.sqlite", "--json")
    assert resumed.code == 0, resumed.err
    base = decide("base.sqlite")
    assert base.code == 0, base.err
    assert resumed.out == base.out and len(base.out.splitlines()) == PREFETCH + 6
    with Journal(tmp_path / "j.sqlite") as j, Journal(tmp_path / "base.sqlite") as b:
        assert j.verify("R").ok
        assert final_records(j, "R") == final_records(b, "R")
    assert [json.loads(line)["id"] for line in resumed.out.splitlines()][:2] == ["p0", "p1"]
