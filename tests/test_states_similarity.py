"""Similarity backends, the embedding cache and calibration."""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.errors import ConfigError, DissensusError, InputError
from dissensus.states import (
    EmbeddingBackend,
    SimilarityBackend,
    Thresholds,
    callable_backend,
    fit_theta_s,
    get_backend,
    read_panels,
    theta_s_at,
)
from dissensus.states.cache import CachedBackend, EmbeddingCache, text_key
from dissensus.states.lexical import TfidfBackend, tokenize
from dissensus.states.similarity import LookupBackend, normalise_rows
from dissensus.types import Panel


class Counting:
    """An embedding backend that records every text it embeds."""

    name = "counting"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.seen.extend(texts)
        return normalise_rows([[float(len(t)), float(t.count("a")) + 1.0, 1.0] for t in texts])

    def matrix(self, texts: Sequence[str]) -> np.ndarray:
        rows = self.embed(texts).astype(np.float64)
        return rows @ rows.T


def test_protocols() -> None:
    assert isinstance(get_backend("tfidf"), SimilarityBackend)
    assert not isinstance(get_backend("tfidf"), EmbeddingBackend)
    assert isinstance(Counting(), EmbeddingBackend)


def test_tfidf_hand_checked() -> None:
    m = TfidfBackend().matrix(["the cat sat", "the cat sat", "a dog ran"])
    assert m[0, 1] == pytest.approx(1.0)
    assert m[0, 2] == 0.0
    assert tokenize("Hello, World! a") == ["hello", "world"]
    # no tokens at all: similarity 0 with others
    assert TfidfBackend().matrix(["!!", "cat"])[0, 1] == 0.0


@given(st.lists(st.text(min_size=1, max_size=30), min_size=2, max_size=6))
def test_tfidf_bounded_symmetric(texts: list[str]) -> None:
    m = TfidfBackend().matrix(texts)
    assert m.shape == (len(texts), len(texts))
    assert np.allclose(m, m.T)
    assert np.all(m >= -1.0) and np.all(m <= 1.0)


def test_unknown_backend() -> None:
    with pytest.raises(ConfigError, match="unknown similarity backend"):
        get_backend("word2vec")
    with pytest.raises(ConfigError, match="cannot import"):
        get_backend("no_such_module_xyz:f", allow_code=True)
    with pytest.raises(ConfigError, match="no attribute"):
        get_backend("math:nope", allow_code=True)
    with pytest.raises(ConfigError, match="not callable"):
        get_backend("math:pi", allow_code=True)


def test_code_names_need_an_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression: any module:function ran over panel text, e.g. subprocess:run.
    monkeypatch.delenv("DISSENSUS_ALLOW_CODE", raising=False)
    for name in ("subprocess:run", "os:system", "math:sqrt"):
        with pytest.raises(ConfigError, match="allow_code"):
            get_backend(name)
        with pytest.raises(ConfigError, match="allow_code"):
            get_backend(name, allow_code=False)
    monkeypatch.setenv("DISSENSUS_ALLOW_CODE", "1")
    with pytest.raises(ConfigError, match="no attribute"):
        get_backend("math:nope")  # allowed now, and still checked


def test_a_function_that_returns_no_vectors_is_refused() -> None:
    backend = get_backend("builtins:len", allow_code=True, cache=False)
    with pytest.raises(DissensusError, match="embedding function"):
        backend.matrix(["a", "b"])


def test_module_function_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_embedder.py").write_text(
        "def embed(texts):\n    return [[len(t), 1.0] for t in texts]\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    backend = get_backend("my_embedder:embed", cache=False, allow_code=True)
    assert backend.name == "my_embedder:embed"
    rows = backend.embed(["ab", "abcd"])  # type: ignore[attr-defined]
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0)
    sys.modules.pop("my_embedder", None)


def test_callable_backend_checks_rows() -> None:
    # A backend's bad output is a run-time failure of that backend (exit 1) naming it,
    # not a configuration error (exit 2).
    bad = callable_backend(lambda texts: [[1.0, 0.0]], name="bad")
    with pytest.raises(DissensusError, match=r"'bad' failed: .*rows") as info:
        bad.embed(["a", "b"])
    assert not isinstance(info.value, ConfigError) and info.value.exit_code == 1
    nan = callable_backend(lambda texts: [[float("nan")] for _ in texts], name="nan")
    with pytest.raises(DissensusError, match=r"'nan' failed: .*non-finite") as info:
        nan.embed(["a"])
    assert not isinstance(info.value, ConfigError)


def test_a_failing_backends_message_is_quoted_short() -> None:
    """A backend's exception may quote its whole batch (``json:dumps`` returned a string,
    whose error held every panel's text: an error line of 834 kB)."""
    secret = "panel text " * 10_000
    backend = callable_backend(lambda texts: _raise(ValueError(secret)), name="dumps")
    with pytest.raises(DissensusError) as info:
        backend.embed(["a"])
    text = str(info.value)
    assert len(text) < 500 and "more characters" in text and "\n" not in text, text


