"""Benchmark of the scale path: static encoder, route throughput, Ray against local decide.

Prints, in one run:

(a) sentences/s of the static backend and of MiniLM on the same LLMBar CoT traces, each
    in a fresh process on one thread (MiniLM: ``torch.set_num_threads(1)``; the first
    ``--minilm-texts`` traces only, it is slow), the ratio, and each process' peak RSS.
(b) ``dissensus route`` with precomputed embeddings (parse + read + route + write) against
    plain ``json.loads`` + ``json.dumps`` of the same lines, CPU time, best of five
    runs of each, interleaved (the measurement of ``bench_route.py`` (a), on 20,000 synthetic 5-agent panels);
    the same with records written by ``json.dumps``, with panels parsed as pydantic
    models instead of read-only views (``read_models``), and with lines parsed by the
    reference path of ``parse_line``.
(c) ``dissensus decide`` on ``--panels`` synthetic 5-agent panels (default 20,000), for
    TF-IDF and for static: the local engine and the Ray engine with 2 workers (and, for
    TF-IDF, 1 worker: the scaling run of ``docs/scale.md``), panels/s wall clock, with
    Ray's start-up (local instance, actor pool, model loads) included and reported
    apart; peak RSS of the driver and of the largest worker. The journal is SQLite with
    ``synchronous=NORMAL`` (``$DISSENSUS_JOURNAL_SYNC``) so that the figures show the
    engines rather than the disk's fsync rate, which (d) measures.
(d) journal appends/s on SQLite, one writer, ``synchronous=FULL`` and ``NORMAL``, one by
    one and in batches of 512 (one transaction each, as the run loop appends a block).
(e) per-panel CPU of each stage (parse, embed, read, route, guard, accept, journal
    append) of a local decide run of the bundled LLMBar panels under
    ``examples/llmbar-policy.yaml`` (without its learned acceptance file, which was
    calibrated on MiniLM readings and so refuses TF-IDF and static runs), from a cProfile of the run with a CPU-time clock
    (cumulative time per function; the prefetch embeds a window of 64 panels' traces
    in one call and the reader takes the vectors from memory; the profiler inflates
    small functions, so the unprofiled total is printed too).

(f) ``decide`` panels per CPU second (user + system time of the process), local,
    journal ``synchronous=full`` and ``normal``; journal events per panel; the
    journal's share of per-panel CPU (its entry points ``append_batch``, ``get`` and
    ``events`` in a CPU-clock profile). Target: >= 1,500 panels per CPU second with
    ``full`` and the journal <= 25%. The same machine's CPU second is not a fixed
    amount of work (a virtual machine's neighbours share its caches and cores), so (f)
    also prints the CPU time of a fixed pure-Python workload (:func:`_reference_ms`,
    the best of three) next to its figures: two runs compare fairly only at the same
    reference.
(g) Ray x2: the driver's CPU per panel (this process's CPU time, Ray's threads
    included, start-up excluded) apart from the workers' (the CPU time each worker
    process spent on its blocks, reported with the block), split into the run loop's
    thread (journal appends, records), decoding the workers' blocks, and Ray's own
    threads (task submission, object transfers); and the serial fraction
    ``driver / (driver + worker)``. Target: driver <= 0.10 of worker. The panels are
    read with TF-IDF (the least work per panel in a worker, so the driver's largest
    share); ``--ray-similarity tfidf,minilm`` measures it with the default policy's
    reader (MiniLM) too, and ``static`` with the static encoder.
(h) PostgreSQL (``--pg URL`` or ``$DISSENSUS_TEST_PG``): 1, 2 and 4 writer processes,
    each appending its own run in batches of 500 events.

Run: ``python benchmarks/bench_scale.py [--panels N] [--skip-ray] [--only LETTERS]
[--repeat N]``. Prints figures, asserts nothing. ``--repeat N`` runs (f) and (g) ``N``
times and ends with each of their figures' median, minimum and maximum. ``benchmarks/run_all.py`` runs it with the others.
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
from spread import Figures, summary  # noqa: E402


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _traces(data: Path) -> list[str]:
    from dissensus.convert import iter_llmbar_panels

    panels = iter_llmbar_panels(data / "llmbar", "CoT")
    return sorted({o.reasoning for p in panels for o in p.outputs})


def _encode_child(name: str, texts: list[str]) -> tuple[float, float, float]:
    if name == "minilm":
        import torch

        torch.set_num_threads(1)
    from dissensus.states import get_backend

    backend = get_backend(name, cache=False)
    embed_fn = backend.embed  # type: ignore[attr-defined]
    embed_fn(texts[:8])
    start, cpu = time.perf_counter(), time.process_time()
    embed_fn(texts)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return len(texts) / wall, len(texts) / cpu, _rss_mb()


def bench_encoders(data: Path, minilm_texts: int) -> None:
    from dissensus.states.static import distil_static

    distil_static()
    texts = _traces(data)
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        s_wall, s_cpu, s_rss = pool.apply(_encode_child, ("static", texts))
    with ctx.Pool(1) as pool:
        m_wall, m_cpu, m_rss = pool.apply(_encode_child, ("minilm", texts[:minilm_texts]))
    print(
        f"(a) encoders on LLMBar CoT traces (mean {sum(map(len, texts)) / len(texts):.0f} chars), one thread each"
    )
    print(
        "    (per CPU second of the encoding process: unaffected by other load; wall clock in brackets)"
    )
    print(
        f"    static (model2vec, {len(texts)} traces):  {s_cpu:9,.1f} sentences/s ({s_wall:,.1f} wall)   peak RSS {s_rss:6.0f} MB"
    )
    print(
        f"    MiniLM ({minilm_texts} traces):           {m_cpu:9,.1f} sentences/s ({m_wall:,.1f} wall)   peak RSS {m_rss:6.0f} MB"
    )
    print(
        f"    ratio static / MiniLM: {s_cpu / m_cpu:.0f}x per CPU second ({s_wall / m_wall:.0f}x wall)   (target >= 50x)"
    )


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

    def routing(views: bool = True) -> None:
        with open(os.devnull, "w", encoding="utf-8") as sink:
            route_stream(panels_gen(lines, views=views), backend, thresholds, ruleset, handle=sink)

    routing()
    gc.collect()
    gc.freeze()
    from dissensus.io import fastjson

    # Interleaved, so that a spell of load from other processes hits both alike.
    base_runs, route_runs = [], []
    for _ in range(5):
        base_runs.append(_cpu(baseline))
        route_runs.append(_cpu(routing))
    base, route = min(base_runs), min(route_runs)
    saved, fastjson._orjson = fastjson._orjson, None  # the standard-library encoder
    try:
        route_std = min(_cpu(routing) for _ in range(3))
    finally:
        fastjson._orjson = saved
    route_models = min(_cpu(lambda: routing(views=False)) for _ in range(3))
    from dissensus.io import jsonl

    fast_models, jsonl._VALIDATE_JSON = jsonl._VALIDATE_JSON, frozenset()  # reference parse
    try:
        route_ref = min(_cpu(lambda: routing(views=False)) for _ in range(3))
    finally:
        jsonl._VALIDATE_JSON = fast_models
    gc.unfreeze()
    print(
        f"(b) route with precomputed embeddings, {n:,} 5-agent panels, CPU time, best of 5 (interleaved with the baseline; other rows best of 3)"
    )
    print(
        f"    route (parse+read+route+write): {n / route:9,.0f} panels/s   (records by orjson: {fastjson.orjson_available()})"
    )
    print(
        f"    same, records by json.dumps:    {n / route_std:9,.0f} panels/s   ratio {base / route_std:.3f}"
    )
    print(
        f"    same, panels as pydantic models:{n / route_models:9,.0f} panels/s   ratio {base / route_models:.3f}   (model_validate_json tiers, no views)"
    )
    print(
        f"    same, reference parse path:     {n / route_ref:9,.0f} panels/s   ratio {base / route_ref:.3f}   (json.loads, checks, model_validate)"
    )
    print(f"    baseline json.loads+dumps:      {n / base:9,.0f} panels/s")
    print(f"    ratio route / baseline:         {base / route:.3f}   (target >= 0.5)")


def _cpu(fn: Any) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def _decide(
    path: Path, journal_path: Path, similarity: str, engine: str, workers: int
) -> tuple[float, float, dict[str, Any], int]:
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
        print(
            f"(c) decide, {n:,} synthetic 5-agent panels, default policy, no model; journal SQLite synchronous={os.environ['DISSENSUS_JOURNAL_SYNC']}"
        )
        print(
            "    backend  engine         panels/s (wall)   run s   Ray start-up s   worker peak RSS MB"
        )
        runs = [
            ("tfidf", "local", 1),
            ("tfidf", "ray", 1),
            ("tfidf", "ray", 2),
            ("static", "local", 1),
            ("static", "ray", 2),
        ]
        rates: dict[tuple[str, str, int], float] = {}
        started = False
        for k, (sim, engine, workers) in enumerate(runs):
            if engine == "ray" and skip_ray:
                continue
            if engine == "ray" and started:
                import ray

                ray.shutdown()  # a fresh instance sized to this run's workers
            wall, startup, stats, count = _decide(
                path, Path(tmp) / f"j{k}.sqlite", sim, engine, workers
            )
            started = started or engine == "ray"
            rates[(sim, engine, workers)] = count / wall
            label = f"{engine}" + (f" x{workers}" if engine == "ray" else "")
            rss = f"{stats.get('worker_rss_mb', 0):.0f}" if engine == "ray" else "-"
            print(
                f"    {sim:7}  {label:12}  {count / wall:15,.1f}   {wall:6.1f}   {startup:14.1f}   {rss:>18}"
            )
        print(f"    driver peak RSS: {_rss_mb():.0f} MB")
        if not skip_ray:
            for sim in ("tfidf", "static"):
                local = rates[(sim, "local", 1)]
                ray2 = rates[(sim, "ray", 2)]
                print(f"    {sim}: Ray x2 / local = {ray2 / local:.2f}")
            t1, t2 = 1 / rates[("tfidf", "ray", 1)], 1 / rates[("tfidf", "ray", 2)]
            # Amdahl: T(2) = T(1) * (s + (1 - s) / 2)  =>  s = 2 * T(2) / T(1) - 1
            serial = min(1.0, max(0.0, 2 * t2 / t1 - 1))
            print(
                f"    scaling (tfidf): Ray x1 {1 / t1:,.1f} panels/s, x2 {1 / t2:,.1f} panels/s, speed-up {t1 / t2:.2f}, implied serial fraction s = {serial:.2f}"
            )


def bench_journal(n: int) -> None:
    from dissensus.store.journal import Journal, NewEvent

    payload = {
        "state": "CA",
        "action": "auto",
        "decision": "1",
        "reason": "agreement",
        "similarity": 0.91,
    }
    print(f"(d) journal appends, SQLite, one writer, {n:,} events of ~100 bytes")
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("full", "normal"):
            journal = Journal(Path(tmp) / f"{mode}.sqlite", synchronous=mode)
            journal.create_run("r", kind="bench", meta={})
            start = time.perf_counter()
            for i in range(n):
                journal.append("r", "case.step", payload, key=f"k/{i}", case=str(i))
            rate = n / (time.perf_counter() - start)
            journal.create_run("b", kind="bench", meta={})
            start = time.perf_counter()
            for b in range(0, n * 10, 512):
                journal.append_batch(
                    "b",
                    [
                        NewEvent("case.step", payload, f"k/{i}", str(i))
                        for i in range(b, min(b + 512, n * 10))
                    ],
                )
            batched = n * 10 / (time.perf_counter() - start)
            journal.close()
            print(
                f"    synchronous={mode:6}  {rate:9,.0f} appends/s one by one, "
                f"{batched:9,.0f} events/s in batches of 512"
            )


_STAGES = {
    "parse (parse_line)": [("jsonl.py", "parse_line")],
    "embed, tfidf (matrix)": [("lexical.py", "matrix")],
    "embed, static (embed)": [("static.py", "embed")],
    "read (read_panel, embedding excluded)": [("reading.py", "read_panel")],
    "route (route_step)": [("gates.py", "route_step")],
    "guard (guard_step)": [("gates.py", "guard_step")],
    "signals for acceptance (agent_signals)": [("signals.py", "agent_signals")],
    "accept (_accept)": [("engine.py", "_accept")],
    "journal append (Journal.append)": [("store/journal.py", "append")],
}


def _embed_under_reading(stats: dict[Any, Any]) -> float:
    """CPU of the embedding calls made from inside the reader (to exclude from "read")."""
    total = 0.0
    for key, value in stats.items():
        if (key[0].endswith("lexical.py") and key[2] == "matrix") or (
            key[0].endswith("static.py") and key[2] == "embed"
        ):
            for caller, cstats in value[4].items():
                if caller[0].endswith("reading.py"):
                    total += cstats[3]
    return total


def bench_stages(copies: int) -> None:
    """Per-panel CPU of each stage of a local decide run, from a profile of the run."""
    import cProfile
    import pstats

    from dissensus.pipeline import execute_run, load_policy, start_run
    from dissensus.store.journal import Journal

    os.environ.setdefault("DISSENSUS_JOURNAL_SYNC", "normal")
    lines = (
        (REPO / "examples" / "llmbar-cot.jsonl")
        .read_text(encoding="utf-8")
        .splitlines(keepends=True)
    )
    print(
        f"(e) per-panel CPU by stage, local decide of the bundled LLMBar panels x{copies} "
        f"({len(lines) * copies} panels, examples/llmbar-policy.yaml without its MiniLM-calibrated acceptance file: guard, recorded re-asks, acceptance by independent families)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.jsonl"
        path.write_text("".join(lines * copies), encoding="utf-8")
        pol, pol_dir = load_policy(str(REPO / "examples" / "llmbar-policy.yaml"))
        # Its learned acceptance file was calibrated on MiniLM readings: a TF-IDF or static
        # run may not use it (start_run refuses), so acceptance falls back to the policy's
        # rule (independent families).
        pol = pol.model_copy(
            update={"acceptance": pol.acceptance.model_copy(update={"model": None})}
        )
        for sim in ("tfidf", "static"):
            for profiled in (False, True):
                journal = Journal(Path(tmp) / f"{sim}{profiled}.sqlite")
                start_run(journal, str(path), pol, policy_dir=pol_dir, run_id="s", similarity=sim)

                async def go(j: Journal = journal) -> int:
                    return sum([1 async for _ in execute_run(j, "s")])

                prof = cProfile.Profile(time.process_time) if profiled else None
                c0 = time.process_time()
                if prof is not None:
                    prof.enable()
                n = asyncio.run(go())
                if prof is not None:
                    prof.disable()
                cpu = time.process_time() - c0
                events = journal.run("s").n_events  # type: ignore[union-attr]
                journal.close()
                if prof is None:
                    print(
                        f"    {sim}: {n} panels, {cpu / n * 1e3:.2f} ms CPU per panel unprofiled, {events / n:.1f} journal events per panel"
                    )
                    continue
                stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
                total = cpu / n * 1e3
                for label, keys in _STAGES.items():
                    ct = sum(
                        v[3]
                        for k, v in stats.items()
                        for f, name in keys
                        if k[0].endswith(f) and k[2] == name
                    )
                    if ct == 0:
                        continue
                    if label.startswith("read"):
                        ct -= _embed_under_reading(stats)
                    ms = ct / n * 1e3
                    print(
                        f"      {label:40} {ms:7.3f} ms/panel ({ms / total:5.1%} of profiled {total:.2f} ms)"
                    )


def _decide_cpu(
    path: Path, journal_path: Path, sync: str, profiled: bool
) -> tuple[float, int, int, float]:
    """A local decide run of ``path``: (CPU s, panels, events, journal CPU s when profiled)."""
    import cProfile
    import pstats

    from dissensus.pipeline import Policy, execute_run, start_run
    from dissensus.store.journal import Journal

    journal = Journal(journal_path, synchronous=sync)
    start_run(journal, str(path), Policy(), run_id="cpu", similarity="tfidf")

    async def go() -> int:
        return sum([1 async for _ in execute_run(journal, "cpu")])

    gc.collect()
    prof = cProfile.Profile(time.process_time) if profiled else None
    c0 = time.process_time()
    if prof is not None:
        prof.enable()
    n = asyncio.run(go())
    if prof is not None:
        prof.disable()
    cpu = time.process_time() - c0
    events = journal.run("cpu").n_events  # type: ignore[union-attr]
    journal.close()
    share = 0.0
    if prof is not None:
        stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
        # The journal's entry points: batched writes, key look-ups, event reads.
        share = sum(
            v[3]
            for k, v in stats.items()
            if k[0].endswith("store/journal.py") and k[2] in ("append_batch", "get", "events")
        )
    return cpu, n, events, share


def _reference_ms() -> float:
    """CPU milliseconds of a fixed pure-Python workload (integer arithmetic, then sorted
    compact JSON of a small dict), the best of three: how fast this machine's CPU second
    is right now."""
    probe = {"b": [1, 2.5, "x" * 40], "a": {"k": True}}
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        total = 0
        for i in range(1_000_000):
            total += i * i % 7
        for _ in range(30_000):
            json.dumps(probe, sort_keys=True, separators=(",", ":"))
        best = min(best, time.process_time() - start)
    return best * 1e3


def bench_cpu(n: int) -> Figures:
    """(f) decide panels per CPU second, local, synchronous full and normal; events per
    panel; the journal's share of per-panel CPU (from a profile)."""
    figures: Figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "panels.jsonl"
        path.write_text("".join(panel_line(i) + "\n" for i in range(n)), encoding="utf-8")
        print(
            f"(f) decide per CPU second, local, {n:,} synthetic 5-agent panels, default policy, "
            "tfidf, no model (CPU = user + system time of the process)"
        )
        for sync in ("full", "normal"):
            cpu, count, events, _ = _decide_cpu(path, Path(tmp) / f"{sync}.sqlite", sync, False)
            figures[f"(f) panels per CPU second, synchronous={sync}"] = count / cpu
            print(
                f"    synchronous={sync:6}  {count / cpu:9,.1f} panels per CPU second   "
                f"{cpu / count * 1e3:.3f} ms CPU per panel   {events / count:.2f} journal events per panel"
            )
        cpu, count, _, journal = _decide_cpu(path, Path(tmp) / "prof.sqlite", "full", True)
        print(
            f"    journal share of per-panel CPU (profiled, synchronous=full): {journal / cpu:.1%} "
            f"({journal / count * 1e3:.3f} of {cpu / count * 1e3:.3f} ms profiled)"
        )
        reference = _reference_ms()
        print(f"    machine reference: {reference:.1f} ms CPU for a fixed Python workload")
    figures["(f) journal share of per-panel CPU, %"] = journal / cpu * 100
    figures["(f) machine reference, ms"] = reference
    return figures


