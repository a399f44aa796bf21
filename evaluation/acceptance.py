"""Learned acceptance: does the guarantee hold, how much does it accept, and against what?

Three data sets, features computed once per case (similarity backend ``--similarity``,
default ``tfidf`` for speed):

* **LLMBar** pooled (``Swap_CoT``: 6 judges, answers in both presentation orders;
  gold = the benchmark's label; strata = subset);
* **ZeroEval GSM8K** (9 solver models, open numeric answers, no re-ask; gold = the
  reference answer; target precision 0.95, the others 0.9);
* **VariErrNLI** (4 human annotators; gold = the label most often given by the
  annotators, every label of a multi-label annotator counted; ties skipped).

Reported:

1. **Guarantee validity**: over ``--splits`` random calibration/test halves per data
   set, the share of splits whose realised test precision is ``>= target`` (a split
   that accepts nothing counts as a success: it commits no error), with mean coverage
   and mean precision, for learned acceptance and the baselines. It must be
   ``>= 1 - delta``. Beside it, *success (every case)*: the same share with the
   precision measured over every case of the data set (the calibration half as the
   calibration scored it, out-of-fold; the test half as deployed). The guarantee is
   about the population the cases are drawn from; on a finite data set the test half
   is the complement of the calibration half, so a calibration half that happens to
   hold few errors leaves a test half with more (their errors add up to a fixed
   total), which makes the test-half figure harsher than the guarantee when precision
   sits near the target. The whole data set is this evaluation's best stand-in for
   the population.
2. **Distribution shift**: leave-one-subset-out on LLMBar (calibrate on two subsets,
   test on the third), with and without ``--strata subset``.
3. **Reasoning as evidence**: the same with the reasoning-similarity features (each
   agent's reasoning vs its own re-ask and vs the question) added.

*Learned* is the learned model alone (``calibrate(..., family="learned")``); *product
rule* is what ``calibrate-acceptance`` runs: the family the shipped rule chooses (the
learned model against vote counting over both orders, weighted Bonferroni), applied as
``apply_acceptance`` applies it.

Baselines, all with the same fixed-sequence Clopper–Pearson threshold on the
calibration cases: *majority* (plurality answer, score = its vote share), *guard*
(the guard's answer, score = its posterior), the *plain stacker* (the same logistic
model restricted to the judges' answers and order stability, cross-fitted), and
today's *trust regions* (``dissensus.pipeline.trust_regions`` with the shipped marker
lexicon; no threshold, its own rule).

Usage::

    .venv/bin/python evaluation/acceptance.py [--data ../shared/data] [--splits 200] [--similarity tfidf]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import at_least, parse_names, require_data

from dissensus.acceptance import (
    AcceptanceFile,
    Candidate,
    CrossFit,
    FeatureSettings,
    apply_acceptance,
    calibrate,
    crossfit,
    model_for,
    select_threshold,
)
from dissensus.acceptance.calibrate import uncovered_stratum
from dissensus.acceptance.families import family_scores
from dissensus.acceptance.fit import design
from dissensus.acceptance.prepare import panel_case_key, prepare_cases
from dissensus.convert.llmbar import iter_llmbar_panels
from dissensus.convert.varierrnli import iter_varierrnli_panels
from dissensus.convert.zeroeval import iter_zeroeval_panels
from dissensus.guard import guard_votes, panel_votes
from dissensus.pipeline.trust_regions import build_calibration, calibrated_accept, trust_regions
from dissensus.signals import (
    AgentSignal,
    MarkerLexicon,
    agent_signals,
    recorded_second_answers,
)
from dissensus.states import get_backend
from dissensus.types import Panel, gold_label

REPO = Path(__file__).resolve().parent.parent
TARGET, DELTA, MIN_ACCEPTED = 0.9, 0.1, 30
SETS = ("llmbar", "zeroeval", "varierrnli")
DATA_DIRS = {"llmbar": "llmbar", "zeroeval": "zeroeval-gsm", "varierrnli": "varierrnli"}
"""The folder of each data set under ``--data``."""
# The lexicon today's trust regions shipped with (examples/llmbar-policy.yaml before learned acceptance).
OLD_LEXICON = MarkerLexicon(
    concession=("however", "both", "also", "more detailed", "more comprehensive"),
    grounding=("instruction", "instructions"),
)


@dataclass
class DataSet:
    """One data set with everything precomputed per case."""

    name: str
    panels: list[Panel]
    golds: list[str]
    strata: list[str]
    cases: list[list[Candidate]]
    """Candidate rows with the reasoning features."""
    target: float = TARGET


def _strip(cases: list[list[Candidate]], keep: Callable[[str], bool]) -> list[list[Candidate]]:
    return [
        [
            Candidate(label=c.label, features={k: v for k, v in c.features.items() if keep(k)})
            for c in cs
        ]
        for cs in cases
    ]


def no_reasoning(cases: list[list[Candidate]]) -> list[list[Candidate]]:
    return _strip(cases, lambda k: not k.startswith("cand.reasoning_"))


def stacker(cases: list[list[Candidate]]) -> list[list[Candidate]]:
    """The plain stacker: each judge's answer and order stability only."""
    return _strip(cases, lambda k: k.startswith("agent.") or k.startswith("option="))


