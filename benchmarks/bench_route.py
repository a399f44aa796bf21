"""Benchmark of ``dissensus route``: throughput, end-to-end ratio, peak memory.

(a) Reading + routing throughput with precomputed embeddings, JSONL parsing and writing
    included, on one core (the process is pinned to one CPU, BLAS to one thread).
    Baseline in the same process: plain ``json.loads`` + ``json.dumps`` of the same
    lines; best of three runs each, interleaved. Target: >= 10,000 five-agent panels/s.
(b) End to end with the default model (all-MiniLM-L6-v2, no embedding cache) as a ratio
    to the raw encoder's sentences/s on the same distinct texts (interleaved runs, best
    of three each). Target: >= 0.9.
(c) Peak RSS of ``dissensus route --json`` (a subprocess) over 100,000 panels with
    precomputed embeddings, next to the same command over 1,000 panels, to show that
    memory does not grow with the input. Target: < 300 MB.
(d) Only with ``--only d``: the quality comparison behind the default backend, on the
    real data (LLMBar CoT and VariErrNLI): how well each backend's reasoning similarity
    and states separate wrong pluralities / high human label entropy.

Run: ``.venv/bin/python benchmarks/bench_route.py`` (``--help`` for sizes). Prints
figures, asserts nothing.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import gc
import io
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from dissensus.types import PanelLike

REPO = Path(__file__).resolve().parent.parent
DIM = 384
VOCAB = 4000
WORDS = [
    "the",
    "output",
    "follows",
    "instruction",
    "better",
    "response",
    "answer",
    "is",
    "correct",
    "because",
    "it",
    "explains",
    "clearly",
    "accurate",
    "relevant",
    "helpful",
    "detailed",
    "concise",
    "incomplete",
    "misses",
    "key",
    "point",
    "however",
    "both",
    "outputs",
    "fail",
    "although",
    "second",
    "first",
    "more",
    "precise",
    "context",
    "user",
    "asked",
    "summary",
    "list",
]


def trace(k: int) -> str:
    """The k-th synthetic reasoning trace (deterministic, about 40 words)."""
    rnd = random.Random(k)
    return f"[{k}] " + " ".join(rnd.choice(WORDS) for _ in range(40))


def embed(texts: list[str]) -> np.ndarray:
    """Precomputed embeddings: a fixed vector per synthetic trace, read off its index.

    Used as ``--similarity bench_route:embed``; it does no model work, so the figures
    measure reading, routing, parsing and writing only.
    """
    index = [int(text[1 : text.index("]")]) % VOCAB for text in texts]
    return _TABLE[index]


_TABLE = np.random.default_rng(0).standard_normal((VOCAB, DIM)).astype(np.float32)
_TABLE /= np.linalg.norm(_TABLE, axis=1, keepdims=True)


def panel_line(i: int, agents: int = 5) -> str:
    rnd = random.Random(i)
    outputs = [
        {
            "agent": f"judge{j}",
            "decision": rnd.choice(["1", "1", "2"]),
            "reasoning": trace(rnd.randrange(VOCAB)),
            "confidence": round(rnd.random(), 3),
        }
        for j in range(agents)
    ]
    meta = {
        "category": rnd.choice(["legal", "news", "health"]),
        "risk": rnd.choice(["high", "low"]),
    }
    return json.dumps({"id": f"p{i}", "meta": meta, "outputs": outputs})


RULES = """\
rules:
  - id: legal-review
    condition: meta.category == "legal" and state != "CA"
    action: escalate
  - id: risky-divergent
    condition: meta.risk == "high" and state == "DA"
    action: escalate
