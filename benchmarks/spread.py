"""Figures of repeated benchmark runs: each one's median and its spread (min, max).

A benchmark run with ``--repeat N`` collects one :data:`Figures` per repetition (the
same names in the same order) and ends with :func:`summary`, so a target is read
against the spread between runs, not against one lucky or unlucky run.
"""

from __future__ import annotations

import statistics

Figures = dict[str, float]
"""One repetition's headline figures, by name."""


def summary(runs: list[Figures]) -> None:
    """Print each figure over the repetitions: median, then min and max."""
    print(f"over {len(runs)} repetitions: median [min, max]")
    width = max(len(name) for name in runs[0])
    for name in runs[0]:
        values = [run[name] for run in runs]
        print(
            f"  {name:{width}s} {statistics.median(values):10.2f} "
            f"[{min(values):10.2f}, {max(values):10.2f}]"
        )