def _ray_cpu(
    path: Path, journal_path: Path, workers: int, similarity: str = "tfidf"
) -> tuple[float, float, float, float, int]:
    """A Ray decide run of ``path`` after a warm-up run: (driver CPU s, its run-loop
    thread's CPU s, CPU s it spent decoding the workers' blocks, workers' CPU s, panels)."""
    from dissensus.engines.ray import RayOptions, decide_ray, ensure_ray
    from dissensus.pipeline import Policy, start_run
    from dissensus.store.journal import Journal

    journal = Journal(journal_path, synchronous="full")
    ensure_ray(RayOptions(workers=workers))
    stats: dict[str, Any] = {}

    async def go(run_id: str = "ray") -> int:
        stream = decide_ray(journal, run_id, options=RayOptions(workers=workers), stats=stats)
        return sum([1 async for _ in stream])

    # A warm-up run first: the driver's imports of Ray Data and the workers' start are
    # paid there, not in the measured run.
    warm = path.with_name("warm.jsonl")
    warm.write_text(
        "".join(path.read_text(encoding="utf-8").splitlines(True)[:1024]), encoding="utf-8"
    )
    start_run(journal, str(warm), Policy(), run_id="warm", similarity=similarity)
    asyncio.run(go("warm"))
    start_run(journal, str(path), Policy(), run_id="ray", similarity=similarity)
    stats.clear()

    c0, t0 = time.process_time(), time.thread_time()
    count = asyncio.run(go())
    driver = time.process_time() - c0
    loop_thread = time.thread_time() - t0
    journal.close()
    decode = float(stats.get("driver_decode_cpu_s", 0.0))
    return driver, loop_thread, decode, float(stats.get("worker_cpu_s", 0.0)), count