"""


def _pin_one_core() -> str:
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu}"
    return "not pinned (no sched_setaffinity)"


def bench_throughput(n: int) -> None:
    from dissensus.states import RuleSet, Thresholds, callable_backend
    from dissensus.states.stream import RouteTally, route_stream

    where = _pin_one_core()
    lines = [panel_line(i) + "\n" for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        rules_path = Path(tmp) / "rules.yaml"
        rules_path.write_text(RULES)
        ruleset = RuleSet.load(rules_path)
    backend = callable_backend(embed, name="precomputed")
    thresholds = Thresholds(theta_s=0.05, theta_a=0.8)

    # Both write to the null device through a buffered text file, as the CLI does with --out.
    def baseline() -> None:
        with open(os.devnull, "w", encoding="utf-8") as sink:
            for line in lines:
                sink.write(json.dumps(json.loads(line)))
                sink.write("\n")

    def routing() -> object:
        with open(os.devnull, "w", encoding="utf-8") as sink:
            return route_stream(panels_gen(lines), backend, thresholds, ruleset, handle=sink)

    route_stream(panels_gen(lines[:512]), backend, thresholds, ruleset, handle=io.StringIO())
    gc.collect()
    gc.freeze()  # as `dissensus route` does before streaming
    # Interleaved, best of three each, so that load from other processes hits both alike.
    base_wall = base_cpu = wall = cpu = float("inf")
    tally: object = None
    for _ in range(3):
        w, c, _ = _timed(baseline, runs=1)
        base_wall, base_cpu = min(base_wall, w), min(base_cpu, c)
        w, c, tally = _timed(routing, runs=1)
        wall, cpu = min(wall, w), min(cpu, c)
    assert isinstance(tally, RouteTally)
    print(f"(a) throughput, precomputed embeddings, 5 agents, {where}, {n:,} panels")
    print(f"    states:  { {str(k): v for k, v in sorted(tally.states.items())} }")
    print(f"    actions: {dict(sorted(tally.actions.items()))}")
    print("    (wall = elapsed time; cpu = this process's CPU time, unaffected by other load)")
    print(
        f"    route (parse+read+route+write): wall {n / wall:9,.0f} panels/s   cpu {n / cpu:9,.0f} panels/s"
    )
    print(
        f"    baseline json.loads+dumps:      wall {n / base_wall:9,.0f} panels/s   cpu {n / base_cpu:9,.0f} panels/s"
    )
    print(f"    ratio route / baseline (cpu):   {base_cpu / cpu:.3f}")
    print(f"    target >= 10,000 panels/s (cpu): {'met' if n / cpu >= 10_000 else 'NOT met'}")


def _timed(fn: Callable[[], object], runs: int = 3) -> tuple[float, float, object]:
    """Best of ``runs`` runs: (wall seconds, CPU seconds, last result)."""
    best_wall = best_cpu = float("inf")
    result: object = None
    for _ in range(runs):
        w0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        best_wall = min(best_wall, time.perf_counter() - w0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best_wall, best_cpu, result


def panels_gen(lines: list[str], *, views: bool = True) -> Iterator[PanelLike]:
    """The valid panels of ``lines``, parsed as ``dissensus route`` does (read-only
    views first), or with ``views=False`` as pydantic models only (``read_models``)."""
    from dissensus.io.jsonl import Reject, read_models
    from dissensus.io.views import read_panel_views
    from dissensus.types import Panel

    items = (
        read_panel_views(lines, file="bench") if views else read_models(Panel, lines, file="bench")
    )
    for item in items:
        if not isinstance(item, Reject):
            yield item


def _llmbar_texts(data: Path, limit: int) -> list[list[str]] | None:
    try:
        from dissensus.convert.llmbar import iter_llmbar_panels
    except ImportError:
        return None
    if not (data / "llmbar").is_dir():
        return None
    panels = []
    for p in iter_llmbar_panels(data / "llmbar", strategy="CoT"):
        panels.append(p)
        if len(panels) >= limit:
            break
    return [[o.reasoning for o in p.outputs] for p in panels]


def bench_end_to_end(n_panels: int, data: Path, repeats: int = 3) -> None:
    from dissensus.states import RuleSet, Thresholds
    from dissensus.states.encoder import MiniLMBackend
    from dissensus.states.stream import RouteTally, route_stream

    texts_per_panel = _llmbar_texts(data, n_panels)
    source = "LLMBar CoT judge traces"
    if texts_per_panel is None:
        texts_per_panel = [[trace(i * 6 + j) for j in range(6)] for i in range(n_panels)]
        source = "synthetic traces"
    lines = [
        json.dumps(
            {
                "id": str(i),
                "outputs": [
                    {"agent": f"a{j}", "decision": "1", "reasoning": t} for j, t in enumerate(ts)
                ],
            }
        )
        for i, ts in enumerate(texts_per_panel)
    ]
    distinct = sorted({t for ts in texts_per_panel for t in ts})
    backend = MiniLMBackend()
    model = backend.model
    model.encode(distinct[:32], batch_size=64, normalize_embeddings=True)  # warm-up

    def raw_encoder() -> object:
        return model.encode(
            distinct, batch_size=64, normalize_embeddings=True, convert_to_numpy=True
        )

    def end_to_end() -> object:
        return route_stream(
            panels_gen(lines),
            backend,
            Thresholds.for_model(backend.name),
            RuleSet.default(),
            handle=io.StringIO(),
        )

    # Interleaved, best of `repeats` each, so that load from other processes hits both.
    raw = e2e = float("inf")
    tally: object = None
    for _ in range(repeats):
        raw = min(raw, _timed(raw_encoder, runs=1)[0])
        wall, _, tally = _timed(end_to_end, runs=1)
        e2e = min(e2e, wall)
    assert isinstance(tally, RouteTally)
    print(
        f"(b) end to end with {backend.name} ({source}, {tally.total} panels, {len(distinct)} distinct texts, "
        f"torch threads {_torch_threads()})"
    )
    print(f"    raw encoder:   {len(distinct) / raw:,.1f} sentences/s ({raw:.2f} s)")
    print(
        f"    route e2e:     {len(distinct) / e2e:,.1f} sentences/s ({e2e:.2f} s, {tally.total / e2e:,.1f} panels/s)"
    )
    print(f"    ratio e2e / raw encoder: {raw / e2e:.3f}  (target >= 0.9)")


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def bench_memory(n_big: int, n_small: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        results = []
        for n in (n_small, n_big):
            path = Path(tmp) / f"panels_{n}.jsonl"
            with path.open("w") as handle:
                for i in range(n):
                    handle.write(panel_line(i))
                    handle.write("\n")
            size_mb = path.stat().st_size / 1e6
            code = (
                "import resource, sys\n"
                "from dissensus.cli import main\n"
                "rc = main(sys.argv[1:])\n"
                "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, rc, file=sys.stderr)\n"
            )
            env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent)}
            t0 = time.perf_counter()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    code,
                    "route",
                    str(path),
                    "--similarity",
                    "bench_route:embed",
                    "--theta-s",
                    "0.05",
                    "--json",
                    "--no-cache",
                    "--allow-code",
                    "--out",
                    os.devnull,
                ],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            elapsed = time.perf_counter() - t0
            last = proc.stderr.strip().splitlines()[-1].split()
            rss_kb, rc = int(last[0]), last[1]
            results.append((n, size_mb, rss_kb / 1024, rc, elapsed))
    print(
        "(c) peak RSS of `dissensus route --json --out /dev/null` (subprocess), precomputed embeddings"
    )
    for n, size_mb, rss, rc, elapsed in results:
        print(
            f"    {n:>7,} panels ({size_mb:6.1f} MB input): peak RSS {rss:6.1f} MB, exit {rc}, {elapsed:.1f} s"
        )
    growth = results[1][2] - results[0][2]
    print(
        f"    growth from {results[0][0]:,} to {results[1][0]:,} panels: {growth:+.1f} MB  (target peak < 300 MB)"
    )


def _auc(score: np.ndarray, positive: np.ndarray) -> float:
    """Probability that a random positive scores above a random negative (ties count 1/2)."""
    pos, neg = score[positive], score[~positive]
    greater = (pos[:, None] > neg[None, :]).sum()
    equal = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * equal) / (len(pos) * len(neg)))


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra = np.argsort(np.argsort(a, kind="stable"), kind="stable")
    rb = np.argsort(np.argsort(b, kind="stable"), kind="stable")
    return float(np.corrcoef(ra, rb)[0, 1])


def bench_backend_quality(data: Path) -> None:
    from dissensus.convert.llmbar import iter_llmbar_panels
    from dissensus.convert.varierrnli import iter_varierrnli_panels
    from dissensus.states import Thresholds, get_backend, read_panels
    from dissensus.types import gold_label

    llmbar = list(iter_llmbar_panels(data / "llmbar", "CoT", on_skip=lambda skipped: None))
    varierr = [
        p
        for name in ("VariErrNLI_train.json", "VariErrNLI_dev.json")
        for p in iter_varierrnli_panels(data / "varierrnli" / name, on_skip=lambda skipped: None)
    ]
    gold = np.array([gold_label(p.meta) for p in llmbar])
    subsets = np.array([str(p.meta["subset"]) for p in llmbar])
    entropy = []
    for p in varierr:
        counts = np.array(list(p.meta["label_counts"].values()), dtype=np.float64)
        share = counts / counts.sum()
        entropy.append(float(-(share * np.log2(share)).sum()))
    high_entropy = np.array(entropy) > np.median(entropy)
    print(f"(d) backend quality: LLMBar CoT {len(llmbar)} panels, VariErrNLI {len(varierr)} panels")
    for name in ("minilm", "tfidf"):
        backend = get_backend(name)
        probe = Thresholds(theta_s=0.0, theta_a=0.8)
        readings = read_panels(llmbar, backend, probe)
        sims = np.array([r.mean_similarity for r in readings])
        agreement = np.array([r.agreement for r in readings])
        wrong = np.array(
            [r.decision != g or bool(r.tie) for r, g in zip(readings, gold, strict=True)]
        )
        median = float(np.median(sims))
        states = np.array(
            [
                r.state.value
                for r in read_panels(llmbar, backend, Thresholds(theta_s=median, theta_a=0.8))
            ]
        )
        per_state = "  ".join(
            f"{s} n={int((states == s).sum())} wrong={wrong[states == s].mean():.3f}"
            for s in ("CA", "DA", "CD", "DD")
            if (states == s).any()
        )
        dis = np.isin(states, ["CD", "DD"])
        w = wrong.astype(np.float64)
        a, d = w[~dis], w[dis]
        pooled = np.sqrt(
            ((len(a) - 1) * a.var(ddof=1) + (len(d) - 1) * d.var(ddof=1)) / (len(a) + len(d) - 2)
        )
        ve = np.array([r.mean_similarity for r in read_panels(varierr, backend, probe)])
        print(
            f"    {backend.name}: median mean similarity {median:.4f} (VariErrNLI {np.median(ve):.4f})"
        )
        print(f"      per state at the median: {per_state}")
        print(f"      Cohen's d wrongness CD+DD vs CA+DA: {(d.mean() - a.mean()) / pooled:.3f}")
        print(f"      AUC low similarity -> wrong plurality: {_auc(-sims, wrong):.3f}")
        for sub in sorted(set(subsets)):
            m = subsets == sub
            print(f"        {sub}: {_auc(-sims[m], wrong[m]):.3f}")
        print(f"      Spearman(similarity, agreement share): {_spearman(sims, agreement):.3f}")
        print(
            f"      VariErrNLI AUC low similarity -> above-median label entropy: {_auc(-ve, high_entropy):.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--panels", type=int, default=50_000, help="panels for (a)")
    parser.add_argument("--e2e-panels", type=int, default=30, help="panels for (b)")
    parser.add_argument("--memory-panels", type=int, default=100_000, help="panels for (c)")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--only", choices=["a", "b", "c", "d"], action="append")
    args = parser.parse_args()
    only = set(args.only or ["a", "b", "c"])
    if "c" in only:
        bench_memory(args.memory_panels, 1_000)
    if "b" in only:
        bench_end_to_end(args.e2e_panels, args.data)
    if "d" in only:
        bench_backend_quality(args.data)
    if "a" in only:
        bench_throughput(args.panels)


if __name__ == "__main__":
    main()
