"""Reproduction B of the correlated-hallucination study on a second panel: ZeroEval GSM8K, open numeric answers.

Nine solver models (Llama-3 and Llama-3.1: family meta; Mistral-Nemo and Mixtral:
mistral; gemma-2: google; gpt-3.5-turbo: openai; Qwen2: alibaba; Phi-3.5: microsoft;
Yi-1.5: 01-ai) answered the 1,319 GSM8K test problems, read with
:func:`dissensus.convert.zeroeval.iter_zeroeval_panels` and
:func:`dissensus.guard.panel_votes`: one vote per model that gave a parseable number
(an output without one is an abstention, not a vote). The models retrieve nothing: every
vote is ``evidence_present = False`` from ``parametric:<family>``, so invariant 1 fails
on every case and the guard falls back (majority, or a verifier the calibration
measured), as on LLMBar.

**Open answers and the guard's posterior.** The guard's confidence is the one-coin
Dawid-Skene posterior: a vote of reliability ``r`` adds ``log(r (K - 1) / (1 - r))``
to its answer, ``K`` the number of possible answers, i.e. ``1 / (K - 1)`` is the chance
that a wrong vote lands on one given wrong answer. On a fixed label set (LLMBar: two)
``K`` is known. A GSM8K answer is any number, so ``K`` is not the number of labels: the
guard's own rule (the calibration's labels plus the answers voted) would make it the
count of every number seen on the calibration split (about 500), which says wrong
votes almost never coincide. They do: two wrong models often give the same wrong
number. The reduction used here keeps the guard's symmetric model and measures its one
structural parameter on the labelled calibration split, like the reliabilities:

* ``q`` = share of pairs of wrong votes on one calibration case (two models, both
  voting, both wrong) that give the same number, smoothed ``(same + 1) / (pairs + 2)``;
  for ``K - 1`` equally likely wrong answers ``q = 1 / (K - 1)``, so the symmetric
  model's ``K = 1 + 1 / q`` (rounded, at least 2). With unequal wrong answers this is
  their inverse Simpson number: the effective count of wrong answers.
* Per case, the answer space is the distinct numbers voted plus ``K - d`` options
  nobody voted for (``d`` distinct numbers voted; at least one: the truth may be a
  number nobody gave). The guard reads its answer space from the calibration's
  ``labels`` (:func:`dissensus.guard.confidence.answer_space`), so each case is decided
  by :func:`dissensus.guard.guard_votes` with the split's calibration whose ``labels``
  are those unvoted placeholders. Nothing else of the calibration is changed.

This is the method the claim is checked with (**guarded**). Shown beside it, not
chosen on the test parts: **guarded, per-case options** (the answer space is the
numbers voted plus one "any other number": ``K = d + 1``, the option set the votes
themselves offer) and **guarded, fixed labels** (the calibration as
:func:`~dissensus.guard.fit_reliability` returns it: ``K`` = every number of the
calibration split plus the answers voted).

Compared on every test part (no gold at decision time):

(i)   unweighted majority, confidence = vote share (ties to the smallest answer, as a
      string: the array API's rule);
(ii)  consensus weighting ``w = exp(beta * agreement)`` (beta 1.5), confidence = weight share;
(iii) the guarded aggregator and its two variants above.

Splits: ``--seeds`` random halves (seed ``s`` permutes the problems with
``numpy.random.default_rng(s)``; the first half calibrates, the second is tested), and
the two length shifts (problems ordered by question length, ties by position; the
shorter half calibrates and the longer is tested, and the reverse), the analogue of
LLMBar's leave-one-subset-out.

Target (LLMBar's claim, read for a panel with no adversarial subset): GSM8K has no
subset built to make the models fail together, but the whole panel errs together (mean
pairwise error correlation about 0.34, n_eff about 2.4 of 9, printed per split), so the
guarded aggregator's calibration gap ``|mean confidence - accuracy|`` must be <= 0.10
on **every** test part, and its accuracy no lower than majority's on every test part.

Usage::

    python evaluation/guard_zeroeval.py [--data DIR] [--seeds 10] [--beta 1.5] [--limit N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import at_least, non_negative, output_file, require_data
from _common import guard_row as _row

from dissensus.convert.zeroeval import iter_zeroeval_panels
from dissensus.guard import (
    GuardDecision,
    ReliabilityFit,
    consensus_weighted_vote,
    fit_reliability,
    guard_votes,
    majority_vote,
    panel_votes,
)
from dissensus.guard.encoding import encode_cases
from dissensus.types import VoteCase, gold_label

REPO = Path(__file__).resolve().parent.parent
GUARDED = "guarded"
PER_CASE = "guarded, per-case options"
FIXED = "guarded, fixed labels"
MAJORITY = "majority"
AGREE = 2 / 3
"""Plurality vote share at or above which a case is in the ``agree`` stratum."""


def load_cases(root: Path, limit: int | None = None) -> list[VoteCase]:
    """One vote case per problem with at least two votes (gold kept for scoring)."""
    cases = []
    for panel in iter_zeroeval_panels(root, on_skip=lambda s: None, limit=limit):
        votes = panel_votes(panel)
        if len(votes) < 2:
            continue
        cases.append(
            VoteCase(
                id=panel.id,
                votes=votes,
                gold=gold_label(panel.meta),
                meta={"length": len(str(panel.meta.get("question", "")))},
            )
        )
    return cases


def wrong_collision(cases: Sequence[VoteCase]) -> tuple[int, int, float, int]:
    """``(same, pairs, q, K)``: pairs of wrong votes on one case, how many coincide,
    the smoothed share ``q`` and the symmetric model's ``K = round(1 + 1 / q)``."""
    same = pairs = 0
    for c in cases:
        wrong = [v.answer for v in c.votes if v.answer != c.gold]
        for i in range(len(wrong)):
            for j in range(i + 1, len(wrong)):
                pairs += 1
                same += wrong[i] == wrong[j]
    q = (same + 1) / (pairs + 2)
    return same, pairs, q, max(2, round(1 + 1 / q))


