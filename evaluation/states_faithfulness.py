"""Faithfulness check of the disagreement states (the disagreement-states paper) on real panels.

The paper validated its reading by showing that the four states order *human*
disagreement as DA < CA < DD < CD, that disagreement states (CD, DD) are separated from
agreement states (CA, DA) with Cohen's d = 0.80, and that flagging by state categories
beats flagging by reasoning-divergence magnitude alone (F1 0.548 vs 0.503). Its corpus
(Measuring Hate Speech with five value-profiled agents) is not available offline; this
script runs the same checks on two real substitutes:

* **LLMBar** (CoT, 6 LLM judges, gold labels): the target is whether the panel's
  plurality decision is *wrong* against gold.
* **VariErrNLI** (all splits, human annotators as agents, their explanations as
  reasoning traces): the target is the human-label entropy of the item.

Usage::

    python evaluation/states_faithfulness.py [--data DIR] [--similarity minilm|tfidf]
                                             [--theta-a 0.8] [--quantile 0.5]

Choices (the paper is silent on all of them):

* theta_s is calibrated per corpus with :func:`dissensus.states.theta_fit.calibrate`'s
  rule: the ``--quantile`` (default 0.5, the median) of the per-panel mean reasoning
  similarity of that corpus; theta_a is 0.8 (the library default: with 6 judges, at least
  5 of the voters agree; with 4 annotators, unanimity).
* Wrongness of a panel: 0 if the unique plurality decision equals gold, 1 if it differs;
  a plurality *tie* scores 0.5 (the expected error of a fair coin between the tied
  labels) when gold is among them. An item is *majority-wrong* when its wrongness is at
  least 0.5: the vote does not settle on gold without a coin flip.
* Cohen's d uses the pooled standard deviation (n - 1 denominators); its 95% interval is
  a percentile bootstrap over items (2000 resamples, seed 0).
* Flagging majority-wrong items. State rules flag every item in a set of states:
  ``CD`` alone (the escalation state), ``CD+DD`` (every disagreement state, which equals
  flagging by the agreement share alone), and the best set of states by F1 (chosen
  in-sample, so optimistic). The similarity-magnitude-only baseline flags the items with
  the *lowest* mean reasoning similarity: (a) as many items as the state rule it is
  compared with (same budget), and (b) the best cut-off by F1 (chosen in-sample, equally
  optimistic). "Flag everything" is excluded from both searches (no proper state set;
  at most as many items as the largest proper state set) and printed as a reference row,
  because with a base rate near one half it already scores F1 of about 0.66. The headline
  is the same-budget comparison of CD+DD against the lowest-similarity items.
* Order sensitivity (extra, LLMBar ``Swap_CoT``): states are read on the original-order
  traces of that run (its own median theta_s); per state, the share of voting judges
  whose verdict changes when only the order of the two outputs is swapped. The paper reads
  DD as an unstable interpretation; this measures instability directly.
* Human-label entropy (VariErrNLI): Shannon entropy in bits of the distribution of every
  label given (an annotator with two labels counts for both); the soft-label column is
  the mean binary entropy of the three ``soft_label`` probabilities.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import fraction, missing_data, no_data

from dissensus.convert import Skipped, iter_llmbar_panels, iter_varierrnli_panels
from dissensus.signals import recorded_second_answers
from dissensus.states.reading import Reading, Thresholds, read_from_matrix, read_panels
from dissensus.states.similarity import SimilarityBackend, get_backend
from dissensus.types import Panel, gold_label

REPO = Path(__file__).resolve().parent.parent
ORDER = ("CA", "DA", "CD", "DD")
PAPER_ORDER = ("DA", "CA", "DD", "CD")
BOOTSTRAP = 2000


# ----------------------------------------------------------------------------- reading


@dataclass
class Corpus:
    name: str
    panels: list[Panel]
    readings: list[Reading]
    theta_s: float
    skipped: int


def read_corpus(
    name: str,
    panels: list[Panel],
    backend: SimilarityBackend,
    *,
    quantile: float,
    theta_a: float,
    skipped: int,
) -> Corpus:
    """Read every panel once, calibrate theta_s at ``quantile``, then assign states."""
    probe = read_panels(panels, backend, Thresholds(theta_s=0.0, theta_a=theta_a))
    # Same rule as dissensus.states.theta_fit (linear-interpolated quantile of the
    # per-panel mean similarity), applied to the matrices already computed.
    theta_s = float(np.quantile([r.mean_similarity for r in probe], quantile))
    thresholds = Thresholds(theta_s=theta_s, theta_a=theta_a)
    readings = [
        read_from_matrix(p, r.matrix, r.model, thresholds)
        for p, r in zip(panels, probe, strict=True)
    ]
    return Corpus(name, panels, readings, theta_s, skipped)


# ----------------------------------------------------------------------------- statistics


def cohens_d(a: Sequence[float], b: Sequence[float]) -> float:
    """Cohen's d of ``a`` over ``b`` with the pooled standard deviation."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(x) < 2 or len(y) < 2:
        return math.nan
    pooled = ((len(x) - 1) * x.var(ddof=1) + (len(y) - 1) * y.var(ddof=1)) / (len(x) + len(y) - 2)
    return float((x.mean() - y.mean()) / math.sqrt(pooled)) if pooled > 0 else math.nan