def _varierr_gold(p: Panel) -> str | None:
    counts = p.meta.get("label_counts") or {}
    if not counts:
        return None
    top = max(counts.values())
    best = [k for k, v in counts.items() if v == top]
    return str(best[0]) if len(best) == 1 else None


def load(
    data: Path, which: str, backend: object, limit: int | None = None, reasoning: bool = True
) -> DataSet:
    settings = FeatureSettings(similarity=getattr(backend, "name", None), reasoning=reasoning)
    target = TARGET
    if which == "llmbar":
        panels = list(iter_llmbar_panels(data / "llmbar", "Swap_CoT", on_skip=lambda s: None))
        golds = [gold_label(p.meta) for p in panels]
        strata = [str(p.meta["subset"]) for p in panels]
    elif which == "zeroeval":
        panels = list(
            iter_zeroeval_panels(data / "zeroeval-gsm", on_skip=lambda s: None, limit=limit)
        )
        golds = [gold_label(p.meta) for p in panels]
        strata = ["all"] * len(panels)
        target = 0.95
    elif which == "varierrnli":
        raw = []
        for part in ("train", "dev", "test"):
            raw += list(
                iter_varierrnli_panels(
                    data / "varierrnli" / f"VariErrNLI_{part}.json", on_skip=lambda s: None
                )
            )
        keep = [(p, g) for p in raw if (g := _varierr_gold(p)) is not None]
        panels = [p for p, _ in keep]
        golds = [g for _, g in keep]
        strata = ["all"] * len(panels)
    else:
        raise ValueError(f"unknown data set {which!r} (known: {', '.join(SETS)})")
    if limit:
        panels, golds, strata = panels[:limit], golds[:limit], strata[:limit]
    cases = prepare_cases(panels, settings=settings, backend=backend)
    return DataSet(which, panels, golds, strata, cases, target)


# ---- methods: each returns (accepted, decision) for the test cases, then for the ----
# ---- calibration cases as the calibration scored them (out-of-fold, for learned) ----

Result = list[tuple[bool, str | None]]
Outcome = tuple[Result, Result]
Method = Callable[[DataSet, Sequence[int], Sequence[int], bool], Outcome]


_FITS: dict[tuple[int, tuple[int, ...], bool], CrossFit] = {}
"""The last cross-fit per case list: the learned row and the product-rule row share it."""


def _crossfit(
    cases: list[list[Candidate]], ds: DataSet, cal: Sequence[int], strata: bool
) -> CrossFit:
    key = (id(cases), tuple(cal), strata)
    if key not in _FITS:
        _FITS.clear()
        groups = [ds.strata[i] for i in cal] if strata else None
        _FITS[key] = crossfit([cases[i] for i in cal], [ds.golds[i] for i in cal], groups=groups)
    return _FITS[key]


