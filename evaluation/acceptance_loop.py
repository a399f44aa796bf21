"""The review loop learns: coverage and realised precision against human reviews done.

Simulates the product loop ``decide`` -> ``review resolve`` -> ``calibrate-acceptance
--journal`` -> ``decide`` on LLMBar (``Swap_CoT``) and ZeroEval GSM8K. A random 30% of
the cases is held out as the test set; the rest is the work queue. A reviewer who
always answers with the gold label does ``--round`` reviews per round: the queue's
escalations first (in a fixed random order), then, when fewer are escalated, audits of
auto-accepted cases (confirmations count as labelled cases too). After each round the
acceptance model is refitted on every review so far (target precision 0.9 on LLMBar,
0.95 on GSM8K; delta 0.1; at least 30 accepted). Before any review there is no model, and nothing is accepted.

Printed and plotted (``evaluation/acceptance_loop.png``): reviews done, coverage of the
held-out test cases and realised precision of the accepted ones. Features and model are exactly those of ``dissensus calibrate-acceptance``; the
loop calls the library directly instead of going through a journal to keep the run
short (the journal path is exercised by the test suite).

Note: the reviewed cases are the ones acceptance *escalated*, so later calibration sets
are not exchangeable with the cases they are applied to (they are the harder ones);
the guarantee's assumption is strained in the conservative direction.

Usage::

    .venv/bin/python evaluation/acceptance_loop.py [--data ../shared/data] [--round 100] [--max-reviews 1000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from dissensus.acceptance import AcceptanceFile, apply_acceptance, calibrate
from dissensus.acceptance.prepare import panel_case_key
from dissensus.states import get_backend

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import at_least, output_file, require_data
from acceptance import DATA_DIRS, DataSet, load, no_reasoning

REPO = Path(__file__).resolve().parent.parent


def simulate(
    ds: DataSet, round_size: int, max_reviews: int, test_share: float = 0.3, seed: int = 0
) -> list[tuple[int, float, float | None, int]]:
    """(reviews done, coverage, precision or None, test cases) per round."""
    cases = no_reasoning(ds.cases)
    keys = [panel_case_key(p) for p in ds.panels]
    order = np.random.default_rng(seed).permutation(len(cases)).tolist()
    n_test = int(len(order) * test_share)
    test, queue = order[:n_test], order[n_test:]
    reviewed: list[int] = []
    acc: AcceptanceFile | None = None
    rows = []
    while True:
        verdicts = (
            {i: apply_acceptance(acc, cases[i], key=keys[i]) for i in test}
            if acc is not None
            else {}
        )
        accepted = [i for i, v in verdicts.items() if v.accepted]
        right = sum(verdicts[i].decision == ds.golds[i] for i in accepted)
        rows.append(
            (
                len(reviewed),
                len(accepted) / len(test),
                right / len(accepted) if accepted else None,
                len(test),
            )
        )
        done = set(reviewed)
        pending = [i for i in queue if i not in done]
        if len(reviewed) >= max_reviews or not pending:
            return rows
        escalated, confirmable = [], []
        for i in pending:
            v = apply_acceptance(acc, cases[i], key=keys[i]) if acc is not None else None
            (confirmable if v is not None and v.accepted else escalated).append(i)
        # The reviewer answers escalations first, then audits auto-accepted cases (confirmations).
        reviewed += (escalated + confirmable)[:round_size]
        acc = calibrate(
            [cases[i] for i in reviewed],
            [ds.golds[i] for i in reviewed],
            target=0.9,
            delta=0.1,
            min_accepted=30,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--round", type=at_least(1), default=100)
    parser.add_argument("--max-reviews", type=at_least(0), default=1000)
    parser.add_argument("--similarity", default="tfidf", choices=["tfidf", "static", "minilm"])
    parser.add_argument(
        "--plot", type=output_file, default=REPO / "evaluation" / "acceptance_loop.png"
    )
    args = parser.parse_args(argv)
    sets = ("llmbar", "zeroeval")
    data = require_data(args.data, (DATA_DIRS[name] for name in sets))
    # One BLAS thread: many small fits, where thread start-up costs more than it saves.
    threadpool_limits(1)
    backend = get_backend(args.similarity)
    results = {}
    for name in sets:
        ds = load(data, name, backend)
        results[name] = simulate(ds, args.round, args.max_reviews)
        print(
            f"{name} ({len(ds.panels)} cases, {results[name][0][3]} held out for testing, target precision {ds.target}): "
            "reviews done | test coverage | realised precision"
        )
        for reviews, cov, prec, _ in results[name]:
            print(f"  {reviews:5d} | {cov:.3f} | {'  -  ' if prec is None else f'{prec:.3f}'}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, (name, rows) in zip(axes, results.items(), strict=True):
        x = [r[0] for r in rows]
        ax.plot(x, [r[1] for r in rows], "o-", label="coverage")
        ax.plot(
            x, [np.nan if r[2] is None else r[2] for r in rows], "s-", label="realised precision"
        )
        ax.axhline(
            {"llmbar": 0.9, "zeroeval": 0.95}[name],
            color="grey",
            linestyle="--",
            linewidth=1,
            label="target precision",
        )
        ax.set_title({"llmbar": "LLMBar (Swap_CoT)", "zeroeval": "ZeroEval GSM8K"}[name])
        ax.set_xlabel("human reviews done")
        ax.set_ylim(0, 1.02)
    axes[0].legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(args.plot, dpi=120)
    print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
