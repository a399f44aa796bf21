"""Readings: hand-checked examples and the guarantees of docs/states.md as properties."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.errors import DissensusError, InputError
from dissensus.states import (
    Reading,
    State,
    Thresholds,
    callable_backend,
    get_backend,
    read_from_matrix,
    read_panel,
    read_panels,
)
from dissensus.types import Panel


def hashed_bow(texts: list[str]) -> np.ndarray:
    """A deterministic toy encoder: hashed bag of words in 64 dimensions."""
    out = np.zeros((len(texts), 64), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in text.lower().split():
            out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % 64] += 1.0
    return out


TOY = callable_backend(hashed_bow, name="toy")
TFIDF = get_backend("tfidf")


def panel(*outputs: tuple[str, str | None, str], meta: dict[str, object] | None = None) -> Panel:
    return Panel.model_validate(
        {
            "id": "p",
            "meta": meta or {},
            "outputs": [{"agent": a, "decision": d, "reasoning": r} for a, d, r in outputs],
        }
    )


def test_four_states_from_a_hand_made_matrix() -> None:
    p = panel(("a", "x", "r1"), ("b", "x", "r2"), ("c", "y", "r3"))
    high = [[1, 0.9, 0.9], [0.9, 1, 0.9], [0.9, 0.9, 1]]
    low = [[1, 0.1, 0.2], [0.1, 1, 0.3], [0.2, 0.3, 1]]
    th = Thresholds(theta_s=0.5, theta_a=0.6)
    assert read_from_matrix(p, high, "m", th).state is State.CONVERGENT_AGREEMENT
    assert read_from_matrix(p, low, "m", th).state is State.DIVERGENT_AGREEMENT
    strict = Thresholds(theta_s=0.5, theta_a=0.9)
    assert read_from_matrix(p, high, "m", strict).state is State.CONVERGENT_DISAGREEMENT
    r = read_from_matrix(p, low, "m", strict)
    assert r.state is State.DIVERGENT_DISAGREEMENT
    assert r.state.value == "DD"
    assert r.mean_similarity == pytest.approx(0.2)
    assert r.min_similarity == pytest.approx(0.1)
    assert r.decision == "x"
    assert r.agreement == pytest.approx(2 / 3)
    assert r.votes == {"x": 2, "y": 1}
    assert r.model == "m"
    assert r.thresholds == strict


def test_tie_is_explicit_and_never_agreement() -> None:
    p = panel(("a", "yes", "same"), ("b", "no", "same"), ("c", "yes", "same"), ("d", "no", "same"))
    r = read_panel(p, TFIDF, Thresholds(theta_s=0.5, theta_a=0.0))
    assert r.tie == ["no", "yes"]
    assert r.decision == "no"  # smallest tied label
    assert r.agreement == 0.5
    assert r.state is State.CONVERGENT_DISAGREEMENT


def test_abstentions_do_not_vote() -> None:
    p = panel(("a", "keep", "t one"), ("b", None, "t two"), ("c", "keep", "t three"))
    r = read_panel(p, TFIDF, Thresholds(theta_s=0.0, theta_a=1.0))
    assert r.abstentions == 1
    assert r.agreement == 1.0
    assert r.votes == {"keep": 2}
    assert r.state.agreement


def test_nobody_voting_is_disagreement() -> None:
    p = panel(("a", None, "first"), ("b", None, "second"))
    r = read_panel(p, TFIDF, Thresholds(theta_s=-1.0, theta_a=0.0))
    assert r.decision is None
    assert r.agreement == 0.0
    assert r.state is State.CONVERGENT_DISAGREEMENT


def test_one_voter_is_not_agreement() -> None:
    p = panel(("a", "x", "first"), ("b", None, "second"))
    r = read_panel(p, TFIDF, Thresholds(theta_s=-1.0, theta_a=0.0))
    assert r.agreement == 1.0
    assert not r.state.agreement


def test_any_categorical_labels() -> None:
    p = panel(("a", "red", "r"), ("b", "green", "g"), ("c", "blue", "b"), ("d", "red", "rr"))
    r = read_panel(p, TFIDF, Thresholds(theta_s=0.5, theta_a=0.5))
    assert r.decision == "red"
    assert r.agreement == 0.5
    assert r.votes == {"blue": 1, "green": 1, "red": 2}


def test_matrix_shape_checked() -> None:
    p = panel(("a", "x", "r1"), ("b", "x", "r2"))
    with pytest.raises(InputError, match="shape"):
        read_from_matrix(p, [[1.0]], "m", Thresholds(theta_s=0.5))


def test_unknown_model_needs_theta_s() -> None:
    from dissensus.errors import ConfigError

    p = panel(("a", "x", "r1"), ("b", "x", "r2"))
    with pytest.raises(ConfigError, match="theta_s"):
        read_panel(p, TOY)
    assert Thresholds.for_model("tfidf").theta_a == 0.8


def test_batch_equals_single() -> None:
    panels = [
        panel(("a", "x", "alpha beta"), ("b", "y", "beta gamma"), ("c", "x", "alpha beta")),
        panel(("a", "x", "delta"), ("b", "x", "alpha beta")),
    ]
    th = Thresholds(theta_s=0.3)
    for backend in (TOY, TFIDF):
        assert read_panels(panels, backend, th) == [read_panel(p, backend, th) for p in panels]


# --- properties ---------------------------------------------------------------------------

WORDS = ["harm", "speech", "satire", "context", "group", "attack", "joke", "policy", "risk", "fine"]
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)
decisions = st.one_of(st.none(), st.sampled_from(["keep", "remove", "flag"]))
outputs = st.lists(st.tuples(decisions, texts), min_size=2, max_size=7)


def make(rows: list[tuple[str | None, str]]) -> Panel:
    return panel(*[(f"agent{i}", d, r) for i, (d, r) in enumerate(rows)])


@given(outputs, st.randoms(use_true_random=False), st.floats(-1, 1), st.floats(0, 1))
def test_state_invariant_to_agent_order(
    rows: list[tuple[str | None, str]], rnd: object, ts: float, ta: float
) -> None:
    th = Thresholds(theta_s=ts, theta_a=ta)
    shuffled = list(enumerate(rows))
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    p1 = make(rows)
    p2 = panel(*[(f"agent{i}", d, r) for i, (d, r) in shuffled])
    for backend in (TOY, TFIDF):
        r1, r2 = read_panel(p1, backend, th), read_panel(p2, backend, th)
        assert r1.state == r2.state
        assert r1.mean_similarity == r2.mean_similarity
        assert r1.min_similarity == r2.min_similarity
        assert (r1.decision, r1.tie, r1.agreement) == (r2.decision, r2.tie, r2.agreement)


@given(texts, st.integers(2, 6), decisions)
def test_identical_traces_have_similarity_one(text: str, n: int, decision: str | None) -> None:
    p = make([(decision, text)] * n)
    for backend in (TOY, TFIDF):
        r = read_panel(p, backend, Thresholds(theta_s=1.0, theta_a=0.5))
        assert r.mean_similarity == 1.0
        assert r.min_similarity == 1.0
        assert all(v == 1.0 for row in r.matrix for v in row)
        assert r.state.convergent


@given(outputs, st.floats(0, 1), st.floats(0, 1), st.floats(-1, 1))
def test_raising_theta_a_never_turns_disagreement_into_agreement(
    rows: list[tuple[str | None, str]], a1: float, a2: float, ts: float
) -> None:
    low, high = sorted((a1, a2))
    p = make(rows)
    before = read_panel(p, TFIDF, Thresholds(theta_s=ts, theta_a=low))
    after = read_panel(p, TFIDF, Thresholds(theta_s=ts, theta_a=high))
    if not before.state.agreement:
        assert not after.state.agreement
    assert before.state.convergent == after.state.convergent


@given(outputs)
def test_similarities_bounded_and_symmetric(rows: list[tuple[str | None, str]]) -> None:
    r = read_panel(make(rows), TOY, Thresholds(theta_s=0.5))
    m = np.asarray(r.matrix)
    assert np.array_equal(m, m.T)
    assert np.all(np.diag(m) == 1.0)
    assert -1.0 <= r.min_similarity <= r.mean_similarity <= 1.0


@given(outputs, st.randoms(use_true_random=False))
def test_read_from_matrix_invariant_to_permutation(
    rows: list[tuple[str | None, str]], rnd: object
) -> None:
    n = len(rows)
    rng = np.random.default_rng(len(rows))
    m = rng.uniform(-1, 1, size=(n, n))
    perm = list(range(n))
    rnd.shuffle(perm)  # type: ignore[attr-defined]
    p1 = make(rows)
    p2 = panel(*[(f"agent{i}", rows[i][0], rows[i][1]) for i in perm])
    th = Thresholds(theta_s=0.0, theta_a=0.5)
    r1 = read_from_matrix(p1, m, "m", th)
    r2 = read_from_matrix(p2, m[np.ix_(perm, perm)], "m", th)
    assert r1.state == r2.state
    assert r1.mean_similarity == r2.mean_similarity


@given(outputs)
def test_reading_round_trips_and_rereads_from_its_matrix(
    rows: list[tuple[str | None, str]],
) -> None:
    p = make(rows)
    th = Thresholds(theta_s=0.4, theta_a=0.6)
    for backend in (TOY, TFIDF):
        r = read_panel(p, backend, th)
        assert Reading.model_validate(r.model_dump(mode="json")) == r
        assert read_from_matrix(p, r.matrix, r.model, th) == r


def test_a_panel_over_the_agent_bound_is_refused_before_its_matrix() -> None:
    """10,000 agents built a 10,000 x 10,000 matrix (gigabytes, then MemoryError): the
    library refuses them as every door does, naming ``outputs``; 256 are read."""
    from dissensus.io.limits import MAX_AGENTS

    def data(n: int) -> dict[str, object]:
        return {
            "id": "big",
            "outputs": [
                {"agent": f"a{i}", "decision": "xy"[i % 2], "reasoning": f"reason {i % 7}"}
                for i in range(n)
            ],
        }

    with pytest.raises(InputError, match=r"field 'outputs': 10000 agents; at most 256 per panel"):
        read_panel(data(10_000), get_backend("tfidf"))
    assert len(read_panel(data(MAX_AGENTS), get_backend("tfidf")).agents) == MAX_AGENTS


@st.composite
def at_most_one_reasoning(draw: st.DrawFn) -> list[tuple[str | None, str]]:
    """Panel rows where no more than one agent gave reasoning (the others blank)."""
    rows = draw(outputs)
    keep = draw(st.one_of(st.none(), st.integers(0, len(rows) - 1)))
    blanks = st.sampled_from(["", " ", "  \n\t"])
    return [(d, r if i == keep else draw(blanks)) for i, (d, r) in enumerate(rows)]


@given(
    at_most_one_reasoning(),
    st.one_of(st.sampled_from([-1.0, 0.0]), st.floats(-1, 1)),
    st.floats(0, 1),
    st.data(),
)
def test_undefined_similarity_is_never_convergent(
    rows: list[tuple[str | None, str]], ts: float, ta: float, data: st.DataObject
) -> None:
    """Fewer than two agents gave reasoning: similarity is undefined (reported as 0.0),
    and the state is divergent (DA or DD) whatever theta_s, even one at or below 0, by
    every way of reading."""
    th = Thresholds(theta_s=ts, theta_a=ta)
    p = make(rows)
    n = len(rows)
    cells = data.draw(st.lists(st.floats(-1, 1), min_size=n * n, max_size=n * n))
    matrix = [
        [1.0 if i == j else cells[min(i, j) * n + max(i, j)] for j in range(n)] for i in range(n)
    ]
    readings = [read_from_matrix(p, matrix, "m", th)]
    for backend in (TOY, TFIDF):
        readings += [read_panel(p, backend, th), *read_panels([p, p], backend, th)]
    for r in readings:
        assert not r.similarity_defined and r.mean_similarity == 0.0, r
        assert r.state in (State.DIVERGENT_AGREEMENT, State.DIVERGENT_DISAGREEMENT), r


class _BrokenMatrix:
    """A matrix backend (Python protocol, no ``embed``) whose cell ``at`` is ``bad``."""

    def __init__(self, at: tuple[int, int], bad: float) -> None:
        self.name = "broken-matrix"
        self.at, self.bad = at, bad

    def matrix(self, texts: list[str]) -> np.ndarray:
        m = np.full((len(texts), len(texts)), 0.5)
        np.fill_diagonal(m, 1.0)
        i, j = self.at
        m[i % len(texts), j % len(texts)] = self.bad
        return m


class _BrokenEmbedding:
    """An embedding backend (Python protocol) whose row ``at`` holds ``bad``."""

    name = "broken-embedding"

    def __init__(self, at: int, bad: float) -> None:
        self.at, self.bad = at, bad

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = np.eye(len(texts), 4, dtype=np.float32) + 0.5
        rows[self.at % len(texts), 0] = self.bad
        return rows

    def matrix(self, texts: list[str]) -> np.ndarray:
        raise AssertionError("the reader embeds")


@given(
    st.integers(2, 6),
    st.tuples(st.integers(0, 5), st.integers(0, 5)),
    st.sampled_from([float("nan"), float("inf"), float("-inf")]),
)
def test_a_backend_returning_non_finite_similarities_fails_the_reading(
    n: int, at: tuple[int, int], bad: float
) -> None:
    """A NaN similarity compares false with theta_s: read, it would be a divergent state
    with a NaN mean. Whatever backend returns it, the reading fails naming the backend."""
    p = panel(*((f"a{i}", "x", f"trace number {i}") for i in range(n)))
    th = Thresholds(theta_s=0.3)
    for backend in (_BrokenMatrix(at, bad), _BrokenEmbedding(at[0], bad)):
        with pytest.raises(DissensusError, match=f"'{backend.name}' returned non-finite"):
            read_panels([p], backend, th)  # type: ignore[arg-type]
