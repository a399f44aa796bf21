"""The static similarity backend against MiniLM and TF-IDF on real panels, in one run.

For LLMBar (CoT, 6 judges) and VariErrNLI (all splits) this prints, per backend:

* speed: distinct traces embedded per second, in a fresh process pinned to one thread
  (``torch.set_num_threads(1)`` for MiniLM; static and TF-IDF are single-threaded), with
  no embedding cache, and that process' peak RSS (``ru_maxrss``) including model load;
* agreement of the four-state assignment with MiniLM's, each backend at its own median
  theta_s on that corpus (theta_a 0.8): share of panels in the same state, and Cohen's
  kappa;
* the faithfulness tables of ``evaluation/states_faithfulness.py`` (same code, same
  statistics), computed from the vectors embedded above, for each backend side by side.

Usage::

    python evaluation/static_backend.py [--data DIR] [--backends tfidf,static,minilm]

Choices: each backend embeds every distinct trace of a corpus once (as the reader
does); TF-IDF has no corpus-level embedding (its IDF is per panel), so its "speed" is
panels' similarity matrices computed per second converted to traces per second. The
static table must exist or is distilled first (outside the timed part).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import states_faithfulness as faith
from _common import parse_names, require_data

from dissensus.convert import Skipped, iter_llmbar_panels, iter_varierrnli_panels
from dissensus.states.reading import Thresholds, read_from_matrix
from dissensus.states.similarity import LookupBackend, get_backend
from dissensus.types import Panel

REPO = Path(__file__).resolve().parent.parent
BACKENDS = ("tfidf", "static", "minilm")
"""The backends this comparison knows how to time (``--backends``)."""


def _embed_child(name: str, texts: list[str], panels: list[Panel] | None) -> dict[str, Any]:
    """Runs in a fresh process: load the backend, embed, report time and peak RSS."""
    if name == "minilm":
        import torch

        torch.set_num_threads(1)
    backend = get_backend(name, cache=False)
    out: dict[str, Any] = {"name": backend.name}
    if name == "tfidf":
        assert panels is not None
        start = time.perf_counter()
        out["matrices"] = [backend.matrix([o.reasoning for o in p.outputs]) for p in panels]
        seconds = time.perf_counter() - start
        count = sum(len(p.outputs) for p in panels)
    else:
        embed = backend.embed
        embed(texts[:8])  # load the model outside the timed part
        start = time.perf_counter()
        out["vectors"] = np.asarray(embed(texts), dtype=np.float32)
        seconds = time.perf_counter() - start
        count = len(texts)
    out["per_second"] = count / seconds
    out["seconds"] = seconds
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def run_backend(name: str, texts: list[str], panels: list[Panel]) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        result: dict[str, Any] = pool.apply(
            _embed_child, (name, texts, panels if name == "tfidf" else None)
        )
    return result


def corpus_for(
    label: str, panels: list[Panel], texts: list[str], result: dict[str, Any], skipped: int
) -> faith.Corpus:
    if "vectors" in result:
        table = dict(zip(texts, result["vectors"], strict=True))
        backend = LookupBackend(table, result["name"])
        return faith.read_corpus(label, panels, backend, quantile=0.5, theta_a=0.8, skipped=skipped)
    probe = [
        read_from_matrix(p, m, result["name"], Thresholds(theta_s=0.0, theta_a=0.8))
        for p, m in zip(panels, result["matrices"], strict=True)
    ]
    theta_s = float(np.quantile([r.mean_similarity for r in probe], 0.5))
    th = Thresholds(theta_s=theta_s, theta_a=0.8)
    readings = [
        read_from_matrix(p, r.matrix, r.model, th) for p, r in zip(panels, probe, strict=True)
    ]
    return faith.Corpus(label, panels, readings, theta_s, skipped)


def kappa(a: Sequence[str], b: Sequence[str]) -> float:
    labels = sorted(set(a) | set(b))
    n = len(a)
    po = sum(x == y for x, y in zip(a, b, strict=True)) / n
    pe = sum((list(a).count(lab) / n) * (list(b).count(lab) / n) for lab in labels)
    return (po - pe) / (1 - pe) if pe < 1 else 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--backends", default=",".join(BACKENDS), help=f"of {', '.join(BACKENDS)}")
    parser.add_argument("--no-faithfulness", action="store_true", help="speed and agreement only")
    args = parser.parse_args(argv)
    names = parse_names(args.backends, BACKENDS, "--backends")
    data = require_data(args.data, ["llmbar", "varierrnli"])
    if "static" in names:
        from dissensus.states.static import distil_static

        distil_static()  # outside the timed part; no-op when the table exists

    corpora: list[tuple[str, list[Panel], int]] = []
    skipped: list[Skipped] = []
    llm = list(iter_llmbar_panels(data / "llmbar", "CoT", on_skip=skipped.append))
    corpora.append(("llmbar", llm, len(skipped)))
    files = sorted(
        p for p in (data / "varierrnli").glob("*.json") if "annotators_meta" not in p.name
    )
    skipped = []
    nli = [p for f in files for p in iter_varierrnli_panels(f, on_skip=skipped.append)]
    corpora.append(("varierrnli", nli, len(skipped)))

    print(f"command: python evaluation/static_backend.py --backends {','.join(names)}")
    for label, panels, n_skipped in corpora:
        texts = sorted({o.reasoning for p in panels for o in p.outputs})
        print(f"\n=== {label}: {len(panels)} panels, {len(texts)} distinct traces")
        results = {name: run_backend(name, texts, panels) for name in names}
        built = {
            name: corpus_for(label, panels, texts, res, n_skipped) for name, res in results.items()
        }
        ref = built.get("minilm")
        rows = []
        for name in names:
            res, corp = results[name], built[name]
            states = [r.state.value for r in corp.readings]
            agree = kap = float("nan")
            if ref is not None:
                ref_states = [r.state.value for r in ref.readings]
                agree = float(np.mean([a == b for a, b in zip(states, ref_states, strict=True)]))
                kap = kappa(states, ref_states)
            rows.append(
                [
                    name,
                    f"{res['per_second']:.1f}",
                    f"{res['rss_mb']:.0f}",
                    f"{corp.theta_s:.4f}",
                    f"{agree:.3f}",
                    f"{kap:.3f}",
                ]
            )
        if "minilm" in results:
            base = results["minilm"]["per_second"]
            for row, name in zip(rows, names, strict=True):
                row.insert(2, f"{results[name]['per_second'] / base:.0f}x")
        header = ["backend", "traces/s (1 thread)"]
        if "minilm" in results:
            header.append("vs MiniLM")
        header += ["peak RSS MB", "median theta_s", "same state as MiniLM", "kappa vs MiniLM"]
        print(faith.table(header, rows))
        if args.no_faithfulness:
            continue
        for name in names:
            print(f"\n--- faithfulness, {label}, backend {name}")
            if label == "llmbar":
                faith.report_llmbar(built[name], print)
            else:
                faith.report_varierrnli(built[name], [f.name for f in files], print)
    return 0


if __name__ == "__main__":
    sys.exit(main())