def _learned_test(
    acc: AcceptanceFile,
    ds: DataSet,
    test_cases: list[list[Candidate]],
    test: Sequence[int],
    strata: bool,
) -> Result:
    """apply_acceptance for every test case of a learned-family file: the fold model
    model_for() picks, vectorised per fold."""
    fold = [
        model_for(
            acc,
            test_cases[k],
            ds.strata[i] if strata else None,
            key=panel_case_key(ds.panels[i]),
        )
        for k, i in enumerate(test)
    ]
    best: dict[int, tuple[float, str]] = {}
    for f, model in enumerate(acc.models):
        ks = [k for k in range(len(test)) if fold[k] == f]
        sub = [test_cases[k] for k in ks]
        x, _, owner = design(sub, [""] * len(sub), model.features)
        p = model.predict_matrix(x) if len(owner) else np.zeros(0)
        for row, prob in enumerate(p.tolist()):
            k = ks[int(owner[row])]
            if k not in best or prob > best[k][0]:
                first = int(np.flatnonzero(owner == owner[row])[0])
                best[k] = (prob, sub[int(owner[row])][row - first].label)
    out: Result = []
    for k, i in enumerate(test):
        prob, label = best.get(k, (0.0, ""))
        ok = acc.threshold is not None and k in best and prob >= acc.threshold
        # A stratum the file was not calibrated on is accepted nowhere (apply_acceptance).
        ok = ok and not (strata and uncovered_stratum(acc, ds.strata[i]))
        out.append((ok, label if k in best else None))
    return out


def learned(cases: list[list[Candidate]], *, product: bool = False) -> Method:
    """The learned model alone (``family="learned"``: what the row is named), or with
    ``product`` the shipped rule: the score family ``calibrate`` chooses (the learned model
    against vote counting, weighted Bonferroni), applied as ``apply_acceptance`` applies it."""

    def run(ds: DataSet, cal: Sequence[int], test: Sequence[int], strata: bool) -> Outcome:
        groups = [ds.strata[i] for i in cal] if strata else None
        cal_cases, cal_golds = [cases[i] for i in cal], [ds.golds[i] for i in cal]
        # One cross-fit: calibrate() chooses the threshold on its out-of-fold scores, which
        # are also how the calibration half is counted in "success (every case)".
        fitted = _crossfit(cases, ds, cal, strata)
        acc = calibrate(
            cal_cases,
            cal_golds,
            target=ds.target,
            delta=DELTA,
            min_accepted=MIN_ACCEPTED,
            strata=groups,
            strata_field="subset" if strata else None,
            fitted=fitted,
            family=None if product else "learned",
        )
        t = acc.threshold
        test_cases = [cases[i] for i in test]
        if acc.family == "learned":
            cal_scores = fitted.scores
            out = _learned_test(acc, ds, test_cases, test, strata)
        else:  # a vote count: no fit, so its calibration scores are out-of-sample already
            cal_scores = family_scores(acc.family, cal_cases)
            out = []
            for k, i in enumerate(test):
                v = apply_acceptance(
                    acc,
                    test_cases[k],
                    stratum=ds.strata[i] if strata else None,
                    key=panel_case_key(ds.panels[i]),
                )
                out.append((v.accepted, v.decision))
        cal_out: Result = [(t is not None and d is not None and s >= t, d) for d, s in cal_scores]
        return out, cal_out

    return run


def _scored(
    score_of: Callable[[Panel], tuple[str | None, float]],
) -> Method:
    cache: dict[int, tuple[str | None, float]] = {}

    def get(ds: DataSet, i: int) -> tuple[str | None, float]:
        if i not in cache:
            cache[i] = score_of(ds.panels[i])
        return cache[i]

    def run(ds: DataSet, cal: Sequence[int], test: Sequence[int], strata: bool) -> Outcome:
        scored = [get(ds, i) for i in cal]
        choice = select_threshold(
            [s for _, s in scored],
            [d is not None and d == ds.golds[i] for (d, _), i in zip(scored, cal, strict=True)],
            target=ds.target,
            delta=DELTA,
            min_accepted=MIN_ACCEPTED,
            strata=[ds.strata[i] for i in cal] if strata else None,
        )
        t = choice.threshold
        out: Result = []
        for i in [*test, *cal]:
            d, s = get(ds, i)
            out.append((t is not None and d is not None and s >= t, d))
        return out[: len(test)], out[len(test) :]

    return run


