"""Reproduction A of the correlated-hallucination study: the correlated-hallucination cliff, simulated.

Voters answer K-choice questions. Each case is in the *evidence-present* stratum (the
shared index holds the answer: a voter is right with probability ``acc_present``) or
the *evidence-absent* stratum (voters fall back on a shared parametric prior: right with
probability ``acc_absent``, and the wrong mass sits mostly on one plausible
confabulation). The latent shared cause: per case one answer ``S`` is drawn from the
stratum's answer distribution; each voter copies ``S`` with probability ``q`` and
otherwise draws its own answer from the same distribution. Two voters then give the
identical (shared) draw with probability ``q^2``, so the pairwise answer correlation
is ``c = q^2``; we sweep ``c`` from 0 to 1 and also report the measured correlation of
the voters' correctness.

For every ``c`` we compare unweighted majority (confidence = vote share) with consensus
weighting ``w = exp(beta * agreement)`` (confidence = weight share) on both strata, and
the guard's confidence in the majority answer (reliabilities and error correlations
measured on a separate labelled draw, shrunk by ``n_eff / n``):
accuracy, mean confidence and calibration gap ``|confidence - accuracy|``. The *cliff*
is the correlation at which consensus weighting stops improving calibration, i.e. where
its gap first exceeds majority's (linear interpolation between grid points), reported
per stratum and pooled (``absent_share`` of the cases evidence-absent); the study
reports about 0.6. The headline (and the plot's marker) is the evidence-present
stratum's, the only one where weighting helps at all: on the evidence-absent stratum
majority's vote share is already overconfident and weighting only adds to it.

Per-case agreement weighting never changes the plurality winner (the largest answer
cluster also holds the voters of highest agreement), so the two accuracies coincide:
what weighting changes, silently, is the confidence.

Everything is seeded; the plot is written with matplotlib's Agg backend.

Usage::

    python evaluation/guard_simulation.py [--cases 4000] [--voters 5] [--seed 3]
        [--plot evaluation/guard_simulation.png] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import at_least, non_negative, output_file

from dissensus.guard import consensus_weighted_vote, majority_vote
from dissensus.guard.arrays import (
    log_odds_weights,
    n_eff_per_case,
    pairwise_error_correlation,
    reliability_posterior,
)

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Setup:
    voters: int = 5
    classes: int = 4
    cases: int = 4000
    absent_share: float = 0.3
    """Share of evidence-absent cases in the pooled figures (the study: a minority)."""
    acc_present: float = 0.85
    acc_absent: float = 0.5
    confabulation: float = 0.8
    """Share of the absent stratum's wrong mass on the one plausible wrong answer."""
    beta: float = 1.5


def _distribution(setup: Setup, present: bool) -> np.ndarray:
    k = setup.classes
    p = np.zeros(k)
    if present:
        p[0] = setup.acc_present
        p[1:] = (1 - setup.acc_present) / (k - 1)
    else:
        p[0] = setup.acc_absent
        wrong = 1 - setup.acc_absent
        p[1] = wrong * setup.confabulation
        p[2:] = wrong * (1 - setup.confabulation) / (k - 2)
    return p


def simulate(
    setup: Setup, correlation: float, present: bool, rng: np.random.Generator
) -> np.ndarray:
    """Label matrix ``(cases, voters)``; the correct answer is class 0."""
    p = _distribution(setup, present)
    n, v = setup.cases, setup.voters
    shared = rng.choice(setup.classes, size=n, p=p)
    own = rng.choice(setup.classes, size=(n, v), p=p)
    copy = rng.random((n, v)) < np.sqrt(correlation)
    labels: np.ndarray = np.where(copy, shared[:, None], own)
    return labels.astype(np.int64)


def _correctness_correlation(labels: np.ndarray) -> float:
    right = (labels == 0).astype(np.float64)
    c = np.corrcoef(right.T)
    off = c[~np.eye(c.shape[0], dtype=bool)]
    off = off[~np.isnan(off)]
    return float(off.mean()) if off.size else 1.0


def guarded_confidence(
    setup: Setup, calib: np.ndarray, labels: np.ndarray, answers: np.ndarray
) -> np.ndarray:
    """The guard's confidence in ``answers``: reliability and n_eff measured on ``calib``.

    Vectorised form of :func:`dissensus.guard.posterior` for a homogeneous panel: every
    voter's reliability and the error correlations are measured on a separate labelled
    draw of the same stratum (gold = class 0); no gold of ``labels`` is used.
    """
    errors = (calib != 0).astype(np.float64)
    reliability = 1.0 - errors.mean(axis=0)
    rho = np.nan_to_num(pairwise_error_correlation(errors), nan=1.0)
    present = labels >= 0
    shrink = n_eff_per_case(present, rho) / present.sum(axis=1)
    post = reliability_posterior(
        labels, setup.classes, log_odds_weights(reliability, setup.classes), shrink
    )
    out: np.ndarray = post[np.arange(labels.shape[0]), answers]
    return out


