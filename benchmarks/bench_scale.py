"""Benchmark of the scale path: static encoder, route throughput, Ray against local decide.

Prints, in one run:

(a) sentences/s of the static backend and of MiniLM on the same LLMBar CoT traces, each
    in a fresh process on one thread (MiniLM: ``torch.set_num_threads(1)``; the first
    ``--minilm-texts`` traces only, it is slow), the ratio, and each process' peak RSS.
(b) ``dissensus route`` with precomputed embeddings (parse + read + route + write) against
    plain ``json.loads`` + ``json.dumps`` of the same lines, CPU time, best of three
    (the measurement of ``bench_route.py`` (a), on 20,000 synthetic 5-agent panels).
(c) ``dissensus decide`` on ``--panels`` synthetic 5-agent panels (default 20,000), for
    TF-IDF and for static: the local engine and the Ray engine with 2 workers (and, for
    TF-IDF, 1 worker: the scaling run of ``docs/scale.md``), panels/s wall clock, with
    Ray's start-up (local instance, actor pool, model loads) included and reported
    apart; peak RSS of the driver and of the largest worker. The journal is SQLite with
    ``synchronous=NORMAL`` (``$DISSENSUS_JOURNAL_SYNC``) so that the figures show the
    engines rather than the disk's fsync rate, which (d) measures.
(d) journal appends/s on SQLite, one writer, ``synchronous=FULL`` and ``NORMAL``: the
    serial part of a run.

Run: ``python benchmarks/bench_scale.py [--panels N] [--skip-ray]``. Prints figures,
asserts nothing. ``benchmarks/run_all.py`` runs it with the others.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import asyncio
import gc
import json
import multiprocessing as mp
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from bench_route import RULES, embed, panel_line, panels_gen  # noqa: E402


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _traces(data: Path) -> list[str]:
    from dissensus.convert import iter_llmbar_panels

    panels = iter_llmbar_panels(data / "llmbar", "CoT")
    return sorted({o.reasoning for p in panels for o in p.outputs})


def _encode_child(name: str, texts: list[str]) -> tuple[float, float]:
    if name == "minilm":
        import torch

        torch.set_num_threads(1)
    from dissensus.states import get_backend

    backend = get_backend(name, cache=False)
    embed_fn = backend.embed  # type: ignore[attr-defined]
    embed_fn(texts[:8])
    start = time.perf_counter()
    embed_fn(texts)
    return len(texts) / (time.perf_counter() - start), _rss_mb()


def bench_encoders(data: Path, minilm_texts: int) -> None:
    from dissensus.states.static import distil_static

    distil_static()
    texts = _traces(data)
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        s_rate, s_rss = pool.apply(_encode_child, ("static", texts))
    with ctx.Pool(1) as pool:
        m_rate, m_rss = pool.apply(_encode_child, ("minilm", texts[:minilm_texts]))
    print(f"(a) encoders on LLMBar CoT traces (mean {sum(map(len, texts)) / len(texts):.0f} chars), one thread each")
    print(f"    static (model2vec, {len(texts)} traces):  {s_rate:9,.1f} sentences/s   peak RSS {s_rss:6.0f} MB")
    print(f"    MiniLM ({minilm_texts} traces):           {m_rate:9,.1f} sentences/s   peak RSS {m_rss:6.0f} MB")
    print(f"    ratio static / MiniLM: {s_rate / m_rate:.0f}x   (target >= 50x)")


def bench_route(n: int) -> None:
    from dissensus.cli.route import route_stream
    from dissensus.states import RuleSet, Thresholds, callable_backend

    lines = [panel_line(i) + "\n" for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        rules_path = Path(tmp) / "rules.yaml"
        rules_path.write_text(RULES)
        ruleset = RuleSet.load(rules_path)
    backend = callable_backend(embed, name="precomputed")
    thresholds = Thresholds(theta_s=0.05, theta_a=0.8)

    def baseline() -> None:
        with open(os.devnull, "w", encoding="utf-8") as sink:
            for line in lines:
                sink.write(json.dumps(json.loads(line)))
                sink.write("\n")

    def routing() -> None:
        with open(os.devnull, "w", encoding="utf-8") as sink:
            route_stream(panels_gen(lines), backend, thresholds, ruleset, handle=sink)

    routing()
    gc.collect()
    gc.freeze()
    base = min(_cpu(baseline) for _ in range(3))
    route = min(_cpu(routing) for _ in range(3))
    gc.unfreeze()
    print(f"(b) route with precomputed embeddings, {n:,} 5-agent panels, CPU time, best of 3")
    print(f"    route (parse+read+route+write): {n / route:9,.0f} panels/s")
    print(f"    baseline json.loads+dumps:      {n / base:9,.0f} panels/s")
    print(f"    ratio route / baseline:         {base / route:.3f}   (target >= 0.5)")


def _cpu(fn: Any) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def _decide(path: Path, journal_path: Path, similarity: str, engine: str, workers: int) -> tuple[float, float, dict[str, Any], int]:
    from dissensus.engines.ray import RayOptions, decide_ray, ensure_ray
    from dissensus.pipeline import Policy, execute_run, start_run
    from dissensus.store.journal import Journal

    journal = Journal(journal_path)
    start_run(journal, str(path), Policy(), run_id="bench", similarity=similarity)
    stats: dict[str, Any] = {}
    startup = 0.0
    if engine == "ray":
        t0 = time.perf_counter()
        ensure_ray(RayOptions(workers=workers))
        startup = time.perf_counter() - t0

    async def go() -> int:
        if engine == "ray":
            stream = decide_ray(journal, "bench", options=RayOptions(workers=workers), stats=stats)
        else:
            stream = execute_run(journal, "bench")
        return sum([1 async for _ in stream])

    t0 = time.perf_counter()
    count = asyncio.run(go())
    wall = time.perf_counter() - t0
    journal.close()
    return wall, startup, stats, count


def bench_decide(n: int, skip_ray: bool) -> None:
    os.environ.setdefault("DISSENSUS_JOURNAL_SYNC", "normal")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "panels.jsonl"
        path.write_text("".join(panel_line(i) + "\n" for i in range(n)), encoding="utf-8")
        print(f"(c) decide, {n:,} synthetic 5-agent panels, default policy, no model; journal SQLite synchronous={os.environ['DISSENSUS_JOURNAL_SYNC']}")
        print("    backend  engine         panels/s (wall)   run s   Ray start-up s   worker peak RSS MB")
        runs = [("tfidf", "local", 1), ("tfidf", "ray", 1), ("tfidf", "ray", 2), ("static", "local", 1), ("static", "ray", 2)]
        rates: dict[tuple[str, str, int], float] = {}
        started = False
        for k, (sim, engine, workers) in enumerate(runs):
            if engine == "ray" and skip_ray:
                continue
            if engine == "ray" and started:
                import ray

                ray.shutdown()  # a fresh instance sized to this run's workers
            wall, startup, stats, count = _decide(path, Path(tmp) / f"j{k}.sqlite", sim, engine, workers)
            started = started or engine == "ray"
            rates[(sim, engine, workers)] = count / wall
            label = f"{engine}" + (f" x{workers}" if engine == "ray" else "")
            rss = f"{stats.get('worker_rss_mb', 0):.0f}" if engine == "ray" else "-"
            print(f"    {sim:7}  {label:12}  {count / wall:15,.1f}   {wall:6.1f}   {startup:14.1f}   {rss:>18}")
        print(f"    driver peak RSS: {_rss_mb():.0f} MB")
        if not skip_ray:
            for sim in ("tfidf", "static"):
                local = rates[(sim, "local", 1)]
                ray2 = rates[(sim, "ray", 2)]
                print(f"    {sim}: Ray x2 / local = {ray2 / local:.2f}")
            t1, t2 = 1 / rates[("tfidf", "ray", 1)], 1 / rates[("tfidf", "ray", 2)]
            # Amdahl: T(2) = T(1) * (s + (1 - s) / 2)  =>  s = 2 * T(2) / T(1) - 1
            serial = min(1.0, max(0.0, 2 * t2 / t1 - 1))
            print(f"    scaling (tfidf): Ray x1 {1 / t1:,.1f} panels/s, x2 {1 / t2:,.1f} panels/s, speed-up {t1 / t2:.2f}, implied serial fraction s = {serial:.2f}")


def bench_journal(n: int) -> None:
    from dissensus.store.journal import Journal

    payload = {"state": "CA", "action": "auto", "decision": "1", "reason": "agreement", "similarity": 0.91}
    print(f"(d) journal appends, SQLite, one writer, {n:,} events of ~100 bytes")
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("full", "normal"):
            journal = Journal(Path(tmp) / f"{mode}.sqlite", synchronous=mode)
            journal.create_run("r", kind="bench", meta={})
            start = time.perf_counter()
            for i in range(n):
                journal.append("r", "case.step", payload, key=f"k/{i}", case=str(i))
            rate = n / (time.perf_counter() - start)
            journal.close()
            print(f"    synchronous={mode:6}  {rate:9,.0f} appends/s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("DISSENSUS_DATA", REPO.parent / "shared" / "data")))
    parser.add_argument("--panels", type=int, default=20_000)
    parser.add_argument("--route-panels", type=int, default=20_000)
    parser.add_argument("--minilm-texts", type=int, default=200)
    parser.add_argument("--appends", type=int, default=3_000)
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--only", default="abcd", help="sections to run (letters)")
    args = parser.parse_args(argv)
    print(f"machine: {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at start")
    if "a" in args.only:
        bench_encoders(args.data, args.minilm_texts)
    if "b" in args.only:
        bench_route(args.route_panels)
    if "d" in args.only:
        bench_journal(args.appends)
    if "c" in args.only:
        bench_decide(args.panels, args.skip_ray)
    print(f"load average {os.getloadavg()[0]:.1f} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
