"""Dependency-free lexical similarity: TF-IDF cosine over a panel's traces (``docs/states.md``).

A fast stand-in for a sentence encoder that needs only numpy. Each call to ``matrix``
treats the given traces (one panel) as the document collection.

Choices where the design is silent:

* Tokens are runs of two or more Unicode word characters, lower-cased (the usual
  ``\\b\\w\\w+\\b`` pattern); no stop-word list, IDF discounts words every agent used.
* Term frequency is sublinear (``1 + log tf``); IDF is smoothed,
  ``log((1 + n) / (1 + df)) + 1``, so a word shared by all traces still counts a little.
* IDF comes from the panel itself, not from a corpus, so a reading never depends on
  which other panels were in the same batch.
* A trace without any token has similarity 0 with every other trace (1 with an
  identical trace, which the reader enforces).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from dissensus.states.similarity import Matrix, Vectors, cosine_matrix, normalise_rows

__all__ = ["TfidfBackend", "tokenize"]

_TOKEN = re.compile(r"\b\w\w+\b", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens of at least two characters."""
    return _TOKEN.findall(text.lower())


class TfidfBackend:
    """TF-IDF cosine similarity with the panel as the document collection."""

    name = "tfidf"

    def vectors(self, texts: Sequence[str]) -> Vectors:
        """L2-normalised TF-IDF rows for ``texts`` (vocabulary in sorted order)."""
        counts = [Counter(tokenize(t)) for t in texts]
        vocab = sorted(set().union(*counts)) if counts else []
        if not vocab:
            return np.zeros((len(texts), 0), dtype=np.float32)
        column = {word: j for j, word in enumerate(vocab)}
        n = len(texts)
        df: Counter[str] = Counter()
        for c in counts:
            df.update(c.keys())
        idf = {w: math.log((1 + n) / (1 + df[w])) + 1.0 for w in vocab}
        rows = np.zeros((n, len(vocab)), dtype=np.float64)
        for i, c in enumerate(counts):
            for word, tf in c.items():
                rows[i, column[word]] = (1.0 + math.log(tf)) * idf[word]
        return normalise_rows(rows)

    def matrix(self, texts: Sequence[str]) -> Matrix:
        rows = self.vectors(texts)
        if rows.shape[1] == 0:
            return np.zeros((len(texts), len(texts)), dtype=np.float64)
        return cosine_matrix(rows)
