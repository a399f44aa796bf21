"""Prefetching embeds every trace of a run once, whatever the embedding backend.

A counting backend (no cache, like the static table or MiniLM with ``--no-cache``)
records every text it is asked to embed; a local run (a window in calls of at most
``EMBED_CHUNK`` texts), a Ray worker's block (decided in-process, without Ray) and
:class:`PrefetchedBackend` itself must ask for each text once, and readings must equal
those of the bare backend.
"""

from __future__ import annotations

import asyncio
import json
import pickle
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.pipeline import Policy, execute_run, policy_from_dict, start_run
from dissensus.pipeline.executors import PREFETCH
from dissensus.pipeline.runtime import EMBED_CHUNK, PrefetchedBackend
from dissensus.states.similarity import Vectors, cosine_matrix, normalise_rows
from dissensus.store import Journal
from pipeline_cases import panel

POLICY: dict[str, Any] = {"reading": {"similarity": "tfidf", "theta_s": 0.75}}


class CountingBackend:
    """Deterministic hashed bag-of-words vectors; counts every text embedded."""

    name = "counting-test"

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls += 1
        self.counts.update(texts)
        rows = np.zeros((len(texts), 16), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.split():
                rows[i, sum(map(ord, word)) % 16] += 1.0
            rows[i, 15] += 0.5
        return normalise_rows(rows)

    def matrix(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        return cosine_matrix(self.embed(texts))


def _lines(n: int) -> list[str]:
    out = []
    for i in range(n):
        words = ["refund", "window", "policy", "clear", "days", "option"]
        reasoning = [
            f"Option {1 + (i + k) % 2} is better: {words[(i + k) % 6]} {words[(i * k) % 6]} {i}."
            for k in range(3)
        ]
        out.append(json.dumps(panel(f"p{i}", ["1", "1", str(1 + i % 2)], reasoning=reasoning)))
    return out


def _run(tmp_path: Path, lines: list[str], backend: CountingBackend, concurrency: int) -> list[Any]:
    path = tmp_path / "panels.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    journal = Journal(tmp_path / f"j{concurrency}.sqlite")
    policy: Policy = policy_from_dict({**POLICY, "concurrency": concurrency})
    start_run(journal, str(path), policy, run_id="r")

    async def go() -> list[Any]:
        return [rec async for rec in execute_run(journal, "r", backend=lambda: backend)]

    records = asyncio.run(go())
    journal.close()
    return records


def test_local_run_embeds_each_trace_once(tmp_path: Path) -> None:
    lines = _lines(2 * PREFETCH + 5)  # three prefetch windows
    texts = {o["reasoning"] for line in lines for o in json.loads(line)["outputs"]}
    backend = CountingBackend()
    records = _run(tmp_path, lines, backend, concurrency=4)
    assert len(records) == len(lines)
    assert set(backend.counts) == texts
    assert max(backend.counts.values()) == 1, backend.counts.most_common(3)
    # Each window in calls of at most EMBED_CHUNK texts (none per case).
    per_window = [3 * PREFETCH, 3 * PREFETCH, 3 * 5]
    assert backend.calls == sum(-(-n // EMBED_CHUNK) for n in per_window)


def test_prefetched_readings_equal_unprefetched_ones(tmp_path: Path) -> None:
    from dissensus.states import Thresholds, read_panel
    from dissensus.types import Panel

    lines = _lines(20)
    records = _run(tmp_path, lines, CountingBackend(), concurrency=2)
    assert len({r.state for r in records}) == 4  # all four states occur
    bare = CountingBackend()
    rd = policy_from_dict(POLICY).reading
    thresholds = Thresholds.for_model(bare.name, rd.theta_s, rd.theta_a)
    for line, record in zip(lines, records, strict=True):
        reading = read_panel(Panel.model_validate_json(line), bare, thresholds)
        assert record.state == reading.state.value


def test_ray_worker_block_embeds_each_trace_once(tmp_path: Path) -> None:
    from dissensus.engines.blocks import plan_blocks
    from dissensus.engines.ray.worker import _Decider
    from dissensus.pipeline.batch import _started

    lines = _lines(30)
    path = tmp_path / "panels.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    journal = Journal(tmp_path / "j.sqlite")
    start_run(journal, str(path), policy_from_dict(POLICY), run_id="r")
    started = _started(journal, "r")
    journal.close()
    decider = _Decider("r", started, fault=None)
    backend = CountingBackend()
    decider._backend = backend
    (block,) = plan_blocks(path, 512)
    item = {
        "block": asdict(block),
        "name": str(path),
        "seed": [],
        "allowance": {"calls": None, "tokens": None},
    }
    out = decider.decide(json.dumps(item))
    assert len(pickle.loads(out).cases) == len(lines)
    texts = {o["reasoning"] for line in lines for o in json.loads(line)["outputs"]}
    assert set(backend.counts) == texts
    assert max(backend.counts.values()) == 1
    assert backend.calls == 1


words = st.sampled_from(["a b", "b c", "c", "d e f", "refund", "window days", ""])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(batches=st.lists(st.lists(words, max_size=6), max_size=4), asked=st.lists(words, max_size=8))
def test_prefetched_backend_serves_the_inner_rows(
    batches: list[list[str]], asked: list[str]
) -> None:
    inner = CountingBackend()
    wrapped = PrefetchedBackend(inner)
    for batch in batches:
        wrapped.prefetch(batch)
    got = wrapped.embed(asked)
    want = CountingBackend().embed(asked)
    assert got.shape == want.shape
    assert np.allclose(got, want)
    held = set(batches[-1]) if batches else set()
    if len(batches) > 1:
        held |= set(batches[-2])
    before = Counter(inner.counts)
    wrapped.embed(asked)
    # ``embed`` asks the inner backend only for texts not held from the last two
    # prefetches, each once.
    assert inner.counts - before == Counter(set(asked) - held)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(batch=st.lists(words, max_size=6), again=st.lists(words, max_size=6))
def test_prefetch_embeds_only_texts_not_held(batch: list[str], again: list[str]) -> None:
    inner = CountingBackend()
    wrapped = PrefetchedBackend(inner)
    wrapped.prefetch(batch)
    assert inner.counts == Counter(set(batch))
    wrapped.prefetch(again)
    assert inner.counts == Counter(set(batch)) + Counter(set(again) - set(batch))
