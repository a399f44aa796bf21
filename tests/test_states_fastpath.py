"""The route hot path against its references: vectorised readings, memoised routes, GC."""

from __future__ import annotations

import gc
import hashlib
import io
import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.errors import DissensusError
from dissensus.io.fastjson import dumps
from dissensus.states import RuleSet, Thresholds, callable_backend, read_panels
from dissensus.states.reading import _read_reference
from dissensus.states.stream import GC_THRESHOLD, record_of, route_stream
from dissensus.types import Panel

# Examples in the suite; the full count under DISSENSUS_SOAK=1 (`make test-soak`).
SOAK = os.environ.get("DISSENSUS_SOAK") == "1"


def _vectors(texts: list[str], dtype: type[np.floating[Any]]) -> np.ndarray:
    out = np.zeros((len(texts), 16), dtype=dtype)
    for i, text in enumerate(texts):
        for word in text.split():
            h = int(hashlib.md5(word.encode()).hexdigest(), 16)
            out[i, h % 16] += 1.0 + (h >> 8) % 7
            out[i, (h >> 4) % 16] -= 0.5
    return out


F32 = callable_backend(lambda texts: _vectors(texts, np.float32), name="toy32")


class Float64Backend:
    """An embedding backend returning float64 rows (callable backends give float32)."""

    name = "toy64"

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = _vectors(texts, np.float64)
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return rows / np.where(norms == 0, 1.0, norms)

    def matrix(self, texts: list[str]) -> np.ndarray:
        rows = self.embed(texts)
        return rows @ rows.T


F64 = Float64Backend()

TRACES = st.sampled_from(
    ["", "  ", "same words here", "alpha beta", "beta alpha gamma", "delta", "x y z w", "y x"]
)
DECISIONS = st.sampled_from(["A", "B", "C", None])


@st.composite
def panels(draw: st.DrawFn, index: int = 0) -> Panel:
    n = draw(st.integers(min_value=2, max_value=6))
    outputs = [
        {"agent": f"a{j}", "decision": draw(DECISIONS), "reasoning": draw(TRACES)} for j in range(n)
    ]
    return Panel.model_validate({"id": f"p{index}", "outputs": outputs})


BATCHES = st.lists(panels(), min_size=1, max_size=24)


@settings(max_examples=150 if SOAK else 60, deadline=None)
@given(
    batch=BATCHES,
    backend=st.sampled_from([F32, F64]),
    theta_s=st.floats(min_value=-1.0, max_value=1.0),
    theta_a=st.sampled_from([0.0, 0.5, 0.6, 0.8, 1.0]),
)
def test_vectorised_reading_equals_per_panel_reference(
    batch: list[Panel], backend: Any, theta_s: float, theta_a: float
) -> None:
    th = Thresholds(theta_s=theta_s, theta_a=theta_a)
    fast = read_panels(batch, backend, th)
    reference = _read_reference(batch, backend, th)
    assert [r.model_dump() for r in fast] == [r.model_dump() for r in reference]
    # No two readings share a mutable value (memoised tallies are copied).
    for name in ("tie", "votes", "agents", "matrix", "missing_reasoning"):
        ids = [id(getattr(r, name)) for r in fast]
        assert len(set(ids)) == len(ids), name


RULES = {
    "rules": [
        {
            "id": "legal",
            "condition": 'meta.category == "legal" and state != "CA"',
            "action": "escalate",
        },
        {"id": "flag-int", "condition": "meta.flag > 0", "action": "escalate", "priority": 2},
        {"id": "flag-eq", "condition": "meta.flag == 1", "action": "escalate", "priority": 2},
        {"id": "deep", "condition": 'meta.a.b == "x"', "action": "auto", "priority": 3},
        {"id": "tied", "condition": '"A" in tie', "action": "seek_context", "priority": 4},
        {
            "id": "few",
            "condition": "agents < 3 and abstentions >= 1",
            "action": "escalate",
            "priority": 5,
        },
    ],
    "builtins": ["cd-without-values"],
}
META_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-1, max_value=2),
    st.sampled_from([0.0, 1.0, -0.0, 2.5]),
    st.sampled_from(["legal", "news", "x"]),
    st.lists(st.integers(min_value=0, max_value=1), max_size=2),
    st.fixed_dictionaries({"b": st.sampled_from(["x", "y", 1])}),
)
METAS = st.dictionaries(
    st.sampled_from(["category", "flag", "a", "other"]), META_VALUES, max_size=4
)


