"""A similarity function that signals it started, then embeds very slowly (interrupt tests).

:func:`embed` writes ``$SLOW_EMBED_MARKER`` when it starts and ``<marker>.returned`` if it
ever returns, so a test can tell an interrupt that stopped it from one that waited for it.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path


def embed(texts: list[str]) -> list[list[float]]:
    marker = os.environ.get("SLOW_EMBED_MARKER")
    if marker:
        Path(marker).write_text("embedding\n")
    time.sleep(60)
    if marker:  # an interrupt that waited for the embedding leaves this behind
        Path(marker + ".returned").write_text("returned\n")
    return [[1.0, 0.0] for _ in texts]


CALLS: list[int] = []
"""Sizes of the batches :func:`counting` was called with."""


def counting(texts: list[str]) -> list[list[float]]:
    """Records each batch size; deterministic vectors from the text's length."""
    CALLS.append(len(texts))
    return [[1.0, float(len(t) % 7)] for t in texts]


def broken(texts: list[str]) -> list[list[float]]:
    """A similarity function that fails (a run-time failure, exit 1)."""
    raise RuntimeError("the embedding service is down")


GATE_STARTED = threading.Event()
"""Set when :func:`gated` was called."""
GATE = threading.Event()
""":func:`gated` returns once this is set (or after 20 s)."""
GATE_LOG: list[str] = []
"""``"embedded"`` appended when :func:`gated` returns."""


def gated(texts: list[str]) -> list[list[float]]:
    """Blocks (holding whatever thread calls it) until :data:`GATE` is set."""
    GATE_STARTED.set()
    GATE.wait(20)
    GATE_LOG.append("embedded")
    return [[1.0, float(len(t) % 7)] for t in texts]


PER_TEXT_S = [0.02]
"""Seconds :func:`per_text` sleeps for each text it embeds (a list: tests change it)."""
PER_TEXT: list[str] = []
"""Every text :func:`per_text` embedded, in order."""


def per_text(texts: list[str]) -> list[list[float]]:
    """A slow embedding whose cost grows with the texts of a call (as a model's does);
    deterministic vectors from the text's length."""
    time.sleep(PER_TEXT_S[0] * len(texts))
    PER_TEXT.extend(texts)
    return [[1.0, float(len(t) % 7)] for t in texts]