def _with_labels(fit: ReliabilityFit, labels: list[str]) -> ReliabilityFit:
    return fit.model_copy(update={"labels": labels})


def guarded(
    cases: Sequence[VoteCase], fit: ReliabilityFit, beta: float, k: int | None
) -> list[GuardDecision]:
    """The guard on every case (gold withheld).

    ``k`` a number: the symmetric model with ``k`` answers (the voted ones plus unvoted
    placeholders, at least one); ``k = 0``: the numbers voted plus one "any other";
    ``None``: the calibration's own labels.
    """
    copies: dict[int, ReliabilityFit] = {}
    out = []
    for c in cases:
        if k is None:
            cal = fit
        else:
            d = len({v.answer for v in c.votes})
            others = max(k - d, 1) if k else 1
            if others not in copies:
                copies[others] = _with_labels(fit, [f"*other{i}" for i in range(others)])
            cal = copies[others]
        out.append(guard_votes(c.votes, cal, beta=beta, case_id=c.id))
    return out


def evaluate(
    name: str, cal_cases: list[VoteCase], test: list[VoteCase], beta: float
) -> dict[str, Any]:
    """Calibrate on ``cal_cases``, decide ``test`` without gold, score against gold."""
    fit = fit_reliability(cal_cases)
    same, pairs, q, k = wrong_collision(cal_cases)
    enc = encode_cases(test)
    n = len(enc.classes)
    mv, mp = majority_vote(enc.labels, n)
    cw, cp = consensus_weighted_vote(enc.labels, n, beta)
    blind = [c.model_copy(update={"gold": None}) for c in test]
    rows = [
        _row(MAJORITY, mp.max(axis=1), mv == enc.gold),
        _row(f"consensus(beta={beta:g})", cp.max(axis=1), cw == enc.gold),
    ]
    # Label-free strata: the plurality's vote share (every vote counted once).
    agree = mp.max(axis=1) >= AGREE - 1e-9
    masks = {"agree": agree, "contested": ~agree}
    strata: dict[str, list[dict[str, Any]]] = {
        stratum: [
            _row(MAJORITY, mp.max(axis=1)[m], (mv == enc.gold)[m]),
            _row(f"consensus(beta={beta:g})", cp.max(axis=1)[m], (cw == enc.gold)[m]),
        ]
        for stratum, m in masks.items()
    }
    main: list[GuardDecision] = []
    for label, kk in ((GUARDED, k), (PER_CASE, 0), (FIXED, None)):
        decisions = guarded(blind, fit, beta, kk)
        if label == GUARDED:
            main = decisions
        hit = np.array([d.answer == c.gold for d, c in zip(decisions, test, strict=True)])
        conf = np.array([d.confidence for d in decisions])
        rows.append(_row(label, conf, hit))
        for stratum, m in masks.items():
            strata[stratum].append(_row(label, conf[m], hit[m]))
    tied = np.array([d.tie for d in main])
    g_hit = np.array([d.answer == c.gold for d, c in zip(main, test, strict=True)])
    return {
        "split": name,
        "calibration_cases": len(cal_cases),
        "cases": len(test),
        "wrong_pairs": pairs,
        "wrong_pairs_same": same,
        "q": q,
        "k": k,
        "fixed_labels": len(fit.labels),
        "beta_star": fit.beta_star,
        "verifier": fit.verifier.agent if fit.verifier else None,
        "calibration_n_eff": fit.n_eff,
        "mean_error_correlation": fit.mean_error_correlation,
        "mean_n_eff": float(np.mean([d.n_eff for d in main])),
        "modes": dict(Counter(d.mode for d in main)),
        "refusals": dict(Counter(f"invariant {d.refusal.invariant}" for d in main if d.refusal)),
        "methods": rows,
        "strata": strata,
        "stratum_cases": {stratum: int(m.sum()) for stratum, m in masks.items()},
        "ties": int(tied.sum()),
        "ties_majority_right": int((mv == enc.gold)[tied].sum()),
        "ties_guarded_right": int(g_hit[tied].sum()),
    }