def _majority(p: Panel) -> tuple[str | None, float]:
    counts: dict[str, int] = {}
    for o in p.outputs:
        if o.decision is not None:
            counts[o.decision] = counts.get(o.decision, 0) + 1
    if not counts:
        return None, 0.0
    top = max(counts.values())
    best = sorted(k for k, v in counts.items() if v == top)
    return best[0], top / sum(counts.values()) if len(best) == 1 else 0.0


def _guard(p: Panel) -> tuple[str | None, float]:
    votes = panel_votes(p)
    if len(votes) < 2:
        return None, 0.0
    g = guard_votes(votes, None, case_id=p.id)
    return g.answer, g.confidence


_SIGNALS: dict[str, list[list[AgentSignal]]] = {}


def trust(ds: DataSet, cal: Sequence[int], test: Sequence[int], strata: bool) -> Outcome:
    if ds.name not in _SIGNALS:
        _SIGNALS[ds.name] = [
            agent_signals(p, recorded_second_answers(p), OLD_LEXICON) for p in ds.panels
        ]
    signals = _SIGNALS[ds.name]
    calfile = build_calibration(
        [(signals[i], ds.strata[i] if strata else "all", ds.golds[i]) for i in cal],
        lexicon=OLD_LEXICON,
    )
    regions = trust_regions(calfile, target=ds.target, min_support=10)
    out: Result = []
    for i in [*test, *cal]:  # calibration cases in-sample: trust regions are not cross-fitted
        a = calibrated_accept(
            signals[i], regions, veto_precision=0.75, min_families=3, fallback_max_score=0
        )
        out.append((a.accepted, a.decision))
    return out[: len(test)], out[len(test) :]


def methods(
    ds: DataSet,
) -> dict[str, Method]:
    with_reasoning = any(
        k.startswith("cand.reasoning_") for cs in ds.cases for c in cs for k in c.features
    )
    plain = no_reasoning(ds.cases)
    return {
        "learned": learned(plain),
        "product rule": learned(plain, product=True),
        **({"learned + reasoning": learned(ds.cases)} if with_reasoning else {}),
        "plain stacker": learned(stacker(ds.cases)),
        "majority vote share": _scored(_majority),
        "guard posterior": _scored(_guard),
        "trust regions (today)": trust,
    }


def score(res: Result, golds: Sequence[str]) -> tuple[int, int, int]:
    acc = [(d, g) for (a, d), g in zip(res, golds, strict=True) if a]
    return len(golds), len(acc), sum(d == g for d, g in acc)