def sweep(setup: Setup, grid: list[float], seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    rows = []
    for c in grid:
        row: dict[str, Any] = {"correlation": c}
        for stratum, present in (("present", True), ("absent", False)):
            labels = simulate(setup, c, present, rng)
            mv, mp = majority_vote(labels, setup.classes)
            cw, cp = consensus_weighted_vote(labels, setup.classes, setup.beta)
            for name, ans, probs in (("majority", mv, mp), ("consensus", cw, cp)):
                acc = float(np.mean(ans == 0))
                conf = float(np.mean(probs.max(axis=1)))
                row[f"{stratum}_{name}_accuracy"] = acc
                row[f"{stratum}_{name}_confidence"] = conf
                row[f"{stratum}_{name}_gap"] = abs(conf - acc)
            row[f"{stratum}_measured_correlation"] = _correctness_correlation(labels)
            calib = simulate(setup, c, present, rng)
            row[f"{stratum}_guarded_confidence"] = float(
                np.mean(guarded_confidence(setup, calib, labels, mv))
            )
            row[f"{stratum}_guarded_gap"] = abs(
                row[f"{stratum}_guarded_confidence"] - row[f"{stratum}_majority_accuracy"]
            )
        share = setup.absent_share
        for name in ("majority", "consensus"):
            acc = (1 - share) * row[f"present_{name}_accuracy"] + share * row[
                f"absent_{name}_accuracy"
            ]
            conf = (1 - share) * row[f"present_{name}_confidence"] + share * row[
                f"absent_{name}_confidence"
            ]
            row[f"pooled_{name}_accuracy"] = acc
            row[f"pooled_{name}_confidence"] = conf
            row[f"pooled_{name}_gap"] = abs(conf - acc)
        rows.append(row)
    return rows


def cliff(rows: list[dict[str, Any]], stratum: str) -> float | None:
    """First correlation where weighting's calibration gap on ``stratum`` exceeds majority's."""
    diff = [r[f"{stratum}_consensus_gap"] - r[f"{stratum}_majority_gap"] for r in rows]
    for i in range(1, len(rows)):
        if diff[i - 1] <= 0 < diff[i]:
            c0, c1 = rows[i - 1]["correlation"], rows[i]["correlation"]
            return float(c0 + (c1 - c0) * (-diff[i - 1]) / (diff[i] - diff[i - 1]))
    if diff and diff[0] > 0:
        return float(rows[0]["correlation"])
    return None


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| corr | absent: maj acc | maj conf | cons acc | cons conf | guard conf | maj gap | cons gap | guard gap "
        "| present: maj acc | maj conf | cons acc | cons conf | guard conf |"
    )
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        lines.append(
            f"| {r['correlation']:.2f} | {r['absent_majority_accuracy']:.3f} | {r['absent_majority_confidence']:.3f} "
            f"| {r['absent_consensus_accuracy']:.3f} | {r['absent_consensus_confidence']:.3f} "
            f"| {r['absent_guarded_confidence']:.3f} "
            f"| {r['absent_majority_gap']:.3f} | {r['absent_consensus_gap']:.3f} | {r['absent_guarded_gap']:.3f} "
            f"| {r['present_majority_accuracy']:.3f} | {r['present_majority_confidence']:.3f} "
            f"| {r['present_consensus_accuracy']:.3f} | {r['present_consensus_confidence']:.3f} "
            f"| {r['present_guarded_confidence']:.3f} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], where: float | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r["correlation"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, stratum in zip(axes, ("absent", "present"), strict=True):
        for name, color, width in (("majority", "tab:blue", 4.0), ("consensus", "tab:red", 1.5)):
            ax.plot(
                x,
                [r[f"{stratum}_{name}_accuracy"] for r in rows],
                color=color,
                lw=width,
                alpha=0.8,
                label=f"{name} accuracy",
            )
            ax.plot(
                x,
                [r[f"{stratum}_{name}_confidence"] for r in rows],
                color=color,
                ls="--",
                label=f"{name} confidence",
            )
        ax.plot(
            x,
            [r[f"{stratum}_guarded_confidence"] for r in rows],
            color="tab:green",
            ls="-.",
            label="guard confidence",
        )
        if where is not None:
            ax.axvline(where, color="grey", ls=":", label=f"cliff (evidence-present) {where:.2f}")
        ax.set_title(f"evidence-{stratum} stratum")
        ax.set_xlabel("pairwise answer correlation")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy / mean confidence")
    axes[0].legend(fontsize=8, loc="lower left")
    fig.suptitle("Consensus weighting vs unweighted majority under a shared latent cause")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=at_least(1), default=4000)
    parser.add_argument("--voters", type=at_least(2), default=5)
    parser.add_argument("--beta", type=non_negative, default=1.5)
    parser.add_argument("--seed", type=at_least(0), default=3)
    parser.add_argument(
        "--plot", type=output_file, default=REPO / "evaluation" / "guard_simulation.png"
    )
    parser.add_argument("--json", type=output_file, default=None)
    args = parser.parse_args(argv)
    setup = Setup(voters=args.voters, cases=args.cases, beta=args.beta)
    grid = [round(0.05 * i, 2) for i in range(21)]
    rows = sweep(setup, grid, args.seed)
    where = cliff(rows, "present")
    sys.stdout.write(
        f"{setup.voters} voters, {setup.classes} answers, {setup.cases} cases per stratum and point, beta {setup.beta:g}, "
        f"seed {args.seed}\n\n{table(rows)}\n\n"
    )
    for stratum in ("present", "absent", "pooled"):
        at = cliff(rows, stratum)
        sys.stdout.write(
            f"cliff, {stratum} stratum (weighting's calibration gap first exceeds majority's): "
            + (f"{at:.2f}" if at is not None else "none in [0, 1]")
            + "\n"
        )
    sys.stdout.write(
        "accuracy: consensus weighting and majority decide the same answer at every point "
        f"(max |delta| {max(abs(r['absent_consensus_accuracy'] - r['absent_majority_accuracy']) for r in rows):.3f})\n"
    )
    plot(rows, where, args.plot)
    sys.stdout.write(f"plot: {args.plot}\n")
    if args.json:
        args.json.write_text(json.dumps({"cliff": where, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
