"""Reproduction B of the correlated-hallucination study on real judge panels: LLMBar, leave-one-subset-out.

Six LLM judges (GPT-4, ChatGPT, ChatGPT-0301: family OpenAI; PaLM2: Google; LLaMA2:
Meta; Falcon: TII) chose the better of two outputs on LLMBar's Natural and adversarial
subsets. The judges retrieve nothing: every vote is ``evidence_present = False`` with a
``parametric:<family>`` source, so the guard's invariant 1 can never hold here and it
falls back (majority, or the verifier the calibration measured).

For every split, the guard is calibrated on all subsets but one and tested on the one
left out (no gold at decision time). Compared on the test subset:

(i)   unweighted majority, confidence = vote share (ties to the smallest label);
(ii)  consensus weighting ``w = exp(beta * agreement)`` (beta 1.5, the study's default),
      confidence = weight share;
(iii) the guarded aggregator (:func:`dissensus.guard.guard_cases`) with the split's
      calibration; shown also with the recommended verifier turned off (majority
      answer, the guard's posterior confidence), to separate the two effects.

Target: the guard's calibration gap ``|mean confidence - accuracy|`` <= 0.10 on every
adversarial subset, and its accuracy on Natural no lower than majority's.

Usage::

    python evaluation/guard_llmbar.py [--data DIR] [--strategy CoT] [--beta 1.5] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import guard_row as _row
from _common import non_negative, output_file, require_data

from dissensus.convert.llmbar import iter_llmbar_votes
from dissensus.guard import (
    GuardThresholds,
    consensus_weighted_vote,
    fit_reliability,
    guard_cases,
    majority_vote,
)
from dissensus.guard.encoding import encode_cases
from dissensus.types import VoteCase

REPO = Path(__file__).resolve().parent.parent


def evaluate(cases: list[VoteCase], beta: float) -> list[dict[str, Any]]:
    subsets = sorted({str(c.meta["subset"]) for c in cases})
    out: list[dict[str, Any]] = []
    for test in subsets:
        train = [c for c in cases if c.meta["subset"] != test]
        held = [c for c in cases if c.meta["subset"] == test]
        cal = fit_reliability(train)
        enc = encode_cases(held, classes=cal.labels)
        k = len(enc.classes)
        mv, mp = majority_vote(enc.labels, k)
        cw, cp = consensus_weighted_vote(enc.labels, k, beta)
        decisions = guard_cases([c.model_copy(update={"gold": None}) for c in held], cal, beta=beta)
        g_hit = np.array([d.answer == c.gold for d, c in zip(decisions, held, strict=True)])
        g_conf = np.array([d.confidence for d in decisions])
        plain = guard_cases(
            [c.model_copy(update={"gold": None}) for c in held],
            cal,
            beta=beta,
            settings=GuardThresholds(use_recommended_verifier=False),
        )
        p_hit = np.array([d.answer == c.gold for d, c in zip(plain, held, strict=True)])
        p_conf = np.array([d.confidence for d in plain])
        out.append(
            {
                "test": test,
                "calibrated_on": [s for s in subsets if s != test],
                "cases": len(held),
                "beta_star": cal.beta_star,
                "verifier": cal.verifier.agent if cal.verifier else None,
                "calibration_n_eff": cal.n_eff,
                "mean_n_eff": float(np.mean([d.n_eff for d in decisions])),
                "modes": dict(Counter(d.mode for d in decisions)),
                "refusals": dict(
                    Counter(f"invariant {d.refusal.invariant}" for d in decisions if d.refusal)
                ),
                "methods": [
                    _row("majority", mp.max(axis=1), mv == enc.gold),
                    _row(f"consensus(beta={beta:g})", cp.max(axis=1), cw == enc.gold),
                    _row("guarded", g_conf, g_hit),
                    _row("guarded, verifier off", p_conf, p_hit),
                ],
            }
        )
    return out


def table(rows: list[dict[str, Any]]) -> str:
    head = "| test subset (calibrated on the others) | n | method | accuracy | mean confidence | gap | ECE |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for r in rows:
        for m in r["methods"]:
            lines.append(
                f"| {r['test']} | {r['cases']} | {m['method']} | {m['accuracy']:.3f} | {m['confidence']:.3f} | {m['gap']:.3f} | {m['ece']:.3f} |"
            )
    lines.append("")
    for r in rows:
        lines.append(
            f"- {r['test']}: calibrated on {', '.join(r['calibrated_on'])}; beta* = {r['beta_star']}; "
            f"verifier = {r['verifier']}; panel n_eff (calibration) = {r['calibration_n_eff']:.2f}; "
            f"mean case n_eff = {r['mean_n_eff']:.2f}; modes = {r['modes']}; refusals = {r['refusals']}"
        )
    return "\n".join(lines)


def verdict(rows: list[dict[str, Any]]) -> list[str]:
    notes = []
    for r in rows:
        g = next(m for m in r["methods"] if m["method"] == "guarded")
        maj = next(m for m in r["methods"] if m["method"] == "majority")
        if r["test"].startswith("Adversarial"):
            ok = g["gap"] <= 0.10
            notes.append(
                f"{r['test']}: guarded gap {g['gap']:.3f} <= 0.10: {'met' if ok else 'NOT met'}"
            )
        else:
            ok = g["accuracy"] >= maj["accuracy"]
            notes.append(
                f"{r['test']}: guarded accuracy {g['accuracy']:.3f} >= majority {maj['accuracy']:.3f}: {'met' if ok else 'NOT met'}"
            )
    return notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--strategy", default="CoT", choices=["CoT", "Vanilla", "Swap_CoT"])
    parser.add_argument("--beta", type=non_negative, default=1.5)
    parser.add_argument(
        "--json", type=output_file, default=None, help="also write the figures as JSON"
    )
    args = parser.parse_args(argv)
    root = require_data(args.data, ["llmbar"]) / "llmbar"
    cases = list(iter_llmbar_votes(root, args.strategy))
    if len({c.meta["subset"] for c in cases}) < 2:
        sys.stderr.write("leave-one-subset-out needs at least two subsets\n")
        return 2
    rows = evaluate(cases, args.beta)
    sys.stdout.write(f"LLMBar {args.strategy}, {len(cases)} cases, leave-one-subset-out\n\n")
    sys.stdout.write(table(rows) + "\n\n" + "\n".join(verdict(rows)) + "\n")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