def validity(
    ds: DataSet, splits: int, seed: int = 0
) -> dict[str, tuple[float, float, float, float, float]]:
    """name -> (success share on the test half, success share on every case, mean coverage,
    mean precision over splits with acceptances, share accepting nothing)."""
    rng = np.random.default_rng(seed)
    n = len(ds.panels)
    figures: dict[str, list[tuple[float, float | None, float | None]]] = {}
    ms = methods(ds)
    for _ in range(splits):
        perm = rng.permutation(n)
        cal, test = sorted(perm[: n // 2].tolist()), sorted(perm[n // 2 :].tolist())
        golds = [ds.golds[i] for i in test]
        for name, run in ms.items():
            on_test, on_cal = run(ds, cal, test, False)
            tot, acc, right = score(on_test, golds)
            _, acc_c, right_c = score(on_cal, [ds.golds[i] for i in cal])
            every = (right + right_c) / (acc + acc_c) if acc + acc_c else None
            figures.setdefault(name, []).append((acc / tot, right / acc if acc else None, every))
    out = {}
    for name, rows in figures.items():
        precs = [p for _, p, _ in rows if p is not None]
        success = float(np.mean([p is None or p >= ds.target for _, p, _ in rows]))
        success_all = float(np.mean([e is None or e >= ds.target for _, _, e in rows]))
        out[name] = (
            success,
            success_all,
            float(np.mean([c for c, _, _ in rows])),
            float(np.mean(precs)) if precs else float("nan"),
            float(np.mean([p is None for _, p, _ in rows])),
        )
    return out


def loso(ds: DataSet) -> dict[str, dict[str, tuple[int, int, int]]]:
    """name -> held-out subset -> (cases, accepted, right)."""
    out: dict[str, dict[str, tuple[int, int, int]]] = {}
    subsets = sorted(set(ds.strata))
    for name, run in methods(ds).items():
        for strata in (False, True):
            label = name + (" --strata" if strata else "")
            for held in subsets:
                cal = [i for i, s in enumerate(ds.strata) if s != held]
                test = [i for i, s in enumerate(ds.strata) if s == held]
                out.setdefault(label, {})[held] = score(
                    run(ds, cal, test, strata)[0], [ds.golds[i] for i in test]
                )
    return out


def fmt(n: int, acc: int, right: int) -> str:
    prec = f"{right / acc:.3f}" if acc else "  -  "
    return f"{prec} | {acc / n:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--splits", type=at_least(1), default=200)
    parser.add_argument("--similarity", default="tfidf", choices=["tfidf", "static", "minilm"])
    parser.add_argument("--sets", default=",".join(SETS), help=f"of {', '.join(SETS)}")
    parser.add_argument(
        "--limit", type=at_least(1), default=None, help="first N cases per data set (a quick check)"
    )
    parser.add_argument(
        "--no-reasoning",
        default="",
        help="data sets measured without the reasoning-feature variant",
    )
    args = parser.parse_args(argv)
    names = parse_names(args.sets, SETS, "--sets")
    skip = set(parse_names(args.no_reasoning, SETS, "--no-reasoning", empty=True))
    data = require_data(args.data, (DATA_DIRS[name] for name in names))
    # One BLAS thread: many small fits, where thread start-up costs more than it saves.
    threadpool_limits(1)
    backend = get_backend(args.similarity)
    t0 = time.time()
    sets = [load(data, name, backend, args.limit, reasoning=name not in skip) for name in names]
    print(
        f"features computed in {time.time() - t0:.0f}s (similarity {backend.name}); target precision "
        + ", ".join(f"{ds.name} {ds.target}" for ds in sets)
        + f"; delta {DELTA}, min accepted {MIN_ACCEPTED}"
    )
    print()
    print(f"Guarantee validity: {args.splits} random calibration/test halves per data set")
    print(
        "data set (cases)       | method                  | success | success (every case) | mean coverage | mean precision | accepts nothing"
    )
    for ds in sets:
        for name, (succ, every, cov, prec, none) in validity(ds, args.splits).items():
            print(
                f"{ds.name + f' ({len(ds.panels)})':<22} | {name:<23} | {succ:7.3f} | {every:20.3f} | {cov:13.3f} | {prec:14.3f} | {none:.3f}"
            )
    llmbar = next((ds for ds in sets if ds.name == "llmbar"), None)
    if llmbar is not None:
        print()
        print(
            "LLMBar leave-one-subset-out (calibrate on two subsets, test on the third): precision | coverage"
        )
        table = loso(llmbar)
        subsets = sorted(set(llmbar.strata))
        print(f"{'method':<33} | " + " | ".join(f"{s:<21}" for s in subsets) + " | pooled")
        for name, row in table.items():
            tot = [sum(x) for x in zip(*row.values(), strict=True)]
            print(
                f"{name:<33} | "
                + " | ".join(f"{fmt(*row[s]):<21}" for s in subsets)
                + f" | {fmt(*tot)}"
            )
    print(f"\n({time.time() - t0:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