def _raise(exc: BaseException) -> object:
    raise exc


def test_callable_backend_turns_any_exit_into_a_failure_but_not_an_interrupt() -> None:
    for exc in (SystemExit(0), SystemExit(None), GeneratorExit(), ValueError("x")):
        backend = callable_backend(lambda texts, e=exc: _raise(e), name="exits")
        with pytest.raises(DissensusError, match="'exits' failed: " + type(exc).__name__):
            backend.embed(["a", "b"])
    stop = callable_backend(lambda texts: _raise(KeyboardInterrupt()), name="stop")
    with pytest.raises(KeyboardInterrupt):
        stop.embed(["a"])


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    exponent=st.integers(-300, 307),
    rows=st.lists(st.tuples(st.floats(0.1, 9.0), st.floats(-9.0, 9.0)), min_size=1, max_size=5),
)
def test_callable_backend_rows_are_scale_free(
    exponent: int, rows: list[tuple[float, float]]
) -> None:
    """Rows are normalised: a row scaled by 10**exponent (past float32's range too)
    embeds as the row itself, with no warning."""
    import warnings

    scale = 10.0**exponent
    plain = callable_backend(lambda texts: [list(r) for r in rows], name="plain")
    scaled = callable_backend(lambda texts: [[x * scale for x in r] for r in rows], name="big")
    texts = [str(i) for i in range(len(rows))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = scaled.embed(texts)
    assert np.allclose(got, plain.embed(texts), atol=1e-6)


def test_lookup_backend() -> None:
    lb = LookupBackend({"a": [1.0, 0.0], "b": [0.0, 2.0]}, name="pre")
    assert np.allclose(lb.matrix(["a", "b"]), [[1, 0], [0, 1]])
    with pytest.raises(ConfigError, match="no precomputed"):
        lb.embed(["c"])


def test_cache_round_trip_and_dedup(tmp_path: Path) -> None:
    inner = Counting()
    cached = CachedBackend(inner, EmbeddingCache(tmp_path))
    first = cached.embed(["aa", "b", "aa"])
    assert inner.seen == ["aa", "b"]  # identical texts embedded once
    again = CachedBackend(Counting(), EmbeddingCache(tmp_path))
    second = again.embed(["b", "aa", "c"])
    assert again.inner.seen == ["c"]  # type: ignore[attr-defined]
    assert (again.hits, again.misses) == (2, 1)
    assert np.array_equal(second[1], first[0])
    assert (tmp_path / "embeddings.sqlite").exists()
    assert len(text_key("x")) == 64


def test_cache_keyed_by_model(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    cache.put_many("m1", [(text_key("t"), np.ones(3, dtype=np.float32))])
    assert cache.get_many("m2", [text_key("t")]) == {}
    assert list(cache.get_many("m1", [text_key("t")])) == [text_key("t")]


def test_cache_unwritable_dir_is_a_clear_error(tmp_path: Path) -> None:
    from dissensus.errors import DissensusError

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DissensusError, match="embedding cache"):
        CachedBackend(Counting(), EmbeddingCache(blocker / "sub")).embed(["a"])


def test_batch_embeds_each_distinct_trace_once() -> None:
    inner = Counting()
    panels = [
        Panel.model_validate(
            {
                "id": str(i),
                "outputs": [
                    {"agent": "a", "decision": "x", "reasoning": "same"},
                    {"agent": "b", "decision": "y", "reasoning": f"t{i % 2}"},
                ],
            }
        )
        for i in range(6)
    ]
    read_panels(panels, inner, Thresholds(theta_s=0.5))
    assert sorted(inner.seen) == ["same", "t0", "t1"]


def test_get_backend_env_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISSENSUS_CACHE", str(tmp_path / "c"))
    backend = get_backend("minilm")
    assert isinstance(backend, CachedBackend)
    assert backend.cache.directory == tmp_path / "c"
    assert backend.name == "all-MiniLM-L6-v2"
    assert not isinstance(get_backend("minilm", cache=False), CachedBackend)


def _panel(i: int, texts: list[str]) -> Panel:
    return Panel.model_validate(
        {
            "id": str(i),
            "outputs": [
                {"agent": f"a{k}", "decision": "x", "reasoning": t} for k, t in enumerate(texts)
            ],
        }
    )


def test_calibration_quantiles() -> None:
    vec = {"p": [1.0, 0.0], "q": [0.0, 1.0], "r": [1.0, 1.0]}
    backend = LookupBackend(vec, name="pre")
    panels = [_panel(0, ["p", "p"]), _panel(1, ["p", "q"]), _panel(2, ["p", "r"])]
    # mean similarities: 1.0, 0.0, 0.7071
    assert theta_s_at(panels, backend, 0.0) == pytest.approx(0.0)
    assert theta_s_at(panels, backend, 0.5) == pytest.approx(2**-0.5)
    result = fit_theta_s(iter(panels), backend, 1.0, batch_size=2)
    assert result.theta_s == pytest.approx(1.0)
    assert (result.panels, result.model) == (3, "pre")
    with pytest.raises(ConfigError, match="quantile"):
        fit_theta_s(panels, backend, 1.5)
    with pytest.raises(InputError, match="empty"):
        fit_theta_s([], backend, 0.5)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    defined=st.lists(st.sampled_from(["pp", "pq", "pr", "qr"]), min_size=1, max_size=6),
    undefined=st.lists(st.sampled_from([["", ""], ["p", ""], ["", "q", ""]]), max_size=5),
    quantile=st.sampled_from([0.0, 0.25, 0.5, 1.0]),
    seed=st.integers(0, 2**16),
)
def test_calibration_leaves_out_panels_without_similarity(
    defined: list[str], undefined: list[list[str]], quantile: float, seed: int
) -> None:
    vec = {"p": [1.0, 0.0], "q": [0.0, 1.0], "r": [1.0, 1.0]}
    backend = LookupBackend(vec, name="pre")
    good = [_panel(i, list(pair)) for i, pair in enumerate(defined)]
    bad = [_panel(100 + i, texts) for i, texts in enumerate(undefined)]
    mixed = good + bad
    np.random.default_rng(seed).shuffle(mixed)  # type: ignore[arg-type]
    alone = fit_theta_s(good, backend, quantile)
    fit = fit_theta_s(mixed, backend, quantile, batch_size=3)
    assert fit.theta_s == pytest.approx(alone.theta_s)
    assert (fit.panels, fit.undefined_similarity) == (len(good), len(bad))
    assert fit.min_similarity == pytest.approx(alone.min_similarity)


