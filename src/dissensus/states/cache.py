"""On-disk embedding cache keyed by model name and sha256 of the text (``docs/states.md``).

Embedding a trace is the expensive step of a reading; the same traces come back often
(re-runs, calibration then routing, several rules files over one corpus). The cache
keeps one float32 vector per (model, text) in a SQLite file, ``embeddings.sqlite`` in
the cache directory: ``cache_dir`` if given, else ``$DISSENSUS_CACHE``, else
``~/.cache/dissensus/embeddings``.

Choices:

* The key is ``(model name, sha256(text as UTF-8))``; texts themselves are not stored.
* Within one ``embed`` call every distinct text is embedded once, cached or not.
* Vectors are stored already L2-normalised, as float32 bytes with their dimension; a
  stored vector whose dimension differs from the model's is ignored and replaced.
* A cache that cannot be opened or written is a user error naming the directory,
  never a silent fallback; ``cache=False`` (``--no-cache``) switches it off.
* SQLite handles concurrent readers and writers from several processes; within one
  process the cache's connection may be used from any thread, one call at a time (the
  service decides each run on a thread of its own).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from dissensus.errors import ConfigError, DissensusError
from dissensus.states.similarity import EmbeddingBackend, Matrix, Vectors, cosine_matrix

__all__ = ["CachedBackend", "EmbeddingCache", "default_cache_dir", "text_key"]

_CHUNK = 500


def default_cache_dir() -> Path:
    """``$DISSENSUS_CACHE`` or ``~/.cache/dissensus/embeddings``."""
    env = os.environ.get("DISSENSUS_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "dissensus" / "embeddings"


def text_key(text: str) -> str:
    """sha256 hex digest of the UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class EmbeddingCache:
    """A SQLite table ``(model, key) -> vector``."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.path = self.directory / "embeddings.sqlite"
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # One connection for the cache object, usable from any thread: a server's runs
            # decide on threads of their own; calls are serialised by ``_lock``.
            conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
            conn.execute(
                "CREATE TABLE IF NOT EXISTS embeddings ("
                "model TEXT NOT NULL, key TEXT NOT NULL, dim INTEGER NOT NULL, vec BLOB NOT NULL, "
                "PRIMARY KEY (model, key))"
            )
            conn.commit()
        except (OSError, sqlite3.Error) as exc:
            # A configuration problem (where the cache is): exit 2, as for any unusable path.
            raise ConfigError(
                f"cannot open the embedding cache at {self.path}: {exc} "
                "(set DISSENSUS_CACHE to another directory or switch the cache off)"
            ) from exc
        self._conn = conn
        return conn

    def get_many(
        self, model: str, keys: Sequence[str], dim: int | None = None
    ) -> dict[str, Vectors]:
        """Stored vectors for ``keys`` (missing keys are absent from the result)."""
        with self._lock:
            return self._get_many(model, keys, dim)

    def _get_many(self, model: str, keys: Sequence[str], dim: int | None) -> dict[str, Vectors]:
        conn = self._connect()
        found: dict[str, Vectors] = {}
        try:
            for chunk in _chunks(keys, _CHUNK):
                marks = ",".join("?" * len(chunk))
                rows = conn.execute(
                    f"SELECT key, dim, vec FROM embeddings WHERE model = ? AND key IN ({marks})",
                    (model, *chunk),
                )
                for key, stored_dim, blob in rows:
                    if dim is not None and stored_dim != dim:
                        continue
                    found[key] = np.frombuffer(blob, dtype=np.float32)
        except sqlite3.Error as exc:
            raise DissensusError(f"cannot read the embedding cache at {self.path}: {exc}") from exc
        return found

    def put_many(self, model: str, items: Iterable[tuple[str, Vectors]]) -> None:
        """Store vectors (replacing any stored under the same key)."""
        with self._lock:
            self._put_many(model, items)

    def _put_many(self, model: str, items: Iterable[tuple[str, Vectors]]) -> None:
        conn = self._connect()
        rows = [
            (model, key, int(vec.shape[0]), np.ascontiguousarray(vec, dtype=np.float32).tobytes())
            for key, vec in items
        ]
        try:
            conn.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?)", rows)
            conn.commit()
        except sqlite3.Error as exc:
            raise DissensusError(f"cannot write the embedding cache at {self.path}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class CachedBackend:
    """An embedding backend whose vectors go through an :class:`EmbeddingCache`."""

    def __init__(self, inner: EmbeddingBackend, cache: EmbeddingCache) -> None:
        self.inner = inner
        self.cache = cache
        self.name = inner.name
        self.hits = 0
        """Texts served from the cache so far."""
        self.misses = 0
        """Texts embedded by the model so far."""

    def embed(self, texts: Sequence[str]) -> Vectors:
        unique = list(dict.fromkeys(texts))
        keys = [text_key(t) for t in unique]
        stored = self.cache.get_many(self.name, keys)
        dims = {v.shape[0] for v in stored.values()}
        missing = [i for i, k in enumerate(keys) if k not in stored]
        self.hits += len(unique) - len(missing)
        self.misses += len(missing)
        fresh: Vectors | None = None
        if missing:
            fresh = self.inner.embed([unique[i] for i in missing])
            dims.add(int(fresh.shape[1]))
            self.cache.put_many(self.name, ((keys[i], fresh[j]) for j, i in enumerate(missing)))
        if len(dims) > 1:
            # Stale vectors of another dimension: re-embed everything once, consistently.
            fresh = self.inner.embed(unique)
            self.cache.put_many(self.name, zip(keys, fresh, strict=True))
            by_text = {t: fresh[i] for i, t in enumerate(unique)}
        else:
            by_text = {unique[i]: stored[k] for i, k in enumerate(keys) if k in stored}
            if fresh is not None:
                by_text.update((unique[i], fresh[j]) for j, i in enumerate(missing))
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        out: Vectors = np.stack([by_text[t] for t in texts]).astype(np.float32, copy=False)
        return out

    def matrix(self, texts: Sequence[str]) -> Matrix:
        return cosine_matrix(self.embed(texts))