def bench_ray_cpu(n: int, similarity: str = "tfidf") -> Figures:
    """(g) Ray: the driver's CPU per panel apart from the workers' (process CPU times),
    and the serial fraction they imply, with panels read by ``similarity``."""
    print(
        f"(g) Ray x2, {n:,} synthetic panels, {similarity}, journal synchronous=full: CPU per panel "
        "(driver: this process, Ray's threads included, start-up and a warm-up run excluded; "
        "workers: the CPU time each worker process spent on its blocks)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "panels.jsonl"
        path.write_text("".join(panel_line(i) + "\n" for i in range(n)), encoding="utf-8")
        driver, loop_thread, decode, worker, count = _ray_cpu(
            path, Path(tmp) / "ray.sqlite", 2, similarity
        )
        d, w = driver / count * 1e3, worker / count * 1e3
        own, dec = loop_thread / count * 1e3, decode / count * 1e3
        print(
            f"    driver's run-loop thread (journal, records): {own:.3f} ms CPU per panel "
            f"({own / w if w else float('inf'):.3f} of worker); decoding the workers' blocks: "
            f"{dec:.3f} ms; Ray's own threads in the driver (executor, transfers): {d - own - dec:.3f} ms"
        )
        serial = d / (d + w) if d + w else 0.0
        speedup8 = 1 / (serial + (1 - serial) / 8)
        print(
            f"    driver {d:.3f} ms CPU per panel, workers {w:.3f} ms CPU per panel, "
            f"driver / worker = {d / w if w else float('inf'):.3f}; implied serial fraction "
            f"s = driver / (driver + worker) = {serial:.3f} (8 workers: {speedup8:.1f}x)"
        )
    name = "(g)" if similarity == "tfidf" else f"(g, {similarity})"
    return {
        f"{name} driver CPU ms per panel": d,
        f"{name} worker CPU ms per panel": w,
        f"{name} driver / worker": d / w if w else float("inf"),
        f"{name} implied serial fraction": serial,
    }


def _pg_writer(url: str, run_id: str, blocks: int, size: int, out: Any) -> None:
    from dissensus.store.journal import Journal, NewEvent

    payload = {
        "state": "CA",
        "action": "auto",
        "decision": "1",
        "reason": "agreement",
        "similarity": 0.91,
    }
    journal = Journal(url)
    journal.create_run(run_id, kind="bench", meta={})
    t0 = time.perf_counter()
    for b in range(blocks):
        journal.append_batch(
            run_id,
            [NewEvent("case.step", payload, f"k/{b}/{i}", str(i)) for i in range(size)],
        )
    out.put(time.perf_counter() - t0)
    journal.close()


def bench_postgres(url: str, blocks: int, size: int) -> None:
    """(h) PostgreSQL: several processes, each appending its own run in batches."""
    print(
        f"(h) PostgreSQL, batches of {size} events (~100 bytes), {blocks} batches per writer, "
        "each writer its own run and process"
    )
    ctx = mp.get_context("spawn")
    for writers in (1, 2, 4):
        queue = ctx.Queue()
        tag = f"{os.getpid()}-{time.time_ns()}"
        procs = [
            ctx.Process(
                target=_pg_writer, args=(url, f"pg{writers}-{i}-{tag}", blocks, size, queue)
            )
            for i in range(writers)
        ]
        t0 = time.perf_counter()
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
        wall = time.perf_counter() - t0
        each = [queue.get() for _ in procs]
        total = writers * blocks * size
        print(
            f"    {writers} writer(s): {total / max(each):9,.0f} events/s together "
            f"(slowest writer's append time), {blocks * size / (sum(each) / writers):9,.0f} events/s per writer, "
            f"{wall:.1f} s wall with process start"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(os.environ.get("DISSENSUS_DATA", REPO.parent / "shared" / "data")),
    )
    parser.add_argument("--panels", type=int, default=20_000)
    parser.add_argument("--route-panels", type=int, default=20_000)
    parser.add_argument("--minilm-texts", type=int, default=200)
    parser.add_argument("--appends", type=int, default=3_000)
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--copies", type=int, default=4, help="copies of the bundled panels in (e)")
    parser.add_argument("--cpu-panels", type=int, default=5_000, help="panels in (f) and (g)")
    parser.add_argument(
        "--pg", default=os.environ.get("DISSENSUS_TEST_PG"), help="PostgreSQL URL for (h)"
    )
    parser.add_argument("--only", default="abdecfgh", help="sections to run (letters)")
    parser.add_argument(
        "--ray-similarity",
        default="tfidf",
        help="readers of (g), comma-separated (tfidf, static, minilm: the default policy's)",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of (f) and (g), each figure's spread printed"
    )
    args = parser.parse_args(argv)
    print(f"machine: {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at start")
    if "a" in args.only:
        bench_encoders(args.data, args.minilm_texts)
    if "b" in args.only:
        bench_route(args.route_panels)
    if "d" in args.only:
        bench_journal(args.appends)
    if "e" in args.only:
        bench_stages(args.copies)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    runs: list[Figures] = []
    for _ in range(args.repeat):
        figures: Figures = {}
        if "f" in args.only:
            figures.update(bench_cpu(args.cpu_panels))
        if "g" in args.only and not args.skip_ray:
            for similarity in args.ray_similarity.split(","):
                figures.update(bench_ray_cpu(args.cpu_panels, similarity.strip()))
        if figures:
            runs.append(figures)
    if args.repeat > 1 and runs:
        summary(runs)
    if "h" in args.only and args.pg:
        bench_postgres(args.pg, 20, 500)
    if "c" in args.only:
        bench_decide(args.panels, args.skip_ray)
    print(f"load average {os.getloadavg()[0]:.1f} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