def test_calibration_with_no_defined_similarity_is_an_input_error() -> None:
    backend = LookupBackend({"p": [1.0, 0.0]}, name="pre")
    panels = [_panel(0, ["", ""]), _panel(1, ["p", ""])]
    with pytest.raises(InputError, match="none of the 2 panels has a defined"):
        fit_theta_s(panels, backend, 0.5)


def test_calibrate_thresholds_cli_leaves_out_undefined_panels(tmp_path: Path) -> None:
    import json

    from cli_helpers import cli

    none = '{"id":"n","outputs":[{"agent":"a","decision":"x","reasoning":""},'
    none += '{"agent":"b","decision":"x","reasoning":""}]}\n'
    only = tmp_path / "nr.jsonl"
    only.write_text(none)
    r = cli("calibrate-thresholds", only, "--quantile", "0.5", "--similarity", "tfidf", "--json")
    assert r.code == 2 and r.out == ""
    assert r.err.count("\n") == 1 and "nr.jsonl" in r.err and "defined" in r.err
    both = '{"id":"y","outputs":[{"agent":"a","decision":"x","reasoning":"red apples"},'
    both += '{"agent":"b","decision":"x","reasoning":"red apples here"}]}\n'
    mixed = tmp_path / "mix.jsonl"
    mixed.write_text(none + both)
    r = cli("calibrate-thresholds", mixed, "--quantile", "0.0", "--similarity", "tfidf", "--json")
    assert r.code == 0, r.err
    fit = json.loads(r.out)
    assert (fit["panels"], fit["undefined_similarity"]) == (1, 1)
    assert fit["theta_s"] > 0.5


def test_missing_embed_extra_is_a_friendly_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from dissensus.states.encoder import MiniLMBackend

    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(ConfigError, match="'embed' extra"):
        MiniLMBackend().embed(["a text"])


def _reference_tfidf(texts: list[str]) -> np.ndarray:
    """TF-IDF rows written out word by word: the definition the backend must keep."""
    counts = [Counter(tokenize(t)) for t in texts]
    vocab = sorted(set().union(*counts)) if counts else []
    if not vocab:
        return np.zeros((len(texts), 0), dtype=np.float32)
    n = len(texts)
    df: Counter[str] = Counter()
    for c in counts:
        df.update(c.keys())
    rows = np.zeros((n, len(vocab)), dtype=np.float64)
    for i, c in enumerate(counts):
        for j, word in enumerate(vocab):
            if word in c:
                idf = math.log((1 + n) / (1 + df[word])) + 1.0
                rows[i, j] = (1.0 + math.log(c[word])) * idf
    return normalise_rows(rows)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(
            st.sampled_from(["aa", "bb", "cc", "déjà", "x", "zz9", " ", "."]), max_size=300
        ).map(" ".join),
        max_size=6,
    )
)
def test_tfidf_rows_are_the_definitions_floats(texts: list[str]) -> None:
    """The table-driven TF-IDF gives bit for bit the rows of the word-by-word definition."""
    got = TfidfBackend().vectors(texts)
    want = _reference_tfidf(texts)
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab_1 \t.,-éÉßİ\u212a'日\u0301\u00a0x")), max_size=40))
def test_tokens_are_the_whole_word_runs_of_two_or_more(text: str) -> None:
    """``tokenize`` finds what ``\\b\\w\\w+\\b`` finds in the lower-cased text."""
    import re

    assert tokenize(text) == re.findall(r"\b\w\w+\b", text.lower())