def random_halves(cases: list[VoteCase], seeds: int) -> list[tuple[str, list[int], list[int]]]:
    half = len(cases) // 2
    out = []
    for s in range(seeds):
        perm = np.random.default_rng(s).permutation(len(cases)).tolist()
        out.append((f"seed {s}", sorted(perm[:half]), sorted(perm[half:])))
    return out


def length_shifts(cases: list[VoteCase]) -> list[tuple[str, list[int], list[int]]]:
    lengths = [int(c.meta["length"]) for c in cases]
    order = sorted(range(len(cases)), key=lambda i: (lengths[i], i))
    short, long = sorted(order[: len(order) // 2]), sorted(order[len(order) // 2 :])
    return [("short -> long", short, long), ("long -> short", long, short)]


def _m(r: dict[str, Any], name: str) -> dict[str, Any]:
    return next(m for m in r["methods"] if m["method"] == name)


def _notes(r: dict[str, Any]) -> str:
    return (
        f"- {r['split']}: calibration {r['calibration_cases']} cases, test {r['cases']}; "
        f"wrong-vote pairs {r['wrong_pairs']}, same number {r['wrong_pairs_same']} "
        f"(q = {r['q']:.3f}, K = {r['k']}; fixed labels {r['fixed_labels']}); "
        f"beta* = {r['beta_star']}; verifier = {r['verifier']}; "
        f"mean error correlation = {r['mean_error_correlation']:.3f}; "
        f"panel n_eff (calibration) = {r['calibration_n_eff']:.2f}; "
        f"mean case n_eff = {r['mean_n_eff']:.2f}; modes = {r['modes']}; refusals = {r['refusals']}; "
        f"tied pluralities {r['ties']} (right: majority {r['ties_majority_right']}, "
        f"guarded {r['ties_guarded_right']})"
    )


def strata_table(rows: list[dict[str, Any]]) -> str:
    """Per label-free stratum, each method's figures (mean and range over the rows)."""
    names = [m["method"] for m in rows[0]["methods"]]
    many = len(rows) > 1
    lines = [
        "| stratum (plurality vote share) | test cases"
        + (
            ", mean | method | accuracy mean | mean confidence mean | gap mean (min-max) |"
            if many
            else " | method | accuracy | mean confidence | gap |"
        ),
        "|---|---|---|---|---|---|",
    ]
    for stratum, label in (("agree", ">= 2/3"), ("contested", "< 2/3")):
        n = np.mean([r["stratum_cases"][stratum] for r in rows])
        for name in names:
            ms = [next(m for m in r["strata"][stratum] if m["method"] == name) for r in rows]
            # A stratum no test case falls in (a small --limit) has no figures.
            ms = [m for m in ms if m["accuracy"] is not None]
            if not ms:
                lines.append(
                    f"| {stratum} ({label}) | {n:.{1 if many else 0}f} | {name} | - | - | - |"
                )
                continue
            acc = np.array([m["accuracy"] for m in ms])
            conf = np.array([m["confidence"] for m in ms])
            gap = np.array([m["gap"] for m in ms])
            spread = f" ({gap.min():.3f}-{gap.max():.3f})" if many else ""
            lines.append(
                f"| {stratum} ({label}) | {n:.{1 if many else 0}f} | {name} | {acc.mean():.3f} | {conf.mean():.3f} "
                f"| {gap.mean():.3f}{spread} |"
            )
    return "\n".join(lines)


def halves_table(rows: list[dict[str, Any]]) -> str:
    names = [m["method"] for m in rows[0]["methods"]]
    head = "| split | " + " | ".join(f"{n}: acc / conf / gap" for n in names) + " |"
    lines = [head, "|---|" + "---|" * len(names)]
    for r in rows:
        cells = [
            f"{m['accuracy']:.3f} / {m['confidence']:.3f} / {m['gap']:.3f}" for m in r["methods"]
        ]
        lines.append(f"| {r['split']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| method | accuracy mean (min-max) | mean confidence mean | gap mean (min-max) |",
    ]
    lines.append("|---|---|---|---|")
    for name in names:
        acc = np.array([_m(r, name)["accuracy"] for r in rows])
        conf = np.array([_m(r, name)["confidence"] for r in rows])
        gap = np.array([_m(r, name)["gap"] for r in rows])
        lines.append(
            f"| {name} | {acc.mean():.3f} ({acc.min():.3f}-{acc.max():.3f}) | {conf.mean():.3f} "
            f"| {gap.mean():.3f} ({gap.min():.3f}-{gap.max():.3f}) |"
        )
    lines += ["", "By stratum, over the seeds:", "", strata_table(rows), ""]
    lines += [_notes(r) for r in rows]
    return "\n".join(lines)


def shift_table(rows: list[dict[str, Any]]) -> str:
    head = "| split (calibration -> test) | n | method | accuracy | mean confidence | gap | ECE |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for r in rows:
        for m in r["methods"]:
            lines.append(
                f"| {r['split']} | {r['cases']} | {m['method']} | {m['accuracy']:.3f} | "
                f"{m['confidence']:.3f} | {m['gap']:.3f} | {m['ece']:.3f} |"
            )
    for r in rows:
        lines += ["", f"{r['split']}, by stratum:", "", strata_table([r])]
    lines.append("")
    lines += [_notes(r) for r in rows]
    return "\n".join(lines)


def verdict(halves: list[dict[str, Any]], shifts: list[dict[str, Any]]) -> list[str]:
    notes = []
    for what, rows in (("random halves", halves), ("length shifts", shifts)):
        if not rows:
            continue
        gaps = [_m(r, GUARDED)["gap"] for r in rows]
        worst = max(range(len(rows)), key=lambda i: gaps[i])
        ok = all(g <= 0.10 for g in gaps)
        notes.append(
            f"{what}: guarded gap <= 0.10 on every test part (largest {gaps[worst]:.3f}, "
            f"{rows[worst]['split']}): {'met' if ok else 'NOT met'}"
        )
        short = [
            r["split"]
            for r in rows
            if _m(r, GUARDED)["accuracy"] < _m(r, MAJORITY)["accuracy"] - 1e-12
        ]
        deltas = [_m(r, GUARDED)["accuracy"] - _m(r, MAJORITY)["accuracy"] for r in rows]
        notes.append(
            f"{what}: guarded accuracy >= majority on every test part (guarded - majority "
            f"{min(deltas):+.3f} to {max(deltas):+.3f}): "
            + ("met" if not short else f"NOT met ({', '.join(short)})")
        )
        modes: Counter[str] = Counter()
        for r in rows:
            modes.update(r["modes"])
        notes.append(
            f"{what}: guarded modes {dict(modes)}; tied pluralities {sum(r['ties'] for r in rows)}, "
            f"right: majority (smallest answer) {sum(r['ties_majority_right'] for r in rows)}, "
            f"guarded (posterior) {sum(r['ties_guarded_right'] for r in rows)}"
        )
    return notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument(
        "--seeds", type=at_least(0), default=10, help="random halves (seeds 0..N-1)"
    )
    parser.add_argument("--beta", type=non_negative, default=1.5)
    parser.add_argument("--limit", type=at_least(4), default=None, help="only the first N problems")
    parser.add_argument(
        "--json", type=output_file, default=None, help="also write the figures as JSON"
    )
    args = parser.parse_args(argv)
    root = require_data(args.data, ["zeroeval-gsm"]) / "zeroeval-gsm"
    cases = load_cases(root, args.limit)
    halves = [
        evaluate(name, [cases[i] for i in cal], [cases[i] for i in test], args.beta)
        for name, cal, test in random_halves(cases, args.seeds)
    ]
    shifts = [
        evaluate(name, [cases[i] for i in cal], [cases[i] for i in test], args.beta)
        for name, cal, test in length_shifts(cases)
    ]
    out = sys.stdout
    out.write(f"ZeroEval GSM8K, {len(cases)} problems, 9 solver models, beta {args.beta:g}\n\n")
    if halves:
        out.write(f"Random halves (calibrate on one, test on the other), {len(halves)} seeds\n\n")
        out.write(halves_table(halves) + "\n\n")
    out.write("Length shifts (problems split at the median question length)\n\n")
    out.write(shift_table(shifts) + "\n\n" + "\n".join(verdict(halves, shifts)) + "\n")
    if args.json:
        args.json.write_text(json.dumps({"halves": halves, "shifts": shifts}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
