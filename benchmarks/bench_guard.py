"""Benchmark of the guard's array API against crowd-kit, plus the CLI end to end.

One run, one process, the same 1,000,000 votes (200,000 cases x 5 voters, 3 answers,
seeded; ``--missing`` leaves a share of votes out) for every aggregator:

* unweighted majority: :func:`dissensus.guard.arrays.majority_vote` vs crowd-kit
  ``MajorityVote().fit``;
* agreement-weighted (Wawa): :func:`dissensus.guard.arrays.wawa` vs crowd-kit
  ``Wawa().fit`` followed by its apply step (``MajorityVote`` with the fitted skills;
  ``Wawa.predict`` itself trips over a scikit-learn fit check in recent versions).

Each side is timed on its native input (our label matrix; crowd-kit's long
``task, worker, label`` DataFrame) and ours also from the long format (building the
matrix included). Results are checked equal before any figure is printed. Reported:
best-of-``--repeat`` seconds, votes/s, the ratio crowd-kit time / our time (> 1 means
ours is faster) and the peak traced memory of each call.

Then ``dissensus vote --json`` runs as a subprocess on ``--cli-cases`` cases (with and
without a calibration): end-to-end cases/s and the child's peak RSS.

Usage::

    python benchmarks/bench_guard.py [--cases 200000] [--voters 5] [--repeat 3] [--cli-cases 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dissensus.guard.arrays import majority_vote, wawa


def make_votes(
    cases: int, voters: int, classes: int, seed: int, missing: float = 0.0
) -> np.ndarray:
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, classes, cases)
    skill = rng.uniform(0.5, 0.9, voters)
    right = rng.random((cases, voters)) < skill
    labels = np.where(right, truth[:, None], rng.integers(0, classes, (cases, voters)))
    labels[rng.random((cases, voters)) < missing] = -1
    labels[:, 0] = np.where(labels[:, 0] < 0, truth, labels[:, 0])  # every case has a vote
    return labels.astype(np.int64)


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """(best seconds, peak traced MB of one call, result)."""
    best = float("inf")
    result: Any = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return best, peak, result


def from_long(
    tasks: np.ndarray, workers: np.ndarray, labels: np.ndarray, n_tasks: int, n_workers: int
) -> np.ndarray:
    out = np.full((n_tasks, n_workers), -1, dtype=np.int64)
    out[tasks, workers] = labels
    return out


def bench_arrays(args: argparse.Namespace) -> list[dict[str, Any]]:
    import pandas as pd
    from crowdkit.aggregation import MajorityVote, Wawa

    labels = make_votes(args.cases, args.voters, args.classes, args.seed, args.missing)
    t_idx, w_idx = np.nonzero(labels >= 0)
    values = labels[t_idx, w_idx]
    df = pd.DataFrame({"task": t_idx, "worker": w_idx, "label": values})
    k = args.classes
    sys.stdout.write(
        f"{len(df):,} votes ({args.cases:,} cases x {args.voters} voters, {args.missing:.0%} missing), {k} answers\n\n"
    )

    ck_mv_t, ck_mv_m, ck_mv = timed(lambda: MajorityVote().fit(df), args.repeat)
    order = [int(c) for c in ck_mv.probas_.columns]

    def ck_wawa() -> Any:
        fitted = Wawa().fit(df)
        return MajorityVote().fit(df, skills=fitted.skills_)

    ck_w_t, ck_w_m, ck_w = timed(ck_wawa, args.repeat)
    mv_t, mv_m, (mv, _) = timed(lambda: majority_vote(labels, k, tie_order=order), args.repeat)
    mvl_t, mvl_m, _ = timed(
        lambda: majority_vote(
            from_long(t_idx, w_idx, values, args.cases, args.voters), k, tie_order=order
        ),
        args.repeat,
    )
    w_t, w_m, (wv, wp, _) = timed(lambda: wawa(labels, k, tie_order=order), args.repeat)
    wl_t, wl_m, _ = timed(
        lambda: wawa(from_long(t_idx, w_idx, values, args.cases, args.voters), k, tie_order=order),
        args.repeat,
    )

    # Same answers before any speed figure counts.
    theirs_mv = ck_mv.labels_.sort_index().to_numpy().astype(np.int64)
    if not np.array_equal(theirs_mv, mv):
        raise SystemExit("majority results differ from crowd-kit")
    theirs_w = ck_w.labels_.sort_index().to_numpy().astype(np.int64)
    probas = ck_w.probas_.sort_index().reindex(columns=range(k), fill_value=0.0).to_numpy()
    top = np.sort(probas, axis=1)
    clear = ~np.isclose(top[:, -1], top[:, -2])
    if not (np.allclose(probas, wp) and np.array_equal(theirs_w[clear], wv[clear])):
        raise SystemExit("Wawa results differ from crowd-kit")
    n = len(df)
    return [
        {
            "aggregator": "majority",
            "ours": "label matrix",
            "s": mv_t,
            "mb": mv_m,
            "ck_s": ck_mv_t,
            "ck_mb": ck_mv_m,
            "votes": n,
        },
        {
            "aggregator": "majority",
            "ours": "long format",
            "s": mvl_t,
            "mb": mvl_m,
            "ck_s": ck_mv_t,
            "ck_mb": ck_mv_m,
            "votes": n,
        },
        {
            "aggregator": "wawa",
            "ours": "label matrix",
            "s": w_t,
            "mb": w_m,
            "ck_s": ck_w_t,
            "ck_mb": ck_w_m,
            "votes": n,
        },
        {
            "aggregator": "wawa",
            "ours": "long format",
            "s": wl_t,
            "mb": wl_m,
            "ck_s": ck_w_t,
            "ck_mb": ck_w_m,
            "votes": n,
        },
    ]


_MEASURE = (
    "import resource, subprocess, sys; "
    "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def bench_cli(args: argparse.Namespace) -> list[dict[str, Any]]:
    labels = make_votes(args.cli_cases, args.voters, args.classes, args.seed + 1, args.missing)
    truth = make_votes(args.cli_cases, 1, args.classes, args.seed + 1)[:, 0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "votes.jsonl"
        with open(path, "w", encoding="utf-8") as handle:
            for i, row in enumerate(labels):
                votes = [
                    {
                        "agent": f"v{j}",
                        "answer": f"l{x}",
                        "evidence_source": f"index{j % 3}" if (i + j) % 2 else "parametric",
                        "evidence_present": bool((i + j) % 2),
                        "family": f"f{j % 2}",
                    }
                    for j, x in enumerate(row)
                    if x >= 0
                ]
                handle.write(
                    json.dumps({"id": str(i), "votes": votes, "gold": f"l{truth[i]}"}) + "\n"
                )
        cal = Path(tmp) / "cal.json"
        env = {**os.environ, "DISSENSUS_PROGRESS": "0"}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "dissensus",
                "calibrate",
                str(path),
                "--out",
                str(cal),
                "--json",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            env=env,
        )
        runs: list[tuple[str, list[str], int]] = [
            ("--help (start-up only)", ["--help"], 0),
            ("vote --json", ["vote", str(path), "--json"], args.cli_cases),
            (
                "vote --json --calibration",
                ["vote", str(path), "--json", "--calibration", str(cal)],
                args.cli_cases,
            ),
        ]
        for label, argv, cases in runs:
            start = time.perf_counter()
            # A fresh parent per run, so that ru_maxrss is this child's peak alone.
            out = subprocess.run(
                [sys.executable, "-c", _MEASURE, sys.executable, "-m", "dissensus", *argv],
                check=True,
                capture_output=True,
                text=True,
                env=env,
            )
            elapsed = time.perf_counter() - start
            rows.append(
                {
                    "command": label,
                    "cases": cases,
                    "s": elapsed,
                    "rss_mb": int(out.stdout.strip()) / 1024,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200_000)
    parser.add_argument("--voters", type=int, default=5)
    parser.add_argument("--classes", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cli-cases", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--missing",
        type=float,
        default=0.0,
        help="Share of votes left out (0: exactly cases x voters).",
    )
    args = parser.parse_args(argv)
    rows = bench_arrays(args)
    sys.stdout.write(
        "| aggregator | ours from | ours s | ours Mvotes/s | crowd-kit s | ratio (crowd-kit / ours) | ours peak MB | crowd-kit peak MB |\n"
    )
    sys.stdout.write("|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        sys.stdout.write(
            f"| {r['aggregator']} | {r['ours']} | {r['s']:.4f} | {r['votes'] / r['s'] / 1e6:.1f} | {r['ck_s']:.3f} "
            f"| {r['ck_s'] / r['s']:.1f}x | {r['mb']:.1f} | {r['ck_mb']:.1f} |\n"
        )
    sys.stdout.write(
        "\nresults equal crowd-kit (majority: every case; Wawa: probabilities, and labels off exact float ties)\n\n"
    )
    cli = bench_cli(args)
    sys.stdout.write(
        "| CLI | cases | seconds | cases/s (start-up included) | cases/s (start-up subtracted) | peak RSS MB |\n"
        "|---|---|---|---|---|---|\n"
    )
    startup = cli[0]["s"]
    for r in cli:
        rate = f"{r['cases'] / r['s']:,.0f}" if r["cases"] else "-"
        net = f"{r['cases'] / (r['s'] - startup):,.0f}" if r["cases"] and r["s"] > startup else "-"
        sys.stdout.write(
            f"| {r['command']} | {r['cases']:,} | {r['s']:.2f} | {rate} | {net} | {r['rss_mb']:.0f} |\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