@settings(max_examples=100 if SOAK else 40, deadline=None)
@given(
    batch=BATCHES,
    metas=st.lists(METAS, min_size=24, max_size=24),
    profiles=st.lists(st.one_of(st.none(), st.integers(0, 3)), min_size=24, max_size=24),
)
def test_memoised_routes_equal_fresh_routes(
    batch: list[Panel], metas: list[dict[str, Any]], profiles: list[int | None]
) -> None:
    ruleset = RuleSet.from_dict(RULES)
    readings = read_panels(batch, F32, Thresholds(theta_s=0.3))
    # Twice over: the second pass is served by the memo.
    for _ in range(2):
        for reading, meta, vp in zip(readings, metas, profiles, strict=False):
            routed = ruleset.route(reading, meta, value_profiles=vp)
            fresh = ruleset._route(reading, meta, vp)
            assert routed == fresh
            routed.defeated.append("mutated")  # a route's lists are its own
            routed.concurring.append("mutated")
            assert ruleset.route(reading, meta, value_profiles=vp) == fresh


def test_memo_distinguishes_booleans_from_numbers() -> None:
    ruleset = RuleSet.from_dict(RULES)
    (reading,) = read_panels(
        [
            Panel.model_validate(
                {
                    "id": "p",
                    "outputs": [
                        {"agent": "a", "decision": "B", "reasoning": "alpha beta"},
                        {"agent": "b", "decision": "B", "reasoning": "alpha beta"},
                        {"agent": "c", "decision": "B", "reasoning": "alpha beta"},
                    ],
                }
            )
        ],
        F32,
        Thresholds(theta_s=0.3),
    )
    assert ruleset.route(reading, {"flag": 1}).rule == "flag-int"
    # True == 1 as a dict key, but `meta.flag > 0` is false for a boolean.
    assert ruleset.route(reading, {"flag": True}).rule == "flag-eq"
    assert ruleset.route(reading, {"flag": 1.0}).rule == "flag-int"


def test_rules_reading_similarity_are_not_memoised() -> None:
    ruleset = RuleSet.from_dict(
        {"rules": [{"id": "low", "condition": "min_similarity < 0.1", "action": "escalate"}]}
    )
    assert ruleset._key is None
    assert "min_similarity" in ruleset.names


def _lines(n: int) -> list[Panel]:
    return [
        Panel.model_validate(
            {
                "id": f"p{i}",
                "outputs": [
                    {"agent": "a", "decision": "A", "reasoning": "alpha beta"},
                    {"agent": "b", "decision": "B" if i % 2 else "A", "reasoning": "delta"},
                ],
            }
        )
        for i in range(n)
    ]


def test_gc_threshold_is_raised_while_streaming_and_restored() -> None:
    old = gc.get_threshold()
    seen: list[int] = []

    def watch(texts: list[str]) -> np.ndarray:
        seen.append(gc.get_threshold()[0])
        return _vectors(texts, np.float32)

    route_stream(
        _lines(5),
        callable_backend(watch, name="w"),
        Thresholds(theta_s=0.3),
        RuleSet.default(),
        handle=io.StringIO(),
    )
    assert seen == [max(GC_THRESHOLD, old[0])]
    assert gc.get_threshold() == old


def test_gc_threshold_is_restored_on_error() -> None:
    old = gc.get_threshold()

    def boom(texts: list[str]) -> np.ndarray:
        raise RuntimeError("backend failed")

    with pytest.raises(DissensusError):
        route_stream(
            _lines(3), callable_backend(boom, name="b"), Thresholds(theta_s=0.3), RuleSet.default()
        )
    assert gc.get_threshold() == old


@settings(max_examples=60, deadline=None)
@given(
    batch=BATCHES,
    with_matrix=st.booleans(),
    keep_rows=st.integers(min_value=0, max_value=30),
    batch_size=st.integers(min_value=1, max_value=10),
)
def test_stream_records_equal_records_of_read_panels(
    batch: list[Panel], with_matrix: bool, keep_rows: int, batch_size: int
) -> None:
    ruleset = RuleSet.from_dict(RULES)
    th = Thresholds(theta_s=0.3)
    out = io.StringIO()
    tally = route_stream(
        batch,
        F32,
        th,
        ruleset,
        handle=out,
        batch_size=batch_size,
        with_matrix=with_matrix,
        keep_rows=keep_rows,
    )
    readings = read_panels(batch, F32, th)
    routes = [
        ruleset.route(r, p.meta, value_profiles=sum(1 for o in p.outputs if o.values))
        for r, p in zip(readings, batch, strict=True)
    ]
    expected = "".join(
        dumps(record_of(r, x, with_matrix=with_matrix)) + "\n"
        for r, x in zip(readings, routes, strict=True)
    )
    assert out.getvalue() == expected
    # Kept rows are whole readings, matrix included.
    assert tally.rows == list(zip(readings, routes, strict=True))[:keep_rows]