def bootstrap_d(values: np.ndarray, group: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of Cohen's d (``group`` True vs False), resampling items."""
    rng = np.random.default_rng(seed)
    n = len(values)
    ds = []
    for _ in range(BOOTSTRAP):
        idx = rng.integers(0, n, n)
        d = cohens_d(values[idx][group[idx]], values[idx][~group[idx]])
        if not math.isnan(d):
            ds.append(d)
    lo, hi = np.percentile(ds, [2.5, 97.5])
    return float(lo), float(hi)


def prf(flag: np.ndarray, target: np.ndarray) -> tuple[float, float, float]:
    tp = int(np.sum(flag & target))
    precision = tp / int(flag.sum()) if flag.any() else 0.0
    recall = tp / int(target.sum()) if target.any() else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def lowest_similarity(similarity: np.ndarray, k: int) -> np.ndarray:
    """Flag the ``k`` items of lowest similarity (ties broken by item order, stably)."""
    flag = np.zeros(len(similarity), dtype=bool)
    flag[np.argsort(similarity, kind="stable")[:k]] = True
    return flag


def best_cutoff(
    similarity: np.ndarray, target: np.ndarray, max_flagged: int
) -> tuple[int, tuple[float, float, float]]:
    """Best cut-off by F1 flagging at most ``max_flagged`` lowest-similarity items."""
    best = (0, (0.0, 0.0, 0.0))
    for k in range(1, max_flagged + 1):
        scores = prf(lowest_similarity(similarity, k), target)
        if scores[2] > best[1][2]:
            best = (k, scores)
    return best


def best_state_set(
    states: np.ndarray, target: np.ndarray
) -> tuple[tuple[str, ...], tuple[float, float, float]]:
    """Best proper subset of states by F1 (all four states = flag everything, excluded)."""
    best: tuple[tuple[str, ...], tuple[float, float, float]] = ((), (0.0, 0.0, 0.0))
    for size in range(1, len(ORDER)):
        for subset in combinations(ORDER, size):
            scores = prf(np.isin(states, subset), target)
            if scores[2] > best[1][2]:
                best = (subset, scores)
    return best


def ordering(means: dict[str, float]) -> str:
    present = sorted((s for s in ORDER if not math.isnan(means[s])), key=lambda s: (means[s], s))
    return " < ".join(present)


# ----------------------------------------------------------------------------- printing


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "n/a" if math.isnan(v) else f"{v:.3f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def mean_or_nan(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else math.nan


# ----------------------------------------------------------------------------- LLMBar


def wrongness(reading: Reading, gold: str) -> float:
    if reading.tie:
        return 0.5 if gold in reading.tie else 1.0
    if reading.decision is None:
        return 0.5
    return 0.0 if reading.decision == gold else 1.0


def report_llmbar(corpus: Corpus, out: Callable[[str], None]) -> None:
    states = np.array([r.state.value for r in corpus.readings])
    wrong = np.array(
        [
            wrongness(r, gold_label(p.meta))
            for r, p in zip(corpus.readings, corpus.panels, strict=True)
        ]
    )
    target = wrong >= 0.5
    similarity = np.array([r.mean_similarity for r in corpus.readings])
    ties = np.array([bool(r.tie) for r in corpus.readings])
    adversarial = np.array([str(p.meta["subset"]).startswith("Adversarial") for p in corpus.panels])
    n = len(states)
    model = corpus.readings[0].model

    out(
        f"## LLMBar (CoT, 6 judges): {n} panels, {int(target.sum())} majority-wrong ({target.mean():.3f})"
    )
    out("")
    out(
        f"similarity model {model}; theta_s = {corpus.theta_s:.4f} (calibrated: median of the corpus' "
        f"per-panel mean similarity); theta_a = {corpus.readings[0].thresholds.theta_a}; "
        f"skipped items: {corpus.skipped}"
    )
    out("")
    rows = []
    means: dict[str, float] = {}
    for s in ORDER:
        m = states == s
        means[s] = mean_or_nan(wrong[m])
        rows.append(
            [
                s,
                int(m.sum()),
                float(m.mean()),
                int((m & ties).sum()),
                means[s],
                mean_or_nan(wrong[m & ~adversarial]),
                int((m & ~adversarial).sum()),
                mean_or_nan(wrong[m & adversarial]),
                int((m & adversarial).sum()),
                mean_or_nan(similarity[m]),
            ]
        )
    out(
        table(
            [
                "state",
                "n",
                "share",
                "ties",
                "wrong",
                "wrong Natural",
                "n Natural",
                "wrong Adversarial",
                "n Adversarial",
                "mean sim",
            ],
            rows,
        )
    )
    out("")
    out(
        f"ordering by wrong share: {ordering(means)}   (disagreement-states paper, human disagreement: {' < '.join(PAPER_ORDER)})"
    )
    disagree = np.isin(states, ("CD", "DD"))
    d = cohens_d(wrong[disagree], wrong[~disagree])
    lo, hi = bootstrap_d(wrong, disagree)
    out(
        f"Cohen's d of wrongness, disagreement (CD+DD, n={int(disagree.sum())}) vs agreement "
        f"(CA+DA, n={int((~disagree).sum())}): {d:.3f} (95% bootstrap CI {lo:.3f} to {hi:.3f}; disagreement-states paper: 0.80)"
    )
    for label, group in (("Natural", ~adversarial), ("Adversarial", adversarial)):
        dg = cohens_d(wrong[group & disagree], wrong[group & ~disagree])
        out(
            f"  within {label} (n={int(group.sum())}, majority-wrong {target[group].mean():.3f}): "
            f"Cohen's d {dg:.3f}; wrong share agreement {mean_or_nan(wrong[group & ~disagree]):.3f}, "
            f"disagreement {mean_or_nan(wrong[group & disagree]):.3f}"
        )
    out("")

    out("Flagging majority-wrong items (precision / recall / F1):")
    out("")
    frows: list[list[Any]] = []
    for label, subset in (("CD", ("CD",)), ("CD+DD (= agreement share < theta_a)", ("CD", "DD"))):
        flag = np.isin(states, subset)
        frows.append([f"states {label}", int(flag.sum()), *prf(flag, target)])
        base = lowest_similarity(similarity, int(flag.sum()))
        frows.append(
            [
                f"lowest similarity, same budget ({int(flag.sum())})",
                int(base.sum()),
                *prf(base, target),
            ]
        )
    best_set, best_scores = best_state_set(states, target)
    best_flag = np.isin(states, best_set)
    frows.append(
        [f"best state set {'+'.join(best_set)} (in-sample)", int(best_flag.sum()), *best_scores]
    )
    # Same freedom for both: at most as many items as the largest proper state set can flag.
    k, cut_scores = best_cutoff(
        similarity, target, n - int(np.min([np.sum(states == s) for s in ORDER]))
    )
    cutoff = float(np.sort(similarity, kind="stable")[k - 1]) if k else math.nan
    frows.append([f"best similarity cut-off, mean sim <= {cutoff:.4f} (in-sample)", k, *cut_scores])
    frows.append(["flag everything", n, *prf(np.ones(n, dtype=bool), target)])
    out(table(["flagger", "flagged", "precision", "recall", "F1"], frows))
    out("")
    flag = np.isin(states, ("CD", "DD"))
    same = lowest_similarity(similarity, int(flag.sum()))
    out(
        f"headline (same budget): states CD+DD F1 {prf(flag, target)[2]:.3f} vs lowest similarity "
        f"F1 {prf(same, target)[2]:.3f}; in-sample best: state set F1 {best_scores[2]:.3f} vs similarity "
        f"cut-off F1 {cut_scores[2]:.3f}   (disagreement-states paper on its task: 0.548 vs 0.503)"
    )
    out("")


def report_swap(corpus: Corpus, out: Callable[[str], None]) -> None:
    """Order sensitivity per state: the recorded re-ask with the two outputs swapped."""
    states = np.array([r.state.value for r in corpus.readings])
    flips = []
    for panel in corpus.panels:
        again = recorded_second_answers(panel)
        pairs = [
            (o.decision, again[o.agent].decision)
            for o in panel.outputs
            if o.decision is not None and o.agent in again and again[o.agent].decision is not None
        ]
        flips.append(sum(a != b for a, b in pairs) / len(pairs) if pairs else math.nan)
    flip = np.array(flips)
    out(
        f"## LLMBar Swap_CoT: order sensitivity per state ({len(states)} panels, states read on the original-order traces)"
    )
    out("")
    out(
        f"theta_s = {corpus.theta_s:.4f} (median of this corpus); a flip is a judge whose verdict changes when "
        "only the presentation order of the two outputs changes"
    )
    out("")
    rows = []
    for s in ORDER:
        m = (states == s) & ~np.isnan(flip)
        rows.append(
            [
                s,
                int((states == s).sum()),
                mean_or_nan(flip[m]),
                float(np.mean(flip[m] > 0)) if m.any() else math.nan,
            ]
        )
    out(table(["state", "n", "share of verdicts flipped", "panels with any flip"], rows))
    disagree = np.isin(states, ("CD", "DD"))
    ok = ~np.isnan(flip)
    d = cohens_d(flip[ok & disagree], flip[ok & ~disagree])
    out("")
    out(f"Cohen's d of flip share, disagreement vs agreement states: {d:.3f}")
    out("")


# ----------------------------------------------------------------------------- VariErrNLI


def label_entropy(panel: Panel) -> float:
    counts = Counter({k: int(v) for k, v in dict(panel.meta["label_counts"]).items()})
    total = sum(counts.values())
    return -sum((c / total) * math.log2(c / total) for c in counts.values() if c)


def soft_entropy(panel: Panel) -> float:
    soft = panel.meta.get("soft_label") or {}
    values = []
    for probs in soft.values():
        p = float(probs.get("1", 0.0))
        values.append(0.0 if p in (0.0, 1.0) else -(p * math.log2(p) + (1 - p) * math.log2(1 - p)))
    return float(np.mean(values)) if values else math.nan


def report_varierrnli(corpus: Corpus, files: list[str], out: Callable[[str], None]) -> None:
    states = np.array([r.state.value for r in corpus.readings])
    entropy = np.array([label_entropy(p) for p in corpus.panels])
    soft = np.array([soft_entropy(p) for p in corpus.panels])
    similarity = np.array([r.mean_similarity for r in corpus.readings])
    n = len(states)
    out(f"## VariErrNLI ({', '.join(files)}): {n} panels of 2-4 annotators")
    out("")
    out(
        f"similarity model {corpus.readings[0].model}; theta_s = {corpus.theta_s:.4f} (calibrated: median of "
        f"this corpus' per-panel mean similarity); theta_a = {corpus.readings[0].thresholds.theta_a}; "
        f"skipped items (fewer than two annotators): {corpus.skipped}"
    )
    out("")
    rows = []
    means: dict[str, float] = {}
    for s in ORDER:
        m = states == s
        means[s] = mean_or_nan(entropy[m])
        rows.append(
            [
                s,
                int(m.sum()),
                float(m.mean()),
                means[s],
                mean_or_nan(soft[m]),
                mean_or_nan(similarity[m]),
            ]
        )
    out(
        table(
            ["state", "n", "share", "label entropy (bits)", "soft-label entropy", "mean sim"], rows
        )
    )
    out("")
    out(
        f"ordering by label entropy: {ordering(means)}   (disagreement-states paper: {' < '.join(PAPER_ORDER)})"
    )
    disagree = np.isin(states, ("CD", "DD"))
    d = cohens_d(entropy[disagree], entropy[~disagree])
    lo, hi = bootstrap_d(entropy, disagree)
    out(
        f"Cohen's d of label entropy, disagreement (n={int(disagree.sum())}) vs agreement "
        f"(n={int((~disagree).sum())}): {d:.3f} (95% bootstrap CI {lo:.3f} to {hi:.3f})"
    )
    for a, b in (("CD", "DD"), ("CA", "DA")):
        d_ab = cohens_d(entropy[states == a], entropy[states == b])
        out(f"Cohen's d of label entropy, {a} vs {b}: {d_ab:.3f}")
    out("")


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--data",
        type=Path,
        default=REPO.parent / "shared" / "data",
        help="data directory (llmbar/, varierrnli/)",
    )
    parser.add_argument(
        "--similarity",
        default="minilm",
        choices=["tfidf", "static", "minilm"],
        help="similarity backend: minilm (default) or tfidf",
    )
    parser.add_argument(
        "--theta-a", type=fraction, default=0.8, help="conclusion-agreement threshold (default 0.8)"
    )
    parser.add_argument(
        "--quantile",
        type=fraction,
        default=0.5,
        help="theta_s = this quantile of the corpus (default 0.5)",
    )
    parser.add_argument(
        "--no-swap", action="store_true", help="skip the Swap_CoT order-sensitivity table"
    )
    args = parser.parse_args(argv)

    llmbar = args.data / "llmbar"
    folder = args.data / "varierrnli"
    files = (
        sorted(p for p in folder.glob("*.json") if "annotators_meta" not in p.name)
        if folder.is_dir()
        else []
    )
    if not llmbar.is_dir() and not files:  # every section would be skipped: nothing measured
        if not folder.is_dir():
            missing_data([llmbar, folder])
        no_data(f"{llmbar} is not a directory and {folder} holds no VariErrNLI files")
    backend = get_backend(args.similarity)
    out = print
    out(
        f"command: python evaluation/states_faithfulness.py --similarity {args.similarity} --theta-a {args.theta_a} --quantile {args.quantile}"
    )
    out("")

    if llmbar.is_dir():
        skipped: list[Skipped] = []
        panels = list(iter_llmbar_panels(llmbar, "CoT", on_skip=skipped.append))
        corpus = read_corpus(
            "llmbar",
            panels,
            backend,
            quantile=args.quantile,
            theta_a=args.theta_a,
            skipped=len(skipped),
        )
        report_llmbar(corpus, out)
        if not args.no_swap:
            skipped = []
            swap_panels = list(iter_llmbar_panels(llmbar, "Swap_CoT", on_skip=skipped.append))
            swap = read_corpus(
                "llmbar-swap",
                swap_panels,
                backend,
                quantile=args.quantile,
                theta_a=args.theta_a,
                skipped=len(skipped),
            )
            report_swap(swap, out)
    else:
        out(f"(no {llmbar}: LLMBar section skipped)")

    if files:
        skipped = []
        panels = [p for f in files for p in iter_varierrnli_panels(f, on_skip=skipped.append)]
        corpus = read_corpus(
            "varierrnli",
            panels,
            backend,
            quantile=args.quantile,
            theta_a=args.theta_a,
            skipped=len(skipped),
        )
        report_varierrnli(corpus, [f.name for f in files], out)
    else:
        out(f"(no VariErrNLI files in {folder}: section skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
