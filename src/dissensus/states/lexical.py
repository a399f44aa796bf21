"""Dependency-free lexical similarity: TF-IDF cosine over a panel's traces (``docs/states.md``).

A fast stand-in for a sentence encoder that needs only numpy. Each call to ``matrix``
treats the given traces (one panel) as the document collection.

Choices this module makes:

* Tokens are runs of two or more Unicode word characters, lower-cased (the usual
  ``\\b\\w\\w+\\b`` pattern); no stop-word list, IDF discounts words every agent used.
  ASCII text is split by a byte table (the same tokens, found faster; counted before
  the one-character words are dropped); other text by the pattern.
* Term frequency is sublinear (``1 + log tf``); IDF is smoothed,
  ``log((1 + n) / (1 + df)) + 1``, so a word shared by all traces still counts a little.
  Both are ``math.log`` values, tabulated by count and multiplied in float64 as one
  array (the same products as word by word).
* IDF comes from the panel itself, not from a corpus, so a reading never depends on
  which other panels were in the same batch.
* A trace without any token has similarity 0 with every other trace (1 with an
  identical trace, which the reader enforces).
"""

from __future__ import annotations

import collections
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from itertools import chain

import numpy as np
from numpy.typing import NDArray

from dissensus.states.similarity import Matrix, Vectors, cosine_matrix, normalise_rows

__all__ = ["TfidfBackend", "tokenize"]

# ``\b\w\w+\b`` without the boundaries: a greedy run of word characters ends where the
# run does, so the matches are the same (the whole runs of two or more), found faster.
_TOKEN = re.compile(r"\w\w+", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens of at least two characters."""
    if text.isascii():
        # The same tokens for ASCII text, in C: every byte that is not a word character
        # becomes a space and capitals their lower case, then the runs split apart.
        words = text.encode("ascii").translate(_ASCII_WORDS).decode("ascii").split()
        return [word for word in words if len(word) > 1]
    return _TOKEN.findall(text.lower())


_count_elements: Callable[[dict[str, int], Iterable[str]], None] = collections._count_elements  # type: ignore[attr-defined]  # not in the stubs
"""``Counter``'s counting loop (in C): adds each item's occurrences to the mapping."""


def _counts(text: str) -> dict[str, int]:
    """``Counter(tokenize(text))``: each token's count, in order of first occurrence.

    ASCII text is counted word by word in C (``Counter``'s own loop, without its Python
    wrapper) and the words of one character are dropped from the counts afterwards:
    fewer distinct words than words, and those found by one set intersection.
    """
    if not text.isascii():
        return Counter(_TOKEN.findall(text.lower()))
    counts: dict[str, int] = {}
    _count_elements(counts, text.encode("ascii").translate(_ASCII_WORDS).decode("ascii").split())
    for word in _ONE_CHARACTER.intersection(counts):
        del counts[word]
    return counts


_ASCII_WORDS = bytes(
    (c + 32 if 65 <= c <= 90 else c) if chr(c).isalnum() or c == 95 else 32 for c in range(256)
)
"""Byte table for ASCII text: word characters (``[A-Za-z0-9_]``, what ``\\w`` matches in
ASCII) kept, capitals lower-cased, every other byte a space."""

_ONE_CHARACTER = frozenset(chr(c) for c in range(128) if _ASCII_WORDS[c] == c and c != 32)
"""The words of one character that the byte table can leave (a lower-case letter, a
digit, ``_``): the words dropped from the counts, looked up among the counted words in C."""


@lru_cache(maxsize=64)
def _idf(n: int) -> NDArray[np.float64]:
    """``log((1 + n) / (1 + df)) + 1`` for ``df`` = 0..n (``math.log``, as per word)."""
    return np.array([math.log((1 + n) / (1 + df)) + 1.0 for df in range(n + 1)])


_LOG_TF: list[NDArray[np.float64]] = [np.array([0.0, 1.0])]


def _log_tf(most: int) -> NDArray[np.float64]:
    """``1 + log tf`` for ``tf`` = 0..``most`` at least (``math.log``; entry 0 unused)."""
    table = _LOG_TF[0]
    if most >= len(table):
        size = max(most + 1, 2 * len(table))
        table = _LOG_TF[0] = np.array([0.0] + [1.0 + math.log(tf) for tf in range(1, size)])
    return table


class TfidfBackend:
    """TF-IDF cosine similarity with the panel as the document collection."""

    name = "tfidf"

    def vectors(self, texts: Sequence[str]) -> Vectors:
        """L2-normalised TF-IDF rows for ``texts`` (vocabulary in sorted order)."""
        counts = [_counts(t) for t in texts]
        vocab = sorted(set().union(*counts)) if counts else []
        if not vocab:
            return np.zeros((len(texts), 0), dtype=np.float32)
        column = {word: j for j, word in enumerate(vocab)}
        n = len(texts)
        # One entry per (text, distinct word): its column and term frequency, text by text.
        sizes = [len(c) for c in counts]
        total = sum(sizes)
        cols = np.fromiter(
            map(column.__getitem__, chain.from_iterable(counts)), dtype=np.intp, count=total
        )
        tfs = np.fromiter(
            chain.from_iterable(c.values() for c in counts), dtype=np.intp, count=total
        )
        df = np.bincount(cols, minlength=len(vocab))
        weights = _log_tf(int(np.maximum.reduce(tfs)))[tfs] * _idf(n)[df[cols]]
        # float32 rows: each float64 weight rounded once, as normalising float64 rows would.
        rows = np.zeros((n, len(vocab)), dtype=np.float32)
        rows[np.arange(n).repeat(sizes), cols] = weights  # the method: no Python wrapper
        return normalise_rows(rows)

    def matrix(self, texts: Sequence[str]) -> Matrix:
        rows = self.vectors(texts)
        if rows.shape[1] == 0:
            return np.zeros((len(texts), len(texts)), dtype=np.float64)
        return cosine_matrix(rows)
